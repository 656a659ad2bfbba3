"""Attribution outside anatomy on supplied maps (METHODS §5.10)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from artifacts_check import assert_artifacts_cover

from splitscope import cli
from splitscope.errors import InputError
from splitscope.evaluation.attribution import (
    attribution_contrast,
    attribution_record,
    load_maps,
    outside_mask_share,
    outside_share_and_reasons,
    resize_nearest,
)
from splitscope.records.schema import validate_record

# --------------------------------------------------------------------------------------------
# shares


def test_hand_computed_shares_2x2():
    maps = np.array([[[1.0, -3.0], [0.0, 4.0]],     # |a| = 1, 3, 0, 4; total 8
                     [[2.0, 2.0], [2.0, 2.0]],
                     [[0.5, 0.0], [0.0, 0.5]]])
    masks = np.array([[[1, 0], [1, 1]],             # outside: 3 → 3/8
                      [[0, 0], [0, 0]],             # all outside → 1
                      [[True, False], [False, True]]]).astype(bool)
    share = outside_mask_share(maps, masks)
    np.testing.assert_allclose(share, [3 / 8, 1.0, 0.0])
    # a mask of 0/1 integers gives the same
    np.testing.assert_allclose(outside_mask_share(maps, masks.astype(np.uint8)), share)


def test_zero_mass_non_finite_and_missing_rows_are_nan_and_counted():
    maps = [np.zeros((2, 2)), np.array([[1.0, np.nan], [0, 0]]), None, np.ones((2, 2))]
    masks = [np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), None]
    share, reasons = outside_share_and_reasons(maps, masks)
    assert np.isnan(share).all()
    assert reasons == ["zero attribution mass", "non-finite attribution", "map missing",
                       "mask missing"]
    c = attribution_contrast(np.r_[share, 0.2, 0.4], [True, False, True, False, True, False],
                             n_boot=50)
    assert c["not_assessed"] == 4 and c["assessed"] == 2 and c["rows"] == 6
    assert c["exposed"] == {"rows": 3, "assessed": 1, "mean": 0.2, "median": 0.2}


def test_mask_resize_rule_nearest_pixel_centre():
    up = resize_nearest(np.array([[[1, 0], [0, 0]]]), (4, 4))[0]
    np.testing.assert_array_equal(up, [[1, 1, 0, 0], [1, 1, 0, 0], [0] * 4, [0] * 4])
    down = resize_nearest(np.arange(16).reshape(1, 4, 4), (2, 2))[0]
    np.testing.assert_array_equal(down, [[5, 7], [13, 15]])  # offset k // 2 of each block
    # a 2x2 mask against a 4x4 map: the top-left quadrant is inside
    a = np.arange(1.0, 17.0).reshape(1, 4, 4)
    inside = a[0, :2, :2].sum()
    share = outside_mask_share(a, np.array([[[1, 0], [0, 0]]]))
    assert share[0] == pytest.approx(1 - inside / a.sum())


def test_share_input_errors():
    with pytest.raises(InputError, match="0/1"):
        outside_mask_share(np.ones((1, 2, 2)), np.full((1, 2, 2), 2))
    with pytest.raises(InputError, match="one mask per map"):
        outside_mask_share(np.ones((2, 2, 2)), np.ones((1, 2, 2)))
    with pytest.raises(InputError, match="2-D"):
        outside_mask_share([np.ones((3, 2, 2))], [np.ones((2, 2))])
    with pytest.raises(InputError, match=r"\(n, H, W\)"):
        outside_mask_share(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(InputError, match="0/1"):  # a NaN in a mask is not 0/1 either
        outside_mask_share([np.ones((2, 2))], [np.array([[1, np.nan], [0, 0]])])


def test_stacked_and_per_row_inputs_agree():
    rng = np.random.default_rng(2)
    maps = rng.normal(size=(6, 8, 8))
    maps[1] = 0.0
    maps[2, 0, 0] = np.inf
    masks = rng.uniform(size=(6, 4, 4)) > 0.5
    a, ra = outside_share_and_reasons(maps, masks)
    b, rb = outside_share_and_reasons(list(maps), list(masks))
    np.testing.assert_array_equal(a, b)
    assert ra == rb == [None, "zero attribution mass", "non-finite attribution", None, None,
                        None]
    # reference: explicit loop with the same nearest-neighbour rule (factor 2 upscaling)
    for i in (0, 3, 4, 5):
        big = np.kron(masks[i], np.ones((2, 2))).astype(bool)
        ref = np.abs(maps[i])[~big].sum() / np.abs(maps[i]).sum()
        assert a[i] == pytest.approx(ref)


# --------------------------------------------------------------------------------------------
# loading

PATHS = ["test/cat/a.png", "test/cat/b.png", "test/dog/c.png", "test/cat/a.png"]


def test_load_maps_from_npz_with_missing_and_unused(tmp_path):
    arrays = {"test/cat/a.png": np.ones((2, 2)), "test\\dog\\c.png": np.full((1, 2, 2), 2.0),
              "train/x.png": np.zeros((2, 2))}
    np.savez(tmp_path / "maps.npz", **arrays)
    ms = load_maps(tmp_path / "maps.npz", PATHS)
    assert ms.missing == ["test/cat/b.png"] and ms.unused == ["train/x.png"]
    assert ms.arrays[0] is not None and ms.arrays[3] is not None  # repeated path, same array
    np.testing.assert_array_equal(ms.arrays[2], np.full((2, 2), 2.0))  # (1, H, W) → (H, W)
    st = ms.stack()
    assert st.shape == (4, 2, 2) and np.isnan(st[1]).all()
    manifest = pd.DataFrame({"path": PATHS})
    assert load_maps(tmp_path / "maps.npz", manifest).missing == ["test/cat/b.png"]


def test_load_maps_from_npy_folder_both_naming_rules(tmp_path):
    (tmp_path / "m" / "test" / "cat").mkdir(parents=True)
    (tmp_path / "m" / "test" / "dog").mkdir(parents=True)
    np.save(tmp_path / "m" / "test" / "cat" / "a.png.npy", np.ones((3, 3)))
    np.save(tmp_path / "m" / "test" / "dog" / "c.npy", np.zeros((3, 3)))
    ms = load_maps(tmp_path / "m", PATHS)
    assert ms.missing == ["test/cat/b.png"]
    assert ms.arrays[0].shape == (3, 3) and ms.arrays[2].sum() == 0
    np.save(tmp_path / "m" / "test" / "cat" / "a.npy", np.ones((3, 3)))
    with pytest.raises(InputError, match="keep one"):
        load_maps(tmp_path / "m", PATHS)


def test_load_maps_input_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_maps(tmp_path / "absent.npz", PATHS)
    np.savez(tmp_path / "dup.npz", **{"test/cat/a.png": np.ones((2, 2)),
                                      "test\\cat\\a.png": np.ones((2, 2))})
    with pytest.raises(InputError, match="keep one"):
        load_maps(tmp_path / "dup.npz", PATHS)
    np.savez(tmp_path / "rgb.npz", **{"test/cat/a.png": np.ones((2, 2, 3))})
    with pytest.raises(InputError, match="reduce channels"):
        load_maps(tmp_path / "rgb.npz", PATHS)
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(InputError, match="neither"):
        load_maps(tmp_path / "x.txt", PATHS)
    np.savez(tmp_path / "two.npz", **{"test/cat/a.png": np.ones((2, 2)),
                                      "test/cat/b.png": np.ones((3, 3))})
    with pytest.raises(InputError, match="cannot be stacked"):
        load_maps(tmp_path / "two.npz", PATHS).stack()


# --------------------------------------------------------------------------------------------
# contrast


def _planted(n=240, effect=0.15, seed=1):
    rng = np.random.default_rng(seed)
    share = rng.uniform(0.2, 0.6, n)
    exposed = np.arange(n) % 3 == 0
    share[exposed] += effect
    return share, exposed


def test_planted_difference_detected_and_reference_mean():
    share, exposed = _planted()
    c = attribution_contrast(share, exposed, n_boot=1000, seed=0)
    assert c["difference"] == pytest.approx(share[exposed].mean() - share[~exposed].mean())
    assert c["exposed"]["median"] == pytest.approx(np.median(share[exposed]))
    assert c["interval"]["low"] > 0.1 and c["interval"]["high"] < 0.2
    assert c["interval"]["undefined_resamples"] == 0
    # the bootstrap replicates agree with a direct index resample of the same generator
    rng = np.random.default_rng(0)
    idx = rng.integers(0, share.size, (1000, share.size))
    e, s = exposed[idx], share[idx]
    reps = (s * e).sum(1) / e.sum(1) - (s * ~e).sum(1) / (~e).sum(1)
    assert c["interval"]["low"] == pytest.approx(np.quantile(reps, 0.025), rel=1e-6)
    assert c["interval"]["high"] == pytest.approx(np.quantile(reps, 0.975), rel=1e-6)


def test_null_case_interval_covers_zero():
    share, exposed = _planted(effect=0.0, seed=5)
    c = attribution_contrast(share, exposed, n_boot=1000, seed=0)
    assert c["interval"]["low"] < 0 < c["interval"]["high"]
    rec = attribution_record(c)
    assert "covers 0" in rec.conclusion and rec.status == "completed"


def test_seeded_reproducibility():
    share, exposed = _planted()
    a = attribution_contrast(share, exposed, n_boot=300, seed=7)
    b = attribution_contrast(share, exposed, n_boot=300, seed=7)
    c = attribution_contrast(share, exposed, n_boot=300, seed=8)
    assert a == b
    assert a["interval"]["low"] != c["interval"]["low"]


def test_cluster_bootstrap_widens_interval_for_grouped_rows():
    # 24 groups of 10 rows each sharing a group-level offset: rows are not independent
    rng = np.random.default_rng(3)
    g = np.repeat(np.arange(24), 10)
    exposed = g % 3 == 0
    share = 0.4 + 0.1 * exposed + rng.normal(0, 0.15, 24)[g] + rng.normal(0, 0.01, g.size)
    case = attribution_contrast(share, exposed, n_boot=1000, seed=0)
    clus = attribution_contrast(share, exposed, groups=g.astype(str), n_boot=1000, seed=0)
    assert clus["difference"] == case["difference"] and clus["groups"] == 24
    w_case = case["interval"]["high"] - case["interval"]["low"]
    w_clus = clus["interval"]["high"] - clus["interval"]["low"]
    assert w_clus > 2 * w_case
    assert "cluster" in clus["interval"]["kind"]


def test_contrast_errors_and_one_sided():
    with pytest.raises(InputError, match="one length"):
        attribution_contrast([0.1, 0.2], [True])
    with pytest.raises(InputError, match="no group"):
        attribution_contrast([0.1, 0.2], [True, False], groups=["a", None])
    c = attribution_contrast([0.1, np.nan], [False, True], n_boot=100)
    assert c["reason"].startswith("no assessed exposed row")
    rec = attribution_record(c)
    assert rec.status == "not assessed" and rec.estimate is None


def test_record_partial_when_rows_not_assessed():
    share, exposed = _planted(n=60)
    share[:3] = np.nan
    c = attribution_contrast(share, exposed, n_boot=200)
    rec = attribution_record(c, exposed_name="leaked",
                             not_assessed=[{"row": i, "reason": "map missing"} for i in range(3)])
    d = rec.to_dict()
    assert d["status"] == "partial" and "3 of 60" in d["reason"]
    assert d["unit"] == "row" and d["denominator"] == 57
    assert d["coverage"] == {"assessed": 57, "total": 60, "not_assessed": 3}
    assert d["estimate"] == pytest.approx(c["difference"])
    assert d["uncertainty"]["kind"].startswith("percentile bootstrap over cases")
    assert "leaked rows put more" in d["conclusion"]
    assert len(d["details"]["not_assessed_rows"]) == 3
    validate_record(d)


# --------------------------------------------------------------------------------------------
# CLI


def _cli_inputs(tmp_path):
    rng = np.random.default_rng(0)
    n = 30
    paths = [f"test/p{i // 3}_{i}.png" for i in range(n)]
    pd.DataFrame({"path": paths, "split": "test", "label": "a",
                  "group": [f"p{i // 3}" for i in range(n)]}).to_csv(tmp_path / "m.csv",
                                                                      index=False)
    flagged = paths[:10]
    pd.DataFrame({"path": flagged}).to_csv(tmp_path / "flagged.csv", index=False)
    maps, masks = {}, {}
    for i, p in enumerate(paths):
        a = rng.uniform(0, 1, (8, 8))
        m = np.zeros((4, 4), dtype=bool)
        m[1:3, 1:3] = True
        if i < 10:
            a[2:6, 2:6] *= 0.2  # flagged rows: less mass inside the (upscaled) mask
        maps[p] = a
        if i != n - 1:  # one mask missing
            masks[p] = m
    np.savez(tmp_path / "maps.npz", **maps)
    np.savez(tmp_path / "masks.npz", **masks)
    return [str(tmp_path / "m.csv"), "--maps", str(tmp_path / "maps.npz"), "--masks",
            str(tmp_path / "masks.npz"), "--flagged", str(tmp_path / "flagged.csv")]


def test_cli_attribution_json_and_exports(tmp_path, capsys):
    args = _cli_inputs(tmp_path)
    code = cli.main(["attribution", *args, "--resamples", "300", "--json", "--out",
                     str(tmp_path / "out")])
    assert code == 0
    res = json.loads(capsys.readouterr().out)
    c = res["contrast"]
    assert c["rows"] == 30 and c["not_assessed"] == 1 and c["exposed"]["assessed"] == 10
    assert c["interval"]["low"] > 0
    assert res["masks_missing"] == 1 and res["not_assessed_by_reason"] == {"mask missing": 1}
    assert res["record"]["status"] == "partial"
    rows = pd.read_csv(tmp_path / "out" / "attribution_rows.csv")
    assert assert_artifacts_cover(tmp_path / "out") == ["attribution.json",
                                                        "attribution_rows.csv"]
    assert list(rows.columns) == ["row", "path", "exposed", "outside_share",
                                  "not_assessed_reason"] and len(rows) == 30
    # cluster bootstrap over a manifest column, and a readable table
    assert cli.main(["attribution", *args, "--resamples", "200", "--group-column", "group"]) == 0
    out = capsys.readouterr().out
    assert "cluster bootstrap" in out and "mask missing" in out


def test_cli_attribution_input_errors(tmp_path, capsys):
    args = _cli_inputs(tmp_path)
    assert cli.main(["attribution", *args, "--group-column", "nope"]) == 2
    assert cli.main(["attribution", *args, "--group-column", "group", "--group-regex",
                     "(?P<group>p\\d+)"]) == 2
    assert cli.main(["attribution", *args, "--rows", "val"]) == 2
    assert "error" in capsys.readouterr().err
