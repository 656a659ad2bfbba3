"""splitscope demo: every planted leak appears in audit.json with the expected record, and
nothing unplanted is reported as leakage (scored against planted.csv)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from splitscope.cli import app
from splitscope.records.schema import validate
from splitscope.report.browser import find_browser, inspect_page
from splitscope.workflows.demo import FLAG_COLUMNS, flagged_paths

pytestmark = pytest.mark.slow


#: test rows of the session's ``small_demo_run`` (seed 0, 70 train and 45 test images)
N_TEST = 45


@pytest.fixture(scope="module")
def demo(small_demo_run):
    """The session's demo audit, its check against ``planted.csv``, and ``planted.csv``."""
    result, check = small_demo_run
    planted = pd.read_csv(result.out_dir.parent / "data" / "planted.csv", dtype=str,
                          keep_default_na=False)
    return result, check, planted


def _expected(planted: pd.DataFrame, predicate: str) -> set[str]:
    return {r.query_path for r in planted.itertuples() if predicate in r.expected.split(";")}


def test_demo_check_finds_everything_planted_and_nothing_else(demo):
    _, check, planted = demo
    assert check["missed"] == []
    assert check["unplanted"] == []
    assert check["not_checked"] == []
    assert check["ok"]
    kinds = set(planted["kind"])
    assert set(check["by_kind"]) == kinds
    for kind, info in check["by_kind"].items():
        assert info["found_flags"] == info["checked_flags"], kind


def test_records_count_exactly_the_planted_rows(demo):
    result, _, planted = demo
    doc = json.loads(result.audit_json.read_text())
    records = {r["id"]: r for r in doc["records"]}
    found = flagged_paths(result.out_dir / "lists")
    for demo_name, predicate in FLAG_COLUMNS.items():
        rec = records[f"{'identity' if predicate in ('sha256', 'basename', 'pixel_xxh128') else 'near_duplicate'}.{predicate}.test--train"]
        assert rec["status"] == "completed"
        assert rec["denominator"] == N_TEST
        expected = _expected(planted, demo_name)
        # the record counts the flagged rows; all expected rows are among them, and every
        # flagged row is a planted query row
        assert rec["numerator"] == len(found[demo_name])
        assert expected <= found[demo_name], demo_name
        assert found[demo_name] <= set(planted["query_path"]), demo_name
    byte = records["identity.sha256.test--train"]
    assert byte["numerator"] == len(_expected(planted, "sha256")) == 8
    assert byte["details"]["renamed_groups"] == 3
    assert byte["details"]["label_disjoint_groups"] == 1
    overlap = next(r for r in doc["records"] if r["id"].startswith("group.overlap"))
    assert overlap["numerator"] == len(_expected(planted, "group_overlap"))
    within = records["identity.within_copies.train--train"]
    assert within["numerator"] == 2  # the planted copy and its original
    assert records["identity.within_copies.test--test"]["numerator"] == 0
    header = records["provenance.header_probe.within_pool"]
    assert header["uncertainty"]["low"] > header["details"]["chance"]


def test_demo_audit_document(demo):
    result, _, _ = demo
    doc = json.loads(result.audit_json.read_text())
    validate(doc)
    statuses = {l["layer"]: l["status"] for l in doc["layers"]}
    assert statuses == {"duplicates": "completed", "groups": "completed",
                        "provenance": "completed", "quality": "completed",
                        "evaluation": "completed", "attribution": "completed",
                        "external": "not applicable", "experiments": "not applicable"}
    # the predictions cover val and test: thresholds and the temperature are fitted on val
    # and scored on test, and every view scores test rows only
    records = {r["id"]: r for r in doc["records"] if r["layer"] == "evaluation"}
    assert all(r["status"] == "completed" for r in records.values())
    transfer = records["evaluation.threshold_transfer.predictions"]
    assert (transfer["boundary"]["query"]["name"], transfer["boundary"]["reference"]["name"]) \
        == ("test", "val")
    assert records["evaluation.metrics.predictions.official"]["denominator"] == N_TEST
    quality = [r for r in doc["records"] if r["layer"] == "quality"]
    assert len(quality) == 10 and all(r["status"] == "completed" for r in quality)
    assert any(a["path"] == "lists/quality.csv" for a in doc["artifacts"])
    assert 'data-section="quality-table"' in result.report.read_text()
    assert doc["options"]["search"]["dihedral"] is True
    verdicts = doc["summary"]["verdicts"]
    line = doc["summary"]["verdict"][0]  # test → train, then the clean val → train
    assert len(doc["summary"]["verdict"]) == len(doc["boundaries"]) == 2
    assert line.startswith("Do not trust a score on test as is: ")
    assert "under another label" in line  # the planted twins under two labels, first
    assert verdicts[0].startswith("LABEL CONFLICT: ")
    assert re.fullmatch(rf"[0-9.]+% of the test split \(\d+ of {N_TEST} rows\) has a "
                        r"near-twin in train \(NCC ≥ 0\.98, 96², bicubic\)\.",
                        next(v for v in verdicts if "near-twin in train" in v))
    assert result.report.stat().st_size < 5_000_000


def test_demo_cli_prints_planted_and_found(tmp_path):
    from click.testing import CliRunner

    res = CliRunner().invoke(app, ["demo", str(tmp_path / "d"), "--workers", "1", "--json"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)  # stdout is the JSON alone; progress goes to stderr
    assert "splitscope demo [" in res.stderr
    assert re.search(r"layer 1/\d+ duplicates: completed, \d+ records in [0-9.]+ s", res.stderr)
    assert payload["demo"]["ok"] and payload["demo"]["unplanted"] == []
    assert re.match(r"[0-9.]+% of the test split \(\d+ of 80 rows\) has a near-twin in train",
                    next(v for v in payload["verdicts"] if "near-twin in train" in v))
    lines = payload["demo"]["lines"]
    assert lines[0].startswith("Planted in the demo")
    assert any(line.strip().startswith("missed: 0;") for line in lines)
    # the simulated model memorised the leaked rows: the deduplicated view scores lower, and
    # the leaked rows put more attribution outside the head
    model = payload["demo"]["model"]
    assert model["official_ba"] > model["deduplicated_ba"]
    assert model["attribution_difference"] > 0.2
    assert any("Simulated model outputs" in line for line in lines)


@pytest.mark.skipif(find_browser() is None, reason="no Chromium browser installed")
def test_demo_report_in_a_browser(demo, tmp_path):
    result, _, _ = demo
    info = inspect_page(result.report, screenshot=tmp_path / "shot.png")
    assert info["console_errors"] == []
    assert info["broken"] == [] and info["injected"] == 0 and info["scripts"] == 0
    for section in ("verdicts", "layers", "scorecard", "census", "distribution", "sweep",
                    "gallery", "groups", "header", "partition", "evaluation", "all-records",
                    "transforms"):
        assert section in info["sections"], section
    assert len(info["figures"]) >= 4 and all(f["w"] > 0 for f in info["figures"])
    assert (tmp_path / "shot.png").stat().st_size > 10_000
