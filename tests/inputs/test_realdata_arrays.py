"""A real release as an .npz array input deduplicates its test split as the folder audit does:
the same test rows kept, the same copies inside the split removed (by their decoded pixels,
since arrays have no bytes)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import splitscope
from splitscope.core.options import AuditOptions

pytestmark = [pytest.mark.realdata, pytest.mark.slow]

AUDIT = AuditOptions.from_flags(workers=2, progress=False, transforms=0,
                                 layers=["duplicates"])


def _dedup(out) -> pd.DataFrame:
    return pd.read_parquet(out / "lists" / "dedup_splits.parquet")


def test_kermany_as_npz_keeps_the_folders_deduplicated_test_split(shared_data,
                                                                 kermany_workspace, tmp_path):
    root = shared_data / "kermany-chest-xray-224"
    manifest = splitscope.read_folder(root)
    classes = sorted(manifest["label"].unique())
    arrays = {}
    for split, part in manifest.groupby("split", sort=True):
        images = [np.asarray(Image.open(f).convert("RGB")) for f in part["file"]]
        arrays[f"{split}_images"] = np.stack(images)
        arrays[f"{split}_labels"] = part["label"].map(classes.index).to_numpy(np.int64)
    npz = tmp_path / "kermany.npz"
    np.savez(npz, **arrays)
    del arrays
    folder_res = splitscope.audit(  # the folder's features from the session's cache
        root, AuditOptions.from_flags(workers=2, progress=False, transforms=0,
                                      layers=["duplicates"], workspace=str(kermany_workspace)),
        out_dir=tmp_path / "folder")
    npz_res = splitscope.audit(npz, AUDIT, out_dir=tmp_path / "npz")

    a, b = _dedup(tmp_path / "folder"), _dedup(tmp_path / "npz")
    ta, tb = a[a["split"] == "test"], b[b["split"] == "test"]
    assert len(ta) == len(tb) == 624
    # rows in the same order (the folder's path order, as the arrays were written)
    assert [classes.index(x) for x in ta["label"]] == [int(x) for x in tb["label"]]
    assert int(ta["kept"].sum()) == int(tb["kept"].sum())
    assert np.array_equal(ta["kept"].to_numpy(), tb["kept"].to_numpy())
    within_a = ta["removed_by"].astype(str).str.contains("_within (test)", regex=False)
    within_b = tb["removed_by"].astype(str).str.contains("pixel_xxh128_within (test)",
                                                         regex=False)
    assert np.array_equal(within_a.to_numpy(), within_b.to_numpy())
    ra = {r["id"]: r for r in folder_res.document["records"]}
    rb = {r["id"]: r for r in npz_res.document["records"]}
    dedup_a = ra["near_duplicate.dedup_split.test--train"]
    dedup_b = rb["near_duplicate.dedup_split.test--train"]
    assert (dedup_a["numerator"], dedup_a["denominator"]) == (
        dedup_b["numerator"], dedup_b["denominator"])
    print("kept", dedup_a["numerator"], "of", dedup_a["denominator"],
          "; within-test removals", int(within_a.sum()))
