"""Controlled re-training on the tiny release: pools, determinism, the files `metrics` and
`effects` read, the frozen-feature cache, resume after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from experiment_helpers import LEAKS

from splitscope.cli import main
from splitscope.experiments.protocol import Protocol, validation_holdout
from splitscope.experiments.retraining import train_experiment

PROTOCOL = Protocol(image_size=48, epochs=2, batch_size=16)
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module")
def experiment(tiny_release, tmp_path_factory):
    out = tmp_path_factory.mktemp("exp") / "out"
    res = train_experiment(tiny_release, out, seeds=(0, 1), pools=("Full", "Removal"),
                           policies=("frozen", "finetune"), protocol=PROTOCOL, workers=1,
                           device="cpu")
    return res


def _logits(path: Path) -> np.ndarray:
    t = pd.read_parquet(path)
    return t[["a", "b"]].to_numpy()


@pytest.mark.slow
def test_every_run_is_trained_scored_and_recorded(experiment):
    s = experiment.summary
    assert len(s) == 8
    assert sorted(set(zip(s["policy"], s["pool"], s["seed"]))) == sorted(
        (p, q, k) for p in ("frozen", "finetune") for q in ("Full", "Removal") for k in (0, 1))
    # the planted leaks: three training originals leave the Removal pool, three test copies
    # leave the deduplicated view
    flagged = experiment.info["flagged"]
    assert flagged["train_rows"] == LEAKS and flagged["test_rows"] == LEAKS
    pools = pd.read_csv(experiment.out_dir / "pools" / "pools.csv").set_index("pool")
    assert pools.loc["Full", "rows"] - pools.loc["Removal", "rows"] == LEAKS
    removed = set(pd.read_csv(experiment.out_dir / "pools" / "pool_full.csv")["path"]) - set(
        pd.read_csv(experiment.out_dir / "pools" / "pool_removal.csv")["path"])
    assert removed == {f"train/{'ab'[i % 2]}/train_{'ab'[i % 2]}_{i:02d}.png"
                       for i in range(LEAKS)}
    excluded = pd.read_csv(experiment.out_dir / "views" / "deduplicated_exclude.csv")
    assert sorted(excluded["path"]) == sorted(f"test/{'ab'[i % 2]}/leak_{'ab'[i % 2]}_{i:02d}"
                                              f".png" for i in range(LEAKS))
    for rid in experiment.info["runs"]:
        run = json.loads((experiment.out_dir / "runs" / rid / "run.json").read_text())
        curve = pd.read_csv(experiment.out_dir / "runs" / rid / "curve.csv")
        assert len(curve) == PROTOCOL.epochs and run["epochs"] == PROTOCOL.epochs
        per_epoch = -(-run["train_rows"] // PROTOCOL.batch_size)
        assert curve["updates"].tolist() == [per_epoch * (e + 1) for e in range(len(curve))]
        assert run["best_epoch"] == int(curve["val_balanced_accuracy"].idxmax()) + 1
        assert run["holdout"]["rows"] + run["train_rows"] == run["pool_rows"]
        assert run["protocol"]["selection"].startswith("epoch of maximum validation")
        assert (experiment.out_dir / "runs" / rid / "selected.pt").is_file()
    assert experiment.info["versions"]["torch"] == torch.__version__


@pytest.mark.slow
def test_the_same_seed_gives_identical_logits(experiment, tiny_release, tmp_path):
    again = train_experiment(tiny_release, tmp_path / "again", seeds=(1,), pools=("Removal",),
                             policies=("finetune", "frozen"), protocol=PROTOCOL, workers=1,
                             device="cpu", workspace=experiment.info["workspace"])
    for policy in ("finetune", "frozen"):
        rid = f"small-cnn__{policy}__Removal__seed1"
        a = _logits(experiment.out_dir / "runs" / rid / "predictions.parquet")
        b = _logits(again.out_dir / "runs" / rid / "predictions.parquet")
        np.testing.assert_array_equal(a, b)
    other = _logits(experiment.out_dir / "runs" / "small-cnn__finetune__Removal__seed0" /
                    "predictions.parquet")
    assert not np.array_equal(other, b)


@pytest.mark.slow
def test_logits_do_not_depend_on_thread_limits_set_by_the_caller(experiment, tiny_release,
                                                                   tmp_path):
    """The experiment runs under one torch thread count whatever pools the caller limited
    (a scan in this process pins BLAS/OpenMP to one thread), so a run resumed in another
    process gives the same logits."""
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    with threadpool_limits(limits=1):
        again = train_experiment(tiny_release, tmp_path / "limited", seeds=(0,),
                                 pools=("Full",), policies=("finetune",), protocol=PROTOCOL,
                                 workers=1, device="cpu",
                                 workspace=experiment.info["workspace"])
    assert torch.get_num_threads() == before
    rid = "small-cnn__finetune__Full__seed0"
    np.testing.assert_array_equal(
        _logits(experiment.out_dir / "runs" / rid / "predictions.parquet"),
        _logits(again.out_dir / "runs" / rid / "predictions.parquet"))


def test_predictions_are_read_unchanged_by_metrics(experiment, capsys):
    out = experiment.out_dir
    rid = "small-cnn__frozen__Full__seed0"
    code = main(["metrics", str(out / "runs" / rid / "predictions.parquet"), "--truth",
                 str(out / "truth.csv"), "--score-kind", "logit", "--view",
                 f"deduplicated=exclude:{out / 'views' / 'deduplicated_exclude.csv'}",
                 "--resamples", "0", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["scoreable"]
    runs = pd.read_csv(out / "runs.csv")
    mine = runs[(runs["policy"] == "frozen") & (runs["pool"] == "Full") & (runs["seed"] == 0)
                & (runs["metric"] == "balanced_accuracy")].set_index("view")["value"]
    got = {v["view"]: v["balanced_accuracy"] for v in doc["views"]}
    assert got["official"] == pytest.approx(mine["official"], abs=1e-12)
    assert got["deduplicated"] == pytest.approx(mine["deduplicated"], abs=1e-12)
    assert [v["rows"] for v in doc["views"]] == [19, 19 - LEAKS]


def test_runs_csv_is_read_unchanged_by_effects(experiment, capsys):
    runs_csv = experiment.out_dir / "runs.csv"
    code = main(["effects", str(runs_csv), "--contrast", "Removal-Full", "--metric",
                 "balanced_accuracy", "--resamples", "0", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    runs = pd.read_csv(runs_csv)
    ba = runs[runs["metric"] == "balanced_accuracy"]
    wide = ba.pivot_table(index=["policy", "view", "seed"], columns="pool", values="value")
    expect = (wide["Removal"] - wide["Full"]).groupby(level=["policy", "view"]).mean()
    paired = pd.DataFrame(doc["paired_contrasts"])
    assert len(paired) == 4
    for row in paired.itertuples():
        assert row.pairs == 2
        assert row.mean == pytest.approx(expect[(row.policy, row.view)], abs=1e-12)


def test_a_rerun_reuses_finished_runs_and_the_frozen_feature_cache(experiment, tiny_release):
    out = experiment.out_dir
    before = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/run.json")}
    cache = Path(experiment.info["feature_cache"]["path"])
    cache_time = cache.stat().st_mtime_ns
    assert experiment.info["feature_cache"]["hit"] is False
    again = train_experiment(tiny_release, out, seeds=(0, 1), pools=("Full", "Removal"),
                             policies=("frozen", "finetune"), protocol=PROTOCOL, workers=1,
                             device="cpu")
    assert again.info["feature_cache"]["hit"] is True
    assert again.info["feature_cache"]["path"] == str(cache)
    assert cache.stat().st_mtime_ns == cache_time
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/run.json")} == before
    pd.testing.assert_frame_equal(again.runs, experiment.runs)


_KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import torch
    from splitscope.experiments.protocol import Protocol
    from splitscope.experiments.retraining import train_experiment

    steps = {"n": 0}
    original = torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        steps["n"] += 1
        if steps["n"] == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    torch.optim.AdamW.step = step
    train_experiment(sys.argv[1], sys.argv[2], seeds=(0,), pools=("Full",),
                     policies=("finetune",), protocol=Protocol(image_size=48, epochs=3,
                     batch_size=16), workers=1, device="cpu")
""")


