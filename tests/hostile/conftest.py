"""Every hostile-input test runs under a wall-clock alarm: a hang fails the test, it never
blocks the suite (pytest-timeout may be absent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

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


def _drop_capabilities() -> None:
    """In the child before exec: empty the capability bounding set, so that a root process
    loses every capability at exec (no CAP_DAC_OVERRIDE: permission bits apply to it)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP


def _unprivileged(script: str, *args: str) -> subprocess.CompletedProcess:
    """Run a Python script where permission bits apply: as root with its capabilities
    dropped (the suite may run as root, which reads and writes whatever the bits say)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    drop = _drop_capabilities if os.geteuid() == 0 else None
    return subprocess.run([sys.executable, "-c", script, *args], check=False,
                          capture_output=True, text=True, env=env, timeout=100,
                          preexec_fn=drop)


@pytest.fixture()
def unprivileged(tmp_path):
    """Skips unless a child process really is refused a folder with mode 000."""
    if not sys.platform.startswith("linux") or not hasattr(os, "geteuid"):
        pytest.skip("permission checks by dropped capabilities need Linux")
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0)
    try:
        done = _unprivileged("import os, sys; os.listdir(sys.argv[1])", str(probe))
    finally:
        probe.chmod(0o755)
    if done.returncode == 0:
        pytest.skip("this machine lets the test process read a mode-000 folder even with "
                    "its capabilities dropped; cannot make an unreadable folder here")
    return _unprivileged
