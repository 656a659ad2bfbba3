"""Image-quality flags (METHODS §4.6) and the image-statistics probe (§4.5) on planted
releases: each planted copy is flagged by its rule, clean controls are not; a class that is
systematically darker is found by the probe, a clean release is not."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from quality_helpers import PLANTED, class_release, planted_release

from splitscope.errors import InputError
from splitscope.features.scanning import scan
from splitscope.provenance.checks import audit_provenance
from splitscope.provenance.options import QualityParams
from splitscope.provenance.quality import (
    FLAGS,
    flag_label_association,
    quality_flags,
    quality_rates,
    quality_table,
)
from splitscope.provenance.quality_records import audit_quality

FLAG_NAMES = [f.name for f in FLAGS]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    base = tmp_path_factory.mktemp("quality")
    kinds = planted_release(base / "rel")
    sc = scan(base / "rel", base / "ws", workers=1, progress=False)
    return sc, kinds, base


@pytest.fixture(scope="module")
def flags(planted):
    sc, kinds, _ = planted
    table = quality_flags(sc)
    table["kind"] = table["path"].map(kinds)
    assert table["kind"].notna().all()
    return table


@pytest.mark.slow
@pytest.mark.parametrize("flag", sorted(PLANTED))
def test_each_planted_copy_is_flagged_by_its_rule(flags, flag):
    row = flags[flags["kind"] == flag].iloc[0]
    assert bool(row[flag]), (flag, row[f"{flag}_score"])


@pytest.mark.parametrize("flag", FLAG_NAMES)
def test_clean_controls_are_not_flagged(flags, flag):
    clean = flags[flags["kind"] == "clean"]
    assert len(clean) == 49
    assert clean[flag].notna().all()
    assert not clean[flag].any(), clean.loc[clean[flag].astype(bool), ["path", f"{flag}_score"]]


def test_each_planted_copy_trips_only_related_flags(flags):
    # a darkened image also has little contrast; a 40×40 copy is upsampled to the 96² blur
    # grid, so it has no detail at that scale either
    related = {"dark": {"dark", "low_contrast"}, "odd_size": {"odd_size", "blurry"},
               "large_border": {"large_border"}, "blurry": {"blurry"},
               "odd_aspect": {"odd_aspect"}, "grey_as_colour": {"grey_as_colour"}}
    for kind, allowed in related.items():
        row = flags[flags["kind"] == kind].iloc[0]
        tripped = {f for f in FLAG_NAMES if bool(row[f])}
        assert kind in tripped and tripped <= allowed, (kind, tripped)


def test_quality_table_is_one_line_per_manifest_row_with_scores(planted, flags):
    sc, _, _ = planted
    assert flags["row"].tolist() == sc.manifest["row"].tolist()
    for f in FLAG_NAMES:
        assert str(flags[f].dtype) == "boolean" and f"{f}_score" in flags
    rules = flags.attrs["rules"]
    assert rules["dark"]["rule"] == "mean grey level < 40"
    assert rules["odd_size"]["cut"] == pytest.approx(np.log(2))  # σ̂ = 0: the minimum factor


def test_rates_per_split_and_class_with_denominators(flags):
    rates = quality_rates(flags)
    cell = rates[(rates["flag"] == "dark") & (rates["split"] == "test") & (rates["label"] == "A")]
    assert cell[["rows", "assessed", "flagged"]].iloc[0].tolist() == [18, 18, 1]
    assert cell["rate"].iloc[0] == pytest.approx(1 / 18)
    assert set(rates["flag"]) == set(FLAG_NAMES)
    assert (rates.groupby("flag")["rows"].sum() == len(flags)).all()


def test_layer_records_state_rate_unit_and_denominator(planted):
    sc, _, _ = planted
    res = audit_quality(sc)
    by_id = {r.id: r for r in res.records}
    dark = by_id["quality.dark"]
    assert (dark.numerator, dark.denominator, dark.unit) == (1, len(sc.manifest), "row")
    assert "5.56% of test/A (1 of 18 rows)" in dark.conclusion
    assert "0% of train/B (0 of 13 rows)" in dark.conclusion
    assert dark.predicate["params"]["dark_mean"] == 40.0
    cells = dark.details["by_split_class"]
    assert {(c["split"], c["label"]) for c in cells} == {
        ("test", "A"), ("test", "B"), ("train", "A"), ("train", "B")}
    assert res.tables["quality"]["row"].tolist() == sc.manifest["row"].tolist()
    for f in FLAG_NAMES:
        json.dumps(by_id[f"quality.{f}"].to_dict())


def test_a_flag_that_follows_the_class_is_called_a_shortcut_hint(tmp_path):
    from PIL import ImageOps
    from quality_helpers import base_image

    rng = np.random.default_rng(3)
    for split in ("train", "test"):
        for lab in ("A", "B"):
            d = tmp_path / "rel" / split / lab
            d.mkdir(parents=True)
            for i in range(15):
                img = base_image(rng)
                if lab == "B" and i < 10:  # two thirds of class B padded, none of A
                    img = ImageOps.expand(img, border=30, fill=0).resize(img.size)
                img.save(d / f"{i}.png")
    sc = scan(tmp_path / "rel", tmp_path / "ws", workers=1, progress=False)
    rec = {r.id: r for r in audit_quality(sc).records}["quality.flag_label_association"]
    assert rec.estimate > 0.6
    assert "large_border differs strongly between classes" in rec.conclusion
    assert "66.7% of B" in rec.conclusion and "0% of A" in rec.conclusion
    assoc = flag_label_association(audit_quality(sc).tables["quality"])
    v = assoc.set_index("flag")["cramers_v"]
    assert v["large_border"] == pytest.approx(rec.estimate)
    assert np.isnan(v["dark"])  # never flagged: no association to measure


def test_undecodable_files_are_counted_not_dropped(tmp_path):
    class_release(tmp_path / "rel", n=5)
    (tmp_path / "rel/test/A/broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    sc = scan(tmp_path / "rel", tmp_path / "ws", workers=1, progress=False)
    res = audit_quality(sc)
    dark = {r.id: r for r in res.records}["quality.dark"]
    assert dark.status == "partial" and dark.denominator == 20
    assert dark.coverage["total"] == 21 and "1 row(s) without the score" in dark.reason
    t = res.tables["quality"]
    assert t.loc[t["path"].str.endswith("broken.png"), FLAG_NAMES].isna().all(axis=None)


def test_bad_inputs_give_clear_errors():
    with pytest.raises(InputError, match="intensity_mean"):
        quality_table(pd.DataFrame({"row": [0], "split": ["train"]}))
    with pytest.raises(InputError, match="finite number"):
        QualityParams(dark_mean=float("nan"))
    with pytest.raises(InputError, match="below light_mean"):
        QualityParams(dark_mean=220)
    with pytest.raises(InputError, match="≥ 1"):
        QualityParams(size_factor=0.5)
    with pytest.raises(InputError, match="Scan or a row table"):
        quality_flags(42)
    rec = audit_quality(pd.DataFrame({"row": [0], "split": ["train"], "label": ["a"],
                                      "path": ["x.png"]})).records
    assert [r.status for r in rec] == ["not assessed"] and "image statistics" in rec[0].reason


# ---------------------------------------------------------------- image-statistics probe


def _probe(tmp_path, dark_class):
    class_release(tmp_path / "rel", n=40, dark_class=dark_class)
    sc = scan(tmp_path / "rel", tmp_path / "ws", workers=1, progress=False)
    res = audit_provenance(sc, header=False, association=False, partition=False,
                           n_resamples=500, importance_repeats=3)
    return {r.id: r for r in res.records}, res


@pytest.mark.slow
def test_probe_finds_a_class_that_is_systematically_darker(tmp_path):
    recs, res = _probe(tmp_path, "A")
    wp = recs["provenance.image_stats_probe.within_pool"]
    cs = recs["provenance.image_stats_probe.cross_split[test_train]"]
    for r in (wp, cs):
        assert r.estimate > 0.9 and r.uncertainty.low > r.details["chance"] == 0.5
        assert r.details["top_fields"][0] in ("intensity_mean", "intensity_p99",
                                             "intensity_std", "intensity_p01")
    assert wp.denominator == 160 and cs.denominator == 80
    assert "acquisition shortcut" in wp.conclusion
    assert wp.predicate["name"] == "image-statistics probe (within pool)"
    assert "header" not in json.dumps(wp.predicate).lower()
    assert set(res.tables) >= {"image_stats_probe_within_pool", "image_stats_probe_importance",
                               "image_stats_probe_cross_test_train"}


@pytest.mark.slow
def test_probe_on_a_clean_release_is_near_chance(tmp_path):
    recs, _ = _probe(tmp_path, None)
    for rid in ("provenance.image_stats_probe.within_pool",
                "provenance.image_stats_probe.cross_split[test_train]"):
        r = recs[rid]
        assert abs(r.estimate - 0.5) < 0.15, r.estimate
        assert r.uncertainty.low < 0.5 < r.uncertainty.high
        assert "do not predict" in r.conclusion or "fit on the reference side" in r.conclusion


def test_probe_without_statistics_is_not_assessed():
    rows = pd.DataFrame({"row": [0, 1], "split": ["train", "test"], "label": ["a", "b"],
                         "path": ["x", "y"]})
    res = audit_provenance(rows, header=False, association=False, partition=False)
    rec = res.records[0]
    assert rec.id == "provenance.image_stats_probe.within_pool"
    assert rec.status == "not assessed" and "image statistics" in rec.reason


def test_feature_matrix_uses_only_the_statistics():
    from splitscope.provenance.image_stats_probe import image_stats_feature_matrix

    t = pd.DataFrame({"intensity_mean": [1.0, 2.0, None], "width": [1, 2, 3],
                      **{c: [0.0, 0.0, 0.0] for c in ("intensity_std", "intensity_p01",
                                                      "intensity_p99", "entropy_bits",
                                                      "laplacian_var", "sharpness",
                                                      "border_share", "colour_spread")}})
    X, info = image_stats_feature_matrix(t)
    assert info["features"] == ["intensity_mean"] and "width" not in X
    assert info["dropped"]["sharpness"] == "constant" and np.isnan(X["intensity_mean"][2])
    with pytest.raises(InputError, match="not image statistics"):
        image_stats_feature_matrix(t, ["width"])
    with pytest.raises(InputError, match="scan the release again"):
        image_stats_feature_matrix(t.drop(columns="sharpness"))


# ---------------------------------------------------------------- audit wiring


def test_fail_on_metric_and_meaning_rule_read_the_image_statistics_probe():
    from splitscope.core.conditions import evaluate_conditions, parse_condition
    from splitscope.core.meaning import layer_rules
    from splitscope.provenance.predicates import (
        HEADER_PROBE_WITHIN,
        IMAGE_STATS_CROSS,
        IMAGE_STATS_WITHIN,
    )

    b = {"name": "test → train", "query": {"name": "test"}, "reference": {"name": "train"}}

    def probe(kind, est, low, boundary=None):
        rid = ("provenance.image_stats_probe.within_pool" if kind == "within" else
               "provenance.image_stats_probe.cross_split[test_train]")
        return {"id": rid, "layer": "provenance", "status": "completed", "estimate": est,
                "boundary": boundary, "unit": "row (case)", "uncertainty": {"low": low},
                "details": {"chance": 0.5, "top_fields": ["intensity_mean"]},
                "predicate": {"name": IMAGE_STATS_WITHIN if kind == "within"
                              else IMAGE_STATS_CROSS}}

    header = {**probe("within", 0.99, 0.98), "id": "provenance.header_probe.within_pool",
              "predicate": {"name": HEADER_PROBE_WITHIN}}
    records = [probe("within", 0.93, 0.90), probe("cross", 0.88, 0.84, {"name": b["name"]}),
               header]
    out = evaluate_conditions([parse_condition("image_stats_probe_ba>0.9"),
                               parse_condition("image_stats_probe_ba>0.95")], records, (),
                              [b["name"]])
    assert [o["held"] for o in out] == [True, False] and out[0]["value"] == 0.93
    assert "provenance.header_probe.within_pool" not in out[0]["records"]
    rule = {r.name: r for r in layer_rules()}["acquisition_shortcut"]
    said = rule.says(b, records)
    assert said.startswith("intensity statistics alone, without anatomy (intensity_mean)")
    assert "balanced accuracy 0.880 vs chance 0.5" in said
    assert rule.says(b, [probe("within", 0.93, 0.90), probe("cross", 0.55, 0.45,
                                                              {"name": b["name"]})]) is None


def test_report_shows_the_quality_table(planted):
    from splitscope.report.html import quality_view, render_html

    sc, _, _ = planted
    records = [r.to_dict() for r in audit_quality(sc).records]
    view = quality_view(records)
    assert view["columns"] == ["test/A", "test/B", "train/A", "train/B"]
    dark = next(r for r in view["rows"] if r["id"] == "quality.dark")
    assert dark["cells"][0] == "5.56% (1 of 18)"
    assert [r["id"] for r in view["others"]] == ["quality.flag_label_association"]
    html = render_html({"records": records, "boundaries": [], "inputs": [], "software": {}})
    assert 'data-section="quality-table"' in html and "5.56% (1 of 18)" in html