@pytest.mark.slow
def test_resume_after_kill_9_mid_epoch_gives_identical_results(tiny_release, tmp_path):
    protocol = Protocol(image_size=48, epochs=3, batch_size=16)
    whole = train_experiment(tiny_release, tmp_path / "whole", seeds=(0,), pools=("Full",),
                             policies=("finetune",), protocol=protocol, workers=1,
                             device="cpu")
    rid = "small-cnn__finetune__Full__seed0"
    per_epoch = whole.info["runs"][rid]["updates"] // 3
    script = tmp_path / "kill.py"
    script.write_text(_KILL_SCRIPT)
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": SRC}
    # SIGKILL after the first update of epoch 3: epochs 1-2 are checkpointed, epoch 3 is not
    proc = subprocess.run([sys.executable, str(script), str(tiny_release), str(killed),
                           str(2 * per_epoch + 1)], env=env, capture_output=True, text=True, check=False,
                          timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not (killed / "runs" / rid / "run.json").exists()
    ckpt = json.loads((killed / "runs" / rid / "checkpoint.json").read_text())
    assert ckpt["state"]["epoch"] == 2
    resumed = train_experiment(tiny_release, killed, seeds=(0,), pools=("Full",),
                               policies=("finetune",), protocol=protocol, workers=1,
                               device="cpu")
    assert resumed.info["runs"][rid]["resumed_from"] == 2
    np.testing.assert_array_equal(_logits(killed / "runs" / rid / "predictions.parquet"),
                                  _logits(whole.out_dir / "runs" / rid / "predictions.parquet"))
    a = pd.read_csv(killed / "runs" / rid / "curve.csv")
    b = pd.read_csv(whole.out_dir / "runs" / rid / "curve.csv")
    cols = ["epoch", "train_loss", "val_balanced_accuracy", "updates", "lr"]
    pd.testing.assert_frame_equal(a[cols], b[cols])


def test_validation_holdout_is_stratified_seeded_and_group_disjoint():
    labels = np.repeat([0, 1], [60, 40])
    mask, info = validation_holdout(labels, None, 0.15, seed=3)
    assert mask.sum() == 15 and info["group_disjoint"] is False
    assert np.bincount(labels[mask]).tolist() == [9, 6]
    np.testing.assert_array_equal(mask, validation_holdout(labels, None, 0.15, seed=3)[0])
    assert not np.array_equal(mask, validation_holdout(labels, None, 0.15, seed=4)[0])
    groups = np.array([f"p{i // 4}" for i in range(100)], dtype=object)
    gmask, ginfo = validation_holdout(labels, groups, 0.15, seed=0)
    assert ginfo["group_disjoint"] is True
    assert not set(groups[gmask]) & set(groups[~gmask])
    assert 0.08 < gmask.mean() < 0.25 and set(labels[gmask]) == {0, 1}


def test_a_pool_too_small_for_a_holdout_is_an_input_error():
    from splitscope.errors import InputError

    with pytest.raises(InputError, match="too few"):
        validation_holdout(np.array([0, 0, 0, 1]), None, 0.15, seed=0)


def test_a_finished_run_under_another_protocol_is_not_reused(experiment, tiny_release):
    from splitscope.errors import InputError

    other = Protocol(image_size=48, epochs=3, batch_size=16)
    with pytest.raises(InputError, match="another protocol"):
        train_experiment(tiny_release, experiment.out_dir, seeds=(0,), pools=("Full",),
                         policies=("frozen",), protocol=other, workers=1, device="cpu")


@pytest.mark.slow
def test_a_label_map_sets_the_trained_classes(tiny_release, tmp_path):
    res = train_experiment(tiny_release, tmp_path / "out", seeds=(0,), pools=("Full",),
                           policies=("frozen",), protocol=PROTOCOL, workers=1, device="cpu",
                           label_map="a=x,b=y")
    assert res.info["classes"] == ["x", "y"]
    assert res.info["label_map"]["map"] == {"a": "x", "b": "y"}
    logits = pd.read_parquet(next((tmp_path / "out" / "predictions").glob("*.parquet")))
    assert {"x", "y"} <= set(logits.columns) and not {"a", "b"} & set(logits.columns)


def test_holdout_transfer_equals_the_evaluation_functions():
    from splitscope.evaluation.calibration import fit_temperature
    from splitscope.evaluation.metrics import expected_calibration_error, softmax
    from splitscope.evaluation.thresholds import threshold_transfer_multiclass
    from splitscope.experiments.retraining import holdout_transfer

    rng = np.random.default_rng(3)
    y_val, y_test = rng.integers(0, 3, 60), rng.integers(0, 3, 90)
    val = rng.normal(size=(60, 3)) + 2.5 * np.eye(3)[y_val]
    test = rng.normal(size=(90, 3)) + 2.0 * np.eye(3)[y_test]
    out = holdout_transfer(y_val, val, y_test, test, ["a", "b", "c"])
    t = fit_temperature(y_val, val, "logit")
    assert out["temperature"] == pytest.approx(t, abs=1e-12)
    assert out["ece_before"] == pytest.approx(expected_calibration_error(y_test, softmax(test)))
    assert out["ece_after"] == pytest.approx(expected_calibration_error(y_test,
                                                                        softmax(test, t)))
    table = threshold_transfer_multiclass(y_val, softmax(val), y_test, softmax(test),
                                          ["a", "b", "c"], rules=("default", "youden"))
    youden = table.loc[table["rule"] == "youden", "eval_balanced_accuracy"].mean()
    assert out["youden_ba"] == pytest.approx(youden) and out["classes_assessed"] == 3
    one = holdout_transfer(np.zeros(5, int), val[:5], y_test, test, ["a", "b", "c"])
    assert "reason" in one and "temperature" not in one


def test_torch_threads_follow_the_runs_workers_and_are_restored():
    from splitscope.experiments.retraining import torch_threads
    from splitscope.features.executors import default_workers

    before = torch.get_num_threads()
    with torch_threads(torch, 1) as n:
        assert n == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == before
    with torch_threads(torch, None) as n:  # no workers given: every core
        assert n == default_workers() == torch.get_num_threads()
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), torch_threads(torch, 1):
        raise RuntimeError("stops the run")
    assert torch.get_num_threads() == before


def test_the_flagged_rows_search_on_the_runs_workers(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from splitscope.experiments.retraining import flagged_from_scan
    from splitscope.records import LayerResult
    from splitscope.relations import duplicates

    seen = []

    def spy(scan, boundaries, search=None, **options):
        seen.append(options.get("workers"))
        flags = pd.DataFrame({"boundary": ["train → test", "test → train"], "row": [1, 2],
                              "sha256": [True, True]})
        return LayerResult([], {"query_flags": flags})

    monkeypatch.setattr(duplicates, "audit_duplicates", spy)
    scan = SimpleNamespace(meta={"result": "r"}, manifest=pd.DataFrame({"row": [1, 2]}),
                           params=SimpleNamespace(key=lambda: "k"), workspace=tmp_path)
    train, test, _ = flagged_from_scan(scan, ["sha256"], ["sha256"], workers=1)
    assert seen == [1] and train.tolist() == [1] and test.tolist() == [2]
