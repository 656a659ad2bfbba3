"""Run tables long and wide, and paired contrasts of two conditions (METHODS §5.12), checked
against scipy.stats.ttest_rel."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from splitscope.cli import main
from splitscope.errors import InputError
from splitscope.evaluation.contrasts import paired_contrast, parse_contrast
from splitscope.evaluation.effects import protocol_effects
from splitscope.evaluation.runs import read_run_table

VIEWS = ("official", "deduplicated")
METRICS = ("balanced_accuracy", "macro_auc")


def _long(seeds=10, conditions=("Full", "Removal"), seed=0) -> pd.DataFrame:
    """10 seeds × two conditions × two views × two metrics, one value per row."""
    rng = np.random.default_rng(seed)
    rows = []
    for cond, s, view, metric in itertools.product(conditions, range(seeds), VIEWS, METRICS):
        shift = {"Full": 0.0, "Removal": -0.03, "Source-only": -0.01}[cond]
        rows.append({"condition": cond, "seed": s, "view": view, "metric": metric,
                     "value": 0.8 + shift + 0.01 * s + rng.normal(0, 0.01)})
    return pd.DataFrame(rows)


def _ttest_rel_interval(long: pd.DataFrame, a: str, b: str, view: str, metric: str):
    sel = long[(long["view"] == view) & (long["metric"] == metric)]
    x = sel[sel["condition"] == a].sort_values("seed")["value"].to_numpy()
    y = sel[sel["condition"] == b].sort_values("seed")["value"].to_numpy()
    ci = stats.ttest_rel(x, y).confidence_interval(0.95)
    return (x - y).mean(), (x - y).std(ddof=1), ci.low, ci.high


def test_contrast_from_a_long_table_with_no_options_matches_ttest_rel(tmp_path, capsys):
    long = _long(conditions=("Full", "Removal", "Source-only"))
    path = tmp_path / "runs.csv"
    long.to_csv(path, index=False)
    assert main(["effects", str(path), "--contrast", "Removal-Full", "--contrast",
                 "Source-only-Full", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rt = out["params"]["run_table"]
    assert rt["layout"] == "long" and rt["value_column"] == "value"
    assert rt["metric_name_column"] == "metric"
    rows = out["paired_contrasts"]
    assert len(rows) == 2 * len(VIEWS) * len(METRICS)
    for r in rows:
        a, b = ("Removal", "Full") if r["contrast"] == "Removal − Full" else ("Source-only",
                                                                              "Full")
        mean, sd, low, high = _ttest_rel_interval(long, a, b, r["view"], r["metric"])
        assert r["condition"] == "condition" and r["pairs"] == 10
        assert r["mean"] == pytest.approx(mean, abs=1e-12)
        assert r["sd"] == pytest.approx(sd, abs=1e-12)
        assert r["t_low"] == pytest.approx(low, abs=1e-12)
        assert r["t_high"] == pytest.approx(high, abs=1e-12)
        assert r["interval"] == "paired-t 95% interval over 10 pairs matched on seed"
        assert r["boot_low"] <= r["mean"] <= r["boot_high"]
        assert "percentile bootstrap over seeds, 2000 resamples, seed 0, 95% interval" == \
            r["bootstrap"]
    info = out["params"]["contrasts"][0]
    assert info["paired_on"] == ["seed"] and info["by"] == ["view"] and info["unpaired"] == 0
    assert main(["effects", str(path), "--contrast", "Removal-Full"]) == 0
    printed = capsys.readouterr().out
    assert "Removal − Full" in printed and "paired-t 95%" in printed
    assert "deduplication sensitivity" not in printed.split("paired contrasts")[1].split(
        "view contrasts")[0]


def test_contrast_of_a_wide_table_with_named_columns(tmp_path):
    long = _long()
    wide = long.pivot(index=["condition", "seed", "view"], columns="metric",
                      values="value").reset_index()
    wide = wide.rename(columns={"condition": "pool", "seed": "replicate_id"})
    wide["replicate_id"] = wide["replicate_id"].astype(str) + "x"
    run = read_run_table(wide, identity=["pool", "replicate_id", "view"], metrics=list(METRICS))
    assert run.layout == "wide" and run.metrics == list(METRICS)
    summary, pairs, info = paired_contrast(run, "Removal-Full", by=["view"])
    assert info["condition"] == "pool" and info["paired_on"] == ["replicate_id"]
    for r in summary.itertuples():
        mean, _, low, high = _ttest_rel_interval(long, "Removal", "Full", r.view, r.metric)
        assert r.mean == pytest.approx(mean) and (r.t_low, r.t_high) == pytest.approx((low, high))
    assert len(pairs) == 10 * len(VIEWS) * len(METRICS)
    np.testing.assert_allclose(pairs["difference"], pairs["first"] - pairs["second"])


def test_unpaired_rows_are_counted_and_small_n_is_said():
    long = _long(seeds=3)
    long = long[~((long["condition"] == "Removal") & (long["seed"] == 2))]
    run = read_run_table(long)
    summary, _, info = paired_contrast(run, "Removal-Full")
    assert info["unpaired"] == len(VIEWS) and len(info["unpaired_second"]) == len(VIEWS)
    assert (summary["pairs"] == 2).all()
    assert summary["bootstrap"].str.startswith("not assessed: 2 pair(s)").all()
    one = read_run_table(_long(seeds=1))
    s1, _, _ = paired_contrast(one, "Removal-Full")
    assert s1["interval"].str.startswith("not assessed: 1 pair(s)").all()
    assert s1["t_low"].isna().all()


def test_condition_detection_and_its_errors():
    long = _long()
    long["arm"] = long["condition"]  # a second column holding both levels
    with pytest.raises(InputError, match="several columns hold both 'Removal' and 'Full': "
                                         "condition, arm; name one with --condition"):
        paired_contrast(read_run_table(long), "Removal-Full")
    summary, _, info = paired_contrast(read_run_table(long, identity=["condition", "seed",
                                                                      "view"]),
                                       "Removal-Full")
    assert info["condition"] == "condition"
    with pytest.raises(InputError, match="no identity column holds both levels"):
        paired_contrast(read_run_table(_long()), "Removal-Random")
    with pytest.raises(InputError, match="LEVEL_A-LEVEL_B"):
        paired_contrast(read_run_table(_long()), "Removal")
    assert parse_contrast("Source-only-Full", {"c": {"Source-only", "Full"}}) == (
        "Source-only", "Full")


def test_value_column_ambiguity_and_non_numeric_values_are_input_errors():
    long = _long().rename(columns={"value": "v1"})
    long["v2"] = long["v1"] * 2
    with pytest.raises(InputError, match="several value column candidate.*v1, v2.*"
                                         "--value-column"):
        read_run_table(long)
    assert read_run_table(long, value_column="v2").value_column == "v2"
    bad = _long().astype({"value": object})
    bad.loc[3, "value"] = "n/a"
    with pytest.raises(InputError, match="1 non-numeric value.*'value'.*'n/a'"):
        read_run_table(bad)
    dup = pd.concat([_long(), _long().iloc[:1]])
    with pytest.raises(InputError, match="share their identity"):
        read_run_table(dup)


def test_component_on_a_long_table_no_longer_crashes(tmp_path, capsys):
    """``--component condition --metric value`` used to raise TypeError: operation 'sub' not
    supported for dtype 'str' (the value column was never made numeric)."""
    long = _long()
    path = tmp_path / "runs.csv"
    long.to_csv(path, index=False)
    assert main(["effects", str(path), "--component", "condition", "--metric", "value",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    comp = out["components"][0]
    a = long[long["condition"] == "Removal"].sort_values(["seed", "view", "metric"])["value"]
    b = long[long["condition"] == "Full"].sort_values(["seed", "view", "metric"])["value"]
    d = a.to_numpy() - b.to_numpy()
    assert comp["level"] == "Removal" and comp["baseline"] == "Full" and comp["pairs"] == 40
    assert comp["mean_delta"] == pytest.approx(d.mean())
    ci = stats.ttest_rel(a.to_numpy(), b.to_numpy()).confidence_interval(0.95)
    assert (comp["mean_delta_low"], comp["mean_delta_high"]) == pytest.approx((ci.low, ci.high))


def test_protocol_effects_take_named_identity_columns():
    rows = []
    for arch, s, view in itertools.product(["cnn", "vit"], range(3), ["official", "external"]):
        rows.append({"arch": arch, "seed": s, "view": view,
                     "ba": {"cnn": 0.7, "vit": 0.8}[arch] - (0.1 if view == "external" else 0)})
    t = pd.DataFrame(rows)
    res = protocol_effects(t, identity=["arch", "seed", "view"], metrics=["ba"],
                           contrasts=["vit-cnn"])
    assert res.paired.set_index("view")["mean"].to_dict() == pytest.approx(
        {"external": 0.1, "official": 0.1})
    transfer = [c for c in res.contrasts if c["contrast"] == "external transfer cost"][0]
    assert transfer["summary_mean"] == pytest.approx(0.1) and transfer["runs"] == 6


def test_cli_ambiguity_is_exit_2_with_the_candidates(tmp_path, capsys):
    long = _long()
    long["arm"] = long["condition"]
    path = tmp_path / "runs.csv"
    long.to_csv(path, index=False)
    assert main(["effects", str(path), "--contrast", "Removal-Full"]) == 2
    err = capsys.readouterr().err
    assert "several columns hold both 'Removal' and 'Full': condition, arm" in err
    assert main(["effects", str(path), "--contrast", "Removal-Full", "--condition", "arm",
                 "--identity", "arm", "--identity", "seed", "--identity", "view",
                 "--identity", "metric", "--metric", "value", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["condition"] for r in out["paired_contrasts"]} == {"arm"}
    assert {r["metric"] for r in out["paired_contrasts"]} == {"value"}
    assert len(out["paired_contrasts"]) == len(VIEWS) * len(METRICS)  # by view and metric name
