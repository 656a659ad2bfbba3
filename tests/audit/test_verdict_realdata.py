"""The verdict on real releases (../shared/data, skipped when absent): what a default audit
says first, and in which order it ranks every layer's findings."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from splitscope.cli import main
from splitscope.records.findings import TIERS

pytestmark = [pytest.mark.realdata, pytest.mark.slow]


def _audit(tmp_path, *args: str) -> dict:
    out = tmp_path / "audit"
    assert main(["audit", *args, "--out", str(out), "--workers", "2"]) == 0
    doc = json.loads((out / "audit.json").read_text())
    doc["out"] = out
    return doc


def _ranked(doc: dict) -> list[dict]:
    found = [m for m in doc["findings"] if m["found"]]
    keys = [(TIERS.index(m["tier"]), -m["size"]) for m in found]
    assert keys == sorted(keys)  # one rule over every layer
    assert doc["summary"]["findings"] == [m["sentence"] for m in found[:5]]
    return found


@pytest.fixture(scope="module")
def kermany(shared_data, kermany_workspace, tmp_path_factory):
    """The default audit of the Kermany copy: no group flag, every layer that applies (the
    session's Kermany feature cache)."""
    return _audit(tmp_path_factory.mktemp("kermany"),
                  str(shared_data / "kermany-chest-xray-224"), "--croissant", "--workspace",
                  str(kermany_workspace))


def test_kermany_opens_with_the_header_shortcut_and_the_proposed_person_key(kermany):
    found = _ranked(kermany)
    header = found[0]
    assert header["finding"] == "header shortcut" and header["boundary"] == "test → train"
    assert (round(header["estimate"], 3), round(header["low"], 3), round(header["high"], 3)) \
        == (0.740, 0.705, 0.777)
    proposed = next(m for m in found if m["finding"] == "proposed group key")
    assert (proposed["numerator"], proposed["denominator"], proposed["tier"]) == (
        320, 390, "indication")
    assert proposed["regex"].startswith("person(?P<group>")
    (line,) = kermany["summary"]["verdict"]
    assert line.startswith("Do not trust a score on test as is: file headers alone predict "
                           "the label (balanced accuracy 0.740 [0.705, 0.777], chance 0.5)")
    assert "person(?P<group>" in line and "(320 of 390)" in line and "unconfirmed" in line
    # the hash rules' label-conflict hits are a note, not a finding
    assert not any(m["finding"] == "label conflicts" for m in found)
    assert any(n.startswith("Hash rules alone link") for n in kermany["summary"]["notes"])
    assert all(g["band"] != "below τ" for g in kermany["gallery"])
    assert kermany["figures"]["test → train"]["gallery"]["bands"]["below τ"]["flagged"] > 0


def test_c3_without_a_split_ranks_its_copies_inside_the_release(c3_audit):
    code, out = c3_audit  # the session's default audit of the release
    assert code == 0
    doc = json.loads((out / "audit.json").read_text())
    first, second = doc["summary"]["verdict"]
    assert first.startswith("WARNING: no train/test split was found")
    found = _ranked(doc)
    assert [m["finding"] for m in found[:3]] == ["near twins (NCC ≥ τ)", "byte copies",
                                                 "pixel-identical copies"]
    byte = next(r for r in doc["records"] if r["id"].startswith("identity.sha256."))
    assert (found[1]["numerator"], found[1]["denominator"]) == (byte["numerator"], 253)
    assert second.startswith("Do not trust a score on any split drawn from this release as "
                             f"is: {found[0]['phrase']}")


def test_cv2024_paths_only_finds_every_kvasir_video_on_both_sides(shared_data, tmp_path):
    """The index without its images: what the names say. Every Kvasir-Capsule frame of the
    validation split comes from a video that also has training frames."""
    doc = _audit(tmp_path, str(shared_data / "cv2024" / "capsule_vision_2024_train_val_index.csv"),
                 "--paths-only", "--group-regex", r"^(?P<group>[0-9a-f]{16})_\d+\.jpg$")
    first, line = doc["summary"]["verdict"]
    assert first.startswith("Paths only (--paths-only): 53,739 of 53,739 listed files")
    (shared,) = _ranked(doc)
    index = pd.read_csv(shared_data / "cv2024" / "capsule_vision_2024_train_val_index.csv")
    video = index["filename"].str.extract(r"^([0-9a-f]{16})_\d+\.jpg$")[0]
    val = video[(index["split"] == "validation") & video.notna()]
    trained = set(video[(index["split"] == "training") & video.notna()])
    assert (shared["finding"], shared["numerator"], shared["denominator"]) == (
        "shared groups", int(val.isin(trained).sum()), len(val))
    assert len(val) == 11_581 and shared["numerator"] == len(val)
    assert line == f"Do not trust a score on val as is: {shared['phrase']}."
    label = next(r for r in doc["records"]
                 if r["id"] == "identity.label_conflict_sha256.val--train")
    assert label["status"] == "not assessed"  # no file read: no zero over nothing


def test_nothing_readable_without_paths_only_stops(shared_data, tmp_path, capsys):
    code = main(["audit", str(shared_data / "cv2024" / "capsule_vision_2024_train_val_index.csv"),
                 "--out", str(tmp_path / "o")])
    assert code == 2
    assert "pass --paths-only" in capsys.readouterr().err


def test_kermany_publishes_no_folder_of_this_machine(kermany, shared_data):
    """croissant.json, the lists and the report's pairs name files relative to the release
    root; audit.json records the root once, in manifest.roots."""
    root = str((shared_data / "kermany-chest-xray-224").resolve())
    out = kermany["out"]
    published = [out / "croissant.json", *sorted((out / "lists").rglob("*.csv"))]
    assert len(published) > 20
    for path in published:
        text = path.read_text(encoding="utf-8")
        assert root not in text and "../" not in text, path
    assert all(root not in json.dumps(g) for g in kermany["gallery"])
    assert list(kermany["manifest"]["roots"].values()) == [root]
