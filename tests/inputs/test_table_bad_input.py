"""Bad tables: clear InputErrors for what cannot be a release, counted failures for bad cells,
the same reason codes as the same bytes in a file."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from input_builders import generated_jpegs, image_table, png_bytes, write_hub

import splitscope
from splitscope import cli
from splitscope.core.options import AuditOptions
from splitscope.features.scanning import scan
from splitscope.manifest import read_embedded

HEADER_FIELDS = ("format", "width", "height", "file_size", "jpeg_quality", "extension_mismatch")


def _bad_cells() -> list[tuple[str, str, bytes | None]]:
    good = generated_jpegs(2)
    import numpy as np

    return [
        ("no", "good.jpg", good[0]),
        ("no", "truncated.jpg", good[1][: len(good[1]) // 2]),
        ("yes", "garbage.jpg", b"this is not an image at all" * 10),
        ("yes", "png_named.jpg", png_bytes(np.full((20, 30), 7, np.uint8))),
        ("no", "empty.jpg", b""),
        ("yes", "nothing.jpg", None),
    ]


def test_bad_cells_fail_like_the_same_bytes_in_files(tmp_path):
    cells = _bad_cells()
    pq.write_table(image_table(cells), tmp_path / "t.parquet")
    files = tmp_path / "files" / "x"
    files.mkdir(parents=True)
    for _, name, data in cells:
        if data is not None:
            (files / name).write_bytes(data)
    t = scan(tmp_path / "t.parquet", tmp_path / "wt", workers=1, progress=False).rows()
    f = scan(tmp_path / "files", tmp_path / "wf", workers=1, progress=False).rows()
    t = t.set_index("basename")
    f = f.set_index("basename")
    for _, name, data in cells:
        if data is None:
            assert t.loc[name, "status"] == "missing"
            assert "stores no image bytes" in t.loc[name, "error"]
            continue
        for col in ("status", "sha256", "pixel_xxh128", "size_bytes", *HEADER_FIELDS):
            a, b = t.loc[name, col], f.loc[name, col]
            assert (a is pd_na and b is pd_na) or a == b or (str(a) == str(b)), (name, col)
    assert t.loc["truncated.jpg", "status"] == "truncated"
    assert t.loc["garbage.jpg", "status"] == "not_an_image"
    assert t.loc["empty.jpg", "status"] == "zero_byte"
    assert bool(t.loc["png_named.jpg", "extension_mismatch"]) is True


pd_na = __import__("pandas").NA


def test_failures_are_counted_in_the_scan_summary(tmp_path):
    pq.write_table(image_table(_bad_cells()), tmp_path / "t.parquet")
    summary = scan(tmp_path / "t.parquet", tmp_path / "w", workers=1, progress=False).summary()
    files = summary["failures"]["files"]
    assert files["denominator"] == 6 and files["total"] == 4
    assert files["by_reason"] == {"missing": 1, "not_an_image": 1, "truncated": 1,
                                  "zero_byte": 1}


def test_read_cap_applies_to_cells(tmp_path):
    pq.write_table(image_table(_bad_cells()[:1]), tmp_path / "t.parquet")
    rows = scan(tmp_path / "t.parquet", tmp_path / "w", workers=1, progress=False,
                max_file_bytes=100).rows()
    assert rows["status"].tolist() == ["too_large"]


def test_parquet_without_an_image_column_or_a_path_column(tmp_path):
    path = tmp_path / "labels.parquet"
    pq.write_table(pa.table({"label": [0, 1], "score": [0.1, 0.2]}), path)
    with pytest.raises(splitscope.InputError, match="no path column"):
        splitscope.build_manifest(path)
    with pytest.raises(splitscope.InputError, match="image column 'image' missing"):
        splitscope.build_manifest(path, image_column="image")
    with pytest.raises(splitscope.InputError, match="holds double, not images"):
        splitscope.build_manifest(path, image_column="score")


def test_arrow_file_without_an_image_column(tmp_path):
    path = tmp_path / "x.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(
            sink, pa.schema([("label", pa.int64())])) as writer:
        writer.write_table(pa.table({"label": [0, 1]}))
    with pytest.raises(splitscope.InputError, match="no image column"):
        splitscope.build_manifest(path)


def test_several_image_columns_need_a_choice(tmp_path):
    cells = _bad_cells()[:1]
    table = image_table(cells)
    table = table.append_column("mask", table.column("image")).replace_schema_metadata(None)
    path = tmp_path / "two.parquet"
    pq.write_table(table, path)
    with pytest.raises(splitscope.InputError, match="several image columns"):
        splitscope.build_manifest(path)
    m = splitscope.build_manifest(path, image_column="mask")
    assert m["file"].iloc[0].endswith("::mask/0")


@pytest.mark.parametrize("suffix", [".arrow", ".parquet"])
def test_corrupted_tables_are_input_errors(tmp_path, suffix, capsys):
    good = tmp_path / f"good{suffix}"
    table = image_table(_bad_cells()[:1])
    if suffix == ".parquet":
        pq.write_table(table, good)
    else:
        with pa.OSFile(str(good), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    data = good.read_bytes()
    bad = tmp_path / "data" / f"bad{suffix}"
    bad.parent.mkdir()
    bad.write_bytes(data[: len(data) // 3] + b"\x00garbage\xff" * 3)
    with pytest.raises(splitscope.InputError, match="cannot read|no path column|not a valid"):
        splitscope.build_manifest(bad)
    assert cli.main(["scan", str(bad), "--workspace", str(tmp_path / "w")]) == 2


def test_missing_table_named_by_save_to_disk_state(tmp_path):
    folder = tmp_path / "saved"
    folder.mkdir()
    (folder / "dataset_info.json").write_text("{}")
    (folder / "state.json").write_text(json.dumps(
        {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": "train"}))
    with pytest.raises(splitscope.InputError, match="missing"):
        splitscope.build_manifest(folder)
    (folder / "state.json").write_text("{not json")
    with pytest.raises(splitscope.InputError, match="cannot read"):
        splitscope.build_manifest(folder)


def test_cli_scan_of_a_hub_folder_with_image_column(tmp_path, capsys):
    from input_builders import planted_release

    hub = write_hub(tmp_path / "hub", planted_release(generated_jpegs(8)))
    code = cli.main(["scan", str(hub), "--workspace", str(tmp_path / "w"), "--image-column",
                     "image", "--label-column", "label", "--json"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 12 and summary["features_ok"] == 12
    assert set(summary["counts"]) == {"train", "test"}


def test_plain_binary_image_column_when_named(tmp_path):
    data = generated_jpegs(3)
    path = tmp_path / "raw.parquet"
    pq.write_table(pa.table({"img": pa.array(data, pa.binary()), "label": ["a", "b", "a"]}),
                   path)
    with pytest.raises(splitscope.InputError, match="no image column"):
        read_embedded(path)
    rows = scan(path, tmp_path / "w", workers=1, progress=False, image_column="img").rows()
    assert (rows["status"] == "ok").all() and list(rows["label"]) == ["a", "b", "a"]
    assert rows["stored_path"].isna().all()


def test_a_folder_with_images_beside_a_table_is_a_folder_release(tmp_path):
    hub = write_hub(tmp_path / "r", {"train": image_table_rows()})
    (hub / "train" / "x").mkdir(parents=True)
    (hub / "train" / "x" / "a.jpg").write_bytes(generated_jpegs(1)[0])
    m = splitscope.build_manifest(hub)
    assert "content" not in m.columns  # files: the folder reader, as before


def image_table_rows():
    return [("no", "a.jpg", generated_jpegs(1)[0])]


@pytest.mark.parametrize("form", ["parquet", "parquet-no-statistics", "arrow"])
def test_a_table_of_paths_without_bytes_is_refused(tmp_path, form, capsys):
    """Dataset.to_parquet() of a dataset loaded from local files stores paths only: refused
    with one sentence saying how to embed the bytes, never audited as missing rows."""
    rows = [("no", f"img_{i}.jpg", None) for i in range(7)]
    table = image_table(rows)
    path = tmp_path / ("t.arrow" if form == "arrow" else "t.parquet")
    if form == "arrow":
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
    else:
        pq.write_table(table, path, row_group_size=3,
                       write_statistics=form == "parquet")
    with pytest.raises(splitscope.InputError, match=r"no image bytes in any of its 7 rows "
                                                    r"\(paths only, e.g. 'img_0.jpg'\)"):
        read_embedded(path)
    assert cli.main(["audit", str(path), "--out", str(tmp_path / "o")]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if not line.startswith("splitscope audit [")]  # progress lines come first
    assert len(err) == 1 and "save_to_disk" in err[0]
    assert not (tmp_path / "o" / "audit.json").exists()


def test_a_table_with_some_rows_without_bytes_lists_them_as_missing(tmp_path):
    good = generated_jpegs(2)
    pq.write_table(image_table([("no", "a.jpg", good[0]), ("yes", "b.jpg", None)]),
                   tmp_path / "t.parquet")
    m = read_embedded(tmp_path / "t.parquet")
    assert len(m) == 2


@pytest.mark.slow
def test_a_table_of_re_encoded_images_carries_a_warning(tmp_path):
    """PNG bytes under the released .jpg names: the table is not the released files, and the
    summary says so before any rate; the same images as JPEG bytes carry no such warning."""
    from input_builders import decoded, planted_release

    release = planted_release(generated_jpegs(12))
    reencoded = {split: [(label, name, png_bytes(decoded(data))) for label, name, data in rows]
                 for split, rows in release.items()}
    results = {}
    for kind, rel in (("as released", release), ("re-encoded", reencoded)):
        hub = write_hub(tmp_path / kind.replace(" ", "_"), rel)
        results[kind] = splitscope.audit(hub, out_dir=tmp_path / f"out_{kind[:2]}",
                                         options=AuditOptions.from_flags(workers=1, progress=False,
                                                                         layers=["duplicates"],
                                                                         transforms=0))
    warned = [v for v in results["re-encoded"].document["summary"]["verdict"]
              if v.startswith("WARNING") and "re-encoded" in v]
    n = sum(len(rows) for rows in release.values())
    assert len(warned) == 1 and f"{n} of {n} table rows" in warned[0]
    assert "PNG bytes named .jpg" in warned[0]
    table = results["re-encoded"].document["manifest"]["table_images"]
    assert table["formats"] == {"PNG": n} and table["name_format_mismatch"] == n
    clean = results["as released"].document
    assert clean["manifest"]["table_images"]["name_format_mismatch"] == 0
    assert not any("re-encoded" in v for v in clean["summary"]["verdict"])
