"""Metrics on saved predictions (METHODS §5.2).

Conventions: ``y_true`` holds class indices ``0..K-1``; ``scores`` is ``(n, K)`` in the class
order; the predicted class is the first argmax of the scores (ties go to the lower class index,
as ``numpy.argmax`` and the CV2024 organizers' script do). AUROC and AUPRC are computed on the
scores as supplied (no softmax is added); probability metrics (ECE, Brier, NLL) need
probabilities, so logits go through a softmax *for those metrics only* and plain scores are not
assessed.

Balanced accuracy is the mean recall over the view's *required* classes (by default every class
of the task). When a required class has no row in the view, balanced accuracy is undefined and
returned as NaN with a reason; the mean recall over the classes present is a different target
and is returned under its own name (``balanced_accuracy_present``).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from splitscope.errors import InputError

ECE_BINS = 15


# --------------------------------------------------------------------------------------------
# validation


def check_inputs(y_true, scores=None, n_classes: int | None = None):
    """Validate and convert ``y_true`` (1-D int) and ``scores`` (2-D float, finite)."""
    y = np.asarray(y_true)
    if y.ndim != 1:
        raise InputError(f"y_true must be 1-D, got shape {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        raise InputError("y_true must hold integer class indices")
    y = y.astype(np.int64)
    if scores is None:
        return y, None
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != y.size:
        raise InputError(f"scores must be (n, K) with n = {y.size}, got shape {s.shape}")
    if n_classes is not None and s.shape[1] != n_classes:
        raise InputError(f"scores have {s.shape[1]} columns, expected {n_classes}")
    if not np.isfinite(s).all():
        raise InputError("scores hold missing or infinite values")
    if y.size and (y.min() < 0 or y.max() >= s.shape[1]):
        raise InputError(f"y_true has class indices outside 0..{s.shape[1] - 1}")
    return y, s


def predict(scores: np.ndarray) -> np.ndarray:
    """Predicted class: the first argmax of each row."""
    return np.asarray(scores).argmax(axis=1)


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax of ``logits / temperature`` (numerically stable)."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def to_probabilities(scores: np.ndarray, score_kind: str) -> tuple[np.ndarray | None, str | None]:
    """Probabilities for the probability metrics, or ``(None, reason)``.

    ``probability``: used as given when every row is in [0, 1] and sums to 1 (±0.001);
    ``logit``: softmax; ``score``: not assessed (what the numbers mean was not declared).
    """
    if score_kind == "logit":
        return softmax(scores), None
    if score_kind == "probability":
        s = np.asarray(scores, dtype=np.float64)
        ok = ((s >= 0) & (s <= 1)).all() and np.allclose(s.sum(axis=1), 1.0, atol=1e-3)
        if not ok:
            return None, ("scores declared as probabilities are outside [0, 1] or do not sum to "
                          "1 (±0.001) in some rows")
        return s, None
    return None, "scores not declared as probabilities or logits"


# --------------------------------------------------------------------------------------------
# counting metrics


def confusion(y_true, y_pred, n_classes: int) -> np.ndarray:
    """Confusion matrix ``C[i, j]`` = rows of true class i predicted as j."""
    y = np.asarray(y_true, dtype=np.int64)
    p = np.asarray(y_pred, dtype=np.int64)
    return np.bincount(y * n_classes + p, minlength=n_classes * n_classes).reshape(
        n_classes, n_classes)


def class_support(y_true, n_classes: int) -> np.ndarray:
    """Rows per class."""
    return np.bincount(np.asarray(y_true, dtype=np.int64), minlength=n_classes)


def accuracy(y_true, y_pred) -> float:
    """Share of rows predicted correctly (rows correct / rows)."""
    y, p = np.asarray(y_true), np.asarray(y_pred)
    return float(np.mean(y == p)) if y.size else float("nan")


def per_class_recall(y_true, y_pred, n_classes: int) -> np.ndarray:
    """Recall (sensitivity) per class; NaN for a class without rows."""
    c = confusion(y_true, y_pred, n_classes)
    support = c.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(support > 0, np.diag(c) / np.maximum(support, 1), np.nan)


def per_class_specificity(y_true, y_pred, n_classes: int) -> np.ndarray:
    """One-vs-rest specificity per class: TN / (TN + FP); NaN when no negatives."""
    c = confusion(y_true, y_pred, n_classes)
    n = c.sum()
    tp = np.diag(c)
    fp = c.sum(axis=0) - tp
    fn = c.sum(axis=1) - tp
    tn = n - tp - fp - fn
    neg = tn + fp
    return np.where(neg > 0, tn / np.maximum(neg, 1), np.nan)


def per_class_precision(y_true, y_pred, n_classes: int) -> np.ndarray:
    """Precision per class; 0 when the class is never predicted (scikit-learn's
    ``zero_division=0``)."""
    c = confusion(y_true, y_pred, n_classes)
    pred = c.sum(axis=0)
    return np.where(pred > 0, np.diag(c) / np.maximum(pred, 1), 0.0)


def per_class_f1(y_true, y_pred, n_classes: int) -> np.ndarray:
    """F1 per class = 2TP / (2TP + FP + FN); 0 when the denominator is 0 (scikit-learn's
    ``zero_division=0``)."""
    c = confusion(y_true, y_pred, n_classes)
    tp = np.diag(c)
    denom = c.sum(axis=0) + c.sum(axis=1)
    return np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)


def balanced_accuracy(y_true, y_pred, n_classes: int, required=None) -> float:
    """Mean recall over the required classes (default: all ``n_classes``).

    Undefined (NaN) when a required class has no row; see :func:`balanced_accuracy_reason`.
    """
    rec = per_class_recall(y_true, y_pred, n_classes)
    req = np.arange(n_classes) if required is None else np.asarray(required, dtype=np.int64)
    r = rec[req]
    return float(np.mean(r)) if r.size and np.isfinite(r).all() else float("nan")


def balanced_accuracy_reason(y_true, n_classes: int, classes=None, required=None) -> str | None:
    """Why balanced accuracy is undefined (required classes absent from the view), or None."""
    support = class_support(y_true, n_classes)
    req = np.arange(n_classes) if required is None else np.asarray(required, dtype=np.int64)
    absent = [int(i) for i in req if support[i] == 0]
    if not absent:
        return None
    names = [str(classes[i]) if classes is not None else str(i) for i in absent]
    return (f"undefined: required class(es) absent from the view: {', '.join(names)} "
            f"(mean recall over present classes is 'balanced_accuracy_present')")


def balanced_accuracy_present(y_true, y_pred, n_classes: int) -> float:
    """Mean recall over the classes present in the view (a different target from balanced
    accuracy over the required classes)."""
    rec = per_class_recall(y_true, y_pred, n_classes)
    rec = rec[np.isfinite(rec)]
    return float(rec.mean()) if rec.size else float("nan")


# --------------------------------------------------------------------------------------------
# ranking metrics


def auroc(y_binary, score) -> float:
    """Area under the ROC curve of ``score`` for the positive rows (Mann–Whitney with midranks,
    ties counted one half); NaN when either positives or negatives are absent."""
    yb = np.asarray(y_binary).astype(bool)
    s = np.asarray(score, dtype=np.float64)
    n_pos = int(yb.sum())
    n_neg = yb.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(s)
    return float((ranks[yb].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def per_class_auroc(y_true, scores) -> np.ndarray:
    """One-vs-rest AUROC per class on the supplied scores; NaN where undefined."""
    y, s = check_inputs(y_true, scores)
    return np.array([auroc(y == k, s[:, k]) for k in range(s.shape[1])])


def macro_auroc(y_true, scores, classes=None) -> tuple[float, list[str]]:
    """Macro one-vs-rest AUROC over the classes with both positives and negatives in the view,
    and the classes skipped (no positives, or no negatives)."""
    aucs = per_class_auroc(y_true, scores)
    skipped = [str(classes[k]) if classes is not None else str(k)
               for k in np.flatnonzero(~np.isfinite(aucs))]
    ok = aucs[np.isfinite(aucs)]
    return (float(ok.mean()) if ok.size else float("nan")), skipped


def average_precision(y_binary, score) -> float:
    """AUPRC as average precision, sum over distinct thresholds of (R_n − R_{n−1}) P_n (the
    step-wise definition scikit-learn uses); NaN without positives."""
    yb = np.asarray(y_binary).astype(bool)
    s = np.asarray(score, dtype=np.float64)
    n_pos = int(yb.sum())
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], yb[order]
    last = np.r_[np.flatnonzero(np.diff(s_sorted) != 0), s_sorted.size - 1]
    tps = np.cumsum(y_sorted)[last].astype(np.float64)
    fps = (last + 1) - tps
    precision = tps / (tps + fps)
    recall = tps / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def macro_average_precision(y_true, scores) -> float:
    """Mean one-vs-rest average precision over classes with at least one positive."""
    y, s = check_inputs(y_true, scores)
    ap = np.array([average_precision(y == k, s[:, k]) for k in range(s.shape[1])])
    ap = ap[np.isfinite(ap)]
    return float(ap.mean()) if ap.size else float("nan")


def organizer_score(macro_auc: float, balanced_acc: float) -> float:
    """CV2024 organizer score: mean(macro AUC, balanced accuracy); NaN when either is."""
    return float((macro_auc + balanced_acc) / 2.0)


# --------------------------------------------------------------------------------------------
# probability metrics


def _bin_index(values: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-width bins on [0, 1]: bin b holds (b/n, (b+1)/n]; 0 goes to the first bin."""
    return np.clip(np.ceil(np.asarray(values) * n_bins).astype(np.int64) - 1, 0, n_bins - 1)


