"""Hugging Face tables (Parquet, save_to_disk, Dataset objects) audit to the same findings as
the same images written as a folder."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from input_builders import (
    CLASSES,
    dataset_dict,
    generated_jpegs,
    image_table,
    planted_release,
    write_folder,
    write_hub,
)

import splitscope
from splitscope.core.options import AuditOptions
from splitscope.features.scanning import scan

AUDIT = AuditOptions.from_flags(workers=1, progress=False, transforms=0,
                                 layers=["duplicates", "provenance"])


def _records(out: Path) -> dict[str, dict]:
    doc = json.loads((out / "audit.json").read_text())
    return {r["id"]: r for r in doc["records"]}


def _comparable(rec: dict) -> dict:
    """What a finding says, row identity aside (paths, row ids, inputs)."""
    est = rec.get("estimate")
    return {"status": rec["status"], "numerator": rec.get("numerator"),
            "denominator": rec.get("denominator"), "coverage": rec.get("coverage"),
            "estimate": round(est, 9) if isinstance(est, float) else est,
            "class_support": rec.get("class_support")}


def assert_same_findings(folder_out: Path, table_out: Path) -> dict[str, dict]:
    a, b = _records(folder_out), _records(table_out)
    assert set(a) == set(b)
    for rid in a:
        assert _comparable(a[rid]) == _comparable(b[rid]), rid
    return a


def _release(originals):
    return planted_release(originals)


def _check_planted(records: dict) -> None:
    """The planted leaks are found (so the comparison compares something)."""
    assert records["identity.sha256.test--train"]["numerator"] == 2
    assert records["identity.pixel_xxh128.test--train"]["numerator"] == 1
    assert records["near_duplicate.ncc_nearest.test--train"]["numerator"] >= 4
    assert records["identity.basename.test--train"]["numerator"] >= 1


def _audit_pair(tmp_path: Path, originals: list[bytes]) -> tuple[Path, Path, dict]:
    release = _release(originals)
    folder = write_folder(tmp_path / "folder", release)
    hub = write_hub(tmp_path / "hub", release)
    splitscope.audit(folder, AUDIT, out_dir=tmp_path / "out-folder")
    splitscope.audit(hub, AUDIT, out_dir=tmp_path / "out-hub")
    return tmp_path / "out-folder", tmp_path / "out-hub", release


@pytest.mark.slow
def test_hub_parquet_of_generated_jpegs_audits_like_the_folder(tmp_path):
    folder_out, hub_out, _ = _audit_pair(tmp_path, generated_jpegs(24))
    records = assert_same_findings(folder_out, hub_out)
    _check_planted(records)
    probe = records["provenance.header_probe.within_pool"]  # compared, not vacuous
    assert probe["status"] == "completed" and probe["denominator"] == 28
    html = (hub_out / "report.html").read_text()  # gallery thumbnails read from the cells
    assert "data:image/jpeg;base64," in html and "file not readable here" not in html


@pytest.mark.realdata
def test_hub_parquet_of_real_jpegs_audits_like_the_folder(tmp_path, shared_data):
    files = sorted((shared_data / "c3-brain-mri-yes-no").rglob("*"))
    files = [f for f in files if f.is_file() and f.suffix.lower() in (".jpg", ".jpeg")]
    originals = [f.read_bytes() for f in files[::8][:28]]
    assert len(originals) >= 20
    folder_out, hub_out, _ = _audit_pair(tmp_path, originals)
    records = assert_same_findings(folder_out, hub_out)
    _check_planted(records)


def test_table_rows_keep_order_identity_and_class_names(tmp_path):
    release = _release(generated_jpegs(12))
    hub = write_hub(tmp_path / "hub", release, row_group_size=3)
    result = scan(hub, tmp_path / "ws", workers=1, progress=False)
    m = result.manifest
    test = m[m["split"] == "test"]
    assert list(test["stored_path"]) == [name for _, name, _ in release["test"]]
    assert list(test["label"]) == [label for label, _, _ in release["test"]]
    assert list(test["table_row"]) == list(range(len(test)))
    assert (m["content"] == "embedded").all()
    assert m["file"].is_unique
    first = test.iloc[0]
    assert first["file"] == f"{first['table']}::image/0"
    assert first["path"] == "data/test-00000-of-00001.parquet::0"
    # the SHA-256 is of the cell's bytes: the same as the file's
    rows = result.rows().set_index("path")
    for i, (_, _, data) in enumerate(release["test"]):
        assert rows.loc[f"data/test-00000-of-00001.parquet::{i}", "sha256"] == \
            hashlib.sha256(data).hexdigest()
    # batches that start and end inside row groups read the same cells
    small = scan(hub, tmp_path / "ws3", workers=1, progress=False, batch_size=3).rows()
    assert list(small.set_index("path").loc[rows.index, "sha256"]) == list(rows["sha256"])
    # cached by the table's signature: a second scan extracts nothing
    again = scan(hub, tmp_path / "ws", workers=1, progress=False)
    assert again.meta["extracted"] == 0 and again.meta["reused"] == len(m)


def test_split_column_and_a_single_table_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    release = _release(generated_jpegs(10))
    rows = release["train"] + release["test"]
    table = image_table(rows)
    table = table.append_column("split", pa.array(["train"] * len(release["train"]) +
                                                  ["test"] * len(release["test"])))
    table = table.replace_schema_metadata(image_table(rows).schema.metadata)
    path = tmp_path / "all.parquet"
    pq.write_table(table, path)
    m = splitscope.build_manifest(path)
    assert list(m["split"]) == ["train"] * len(release["train"]) + ["test"] * len(release["test"])
    assert set(m["label"]) <= set(CLASSES)


@pytest.mark.slow
def test_save_to_disk_folder_and_dataset_object_audit_like_the_folder(tmp_path, datasets):
    release = _release(generated_jpegs(20, seed=3))
    folder = write_folder(tmp_path / "folder", release)
    saved = tmp_path / "saved"
    dataset_dict(datasets, release).save_to_disk(str(saved))
    splitscope.audit(folder, AUDIT, out_dir=tmp_path / "out-folder")
    splitscope.audit(saved, AUDIT, out_dir=tmp_path / "out-saved")
    records = assert_same_findings(tmp_path / "out-folder", tmp_path / "out-saved")
    _check_planted(records)

    loaded = datasets.load_from_disk(str(saved))
    splitscope.audit(loaded, AUDIT, out_dir=tmp_path / "out-object")
    assert_same_findings(tmp_path / "out-folder", tmp_path / "out-object")
    m = splitscope.build_manifest(loaded["test"])
    assert list(m["label"]) == [lab for lab, _, _ in release["test"]]
    assert (m["split"] == "test").all()


def test_in_memory_dataset_is_refused_with_what_to_do(datasets):
    ds = datasets.Dataset.from_dict({"image": [{"bytes": b"x", "path": None}]},
                                    features=datasets.Features({"image": datasets.Image()}))
    with pytest.raises(splitscope.InputError, match="save_to_disk"):
        splitscope.build_manifest(ds)


def test_imagefolder_with_metadata_reads_as_a_list(tmp_path):
    release = _release(generated_jpegs(8))
    root = tmp_path / "imgf"
    for split, rows in release.items():
        lines = ["file_name,label"]
        for label, name, data in rows:
            (root / split).mkdir(parents=True, exist_ok=True)
            (root / split / name).write_bytes(data)
            lines.append(f"{name},{label}")
        (root / split / "metadata.csv").write_text("\n".join(lines) + "\n")
    m = splitscope.build_manifest(root)
    assert "content" not in m.columns  # files on disk: an ordinary list
    assert m["path"].str.startswith(("train/", "test/")).all()
    assert (m["split"] == m["path"].str.split("/").str[0]).all()
    expected = {f"{s}/{n}": lab for s, rows in release.items() for lab, n, _ in rows}
    assert dict(zip(m["path"], m["label"])) == expected
    assert all(Path(f).is_file() for f in m["file"])

    jsonl = tmp_path / "imgj"
    (jsonl / "train").mkdir(parents=True)
    (jsonl / "train" / "a.jpg").write_bytes(release["train"][0][2])
    (jsonl / "metadata.jsonl").write_text(json.dumps({"file_name": "train/a.jpg",
                                                      "label": 1}) + "\n")
    mj = splitscope.build_manifest(jsonl)
    assert list(mj["path"]) == ["train/a.jpg"] and list(mj["label"]) == ["1"]
    assert list(mj["split"]) == ["train"]


def test_mixed_file_and_table_inputs_fill_the_embedded_columns(tmp_path):
    release = _release(generated_jpegs(8))
    folder = write_folder(tmp_path / "folder", release)
    hub = write_hub(tmp_path / "hub", release)
    m = splitscope.build_manifest([folder, hub])
    assert list(m["content"].unique()) == ["file", "embedded"]
    assert m.loc[m["content"] == "file", "table"].isna().all()
    assert pd.api.types.is_integer_dtype(m["table_row"])
    assert np.array_equal(m["row"], np.arange(len(m)))


def _estimates(out: Path) -> dict[str, tuple]:
    """Every provenance record's estimate and interval (the fits and their resamples)."""
    return {rid: (r["status"], r.get("estimate"), (r.get("uncertainty") or {}).get("low"),
                  (r.get("uncertainty") or {}).get("high"), r.get("denominator"))
            for rid, r in _records(out).items() if rid.startswith("provenance.")}


@pytest.mark.slow
def test_the_probes_do_not_depend_on_the_order_the_rows_are_listed(tmp_path):
    """The same files listed in another order (a shuffled table beside the folder) give the
    same header and image-statistics probes, partition classifier and source-label
    association: the rows are put in their stable order (SHA-256, then path) before any fold,
    sample or resample."""
    release = _release(generated_jpegs(48, seed=5))
    folder = write_folder(tmp_path / "folder", release)
    rng = np.random.default_rng(11)
    shuffled = {split: [rows[i] for i in rng.permutation(len(rows))]
                for split, rows in release.items()}
    assert shuffled != release
    hub = write_hub(tmp_path / "hub", shuffled)
    splitscope.audit(folder, AUDIT, out_dir=tmp_path / "out-folder")
    splitscope.audit(hub, AUDIT, out_dir=tmp_path / "out-hub")
    a, b = _estimates(tmp_path / "out-folder"), _estimates(tmp_path / "out-hub")
    assert {"provenance.header_probe.within_pool", "provenance.image_stats_probe.within_pool",
            "provenance.partition[test_train]", "provenance.partition.internal[train]"} <= set(a)
    assert all(a[rid][0] == "completed" for rid in a if "source_label" not in rid)
    assert a == b
