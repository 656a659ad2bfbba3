"""Image quality and the image-statistics probe on the Kermany chest X-ray release (re-saved at
224×224 RGB by a third party): the quality layer runs in the audit, every file is grey stored as
colour, and intensity statistics alone predict pneumonia within the pool and across the split."""

from __future__ import annotations

import json

import pytest

from splitscope.core.options import AuditOptions

pytestmark = [pytest.mark.realdata, pytest.mark.slow]

KERMANY_ROWS = {("test", "NORMAL"): 234, ("test", "PNEUMONIA"): 390,
                ("train", "NORMAL"): 1341, ("train", "PNEUMONIA"): 3875}


@pytest.fixture(scope="module")
def kermany_audit(shared_data, kermany_workspace, tmp_path_factory):
    from splitscope.core.run import audit

    out = tmp_path_factory.mktemp("kermany-quality")
    res = audit(shared_data / "kermany-chest-xray-224", out_dir=out / "o",
                options=AuditOptions.from_flags(workers=2, progress=False, layers=["quality"],
                                                group_regex=r"person(?P<group>\d+)_",
                                                workspace=str(kermany_workspace)))
    return res, out


def test_quality_layer_runs_in_the_audit_on_kermany(kermany_audit):
    from splitscope.records.schema import validation_errors

    res, _ = kermany_audit
    doc = res.document
    assert res.exit_code == 0
    assert next(l for l in doc["layers"] if l["layer"] == "quality")["status"] == "completed"
    assert validation_errors(json.loads(res.audit_json.read_text())) == []
    recs = {r["id"]: r for r in doc["records"] if r["layer"] == "quality"}
    for rid, r in recs.items():
        if rid == "quality.flag_label_association":
            continue
        cells = {(c["split"], c["label"]): c for c in r["details"]["by_split_class"]}
        assert {k: c["assessed"] for k, c in cells.items()} == KERMANY_ROWS, rid
    grey = recs["quality.grey_as_colour"]
    assert grey["numerator"] == grey["denominator"] == 5840  # RGB files, R = G = B
    for flag in ("dark", "low_contrast", "low_information", "odd_size", "odd_aspect"):
        assert recs[f"quality.{flag}"]["numerator"] == 0, flag  # measured 0 of 5,840 each
    for flag in ("light", "blurry", "large_border"):
        assert recs[f"quality.{flag}"]["numerator"] <= 10, flag  # measured 1, 6, 1
    assoc = recs["quality.flag_label_association"]
    assert assoc["estimate"] < 0.1 and "no flag's rate differs strongly" in assoc["conclusion"]
    listed = (res.out_dir / "lists" / "quality.csv").read_text().splitlines()
    assert len(listed) == 5841
    html = res.report.read_text()
    assert 'data-section="quality-table"' in html and "100% (390 of 390)" in html


def test_image_statistics_predict_pneumonia_within_pool_and_across_split(kermany_audit,
                                                                        kermany_workspace):
    from splitscope.features.scanning import scan
    from splitscope.provenance.checks import audit_provenance

    res, _ = kermany_audit
    sc = scan(res.document["inputs"][0]["path"], kermany_workspace, workers=2,
              progress=False, group_regex=r"person(?P<group>\d+)_")
    recs = {r.id: r for r in audit_provenance(sc, header=False, association=False,
                                              partition=False).records}
    wp = recs["provenance.image_stats_probe.within_pool"]
    cs = recs["provenance.image_stats_probe.cross_split[test_train]"]
    assert wp.denominator == 5840 and cs.denominator == 624
    assert wp.uncertainty.low > 0.8  # measured 0.865 (0.855–0.875)
    assert cs.uncertainty.low > 0.65  # measured 0.785 (0.752–0.819)
    assert cs.estimate < wp.estimate
    assert "intensity_p99" in wp.details["top_fields"][:3]
