"""report.html from hand-made audit documents: content, escaping, self-containment, size."""

from __future__ import annotations

import re

import numpy as np
from PIL import Image
from reportkit import EVIL, ROLES, boundary, document, records

from splitscope.records import AuditRecord
from splitscope.report.html import (
    fmt_estimate,
    render_html,
    render_report,
    thumbnail_uri,
)


def _evil_doc(tmp_path):
    b = boundary(q=f"test{EVIL}", r="train")
    recs = records(b, label=EVIL)
    recs.append(AuditRecord(id=f"identity.{EVIL}", layer="duplicates", section="identity", title=EVIL,
                            status="not assessed", reason=f"file {EVIL} unreadable"))
    img = tmp_path / "a.png"
    Image.fromarray(np.full((40, 30), 120, np.uint8)).save(img)
    gallery = [{"boundary": b.name, "predicate": EVIL, "measurements": {"rho": 0.99},
                "query": {"row": 1, "path": f"test/{EVIL}.png", "label": EVIL, "file": str(img)},
                "reference": {"row": 9, "path": "train/x.png", "label": "NORMAL",
                              "file": str(tmp_path / "missing.png")}}]
    doc = document(recs, b, gallery=gallery)
    doc["inputs"][0]["path"] = f"/data/{EVIL}"
    doc["summary"]["verdicts"].append(EVIL)
    return doc


def test_every_input_string_is_escaped(tmp_path):
    html = render_html(_evil_doc(tmp_path), roles=ROLES)
    assert "<img src=x" not in html and "onerror=alert" not in html.replace(
        "onerror=alert(1)&gt;", "")
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    # in a path, a label, a title, a reason, a boundary name and a gallery caption
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") >= 6


def test_report_is_self_contained(tmp_path):
    html = render_html(_evil_doc(tmp_path), roles=ROLES)
    assert "<script" not in html and "<link" not in html
    for attr in re.findall(r'(?:src|href)="([^"]*)"', html):
        assert attr.startswith(("data:", "#")), attr
    assert "Content-Security-Policy" in html


def test_sections_figures_gallery_and_status(tmp_path):
    doc = _evil_doc(tmp_path)
    html = render_html(doc, roles=ROLES)
    for section in ("verdicts", "layers", "scorecard", "census", "distribution", "sweep",
                    "gallery", "groups", "header", "partition", "evaluation", "all-records",
                    "inputs"):
        assert f'data-section="{section}"' in html, section
    # the findings panel, distribution, sweep, header probe, partition
    assert html.count('class="figure"') == 5
    # the readable gallery file, as an example under the first figure and in the gallery
    assert html.count("data:image/jpeg;base64,") == 2
    assert "no thumbnail" in html  # the missing one says so
    assert "not applicable" in html and "no saved predictions given" in html
    assert "12.5% (25 of 200)" in html  # rate with numerator and denominator


def test_estimate_formatting_keeps_zero_apart_from_missing():
    zero = AuditRecord(id="a", layer="x", title="t", unit="u", numerator=0, denominator=13)
    assert fmt_estimate(zero.to_dict()) == "0% (0 of 13)"
    na = AuditRecord(id="b", layer="x", title="t", status="not assessed", reason="r")
    assert fmt_estimate(na.to_dict()) == "not measured"
    auc = AuditRecord(id="c", layer="x", title="t", unit="u", numerator=13, denominator=37,
                      estimate=0.2)
    assert fmt_estimate(auc.to_dict()) == "0.2 (n = 37)"


def test_gallery_is_capped_and_page_stays_small(tmp_path):
    img = tmp_path / "big.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (1024, 1024), dtype=np.uint8)).save(img)
    b = boundary()
    pair = {"boundary": b.name, "predicate": "ncc", "measurements": {"rho": 0.99},
            "query": {"row": 1, "path": "q.png", "label": "a", "file": str(img)},
            "reference": {"row": 2, "path": "r.png", "label": "a", "file": str(img)}}
    doc = document(gallery=[dict(pair) for _ in range(200)])
    path = render_report(doc, tmp_path / "report.html", roles=ROLES, max_pairs=60)
    html = path.read_text()
    assert html.count('class="pair"') == 60 + 3  # the gallery, and three examples on top
    assert "60 of 200 flagged pairs shown" in html
    # one 1024² noise image, downscaled to 96 px: each thumbnail is a few kB
    assert path.stat().st_size < 1_500_000


def test_thumbnail_uri(tmp_path):
    assert thumbnail_uri(str(tmp_path / "nope.png")) is None
    (tmp_path / "text.png").write_text("not an image")
    assert thumbnail_uri(str(tmp_path / "text.png")) is None
    img = tmp_path / "ok.png"
    Image.fromarray(np.zeros((300, 150), np.uint8)).save(img)
    uri = thumbnail_uri(str(img), size=96)
    assert uri.startswith("data:image/jpeg;base64,")
    import base64
    import io

    decoded = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
    assert max(decoded.size) == 96 and decoded.size == (48, 96)


def test_a_broken_figure_is_a_note_not_a_crash():
    doc = document()
    doc["figures"]["test → train"]["sweep"] = [{"label": "x", "points": "not a list"}]
    html = render_html(doc, roles=ROLES)
    assert "figure not drawn" in html


def test_transform_sensitivity_table():
    from splitscope.report.html import report_context

    def rec(pred, rates):
        return {"id": f"near_duplicate.transform_sensitivity.{pred}", "layer": "duplicates", "section": "near_duplicate",
                "title": f"Transform sensitivity of {pred}", "status": "completed",
                "predicate": {"name": pred, "params": {}},
                "details": {"pass_rates": {t: {"passed": p, "assessed": 50, "pass_rate": p / 50}
                                           for t, p in rates.items()}}}

    audit = {"records": [rec("ncc_nearest", {"jpeg_90": 50, "rotate_10": 0}),
                         rec("hash_joint", {"jpeg_90": 49})], "boundaries": [], "inputs": []}
    view = report_context(audit)["transforms"]
    assert view["predicates"] == ["ncc_nearest", "hash_joint"]
    assert view["rows"] == [{"transform": "jpeg_90", "cells": ["50/50", "49/50"]},
                            {"transform": "rotate_10", "cells": ["0/50", "—"]}]
    assert report_context(audit)["unbounded"] == []
