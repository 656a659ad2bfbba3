"""Bootstrap (batched vs per-resample reference, reproducibility), DeLong (fast vs an
independent pairwise implementation), seed statistics."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from splitscope.errors import InputError
from splitscope.evaluation import metrics as M
from splitscope.evaluation import uncertainty as U


def _data(n=300, k=4, seed=0, decimals=None):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    s = rng.random((n, k))
    s[np.arange(n), y] += 0.3
    if decimals is not None:
        s = np.round(s, decimals)
    return y, s


@pytest.mark.parametrize("decimals", [None, 1])
def test_batched_bootstrap_equals_per_resample_metrics(decimals):
    y, s = _data(decimals=decimals)
    k = s.shape[1]
    b = U.bootstrap_metrics(y, s, n_boot=30, seed=4, return_replicates=True,
                            metrics=("balanced_accuracy", "macro_auc", "organizer_score",
                                     "accuracy"))
    idx = U.bootstrap_indices(y.size, 30, 4)
    for r in range(30):
        yy, ss = y[idx[r]], s[idx[r]]
        pred = M.predict(ss)
        ba = M.balanced_accuracy(yy, pred, k)
        auc = np.mean([roc_auc_score(yy == c, ss[:, c]) for c in range(k)])
        assert b["replicates"]["balanced_accuracy"][r] == pytest.approx(ba, abs=1e-12)
        assert b["replicates"]["macro_auc"][r] == pytest.approx(auc, abs=1e-12)
        assert b["replicates"]["organizer_score"][r] == pytest.approx((ba + auc) / 2, abs=1e-12)
        assert b["replicates"]["accuracy"][r] == pytest.approx(M.accuracy(yy, pred), abs=1e-12)


def test_bootstrap_reproducible_by_seed_and_chunk_independent():
    y, s = _data()
    a = U.bootstrap_metrics(y, s, n_boot=50, seed=11, return_replicates=True)
    b = U.bootstrap_metrics(y, s, n_boot=50, seed=11, return_replicates=True)
    c = U.bootstrap_metrics(y, s, n_boot=50, seed=12, return_replicates=True)
    np.testing.assert_array_equal(a["replicates"]["macro_auc"], b["replicates"]["macro_auc"])
    assert not np.array_equal(a["replicates"]["macro_auc"], c["replicates"]["macro_auc"])
    w_small = np.concatenate(list(U.bootstrap_weights(y.size, 50, 11, chunk=7)))
    w_big = np.concatenate(list(U.bootstrap_weights(y.size, 50, 11)))
    np.testing.assert_array_equal(w_small, w_big)
    idx = U.bootstrap_indices(y.size, 50, 11)
    np.testing.assert_array_equal(w_big[3], np.bincount(idx[3], minlength=y.size))
    assert a["kind"].startswith("percentile bootstrap over cases, 50 resamples, seed 11")
    lo, hi = a["balanced_accuracy"]["low"], a["balanced_accuracy"]["high"]
    assert lo <= M.balanced_accuracy(y, M.predict(s), 4) <= hi


def test_bootstrap_counts_undefined_resamples():
    y = np.array([0] * 50 + [1] * 50 + [2])  # class 2 has one row: often absent
    s = np.random.default_rng(0).random((y.size, 3))
    b = U.bootstrap_metrics(y, s, n_boot=200, seed=0)
    assert 0 < b["balanced_accuracy"]["undefined_resamples"] < 200
    assert b["auc_class_set_changed_resamples"] > 0


def test_cluster_bootstrap_keeps_groups_whole():
    groups = np.repeat(["g0", "g1", "g2", "g3"], [3, 1, 2, 4])
    for w in U.cluster_weights(groups, 20, seed=1):
        for g in np.unique(groups):
            vals = w[:, groups == g]
            assert (vals == vals[:, :1]).all()  # every row of a group drawn equally often
        np.testing.assert_array_equal(np.sort(np.unique(
            [w[b, groups == g][0] for b in range(w.shape[0]) for g in np.unique(groups)])),
            np.sort(np.unique([w[b, groups == g][0] for b in range(w.shape[0])
                               for g in np.unique(groups)])))
    y, s = _data(n=10, k=2)
    out = U.bootstrap_metrics(y, s, n_boot=40, seed=0, groups=groups)
    assert out["kind"].startswith("percentile cluster bootstrap over groups")
    with pytest.raises(InputError):
        list(U.cluster_weights(np.array(["a", None], dtype=object), 2))


def _delong_slow(y, scores):
    """Independent reference: pairwise Mann–Whitney kernel ψ(x, y) for every (positive,
    negative) pair, structural components V10, V01 and their covariances."""
    yb = np.asarray(y).astype(bool)
    k = scores.shape[0]
    m, n = yb.sum(), (~yb).sum()
    v10 = np.zeros((k, m))
    v01 = np.zeros((k, n))
    for r in range(k):
        x, z = scores[r][yb], scores[r][~yb]
        psi = (x[:, None] > z[None, :]).astype(float) + 0.5 * (x[:, None] == z[None, :])
        v10[r] = psi.mean(axis=1)
        v01[r] = psi.mean(axis=0)
    aucs = v10.mean(axis=1)
    s10 = np.zeros((k, k))
    s01 = np.zeros((k, k))
    for a in range(k):
        for b in range(k):
            s10[a, b] = np.sum((v10[a] - aucs[a]) * (v10[b] - aucs[b])) / (m - 1)
            s01[a, b] = np.sum((v01[a] - aucs[a]) * (v01[b] - aucs[b])) / (n - 1)
    return aucs, s10 / m + s01 / n


@pytest.mark.parametrize("decimals", [None, 1])
def test_delong_fast_matches_pairwise_reference_and_sklearn(decimals):
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 150)
    a = y + rng.normal(0, 1.0, y.size)
    b = y + rng.normal(0, 1.5, y.size)
    c = rng.normal(0, 1, y.size)
    scores = np.vstack([a, b, c])
    if decimals is not None:
        scores = np.round(scores, decimals)
    aucs, cov = U.delong_covariance(y, scores)
    ref_aucs, ref_cov = _delong_slow(y, scores)
    np.testing.assert_allclose(aucs, ref_aucs, atol=1e-12)
    np.testing.assert_allclose(cov, ref_cov, atol=1e-6)
    for r in range(3):
        assert aucs[r] == pytest.approx(roc_auc_score(y, scores[r]), abs=1e-12)
    t = U.delong_test(y, scores[0], scores[1])
    var = ref_cov[0, 0] + ref_cov[1, 1] - 2 * ref_cov[0, 1]
    z = (ref_aucs[0] - ref_aucs[1]) / np.sqrt(var)
    assert t["z"] == pytest.approx(z, abs=1e-6)
    assert t["p_value"] == pytest.approx(2 * stats.norm.sf(abs(z)), abs=1e-6)
    assert t["low"] < t["difference"] < t["high"]


def test_delong_needs_both_classes():
    with pytest.raises(InputError):
        U.delong_covariance(np.array([1, 1, 0]), np.array([0.1, 0.2, 0.3]))


def test_seed_statistics():
    a = np.array([0.80, 0.82, 0.79, 0.85, 0.81])
    b = np.array([0.78, 0.80, 0.80, 0.82, 0.79])
    s = U.seed_summary(a)
    assert s["sd"] == pytest.approx(np.std(a, ddof=1))
    t = U.paired_t_interval(a, b)
    d = a - b
    half = stats.t.ppf(0.975, 4) * d.std(ddof=1) / np.sqrt(5)
    assert (t["low"], t["high"]) == pytest.approx((d.mean() - half, d.mean() + half))
    res = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert (t["low"], t["high"]) == pytest.approx((res.low, res.high), abs=1e-12)
    sb1, sb2 = U.seed_bootstrap(a, 500, seed=2), U.seed_bootstrap(a, 500, seed=2)
    assert sb1 == sb2 and sb1["low"] <= a.mean() <= sb1["high"]
    with pytest.raises(InputError):
        U.paired_t_interval([0.1])


def test_census_rate_sensitivity_labelled():
    out = U.census_rate_sensitivity([1, 0, 3, 2], [10, 5, 10, 5], seed=0)
    assert out["rate"] == pytest.approx(6 / 30)
    assert "not a sampling interval" in out["kind"]
    assert out["low"] <= out["rate"] <= out["high"]


@pytest.mark.slow
def test_bootstrap_speed_16k_rows_10_classes():
    """2,000 resamples of BA and macro AUC on 16,132 rows × 10 classes finish in seconds."""
    y, s = _data(n=16132, k=10, seed=1)
    t0 = time.perf_counter()
    out = U.bootstrap_metrics(y, s, n_boot=2000, seed=0)
    elapsed = time.perf_counter() - t0
    assert out["macro_auc"]["low"] < out["macro_auc"]["high"]
    assert elapsed < 60  # seconds; measured ~8 s on 2 shared cores


@pytest.mark.parametrize("share", [0.2, 0.8])
def test_weighted_auroc_both_sides_and_ties(share):
    """The batched AUROC looks up the smaller side in the larger one; check both cases."""
    rng = np.random.default_rng(5)
    n = 200
    pos = rng.random(n) < share
    score = np.round(rng.normal(0, 1, n) + pos, 1)
    idx = U.bootstrap_indices(n, 25, 9)
    w = np.stack([np.bincount(i, minlength=n) for i in idx]).astype(np.float32)
    got = U.weighted_auroc(w, pos, score)
    for b in range(25):
        assert got[b] == pytest.approx(roc_auc_score(pos[idx[b]], score[idx[b]]), abs=1e-12)
    plan = U.AurocPlan(pos, score)
    assert [st.flip for st in plan.strata] == [share > 0.5]
