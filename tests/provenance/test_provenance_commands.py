"""CLI verbs groups, resplit, probe and shift."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from artifacts_check import assert_artifacts_cover

from splitscope.cli import main


@pytest.fixture
def fold_lists(tmp_path):
    a = pd.DataFrame({"filename": [f"{'a' * 16}_{i}.jpg" for i in range(10)]
                      + [f"{'b' * 16}_{i}.jpg" for i in range(5)],
                      "label": ["x"] * 8 + ["y"] * 7})
    b = pd.DataFrame({"filename": [f"{'a' * 16}_{i}.jpg" for i in (12, 40)]
                      + [f"{'c' * 16}_{i}.jpg" for i in range(6)],
                      "label": ["x"] * 4 + ["y"] * 4})
    a.to_csv(tmp_path / "split_0.csv", index=False)
    b.to_csv(tmp_path / "split_1.csv", index=False)
    return tmp_path


RX = r"^(?P<group>[0-9a-f]{16})_(?P<frame>\d+)"


def test_groups_json_both_directions_and_exports(fold_lists, capsys):
    out = fold_lists / "out"
    code = main(["groups", str(fold_lists / "split_0.csv"), str(fold_lists / "split_1.csv"),
                 "--split-per-list", "--group-regex", RX, "--json", "--out", str(out)])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    recs = {r["id"]: r for r in payload["records"]}
    fwd = recs["group.overlap[split_0_split_1]"]
    back = recs["group.overlap[split_1_split_0]"]
    assert (fwd["numerator"], fwd["denominator"]) == (10, 15)
    assert (back["numerator"], back["denominator"]) == (2, 8)
    gap = recs["group.frame_gap[split_1_split_0]"]
    assert gap["estimate"] == pytest.approx(17.0)  # frames 12→9 (gap 3), 40→9 (gap 31)
    table = pd.read_csv(out / "frame_gaps_split_1_split_0.csv")
    assert {"row", "path", "gap"} <= set(table.columns)
    listed = assert_artifacts_cover(out)
    assert {"frame_gaps_split_1_split_0.csv", "frame_gaps_split_1_split_0.parquet"} <= set(listed)
    assert payload["outputs"] == listed


def test_groups_table_output_and_fail_on(fold_lists, capsys):
    args = ["groups", str(fold_lists / "split_0.csv"), str(fold_lists / "split_1.csv"),
            "--split-per-list", "--group-regex", RX]
    assert main(args) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "split_0 → split_1" in text and "(conditional on traceability)" in text
    assert main(args + ["--fail-on", "group_overlap_rate>0"]) == 1
    assert main(args + ["--fail-on", "group_overlap_rate>1"]) == 0
    assert main(args + ["--fail-on", "ncc_rate>0"]) == 2  # not a metric of this verb


def test_groups_input_errors(fold_lists, capsys):
    assert main(["groups", str(fold_lists / "nope.csv")]) == 2
    assert main(["groups", str(fold_lists / "split_0.csv"), "--query", "test"]) == 2


def test_resplit_and_probe_no_scan(fold_lists, capsys, tmp_path):
    out = tmp_path / "rs"
    assert main(["resplit", str(fold_lists / "split_0.csv"), str(fold_lists / "split_1.csv"),
                 "--split-per-list", "--group-regex", RX, "--fractions", "0.34,0.33,0.33",
                 "--folds", "2", "--out", str(out)]) == 0
    parts = pd.read_csv(out / "resplit.csv")
    assert parts.groupby("group")["part"].nunique().max() == 1
    idx = pd.DataFrame({"image_path": ["a/1.jpg", "a/2.jpg", "b/3.jpg", "b/4.jpg"],
                        "split": ["training", "training", "validation", "validation"],
                        "label": ["x", "y", "x", "y"], "source": ["S", "S", "T", "T"]})
    idx.to_csv(tmp_path / "index.csv", index=False)
    capsys.readouterr()
    assert main(["probe", str(tmp_path / "index.csv"), "--no-scan", "--json"]) == 0
    recs = {r["id"]: r for r in json.loads(capsys.readouterr().out)["records"]}
    assert recs["provenance.source_label"]["estimate"] == pytest.approx(0.0)
    for probe in ("header_probe", "image_stats_probe"):
        assert recs[f"provenance.{probe}.within_pool"]["status"] == "not assessed"


@pytest.mark.slow
def test_probe_and_shift_on_demo(demo_scan, capsys):
    sc, _, root = demo_scan
    from splitscope.datasets.demo import DEMO_GROUP_REGEX

    assert main(["probe", str(root), "-w", str(sc.workspace), "--group-regex", DEMO_GROUP_REGEX,
                 "--resamples", "200", "--fail-above-chance"]) == 1
    text = capsys.readouterr().out
    assert "within pool" in text
    assert "header " in text and "image stats " in text  # both probes printed
    assert main(["probe", str(root), "-w", str(sc.workspace), "--group-regex", DEMO_GROUP_REGEX,
                 "--resamples", "200", "--fit-max-rows", "40", "--json"]) == 0
    recs = {r["id"]: r for r in json.loads(capsys.readouterr().out)["records"]}
    params = recs["provenance.header_probe.within_pool"]["predicate"]["params"]
    assert params["fit_max_rows"] == 40 and set(params["fit_rows"]) == {40}
    assert main(["probe", str(root), "-w", str(sc.workspace), "--fit-max-rows", "0"]) == 2
    capsys.readouterr()
    assert main(["shift", str(root), "-w", str(sc.workspace), "--resamples", "200",
                 "--json"]) == 0
    recs = {r["id"]: r for r in json.loads(capsys.readouterr().out)["records"]}
    assert "provenance.partition[test_train]" in recs


@pytest.mark.slow
def test_groups_with_upstream_recovery(demo_scan, tmp_path, capsys):
    """The demo's test rows, stripped of group ids, recover them from the training folder
    used as the upstream corpus; the recovered ids then give the overlap."""
    import shutil

    _, _, root = demo_scan
    up = tmp_path / "upstream"
    shutil.copytree(root / "train", up / "train")
    from splitscope.datasets.demo import DEMO_GROUP_REGEX

    assert main(["groups", str(root), "--upstream", str(up), "--upstream-group-regex",
                 DEMO_GROUP_REGEX, "-w", str(tmp_path / "ws"), "--json",
                 "--out", str(tmp_path / "out")]) == 0
    recs = {r["id"]: r for r in json.loads(capsys.readouterr().out)["records"]}
    rec = recs["group.recovery"]
    assert rec["numerator"] > 0 and rec["details"]["summary"]["matched_bytes"] >= 4
    mapping = pd.read_csv(tmp_path / "out" / "group_mapping.csv")
    assert {"row", "path", "method", "recovered_group"} <= set(mapping.columns)
    ov = recs["group.overlap[test_train]"]
    assert ov["predicate"]["params"]["group_key"]["kind"] == "recovered where missing"
