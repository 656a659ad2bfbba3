"""Protocol effects from run records (§5.8) and training-pool controls (§5.9)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from splitscope.errors import InputError
from splitscope.evaluation import effects as E
from splitscope.evaluation.pools import class_order, training_pools
from splitscope.manifest import build_manifest


def _runs():
    rows = []
    base = {"resnet": 0.80, "vit": 0.86}
    for model, policy, seed, view in itertools.product(base, ["frozen", "finetuned"], [0, 1, 2],
                                                       ["official", "deduplicated",
                                                        "external"]):
        v = base[model] + (0.05 if policy == "finetuned" else 0) + 0.01 * seed
        v -= {"official": 0, "deduplicated": 0.03, "external": 0.10}[view]
        rows.append({"model": model, "policy": policy, "seed": seed, "view": view,
                     "balanced_accuracy": v})
    return pd.DataFrame(rows)


def test_delta_arch_and_component_effects():
    runs = _runs()
    da = E.delta_arch(runs)
    assert set(da["delta_arch"].round(12)) == {0.06}
    assert (da["best_model"] == "vit").all()
    ce = E.component_effect(runs, "policy", baseline="frozen")
    row = ce.iloc[0]
    assert row["level"] == "finetuned" and row["pairs"] == 18
    assert row["mean_abs_delta"] == pytest.approx(0.05) and row["max_abs_delta"] == \
        pytest.approx(0.05)
    single = E.component_effect(runs[runs["policy"] == "frozen"], "policy")
    assert "only one level" in single.loc[0, "reason"]


def test_view_contrasts_with_paired_t():
    runs = _runs()
    d = E.dedup_sensitivity(runs)
    assert d["runs"] == 12 and d["summary_mean"] == pytest.approx(0.03)
    assert d["interval"]["low"] == pytest.approx(0.03) and d["interval"]["kind"].startswith(
        "paired-t 95% interval over 12 runs matched on model, policy, seed")
    tcost = E.transfer_cost(runs)
    assert tcost["summary_mean"] == pytest.approx(0.10)
    res = E.protocol_effects(runs, components=("policy", "threshold"))
    assert any("threshold" in s for s in res.params["skipped"])
    assert len(res.contrasts) == 2
    js = res.to_json()
    assert js["params"]["metric"] == "balanced_accuracy"


def test_did_true_class_probability():
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(4):
        for arm, exposed_drop in (("local", 0.2), ("distant", 0.0)):
            for exposed in (True, False):
                p = 0.8 - (exposed_drop if exposed else 0.02 if arm == "local" else 0.0)
                for _ in range(20):
                    rows.append({"arm": arm, "seed": seed, "exposed": exposed,
                                 "p_true": p + rng.normal(0, 0.01)})
    out = E.did_true_class_probability(pd.DataFrame(rows))
    assert out["did"] == pytest.approx(0.2 - 0.02, abs=0.01)
    assert out["seeds"] == 4 and out["interval"]["low"] < out["did"] < out["interval"]["high"]
    with pytest.raises(InputError):
        E.did_true_class_probability(pd.DataFrame(rows), treated="nowhere")


def test_read_runs_rejects_non_numeric_metric(tmp_path):
    runs = _runs()
    runs["balanced_accuracy"] = runs["balanced_accuracy"].astype(object)
    runs.loc[0, "balanced_accuracy"] = "high"
    with pytest.raises(InputError, match="non-numeric"):
        E.read_runs(runs)


@pytest.fixture
def manifest(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(400):
        label = ["a", "b", "c", "d"][int(rng.integers(0, 4))]
        src = "K" if i % 3 == 0 else ("S" if i % 3 == 1 else "T")
        split = "training" if i < 300 else "validation"
        rows.append({"image_path": f"{split}/{label}/{src}/f{i}.jpg", "split": split,
                     "label": label, "source": src})
    p = tmp_path / "index.csv"
    pd.DataFrame(rows).to_csv(p, index=False)
    return build_manifest(p)


def test_pools_counts_and_reproducibility(manifest, tmp_path):
    train = manifest[manifest["split"] == "train"]
    flagged = train[(train["source"] == "S")].iloc[:10][["path"]]
    res = training_pools(manifest, drop_source="K", flagged=flagged, seed=3, batch_size=16)
    s = res.summary.set_index("pool")
    n_full, n_k = len(train), int((train["source"] == "K").sum())
    assert s.loc["Full", "rows"] == n_full
    assert s.loc["Source-only", "rows"] == n_full - n_k
    assert s.loc["Removal", "rows"] == n_full - n_k - 10
    assert s.loc["Random", "rows"] == s.loc["Removal", "rows"]
    assert (s["minibatches_per_epoch"] == s["rows"] // 16).all()
    cc = res.class_counts
    assert (cc.loc["Class-matched"] == cc.loc["Removal"]).all()
    assert (cc.loc["Within-class replacement"] == cc.loc["Source-only"]).all()
    assert res.source_counts.loc["Source-only", "K"] == 0
    again = training_pools(manifest, drop_source="K", flagged=flagged, seed=3, batch_size=16)
    other = training_pools(manifest, drop_source="K", flagged=flagged, seed=4, batch_size=16)
    for a, b, c in zip(res.pools, again.pools, other.pools):
        np.testing.assert_array_equal(a.rows, b.rows)
    assert not np.array_equal(res.pools[3].rows, other.pools[3].rows)
    flagged_ids = set(manifest.loc[manifest["path"].isin(flagged["path"]), "row"])
    assert not flagged_ids & set(res.pools[5].rows)  # replacement never reintroduces them
    files = res.write(tmp_path / "pools", manifest)
    assert (tmp_path / "pools" / "pool_removal.csv").exists() and len(files) == 10
    listed = pd.read_csv(tmp_path / "pools" / "pool_random.csv")
    assert len(listed) == s.loc["Random", "rows"]
    nodrop = training_pools(manifest, batch_size=16, drop_last=False)
    assert nodrop.summary.loc[0, "minibatches_per_epoch"] == -(-n_full // 16)


def test_draw_order_rules(manifest):
    counts = {"b": 5, "a": 5, "c": 9}
    assert class_order(manifest, counts, "class-name") == ["a", "b", "c"]
    assert class_order(manifest, counts, "size-desc") == ["c", "a", "b"]
    first = list(pd.unique(manifest["label"]))
    assert class_order(manifest, counts, "release") == [c for c in first if c in counts]
    a = training_pools(manifest, drop_source="K", seed=0, draw_order="class-name")
    b = training_pools(manifest, drop_source="K", seed=0, draw_order="size-desc")
    assert (a.class_counts.loc["Class-matched"] == b.class_counts.loc["Class-matched"]).all()
    with pytest.raises(InputError):
        training_pools(manifest, draw_order="random")
    with pytest.raises(InputError, match="not in the training pool"):
        training_pools(manifest, drop_source="Z")


def test_runs_and_true_class_table_from_prediction_files(tmp_path):
    from eval_helpers import CLASSES, make_predictions, make_truth

    from splitscope.evaluation.predictions import read_truth
    from splitscope.evaluation.views import official_view, view_where

    table = make_truth(n=30)
    table.to_csv(tmp_path / "t.csv", index=False)
    truth = read_truth(tmp_path / "t.csv")
    rows = []
    for arm in ("local", "distant"):
        for seed in (0, 1):
            p = make_predictions(table, quality=0.3 if arm == "local" else 0.6, seed=seed)
            name = f"{arm}_{seed}.csv"
            p.to_csv(tmp_path / name, index=False)
            rows.append({"model": "m", "arm": arm, "seed": seed, "predictions": name})
    runs = pd.DataFrame(rows)
    scored = E.runs_from_predictions(runs, truth, [official_view(truth),
                                                   view_where(truth, "source=S2", "s2")],
                                     base=tmp_path)
    assert len(scored) == 8 and scored["scoreable"].all()
    assert scored["balanced_accuracy"].between(0, 1).all()
    tc = E.true_class_table(runs, truth, exposed=[0, 1, 2, 3, 4], base=tmp_path)
    assert len(tc) == 4 * 30 and tc["exposed"].sum() == 4 * 5
    p0 = make_predictions(table, quality=0.3, seed=0)[CLASSES].to_numpy()
    first = tc[(tc["arm"] == "local") & (tc["seed"] == 0)]["p_true"].to_numpy()
    np.testing.assert_allclose(first, p0[np.arange(30), truth.labels])
    out = E.did_true_class_probability(tc)
    assert out["seeds"] == 2 and np.isfinite(out["did"])
