"""The Hugging Face dataset card of an audit: it loads with huggingface_hub, every figure in it
is the audit record it names, ``--append`` keeps the rest of a card byte for byte, and
``audit --card`` publishes it with the audit."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from splitscope.cli import main
from splitscope.core.conditions import all_metrics
from splitscope.core.options import AuditOptions
from splitscope.core.protocol import declared, record_roles
from splitscope.core.run import audit
from splitscope.records.card import BEGIN, CARD_FILE, END, card_text
from splitscope.records.format import percent_of
from splitscope.records.model import sha256_file
from splitscope.records.paths import published_command

_ROW = re.compile(r"^\| (?P<what>[^|]+) \| (?P<num>[\d,]+) \| (?P<den>[\d,]+) \| "
                  r"(?P<share>[^|]+) \| (?P<rest>.*)`(?P<id>[^`]+)` \|$", re.MULTILINE)
_EXISTING = ("---\nlicense: cc-by-4.0\ntags:\n- medical\n- x-ray\n---\n\n# My release\n\n"
             "Images of lesions and normal tissue.\n\n## Citation\n\n@misc{mine}\n")


@pytest.fixture(scope="module")
def demo(demo_audit, tmp_path_factory):
    """The demo audit, then ``splitscope card`` on its finished folder (a copy)."""
    folder = tmp_path_factory.mktemp("card")
    out = folder / "demo"
    shutil.copytree(demo_audit.out_dir, out)  # names its release by the release's own root
    shutil.copytree(demo_audit.out_dir.parent / "data", folder / "data")  # audited afresh
    assert main(["card", str(out)]) == 0
    return out


def _doc(out: Path) -> dict:
    return json.loads((out / "audit.json").read_text(encoding="utf-8"))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _check_figures(out: Path) -> list[re.Match]:
    """Every table row of the card is the record it names: numerator, denominator, share;
    the verdict, findings, actions and notes are audit.json's; the dedup lists are the ones artifacts.json lists."""
    doc, text = _doc(out), (out / CARD_FILE).read_text(encoding="utf-8")
    records = {r["id"]: r for r in doc["records"]}
    rows = list(_ROW.finditer(text))
    assert rows
    for row in rows:
        r = records[row["id"]]
        assert (_int(row["num"]), _int(row["den"])) == (r["numerator"], r["denominator"]), row[0]
        assert row["share"].strip() == percent_of(r["numerator"], r["denominator"])
    s = doc["summary"]
    assert s["verdict"]
    for line in s["verdict"] + s["findings"] + s["actions"] + s["notes"]:
        assert f"- {line}\n" in text
    listed = {a["contentUrl"] for a in json.loads((out / "artifacts.json").read_text())[
        "distribution"]}
    for path in re.findall(r"`(lists/dedup/[^`]+)`", text):
        assert path in listed
    reproduce = doc["run"].get("reproduce") or doc["run"].get("command")
    if reproduce:  # its paths by their names: the card names no folder of this machine
        assert f"```\n{published_command(reproduce)}\n```" in text
        assert str(out.parent) not in text and "../" not in text
    else:
        assert "recorded no command line" in text
    assert f"splitscope version: {doc['software']['splitscope']}." in text
    return rows


def test_it_loads_with_huggingface_hub(demo):
    hub = pytest.importorskip("huggingface_hub")
    text = (demo / CARD_FILE).read_text(encoding="utf-8")
    for card in (hub.DatasetCard(text), hub.DatasetCard.load(demo / CARD_FILE)):
        meta = card.data.to_dict()
        assert meta == {"task_categories": ["image-classification"],
                        "size_categories": ["n<1K"], "tags": ["splitscope-audit"]}
        assert "## Train/test contamination" in card.text


def test_every_figure_is_the_record_it_names(demo):
    rows = _check_figures(demo)
    doc = _doc(demo)
    found = {row["id"]: row for row in rows}
    for rid in ("identity.sha256.test--train", "identity.pixel_identical_union.test--train",
                "near_duplicate.ncc_nearest.test--train", "group.overlap[test_train]",
                "near_duplicate.dedup_split.test--train"):
        assert rid in found, rid
    # no negative control was given: the pixel predicate is marked uncalibrated
    assert "uncalibrated" in found["near_duplicate.ncc_nearest.test--train"]["rest"]
    assert "uncalibrated" not in found["identity.sha256.test--train"]["rest"]
    assert "`lists/dedup/test_kept.csv`" in found["near_duplicate.dedup_split.test--train"][0]
    assert f"τ = {doc['options']['search']['tau']}" in (demo / CARD_FILE).read_text()


