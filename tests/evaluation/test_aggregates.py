"""Per-view aggregates of a re-scoring and the stable shape of its output, recomputed here
with scikit-learn and scipy."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from eval_helpers import CLASSES, make_predictions, make_truth
from scipy.stats import rankdata, spearmanr
from sklearn.metrics import balanced_accuracy_score, roc_auc_score

from splitscope.cli import main
from splitscope.evaluation.aggregates import entry_bootstrap
from splitscope.evaluation.predictions import read_truth
from splitscope.evaluation.rescore import rescore
from splitscope.evaluation.views import view_where

QUALITY = [0.1, 0.9, 0.4, 0.6, 0.3, 0.75]


@pytest.fixture
def folder(tmp_path):
    table = make_truth(n=120)
    sub = tmp_path / "subs"
    sub.mkdir()
    for i, q in enumerate(QUALITY):
        make_predictions(table, q, seed=i).to_csv(sub / f"team{i}_predicted_val_dataset.csv",
                                                  index=False)
    make_predictions(table).iloc[:-1].to_csv(sub / "short_predicted_val_dataset.csv",
                                             index=False)
    table.to_csv(tmp_path / "truth.csv", index=False)
    return sub, table, tmp_path


def _organizer(y, p) -> float:
    return (balanced_accuracy_score(y, p.argmax(axis=1))
            + roc_auc_score(y, p, multi_class="ovr", average="macro")) / 2


def _independent(sub, table, mask, entries):
    y = table[CLASSES].to_numpy().argmax(axis=1)
    out = {}
    for e in entries:
        p = pd.read_csv(sub / f"{e}_predicted_val_dataset.csv")[CLASSES].to_numpy()
        out[e] = _organizer(y[mask], p[mask])
    return pd.Series(out)


def test_aggregates_match_an_independent_recomputation(folder):
    sub, table, _ = folder
    truth = read_truth(table)
    final = pd.DataFrame({"entry": [f"team{i}" for i in range(6)],
                          "final_score": [0.2, 0.9, 0.5, 0.4, 0.3, 0.8]})
    res = rescore(sub, truth, [view_where(truth, "source!=S1", "no-S1")], final=final,
                  exclude=["team5"], entry_bootstrap=500, seed=3)
    cohort = [f"team{i}" for i in range(5)]
    off = _independent(sub, table, np.ones(len(table), bool), cohort)
    view = _independent(sub, table, (table["Dataset"] != "S1").to_numpy(), cohort)
    agg = {a["view"]: a for a in res.aggregates}
    a = agg["no-S1"]
    assert a["cohort"]["n"] == 5 and sorted(a["cohort"]["entries"]) == cohort
    assert {o["entry"]: o["why"].split(":")[0] for o in a["cohort"]["out"]} == {
        "team5": "excluded (--exclude)", "short": "not scoreable"}
    delta = (view - off).to_numpy()
    assert a["delta"]["n"] == 5
    assert a["delta"]["mean"] == pytest.approx(delta.mean(), abs=1e-12)
    assert a["delta"]["median"] == pytest.approx(np.median(delta), abs=1e-12)
    idx = np.random.default_rng(3).integers(0, 5, (500, 5))
    d_sorted = pd.Series(delta, index=cohort).loc[a["cohort"]["entries"]].to_numpy()
    lo, hi = np.quantile(d_sorted[idx].mean(axis=1), [0.025, 0.975])
    assert (a["delta"]["interval"]["mean"]["low"], a["delta"]["interval"]["mean"]["high"]) == \
        pytest.approx((lo, hi))
    assert "95% interval over 5 entries" in a["delta"]["interval"]["kind"]
    rank_off = rankdata(-off.to_numpy(), method="min")
    rank_view = rankdata(-view.to_numpy(), method="min")
    change = rank_off - rank_view
    assert a["rank_changes"]["entries_changed"] == int((change != 0).sum())
    assert a["rank_changes"]["largest_abs"] == int(np.abs(change).max())
    assert a["spearman_official"]["rho"] == pytest.approx(spearmanr(view, off).statistic)
    fin = final.set_index("entry")["final_score"].loc[cohort]
    assert a["spearman_final"]["rho"] == pytest.approx(spearmanr(view, fin).statistic)
    assert a["spearman_final"]["n"] == 5 and a["spearman_final"]["missing_final"] == []
    # equal-source: per source, then an unweighted mean over sources (S2 only in this view)
    y = table[CLASSES].to_numpy().argmax(axis=1)
    es = {}
    for e in cohort:
        p = pd.read_csv(sub / f"{e}_predicted_val_dataset.csv")[CLASSES].to_numpy()
        es[e] = {v: np.mean([_organizer(y[m], p[m]) for m in masks]) for v, masks in (
            ("official", [(table["Dataset"] == s).to_numpy() for s in ("S1", "S2")]),
            ("no-S1", [(table["Dataset"] == "S2").to_numpy()]))}
    es_delta = np.array([es[e]["no-S1"] - es[e]["official"] for e in cohort])
    assert a["equal_source"]["delta"]["mean"] == pytest.approx(es_delta.mean(), abs=1e-12)
    minus = np.array([es[e]["no-S1"] - view[e] for e in cohort])
    assert a["equal_source"]["minus_pooled"]["mean"] == pytest.approx(minus.mean(), abs=1e-12)
    o = agg["official"]
    assert o["delta"]["mean"] == 0 and o["rank_changes"]["entries_changed"] == 0
    assert res.summary()["aggregates"] == res.aggregates


def test_entry_bootstrap_small_n():
    assert entry_bootstrap([0.5])["interval"] is None
    assert entry_bootstrap([])["mean"] is None
    out = entry_bootstrap([1.0, 2.0, 3.0], n_boot=100, seed=1)
    assert out["interval"]["mean"]["low"] >= 1.0 and out["interval"]["mean"]["high"] <= 3.0


def test_rescore_output_is_stable_and_printed_rounded(folder, capsys):
    sub, _table, tmp = folder
    pd.DataFrame({"entry": ["team0", "team1", "team2"], "final_score": [0.3, 0.9, 0.5]}).to_csv(
        tmp / "final.csv", index=False)
    args = ["rescore", str(sub), "--truth", str(tmp / "truth.csv"), "--view",
            "s2=where:source=S2", "--final-scores", str(tmp / "final.csv"), "--exclude", "team5"]
    assert main(args + ["--json", "--out", str(tmp / "rs")]) == 0
    printed = capsys.readouterr().out
    assert printed.strip() == (tmp / "rs" / "rescore.json").read_text().strip()
    out = json.loads(printed)
    assert {"official_organizer_score", "delta_organizer_score"} <= set(out["ranks"][0])
    assert "official" not in out["ranks"][0]
    sp = {r["view"]: r for r in out["spearman"]}
    assert sorted(sp["official"]["missing_final"]) == ["team3", "team4"]
    assert len({tuple(sorted(v)) for v in out["verdicts"]}) == 1
    ranks_csv = pd.read_csv(tmp / "rs" / "ranks.csv")
    assert "official_organizer_score" in ranks_csv.columns
    assert json.loads(pd.read_csv(tmp / "rs" / "verdicts.csv")["reasons"].iloc[-1]) is not None
    assert [a["view"] for a in out["summary"]["aggregates"]] == ["official", "s2"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "mean Δ" in text and "rank changed" in text and "equal-source" in text
    assert "out of the cohort: team5: excluded (--exclude)" in text
    assert "out of the cohort: short: not scoreable: 1 truth paths without a prediction" in text
    assert "0.99999" not in text and "1.0000000" not in text


def test_metrics_csv_carries_the_interval_columns(folder):
    sub, _, tmp = folder
    out = tmp / "m"
    assert main(["metrics", str(sub / "team1_predicted_val_dataset.csv"), "--truth",
                 str(tmp / "truth.csv"), "--resamples", "200", "--out", str(out)]) == 0
    csv = pd.read_csv(out / "metrics.csv")
    for m in ("balanced_accuracy", "macro_auc", "organizer_score"):
        assert (csv[f"{m}_low"] <= csv[m]).all() and (csv[m] <= csv[f"{m}_high"]).all()
    assert csv["interval"].str.endswith("95% interval").all()
