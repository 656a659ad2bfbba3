"""Shared fixtures. Real-data tests use ``shared_data`` and skip when ../shared/data is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_DEFAULT_SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SHARED_DATA = Path(os.environ.get("SPLITSCOPE_SHARED_DATA", _DEFAULT_SHARED))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (or ``$SPLITSCOPE_SHARED_DATA``); skips the test when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not present at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory):
    """The demo (70 train and 45 test images, every kind of planted leakage) audited once, for
    every test that only reads a finished audit."""
    from splitscope.workflows.demo import run_demo

    result, _ = run_demo(tmp_path_factory.mktemp("small-demo") / "demo", workers=1,
                         progress=False, n_train=70, n_test=45)
    return result
