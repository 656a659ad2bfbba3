"""Group-disjoint re-splits (METHODS §3.5)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitscope.errors import InputError
from splitscope.groups.resplit import class_balance, group_disjoint_split, group_kfold


def _rows(n_groups=200, seed=0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, n_groups)
    group = np.repeat([f"g{i}" for i in range(n_groups)], sizes)
    # each group mostly one class, classes imbalanced
    gl = rng.choice(["a", "b", "c"], n_groups, p=[0.6, 0.3, 0.1])
    label = np.repeat(gl, sizes)
    n = label.size
    return pd.DataFrame({"row": np.arange(n), "path": [f"r{i}" for i in range(n)],
                         "group": pd.array(group, dtype="string"),
                         "label": pd.array(label, dtype="string")})


def test_split_is_group_disjoint_stratified_and_seeded():
    rows = _rows()
    s = group_disjoint_split(rows, (0.7, 0.15, 0.15), seed=1)
    assert s.groupby("group")["part"].nunique().max() == 1
    assert len(s) == len(rows) and (s["row"].to_numpy() == rows["row"].to_numpy()).all()
    bal = class_balance(s).pivot(index="label", columns="part", values="share_of_class")
    assert np.allclose(bal["train"], 0.7, atol=0.06)
    assert np.allclose(bal["test"], 0.15, atol=0.06)
    again = group_disjoint_split(rows, (0.7, 0.15, 0.15), seed=1)
    assert (again["part"] == s["part"]).all()
    other = group_disjoint_split(rows, (0.7, 0.15, 0.15), seed=2)
    assert (other["part"] != s["part"]).any()


def test_kfold_group_disjoint_and_balanced():
    rows = _rows(300)
    f = group_kfold(rows, 5, seed=0)
    assert f.groupby("group")["fold"].nunique().max() == 1
    sizes = f["fold"].value_counts()
    assert sizes.index.nunique() == 5
    assert sizes.max() / sizes.min() < 1.3


def test_ungrouped_rows_become_groups_of_one():
    rows = _rows(50)
    rows.loc[rows.index[:20], "group"] = pd.NA
    s = group_disjoint_split(rows, seed=0)
    assert s.attrs["ungrouped_rows"] == 20
    assert s["part"].notna().all()


def test_bad_inputs():
    rows = _rows(50)
    with pytest.raises(InputError, match="sum"):
        group_disjoint_split(rows, (0.5, 0.2))
    with pytest.raises(InputError, match="label"):
        bad = rows.copy()
        bad.loc[0, "label"] = pd.NA
        group_disjoint_split(bad)
    with pytest.raises(InputError, match="group"):
        group_kfold(rows.head(3).assign(group="g"), 5)
