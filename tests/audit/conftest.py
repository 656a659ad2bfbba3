"""One small demo audit for every test in this folder that only reads a finished audit."""

from __future__ import annotations

import pytest

from splitscope.workflows.demo import run_demo


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory):
    """The demo (70 train and 45 test images, every kind of planted leakage) audited once."""
    result, _ = run_demo(tmp_path_factory.mktemp("small-demo") / "demo", workers=1,
                         progress=False, n_train=70, n_test=45)
    return result
