"""The recipe of docs/architecture.md, "Adding an input form", followed from this module alone:
a toy form (a JSON file mapping each split to its listed images) is registered, and the
manifest, the scan, the audit and the output-location rule read it; unregistered, the same
path is refused as before."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from input_builders import generated_jpegs

import splitscope
from splitscope.core.options import AuditOptions
from splitscope.errors import InputError
from splitscope.manifest.forms import (
    InputForm,
    input_forms,
    register_input_form,
    unregister_input_form,
)
from splitscope.manifest.roots import refuse_output_locations
from splitscope.manifest.rows import list_rows

# ----------------------------------------------------------------------------- the toy form


def is_split_json(path: Path, options) -> bool:
    """A ``.json`` file whose object maps split names to lists of ``{path, label}``."""
    if not (path.is_file() and path.suffix.lower() == ".json"):
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and all(isinstance(v, list) for v in data.values())


def read_split_json(path: Path, *, corpus: str | None = None, **options) -> pd.DataFrame:
    """The manifest of a split JSON: its entries are files relative to the JSON's folder, so
    they are rows of a list (``list_rows`` marks paths outside that folder)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    table = pd.DataFrame([{"path": entry["path"], "split": split, "label": entry["label"]}
                          for split, entries in data.items() for entry in entries])
    manifest = list_rows(table, path, corpus=corpus)
    manifest.attrs["inputs"][0]["kind"] = "split_json"
    return manifest


SPLIT_JSON = InputForm("split_json", is_split_json, read_split_json)


@pytest.fixture
def split_json():
    register_input_form(SPLIT_JSON)
    yield SPLIT_JSON
    unregister_input_form(SPLIT_JSON.name)


def _release(tmp_path: Path) -> Path:
    """``release/images/<label>/*.jpg`` and ``release/splits.json``; the last test image is a
    byte copy of the first training image under another name and label."""
    jpegs = generated_jpegs(8)
    root = tmp_path / "release"
    train = [(f"images/{lab}/train{i}.jpg", lab, jpegs[i])
             for i, lab in enumerate(["cat", "dog"] * 3)]
    test = [("images/cat/test0.jpg", "cat", jpegs[6]), ("images/dog/test1.jpg", "dog", jpegs[7]),
            ("images/dog/copy.jpg", "dog", jpegs[0])]
    for rel, _, data in train + test:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    listing = root / "splits.json"
    listing.write_text(json.dumps({
        split: [{"path": rel, "label": lab} for rel, lab, _ in rows]
        for split, rows in (("train", train), ("test", test))}))
    return listing


# ----------------------------------------------------------------------------- the tests


def test_a_registered_form_is_read_and_unregistered_the_path_is_refused_as_before(tmp_path):
    listing = _release(tmp_path)
    with pytest.raises(InputError) as before:
        splitscope.build_manifest(listing)
    register_input_form(SPLIT_JSON)
    try:
        assert input_forms()[0] is SPLIT_JSON  # tried before the built-in forms
        manifest = splitscope.build_manifest(listing)
    finally:
        unregister_input_form(SPLIT_JSON.name)
    assert list(manifest["split"]) == ["train"] * 6 + ["test"] * 3
    assert manifest["label"].tolist()[-3:] == ["cat", "dog", "dog"]
    assert manifest["file"].tolist() == [str(listing.parent / p) for p in manifest["path"]]
    assert manifest["path_issue"].isna().all()
    assert manifest.attrs["inputs"][0]["kind"] == "split_json"
    assert SPLIT_JSON not in input_forms()
    with pytest.raises(InputError) as after:
        splitscope.build_manifest(listing)
    assert str(after.value) == str(before.value)


def test_the_scan_and_the_audit_read_a_registered_form(tmp_path, split_json):
    listing = _release(tmp_path)
    scanned = splitscope.scan(listing, workspace=tmp_path / "ws", workers=1, progress=False)
    rows = scanned.rows()
    assert (rows["status"] == "ok").all()
    assert rows["sha256"].iloc[0] == rows["sha256"].iloc[-1]  # the planted byte copy

    options = AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"])
    splitscope.audit(listing, options, out_dir=tmp_path / "audit")
    doc = json.loads((tmp_path / "audit" / "audit.json").read_text())
    records = {r["id"]: r for r in doc["records"]}
    assert records["identity.sha256.test--train"]["numerator"] == 1


def test_the_output_rule_refuses_an_out_inside_a_registered_forms_release(tmp_path,
                                                                        split_json):
    listing = _release(tmp_path)
    inside = listing.parent / "images" / "cat" / "out"
    options = AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"])
    with pytest.raises(InputError, match="inside the release"):
        splitscope.audit(listing, options, out_dir=inside)
    assert not inside.exists()
    with pytest.raises(InputError, match="inside the release"):
        refuse_output_locations({"inputs": (str(listing),), "out_dir": str(inside)})
    refuse_output_locations({"inputs": (str(listing),), "out_dir": str(tmp_path / "out")})


def test_a_form_whose_name_is_registered_is_refused(split_json):
    forms = input_forms()
    with pytest.raises(ValueError, match="already registered"):
        register_input_form(InputForm("folder", is_split_json, read_split_json))
    with pytest.raises(ValueError, match="already registered"):
        register_input_form(InputForm("split_json", is_split_json, read_split_json))
    with pytest.raises(ValueError, match="already registered"):
        register_input_form(SPLIT_JSON)
    assert input_forms() == forms
