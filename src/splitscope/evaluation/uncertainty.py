"""Uncertainty of evaluation numbers (METHODS §5.5).

- **Percentile bootstrap over cases**: ``n_boot`` (default 2,000) resamples of the rows with
  replacement, indices drawn from ``numpy.random.default_rng(seed)`` (in chunks of rows of the
  one ``(n_boot, n)`` index matrix, so the result depends only on the seed); the metrics of all
  resamples are computed in batch from the resample-count matrix ``W`` (``W[b, i]`` = times
  row i is drawn in resample b): per-class supports and hits are matrix products, AUROC is the
  weighted Mann–Whitney statistic over score-sorted rows with midrank ties.
- **Cluster bootstrap**: the same with groups (patients, videos) drawn with replacement and
  every row of a drawn group taken.
- **DeLong** test for paired AUROC differences (fast midrank algorithm of Sun & Xu 2014).
- Over seeds: mean ± SD, paired-t 95% interval (t₀.₉₇₅,ₙ₋₁·SD/√n), seed bootstrap.
- **Census rate sensitivity**: resampling m of the G groups (pooled numerator over pooled
  denominator); a census rate is not a sample estimate and the output says so.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy import stats

from splitscope.errors import InputError
from splitscope.evaluation.metrics import check_inputs, predict
from splitscope.options import RunOptions

BOOTSTRAP_METRICS = ("balanced_accuracy", "macro_auc", "organizer_score", "accuracy",
                     "balanced_accuracy_present")
DEFAULT_BOOT = RunOptions.resamples
_CHUNK_CELLS = 4_000_000  # rows × resamples per batch (bounds memory to ~100 MB)


# --------------------------------------------------------------------------------------------
# resampling


def bootstrap_weights(n: int, n_boot: int = DEFAULT_BOOT, seed: int = RunOptions.seed,
                      chunk: int | None = None, dtype=np.float32):
    """Yield resample-count matrices ``W`` (chunk, n) of a case bootstrap, in resample order.

    The indices are the rows of ``default_rng(seed).integers(0, n, (n_boot, n))``, drawn chunk
    by chunk from the one generator: resample b is the same whatever the chunk size.
    ``dtype``: of the counts (float32 for matrix products; an integer type for
    :func:`weighted_auroc_parts`' exact integer sums).
    """
    if n <= 0:
        raise InputError("cannot bootstrap an empty view")
    chunk = chunk or max(1, min(n_boot, _CHUNK_CELLS // n))
    rng = np.random.default_rng(seed)
    for w in _draw_counts(rng, n, n_boot, chunk):
        yield w.astype(dtype, copy=False)


def _draw_counts(rng: np.random.Generator, n: int, n_boot: int, chunk: int):
    """Yield ``(b, n)`` matrices counting how often each of ``n`` items is drawn in each of
    ``n_boot`` resamples of size ``n`` (with replacement), ``chunk`` resamples at a time.
    Counted resample by resample: one count table of ``n`` stays in cache, where one of
    ``b·n`` cells (32 MB at a million rows) made every increment a cache miss."""
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        idx = rng.integers(0, n, (b, n))
        counts = np.empty((b, n), np.int64)
        for k in range(b):
            counts[k] = np.bincount(idx[k], minlength=n)
        yield counts
        done += b


def bootstrap_indices(n: int, n_boot: int = DEFAULT_BOOT, seed: int = RunOptions.seed) -> np.ndarray:
    """The ``(n_boot, n)`` index matrix behind :func:`bootstrap_weights` (for checks and for
    metrics that are not batched)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, (n_boot, n))


