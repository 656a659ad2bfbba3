"""The published audit schema: it is a valid JSON Schema, it accepts what the code writes and it
rejects what METHODS §6.1 forbids (a count without its denominator, a missing reason)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import jsonschema
import pytest

from splitscope.errors import InputError
from splitscope.records import AuditRecord, Uncertainty
from splitscope.records.schema import (
    SCHEMA_PATH,
    load_schema,
    validate,
    validate_record,
    validation_errors,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from reportkit import document


def test_schema_file_is_packaged_and_valid():
    assert SCHEMA_PATH.name == "audit.schema.json" and SCHEMA_PATH.is_file()
    jsonschema.Draft202012Validator.check_schema(load_schema())


def test_hand_made_document_validates():
    validate(document())


@pytest.mark.parametrize("status", ["partial", "not assessed", "not applicable"])
def test_records_of_every_status_validate(status):
    rec = AuditRecord(id="x", layer="identity", title="t", status=status, reason="because")
    validate_record(rec.to_dict())


def test_completed_record_with_interval_validates():
    rec = AuditRecord(id="x", layer="evaluation", title="BA", estimate=0.8,
                      uncertainty=Uncertainty("percentile bootstrap over cases", 0.95, 0.7, 0.9))
    validate_record(rec.to_dict())


def _record(**changes):
    rec = AuditRecord(id="r", layer="identity", title="t", unit="affected query row",
                      numerator=3, denominator=10).to_dict()
    rec.update(changes)
    return rec


@pytest.mark.parametrize("changes, words", [
    ({"status": "not assessed", "reason": None}, "reason"),
    ({"status": "skipped"}, "status"),
    ({"unit": None}, "unit"),
    ({"denominator": None}, "denominator"),
    ({"numerator": -1}, "numerator"),
    ({"inputs": [{"path": "a.csv", "sha256": "folder"}]}, "sha256"),
    ({"uncertainty": {"low": 0.1, "high": 0.2}}, "uncertainty"),
])
def test_record_violations_are_rejected(changes, words):
    with pytest.raises(InputError):
        validate_record(_record(**changes))


def test_document_violations_are_listed():
    doc = document()
    doc["records"][0]["status"] = "not assessed"  # no reason
    doc["scorecard"] = doc["scorecard"][:6]  # seven details, always
    del doc["artifacts"]
    errors = validation_errors(doc)
    text = "\n".join(errors)
    assert "records/0" in text and "scorecard" in text and "artifacts" in text
    with pytest.raises(InputError, match="does not match the schema"):
        validate(doc)


def test_measured_zero_and_missing_estimate_are_different():
    zero = AuditRecord(id="z", layer="identity", title="t", unit="affected query row",
                       numerator=0, denominator=10).to_dict()
    missing = AuditRecord(id="m", layer="identity", title="t", status="not assessed",
                          reason="no thumbnails").to_dict()
    assert zero["estimate"] == 0.0 and missing["estimate"] is None
    for rec in (zero, missing):
        validate_record(copy.deepcopy(rec))
