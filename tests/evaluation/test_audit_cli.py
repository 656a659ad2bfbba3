"""audit_predictions (LayerResult with evaluation records) and the CLI verbs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from artifacts_check import assert_artifacts_cover
from eval_helpers import CLASSES, make_predictions, make_truth

from splitscope.cli import main
from splitscope.evaluation.layer import audit_predictions
from splitscope.manifest import build_manifest
from splitscope.records import LayerResult


def _validate(record):
    schema = pytest.importorskip("splitscope.records.schema")
    schema.validate_record(record.to_dict())


@pytest.fixture
def split_manifest(tmp_path):
    """A manifest with val and test rows, and one prediction file covering both."""
    table = make_truth(n=120, seed=2)
    y = table[CLASSES].to_numpy().argmax(axis=1)
    paths = table["image_path"].str.replace("\\", "/", regex=False)
    index = pd.DataFrame({"image_path": paths, "split": np.where(np.arange(120) < 60, "val",
                                                                 "test"),
                          "label": np.asarray(CLASSES)[y], "source": table["Dataset"]})
    index.to_csv(tmp_path / "index.csv", index=False)
    pred = make_predictions(table, quality=0.6)
    pred["image_path"] = paths
    pred.to_csv(tmp_path / "run_predicted_val_dataset.csv", index=False)
    return build_manifest(tmp_path / "index.csv"), tmp_path / "run_predicted_val_dataset.csv"


def test_audit_predictions_records(split_manifest):
    manifest, pred = split_manifest
    res = audit_predictions(manifest, pred, views=["no-S1=where:source!=S1"],
                            score_kind="probability", n_boot=200, seed=1)
    assert isinstance(res, LayerResult)
    ids = [r.id for r in res.records]
    assert ids[0] == "evaluation.scoreability"
    assert "evaluation.metrics.run.official" in ids and "evaluation.metrics.run.no-S1" in ids
    assert "evaluation.threshold_transfer.run" in ids and "evaluation.temperature_scaling" in ids
    assert all(r.layer == "evaluation" for r in res.records)
    met = next(r for r in res.records if r.id == "evaluation.metrics.run.official")
    assert met.uncertainty.kind.startswith("percentile bootstrap over cases, 200 resamples")
    assert met.uncertainty.low <= met.estimate <= met.uncertainty.high
    # val fits the thresholds and the temperature: every view scores the 60 test rows only
    assert met.denominator == 60 and sum(met.class_support.values()) == 60
    assert met.predicate["params"]["view"]["params"]["population"] == "test"
    tt = next(r for r in res.records if r.id == "evaluation.threshold_transfer.run")
    assert tt.boundary["query"]["name"] == "test" and tt.boundary["reference"]["name"] == "val"
    views = res.tables["evaluation_views"]
    assert {"row", "path", "in_official", "in_no-S1"} <= set(views.columns)
    for r in res.records:
        _validate(r)


def test_audit_predictions_single_population_not_assessed(tmp_path):
    table = make_truth(n=30)
    table.to_csv(tmp_path / "t.csv", index=False)
    make_predictions(table).to_csv(tmp_path / "p.csv", index=False)
    res = audit_predictions(tmp_path / "t.csv", tmp_path / "p.csv", n_boot=0)
    tt = next(r for r in res.records if r.id == "evaluation.threshold_transfer")
    assert tt.status == "not assessed" and "two populations" in tt.reason
    assert res.records[0].inputs and len(res.records[0].inputs[0]["sha256"]) == 64


def test_cli_metrics_json_and_exports(tmp_path, capsys):
    table = make_truth(n=45)
    table.to_excel(tmp_path / "truth.xlsx", index=False)
    make_predictions(table).to_csv(tmp_path / "p.csv", index=False)
    code = main(["metrics", str(tmp_path / "p.csv"), "--truth", str(tmp_path / "truth.xlsx"),
                 "--view", "s2=where:source=S2", "--score-kind", "probability", "--resamples",
                 "100", "--json", "--out", str(tmp_path / "out")])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["scoreable"] and [v["view"] for v in out["views"]] == ["official", "s2"]
    assert out["views"][0]["bootstrap"]["n_boot"] == 100
    assert (tmp_path / "out" / "metrics.csv").exists()
    assert assert_artifacts_cover(tmp_path / "out") == ["metrics.csv", "metrics.json"]
    code = main(["metrics", str(tmp_path / "p.csv"), "--truth", str(tmp_path / "truth.xlsx"),
                 "--resamples", "0", "--score-kind", "probability", "--fit", "source=S1",
                 "--evaluate", "source=S2"])
    text = capsys.readouterr().out
    assert code == 0 and "official" in text and "thresholds fitted on source=S1" in text
    assert "temperature T*" in text
    code = main(["metrics", str(tmp_path / "p.csv"), "--truth", str(tmp_path / "truth.xlsx"),
                 "--resamples", "0", "--fit", "source=S1", "--evaluate", "source=S2", "--json"])
    tr = json.loads(capsys.readouterr().out)["transfer"]
    assert tr["fit_rows"] + tr["evaluate_rows"] == 45 and "temperature" not in tr
    assert {r["rule"] for r in tr["threshold_summary"]} == {"default", "youden", "prevalence",
                                                           "oracle"}


def test_cli_rescore_effects_pools(tmp_path, capsys):
    table = make_truth(n=45)
    table.to_csv(tmp_path / "truth.csv", index=False)
    sub = tmp_path / "sub"
    sub.mkdir()
    for i, q in enumerate([0.2, 0.7, 0.5]):
        make_predictions(table, q, seed=i).to_csv(sub / f"t{i}_predicted_val_dataset.csv",
                                                  index=False)
    pd.DataFrame({"entry": ["t0", "t1", "t2"], "final_score": [0.3, 0.9, 0.5]}).to_csv(
        tmp_path / "final.csv", index=False)
    code = main(["rescore", str(sub), "--truth", str(tmp_path / "truth.csv"), "--view",
                 "s2=where:source=S2", "--final-scores", str(tmp_path / "final.csv"),
                 "--exclude", "t2", "--json", "--out", str(tmp_path / "rs")])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["scoreable"] == 3 and out["summary"]["excluded"] == ["t2"]
    assert {r["entry"] for r in out["scores"]} == {"t0", "t1"}
    assert (tmp_path / "rs" / "ranks.csv").exists()
    assert "rescore.json" in assert_artifacts_cover(tmp_path / "rs")
    assert main(["rescore", str(sub), "--truth", str(tmp_path / "truth.csv")]) == 0
    assert "Spearman" in capsys.readouterr().out

    runs = pd.DataFrame({"model": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1],
                         "view": "official", "balanced_accuracy": [0.7, 0.72, 0.8, 0.79]})
    runs.to_csv(tmp_path / "runs.csv", index=False)
    assert main(["effects", str(tmp_path / "runs.csv"), "--json"]) == 0
    eff = json.loads(capsys.readouterr().out)
    assert eff["delta_arch"][0]["delta_arch"] == pytest.approx(0.085)

    index = pd.DataFrame({"image_path": [f"train/x{i}.jpg" for i in range(300)],
                          "split": "train", "label": np.where(np.arange(300) % 4 == 0, "p", "n"),
                          "source": np.where(np.arange(300) % 2 == 0, "A", "B")})
    index.to_csv(tmp_path / "index.csv", index=False)
    assert main(["pools", str(tmp_path / "index.csv"), "--drop-source", "A", "--batch-size",
                 "128", "--json", "--out", str(tmp_path / "pools")]) == 0
    pools = json.loads(capsys.readouterr().out)
    assert "pools.json" in assert_artifacts_cover(tmp_path / "pools")
    rows = {p["pool"]: (p["rows"], p["minibatches_per_epoch"]) for p in pools["pools"]}
    assert rows == {"Full": (300, 2), "Source-only": (150, 1), "Random": (150, 1),
                    "Class-matched": (150, 1)}


def test_cli_input_errors_exit_2(tmp_path, capsys):
    table = make_truth(n=9)
    table.to_csv(tmp_path / "truth.csv", index=False)
    make_predictions(table).to_csv(tmp_path / "p.csv", index=False)
    assert main(["metrics", str(tmp_path / "p.csv"), "--truth", str(tmp_path / "truth.csv"),
                 "--view", "bad"]) == 2
    assert "NAME=KIND" in capsys.readouterr().err
    assert main(["pools", str(tmp_path / "truth.csv"), "--train", "test"]) == 2


def test_audit_auto_query_picks_the_predicted_split(split_manifest, tmp_path):
    manifest, pred = split_manifest
    p = pd.read_csv(pred)
    test_paths = set(manifest.loc[manifest["split"] == "test", "path"])
    p[p["image_path"].isin(test_paths)].to_csv(tmp_path / "only_test.csv", index=False)
    res = audit_predictions(manifest, tmp_path / "only_test.csv", n_boot=0)
    first = res.records[0]
    assert first.numerator == 1 and "'test' 60 of 60 distinct path keys" in first.scope
    every = audit_predictions(manifest, tmp_path / "only_test.csv", n_boot=0, query=None)
    assert every.records[0].numerator == 0  # 60 val rows lack a prediction
