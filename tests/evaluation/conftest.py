"""Fixtures of the evaluation tests."""

from __future__ import annotations

import pytest
from eval_helpers import make_truth


@pytest.fixture
def truth_file(tmp_path):
    table = make_truth()
    path = tmp_path / "truth.xlsx"
    table.to_excel(path, index=False)
    return path, table
