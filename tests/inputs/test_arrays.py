"""MedMNIST-layout .npz archives and in-memory arrays: pixels without bytes."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from input_builders import write_npz

import splitscope
from splitscope import cli
from splitscope.core.options import AuditOptions
from splitscope.features.scanning import scan


def _images(n: int, seed: int, size: int = 28, rgb: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    out = []
    for _ in range(n):
        cy, cx = rng.uniform(5, size - 5, 2)
        img = 150 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * rng.uniform(3, 9) ** 2))
        img = np.clip(img + rng.normal(0, 20, img.shape) + 40, 0, 255).astype(np.uint8)
        out.append(np.stack([img] * 3, -1) if rgb else img)
    return np.stack(out)


def planted_arrays(rgb: bool = False):
    """Train 30, val 6, test 10 with test[0] an exact copy of train[0], test[1] a brightened
    copy of train[1] (a near twin: same hashes and NCC, different pixels)."""
    train, val, test = _images(30, 1, rgb=rgb), _images(6, 2, rgb=rgb), _images(10, 3, rgb=rgb)
    test[0] = train[0]
    test[1] = np.clip(train[1].astype(int) + 9, 0, 255).astype(np.uint8)
    labels = {"train": np.arange(30).reshape(-1, 1) % 2, "val": np.arange(6) % 2,
              "test": (np.arange(10) % 2).reshape(-1, 1)}
    return {"train": train, "val": val, "test": test}, labels


@pytest.mark.slow
def test_npz_audit_via_cli_byte_identity_not_applicable(tmp_path, capsys):
    images, labels = planted_arrays()
    (tmp_path / "data").mkdir()
    npz = write_npz(tmp_path / "data" / "pneumoniamnist.npz", images, labels)
    out = tmp_path / "out"
    code = cli.main(["audit", str(npz), "--out", str(out), "--workers", "1",
                     "--transforms", "5", "--json"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads((out / "audit.json").read_text())
    recs = {r["id"]: r for r in doc["records"]}
    byte = recs["identity.sha256.test--train"]
    assert byte["status"] == "not applicable" and byte["numerator"] is None
    assert "pixel arrays" in byte["reason"]
    assert recs["identity.basename.test--train"]["status"] == "not applicable"
    within = recs["identity.within_pixel_copies.train--train"]  # equal pixels, not bytes
    assert (within["status"], within["numerator"]) == ("completed", 0)
    assert "identity.within_copies.train--train" not in recs
    assert recs["identity.label_conflict_sha256.test--train"]["status"] == "not applicable"
    pixel = recs["identity.pixel_xxh128.test--train"]
    assert (pixel["status"], pixel["numerator"], pixel["denominator"]) == ("completed", 1, 10)
    ncc = recs["near_duplicate.ncc_nearest.test--train"]
    assert ncc["status"] == "completed" and ncc["numerator"] == 2 and ncc["denominator"] == 10
    assert recs["near_duplicate.hash_exact_phash.test--train"]["numerator"] >= 1
    union = recs["identity.pixel_identical_union.test--train"]
    assert union["numerator"] == 1 and "sha256" not in union["details"]["parts"]
    header = recs["provenance.header_probe.within_pool"]
    assert header["status"] == "not applicable" and "no file headers" in header["reason"]
    assert any("byte-identical copy in train not applicable" in v
               for v in doc["summary"]["verdicts"])
    summary = json.loads(capsys.readouterr().out)
    assert summary  # the --json summary is printed
    html = (out / "report.html").read_text()  # the gallery shows the arrays' pixels
    assert "data:image/jpeg;base64," in html and "file not readable here" not in html
    issues = splitscope.AuditResult.load(out).issues  # byte columns: not applicable, not "no"
    test = issues[issues["split"] == "test"]
    assert issues["sha256"].isna().all() and issues["basename"].isna().all()
    assert issues["byte_copies"].isna().all()
    assert int(test["pixel_xxh128"].sum()) == 1 and int(test["ncc_nearest"].sum()) == 2


@pytest.mark.slow
def test_npz_deduplicated_split_removes_pixel_identical_copies_within_it(tmp_path):
    """Arrays have no bytes: copies inside a split are equal pixels, and the deduplicated split
    drops them as a folder audit drops byte copies; the summary calls them pixel-identical
    copies, not re-encodes."""
    images, labels = planted_arrays()
    images["test"][5] = images["test"][4]  # a copy inside the test split
    images["test"][6] = images["test"][4]
    npz = write_npz(tmp_path / "planted.npz", images, labels)
    res = splitscope.audit(npz, out_dir=tmp_path / "out",
                           options=AuditOptions.from_flags(workers=1, progress=False,
                                                           layers=["duplicates"], transforms=0))
    recs = {r["id"]: r for r in res.document["records"]}
    within = recs["identity.within_pixel_copies.test--test"]
    assert (within["numerator"], within["details"]["extra_copies"]) == (3, 2)
    assert recs["near_duplicate.dedup_split.test--train"]["predicate"]["params"][
        "removed_by"][-1] == "pixel_xxh128_within"
    dedup = pd.read_parquet(tmp_path / "out" / "lists" / "dedup_splits.parquet")
    test = dedup[dedup["split"] == "test"]
    removed = test.loc[~test["kept"], "removed_by"].astype(str)
    # test[0] (a train copy), test[1] (a near twin of a train image), test[5] and test[6]
    assert len(test) - int(test["kept"].sum()) == 2 + 2
    assert sum("pixel_xxh128_within (test)" in r for r in removed) == 2
    line = next(v for v in res.document["summary"]["verdicts"] if "pixel-identical copy" in v)
    assert "re-encodes" not in line and "equal decoded pixels" in line


def test_npz_manifest_rows_and_array_features_match_decoded_images(tmp_path):
    images, labels = planted_arrays(rgb=True)
    npz = write_npz(tmp_path / "rgb.npz", images, labels)
    result = scan(npz, tmp_path / "ws", workers=1, progress=False)
    m = result.manifest
    assert list(m["split"]) == ["train"] * 30 + ["val"] * 6 + ["test"] * 10
    assert list(m["table_row"][:3]) == [0, 1, 2] and (m["content"] == "array").all()
    assert m["basename"].isna().all()
    assert m["file"].iloc[0].endswith("rgb.npz::train_images/00")
    rows = result.rows()
    assert (rows["status"] == "ok").all()
    assert rows["sha256"].isna().all() and rows["width"].isna().all()
    # the same pixels decoded from a PNG give the same digest, hashes and thumbnail
    from PIL import Image

    from splitscope.features.extract import extract_files

    png = tmp_path / "same.png"
    Image.fromarray(images["train"][4]).save(png)
    table, thumbs = extract_files([str(png)])
    row = rows.iloc[4]
    assert row["pixel_xxh128"] == table["pixel_xxh128"].iloc[0]
    assert int(row["phash"]) == int(table["phash"].iloc[0])
    assert int(row["dhash"]) == int(table["dhash"].iloc[0])
    assert np.array_equal(result.thumbs([int(row["row"])])[0], thumbs[0])


@pytest.mark.slow
def test_in_memory_arrays_through_the_api(tmp_path):
    images, labels = planted_arrays()
    parts = [splitscope.Arrays(images[s], labels[s], split=s, name="mem") for s in
             ("train", "test")]
    result = scan(parts, tmp_path / "ws", workers=1, progress=False)
    assert len(result.manifest) == 40
    assert (result.rows()["status"] == "ok").all()
    stored = sorted((tmp_path / "ws" / "arrays").glob("*.npz"))
    assert len(stored) == 2
    again = scan(parts, tmp_path / "ws", workers=1, progress=False)
    assert again.meta["extracted"] == 0
    out = splitscope.audit(parts, out_dir=tmp_path / "out",
                           options=AuditOptions.from_flags(workers=1, progress=False, transforms=0,
                                                           layers=["duplicates"]))
    doc = json.loads(out.audit_json.read_text())
    recs = {r["id"]: r for r in doc["records"]}
    assert recs["identity.pixel_xxh128.test--train"]["numerator"] == 1
    assert recs["identity.sha256.test--train"]["status"] == "not applicable"


def test_deflated_npz_reads_like_a_stored_one(tmp_path):
    images, labels = planted_arrays()
    stored = write_npz(tmp_path / "a.npz", images, labels)
    deflated = tmp_path / "b.npz"
    np.savez_compressed(deflated, **{f"{s}_{k}": v for s in images for k, v in
                                     (("images", images[s]), ("labels", labels[s]))})
    a = scan(stored, tmp_path / "wa", workers=1, progress=False).rows()
    b = scan(deflated, tmp_path / "wb", workers=1, progress=False).rows()
    assert list(a["pixel_xxh128"]) == list(b["pixel_xxh128"])
    assert list(a["phash"]) == list(b["phash"])


@pytest.mark.parametrize("change, message", [
    (lambda im, lab: lab.update(test=lab["test"][:-1]), "9 labels for 10 images"),
    (lambda im, lab: lab.pop("val"), "has val_images but no val_labels"),
    (lambda im, lab: im.update(train=im["train"].astype(np.float32)), "must be uint8"),
    (lambda im, lab: im.update(train=im["train"][:, :, :, None].repeat(4, -1)),
     "must be uint8"),
    (lambda im, lab: im.update(train=im["train"][:, 0]), "must be uint8"),
    (lambda im, lab: lab.update(train=np.zeros((30, 14))), "multi-label"),
])
def test_malformed_npz_is_an_input_error(tmp_path, change, message):
    images, labels = planted_arrays()
    change(images, labels)
    npz = tmp_path / "bad.npz"
    np.savez(npz, **{f"{s}_images": v for s, v in images.items()},
             **{f"{s}_labels": v for s, v in labels.items()})
    with pytest.raises(splitscope.InputError, match=message):
        splitscope.build_manifest(npz)


def test_npz_without_medmnist_keys_and_a_broken_archive(tmp_path, capsys):
    odd = tmp_path / "odd.npz"
    np.savez(odd, x=np.zeros((3, 4, 4), np.uint8))
    with pytest.raises(splitscope.InputError, match="no MedMNIST image arrays"):
        splitscope.build_manifest(odd)
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"PK\x03\x04 not really a zip")
    assert cli.main(["scan", str(broken), "--workspace", str(tmp_path / "w")]) == 2
    assert "not a valid .npz" in capsys.readouterr().err


def test_bad_in_memory_arrays(tmp_path):
    with pytest.raises(splitscope.InputError, match="uint8"):
        scan(splitscope.Arrays(np.zeros((2, 4, 4), np.int16)), tmp_path / "w")
    with pytest.raises(splitscope.InputError, match="3 labels for 2 images"):
        scan(splitscope.Arrays(np.zeros((2, 4, 4), np.uint8), [0, 1, 1]), tmp_path / "w")
    with pytest.raises(splitscope.InputError, match="1 split values for 2 images"):
        scan(splitscope.Arrays(np.zeros((2, 4, 4), np.uint8), split=["train"]), tmp_path / "w")


@pytest.mark.slow
def test_mixed_files_and_arrays_on_one_boundary_are_partial_with_the_count(tmp_path):
    from input_builders import generated_jpegs, planted_release, write_folder

    folder = write_folder(tmp_path / "folder", planted_release(generated_jpegs(24)))
    images, labels = planted_arrays()
    npz = write_npz(tmp_path / "m.npz", images, labels)
    out = splitscope.audit([folder, npz], out_dir=tmp_path / "out",
                           options=AuditOptions.from_flags(workers=1, progress=False, transforms=0,
                                                           layers=["duplicates", "provenance"]))
    recs = {r["id"]: r for r in json.loads(out.audit_json.read_text())["records"]}
    byte = recs["identity.sha256.test--train"]
    n_files_test = 10
    assert byte["status"] == "partial"
    assert byte["details"]["not_applicable"] == 10
    assert byte["denominator"] == n_files_test + 10
    assert byte["numerator"] == 2  # the two planted byte copies among the files
    assert "10 query row(s) are pixel arrays" in byte["reason"]
    assert recs["provenance.header_probe.within_pool"]["status"] == "completed"
    assert recs["provenance.header_probe.within_pool"]["denominator"] == 18 + 10  # files only