def expected_calibration_error(y_true, probs, n_bins: int = ECE_BINS) -> float:
    """Top-label ECE: sum over equal-width confidence bins of (rows in bin / rows) ×
    |accuracy in bin − mean confidence in bin|; confidence = the largest probability, the
    prediction its argmax."""
    y = np.asarray(y_true, dtype=np.int64)
    p = np.asarray(probs, dtype=np.float64)
    if y.size == 0:
        return float("nan")
    conf = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    b = _bin_index(conf, n_bins)
    acc_b = np.bincount(b, weights=correct, minlength=n_bins)
    conf_b = np.bincount(b, weights=conf, minlength=n_bins)
    # Σ_b (n_b / n) · |hits_b / n_b − conf_b / n_b| = Σ_b |hits_b − conf_b| / n
    return float(np.abs(acc_b - conf_b).sum() / y.size)


def reliability_bins(y_true, probs, n_bins: int = ECE_BINS) -> list[dict]:
    """Top-label reliability diagram data on the ECE's bins: per equal-width confidence bin,
    its edges, rows, mean confidence and accuracy (``None`` for an empty bin)."""
    y = np.asarray(y_true, dtype=np.int64)
    p = np.asarray(probs, dtype=np.float64)
    conf = p.max(axis=1)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    b = _bin_index(conf, n_bins)
    n = np.bincount(b, minlength=n_bins)
    hits = np.bincount(b, weights=correct, minlength=n_bins)
    conf_sum = np.bincount(b, weights=conf, minlength=n_bins)
    return [{"bin": i, "low": i / n_bins, "high": (i + 1) / n_bins, "count": int(n[i]),
             "confidence": float(conf_sum[i] / n[i]) if n[i] else None,
             "accuracy": float(hits[i] / n[i]) if n[i] else None} for i in range(n_bins)]


