"""report.html in a real browser (headless Chromium): no console errors, every section and
figure rendered, markup from the input shown as text. Skipped when no Chromium is installed."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from reportkit import EVIL, ROLES, boundary, document, records

from splitscope.records import AuditRecord
from splitscope.report.browser import find_browser, inspect_page
from splitscope.report.html import render_report

pytestmark = pytest.mark.skipif(find_browser() is None, reason="no Chromium browser installed")

SECTIONS = ("verdict", "findings", "actions", "first-figure", "panel", "examples", "verdicts", "layers", "scorecard", "boundary", "census", "distribution", "sweep",
            "gallery", "groups", "header", "partition", "evaluation", "all-records", "inputs")


def test_report_renders_without_errors(tmp_path):
    img = tmp_path / "q.png"
    Image.fromarray(np.full((50, 40), 90, np.uint8)).save(img)
    b = boundary(q="test", r="train")
    recs = records(b, label=EVIL)
    recs.append(AuditRecord(id="x", layer="identity", title=EVIL, status="not assessed",
                            reason=EVIL))
    gallery = [{"boundary": b.name, "predicate": "ncc", "measurements": {"rho": 0.991},
                "query": {"row": 3, "path": f"test/{EVIL}.png", "label": EVIL, "file": str(img)},
                "reference": {"row": 7, "path": "train/a.png", "label": "NORMAL",
                              "file": str(img)}}]
    path = render_report(document(recs, b, gallery=gallery), tmp_path / "report.html",
                         roles=ROLES)
    info = inspect_page(path, screenshot=tmp_path / "shot.png")
    assert info["console_errors"] == []
    assert info["scripts"] == 0 and info["injected"] == 0
    assert info["broken"] == []
    for section in SECTIONS:
        assert section in info["sections"], section
    assert len(info["figures"]) == 5 and all(f["w"] > 100 for f in info["figures"])
    # five figures (the findings panel first), and the pair's two thumbnails twice: an
    # example under the first figure and in the boundary's gallery
    assert info["images"] == 9
    assert EVIL in info["text"]  # shown as text
    assert (tmp_path / "shot.png").stat().st_size > 5_000


def test_a_blocked_external_resource_is_a_console_error(tmp_path):
    """The check itself can fail: a page that loads from the network reports an error."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" '
                    "content=\"default-src 'none'\"></head><body>"
                    '<img src="https://example.invalid/x.png"></body></html>')
    info = inspect_page(page)
    assert info["console_errors"]
    assert info["broken"]


def test_the_demo_report_fits_a_900_px_window(small_demo, tmp_path):
    """No horizontal scrollbar at 900 px: long parameters, paths and intervals wrap inside
    their cells; the check can fail (a wide element is named)."""
    info = inspect_page(small_demo.report, width=900, height=1000)
    assert info["scroll_width"] <= info["view_width"], info["wide"]
    assert info["console_errors"] == [] and info["broken"] == []
    page = tmp_path / "wide.html"
    page.write_text('<!DOCTYPE html><html><body><div style="width:1500px">x</div></body></html>')
    wide = inspect_page(page, width=900, height=400)
    assert wide["scroll_width"] > wide["view_width"] and wide["wide"]
