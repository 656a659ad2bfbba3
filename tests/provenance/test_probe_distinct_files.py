"""Rows that share one file count once in the probes (METHODS §4.7): a release whose files
are listed several times gives the records of the release listing each once, and its row
tables list every row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_fit_cap import _table

from splitscope.provenance.checks import audit_provenance


def _listed_twice(t: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    again = t.iloc[np.sort(rng.choice(len(t), size=len(t) // 2, replace=False))].copy()
    again["row"] = np.arange(len(t), len(t) + len(again))
    return pd.concat([t, again], ignore_index=True)


@pytest.mark.slow
def test_repeated_files_count_once_and_every_row_is_listed():
    t = _table().assign(file=lambda d: d["path"])
    dup = _listed_twice(t)
    opts = {"n_resamples": 200, "importance_repeats": 1, "partition": False}
    once, twice = audit_provenance(t, **opts), audit_provenance(dup, **opts)
    a = {r.id: r for r in once.records}
    b = {r.id: r for r in twice.records}
    assert a.keys() == b.keys()
    probes = [k for k in a if "_probe." in k]
    assert probes
    for k in probes:
        assert b[k].estimate == a[k].estimate and b[k].denominator == a[k].denominator
        assert b[k].uncertainty.low == a[k].uncertainty.low
        assert b[k].details["distinct_files"]["rows"] == len(dup)
        assert "distinct_files" not in (a[k].details or {})
    for name, table in twice.tables.items():
        if name.endswith("_within_pool") or "_cross_" in name:
            first = once.tables[name].set_index("path")
            # every row naming a file that was scored, once each
            assert sorted(table["row"]) == sorted(dup.loc[dup["path"].isin(first.index), "row"])
            got = table.set_index("row")["predicted"]
            want = first["predicted"].reindex(dup.set_index("row").loc[got.index, "path"])
            assert (got.to_numpy() == want.to_numpy()).all()


def test_a_probe_that_memorises_copies_scores_chance_once_counted_by_file():
    """Copies of one case in training and held-out folds score memory, not a shortcut."""
    rng = np.random.default_rng(5)
    n = 40
    t = pd.DataFrame({
        "row": np.arange(n), "path": [f"f{i}.jpg" for i in range(n)],
        "label": pd.array(rng.choice(["a", "b"], n), dtype="string"),
        "split": pd.array(["train"] * n, dtype="string"),
        "width": pd.array(rng.integers(100, 4000, n), dtype="Int64")})  # no label signal
    t["file"] = t["path"]
    many = t.iloc[np.repeat(np.arange(n), 25)].reset_index(drop=True)
    many["row"] = np.arange(len(many))
    opts = {"n_resamples": 200, "importance_repeats": 1, "partition": False,
            "image_stats": False}
    rec = {r.id: r for r in audit_provenance(many, **opts).records}
    wp = rec["provenance.header_probe.within_pool"]
    assert wp.denominator == n
    assert wp.uncertainty.low < 0.5 + 1e-9  # no better than chance
