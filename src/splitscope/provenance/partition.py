"""Partition classifier (METHODS §4.4): can image content tell the training pool from the test
set?

Content features are computed from the scan's thumbnails (a 16×16 area-mean downsample of the
S×S grayscale thumbnail plus a 32-bin intensity histogram), or supplied embeddings. A
classifier (standardised logistic regression with balanced class weights by default) predicts
*test vs train pool*; its out-of-fold probabilities give the AUC overall and within each class
(train-pool rows of the class vs its test rows), each with a percentile-bootstrap interval over
cases. The AUC counts only test–train pairs scored by the same fold's model (pooled within
folds), since pooling probabilities across folds lets fold-to-fold offsets bias it (below 0.5
under no shift); the across-fold pooled value is kept in the parameters. Controls: the same cross-validation with the partition labels permuted (seeded; AUC
should be ≈ 0.5), and the same classifier on an internal split of the reference side (a seeded
random share of train vs the rest). The proxy A-distance is d_A = 2(1 − 2ε) with ε the balanced
error of the out-of-fold predictions at probability 0.5 (negative when ε > 0.5, reported as is).
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
from PIL import Image

from splitscope.errors import InputError
from splitscope.options import RunOptions
from splitscope.provenance.binning import one_sort_per_column
from splitscope.provenance.header_probe import FIT_MAX_ROWS
from splitscope.provenance.options import ProvenanceOptions
from splitscope.provenance.stats import (
    PARALLEL_CELLS,
    PARALLEL_CELLS_LINEAR,
    FoldTasks,
    Together,
    bootstrap_aucs,
    fit_sample,
    run_steps,
    shared_empty,
    single_threaded,
    stable_order,
    weighted_auc,
)

__all__ = ["FeatureRows", "PartitionResult", "content_features", "internal_split",
           "partition_classifier", "partition_steps", "proxy_a_distance"]


def content_features(thumbs: np.ndarray, *, grid: int = 16, bins: int = 32,
                     block: int = 512) -> np.ndarray:
    """Image-content features of (n, S, S) uint8 thumbnails: the ``grid``×``grid`` area-mean
    downsample (values in [0, 1]) followed by a ``bins``-bin intensity histogram (shares).

    S must be a multiple of ``grid`` (96 = 6·16); otherwise the thumbnail is cropped to the
    largest multiple (a documented, centred crop). Thumbnails are read ``block`` at a time, so
    a memory-mapped array is never loaded whole. The area sums are two small float32 matrix
    products of 0/1 pooling matrices per block: integer sums below 2**24, exact in any summation
    order, then one division each, so the features do not depend on the BLAS build or CPU.
    """
    t = thumbs if hasattr(thumbs, "shape") else np.asarray(thumbs)
    if t.ndim != 3 or t.shape[1] != t.shape[2]:
        raise InputError(f"thumbnails must be (n, S, S); got shape {t.shape}")
    n, s, _ = t.shape
    if s < grid:
        raise InputError(f"thumbnail size {s} is smaller than the grid {grid}")
    f = s // grid
    off = (s - f * grid) // 2
    side = f * grid
    pool = np.kron(np.eye(grid, dtype=np.float32), np.ones((1, f), np.float32))
    pool_t = np.ascontiguousarray(pool.T)
    out = np.empty((n, grid * grid + bins), dtype=np.float32)
    # the bin of value v is v·bins // 256: consecutive runs of levels, starting here
    starts = np.searchsorted(np.arange(256) * bins // 256, np.arange(bins))
    levels = np.empty((min(block, n), 256), dtype=np.int64)
    for start in range(0, n, block):
        b = np.asarray(t[start:start + block], dtype=np.uint8)
        m = b.shape[0]
        core = b[:, off:off + side, off:off + side].astype(np.float32)
        sums = (pool @ core @ pool_t).reshape(m, -1)
        out[start:start + m, :grid * grid] = sums / np.float32(f * f * 255)
        # each thumbnail's 256-level count in C (Pillow), then summed per bin: exact counts,
        # without an index array eight times the size of the block
        for i in range(m):
            levels[i] = Image.fromarray(b[i]).histogram()
        counts = np.add.reduceat(levels[:m], starts, axis=1)
        out[start:start + m, grid * grid:] = counts / float(s * s)
    return out


def proxy_a_distance(y: np.ndarray, prob: np.ndarray, threshold: float = 0.5) -> tuple[float, float]:
    """(d_A, ε): ε = balanced error of ``prob ≥ threshold`` against ``y``; d_A = 2(1 − 2ε)."""
    y = np.asarray(y).astype(bool)
    pred = np.asarray(prob) >= threshold
    eps = 0.5 * (np.mean(pred[y] != y[y]) + np.mean(pred[~y] != y[~y]))
    return float(2 * (1 - 2 * eps)), float(eps)


@dataclass
class PartitionResult:
    """Out-of-fold partition classifier on one boundary or control.

    ``auc`` (estimate, low, high, kind), ``auc_by_class`` (label, train_rows, test_rows, auc,
    low, high), ``d_a`` and ``balanced_error``; ``scores`` one line per row (row, path, label,
    is_test, prob_test, fold); ``control`` the shuffled-partition result (AUC and d_A) when run.
    """

    name: str
    auc: dict[str, Any]
    auc_by_class: pd.DataFrame
    d_a: float
    balanced_error: float
    n_test: int
    n_train: int
    scores: pd.DataFrame
    control: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)


#: The logistic classifier's settings. Newton steps reach the unique optimum of the
#: L2-penalised loss (gradient ≤ 1e-8) in a handful of iterations, so the held-out scores (and
#: the AUC's pair order) do not depend on the CPU's floating-point summation order, as a
#: loosely converged L-BFGS trajectory does.
LOGISTIC = {"C": 1.0, "class_weight": "balanced", "solver": "newton-cholesky", "tol": 1e-8,
            "max_iter": 100}


def _classifier(classifier: str, seed: int):
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if classifier == "logistic":
        return make_pipeline(StandardScaler(), LogisticRegression(**LOGISTIC))
    if classifier == "hgb":
        from sklearn.ensemble import HistGradientBoostingClassifier

        return HistGradientBoostingClassifier(random_state=seed, class_weight="balanced")
    raise InputError(f"classifier must be 'logistic' or 'hgb'; got {classifier!r}")


#: held-out rows a fold scores at a time: each row's score depends on that row alone (to the
#: last bits of the BLAS product's blocking), and the fold's float64 copy of its rows stays this
#: size (a fifth of a million rows of 288 content features at once: 461 MB in every worker)
SCORE_BLOCK = 50_000


class FeatureRows(NamedTuple):
    """Rows ``at`` of the feature matrix ``bank``, gathered only where a fold fits or scores
    them: one bank (a shared file mapping inside
    :func:`~splitscope.provenance.stats.shared_arrays`) serves every comparison and worker, so
    a comparison holds an index, not a copy of its rows."""

    bank: np.ndarray
    at: np.ndarray


def _fold_prob(bank, y_fit, fit_at, score_at, classifier: str, seed: int) -> np.ndarray | None:
    """Held-out probabilities of one fold, fit on rows ``fit_at`` of ``bank`` (labels
    ``y_fit``) and scoring rows ``score_at`` (None when the fit rows lack a partition)."""
    if y_fit.all() or (~y_fit).all():
        return None  # a fold without both partitions cannot be fitted; left as NaN
    binning = one_sort_per_column() if classifier == "hgb" else nullcontext()
    with warnings.catch_warnings(), binning:
        warnings.simplefilter("ignore")
        model = _classifier(classifier, seed).fit(np.asarray(bank[fit_at], np.float64), y_fit)
        return np.concatenate([
            model.predict_proba(np.asarray(bank[score_at[at:at + SCORE_BLOCK]], np.float64))[:, 1]
            for at in range(0, len(score_at), SCORE_BLOCK)]) if len(score_at) else np.zeros(0)


def _oof_prob(X: np.ndarray, y: np.ndarray, groups: np.ndarray | None, *, folds: int, seed: int,
              classifier: str, jobs: int | None = None, fit_max_rows: int | None = None
              ) -> tuple[np.ndarray, np.ndarray, list[int], int]:
    """Out-of-fold probabilities of the rows of ``X``: (prob, fold of each row, rows fitted per
    fold, training rows left out of the fits)."""
    rows = FeatureRows(X, np.arange(len(X)))
    return run_steps([_oof_steps(rows, y, groups, folds=folds, seed=seed, classifier=classifier,
                                 jobs=jobs, fit_max_rows=fit_max_rows)])[0]


def _oof_steps(rows: FeatureRows, y, groups, *, folds, seed, classifier, jobs=None,
               fit_max_rows=None):
    """:func:`_oof_prob` as a step generator: one call per fold, workers worth starting from
    ``PARALLEL_CELLS_LINEAR`` cells for the logistic fits (``PARALLEL_CELLS`` otherwise)."""
    splits, left_out = _oof_splits(y, groups, folds=folds, seed=seed, classifier=classifier,
                                   fit_max_rows=fit_max_rows)
    min_cells = PARALLEL_CELLS_LINEAR if classifier == "logistic" else PARALLEL_CELLS
    bank, at = rows
    done = yield FoldTasks([(_fold_prob, (bank, y[tr], at[tr], at[te], classifier, seed))
                            for tr, te in splits], jobs, len(at) * bank.shape[1] / min_cells)
    prob = np.full(len(y), np.nan)
    fold = np.full(len(y), -1, dtype=np.int64)
    for i, ((_, te), p) in enumerate(zip(splits, done)):
        if p is not None:
            prob[te] = p
            fold[te] = i
    return prob, fold, [len(tr) for tr, _ in splits], left_out


def _oof_splits(y, groups, *, folds, seed, classifier, fit_max_rows):
    """The folds of :func:`_oof_prob` ((fit rows, held-out rows) each) and the training rows
    the fit cap left out."""
    from sklearn.model_selection import StratifiedKFold

    from splitscope.provenance.folds import GroupFolds

    _classifier(classifier, seed)  # an unknown classifier is an error before any split
    k = int(min(folds, y.sum(), (~y).sum()))
    if k < 2:
        raise InputError("each partition needs at least 2 rows for cross-validation")
    X = np.zeros((len(y), 1), np.uint8)  # the splitters read only the number of rows
    if groups is not None:
        cv = GroupFolds(n_splits=k, shuffle=True, random_state=seed)
        splits = list(cv.split(X, y, groups))
    else:
        splits = list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(X, y))
    # each fold's model is fit on at most fit_max_rows of its training rows (stratified by
    # side, spread over groups); every held-out row is scored
    available = sum(len(tr) for tr, _ in splits)
    splits = [(tr[fit_sample(y[tr], None if groups is None else groups[tr], fit_max_rows,
                             seed + i)], te) for i, (tr, te) in enumerate(splits)]
    return splits, available - sum(len(tr) for tr, _ in splits)


def partition_classifier(
    features: np.ndarray,
    is_test: np.ndarray,
    *,
    rows: pd.DataFrame | None = None,
    groups: np.ndarray | None = None,
    name: str = "test vs train pool",
    folds: int = ProvenanceOptions.folds,
    seed: int = RunOptions.seed,
    n_resamples: int = RunOptions.resamples,
    classifier: str = "logistic",
    shuffled_control: bool = True,
    fit_max_rows: int | None = FIT_MAX_ROWS,
    threads: int | None = 1,
) -> PartitionResult:
    """Out-of-fold AUC of a classifier predicting ``is_test`` from ``features``.

    Parameters
    ----------
    features : ndarray (n, d)
        :func:`content_features` of the thumbnails, or embeddings.
    is_test : ndarray of bool (n,)
        True for query-side (test) rows, False for the reference side (train pool).
    rows : DataFrame, optional
        ``row``, ``path`` and ``label`` aligned with ``features`` (labels give per-class AUCs).
    groups : ndarray, optional
        Group keys (NA allowed: a group of one); folds are group-disjoint when given.
    classifier : {"logistic", "hgb"}
    shuffled_control : bool
        Also run the identical procedure with ``is_test`` permuted (seeded).
    threads : int or None
        Bound on the OpenMP/BLAS pools during the fits (``None``: unchanged).

    Returns
    -------
    PartitionResult
    """
    with single_threaded(threads):
        return run_steps([partition_steps(
            features, is_test, rows=rows, groups=groups, name=name, folds=folds, seed=seed,
            n_resamples=n_resamples, classifier=classifier, shuffled_control=shuffled_control,
            fit_max_rows=fit_max_rows)])[0]


#: rows checked (or copied into a shared bank) at a time: no temporary of every row
REORDER_BLOCK = 65_536


def shared_features(X, rows: np.ndarray | None = None) -> np.ndarray:
    """``X`` (or its rows ``rows``, in that order) as float32 (content features, most
    embeddings) or float64, copied a block at a time into a
    :func:`~splitscope.provenance.stats.shared_empty` array: inside ``shared_arrays`` the fold
    workers map it instead of receiving copies. Each fold converts the rows it fits and
    scores to float64, exactly."""
    X = np.asarray(X)  # an array is not copied
    if X.ndim != 2:
        raise InputError(f"features must be (n, d); got shape {X.shape}")
    n = len(X) if rows is None else len(rows)
    out = shared_empty((n, X.shape[1]), np.float32 if X.dtype == np.float32 else np.float64)
    for at in range(0, n, REORDER_BLOCK):
        take = slice(at, at + REORDER_BLOCK) if rows is None else rows[at:at + REORDER_BLOCK]
        out[at:at + REORDER_BLOCK] = X[take]
    return out


def partition_steps(features, is_test, *, rows=None, groups=None, name="test vs train pool",
                    folds=ProvenanceOptions.folds, seed=RunOptions.seed,
                    n_resamples=RunOptions.resamples, classifier="logistic",
                    shuffled_control=True, fit_max_rows=FIT_MAX_ROWS):
    """:func:`partition_classifier` as a step generator (:func:`~splitscope.provenance.stats.
    run_steps`): the folds of the classifier and of its shuffled control run together."""
    if isinstance(features, FeatureRows):
        bank, at = features
    else:
        bank, at = shared_features(features), np.arange(len(features))
    del features
    y = np.asarray(is_test).astype(bool)
    if bank.ndim != 2 or len(at) != len(y):
        raise InputError(f"features must be (n, d) aligned with is_test; got "
                         f"{(len(at), *bank.shape[1:])} and {y.shape}")
    bad = sum(int((~np.isfinite(bank[at[i:i + REORDER_BLOCK]])).any(axis=1).sum())
              for i in range(0, len(at), REORDER_BLOCK))
    if bad:
        raise InputError(f"{bad} feature row(s) hold NaN/inf")
    if rows is None:
        rows = pd.DataFrame({"row": np.arange(len(y)), "path": pd.NA, "label": pd.NA})
    # folds, fit samples, the shuffled control and the resamples are drawn on the rows in
    # their stable order, not in the order they were listed; the score table keeps the latter
    order = stable_order(rows)
    # every fold reads its rows of the bank through this index: no reordered copy of them
    X = FeatureRows(bank, at[order])
    y, rows = y[order], rows.iloc[order]
    del bank, at
    if groups is not None:
        groups = np.asarray(groups, dtype=object)[order]
    g = None
    if groups is not None:
        gs = pd.Series(groups, dtype="string")
        if gs.notna().any():
            gs = gs.fillna("\0row:" + pd.Series(np.arange(len(gs))).astype(str))
            g = pd.factorize(gs)[0]
    opts = {"folds": folds, "seed": seed, "classifier": classifier, "fit_max_rows": fit_max_rows}
    runs = [_oof_steps(X, y, g, **opts)]
    if shuffled_control:
        y_perm = np.random.default_rng(seed).permutation(y)
        runs.append(_oof_steps(X, y_perm, g, **opts))
    (prob, fold, fitted, left_out), *controls = yield Together(runs)
    ok = np.isfinite(prob)
    cases = [(y[ok], prob[ok], fold[ok])]
    if shuffled_control:
        (p2, f2, _, _), = controls
        ok2 = np.isfinite(p2)
        cases.append((y_perm[ok2], p2[ok2], f2[ok2]))
    labels = (rows["label"] if "label" in rows.columns else pd.Series(pd.NA, index=rows.index)
              ).astype("string").fillna("<NA>").to_numpy(dtype=object).astype(str)
    classes = sorted(set(labels))
    in_class = [(labels == lab) & ok for lab in classes]
    # the intervals are independent seeded calls: one more request, so that on a large
    # release they run in the workers (both boundaries' at once) rather than one by one here;
    # the classifier and its control share the resamples when they score as many rows
    calls = [(_bootstrap_aucs, (cases, n_resamples, seed))]
    calls += [(_bootstrap_aucs, ([(y[m], prob[m], fold[m])], n_resamples, seed))
              for m in in_class]
    cells = n_resamples * (sum(len(c[0]) for c in cases) + int(ok.sum()))
    aucs, *per_class = yield FoldTasks(calls, None, cells / PARALLEL_CELLS_BOOTSTRAP)
    auc = aucs[0]
    pooled = float(weighted_auc(y[ok], prob[ok])[0]) if ok.any() else float("nan")
    d_a, eps = proxy_a_distance(y[ok], prob[ok])
    per = []
    for lab, m, (b,) in zip(classes, in_class, per_class):
        per.append({"label": lab, "train_rows": int((~y[m]).sum()), "test_rows": int(y[m].sum()),
                    "auc": b["estimate"], "low": b["low"], "high": b["high"]})
    by_class = pd.DataFrame(per)
    scores = pd.DataFrame({
        "row": rows["row"].to_numpy(dtype=np.int64),
        "path": rows["path"].astype("string").to_numpy() if "path" in rows else pd.NA,
        "label": pd.array(labels, dtype="string"),
        "is_test": y, "prob_test": prob, "fold": fold,
    }).iloc[np.argsort(order)].reset_index(drop=True)
    control = None
    if shuffled_control:
        c_auc = aucs[1]
        c_da, c_eps = proxy_a_distance(y_perm[ok2], p2[ok2])
        control = {"name": "shuffled partition labels", "auc": c_auc, "d_a": c_da,
                   "balanced_error": c_eps, "seed": seed}
    return PartitionResult(
        name=name, auc=auc, auc_by_class=by_class, d_a=d_a, balanced_error=eps,
        n_test=int(y.sum()), n_train=int((~y).sum()), scores=scores, control=control,
        params={"classifier": ("StandardScaler + LogisticRegression("
                               + ", ".join(f"{k}={v!r}" for k, v in LOGISTIC.items()) + ")"
                               if classifier == "logistic" else
                               "HistGradientBoostingClassifier(class_weight='balanced')"),
                "cv": ("StratifiedGroupKFold" if g is not None else "StratifiedKFold")
                + f"({folds}, shuffle)", "seed": seed, "unscored_rows": int((~ok).sum()),
                "auc": "pooled within folds (positive–negative pairs of one fold)",
                "auc_pooled_across_folds": pooled, "fit_max_rows": fit_max_rows,
                "fit_rows": fitted,
                **({"fit_sample": "seeded, stratified by side, round-robin over groups; "
                    f"{left_out:,} training row(s) left out of the fits"} if left_out else {})})


#: Rows × resamples of a boundary's AUC intervals from which they are worth running in worker
#: processes (with the folds' workers still running, they cost no start-up)
PARALLEL_CELLS_BOOTSTRAP = 100_000_000


def _bootstrap_aucs(cases: list[tuple], n_resamples: int, seed: int) -> list[dict[str, Any]]:
    """:func:`bootstrap_aucs` as one fold-task call (positional arguments)."""
    return bootstrap_aucs(cases, n_resamples=n_resamples, seed=seed)


def internal_split(n: int, share: float = 0.2, seed: int = RunOptions.seed,
                   rows: pd.DataFrame | None = None) -> np.ndarray:
    """A seeded random ``share`` of ``n`` reference rows marked True: the internal-split
    control's pseudo test set. With ``rows`` (the ``n`` rows, for their
    :func:`~splitscope.provenance.stats.stable_order`) the draw is made on the rows in that
    order, so the same files are held out however the rows were listed."""
    rng = np.random.default_rng(seed)
    out = np.zeros(n, dtype=bool)
    pick = rng.choice(n, size=max(1, round(share * n)), replace=False)
    out[pick if rows is None else stable_order(rows)[pick]] = True
    return out
