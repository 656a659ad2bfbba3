"""Group overlap and frame gaps (METHODS §3.2, §3.3) against hand-computed and brute-force
references."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitscope.boundary import boundary
from splitscope.errors import InputError
from splitscope.groups.overlap import (
    frame_gap_summary,
    frame_gaps,
    group_overlap,
    group_resampling_interval,
    rows_per_group,
)


def _manifest(split, group, frame=None, label=None):
    n = len(split)
    m = pd.DataFrame({
        "row": np.arange(n, dtype=np.int64),
        "path": pd.array([f"f{i}.jpg" for i in range(n)], dtype="string"),
        "split": pd.array(split, dtype="string"),
        "group": pd.array(group, dtype="string"),
        "frame": pd.array(frame if frame is not None else [pd.NA] * n, dtype="Int64"),
        "label": pd.array(label if label is not None else ["a"] * n, dtype="string"),
    })
    return m


def test_overlap_hand_counted():
    m = _manifest(
        ["train", "train", "train", "test", "test", "test", "test", "test"],
        ["p1", "p2", None, "p1", "p1", "p3", None, "p2"],
        label=["x", "y", "x", "x", "y", "x", "y", "y"],
    )
    o = group_overlap(m, boundary(m, "test", "train"))
    s = o.summary
    assert s["query_rows"] == 5
    assert s["traceable_query_rows"] == 4  # one row without a group
    assert s["affected_query_rows"] == 3  # p1, p1, p2
    assert s["rate"] == pytest.approx(3 / 4)
    assert s["coverage"] == pytest.approx(4 / 5)
    assert s["shared_groups"] == 2 and s["query_groups"] == 3 and s["reference_groups"] == 2
    assert s["affected_reference_rows"] == 2 and s["traceable_reference_rows"] == 2
    assert o.rows["affected"].tolist() == [True, True, False, False, True]
    assert o.rows["reference_rows_same_group"].tolist() == [1, 1, 0, 0, 1]
    by_label = o.by_label.set_index("label")
    assert by_label.loc["y", "affected"] == 2 and by_label.loc["y", "traceable"] == 2
    assert by_label.loc["x", "rate"] == pytest.approx(1 / 2)
    g = rows_per_group(m, boundary(m, "test", "train")).set_index("group")
    assert g.loc["p1", "query_rows"] == 2 and g.loc["p1", "reference_rows"] == 1
    assert not g.loc["p3", "shared"]


def test_row_on_both_sides_is_not_its_own_counterpart():
    m = _manifest(["train", "test", "test"], ["a", "b", "a"])
    b = boundary(m, "*", "train")  # row 0 is on both sides
    o = group_overlap(m, b)
    # row 0 (group a) is affected through row 2? no: row 2 is not a reference row
    assert o.rows.set_index("row").loc[0, "affected"] == np.False_
    assert o.rows.set_index("row").loc[2, "affected"] == np.True_


def test_no_traceable_rows_gives_none_rate():
    m = _manifest(["train", "test"], [None, None])
    o = group_overlap(m, boundary(m, "test", "train"))
    assert o.summary["rate"] is None and o.summary["coverage"] == 0


def test_missing_group_column_is_input_error():
    m = _manifest(["train", "test"], ["a", "a"]).drop(columns="group")
    with pytest.raises(InputError, match="group"):
        group_overlap(m, boundary(m, "test", "train"))


def _brute_gaps(m, q_rows, r_rows):
    out = {}
    for q in q_rows:
        g, f = m.loc[q, "group"], m.loc[q, "frame"]
        if pd.isna(g) or pd.isna(f):
            out[q] = None
            continue
        cands = [(abs(int(f) - int(m.loc[r, "frame"])), int(m.loc[r, "frame"]), r) for r in r_rows
                 if r != q and not pd.isna(m.loc[r, "group"]) and m.loc[r, "group"] == g
                 and not pd.isna(m.loc[r, "frame"])]
        out[q] = min(cands)[0] if cands else None
    return out


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_frame_gaps_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 300
    split = rng.choice(["train", "test"], n)
    group = rng.choice(["g0", "g1", "g2", "g3", None], n)
    frame = rng.integers(0, 60, n).astype(object)
    frame[rng.random(n) < 0.05] = pd.NA
    m = _manifest(list(split), list(group), list(frame))
    b = boundary(m, "test", "train")
    gaps = frame_gaps(m, b).set_index("row")
    ref = _brute_gaps(m, b.query.rows, b.reference.rows)
    for q, want in ref.items():
        got = gaps.loc[q, "gap"]
        assert (pd.isna(got) and want is None) or got == want, (q, got, want)
    # the nearest row reported really is at that gap and in the same group
    has = gaps["gap"].notna()
    near = gaps.loc[has, "nearest_reference_row"].astype(int).to_numpy()
    assert (m.loc[near, "group"].to_numpy() == gaps.loc[has, "group"].to_numpy()).all()
    assert (np.abs(m.loc[near, "frame"].astype(int).to_numpy()
                   - gaps.loc[has, "frame"].astype(int).to_numpy())
            == gaps.loc[has, "gap"].astype(int).to_numpy()).all()


def test_frame_gaps_overlapping_populations_exclude_self():
    # every row on both sides: the nearest row is never the row itself
    m = _manifest(["train"] * 4, ["a", "a", "a", "b"], [10, 10, 13, 5])
    gaps = frame_gaps(m, boundary(m, "*", "train")).set_index("row")
    assert gaps.loc[0, "gap"] == 0 and gaps.loc[0, "nearest_reference_row"] == 1
    assert gaps.loc[1, "gap"] == 0 and gaps.loc[1, "nearest_reference_row"] == 0
    assert gaps.loc[2, "gap"] == 3
    assert pd.isna(gaps.loc[3, "gap"])  # alone in its group


def test_frame_gap_summary_quartiles_and_histogram():
    gaps = pd.DataFrame({"gap": pd.array([0, 1, 3, 7, 600, pd.NA], dtype="Int64")})
    s = frame_gap_summary(gaps)
    assert s["rows_with_gap"] == 5 and s["rows_without_gap"] == 1
    assert s["median"] == 3 and s["q1"] == 1 and s["q3"] == 7
    assert sum(s["histogram"]["counts"]) == 5
    assert s["histogram"]["counts"][0] == 1  # [0, 1)
    assert s["histogram"]["counts"][-3] == 1  # [500, 1000)


def test_group_resampling_interval_brackets_rate_and_is_seeded():
    m = _manifest(["train"] * 5 + ["test"] * 10,
                  ["a", "b", "c", "d", "e"] + ["a", "a", "b", "x", "y", "z", "z", "c", "w", "v"])
    o = group_overlap(m, boundary(m, "test", "train"))
    s1 = group_resampling_interval(o.rows, n_resamples=500, seed=3)
    s2 = group_resampling_interval(o.rows, n_resamples=500, seed=3)
    assert s1 == s2
    assert s1["low"] <= o.summary["rate"] <= s1["high"]
    assert s1["groups"] == 8
