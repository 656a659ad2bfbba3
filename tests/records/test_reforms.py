"""The REFORMS checklist read from an audit: all 32 items once, in order; leakage items cite the
duplicates and groups records with the audit's figures; nothing passes without a record; a
layer that did not run leaves its items not assessed; the verb publishes both files."""

from __future__ import annotations

import json
import shutil

import pytest

from splitscope.cli import main
from splitscope.core.conditions import all_metrics
from splitscope.core.options import AuditOptions
from splitscope.core.protocol import scorecard_measures
from splitscope.core.run import audit
from splitscope.errors import InputError
from splitscope.records.model import sha256_file
from splitscope.records.reforms import (
    EVIDENCE,
    ITEMS,
    MODULES,
    NOT_APPLICABLE,
    NOT_ASSESSED,
    REFORMS_JSON,
    REFORMS_MD,
    STATUSES,
    reforms_document,
    reforms_items,
)

#: the checklist's numbering: module → its item letters
NUMBERING = {1: "abc", 2: "abcde", 3: "abcdefg", 4: "abc", 5: "abcdef", 6: "abc", 7: "abc",
             8: "ab"}


@pytest.fixture()
def demo(small_demo):
    """The shared demo audit (tests that write copy its folder)."""
    return small_demo


def _items(doc):
    return {i["id"]: i for i in reforms_items(doc, all_metrics(), scorecard_measures())}


def test_every_item_once_in_order():
    ids = [i.id for i in ITEMS]
    assert ids == [f"{m}{c}" for m, letters in NUMBERING.items() for c in letters]
    assert len(ids) == len(set(ids)) == 32
    assert len(MODULES) == 8 and {i.module for i in ITEMS} == set(MODULES)
    assert all(i.id.startswith(str(i.module)) and i.title for i in ITEMS)


def test_leakage_items_cite_duplicates_and_groups_with_the_audits_figures(demo):
    doc = demo.document
    items = _items(doc)
    assert [i for i in items] == [i.id for i in ITEMS]
    by_id = {r["id"]: r for r in doc["records"]}
    for item_id in ("6a", "6b"):
        cited = items[item_id]["records"]
        assert "duplicates" in {c["layer"] for c in cited}, item_id
        for c in cited:
            r = by_id[c["id"]]
            assert (c["numerator"], c["denominator"], c["estimate"]) == (
                r["numerator"], r["denominator"], r["estimate"])
    assert "groups" in {c["layer"] for c in items["6b"]["records"]}
    # the demo plants copies and shared patients: both items are concerns
    assert items["6a"]["status"] == items["6b"]["status"] == "concern"
    assert {c["layer"] for c in items["6c"]["records"]} >= {"provenance"}
    assert {c["layer"] for c in items["8a"]["records"]} == {"provenance"}
    assert all(c["interval"] for c in items["7b"]["records"]) and items["7b"]["records"]


def test_no_item_passes_without_a_record(demo):
    items = _items(demo.document)
    assert {i["status"] for i in items.values()} <= set(STATUSES)
    for i in items.values():
        if i["status"] == EVIDENCE:
            assert i["records"], i["id"]
        if i["status"] == NOT_APPLICABLE:
            assert not i["records"]
    for item_id in ("1a", "2b", "5e", "8b"):
        assert items[item_id]["status"] == NOT_APPLICABLE


def test_a_groups_only_audit_leaves_duplicates_items_not_assessed(demo, tmp_path):
    res = audit(demo.out_dir.parent / "data", out_dir=tmp_path / "groups",
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["groups"],
                                                group_regex=r"^p(?P<group>\d+)_"))
    items = _items(res.document)
    for item_id in ("6a", "3d"):
        assert items[item_id]["status"] == NOT_ASSESSED, items[item_id]
        assert "duplicates" in items[item_id]["reason"]
    assert {c["layer"] for c in items["6b"]["records"]} == {"groups"}
    assert items["6b"]["status"] != EVIDENCE  # the duplicates layer did not run


def test_the_verb_writes_both_files_and_lists_them(demo, tmp_path):
    out = tmp_path / "audit"
    shutil.copytree(demo.out_dir, out)
    assert main(["reforms", str(out), "--json"]) == 0
    report = json.loads((out / REFORMS_JSON).read_text())
    assert [i["id"] for i in report["items"]] == [i.id for i in ITEMS]
    assert sum(report["statuses"].values()) == 32
    md = (out / REFORMS_MD).read_text()
    assert all(f"| {i.id} " in md for i in ITEMS)
    listed = {a["contentUrl"]: a["sha256"]
              for a in json.loads((out / "artifacts.json").read_text())["distribution"]}
    for name in (REFORMS_JSON, REFORMS_MD, "audit.json", "report.html"):
        assert listed[name] == sha256_file(out / name)
    # run again on the folder that has them: rewritten, not refused
    assert main(["reforms", str(out)]) == 0


def test_another_schema_is_refused(demo, tmp_path, capsys):
    out = tmp_path / "old"
    shutil.copytree(demo.out_dir, out)
    doc = json.loads((out / "audit.json").read_text())
    doc["schema_version"] = "1.0"
    (out / "audit.json").write_text(json.dumps(doc))
    assert main(["reforms", str(out)]) == 2
    assert "schema" in capsys.readouterr().err
    assert not (out / REFORMS_JSON).exists()
    with pytest.raises(InputError):
        reforms_document(doc, all_metrics(), scorecard_measures())


def test_audit_reforms_writes_the_checklist_with_the_audit(demo, tmp_path):
    """``audit --reforms``: the same checklist as the verb on the finished folder, listed in
    artifacts.json, and the option recorded."""
    release = demo.out_dir.parent / "data"
    out = tmp_path / "with-reforms"
    assert main(["audit", str(release), "--out", str(out), "--workers", "1", "--layers",
                 "duplicates,groups", "--transforms", "0", "--reforms", "--json"]) == 0
    doc = json.loads((out / "audit.json").read_text())
    assert doc["options"]["run"]["reforms"] is True
    written = json.loads((out / REFORMS_JSON).read_text())
    assert written["items"] == reforms_document(doc, all_metrics(),
                                                scorecard_measures())["items"]
    listed = {a["contentUrl"]: a["sha256"]
              for a in json.loads((out / "artifacts.json").read_text())["distribution"]}
    assert listed[REFORMS_JSON] == sha256_file(out / REFORMS_JSON)
    assert listed[REFORMS_MD] == sha256_file(out / REFORMS_MD)