def brier_score(y_true, probs) -> float:
    """Multi-class Brier score: mean over rows of sum_k (p_k − 1[y = k])², in [0, 2]."""
    y = np.asarray(y_true, dtype=np.int64)
    p = np.asarray(probs, dtype=np.float64)
    onehot = np.eye(p.shape[1])[y]
    return float(np.mean(np.sum((p - onehot) ** 2, axis=1)))


def brier_decomposition(y_true, probs, n_bins: int = ECE_BINS) -> dict[str, float]:
    """Murphy decomposition of the Brier score: reliability − resolution + uncertainty.

    Done per class (one-vs-rest) on ``n_bins`` equal-width bins of that class's probability and
    summed over classes (the multi-class Brier score is the sum of the per-class ones).
    reliability = Σ_b n_b/n (p̄_b − ō_b)², resolution = Σ_b n_b/n (ō_b − ō)², uncertainty =
    ō(1 − ō). The identity is exact when probabilities are constant within each bin; otherwise
    ``residual`` = brier − (reliability − resolution + uncertainty) is the within-bin term.
    """
    y = np.asarray(y_true, dtype=np.int64)
    p = np.asarray(probs, dtype=np.float64)
    n, k = p.shape
    rel = res = unc = 0.0
    for c in range(k):
        o = (y == c).astype(np.float64)
        b = _bin_index(p[:, c], n_bins)
        n_b = np.bincount(b, minlength=n_bins).astype(np.float64)
        p_b = np.bincount(b, weights=p[:, c], minlength=n_bins)
        o_b = np.bincount(b, weights=o, minlength=n_bins)
        used = n_b > 0
        pm, om = p_b[used] / n_b[used], o_b[used] / n_b[used]
        obar = o.mean()
        rel += float(np.sum(n_b[used] * (pm - om) ** 2) / n)
        res += float(np.sum(n_b[used] * (om - obar) ** 2) / n)
        unc += float(obar * (1 - obar))
    bs = brier_score(y, p)
    return {"brier": bs, "reliability": rel, "resolution": res, "uncertainty": unc,
            "residual": bs - (rel - res + unc)}


