"""--fail-on: parsing, the metric table, and holding exactly when the condition holds."""

from __future__ import annotations

import pytest
from reportkit import boundary, records

from splitscope.core.conditions import all_metrics, evaluate_conditions, parse_condition
from splitscope.errors import InputError


def test_parse_condition_forms():
    c = parse_condition(" ncc_rate >= 0.01 ")
    assert (c.metric, c.op, c.threshold) == ("ncc_rate", ">=", 0.01)
    assert parse_condition("ncc_rate>1.5%").threshold == pytest.approx(0.015)
    assert parse_condition("byte_identical_rows!=0").op == "!="


@pytest.mark.parametrize("text", ["ncc_rate", "ncc_rate>>1", "ncc_rate>abc", "", "> 1"])
def test_malformed_condition(text):
    with pytest.raises(InputError, match="metric op value"):
        parse_condition(text)


def test_unknown_metric_lists_the_valid_names():
    with pytest.raises(InputError) as err:
        parse_condition("ncc_ratio>0")
    for name in all_metrics():
        assert name in str(err.value)


def _eval(cond, recs=None, layers=()):
    recs = [r.to_dict() for r in (recs if recs is not None else records())]
    return evaluate_conditions([parse_condition(cond)], recs, layers)[0]


@pytest.mark.parametrize("cond, held", [
    ("ncc_rate>0.125", False), ("ncc_rate>=0.125", True), ("ncc_rate<0.125", False),
    ("ncc_rate<=0.125", True), ("ncc_rate==0.125", True), ("ncc_rate!=0.125", False),
    ("ncc_rate>0.01", True), ("ncc_rows>24", True), ("ncc_rows>25", False),
    ("byte_identical_rate>0", True), ("byte_identical_rate>1.5%", False),
    ("byte_identical_rows>=3", True), ("group_overlap_rate>0.06", True),
    ("header_probe_ba>0.7", True), ("header_probe_ba>0.81", False),
    ("partition_auc>0.6", False),
])
def test_condition_holds_exactly_when_true(cond, held):
    # hand-made records: ncc 25/200 = 0.125, sha256 3/200, group 10/150, header BA 0.81
    recs = records()
    recs[0].predicate = {"name": "sha256", "params": {}}
    recs[1].predicate = {"name": "ncc_nearest", "params": {}}
    out = _eval(cond, recs)
    assert out["held"] is held
    assert out["records"]


def test_unmeasured_metric_does_not_hold_and_says_so():
    out = _eval("containment_rate>0")
    assert out["value"] is None and out["held"] is False and out["records"] == []
    assert out["outcome"] == "not measured"
    assert out["reason"].startswith("no completed record of containment_byte_or_ncc")


@pytest.mark.parametrize("cond, outcome", [("ncc_rate>0.01", "held"),
                                           ("ncc_rate>0.5", "not held")])
def test_a_measured_outcome_says_held_or_not_held_and_has_no_reason(cond, outcome):
    recs = records()
    recs[1].predicate = {"name": "ncc_nearest", "params": {}}
    out = _eval(cond, recs)
    assert out["outcome"] == outcome and "reason" not in out


def test_an_unmeasured_metric_names_its_idle_layer_or_its_record():
    layers = [{"layer": "duplicates", "status": "not assessed", "records": 1,
               "duration_s": 0.0, "reason": "not requested (layers= option)"}]
    out = _eval("ncc_rate>0", [], layers)
    assert out["reason"] == "layer duplicates not assessed: not requested (layers= option)"
    recs = records()
    recs[1].predicate = {"name": "ncc_nearest", "params": {}}
    recs[1].status, recs[1].reason = "not assessed", "no thumbnails"
    out = _eval("ncc_rate>0", recs, [{**layers[0], "status": "partial", "reason": None}])
    assert out["reason"] == f"record {recs[1].id} not assessed: no thumbnails"


@pytest.mark.parametrize("allow, says", [
    (False, "not measured → the gate fails (exit 5): layer duplicates not assessed"),
    (True, "not measured → the gate does not fail (--allow-unmeasured): layer duplicates"),
])
def test_the_outcome_line_says_an_unmeasured_gate_fails_unless_allowed(allow, says):
    from reportkit import document

    from splitscope.core.conditions import fail_on_lines

    doc = document(fail_on=["ncc_rate>0", "byte_identical_rate>0"])
    doc["layers"][0].update(status="not assessed", reason="not requested (layers= option)")
    doc["fail_on"] = evaluate_conditions(
        [parse_condition(c["condition"]) for c in doc["fail_on"]], doc["records"],
        doc["layers"])
    doc["options"]["run"]["allow_unmeasured"] = allow
    first, second = fail_on_lines(doc)
    assert first.startswith(f"--fail-on ncc_rate>0: {says}")
    assert second.startswith("--fail-on byte_identical_rate>0: not measured")


@pytest.mark.parametrize("held, crashed, unmeasured, allow, code", [
    (False, False, False, False, 0), (True, False, False, False, 1),
    (False, True, False, False, 3), (False, False, True, False, 5),
    (False, False, True, True, 0), (True, True, True, False, 1),
    (False, True, True, False, 3), (True, False, True, False, 1),
    (False, True, True, True, 3),
])
def test_exit_code_precedence(held, crashed, unmeasured, allow, code):
    from splitscope.core.run import exit_code

    fail_on = [{"held": held, "value": 1.0 if held else 0.0}]
    if unmeasured:
        fail_on.append({"held": False, "value": None})
    layers = [{"layer": "x", "status": "not assessed" if crashed else "completed",
               "reason": "layer error: RuntimeError: boom" if crashed else None}]
    assert exit_code(fail_on, layers, allow_unmeasured=allow) == code


def test_not_completed_and_control_records_are_not_read():
    recs = records()
    recs[1].predicate = {"name": "ncc_nearest", "params": {}}
    recs[1].status, recs[1].reason = "not assessed", "no thumbnails"
    assert _eval("ncc_rate>0", recs)["value"] is None
    recs = records()
    recs[1].predicate = {"name": "ncc_nearest", "params": {}}
    recs[1].details["role"] = "control"
    assert _eval("ncc_rate>0", recs)["value"] is None


def test_worst_boundary_counts():
    a = records(boundary("test", "train"))[1]
    b = records(boundary("val", "train"))[1]
    a.predicate = b.predicate = {"name": "ncc_nearest", "params": {}}
    b.numerator = 100
    b.estimate = 0.5
    out = _eval("ncc_rate>0.4", [a, b])
    assert out["value"] == 0.5 and out["held"]


def test_layers_not_assessed_counts_layers():
    layers = [{"layer": "duplicates", "status": "completed"},
              {"layer": "groups", "status": "not assessed"},
              {"layer": "evaluation", "status": "not applicable"}]
    assert _eval("layers_not_assessed>0", layers=layers)["value"] == 1.0
