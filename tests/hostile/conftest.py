"""Every hostile-input test runs under a wall-clock alarm: a hang fails the test, it never
blocks the suite (pytest-timeout may be absent)."""

from __future__ import annotations

import signal

import pytest

LIMIT_S = 120


@pytest.fixture(autouse=True)
def alarm():
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def fire(signum, frame):
        raise TimeoutError(f"hostile-input test still running after {LIMIT_S} s (a hang)")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
