"""Manifest: folder layouts, list files, group keys, boundaries."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from splitscope import InputError, build_manifest, read_folder, read_list
from splitscope.boundary import boundary, default_boundaries, select
from splitscope.manifest import MANIFEST_COLUMNS, apply_group_mapping, apply_group_regex


def _touch(root: Path, *rels: str) -> None:
    for rel in rels:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rel.encode())


def test_split_class_layout_recognises_split_names_case_insensitively(tmp_path):
    _touch(tmp_path, "Training/yes/b.jpg", "Training/no/a.jpg", "Testing/yes/c.JPG",
           "Testing/no/d e&f.png", "Validation/no/-g.png")
    m = read_folder(tmp_path)
    assert list(m.columns) == MANIFEST_COLUMNS
    assert m["path"].tolist() == sorted(m["path"].tolist())  # stable code-point order
    assert set(m["split"]) == {"train", "test", "val"}
    assert set(m["split_released"]) == {"Training", "Testing", "Validation"}
    row = m[m["basename"] == "d e&f.png"].iloc[0]
    assert row["path"] == "Testing/no/d e&f.png" and row["label"] == "no"
    assert Path(row["file"]).is_file()
    assert m.attrs["inputs"][0]["layout"] == "split/class/file"
    assert m["row"].tolist() == list(range(5))


def test_class_layout_without_split_and_hidden_files_listed(tmp_path):
    _touch(tmp_path, "yes/Y1.jpg", "no/N1.jpg", "no/.DS_Store", "yes/ü n.jpg", "README.txt")
    m = read_folder(tmp_path, corpus="c3")
    assert len(m) == 3
    assert m["split"].isna().all()
    assert set(m["label"]) == {"yes", "no"}
    assert (m["corpus"] == "c3").all()
    assert [e["path"] for e in m.attrs["excluded"]] == ["no/.DS_Store", "README.txt"]


def test_flat_folder_is_unlabelled(tmp_path):
    _touch(tmp_path, "a.png", "b.png")
    m = read_folder(tmp_path)
    assert m["path"].tolist() == ["a.png", "b.png"] and m["label"].isna().all()
    assert m.attrs["inputs"][0]["layout"] == "flat"


def test_folder_errors(tmp_path):
    with pytest.raises(InputError, match="not a folder"):
        read_folder(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no files"):
        read_folder(tmp_path / "empty")


@pytest.mark.parametrize("fmt", ["csv", "parquet", "xlsx"])
def test_list_formats_keep_order_and_multiplicity(tmp_path, fmt):
    table = pd.DataFrame({
        "image_path": ["b/x.jpg", "a/y.jpg", "b/x.jpg"],  # duplicate row kept
        "Split": ["Training", "testing", "training"],
        "class": ["1", "0", "1"],
        "Dataset": ["KID", "KVASIR", "KID"],
    })
    path = tmp_path / f"list.{fmt}"
    {"csv": table.to_csv, "parquet": table.to_parquet, "xlsx": table.to_excel}[fmt](
        path, index=False)
    m = read_list(path)
    assert m["path"].tolist() == ["b/x.jpg", "a/y.jpg", "b/x.jpg"]
    assert m["split"].tolist() == ["train", "test", "train"]
    assert m["label"].tolist() == ["1", "0", "1"]
    assert m["source"].tolist() == ["KID", "KVASIR", "KID"]
    assert m["file"].iloc[0] == str((tmp_path / "b/x.jpg").absolute())
    assert m.attrs["inputs"][0]["columns"]["path"] == "image_path"


def test_list_explicit_columns_and_errors(tmp_path):
    path = tmp_path / "l.csv"
    pd.DataFrame({"f": ["a.png", "b.png"], "y": ["u", "v"]}).to_csv(path, index=False)
    m = read_list(path, columns={"path": "f", "label": "y"}, split="split_0")
    assert m["label"].tolist() == ["u", "v"] and set(m["split"]) == {"split_0"}
    with pytest.raises(InputError, match=r"column 'nope' \(for label\) missing .*found: f, y"):
        read_list(path, columns={"path": "f", "label": "nope"})
    with pytest.raises(InputError, match="no path column"):
        read_list(path)
    with pytest.raises(InputError, match="unknown column role"):
        read_list(path, columns={"paht": "f"})


@pytest.mark.parametrize("content, message", [
    ("", "empty"),
    ("path,label\n", "no rows"),
    ("path,label\na.png,x\n,y\n", r"1 row\(s\) .* have no path \(first at line\(s\) \[3\]\)"),
    ('path,label\n"a.png,x\n', "cannot read list file"),
])
def test_malformed_lists_give_clear_errors(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        read_list(path)


def test_unsupported_and_missing_list(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(InputError, match="unsupported format .* for list file"):
        read_list(tmp_path / "x.json")
    with pytest.raises(InputError, match="not found"):
        build_manifest(tmp_path / "nope.csv")


def test_windows_separators_and_absolute_paths(tmp_path):
    path = tmp_path / "l.csv"
    absolute = str(tmp_path / "abs.png")
    pd.DataFrame({"path": ["sub\\a.png", absolute]}).to_csv(path, index=False)
    m = read_list(path)
    assert m["path"].iloc[0] == "sub/a.png"
    assert m["file"].iloc[1] == absolute


def test_several_corpora_in_one_manifest(tmp_path):
    _touch(tmp_path, "A/train/c/1.png", "A/test/c/2.png", "B/c/3.png")
    m = build_manifest([tmp_path / "A", tmp_path / "B"])
    assert m["corpus"].tolist() == ["A", "A", "B"]
    assert m["row"].tolist() == [0, 1, 2]
    assert len(m.attrs["inputs"]) == 2


def test_group_regex_with_frame_and_unmatched_rows():
    m = pd.DataFrame({"basename": ["0a1b2c3d4e5f6789_12.jpg", "person7_virus_1.jpeg", "x.jpg"]})
    g = apply_group_regex(m, r"^(?P<group>[0-9a-f]{16})_(?P<frame>\d+)")
    assert g["group"].iloc[0] == "0a1b2c3d4e5f6789" and g["frame"].iloc[0] == 12
    assert g["group"].iloc[1:].isna().all()
    k = apply_group_regex(m, r"person(?P<group>\d+)_")
    assert k["group"].tolist()[1] == "7" and k["group"].isna().sum() == 2
    with pytest.raises(InputError, match="no named group"):
        apply_group_regex(m, r"person(\d+)")
    with pytest.raises(InputError, match="does not compile"):
        apply_group_regex(m, r"person(?P<group>")


def test_group_mapping(tmp_path):
    m = pd.DataFrame({"basename": ["a.png", "b.png", "c.png"]})
    mapped = apply_group_mapping(m, pd.DataFrame({"basename": ["a.png", "b.png"],
                                                  "group": ["p1", "p2"]}))
    assert mapped["group"].tolist()[:2] == ["p1", "p2"] and pd.isna(mapped["group"].iloc[2])
    with pytest.raises(InputError, match="more than one group"):
        apply_group_mapping(m, pd.DataFrame({"basename": ["a.png", "a.png"],
                                             "group": ["p1", "p2"]}))


def test_selectors_and_boundaries(tmp_path):
    _touch(tmp_path, "train/a/1.png", "train/b/2.png", "test/a/3.png", "val/b/4.png")
    m = read_folder(tmp_path)
    assert select(m, "test").rows.tolist() == [0]
    assert select(m, "split=train&label=a").rows.tolist() == [1]
    assert select(m, "split!=train").size == 2
    assert select(m, "*").size == 4
    b = boundary(m, "Testing", "train")
    assert b.to_dict()["query"]["rows"] == 1 and b.to_dict()["reference"]["rows"] == 2
    assert [x.name for x in default_boundaries(m)] == ["test → train", "val → train"]
    with pytest.raises(InputError, match="no rows"):
        boundary(m, "split=holdout", "train")
    with pytest.raises(InputError, match="no column 'site'"):
        select(m, "site=x")


@pytest.mark.realdata
def test_real_lists_and_folders(shared_data):
    index = read_list(shared_data / "cv2024" / "capsule_vision_2024_train_val_index.csv")
    assert len(index) == 53_739
    assert index["split"].value_counts().to_dict() == {"train": 37_607, "val": 16_132}
    kermany = build_manifest(shared_data / "kermany-chest-xray-224")
    counts = kermany.groupby(["split", "label"]).size().to_dict()
    assert counts == {("test", "NORMAL"): 234, ("test", "PNEUMONIA"): 390,
                      ("train", "NORMAL"): 1341, ("train", "PNEUMONIA"): 3875}
    kv = build_manifest(shared_data / "kvasir-capsule-splits" / "split_1.csv", split="split_1")
    kv = apply_group_regex(kv, r"^(?P<group>[0-9a-f]{16})_(?P<frame>\d+)")
    # 24,100 data rows (the data README's 24,099 counts newlines; the last row has none);
    # 8 file names occur twice, with different labels: multiplicity is kept.
    assert len(kv) == 24_100 and kv["group"].notna().all() and kv["frame"].notna().all()
    assert int(kv["path"].duplicated().sum()) == 8


def test_release_without_split_is_one_boundary_against_itself(tmp_path):
    from splitscope.boundary import WITHIN_RELEASE, release_boundaries

    _touch(tmp_path, "yes/a.png", "no/b.png", "no/c.png")
    (b,) = release_boundaries(read_folder(tmp_path))
    assert b.within and b.query.name == WITHIN_RELEASE and b.query.rows.tolist() == [0, 1, 2]
    _touch(tmp_path / "one", "x.png")
    with pytest.raises(InputError, match="nothing to audit"):
        release_boundaries(read_folder(tmp_path / "one"))


def test_a_list_is_parsed_once_per_run_while_unchanged(tmp_path, monkeypatch):
    """The output checks, the audit's check and the scan each read the inputs: a list file is
    parsed once while unchanged, each caller gets its own copy, and a changed file is read
    again."""
    from splitscope.manifest import build, forms

    for name in ("a.png", "b.png"):
        (tmp_path / name).write_bytes(b"x")
    listed = tmp_path / "list.csv"
    listed.write_text("path,split,label\na.png,train,0\nb.png,test,1\n")
    reads = []
    real = forms.input_form

    def counting(path, options):
        form = real(path, options)
        reads.append(str(path))
        return form

    monkeypatch.setattr(build, "input_form", counting)
    first = build.read_input(listed)
    first.loc[0, "label"] = "changed"
    second = build.read_input(listed)
    assert len(reads) == 1 and second.loc[0, "label"] == "0"
    listed.write_text("path,split,label\na.png,train,0\nb.png,test,1\nb.png,val,1\n")
    assert len(build.read_input(listed)) == 3 and len(reads) == 2
    assert len(build.build_manifest(listed)) == 3 and len(reads) == 2
    build.read_input(listed)  # building the manifest ended the run's reuse
    assert len(reads) == 3
