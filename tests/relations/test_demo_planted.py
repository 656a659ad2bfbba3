"""The demo benchmark: every planted relation of ``planted.csv`` is found by the predicates
that should find it, and missed by those the method predicts will miss it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitscope.relations.duplicates import audit_duplicates
from splitscope.relations.options import SearchOptions

_MAP = {"sha256": "sha256", "basename": "basename", "pixel_reencode": "pixel_xxh128",
        "ncc": "ncc_nearest", "hash_screen": "hash_screen", "hash_joint": "hash_joint",
        "hash_sum": "hash_sum", "hash_exact_phash": "hash_exact_phash",
        "dihedral_ncc": "ncc_nearest_dihedral", "dihedral_hash": "hash_joint_dihedral"}


@pytest.fixture(scope="module")
def demo_result(tmp_path_factory):
    from splitscope.datasets import make_demo
    from splitscope.features.scanning import scan

    root = make_demo(tmp_path_factory.mktemp("demo") / "demo", seed=0)
    s = scan(root, tmp_path_factory.mktemp("demo-ws"), progress=False)
    planted = pd.read_csv(root / "planted.csv", keep_default_na=False)
    return planted, audit_duplicates(s, ["test->train"], SearchOptions(dihedral=True, transforms=0))


@pytest.mark.slow
def test_demo_planted_relations(demo_result):
    planted, result = demo_result
    flags = result.tables["query_flags"].set_index("path")
    groups = result.tables["identity_groups"]
    checked = 0
    for _, p in planted[planted["query_split"] == "test"].iterrows():
        f = flags.loc[p["query_path"]]
        for pred in p["expected"].split(";"):
            if pred in _MAP:
                assert bool(f[_MAP[pred]]), f"{p['kind']} {p['query_path']}: {pred} missed"
                checked += 1
            if pred == "label_conflict":
                g = groups[groups["query_paths"].str.contains(p["query_path"], regex=False)]
                assert (g["label_relation"] == "disjoint").all() and len(g) == 1
        for pred in p["missed_by"].split(";"):
            if pred not in _MAP:
                continue
            assert not bool(f[_MAP[pred]]) if pd.notna(f[_MAP[pred]]) else True, \
                f"{p['kind']} {p['query_path']}: {pred} should not flag"
            checked += 1
        if "ncc" in p["expected"].split(";"):
            ref = result.tables["pairs"]
            ref = ref[(ref["path"] == p["query_path"]) & ref["counterpart_rules"].str.contains(
                "nearest")]
            assert ref["reference_path"].tolist() == [p["reference_path"]]
    assert checked > 100
    within = planted[planted["kind"] == "within_split"].iloc[0]
    copies = result.tables["within_copies"]
    assert copies["paths"].str.contains(within["query_path"], regex=False).any()
    kinds = planted.set_index("query_path")["kind"]
    dihedral_only = flags.index[flags["ncc_nearest_dihedral_only"].astype(bool)]
    assert sorted(kinds.reindex(dihedral_only)) == ["flip", "flip", "rotate90", "rotate90"]
    assert np.isfinite(result.tables["pairs"]["ssim"]).all()
