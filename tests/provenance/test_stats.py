"""Bootstrap intervals and fast metrics against scikit-learn and naive resampling."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, roc_auc_score

from splitscope.provenance.stats import (
    FoldTasks,
    Together,
    balanced_accuracy_rows,
    bootstrap_auc,
    bootstrap_balanced_accuracy,
    run_steps,
    weighted_auc,
)


@pytest.fixture
def data():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 800)
    score = np.round(rng.normal(size=800) + 0.6 * y, 1)  # rounded: many ties
    yt = rng.integers(0, 3, 800)
    yp = np.where(rng.random(800) < 0.6, yt, rng.integers(0, 3, 800))
    return y, score, yt, yp, rng


def test_weighted_auc_matches_sklearn_with_ties_and_weights(data):
    y, score, _, _, rng = data
    assert weighted_auc(y, score)[0] == pytest.approx(roc_auc_score(y, score))
    w = rng.integers(0, 4, y.size)
    assert weighted_auc(y, score, w[None])[0] == pytest.approx(
        roc_auc_score(y, score, sample_weight=w))


def test_balanced_accuracy_rows_matches_sklearn(data):
    _, _, yt, yp, rng = data
    other = rng.integers(0, 3, yt.size)
    got = balanced_accuracy_rows(yt, np.stack([yp, other]))
    assert got[0] == pytest.approx(balanced_accuracy_score(yt, yp))
    assert got[1] == pytest.approx(balanced_accuracy_score(yt, other))


@pytest.mark.slow
def test_bootstrap_intervals_agree_with_naive_case_resampling(data):
    y, score, yt, yp, rng = data
    idx = rng.integers(0, y.size, (400, y.size))
    naive_auc = np.quantile([roc_auc_score(y[i], score[i]) for i in idx], [0.025, 0.975])
    naive_ba = np.quantile([balanced_accuracy_score(yt[i], yp[i]) for i in idx], [0.025, 0.975])
    a = bootstrap_auc(y, score, n_resamples=2000, seed=0)
    b = bootstrap_balanced_accuracy(yt, yp, n_resamples=2000, seed=0)
    assert a["estimate"] == pytest.approx(roc_auc_score(y, score))
    assert b["estimate"] == pytest.approx(balanced_accuracy_score(yt, yp))
    # same distribution: interval ends within Monte-Carlo error of the naive bootstrap
    assert a["low"] == pytest.approx(naive_auc[0], abs=0.012)
    assert a["high"] == pytest.approx(naive_auc[1], abs=0.012)
    assert b["low"] == pytest.approx(naive_ba[0], abs=0.012)
    assert b["high"] == pytest.approx(naive_ba[1], abs=0.012)
    assert a["low"] < a["estimate"] < a["high"]
    assert bootstrap_auc(y, score, n_resamples=300, seed=4) == \
        bootstrap_auc(y, score, n_resamples=300, seed=4)


def test_auc_undefined_with_one_side():
    r = bootstrap_auc(np.ones(5, bool), np.arange(5.0))
    assert r["estimate"] is None and "not defined" in r["kind"]


def test_within_strata_auc_ignores_offsets_between_strata():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400).astype(bool)
    fold = np.repeat(np.arange(4), 100)
    score = rng.normal(size=400) + 0.8 * y + 5.0 * fold  # large per-fold offsets
    per_fold = [roc_auc_score(y[fold == k], score[fold == k]) for k in range(4)]
    pairs = [(y[fold == k].sum() * (~y[fold == k]).sum()) for k in range(4)]
    want = np.average(per_fold, weights=pairs)
    assert weighted_auc(y, score, strata=fold)[0] == pytest.approx(want)
    r = bootstrap_auc(y, score, n_resamples=200, strata=fold)
    assert r["estimate"] == pytest.approx(want) and r["low"] < want < r["high"]


@pytest.mark.parametrize("strata", ["none", "blocks", "interleaved"])
def test_bootstrap_auc_batches_bounded_by_cells_give_the_same_interval(monkeypatch, strata):
    from splitscope.evaluation.uncertainty import bootstrap_weights, weighted_auroc_parts
    from splitscope.provenance import stats

    rng = np.random.default_rng(5)
    y = rng.random(900) < 0.3
    score = rng.normal(size=900) + 0.7 * y
    # interleaved strata are what cross-validation folds look like: each stratum's plan
    # addresses rows scattered through the whole weight matrix
    fold = {"none": None, "blocks": np.repeat(np.arange(3), 300),
            "interleaved": rng.integers(0, 3, 900)}[strata]
    # the interval as computed before batches were bounded and before strata read their rows
    # in place: 250 resamples per batch, each stratum sorted again and scored on its own
    # columns, copied out of the batch
    def auc_of_copied_columns(w):
        w = np.asarray(w, np.float64)
        masks = [np.ones(900, bool)] if fold is None else [fold == k for k in np.unique(fold)]
        parts = [weighted_auroc_parts(w[:, m], y[m], score[m]) for m in masks]
        num, den = sum(p[0] for p in parts), sum(p[1] for p in parts)
        return num / den

    aucs = np.concatenate([auc_of_copied_columns(w)
                           for w in bootstrap_weights(900, 600, seed=2, chunk=250)])
    alpha = (1 - 0.95) / 2
    want = np.quantile(aucs, [alpha, 1 - alpha])
    wide = bootstrap_auc(y, score, n_resamples=600, seed=2, strata=fold)
    assert (wide["low"], wide["high"]) == (want[0], want[1])  # bit for bit
    monkeypatch.setattr(stats, "AUC_CHUNK_CELLS", 2000)  # two resamples per batch
    assert bootstrap_auc(y, score, n_resamples=600, seed=2, strata=fold) == wide


def _square(x):
    return x * x


def _probe(name, values, log):
    """A step generator: work before, one request for calls, work after."""
    log.append(f"{name} start")
    got = yield FoldTasks([(_square, (v,)) for v in values], weight=0.1)
    log.append(f"{name} end")
    return name, got


def _pair(log):
    a, b = yield Together([_probe("a", [1, 2], log), _probe("b", [3], log)])
    (c, got), = yield Together([_probe("c", [a[1][1]], log)])
    return a, b, (c, got)


def test_run_steps_runs_the_calls_of_every_generator_in_one_map(fold_maps):
    maps = fold_maps
    log: list[str] = []
    out = run_steps([_pair(log), _probe("d", [5, 6], log)])
    assert out == [(("a", [1, 4]), ("b", [9]), ("c", [16])), ("d", [25, 36])]
    # first round: a, b and d together (5 calls, weights 0.3 < 1: in this process); then c
    assert maps == [(5, 1), (1, 1)]
    # the work between requests runs in the order the generators were given; one waiting on
    # a Together goes on as soon as the last of them has returned
    assert log == ["a start", "b start", "d start", "a end", "b end", "c start", "d end",
                   "c end"]


def test_run_steps_workers_follow_the_summed_weight_and_explicit_jobs(monkeypatch):
    from splitscope.provenance import stats

    seen = []
    monkeypatch.setattr(stats, "map_folds",
                        lambda func, tasks, jobs=1: seen.append(jobs) or [func(*t) for t in tasks])
    monkeypatch.setattr(stats.os, "sched_getaffinity", lambda _: {0, 1, 2, 3}, raising=False)

    def asking(weight, jobs=None, calls=3):
        return (yield FoldTasks([(_square, (i,)) for i in range(calls)], jobs, weight))

    run_steps([asking(0.6), asking(0.5)])  # together they pay for workers
    run_steps([asking(0.6)])
    run_steps([asking(5.0, jobs=1)])  # asked for explicitly
    run_steps([asking(0.1, jobs=3)])
    run_steps([asking(0.1)], jobs=2)
    assert seen == [4, 1, 1, 3, 2]


def test_run_steps_passes_errors_on_and_checks_requests():
    def failing():
        yield FoldTasks([(_square, (2,))])
        raise ValueError("after the calls")

    with pytest.raises(ValueError, match="after the calls"):
        run_steps([failing()])

    def wrong():
        yield 3

    with pytest.raises(TypeError, match="FoldTasks or Together"):
        run_steps([wrong()])

    def nothing():
        got = yield FoldTasks([])
        together = yield Together([])
        return got, together

    assert run_steps([nothing()]) == [([], [])]


def test_bootstrap_aucs_share_the_resamples_and_give_each_interval_alone():
    from splitscope.provenance.stats import bootstrap_aucs

    rng = np.random.default_rng(4)
    y = rng.random(700) < 0.3
    score = rng.random(700) + 0.4 * y
    y_perm = rng.permutation(y)
    strata = rng.integers(0, 5, 700)
    cases = [(y, score, strata), (y_perm, score, None), (np.zeros(700, bool), score, None),
             (y[:400], score[:400], strata[:400])]  # another length: drawn on its own
    together = bootstrap_aucs(cases, n_resamples=300, seed=3)
    alone = [bootstrap_auc(a, b, strata=c, n_resamples=300, seed=3) for a, b, c in cases]
    assert together == alone  # bit for bit, the undefined case included
    assert together[0]["low"] < together[0]["estimate"] < together[0]["high"]
    assert together[2]["kind"].startswith("not defined")
    # the estimate from the plans equals weighted_auc's
    assert together[0]["estimate"] == float(weighted_auc(y, score, strata=strata)[0])


def test_fold_jobs_never_exceed_the_runs_workers(monkeypatch):
    from splitscope.provenance import stats

    monkeypatch.setattr(stats.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    big = 10 * stats.PARALLEL_CELLS
    assert stats.fold_jobs(big, 5) == 5  # by cost: one per fold, up to every core
    assert stats.fold_jobs(1, 5) == 1  # too cheap for worker processes
    assert stats.fold_jobs(big, 5, jobs=1) == 1
    assert stats.fold_jobs(big, 5, limit=1) == 1
    assert stats.fold_jobs(big, 5, limit=3) == 3
    assert stats.fold_jobs(big, 5, jobs=4, limit=2) == 2
    assert stats.fold_jobs(big, 5, limit=16) == 5


def _asks_for_four():
    """A step generator whose three calls ask for four worker processes."""
    done = yield FoldTasks([(abs, (-i,)) for i in range(3)], jobs=4)
    return done


def test_run_steps_keeps_every_map_within_its_limit(monkeypatch):
    from splitscope.provenance import stats

    maps = []
    monkeypatch.setattr(stats, "map_folds",
                        lambda func, tasks, jobs=1: maps.append(jobs) or [func(*t) for t in tasks])
    assert run_steps([_asks_for_four()]) == [[0, 1, 2]]
    assert run_steps([_asks_for_four()], limit=1) == [[0, 1, 2]]
    assert run_steps([_asks_for_four()], limit=2) == [[0, 1, 2]]
    assert maps == [4, 1, 2]
