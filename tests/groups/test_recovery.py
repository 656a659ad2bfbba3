"""Identity recovery (METHODS §3.4): bytes first, then NCC; per-class matcher check."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitscope.errors import InputError
from splitscope.groups.recovery import recover_identity


def _setup(seed=0):
    rng = np.random.default_rng(seed)
    n_up = 30
    up_thumbs = rng.integers(0, 256, (n_up, 32, 32)).astype(np.uint8)
    upstream = pd.DataFrame({
        "row": np.arange(n_up), "path": [f"up/{i}.jpg" for i in range(n_up)],
        "sha256": [f"u{i}" for i in range(n_up)],
        "group": pd.array([f"v{i // 10}" for i in range(n_up)], dtype="string"),
        "frame": pd.array(np.arange(n_up) * 3, dtype="Int64"),
        "label": ["normal"] * 20 + ["polyp"] * 10,
    })
    # query: 0-2 byte copies, 3-4 brightness-changed copies (NCC), 5 unrelated, 6 a "worm"
    # (a class absent upstream) that is unrelated
    q_thumbs = np.stack([up_thumbs[0], up_thumbs[11], up_thumbs[25],
                         np.clip(up_thumbs[4].astype(int) // 2 + 60, 0, 255).astype(np.uint8),
                         up_thumbs[17],
                         rng.integers(0, 256, (32, 32)).astype(np.uint8),
                         rng.integers(0, 256, (32, 32)).astype(np.uint8)])
    query = pd.DataFrame({
        "row": np.arange(100, 107), "path": [f"q/{i}.jpg" for i in range(7)],
        "sha256": ["u0", "u11", "u25", "q3", "q4", "q5", "q6"],
        "label": ["normal", "normal", "polyp", "normal", "polyp", "normal", "worms"],
    })
    return query, upstream, q_thumbs, up_thumbs


def test_bytes_then_ncc_inherit_group_and_frame():
    query, upstream, qt, ut = _setup()
    r = recover_identity(query, upstream, query_thumbs=qt, upstream_thumbs=ut, tau=0.98)
    m = r.mapping.set_index("row")
    assert m.loc[100, "method"] == "bytes" and m.loc[100, "recovered_group"] == "v0"
    assert m.loc[101, "recovered_group"] == "v1" and m.loc[101, "recovered_frame"] == 33
    assert m.loc[103, "method"] == "ncc" and m.loc[103, "upstream_row"] == 4
    assert m.loc[103, "rho"] > 0.99
    assert m.loc[104, "method"] == "ncc" and m.loc[104, "recovered_group"] == "v1"
    assert m.loc[105, "method"] == "none" and pd.isna(m.loc[105, "recovered_group"])
    s = r.summary
    assert (s["matched_bytes"], s["matched_ncc"], s["unmatched"]) == (3, 2, 2)
    # 'worms' cannot occur upstream and matched nothing: the matcher check passes
    assert s["impossible_classes"] == ["worms"] and s["matcher_check"] == "pass"
    by = r.by_class.set_index("label")
    assert by.loc["normal", "matched"] == 3 and by.loc["polyp", "matched_ncc"] == 1


def test_matcher_check_fails_when_impossible_class_matches():
    query, upstream, qt, ut = _setup()
    query.loc[0, "label"] = "worms"  # a byte copy filed under a class absent upstream
    r = recover_identity(query, upstream, query_thumbs=qt, upstream_thumbs=ut)
    assert r.summary["matcher_check"] == "fail"
    assert r.by_class.set_index("label").loc["worms", "check"] == "fail"


def test_bytes_only_without_thumbnails_and_ambiguity():
    query, upstream, _, _ = _setup()
    upstream.loc[29, "sha256"] = "u0"  # same bytes in two videos
    r = recover_identity(query, upstream)
    assert r.summary["rules"] == ["bytes (sha256)"] and r.summary["matched"] == 3
    assert r.mapping.set_index("row").loc[100, "ambiguous"]


def test_missing_upstream_group_column():
    query, upstream, _, _ = _setup()
    with pytest.raises(InputError, match="group"):
        recover_identity(query, upstream.drop(columns="group"))
