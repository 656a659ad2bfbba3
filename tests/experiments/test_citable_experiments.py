"""What a paper cites from an experiment: AUCs of the tool's own logits on their softmax, a
view that loses a class, control pools beside Removal, pools signed against stale reuse,
groups with gaps, two levels of uncertainty, line progress."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # the module's experiment trains 8 tiny runs (about 30 s)

from splitscope.errors import InputError
from splitscope.evaluation.metrics import balanced_accuracy, softmax
from splitscope.evaluation.uncertainty import bootstrap_indices, paired_case_bootstrap
from splitscope.experiments.commands import epoch_lines
from splitscope.experiments.layer import audit_experiment
from splitscope.experiments.protocol import Protocol, validation_holdout
from splitscope.experiments.retraining import train_experiment

TINY = Protocol(image_size=16, epochs=1, batch_size=16)
SIDE = 24
CENTRES = {"a": (0.5, 0.3), "b": (0.5, 0.7), "c": (0.25, 0.5)}


def _image(rng, label):
    yy, xx = np.mgrid[:SIDE, :SIDE]
    cy, cx = (SIDE * f + rng.normal(0, 1) for f in CENTRES[label])
    disc = ((yy - cy) ** 2 + (xx - cx) ** 2) < (SIDE * 0.18) ** 2
    return np.clip(rng.normal(70, 25, (SIDE, SIDE)) + 120 * disc, 0, 255).astype(np.uint8)


def three_class_release(root: Path) -> Path:
    """Classes a, b, c; every test image of c is a byte copy of a training image, so the
    deduplicated view has no c row. Training files of patients p00…p08 carry a group in
    their name; every fourth has none."""
    rng = np.random.default_rng(1)
    for label in "abc":
        for split in ("train", "test"):
            (root / split / label).mkdir(parents=True, exist_ok=True)
        for i in range(12):
            name = f"p{i % 9:02d}_{label}_{i:02d}.png" if i % 4 else f"x_{label}_{i:02d}.png"
            Image.fromarray(_image(rng, label)).save(root / "train" / label / name)
        if label != "c":
            for i in range(5):
                Image.fromarray(_image(rng, label)).save(root / "test" / label / f"t{i}.png")
    for i in (1, 2):
        shutil.copyfile(root / "train" / "c" / f"p{i:02d}_c_{i:02d}.png",
                        root / "test" / "c" / f"copy{i}.png")
    return root


GROUPS = r"^(?P<group>p\d+)_"


@pytest.fixture(scope="module")
def lost(tmp_path_factory):
    root = tmp_path_factory.mktemp("lost")
    release = three_class_release(root / "release")
    res = train_experiment(release, root / "out", policies=("finetune",), seeds=(0, 1),
                           protocol=TINY, workers=1, device="cpu", group_regex=GROUPS)
    return release, res


def _no_nan(text: str) -> None:
    def refuse(token):
        raise AssertionError(f"bare {token} in a record")
    json.loads(text, parse_constant=refuse)


def test_the_default_pools_are_removal_beside_its_controls(lost):
    _, res = lost
    pools = sorted(set(zip(res.summary["pool"], res.summary["seed"])))
    assert pools == sorted((p, s) for p in ("Full", "Removal", "Class-matched", "Random")
                           for s in (0, 1))
    counts = pd.read_csv(res.out_dir / "pools" / "pool_class_counts.csv").set_index("index")
    assert counts.loc["Removal"].to_dict() == counts.loc["Class-matched"].to_dict()
    sizes = pd.read_csv(res.out_dir / "pools" / "pools.csv").set_index("pool")["rows"]
    assert sizes["Random"] == sizes["Removal"] == sizes["Full"] - 2


def test_macro_auc_of_the_tools_logits_is_sklearns_ovr_auc_on_softmax(lost):
    from sklearn.metrics import roc_auc_score

    _, res = lost
    truth = pd.read_csv(res.out_dir / "truth.csv")
    runs = pd.read_csv(res.out_dir / "runs.csv")
    for rid in res.info["runs"]:
        pred = pd.read_parquet(res.out_dir / "runs" / rid / "predictions.parquet")
        assert (pred["path"].to_numpy() == truth["path"].to_numpy()).all()
        logits = pred[["a", "b", "c"]].to_numpy()
        want = roc_auc_score(truth["label"], softmax(logits), multi_class="ovr",
                             average="macro")
        run = res.info["runs"][rid]
        got = runs[(runs["pool"] == run["pool"]) & (runs["seed"] == run["seed"])
                   & (runs["view"] == "official") & (runs["metric"] == "macro_auc")]["value"]
        assert got.item() == pytest.approx(want, abs=1e-12)


def test_a_view_that_loses_a_class_names_it_and_reports_ba_over_present_classes(lost):
    _, res = lost
    assert res.info["view_classes"]["deduplicated"]["missing_classes"] == ["c"]
    assert res.info["view_classes"]["official"]["missing_classes"] == []
    truth = pd.read_csv(res.out_dir / "truth.csv")
    kept = truth[~truth["path"].str.contains("copy")]
    for rid in res.info["runs"]:
        text = (res.out_dir / "runs" / rid / "run.json").read_text()
        _no_nan(text)
        dedup = json.loads(text)["metrics"]["deduplicated"]
        assert dedup["balanced_accuracy"] is None
        assert "no row of c" in dedup["balanced_accuracy_reason"]
        pred = pd.read_parquet(res.out_dir / "runs" / rid / "predictions.parquet")
        pred = pred.set_index("path").loc[kept["path"]]
        y = kept["label"].map({"a": 0, "b": 1, "c": 2}).to_numpy()
        recall = [np.mean(pred[["a", "b", "c"]].to_numpy()[y == k].argmax(1) == k)
                  for k in (0, 1)]
        assert dedup["balanced_accuracy_present"] == pytest.approx(np.mean(recall), abs=1e-12)
    _no_nan((res.out_dir / "experiment.json").read_text())
    runs = pd.read_csv(res.out_dir / "runs.csv")
    assert np.isfinite(runs["value"]).all()
    dedup = runs[runs["view"] == "deduplicated"]
    assert "balanced_accuracy" not in set(dedup["metric"])
    assert "balanced_accuracy_present" in set(dedup["metric"])
    row = res.summary.iloc[0]
    assert row["deduplicated_ba"] == "undefined (no c row)"
    assert 0 <= row["deduplicated_ba_over_present_classes"] <= 1


def test_records_name_the_missing_class_and_read_removal_against_its_controls(lost):
    _, res = lost
    layer = audit_experiment(res.out_dir, n_boot=100)
    by_id = {r.id: r for r in layer.records}
    for r in layer.records:
        for text in (r.conclusion, r.reason, r.title):
            assert "nan" not in str(text).lower().split()
    ba = by_id["experiments.contrast.removal_full.balanced_accuracy.deduplicated.small_cnn."
               "finetune"]
    assert ba.status == "not assessed" and "no row of c" in ba.reason
    present = by_id["experiments.contrast.removal_full.balanced_accuracy_present."
                    "deduplicated.small_cnn.finetune"]
    assert present.status == "completed" and "BA over present classes" in present.title
    official = by_id["experiments.contrast.removal_full.balanced_accuracy.official."
                     "small_cnn.finetune"]
    beside = {c["contrast"] for c in official.details["controls"]}
    assert beside == {"Class-matched − Full", "Random − Full"}
    assert "beside Class-matched − Full" in official.conclusion
    assert "experiments.contrast.removal_class_matched.balanced_accuracy.official.small_cnn." \
           "finetune" in by_id
    # two levels: seeds (paired-t) and the evaluated rows (cluster bootstrap: truth has groups)
    assert "paired-t" in official.details["seed_level"]["interval"]
    case = official.details["case_level"]
    assert "bootstrap" in case["interval"] and case["low"] <= official.estimate <= case["high"]
    # records never pool conditions: one holdout record per (model, policy, pool)
    holdout = [r for r in layer.records if r.id.startswith("experiments.temperature_scaling")]
    assert len(holdout) == 4 and all(r.denominator == 2 for r in holdout)
    views = [r for r in layer.records if r.id.startswith("experiments.view_contrast.")]
    assert views and all(r.denominator <= 2 for r in views)


def test_rows_without_a_group_are_their_own_groups(lost):
    _, res = lost
    rid = "small-cnn__finetune__Full__seed0"
    run = json.loads((res.out_dir / "runs" / rid / "run.json").read_text())
    hold = run["holdout"]
    assert hold["group_disjoint"] and hold["rows_without_group"] == 9
    assert "9 row(s) without a group" in hold["groups"]
    # the rule itself: known groups never straddle, ungrouped rows are placed one by one
    labels = np.repeat([0, 1], 20)
    groups = np.array([f"g{i // 2}" if i % 5 else None for i in range(40)], dtype=object)
    val, info = validation_holdout(labels, groups, 0.25, 3)
    known = pd.Series(groups).notna().to_numpy()
    assert not set(groups[val & known]) & set(groups[~val & known])
    assert info["rows_without_group"] == 8 and info["group_disjoint"]


def test_another_removal_predicate_into_the_same_out_is_refused_not_reused(lost):
    release, res = lost
    # Full does not depend on the removal predicates: reused as it is
    again = train_experiment(release, res.out_dir, policies=("finetune",), seeds=(0,),
                             pools=("Full",), removal_predicates=("sha256",), protocol=TINY,
                             workers=1, device="cpu", group_regex=GROUPS)
    assert len(again.summary) == 1
    with pytest.raises(InputError, match="trained on another Removal pool"):
        train_experiment(release, res.out_dir, policies=("finetune",), seeds=(0,),
                         pools=("Full", "Removal"), removal_predicates=("sha256",),
                         protocol=TINY, workers=1, device="cpu", group_regex=GROUPS)
    with pytest.raises(InputError, match="trained on another Random pool"):
        train_experiment(release, res.out_dir, policies=("finetune",), seeds=(0,),
                         pools=("Random",), pool_seed=5, protocol=TINY, workers=1,
                         device="cpu", group_regex=GROUPS)


def test_train_reuses_the_workspaces_duplicates_result(lost):
    release, res = lost
    assert res.info["flagged"]["cache"]["hit"] is False
    again = train_experiment(release, res.out_dir, policies=("finetune",), seeds=(0,),
                             pools=("Full",), protocol=TINY, workers=1, device="cpu",
                             group_regex=GROUPS)
    assert again.info["flagged"]["cache"]["hit"] is True
    assert again.info["flagged"]["train_rows"] == res.info["flagged"]["train_rows"] == 2


def test_frozen_without_weights_says_random_features(lost, tmp_path):
    release, res = lost
    assert res.info["start_weights"].startswith("random features")
    frozen = train_experiment(release, tmp_path / "f", policies=("frozen",), seeds=(0,),
                              pools=("Full",), protocol=TINY, workers=1, device="cpu",
                              workspace=res.info["workspace"])
    assert frozen.summary["features"].tolist() == ["random features"]
    run = json.loads((tmp_path / "f" / "runs" / "small-cnn__frozen__Full__seed0" /
                      "run.json").read_text())
    assert run["start_weights"].startswith("random features")
    layer = audit_experiment(tmp_path / "f", n_boot=0)
    protocol = next(r for r in layer.records if r.id == "experiments.protocol")
    assert "random features" in protocol.title
    frozen_records = [r for r in layer.records
                      if (r.predicate or {}).get("params", {}).get("policy") == "frozen"]
    assert frozen_records and all("random features" in r.title for r in frozen_records)


def test_the_paired_case_bootstrap_is_the_hand_resampled_mean_difference():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 40)
    first = [rng.normal(size=(40, 3)) + np.eye(3)[y] * k for k in (1.0, 2.0)]
    second = [rng.normal(size=(40, 3)) for _ in range(2)]
    got = paired_case_bootstrap(y, first, second, n_boot=300, seed=4)
    idx = bootstrap_indices(40, 300, 4)
    d = [np.mean([balanced_accuracy(y[i], a[i].argmax(1), 3)
                  - balanced_accuracy(y[i], b[i].argmax(1), 3) for a, b in zip(first, second)])
         for i in idx]
    lo, hi = np.quantile(d, [0.025, 0.975])
    assert (got["low"], got["high"]) == pytest.approx((lo, hi), abs=1e-12)
    assert "case bootstrap over the 40" in got["kind"]
    groups = np.array([f"p{i // 4}" if i % 3 else None for i in range(40)], dtype=object)
    clustered = paired_case_bootstrap(y, first, second, groups=groups, n_boot=300, seed=4)
    assert "cluster bootstrap over" in clustered["kind"] and "14 without a group" in \
        clustered["kind"]


def test_progress_lines_say_run_epoch_rate_and_eta():
    lines, now = [], iter([10.0, 20.0])
    on_epoch = epoch_lines(lines.append, clock=lambda: next(now))
    entry = {"data_s": 1.0, "compute_s": 8.0, "eval_s": 1.0, "train_images_per_s": 123.4}
    on_epoch(1, 2, "runA", 1, 2, entry)
    on_epoch(1, 2, "runA", 2, 2, entry)
    on_epoch(2, 3, "runB", 3, 3, None)
    assert lines[0] == "run 1/2 runA epoch 1/2: 123 images/s, ETA 0:00:30"
    assert lines[1] == "run 1/2 runA epoch 2/2: 123 images/s, ETA 0:00:20"
    assert lines[2] == "run 2/3 runB: finished earlier, reused"


def test_augmentation_and_cuda_flags_are_recorded_or_refused(lost, tmp_path):
    release, res = lost
    with pytest.raises(InputError, match="CUDA only"):
        train_experiment(release, tmp_path / "amp", policies=("finetune",), seeds=(0,),
                         pools=("Full",), protocol=Protocol(image_size=16, epochs=1, amp=True),
                         workers=1, device="cpu", workspace=res.info["workspace"])
    plain = train_experiment(release, tmp_path / "none", policies=("finetune",), seeds=(0,),
                             pools=("Full",), workers=1, device="cpu",
                             protocol=Protocol(image_size=16, epochs=1, batch_size=16,
                                               augmentation="none"),
                             workspace=res.info["workspace"])
    proto = plain.info["protocol"]
    assert proto["augmentation"]["finetune"] == "none" and proto["precision"] == "float32"
    assert res.info["protocol"]["augmentation"]["finetune"].startswith(
        "random horizontal flip (p 0.5) and random shift")
    with pytest.raises(InputError, match="augmentation"):
        Protocol(augmentation="rotate")
