"""Decision thresholds fitted on one population and evaluated on another (METHODS §5.3).

Rules (a row is called positive when its score is ≥ t):

- ``default``: t = 0.5.
- ``youden``: t* = argmax over observed scores of TPR + TNR − 1 on the *fit* population (ties:
  the largest such threshold).
- ``prevalence``: t = the smallest observed score with mean(score ≥ t) ≤ π̂ on the fit
  population, π̂ the target prevalence (default: the fit population's positive share).
- ``oracle``: Youden on the *evaluation* population itself. It uses the evaluation labels, is
  labelled invalid as a reported operating point, and serves only to measure the gap.

The transfer gap of a rule is (a) its balanced accuracy on the fit population minus that on the
evaluation population at the same threshold, and (b) the oracle's balanced accuracy on the
evaluation population minus the rule's. Multi-class scores are handled one class versus rest.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.errors import InputError

RULES = ("default", "youden", "prevalence", "oracle")


def _check(y, s):
    yb = np.asarray(y).astype(bool)
    sc = np.asarray(s, dtype=np.float64)
    if yb.shape != sc.shape or yb.ndim != 1:
        raise InputError(f"labels and scores must be 1-D of equal length, got {yb.shape}, "
                         f"{sc.shape}")
    if not np.isfinite(sc).all():
        raise InputError("scores hold missing or infinite values")
    return yb, sc


def rates_at(y_binary, score, threshold: float) -> dict:
    """TPR, TNR, Youden J, balanced accuracy (mean of TPR and TNR) and accuracy at a
    threshold; NaN for a rate whose class is absent."""
    yb, s = _check(y_binary, score)
    pred = s >= threshold
    p, n = int(yb.sum()), int((~yb).sum())
    tpr = float((pred & yb).sum() / p) if p else float("nan")
    tnr = float((~pred & ~yb).sum() / n) if n else float("nan")
    return {"threshold": float(threshold), "tpr": tpr, "tnr": tnr, "youden_j": tpr + tnr - 1,
            "balanced_accuracy": (tpr + tnr) / 2, "accuracy": float((pred == yb).mean()),
            "positives": p, "negatives": n}


def youden_threshold(y_binary, score) -> float:
    """Threshold maximizing TPR + TNR − 1 over the observed scores (ties: the largest)."""
    yb, s = _check(y_binary, score)
    p, n = int(yb.sum()), int((~yb).sum())
    if p == 0 or n == 0:
        raise InputError(f"Youden's threshold needs positives and negatives (got {p} and {n})")
    order = np.argsort(-s, kind="mergesort")
    ss, yy = s[order], yb[order]
    last = np.r_[np.flatnonzero(np.diff(ss) != 0), ss.size - 1]  # end of each score group
    tp = np.cumsum(yy)[last]
    fp = (last + 1) - tp
    j = tp / p - fp / n  # = TPR + TNR − 1
    best = int(np.flatnonzero(j == j.max())[0])  # first in descending order = largest t
    return float(ss[last[best]])


def prevalence_threshold(score, prevalence: float) -> float:
    """Smallest observed score t with mean(score ≥ t) ≤ prevalence (the infimum over observed
    scores); +inf when even the largest score is called positive too often."""
    s = np.sort(np.asarray(score, dtype=np.float64))
    if not 0 <= prevalence <= 1:
        raise InputError(f"target prevalence must be in [0, 1], got {prevalence}")
    u = np.unique(s)
    share = 1.0 - np.searchsorted(s, u, side="left") / s.size  # mean(score >= u)
    ok = np.flatnonzero(share <= prevalence)
    return float(u[ok[0]]) if ok.size else float("inf")


def fit_threshold(rule: str, y_fit, s_fit, y_eval=None, s_eval=None,
                  prevalence: float | None = None) -> float:
    """Threshold of ``rule`` (see module docstring)."""
    if rule == "default":
        return 0.5
    if rule == "youden":
        return youden_threshold(y_fit, s_fit)
    if rule == "prevalence":
        pi = float(np.mean(np.asarray(y_fit).astype(bool))) if prevalence is None else prevalence
        return prevalence_threshold(s_fit, pi)
    if rule == "oracle":
        if y_eval is None:
            raise InputError("the oracle threshold needs the evaluation labels")
        return youden_threshold(y_eval, s_eval)
    raise InputError(f"threshold rule {rule!r} not one of {RULES}")


def threshold_transfer(y_fit, s_fit, y_eval, s_eval, rules=RULES,
                       prevalence: float | None = None) -> pd.DataFrame:
    """For each rule: the threshold, its rates on the fit and on the evaluation population, and
    the two transfer gaps (fit − eval at the same threshold; oracle − rule on eval)."""
    oracle = rates_at(y_eval, s_eval, fit_threshold("oracle", None, None, y_eval, s_eval))
    rows = []
    for rule in rules:
        t = fit_threshold(rule, y_fit, s_fit, y_eval, s_eval, prevalence)
        f = rates_at(y_fit, s_fit, t)
        e = rates_at(y_eval, s_eval, t)
        rows.append({
            "rule": rule, "threshold": t,
            "fitted_on": "evaluation (invalid: uses test labels)" if rule == "oracle"
            else ("none" if rule == "default" else "fit"),
            "fit_balanced_accuracy": f["balanced_accuracy"],
            "eval_tpr": e["tpr"], "eval_tnr": e["tnr"],
            "eval_balanced_accuracy": e["balanced_accuracy"],
            "transfer_gap": f["balanced_accuracy"] - e["balanced_accuracy"],
            "oracle_gap": oracle["balanced_accuracy"] - e["balanced_accuracy"],
        })
    return pd.DataFrame(rows)


def threshold_transfer_multiclass(y_fit, s_fit, y_eval, s_eval, classes, rules=RULES
                                  ) -> pd.DataFrame:
    """:func:`threshold_transfer` one class versus rest for every class with positives and
    negatives in both populations; the others are listed with a reason."""
    y_fit, y_eval = np.asarray(y_fit), np.asarray(y_eval)
    s_fit, s_eval = np.asarray(s_fit, float), np.asarray(s_eval, float)
    parts = []
    for c, name in enumerate(classes):
        bf, be = y_fit == c, y_eval == c
        if bf.all() or not bf.any() or be.all() or not be.any():
            parts.append(pd.DataFrame([{"class": name, "rule": None,
                                        "reason": "class lacks positives or negatives in a "
                                                  "population"}]))
            continue
        t = threshold_transfer(bf, s_fit[:, c], be, s_eval[:, c], rules)
        t.insert(0, "class", name)
        parts.append(t)
    return pd.concat(parts, ignore_index=True)
