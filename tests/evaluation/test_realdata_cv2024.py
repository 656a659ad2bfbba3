"""Capsule Vision 2024: the 27 validation submissions re-scored on three views, the test
submissions as the final ranking, and the training-pool controls from the index.

Reading the 54 workbooks with openpyxl takes about a minute of CPU, so they are parsed once
per session and the tests are marked slow.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from splitscope.evaluation.predictions import entry_key, read_predictions, read_truth
from splitscope.evaluation.rescore import final_ranking, load_entries, rescore
from splitscope.evaluation.scoreability import check_scoreability
from splitscope.evaluation.views import view_from_list, view_where
from splitscope.manifest import build_manifest

pytestmark = [pytest.mark.realdata, pytest.mark.slow]

# declared score kinds: the DeepScope Innovators workbooks hold logits (values in [−75, 43]);
# EndoAI's hold unnormalized scores (negative values, rows not summing to 1): plain scores.
KINDS = {"*": "probability", "DeepScope_Innovators": "logit", "EndoAI": "score"}
# validation scores published by the organizers (metrics_reports_val/*.json, see `source`)
REPORTED = Path(__file__).with_name("data") / "cv2024_reported_validation.csv"


@pytest.fixture(scope="session")
def cv(shared_data):
    root = shared_data / "cv2024"
    truth = read_truth(root / "validation_data.xlsx")
    test_truth = read_truth(root / "test_data.xlsx", truth.classes)
    val = load_entries(root / "submissions" / "validation", score_kind=KINDS)
    test = load_entries(root / "submissions" / "testing", score_kind=KINDS)
    return {"root": root, "truth": truth, "test_truth": test_truth, "val": val, "test": test}


@pytest.fixture(scope="session")
def filtered_list(cv, tmp_path_factory):
    """Validation rows whose file name matches a same-source training row (METHODS §5.6
    'filtered', basename arm; no pixels are available here), from the CV2024 index."""
    index = pd.read_csv(cv["root"] / "capsule_vision_2024_train_val_index.csv")
    key = index["source"] + "|" + index["filename"]
    train_keys = set(key[index["split"] == "training"])
    val = index[index["split"] == "validation"]
    listed = val[key[val.index].isin(train_keys)]
    path = tmp_path_factory.mktemp("views") / "filtered_exclude.csv"
    listed[["image_path"]].to_csv(path, index=False)
    return path, listed


@pytest.fixture(scope="session")
def result(cv, filtered_list):
    truth = cv["truth"]
    views = [view_where(truth, "source!=KVASIR", "non-KVASIR"),
             view_from_list(truth, filtered_list[0], "exclude", "filtered")]
    final = final_ranking(cv["test"], cv["test_truth"], score_kind=KINDS, path_mode="basename")
    return rescore(cv["val"], truth, views, score_kind=KINDS, final=final,
                   reported=REPORTED), final


def test_verdicts(result):
    res, _ = result
    v = res.verdicts.set_index("entry")
    assert len(v) == 27 and int(v["scoreable"].sum()) == 25
    assert set(v.index[~v["scoreable"]]) == {"Machine Minds", "Pioneers"}
    mm = v.loc["Machine Minds", "reasons"]
    assert "44 duplicated paths (45 surplus rows)" in mm
    assert "16,132 paths not in truth list: 16,132 bare filenames" in mm
    assert "16,132 truth paths without a prediction" in mm
    pio = v.loc["Pioneers", "reasons"]
    assert "16,132 paths not in truth list: 16,132 absolute Windows paths" in pio
    assert "different order" in v.loc["Pioneers", "notes"]  # Normal is the last column
    assert (v.loc[v["scoreable"], "paths_not_in_truth"] == 0).all()


def test_reported_vs_recomputed(result):
    """14 of the 15 published validation scores are reproduced to 1e-12; taaldhwaj's released
    workbook scores BA 0.1000 / macro AUC 0.3784, not the published 0.8993 / 0.9444 (the
    published report was regenerated in a later commit; the released file is not the one it
    scored)."""
    res, _ = result
    rep = res.reported
    assert len(rep) == 30 and rep["recomputed"].notna().all()
    close = rep[rep["entry"] != "taaldhwaj"]
    assert (close["abs_error"] < 1e-12).all()
    far = rep[rep["entry"] == "taaldhwaj"].set_index("metric")["abs_error"]
    assert far["balanced_accuracy"] > 0.79 and far["macro_auc"] > 0.56


def test_views_and_internal_consistency(result, filtered_list):
    res, _ = result
    views = {d["name"]: d for d in res.views}
    assert views["official"]["rows"] == 16132
    assert views["non-KVASIR"]["rows"] == 4551
    listed = filtered_list[1]
    assert len(listed) == 174 and set(listed["source"]) == {"SEE-AI"}
    assert views["filtered"]["rows"] == 16132 - 174
    assert views["filtered"]["params"]["unmatched_list_entries"] == 0
    s = res.scores
    assert len(s) == 25 * 3
    np.testing.assert_allclose(s["organizer_score"], (s["balanced_accuracy"] + s["macro_auc"]) / 2)
    assert s["balanced_accuracy"].notna().all()  # every view holds all ten classes
    # pooled accuracy = row-weighted mean of the per-source accuracies
    ps = res.per_source
    for (entry, view), g in ps.groupby(["entry", "view"]):
        pooled = s[(s["entry"] == entry) & (s["view"] == view)]["accuracy"].iloc[0]
        assert pooled == pytest.approx(np.average(g["accuracy"], weights=g["rows"]), abs=1e-12)
        eq = s[(s["entry"] == entry) & (s["view"] == view)]["equal_source_accuracy"].iloc[0]
        assert eq == pytest.approx(g["accuracy"].mean(), abs=1e-12)
    # the non-KVASIR view is one source fewer than the official view
    assert set(ps[ps["view"] == "non-KVASIR"]["source"]) == {"AIIMS", "KID", "SEE-AI"}


def test_ranks_and_spearman(result):
    res, final = result
    r = res.ranks
    for view, g in r.groupby("view"):
        assert sorted(g["rank"].dropna().astype(int)) == sorted(
            g["organizer_score"].rank(ascending=False, method="min").astype(int))
    assert (r["rank_change"] == r["official_rank"] - r["rank"]).all()
    assert (r[r["view"] == "official"]["rank_change"] == 0).all()
    fin = final.scores.set_index(final.scores["entry"].map(entry_key))["organizer_score"]
    sp = res.spearman.set_index("view")
    for view, g in r.groupby("view"):
        a = g.set_index(g["entry"].map(entry_key))["organizer_score"]
        rho = spearmanr(a.to_numpy(), fin[a.index].to_numpy()).statistic
        assert sp.loc[view, "rho_final"] == pytest.approx(rho, abs=1e-12)
        assert sp.loc[view, "entries_with_final"] == 25
        assert -1 <= sp.loc[view, "rho_final"] <= 1


def test_final_ranking_needs_opt_in_basename_mode(cv, result):
    _, final = result
    assert final.verdicts["scoreable"].all() and len(final.verdicts) == 27
    assert (final.scores["path_mode"] == "basename").all()
    one = cv["test"][0]
    verdict, _ = check_scoreability(one, cv["test_truth"])  # exact mode: bare filenames
    assert not verdict.scoreable and "4,385 bare filenames" in verdict.reasons[0]
    # reproduces the organizers' published test metrics for 1b2w (metrics_reports_test JSON)
    rep = pd.DataFrame({"entry": ["1b2w"], "balanced_accuracy": [0.2363980606116915],
                        "mean_auc": [0.6426787804902923]})
    again = rescore([p for p in cv["test"] if p.name == "1b2w"], cv["test_truth"],
                    score_kind=KINDS, path_mode="basename", reported=rep, equal_source=False)
    assert (again.reported["abs_error"] < 1e-12).all()


def test_benchmark_file_aligns_after_separator_rule(cv):
    path = cv["root"] / "benchmark-models" / "VGG19" / "VGG19_test_excel.xlsx"
    verdict, aligned = check_scoreability(read_predictions(path, score_kind="probability"),
                                          cv["test_truth"])
    assert verdict.scoreable and verdict.counts["separator_only_matches"] == 4385
    assert aligned.shape == (4385, 10)


def test_pools_from_index(shared_data):
    from splitscope.evaluation.pools import training_pools

    manifest = build_manifest(shared_data / "cv2024" / "capsule_vision_2024_train_val_index.csv")
    res = training_pools(manifest, drop_source="KVASIR", seed=0, batch_size=128)
    s = res.summary.set_index("pool")
    assert s.loc["Full", "rows"] == 37607 and s.loc["Full", "minibatches_per_epoch"] == 293
    assert s.loc["Source-only", "rows"] == 10596
    assert s.loc["Source-only", "minibatches_per_epoch"] == 82
    assert s.loc["Random", "rows"] == 10596 and s.loc["Class-matched", "rows"] == 10596
    assert res.source_counts.loc["Source-only", "KVASIR"] == 0
    assert (res.class_counts.loc["Class-matched"] == res.class_counts.loc["Source-only"]).all()
    assert res.source_counts.loc["Class-matched", "KVASIR"] > 0


def test_protocol_effects_of_the_benchmark_models(cv, filtered_list):
    """The organizers' five benchmark models as run records: Δarch per view, the filtered-view
    and non-KVASIR contrasts (matched by model)."""
    from splitscope.evaluation.effects import protocol_effects, runs_from_predictions
    from splitscope.evaluation.views import official_view

    truth = cv["truth"]
    files = sorted((cv["root"] / "benchmark-models").glob("*/*_validation_excel.xlsx"))
    runs = pd.DataFrame({"model": [f.parent.name for f in files], "seed": 0,
                         "predictions": [str(f) for f in files]})
    views = [official_view(truth), view_where(truth, "source!=KVASIR", "non-KVASIR"),
             view_from_list(truth, filtered_list[0], "exclude", "filtered")]
    scored = runs_from_predictions(runs, truth, views, score_kind="probability")
    assert len(scored) == 15 and scored["scoreable"].all()
    res = protocol_effects(scored, "balanced_accuracy", deduplicated="filtered",
                           external="non-KVASIR")
    da = res.delta_arch.set_index("view")
    off = scored[scored["view"] == "official"]["balanced_accuracy"]
    assert da.loc["official", "delta_arch"] == pytest.approx(off.max() - off.min())
    assert da.loc["official", "models"] == 5
    dedup, transfer = res.contrasts
    assert dedup["runs"] == 5 and transfer["runs"] == 5
    assert transfer["summary_mean"] > 0  # every benchmark model loses BA without KVASIR
