"""Reading the demo's audit: the `splitscope audit` command it records reproduces its records,
and the first figure (what the test split is made of) agrees with the records."""

from __future__ import annotations

import json
import shlex

import pytest

from splitscope.cli import main

_SAME = ("status", "numerator", "denominator", "estimate", "uncertainty", "coverage")


@pytest.fixture()
def demo(small_demo):
    return small_demo


@pytest.mark.slow
def test_the_demo_re_audits_to_itself(demo, tmp_path):
    result = demo
    reproduce = result.document["run"]["reproduce"]
    argv = shlex.split(reproduce)
    assert argv[:2] == ["splitscope", "audit"]
    assert "--dihedral" in argv and "--group-regex" in argv  # what the demo adds
    out = argv.index("--out")
    argv[out + 1] = str(tmp_path / "again")
    assert main(argv[1:] + ["--workers", "1"]) == result.exit_code
    again = json.loads((tmp_path / "again" / "audit.json").read_text())
    mine = {r["id"]: {k: r.get(k) for k in _SAME} for r in result.document["records"]}
    theirs = {r["id"]: {k: r.get(k) for k in _SAME} for r in again["records"]}
    assert mine == theirs and len(mine) > 50
    assert again["summary"]["verdicts"] == result.document["summary"]["verdicts"]
    assert "reproduce" not in again["run"]  # a plain audit records its own command only


def test_the_first_figure_is_the_test_split_composition(demo):
    comp = demo.document["figures"]["test → train"]["composition"]
    n = {c["category"]: c["rows"] for c in comp["categories"]}
    assert sum(n.values()) == comp["rows"]
    recs = {(r.get("predicate") or {}).get("name"): r for r in demo.document["records"]
            if (r.get("boundary") or {}).get("name") == "test → train"}
    assert comp["rows"] == recs["sha256"]["denominator"]
    assert n["byte copy"] == recs["sha256"]["numerator"] > 0
    assert n["byte copy"] + n["pixel-identical"] == recs["pixel_identical_union"]["numerator"]
    near = demo.issues[demo.issues["queried_on"].fillna("").str.contains("test → train")]
    assert n["near twin"] == int((near["ncc_nearest"].fillna(False)
                                  & ~near["pixel_xxh128"].fillna(False)
                                  & ~near["sha256"].fillna(False)).sum())
    assert n["shared group"] > 0 and n["clean"] > 0
    html = (demo.out_dir / "report.html").read_text()
    first = html.index('data-section="composition"')
    assert first < html.index('data-section="verdicts"')
    assert "data:image/png;base64," in html[first:html.index('data-section="verdicts"')]
    assert f"byte copy {n['byte copy']}" in html


@pytest.mark.parametrize("metric, words", [
    ("pixel_identical_rate", "has a pixel-identical copy in train"),
    ("byte_identical_rate", "has a byte-identical copy in train"),
    ("ncc_rate", "has a near-twin in train"),
    ("label_conflict_rate", "LABEL CONFLICT:"),
])
def test_each_summary_figure_is_the_gate_of_the_same_name(demo, metric, words):
    import re

    from splitscope.core.conditions import evaluate_conditions, parse_condition

    line = next(v for v in demo.document["summary"]["verdicts"] if words in v)
    num, den = (int(x.replace(",", "")) for x in
                re.search(r"\(([\d,]+) of ([\d,]+) rows\)", line).groups())
    doc = demo.document
    (out,) = evaluate_conditions([parse_condition(f"{metric}>0")], doc["records"],
                                 doc["layers"], [b["name"] for b in doc["boundaries"]])
    assert out["value"] == pytest.approx(num / den) and out["held"]


def test_the_opening_ranks_every_layer_s_findings_by_one_rule(demo):
    """The demo's planted findings in the method's order: the label conflict first, then
    measured contamination and shortcuts by size (share of rows, or the probe's lower bound
    above chance), then what needs confirming; each share is its gate's value."""
    from splitscope.core.conditions import evaluate_conditions, parse_condition
    from splitscope.records.findings import TIERS

    doc = demo.document
    found = [m for m in doc["findings"] if m["found"]]
    on_test = [m["finding"] for m in found if m["boundary"] == "test → train"]
    assert on_test[:2] == ["label conflicts", "near twins (NCC ≥ τ)"]
    assert {"header shortcut", "pixel-identical copies", "shared groups",
            "byte copies"} <= {m["finding"] for m in found}
    keys = [(TIERS.index(m["tier"]), -m["size"]) for m in found]
    assert keys == sorted(keys)
    for m in found:
        if m["metric"]:
            (gate,) = evaluate_conditions([parse_condition(f"{m['metric']}>0")],
                                          doc["records"], doc["layers"], ["test → train"])
            assert gate["value"] == pytest.approx(m["numerator"] / m["denominator"])
        else:
            assert m["kind"] == "score" and m["low"] > m["baseline"]
    s = doc["summary"]
    test = [m for m in found if m["boundary"] == "test → train"]
    also = next(m for m in test if m["tier"] != "conflict")["phrase"]
    assert s["verdict"][0] == (f"Do not trust a score on test as is: {test[0]['phrase']}; "
                               f"also {also}.")
    assert len(s["verdict"]) == len(doc["boundaries"])  # a line per boundary, no warning
    several = len({m["boundary"] for m in found}) > 1
    assert s["findings"] == [f"{m['boundary']}: {m['sentence']}" if several else m["sentence"]
                             for m in found[:5]]
    assert s["actions"][0].startswith("Resolve the conflicting labels")
    assert len(s["actions"]) == 3 == len(set(s["actions"]))