def test_the_verb_lists_it_and_leaves_the_audit_as_it_was(demo):
    artifacts = json.loads((demo / "artifacts.json").read_text())["distribution"]
    digests = {a["contentUrl"]: a["sha256"] for a in artifacts}
    assert digests[CARD_FILE] == sha256_file(demo / CARD_FILE)
    assert digests["audit.json"] == sha256_file(demo / "audit.json")
    assert "lists/manifest.csv" in digests


def test_append_keeps_the_rest_of_a_card_and_replaces_its_section(demo, tmp_path):
    card = tmp_path / "README.md"
    card.write_bytes(_EXISTING.encode())
    assert main(["card", str(demo), "--append", str(card)]) == 0
    once = card.read_bytes().decode()
    front, body = once.split("\n---\n", 1)
    old_front, old_body = _EXISTING.split("\n---\n", 1)
    assert front.startswith(old_front)  # the keys it had, byte for byte, then the ones added
    assert front[len(old_front):] == ("\ntask_categories:\n- image-classification\n"
                                      "size_categories:\n- n<1K")
    assert body.startswith(old_body) and body.count(BEGIN) == 1
    section = (demo / CARD_FILE).read_text()
    assert section[section.index(BEGIN):] in body
    hub = pytest.importorskip("huggingface_hub")
    assert hub.DatasetCard.load(card).data.to_dict()["tags"] == ["medical", "x-ray"]

    # text after the section survives, and a second run replaces the section in place
    card.write_bytes((once + "\n## More\n\nkept\n").encode())
    assert main(["card", str(demo), "--append", str(card)]) == 0
    assert card.read_bytes().decode() == once + "\n## More\n\nkept\n"
    assert card.read_text().count(BEGIN) == card.read_text().count(END) == 1


def test_append_to_a_card_without_front_matter_gives_it_one(demo, tmp_path):
    card = tmp_path / "README.md"
    card.write_bytes(b"# Plain\r\n\r\nno metadata\r\n")
    assert main(["card", str(demo), "--append", str(card)]) == 0
    text = card.read_bytes().decode()
    assert text.startswith("---\ntask_categories:\n")
    assert "# Plain\r\n\r\nno metadata\r\n" in text


@pytest.mark.slow
def test_audit_card_publishes_it(demo, tmp_path):
    res = audit(demo.parent / "data", out_dir=tmp_path / "carded",
                options=AuditOptions.from_flags(workers=1, progress=False,
                                                layers=["duplicates", "groups"],
                                                group_regex=r"^p(?P<group>\d+)_", card=True))
    out = res.out_dir
    artifacts = json.loads((out / "artifacts.json").read_text())["distribution"]
    digests = {a["contentUrl"]: a["sha256"] for a in artifacts}
    assert digests[CARD_FILE] == sha256_file(out / CARD_FILE)
    doc = _doc(out)
    assert doc["options"]["run"]["card"] is True
    assert (out / CARD_FILE).read_text(encoding="utf-8") == card_text(
        doc, declared("findings"), all_metrics(), roles=record_roles())
    _check_figures(out)


def test_an_audit_of_another_schema_is_refused(demo, tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    doc = _doc(demo)
    doc["schema_version"] = "1.0"
    (out / "audit.json").write_text(json.dumps(doc))
    assert main(["card", str(out)]) == 2
    assert not (out / CARD_FILE).exists()
    assert main(["card", str(tmp_path)]) == 2  # no audit at all


@pytest.mark.realdata
@pytest.mark.slow
def test_kermany_card(kermany_audit):
    hub = pytest.importorskip("huggingface_hub")
    out = kermany_audit
    rows = _check_figures(out)
    assert len({row["id"] for row in rows}) == len(rows)
    card = hub.DatasetCard.load(out / CARD_FILE)
    assert card.data.to_dict()["size_categories"] == ["1K<n<10K"]
    assert card.data.to_dict()["task_categories"] == ["image-classification"]
