"""Partition classifier (METHODS §4.4): a planted content shift is found, none is not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitscope.errors import InputError
from splitscope.features.embeddings import load_embeddings
from splitscope.provenance.partition import (
    content_features,
    internal_split,
    partition_classifier,
    proxy_a_distance,
)


def _thumbs(n, rng, bright=0):
    base = rng.integers(0, 200, (n, 96, 96)).astype(np.int64) + bright
    return np.clip(base, 0, 255).astype(np.uint8)


def test_content_features_shape_and_values():
    t = np.zeros((2, 96, 96), np.uint8)
    t[1] = 255
    f = content_features(t)
    assert f.shape == (2, 16 * 16 + 32)
    assert np.allclose(f[0, :256], 0) and np.allclose(f[1, :256], 1)
    assert f[0, 256] == 1 and f[1, -1] == 1  # all mass in the first / last bin
    assert np.allclose(f[:, 256:].sum(1), 1)
    # area mean: a 6×6 block mean
    t2 = np.random.default_rng(0).integers(0, 256, (1, 96, 96)).astype(np.uint8)
    assert content_features(t2)[0, 0] == pytest.approx(t2[0, :6, :6].mean() / 255, rel=1e-5)


@pytest.mark.parametrize("size", [96, 100])
def test_content_features_equal_plain_numpy_in_every_block(size):
    t = np.random.default_rng(size).integers(0, 256, (1100, size, size)).astype(np.uint8)
    off = (size - 96) // 2
    core = t[:, off:off + 96, off:off + 96].astype(np.int64)
    # exact: integer block sums, one division correctly rounded to float32
    sums = core.reshape(-1, 16, 6, 16, 6).sum(axis=(2, 4)).reshape(len(t), -1)
    means = (sums / (36 * 255)).astype(np.float32)
    hist = np.stack([np.bincount(x.ravel() // 8, minlength=32) for x in t]) / size ** 2
    got = content_features(t, block=512)  # three blocks, the last one partial
    assert np.array_equal(got[:, :256], means)
    assert np.array_equal(got[:, 256:], hist.astype(np.float32))


def test_logistic_folds_reach_the_optimum():
    """The logistic fits are converged: their held-out scores are those of a separately,
    tightly converged fit of the same penalised loss (so no CPU-dependent stopping point)."""
    import warnings

    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from splitscope.provenance.partition import _classifier

    rng = np.random.default_rng(3)
    X = content_features(np.concatenate([_thumbs(300, rng), _thumbs(200, rng, bright=3)]))
    X = X.astype(np.float64)
    y = np.r_[np.zeros(300, bool), np.ones(200, bool)]
    got = _classifier("logistic", 0).fit(X, y).predict_proba(X)[:, 1]
    Z = StandardScaler().fit_transform(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = LogisticRegression(C=1.0, class_weight="balanced", tol=1e-12,
                                 max_iter=100_000).fit(Z, y).predict_proba(Z)[:, 1]
    assert np.abs(got - ref).max() < 1e-6


def test_proxy_a_distance():
    y = np.array([1, 1, 0, 0], bool)
    assert proxy_a_distance(y, np.array([0.9, 0.8, 0.1, 0.2]))[0] == pytest.approx(2.0)
    assert proxy_a_distance(y, np.array([0.9, 0.1, 0.9, 0.1]))[0] == pytest.approx(0.0)


def test_planted_shift_found_and_control_at_chance():
    rng = np.random.default_rng(0)
    X = content_features(np.concatenate([_thumbs(150, rng), _thumbs(60, rng, bright=40)]))
    y = np.r_[np.zeros(150, bool), np.ones(60, bool)]
    rows = pd.DataFrame({"row": np.arange(210), "path": [f"p{i}" for i in range(210)],
                         "label": np.where(np.arange(210) % 2, "a", "b")})
    r = partition_classifier(X, y, rows=rows, n_resamples=300)
    assert r.auc["low"] > 0.9 and r.d_a > 1.0
    assert abs(r.control["auc"]["estimate"] - 0.5) < 0.15
    assert set(r.auc_by_class["label"]) == {"a", "b"}
    assert (r.auc_by_class["auc"] > 0.85).all()
    assert r.scores["prob_test"].notna().all()


def test_no_shift_gives_auc_near_half():
    rng = np.random.default_rng(1)
    X = content_features(_thumbs(200, rng))
    y = internal_split(200, 0.25, seed=2)
    assert y.sum() == 50
    r = partition_classifier(X, y, n_resamples=300, shuffled_control=False)
    assert r.auc["low"] < 0.5 < r.auc["high"]


def test_embeddings_by_path(tmp_path):
    table = pd.DataFrame({"path": ["b", "a"], "e0": [1.0, 2.0], "e1": [3.0, 4.0]})
    table.to_parquet(tmp_path / "emb.parquet")
    got = load_embeddings(tmp_path / "emb.parquet", pd.Series(["a", "b"]))
    assert np.allclose(got, [[2, 4], [1, 3]])
    with pytest.raises(InputError, match="no embedding"):
        load_embeddings(table, pd.Series(["c"]))


def test_bad_features():
    with pytest.raises(InputError):
        partition_classifier(np.full((4, 2), np.nan), np.array([0, 0, 1, 1], bool))


@pytest.mark.slow
def test_partition_folds_in_worker_processes_give_the_same_probabilities():
    from splitscope.provenance.partition import _oof_prob

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6))
    y = rng.random(300) < 0.3
    X[y, 0] += 0.8
    p1, f1, _, _ = _oof_prob(X, y, None, folds=5, seed=0, classifier="logistic", jobs=1)
    p2, f2, _, _ = _oof_prob(X, y, None, folds=5, seed=0, classifier="logistic", jobs=2)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(f1, f2)


@pytest.mark.parametrize("bins", [32, 24, 256, 7, 1])
def test_content_feature_histogram_bins_are_value_times_bins_over_256(bins):
    """Bin of value v is v·bins // 256, whether or not ``bins`` divides 256."""
    t = np.random.default_rng(bins).integers(0, 256, (40, 96, 96)).astype(np.uint8)
    want = np.stack([np.bincount(x.ravel().astype(np.int64) * bins // 256, minlength=bins)
                     for x in t]) / 96 ** 2
    got = content_features(t, bins=bins, block=16)
    assert np.array_equal(got[:, 256:], want.astype(np.float32))


def test_auc_intervals_run_in_workers_above_their_size_with_the_same_result(monkeypatch):
    """A partition's AUC intervals are one request of seeded calls: below
    PARALLEL_CELLS_BOOTSTRAP they run here, above it in worker processes, with the same
    intervals."""
    from splitscope.provenance import partition, stats

    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 5))
    y = rng.random(400) < 0.4
    X[y, 0] += 0.6
    rows = pd.DataFrame({"row": np.arange(400), "path": [f"f{i}" for i in range(400)],
                         "label": np.where(rng.random(400) < 0.5, "a", "b")})
    seen = []
    real = stats.map_folds

    def recording(func, tasks, jobs=1):
        seen.append((tasks[0][0], jobs))
        return real(func, tasks, jobs)

    monkeypatch.setattr(stats, "map_folds", recording)
    here = partition_classifier(X, y, rows=rows, n_resamples=300)
    monkeypatch.setattr(partition, "PARALLEL_CELLS_BOOTSTRAP", 1)
    there = partition_classifier(X, y, rows=rows, n_resamples=300)
    rounds = [(fn, jobs) for fn, jobs in seen if fn is partition._bootstrap_aucs]
    # three calls: the classifier with its control, and each class (one worker per core)
    assert [jobs for _, jobs in rounds] == [1, stats.fold_jobs(1, 3, None, 1)]
    assert here.auc == there.auc and here.control == there.control
    pd.testing.assert_frame_equal(here.auc_by_class, there.auc_by_class, check_exact=True)
    assert list(here.auc_by_class["label"]) == ["a", "b"]


