"""The audit on a real release (../shared/data, skipped when absent): the brain-MRI yes/no set
has no official split, so it is audited against itself; it holds byte copies."""

from __future__ import annotations

import json

import pytest

from splitscope.records.schema import validate


@pytest.mark.realdata
@pytest.mark.slow
def test_c3_release_without_split(c3_audit):
    code, out = c3_audit  # the session's default audit of the release
    doc = json.loads((out / "audit.json").read_text(encoding="utf-8"))
    validate(doc)
    assert code == 0
    assert [b["name"] for b in doc["boundaries"]] == ["all rows → all rows"]
    assert doc["manifest"]["rows"] == 253
    byte = next(r for r in doc["records"] if r["id"].startswith("identity.sha256."))
    assert byte["status"] in ("completed", "partial") and byte["denominator"] == 253
    assert byte["numerator"] > 0  # the release holds byte copies
    assert doc["summary"]["verdict"][0].startswith("WARNING: no train/test split was found")
    assert next(v for v in doc["summary"]["verdicts"] if "byte-identical" in v).startswith(
        f"{100 * byte['numerator'] / 253:.3g}% of the release ({byte['numerator']} of 253 rows)")
    groups = next(l for l in doc["layers"] if l["layer"] == "groups")
    assert groups["status"] == "not applicable"  # no group key in this release
    assert (out / "report.html").stat().st_size < 5_000_000
