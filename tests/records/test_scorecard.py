"""The score card: seven details, each measured from records or marked not reported."""

from __future__ import annotations

from splitscope.core.protocol import scorecard_measures
from splitscope.evaluation.predicates import BALANCED_ACCURACY, THRESHOLD_TRANSFER
from splitscope.provenance.predicates import PARTITION
from splitscope.records import AuditRecord, Uncertainty
from splitscope.records.scorecard import DETAILS, NOT_REPORTED, describe, score_card


def test_seven_details_in_order_all_not_reported_without_records():
    card = score_card([])
    assert [c["key"] for c in card] == [d.key for d in DETAILS]
    assert len(card) == 7
    assert all(c["status"] == NOT_REPORTED and c["value"] == NOT_REPORTED for c in card)


def test_details_filled_from_matching_completed_records_only():
    recs = [
        AuditRecord(id="evaluation.balanced_accuracy.official", layer="evaluation",
                    title="Balanced accuracy (official test)",
                    predicate={"name": BALANCED_ACCURACY}, estimate=0.81,
                    uncertainty=Uncertainty("percentile bootstrap over cases", 0.95, 0.78, 0.84)),
        AuditRecord(id="provenance.partition[test_train]", layer="provenance",
                    title="Partition classifier", predicate={"name": PARTITION},
                    estimate=0.52, conclusion="no detectable shift"),
        AuditRecord(id="evaluation.threshold", layer="evaluation", title="threshold rule",
                    predicate={"name": THRESHOLD_TRANSFER}, status="not assessed",
                    reason="no validation predictions"),
    ]
    card = {c["key"]: c for c in score_card([r.to_dict() for r in recs], scorecard_measures())}
    assert card["imbalance_metric"]["status"] == "measured"
    assert card["imbalance_metric"]["records"] == ["evaluation.balanced_accuracy.official"]
    assert "0.81" in card["imbalance_metric"]["value"]
    assert card["shift_check"]["status"] == "measured"
    assert card["shift_check"]["effect"] == "no detectable shift"
    assert card["threshold"]["status"] == NOT_REPORTED  # its record was not assessed
    assert card["training_policy"]["status"] == NOT_REPORTED


def test_describe_states_rate_with_numerator_denominator_and_unit():
    rec = AuditRecord(id="identity.sha256.t", layer="duplicates", title="Byte copies",
                      unit="affected query row", numerator=25, denominator=200,
                      boundary={"name": "test → train", "query": {"name": "test", "rows": 200},
                                "reference": {"name": "train", "rows": 800}}).to_dict()
    text = describe(rec)
    assert "12.5% (25 of 200 affected query row)" in text and "test → train" in text
    auc = AuditRecord(id="p", layer="provenance", title="AUC", unit="row", numerator=13,
                      denominator=37, estimate=0.21).to_dict()
    assert "= 0.21 (n = 37 row)" in describe(auc)  # an estimate that is not num/den


def test_a_record_measures_a_detail_only_through_its_layer_and_predicate():
    """Words in a title or id do not count: the layer that wrote the record names the
    predicates that measure each detail."""
    worded = AuditRecord(id="evaluation.balanced_accuracy.x", layer="evaluation",
                         title="balanced accuracy, threshold, calibration, partition probe",
                         predicate={"name": "something else"}, estimate=0.8).to_dict()
    card = {c["key"]: c for c in score_card([worded], scorecard_measures())}
    assert all(c["status"] == NOT_REPORTED for c in card.values())
    other = AuditRecord(id="x", layer="another layer", title="t",
                        predicate={"name": BALANCED_ACCURACY}, estimate=0.8).to_dict()
    card = {c["key"]: c for c in score_card([other], scorecard_measures())}
    assert card["imbalance_metric"]["status"] == NOT_REPORTED
    assert score_card([AuditRecord(id="e", layer="evaluation", title="t", predicate={
        "name": BALANCED_ACCURACY}, estimate=0.8).to_dict()])[3]["status"] == NOT_REPORTED