def test_partition_steps_do_not_keep_the_matrix_in_its_listed_order():
    """While the folds run, the generator holds the reordered matrix only, not the one it was
    given as well."""
    import gc
    import weakref

    from splitscope.provenance.partition import partition_steps
    from splitscope.provenance.stats import Together

    rng = np.random.default_rng(0)
    X = rng.random((120, 6)).astype(np.float32)
    given = weakref.ref(X)
    steps = partition_steps(X, rng.random(120) < 0.3, folds=3, n_resamples=50)
    del X
    assert isinstance(next(steps), Together)  # the folds are asked for
    gc.collect()
    assert given() is None
    steps.close()


@pytest.mark.parametrize("classifier", ["logistic", "hgb"])
def test_held_out_rows_scored_in_blocks_score_as_at_once(monkeypatch, classifier):
    """A fold scores its held-out rows a block at a time (bounded float64 copies): every
    probability is the one scoring them all at once gives: bit for bit from the trees, to the
    last bits of the BLAS product's blocking from the logistic model."""
    from splitscope.provenance import partition

    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 12)).astype(np.float32)
    y = rng.random(300) < 0.3
    X[y, :3] += 0.8
    whole = partition_classifier(X, y, n_resamples=20, classifier=classifier)
    monkeypatch.setattr(partition, "SCORE_BLOCK", 7)
    blocked = partition_classifier(X, y, n_resamples=20, classifier=classifier)
    if classifier == "hgb":
        np.testing.assert_array_equal(blocked.scores["prob_test"], whole.scores["prob_test"])
        assert blocked.auc == whole.auc
    else:
        np.testing.assert_allclose(blocked.scores["prob_test"], whole.scores["prob_test"],
                                   rtol=1e-13, atol=0)
        assert blocked.auc["estimate"] == pytest.approx(whole.auc["estimate"], abs=1e-12)
