"""Fixtures of the records tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def demo_audit(small_demo):
    """The session's demo audit (``small_demo``); a test that writes into its folder works on
    a copy."""
    return small_demo
