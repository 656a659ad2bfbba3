"""Rows that name one file are measured once (relations.near_duplicate.near_duplicates): the
result equals measuring every row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from relations_helpers import mini_scan

from splitscope.relations.boundary_relations import resolve_boundaries
from splitscope.relations.near_duplicate import (
    near_duplicates,
    near_duplicates_rows,
    representatives,
)
from splitscope.relations.options import SearchOptions


@pytest.fixture(scope="module")
def repeated_scan(planted_root, tmp_path_factory):
    """A list release naming the planted release's files many times each, on both sides."""
    files = sorted(p.relative_to(planted_root).as_posix() for p in planted_root.rglob("*.png"))
    rng = np.random.default_rng(3)
    picks = rng.integers(len(files), size=400)
    listed = pd.DataFrame({
        "path": [files[i] for i in picks],
        "split": np.where(rng.random(len(picks)) < 0.3, "test", "train"),
        "label": [files[i].split("/")[1] for i in picks]})
    path = planted_root / "repeated.csv"
    listed.to_csv(path, index=False)
    return mini_scan(path)


def test_representative_is_each_files_first_row():
    side_rows = pd.DataFrame({"row": [2, 5, 7, 9, 11], "file": ["a", "b", "a", pd.NA, "b"],
                              "path": ["x/a", "b", "x/a", "c", "b"]})
    assert representatives(side_rows).tolist() == [2, 5, 2, 9, 5]


@pytest.mark.slow
@pytest.mark.parametrize("cap", [1, 5])
def test_distinct_files_equal_every_row(repeated_scan, cap):
    rows = repeated_scan.rows()
    b = resolve_boundaries(repeated_scan.manifest, ["test->train"])[0]
    fast = near_duplicates(rows, repeated_scan.thumbs, b, SearchOptions(max_pairs_per_query=cap))
    full = near_duplicates_rows(rows, repeated_scan.thumbs, b,
                                SearchOptions(max_pairs_per_query=cap))
    assert fast.notes["distinct_files"]["query_files"] < fast.notes["distinct_files"]["query_rows"]
    pd.testing.assert_frame_equal(fast.flags, full.flags)
    pd.testing.assert_frame_equal(fast.pairs, full.pairs)
    pd.testing.assert_frame_equal(fast.sweep, full.sweep)
    assert fast.assessed == full.assessed
    assert fast.notes["pairs"] == full.notes["pairs"]
    assert fast.flags["ncc_nearest"].fillna(False).any()  # the comparison has findings
    assert full.notes["pairs"]["query_rows_capped"] > 0
