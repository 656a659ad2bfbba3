"""Same-modality comparison pairs (METHODS §2.6) and transform sensitivity (§2.7)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from relations_helpers import mini_scan, smooth_image

from splitscope.errors import InputError
from splitscope.relations.controls import comparison_pairs, median_difference
from splitscope.relations.duplicates import audit_duplicates
from splitscope.relations.options import SearchOptions
from splitscope.relations.transforms import TRANSFORMS, transform_sensitivity


def test_comparison_pairs_pick_adjacent_and_distant():
    rows = pd.DataFrame({"row": range(7), "group": ["v1"] * 5 + ["v2"] * 2,
                         "frame": [10, 11, 14, 700, 900, 1, 2]})
    flagged = pd.DataFrame({"query_row": [0], "reference_row": [1]})
    t = comparison_pairs(rows, flagged).set_index("kind")
    assert t.loc["flagged", "gap"] == 1
    # adjacent: smallest gap among unflagged same-group rows (row 2, gap 4), never row 1
    assert t.loc["adjacent", "reference_row"] == 2 and t.loc["adjacent", "gap"] == 4
    assert t.loc["distant", "reference_row"] == 3 and t.loc["distant", "gap"] == 690
    with pytest.raises(InputError, match="frame"):
        comparison_pairs(rows.drop(columns="frame"), flagged)


def test_median_difference_with_group_resampling():
    rng = np.random.default_rng(0)
    parts = []
    for g in range(8):
        parts.append(pd.DataFrame({"group": f"g{g}", "kind": "flagged",
                                   "ssim": 0.95 + rng.normal(0, 0.01, 3)}))
        parts.append(pd.DataFrame({"group": f"g{g}", "kind": "adjacent",
                                   "ssim": 0.60 + rng.normal(0, 0.05, 3)}))
    values = pd.concat(parts)
    res = median_difference(values, measure="ssim", control="adjacent", n_boot=300, seed=1)
    assert res["status"] == "completed" and res["groups"] == 8
    assert res["interval"]["low"] < res["difference"] < res["interval"]["high"]
    assert 0.25 < res["difference"] < 0.45
    none = median_difference(values, measure="ssim", control="distant")
    assert none["status"] == "not assessed" and "distant" in none["reason"]


def test_comparison_pairs_in_the_audit(tmp_path):
    rng = np.random.default_rng(2)
    base = smooth_image(rng)
    entries = []
    for frame in (0, 1, 2, 600):  # one video, slowly changing, plus a distant frame
        arr = np.clip(base.astype(int) + frame // 3 + rng.integers(-90, 90, base.shape),
                      0, 255).astype(np.uint8) if frame else base
        if frame == 600:
            arr = smooth_image(rng)
        name = f"v1_{frame}.png"
        Image.fromarray(arr).save(tmp_path / name)
        entries.append({"path": name, "split": "train", "group": "v1", "frame": frame})
    Image.fromarray(base).save(tmp_path / "test_v1_0.png", compress_level=1)
    entries.append({"path": "test_v1_0.png", "split": "test", "group": "v1", "frame": 0})
    pd.DataFrame(entries).to_csv(tmp_path / "list.csv", index=False)
    scan = mini_scan(tmp_path / "list.csv")
    result = audit_duplicates(scan, ["test->train"], SearchOptions(transforms=0))
    rec = next(r for r in result.records if r.predicate["name"] == "comparison_pairs")
    assert rec.status == "completed" and rec.numerator == 1
    table = result.tables["comparison_pairs"].set_index("kind")
    assert table.loc["adjacent", "gap"] == 1 and table.loc["distant", "gap"] == 600
    assert rec.details["contrasts"]["rho_adjacent"]["difference"] > 0


def test_transform_sensitivity_on_known_images(tmp_path):
    rng = np.random.default_rng(4)
    files = []
    for i in range(4):
        f = tmp_path / f"img{i}.png"
        Image.fromarray(smooth_image(rng, size=(200, 160))).save(f)
        files.append(str(f))
    (tmp_path / "bad.png").write_bytes(b"nope")
    summary, pairs = transform_sensitivity(files + [str(tmp_path / "bad.png")], n=5, seed=0)
    assert set(summary["transform"]) == set(TRANSFORMS)
    assert len(summary.attrs["skipped"]) == 1 and (summary["assessed"] == 4).all()
    rate = summary.set_index(["transform", "predicate"])["pass_rate"]
    assert rate[("jpeg_90", "ncc_nearest")] == 1.0 and rate[("resize_384", "hash_joint")] == 1.0
    assert rate[("center_crop_80", "hash_exact_phash")] == 0.0
    assert (pairs["rho"] <= 1).all()
    again, _ = transform_sensitivity(files, n=2, seed=0)
    assert again.attrs["sample"] == {"n": 2, "seed": 0, "pool": 4}
    with pytest.raises(InputError):
        transform_sensitivity([], n=3)


def test_comparison_pairs_match_brute_force():
    rng = np.random.default_rng(9)
    n = 300
    rows = pd.DataFrame({"row": range(n), "group": rng.choice(["a", "b", "c"], n),
                         "frame": rng.integers(0, 2000, n)})
    flagged = pd.DataFrame({"query_row": rng.choice(n, 20, replace=False)})
    same = rows.set_index("row")
    flagged["reference_row"] = [int(rows[(rows["group"] == same.loc[q, "group"])
                                         & (rows["row"] != q)]["row"].iloc[0])
                                for q in flagged["query_row"]]
    got = comparison_pairs(rows, flagged)
    involved = set(flagged["query_row"]) | set(flagged["reference_row"])
    for kind, low in (("adjacent", 1), ("distant", 500)):
        mine = got[got["kind"] == kind].set_index("query_row")
        for q in flagged["query_row"].unique():
            g, fq = same.loc[q, "group"], same.loc[q, "frame"]
            c = rows[(rows["group"] == g) & ~rows["row"].isin(involved)].copy()
            c["gap"] = (c["frame"] - fq).abs()
            c = c[c["gap"] >= low].sort_values(["gap", "row"])
            if c.empty:
                assert q not in mine.index
            else:
                assert mine.loc[q, "gap"] == c["gap"].iloc[0]
                assert mine.loc[q, "reference_row"] == c["row"].iloc[0]
