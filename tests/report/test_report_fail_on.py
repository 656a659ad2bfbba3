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