def cluster_weights(groups, n_boot: int = DEFAULT_BOOT, seed: int = RunOptions.seed, chunk: int | None = None):
    """Yield row-weight matrices of a cluster bootstrap: groups drawn with replacement (as
    many as there are groups), each drawn group contributing all its rows."""
    codes, uniques = _group_codes(groups)
    chunk = chunk or max(1, min(n_boot, _CHUNK_CELLS // max(codes.size, 1)))
    for wg in _draw_counts(np.random.default_rng(seed), uniques.size, n_boot, chunk):
        yield wg[:, codes].astype(np.float32)


def _group_codes(groups) -> tuple[np.ndarray, np.ndarray]:
    arr = np.asarray(groups, dtype=object)
    if pd.isna(pd.Series(arr, dtype="object")).any():
        raise InputError("cluster bootstrap needs a group for every row; some rows have none")
    uniques, codes = np.unique(arr.astype(str), return_inverse=True)
    return codes.astype(np.int64), uniques


# --------------------------------------------------------------------------------------------
# batched metrics over weight matrices


def weighted_class_counts(w: np.ndarray, y: np.ndarray, pred: np.ndarray, k: int):
    """Per-resample class support and hits: ``(b, k)`` each."""
    onehot = np.zeros((y.size, k))
    onehot[np.arange(y.size), y] = 1.0
    support = (w @ onehot.astype(w.dtype)).astype(np.float64)
    hits = (w @ (onehot * (pred == y)[:, None]).astype(w.dtype)).astype(np.float64)
    return support, hits


class _Stratum(NamedTuple):
    """One stratum's block of an :class:`AurocPlan`: columns ``start:split`` of the gathered
    weights are its larger side sorted by score, ``split:stop`` its smaller side sorted by
    score; ``lt``/``le`` index each smaller-side row's place among the larger side (strictly
    below, below or tied); ``flip`` when the larger side is the positive one."""

    start: int
    split: int
    stop: int
    lt: np.ndarray
    le: np.ndarray
    flip: bool


class AurocPlan:
    """Precomputed sort structure of one class's scores for :func:`weighted_auroc_parts`.

    A batch of weights is gathered once into the plan's column ``order``; in each stratum
    (default: one for all rows) the side with fewer rows is looked up in the cumulative weights
    of the other, both sorted by score, so every read runs forward through a contiguous row of
    the batch. Only pairs within a stratum count (e.g. within a cross-validation fold).
    """

    def __init__(self, positive: np.ndarray, score: np.ndarray, strata: np.ndarray | None = None):
        pos = np.asarray(positive).astype(bool)
        s = np.asarray(score, dtype=np.float64)
        if strata is None:
            groups = [np.arange(pos.size)]
        else:
            strata = np.asarray(strata)
            groups = [np.flatnonzero(strata == k) for k in np.unique(strata)]
        order, self.strata, at = [], [], 0
        for rows in groups:
            p = pos[rows]
            flip = bool(p.sum() > (~p).sum())
            small, large = (rows[~p], rows[p]) if flip else (rows[p], rows[~p])
            large = large[np.argsort(s[large], kind="mergesort")]
            small = small[np.argsort(s[small], kind="mergesort")]
            ls = s[large]
            self.strata.append(_Stratum(
                at, at + large.size, at + large.size + small.size,
                np.searchsorted(ls, s[small], side="left"),
                np.searchsorted(ls, s[small], side="right"), flip))
            order += [large, small]
            at += rows.size
        self.order = np.concatenate(order) if order else np.zeros(0, np.int64)


def weighted_auroc(w: np.ndarray, positive: np.ndarray, score: np.ndarray,
                   plan: AurocPlan | None = None) -> np.ndarray:
    """AUROC of ``score`` for each weighted resample (rows of ``w``): Σ_pos Σ_neg w_i w_j
    (1[s_i > s_j] + ½ 1[s_i = s_j]) / (W_pos W_neg); NaN when a side has zero weight."""
    num, den = weighted_auroc_parts(w, positive, score, plan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def weighted_auroc_parts(w: np.ndarray, positive: np.ndarray | None, score: np.ndarray | None,
                         plan: AurocPlan | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Numerator and denominator of :func:`weighted_auroc` for each row of ``w`` (resamples ×
    rows): the weighted count of positive–negative pairs of one stratum the positive wins (ties
    one half), and Σ over strata of W_pos W_neg. Integer weights (resample counts) are summed
    in integers, exactly and several times faster than floats (a running sum of floats waits
    on each addition); float weights in float64."""
    plan = plan or AurocPlan(positive, score)
    cols = np.take(np.atleast_2d(np.asarray(w)), plan.order, axis=1)
    exact = np.issubdtype(cols.dtype, np.integer)
    acc = np.int64 if exact else np.float64
    num = np.zeros(cols.shape[0])
    den = np.zeros(cols.shape[0])
    for st in plan.strata:
        cum = np.zeros((cols.shape[0], st.split - st.start + 1), acc)
        np.cumsum(cols[:, st.start:st.split], axis=1, dtype=acc, out=cum[:, 1:])
        small = cols[:, st.split:st.stop].astype(acc, copy=False)
        below = np.take(cum, st.lt, axis=1)
        tied = np.take(cum, st.le, axis=1) - below
        # smaller-side rows beat the larger-side rows below them (ties count one half)
        if exact:
            won = np.einsum("ij,ij->i", small, 2 * below + tied) / 2.0
        else:
            won = np.einsum("ij,ij->i", small, below + 0.5 * tied)
        total = (small.sum(axis=1) * cum[:, -1]).astype(np.float64)
        num += total - won if st.flip else won
        den += total
    return num, den


def batch_metrics(w: np.ndarray, y: np.ndarray, scores: np.ndarray, required=None,
                  metrics=BOOTSTRAP_METRICS, plans=None) -> dict[str, np.ndarray]:
    """Metrics of every weighted resample (rows of ``w``) at once; see module docstring.

    Balanced accuracy follows the required-class rule (NaN in a resample missing a required
    class); macro AUC averages the classes with both positives and negatives in that resample.
    """
    k = scores.shape[1]
    pred = predict(scores)
    out: dict[str, np.ndarray] = {}
    need_ba = {"balanced_accuracy", "organizer_score", "balanced_accuracy_present"} & set(metrics)
    if need_ba or "accuracy" in metrics:
        support, hits = weighted_class_counts(w, y, pred, k)
        with np.errstate(invalid="ignore", divide="ignore"):
            recall = np.where(support > 0, hits / np.where(support > 0, support, 1), np.nan)
        req = np.arange(k) if required is None else np.asarray(required, dtype=np.int64)
        ba = recall[:, req].mean(axis=1)  # NaN when a required class is absent
        out["balanced_accuracy"] = ba
        with np.errstate(invalid="ignore"):
            present = np.isfinite(recall)
            out["balanced_accuracy_present"] = np.where(
                present.any(axis=1), np.nansum(recall, axis=1) / np.maximum(present.sum(1), 1),
                np.nan)
        out["accuracy"] = hits.sum(axis=1) / support.sum(axis=1)
    if {"macro_auc", "organizer_score"} & set(metrics):
        plans = plans or [AurocPlan(y == c, scores[:, c]) for c in range(k)]
        aucs = np.stack([weighted_auroc(w, None, None, plans[c]) for c in range(k)], axis=1)
        defined = np.isfinite(aucs)
        with np.errstate(invalid="ignore"):
            out["macro_auc"] = np.where(defined.any(axis=1),
                                        np.nansum(aucs, axis=1) / np.maximum(defined.sum(1), 1),
                                        np.nan)
        out["_auc_classes_defined"] = defined.sum(axis=1)
    if "organizer_score" in metrics:
        out["organizer_score"] = (out["macro_auc"] + out["balanced_accuracy"]) / 2.0
    return {m: v for m, v in out.items() if m in metrics or m.startswith("_")}


def percentile_interval(replicates: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the defined (finite) replicates."""
    r = np.asarray(replicates, dtype=np.float64)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return float("nan"), float("nan")
    alpha = (1 - level) / 2
    lo, hi = np.quantile(r, [alpha, 1 - alpha])
    return float(lo), float(hi)


def bootstrap_metrics(
    y_true,
    scores,
    *,
    n_boot: int = DEFAULT_BOOT,
    seed: int = RunOptions.seed,
    level: float = 0.95,
    metrics=("balanced_accuracy", "macro_auc", "organizer_score"),
    groups=None,
    required=None,
    return_replicates: bool = False,
) -> dict:
    """Percentile bootstrap intervals of metrics of one set of predictions on one view.

    Parameters
    ----------
    groups : array-like, optional
        Group of every row; when given, a cluster bootstrap over groups instead of cases.

    Returns
    -------
    dict
        ``{metric: {"low", "high", "undefined_resamples"}, "kind": "...", "n_boot", "seed",
        "level"}`` (+ ``"replicates"`` when asked).
    """
    y, s = check_inputs(y_true, scores)
    if groups is not None:
        gen = cluster_weights(groups, n_boot, seed)
        kind = (f"percentile cluster bootstrap over groups, {n_boot} resamples, seed {seed}, "
                f"{level:.0%} interval")
    else:
        gen = bootstrap_weights(y.size, n_boot, seed)
        kind = (f"percentile bootstrap over cases, {n_boot} resamples, seed {seed}, "
                f"{level:.0%} interval")
    parts: dict[str, list] = {}
    plans = [AurocPlan(y == c, s[:, c]) for c in range(s.shape[1])]
    for w in gen:
        for m, v in batch_metrics(w, y, s, required, metrics, plans).items():
            parts.setdefault(m, []).append(v)
    reps = {m: np.concatenate(v) for m, v in parts.items()}
    out: dict = {"kind": kind, "n_boot": n_boot, "seed": seed, "level": level}
    for m in metrics:
        lo, hi = percentile_interval(reps[m], level)
        out[m] = {"low": lo, "high": hi,
                  "undefined_resamples": int((~np.isfinite(reps[m])).sum())}
    if "_auc_classes_defined" in reps:
        support = np.bincount(y, minlength=s.shape[1])
        k_defined = int(((support > 0) & (support < y.size)).sum())
        out["auc_class_set_changed_resamples"] = int(
            (reps["_auc_classes_defined"] != k_defined).sum())
    if return_replicates:
        out["replicates"] = {m: reps[m] for m in metrics}
    return out


def singleton_groups(groups) -> tuple[np.ndarray, int]:
    """Groups with every missing value made a group of its own (a key no group name can
    take), and how many rows that was; unchanged when every row has a group."""
    g = pd.Series(np.asarray(groups, dtype=object), dtype="object")
    missing = pd.isna(g).to_numpy()
    if not missing.any():
        return g.to_numpy(), 0
    keys = np.array([f"\0ungrouped {i}" if miss else f"={v}"
                     for i, (v, miss) in enumerate(zip(g, missing))], dtype=object)
    return keys, int(missing.sum())


def case_replicates(y_true, scores, metrics=("balanced_accuracy",), *, groups=None,
                    n_boot: int = DEFAULT_BOOT, seed: int = RunOptions.seed, required=None
                    ) -> tuple[dict[str, np.ndarray], str]:
    """Metric of every resample of the rows (``(n_boot,)`` per metric) and what the resampling
    was. The resamples depend only on the number of rows (or the groups) and ``seed``, so the
    replicates of two runs scored on the same rows are paired resample by resample. With
    ``groups``, a cluster bootstrap (a row without a group is its own group)."""
    y, s = check_inputs(y_true, scores)
    gen, kind = _resampling(y.size, groups, n_boot, seed)
    plans = [AurocPlan(y == c, s[:, c]) for c in range(s.shape[1])]
    parts: dict[str, list] = {m: [] for m in metrics}
    for w in gen:
        got = batch_metrics(w, y, s, required, tuple(metrics), plans)
        for m in metrics:
            parts[m].append(got[m])
    return {m: np.concatenate(v) for m, v in parts.items()}, \
        f"{kind}; {n_boot} resamples, seed {seed}"


def _resampling(n: int, groups, n_boot: int, seed: int):
    """The weight matrices of a case (or, with groups, cluster) bootstrap and its words."""
    if groups is None:
        return bootstrap_weights(n, n_boot, seed), \
            f"percentile case bootstrap over the {n} evaluated rows"
    keys, alone = singleton_groups(groups)
    return cluster_weights(keys, n_boot, seed), (
        f"percentile cluster bootstrap over {np.unique(keys).size} groups of the {n} "
        f"evaluated rows ({alone} without a group, each its own group)")


def mean_difference_interval(first: list[np.ndarray], second: list[np.ndarray],
                             level: float = 0.95) -> dict:
    """Percentile interval of the mean over pairs of replicate differences ``first[i] −
    second[i]`` (paired resample by resample, :func:`case_replicates`), each pair's own
    interval and the resamples where the difference is undefined."""
    diffs = np.stack([np.asarray(a, np.float64) - np.asarray(b, np.float64)
                      for a, b in zip(first, second)])
    mean = diffs.mean(axis=0)
    lo, hi = percentile_interval(mean, level)
    return {"low": lo, "high": hi, "pairs": int(diffs.shape[0]), "level": level,
            "undefined_resamples": int((~np.isfinite(mean)).sum()),
            "per_pair": [dict(zip(("low", "high"), percentile_interval(d, level)))
                         for d in diffs]}


def paired_case_bootstrap(y_true, first, second, metric: str = "balanced_accuracy", *,
                          groups=None, n_boot: int = DEFAULT_BOOT, seed: int = RunOptions.seed,
                          level: float = 0.95, required=None) -> dict:
    """Case-level uncertainty of a seed-mean paired difference: runs ``first[i]`` and
    ``second[i]`` (score arrays on the same evaluated rows, one pair per seed) are scored on
    the *same* resamples of the rows, and the interval is the percentile interval of the
    mean over pairs of metric(first) − metric(second) (group-aware with ``groups``)."""
    if not len(first) or len(first) != len(second):
        raise InputError("a paired case bootstrap needs pairs of runs")
    opts = {"groups": groups, "n_boot": n_boot, "seed": seed, "required": required}
    reps_a = [case_replicates(y_true, a, (metric,), **opts)[0][metric] for a in first]
    reps_b = [case_replicates(y_true, b, (metric,), **opts)[0][metric] for b in second]
    y = np.asarray(y_true, dtype=np.int64)
    kind = _resampling(y.size, groups, n_boot, seed)[1]
    one = np.ones((1, y.size), dtype=np.float32)
    point = float(np.mean([batch_metrics(one, y, np.asarray(a, np.float64), required,
                                         (metric,))[metric][0]
                           - batch_metrics(one, y, np.asarray(b, np.float64), required,
                                           (metric,))[metric][0]
                           for a, b in zip(first, second)]))
    out = mean_difference_interval(reps_a, reps_b, level)
    return {"metric": metric, "mean": point, **out,
            "kind": f"{kind}, the same resamples for both runs of each of the {len(first)} "
                    f"seed pair(s); {n_boot} resamples, seed {seed}, {level:.0%} interval of "
                    f"the mean difference"}


# --------------------------------------------------------------------------------------------
# DeLong


def _midranks(x: np.ndarray) -> np.ndarray:
    return stats.rankdata(x, method="average", axis=-1)


def delong_covariance(y_binary, scores) -> tuple[np.ndarray, np.ndarray]:
    """AUROCs of several score vectors on the same rows and their DeLong covariance.

    Fast algorithm (Sun & Xu 2014): with m positives X and n negatives Y, midranks T_X (within
    X), T_Y (within Y), T_Z (within X ∪ Y); V10 = (T_Z[X] − T_X)/n, V01 = 1 − (T_Z[Y] − T_Y)/m,
    AUC = mean V10; S = S10/m + S01/n with S10, S01 the sample covariances (ddof 1) of V10, V01.

    Parameters
    ----------
    y_binary : array (n_rows,)
        1 for positive rows.
    scores : array (k, n_rows) or (n_rows,)

    Returns
    -------
    aucs : (k,), cov : (k, k)
    """
    yb = np.asarray(y_binary).astype(bool)
    s = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    if s.shape[1] != yb.size:
        raise InputError(f"scores have {s.shape[1]} rows, labels {yb.size}")
    m, n = int(yb.sum()), int((~yb).sum())
    if m < 2 or n < 2:
        raise InputError(f"DeLong needs at least two positives and two negatives "
                         f"(got {m} and {n})")
    x, yv = s[:, yb], s[:, ~yb]
    tx, ty = _midranks(x), _midranks(yv)
    tz = _midranks(np.concatenate([x, yv], axis=1))
    v10 = (tz[:, :m] - tx) / n
    v01 = 1.0 - (tz[:, m:] - ty) / m
    aucs = v10.mean(axis=1)
    s10 = np.atleast_2d(np.cov(v10))
    s01 = np.atleast_2d(np.cov(v01))
    return aucs, s10 / m + s01 / n


def delong_test(y_binary, score_a, score_b, level: float = 0.95) -> dict:
    """DeLong test of AUROC(a) − AUROC(b) on the same rows (two-sided z test), with the
    normal-approximation interval of the difference."""
    aucs, cov = delong_covariance(y_binary, np.vstack([score_a, score_b]))
    diff = float(aucs[0] - aucs[1])
    var = float(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1])
    se = float(np.sqrt(max(var, 0.0)))
    z = diff / se if se > 0 else (0.0 if diff == 0 else np.inf * np.sign(diff))
    p = float(2 * stats.norm.sf(abs(z))) if np.isfinite(z) else 0.0
    q = stats.norm.ppf(0.5 + level / 2)
    return {"auc_a": float(aucs[0]), "auc_b": float(aucs[1]), "difference": diff,
            "variance": var, "se": se, "z": float(z), "p_value": p,
            "low": float(diff - q * se), "high": float(diff + q * se), "level": level,
            "kind": "DeLong test (fast midrank algorithm), two-sided, normal approximation"}


# --------------------------------------------------------------------------------------------
# seeds


def seed_summary(values) -> dict:
    """Mean ± SD (sample, ddof 1) over seeds; the ± is the SD, not an interval."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    sd = float(v.std(ddof=1)) if v.size > 1 else float("nan")
    return {"mean": float(v.mean()) if v.size else float("nan"), "sd": sd, "n": int(v.size),
            "kind": "mean ± SD over seeds (sample SD, ddof 1)"}


def paired_t_interval(a, b=None, level: float = 0.95, unit: str = "paired seeds") -> dict:
    """Paired-t interval of mean(a − b) over paired seeds: mean ± t_{(1+level)/2, n−1}·SD/√n.

    With ``b`` omitted, ``a`` already holds the paired differences; ``unit`` names what was
    paired (seeds by default, or e.g. matched runs).
    """
    d = np.asarray(a, dtype=np.float64) - (0.0 if b is None else np.asarray(b, dtype=np.float64))
    n = d.size
    if n < 2:
        raise InputError(f"a paired-t interval needs at least two paired seeds (got {n})")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    t = float(stats.t.ppf(0.5 + level / 2, n - 1))
    half = t * sd / np.sqrt(n)
    return {"mean": mean, "sd": sd, "n": n, "t": t, "low": mean - half, "high": mean + half,
            "level": level, "kind": f"paired-t {int(level * 100)}% interval over {n} {unit}"}


def seed_bootstrap(values, n_boot: int = DEFAULT_BOOT, seed: int = RunOptions.seed, level: float = 0.95
                   ) -> dict:
    """Percentile bootstrap interval of the mean over seeds (seeds resampled with
    replacement)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size < 2:
        raise InputError("a seed bootstrap needs at least two seeds")
    idx = np.random.default_rng(seed).integers(0, v.size, (n_boot, v.size))
    lo, hi = percentile_interval(v[idx].mean(axis=1), level)
    return {"mean": float(v.mean()), "low": lo, "high": hi, "n": int(v.size),
            "kind": f"percentile bootstrap over seeds, {n_boot} resamples, seed {seed}, "
                    f"{level:.0%} interval"}


def census_rate_sensitivity(numerators, denominators, m: int | None = None,
                            n_boot: int = DEFAULT_BOOT, seed: int = RunOptions.seed, level: float = 0.95
                            ) -> dict:
    """Sensitivity of a census rate to hypothetical group sampling.

    The rate Σ numerators / Σ denominators over G groups is a census, not a sample estimate.
    This draws m (default G) of the G groups with replacement and recomputes the pooled
    rate; the interval describes that hypothetical sampling only.
    """
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    g = num.size
    if g == 0 or den.size != g:
        raise InputError("numerators and denominators must be non-empty and of equal length")
    m = g if m is None else int(m)
    idx = np.random.default_rng(seed).integers(0, g, (n_boot, m))
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    lo, hi = percentile_interval(rates, level)
    return {"rate": float(num.sum() / den.sum()), "low": lo, "high": hi, "groups": g, "m": m,
            "kind": (f"census rate; interval = sensitivity to resampling {m} of {g} groups with "
                     f"replacement (pooled numerator / pooled denominator), {n_boot} resamples, "
                     f"seed {seed}; not a sampling interval of the census")}