def negative_log_likelihood(y_true, probs) -> float:
    """Mean −log p(true class); probabilities clipped below at machine epsilon."""
    y = np.asarray(y_true, dtype=np.int64)
    p = np.asarray(probs, dtype=np.float64)
    pt = np.clip(p[np.arange(y.size), y], np.finfo(np.float64).eps, 1.0)
    return float(-np.mean(np.log(pt)))


# --------------------------------------------------------------------------------------------
# everything for one view


def score_predictions(y_true, scores, classes, score_kind: str = "score", required=None,
                      per_class: bool = False) -> dict:
    """Every §5.2 metric of one set of predictions on one view.

    Returns a flat dict with stable keys: ``n``, ``accuracy``, ``balanced_accuracy`` (+
    ``balanced_accuracy_reason``), ``balanced_accuracy_present``, ``macro_auc`` (+
    ``macro_auc_skipped``), ``organizer_score``, ``macro_f1``, ``macro_sensitivity``,
    ``macro_specificity``, ``macro_auprc``, ``ece``, ``brier``, ``brier_reliability``,
    ``brier_resolution``, ``brier_uncertainty``, ``nll`` (+ ``probability_reason`` when the
    probability metrics are not assessed) and ``class_support``; with ``per_class`` also a
    ``per_class`` list of dicts.
    """
    k = len(classes)
    y, s = check_inputs(y_true, scores, k)
    pred = predict(s)
    support = class_support(y, k)
    ba = balanced_accuracy(y, pred, k, required)
    mauc, skipped = macro_auroc(y, s, classes)
    rec = per_class_recall(y, pred, k)
    spec = per_class_specificity(y, pred, k)
    f1 = per_class_f1(y, pred, k)
    out = {
        "n": int(y.size),
        "accuracy": accuracy(y, pred),
        "balanced_accuracy": ba,
        "balanced_accuracy_reason": balanced_accuracy_reason(y, k, classes, required),
        "balanced_accuracy_present": balanced_accuracy_present(y, pred, k),
        "macro_auc": mauc,
        "macro_auc_skipped": ", ".join(skipped) if skipped else None,
        "organizer_score": organizer_score(mauc, ba),
        "macro_f1": float(f1.mean()),
        "macro_sensitivity": float(np.nanmean(rec)) if np.isfinite(rec).any() else float("nan"),
        "macro_specificity": float(np.nanmean(spec)) if np.isfinite(spec).any() else float("nan"),
        "macro_auprc": macro_average_precision(y, s),
        "class_support": {str(c): int(v) for c, v in zip(classes, support)},
    }
    probs, reason = to_probabilities(s, score_kind)
    if probs is not None and y.size:
        dec = brier_decomposition(y, probs)
        out.update(ece=expected_calibration_error(y, probs), brier=dec["brier"],
                   brier_reliability=dec["reliability"], brier_resolution=dec["resolution"],
                   brier_uncertainty=dec["uncertainty"], nll=negative_log_likelihood(y, probs),
                   probability_reason=None)
    else:
        out.update(ece=float("nan"), brier=float("nan"), brier_reliability=float("nan"),
                   brier_resolution=float("nan"), brier_uncertainty=float("nan"),
                   nll=float("nan"), probability_reason=reason or "no rows")
    if per_class:
        aucs = per_class_auroc(y, s)
        ap = [average_precision(y == c, s[:, c]) for c in range(k)]
        prec = per_class_precision(y, pred, k)
        out["per_class"] = [
            {"class": str(classes[c]), "support": int(support[c]), "recall": float(rec[c]),
             "specificity": float(spec[c]), "precision": float(prec[c]), "f1": float(f1[c]),
             "auroc": float(aucs[c]), "auprc": float(ap[c])}
            for c in range(k)
        ]
    return out
