"""Re-training with an external corpus: every run's selected model scored on the external
views, the rows contained in train removed from the deduplicated one, the predictions kept
apart from the audited release's, and the transfer cost measured by `effects` and the
experiments layer."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from experiment_helpers import EXTERNAL_CONTAINED, EXTERNAL_NEW, make_external

from splitscope.cli import main
from splitscope.experiments.backbones import resolve_backbone
from splitscope.experiments.layer import audit_experiment
from splitscope.experiments.protocol import Protocol
from splitscope.experiments.retraining import selected_logits, train_experiment

PROTOCOL = Protocol(image_size=48, epochs=2, batch_size=16)


@pytest.fixture(scope="module")
def external(tiny_release, tmp_path_factory):
    return make_external(tmp_path_factory.mktemp("ext") / "external", tiny_release)


@pytest.fixture(scope="module")
def experiment(tiny_release, external, tmp_path_factory):
    out = tmp_path_factory.mktemp("exp_ext") / "out"
    return train_experiment(tiny_release, out, seeds=(0, 1), pools=("Full",),
                            policies=("frozen", "finetune"), protocol=PROTOCOL, workers=1,
                            device="cpu", external=external)


@pytest.mark.slow
def test_every_run_is_scored_on_both_external_views(experiment):
    info = experiment.info["external"]
    rows = 2 * EXTERNAL_NEW + EXTERNAL_CONTAINED
    assert info["rows"] == rows and info["contained"] == EXTERNAL_CONTAINED
    assert info["skipped"]["label outside the training classes"] == 1
    excluded = pd.read_csv(experiment.out_dir / "external" / "views" /
                           "deduplicated_exclude.csv")
    assert sorted(excluded["path"]) == ["a/copied_a_00.png", "b/copied_b_01.png"]
    runs = pd.read_csv(experiment.out_dir / "runs.csv")
    ba = runs[runs["metric"] == "balanced_accuracy"]
    per_run = ba.groupby(["policy", "seed"])["view"].apply(set)
    assert len(per_run) == 4
    for views in per_run:
        assert {"official", "deduplicated", "external", "external_deduplicated"} <= views
    assert experiment.summary["external_ba"].notna().all()


def test_external_predictions_stay_out_of_the_audited_predictions(experiment):
    out = experiment.out_dir
    assert sorted(p.name for p in (out / "predictions").iterdir()) == sorted(
        f"{rid}.parquet" for rid in experiment.info["runs"])
    for rid in experiment.info["runs"]:
        pred = pd.read_parquet(out / "runs" / rid / "external_predictions.parquet")
        assert len(pred) == experiment.info["external"]["rows"]
        assert set(pred["view"]) == {"external"}
        assert not pred["path"].str.startswith(("train/", "test/")).any()


def test_external_metrics_are_what_metrics_reads(experiment, capsys):
    out = experiment.out_dir
    rid = "small-cnn__finetune__Full__seed1"
    ext = out / "external"
    code = main(["metrics", str(out / "runs" / rid / "external_predictions.parquet"),
                 "--truth", str(ext / "truth.csv"), "--score-kind", "logit", "--view",
                 f"dedup=exclude:{ext / 'views' / 'deduplicated_exclude.csv'}",
                 "--resamples", "0", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    got = {v["view"]: (v["balanced_accuracy"], v["rows"]) for v in doc["views"]}
    runs = pd.read_csv(out / "runs.csv")
    mine = runs[(runs["policy"] == "finetune") & (runs["seed"] == 1)
                & (runs["metric"] == "balanced_accuracy")].set_index("view")["value"]
    rows = experiment.info["external"]["rows"]
    assert got["official"][1] == rows and got["dedup"][1] == rows - EXTERNAL_CONTAINED
    assert got["official"][0] == pytest.approx(mine["external"], abs=1e-12)
    assert got["dedup"][0] == pytest.approx(mine["external_deduplicated"], abs=1e-12)


def test_the_selected_model_reproduces_the_runs_test_logits(experiment):
    """The external logits come from selected.pt: loaded the same way, it gives the run's
    own test logits exactly."""
    from splitscope.features.scanning import scan as run_scan

    out = experiment.out_dir
    s48 = run_scan(experiment.info["release"], experiment.info["workspace"], thumb_size=48,
                   workers=1)
    rows = s48.rows().set_index("path")
    spec = resolve_backbone("small-cnn", None, 0)
    rid = "small-cnn__finetune__Full__seed0"
    pred = pd.read_parquet(out / "runs" / rid / "predictions.parquet")
    images = s48.thumbnails[rows.loc[pred["path"], "thumb_index"].to_numpy(np.int64)]
    logits = selected_logits(out / "runs" / rid, spec, 2, "finetune", images=images,
                             features=None, device="cpu")
    np.testing.assert_allclose(logits, pred[["a", "b"]].to_numpy(), rtol=0, atol=1e-5)


def test_transfer_cost_is_measured_by_effects_and_the_layer(experiment, capsys):
    runs_csv = experiment.out_dir / "runs.csv"
    code = main(["effects", str(runs_csv), "--metric", "balanced_accuracy", "--resamples", "0",
                 "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    cost = next(c for c in doc["contrasts"] if c["contrast"] == "external transfer cost")
    runs = pd.read_csv(runs_csv)
    ba = runs[runs["metric"] == "balanced_accuracy"].pivot_table(
        index=["policy", "seed"], columns="view", values="value")
    expect = (ba["official"] - ba["external"]).mean()
    assert cost["runs"] == 4 and cost["summary_mean"] == pytest.approx(expect, abs=1e-12)
    recs = {r.id: r for r in audit_experiment(experiment.out_dir, n_boot=0).records}
    # one record per policy (the runs of a condition, over its seeds; never pooled)
    for policy in ("frozen", "finetune"):
        rec = recs[f"experiments.view_contrast.external.balanced_accuracy.small_cnn.{policy}."
                   f"full"]
        mine = (ba["official"] - ba["external"]).loc[policy].mean()
        assert rec.denominator == 2 and rec.estimate == pytest.approx(mine, abs=1e-12)
        assert rec.uncertainty.low <= rec.estimate <= rec.uncertainty.high
        dd = recs[f"experiments.view_contrast.external_deduplicated.balanced_accuracy."
                  f"small_cnn.{policy}.full"]
        assert dd.estimate == pytest.approx(
            (ba["official"] - ba["external_deduplicated"]).loc[policy].mean(), abs=1e-12)
        assert f"experiments.view_contrast.deduplicated.balanced_accuracy.small_cnn.{policy}." \
               f"full" in recs


@pytest.mark.slow
def test_a_rerun_reuses_the_external_predictions(experiment, tiny_release, external):
    """(Last: it rewrites the module's experiment folder.)"""
    out = experiment.out_dir
    files = sorted((out / "runs").glob("*/external_predictions.parquet"))
    before = {p: p.stat().st_mtime_ns for p in files}
    again = train_experiment(tiny_release, out, seeds=(0, 1), pools=("Full",),
                             policies=("frozen", "finetune"), protocol=PROTOCOL, workers=1,
                             device="cpu", external=external)
    assert {p: p.stat().st_mtime_ns for p in files} == before
    pd.testing.assert_frame_equal(again.runs, experiment.runs)
    without = train_experiment(tiny_release, out, seeds=(0, 1), pools=("Full",),
                               policies=("frozen", "finetune"), protocol=PROTOCOL, workers=1,
                               device="cpu")
    assert not without.runs["view"].str.startswith("external").any()
    assert "external" not in without.info
