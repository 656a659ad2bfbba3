"""The audit on a real release (../shared/data, skipped when absent): the brain-MRI yes/no set
has no official split, so it is audited against itself; it holds byte copies."""

from __future__ import annotations

import pytest

from splitscope.core.options import AuditOptions
from splitscope.core.run import audit
from splitscope.records.schema import validate


@pytest.mark.realdata
@pytest.mark.slow
def test_c3_release_without_split(shared_data, tmp_path):
    res = audit(shared_data / "c3-brain-mri-yes-no", out_dir=tmp_path / "o",
                options=AuditOptions.from_flags(workspace=tmp_path / "ws", progress=False,
                                                layers=["duplicates", "groups"]))
    doc = res.document
    validate(doc)
    assert res.exit_code == 0
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
    assert res.report.stat().st_size < 5_000_000