def test_the_demo_pixel_identical_line_trips_the_gate_at_its_figure(demo, tmp_path):
    """The union line (byte copies and re-encodes) is what ``pixel_identical_rate`` reads: a
    bound below the figure shown holds, one above it does not, and the re-encodes alone are
    their own, smaller figure (``reencode_rate``)."""
    import re

    from splitscope.core.conditions import evaluate_conditions, parse_condition

    doc = demo.document
    line = next(v for v in doc["summary"]["verdicts"]
                if "has a pixel-identical copy in train" in v)
    num, den = (int(x.replace(",", "")) for x in
                re.search(r"\(([\d,]+) of ([\d,]+) rows\)", line).groups())
    share = num / den
    assert share > 0.1
    below, above, alone = evaluate_conditions(
        [parse_condition("pixel_identical_rate>0.1"),
         parse_condition(f"pixel_identical_rate>{share + 1e-9}"),
         parse_condition("reencode_rate>0")], doc["records"], doc["layers"],
        [b["name"] for b in doc["boundaries"]])
    assert below["held"] and below["value"] == pytest.approx(share)
    assert not above["held"]
    assert alone["value"] < share


def test_screens_are_never_findings_nor_contamination(demo):
    """The hash rules and equal file names flag demo rows, but their hits are listed apart
    (lists/screened), never in the contaminated list nor in the gallery, and a hash-only
    conflict is a note, never a finding."""
    import pandas as pd

    from splitscope.relations.predicates import SCREENS

    lists = demo.out_dir / "lists"
    contaminated = pd.read_csv(lists / "contaminated.csv")
    screened = pd.read_csv(lists / "screened.csv")
    assert not set(contaminated["predicate"]) & set(SCREENS)
    assert set(screened["predicate"]) <= set(SCREENS) and len(screened)
    assert {"sha256", "pixel_xxh128", "ncc_nearest"} <= set(contaminated["predicate"])
    assert not [g for g in demo.document["gallery"] if g["band"] == "below τ"]
    assert demo.document["figures"]["test → train"]["gallery"]["bands"]["below τ"]["shown"] == 0


def test_a_clean_boundary_says_what_ran_and_what_did_not():
    """Nothing found: the line names the checks that ran and the layers that did not run or
    ran in part; nothing measured: it says the audit cannot tell."""
    from splitscope.core.verdicts import measured_findings, verdict

    b = {"name": "test → train", "query": {"name": "test", "rows": 10},
         "reference": {"name": "train", "rows": 20}}
    zero = {"id": "identity.sha256.test--train", "layer": "duplicates", "status": "completed",
            "boundary": {"name": b["name"]}, "numerator": 0, "denominator": 10,
            "estimate": 0.0, "unit": "affected query row", "predicate": {"name": "sha256"}}
    layers = [{"layer": "duplicates", "status": "completed"},
              {"layer": "groups", "status": "not applicable",
               "reason": "no group keys: the release has none"},
              {"layer": "provenance", "status": "partial", "reason": "2 of 7 records (…)"}]
    doc = {"records": [zero], "boundaries": [b], "layers": layers,
           "options": {"search": {"tau": 0.98}}}
    measured = measured_findings(doc)
    assert [(m["finding"], m["found"]) for m in measured] == [("byte copies", False)]
    assert verdict(doc, measured) == [(
        "No contamination of test by train found by the checks that ran (byte copies); not "
        "checked: groups (no group keys); provenance (in part: 2 of 7 records).")]
    nothing = {**doc, "records": []}
    (line,) = verdict(nothing, measured_findings(nothing))
    assert line.startswith("Nothing was measured on test against train, so this audit cannot "
                           "say whether a score on test can be trusted")
