"""Fixtures of the input-form tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def datasets():
    # a submodule, so that the tests/datasets folder (a namespace package on the test path when
    # the library is absent) is never taken for it
    pytest.importorskip("datasets.arrow_dataset", reason="the datasets library is not installed")
    import datasets

    return datasets
