"""Temperature scaling fitted on one population, evaluated on another (METHODS §5.4).

T* minimizes the fit population's NLL of softmax(z / T) over T > 0 (bounded search on log T in
[−5, 5], i.e. T in [0.0067, 148]); z are the logits, or log-probabilities when the scores are
declared probabilities (softmax(log p) = p, so T = 1 reproduces them). The evaluation
population's ECE and NLL are reported before and after; a run where ECE rose is counted as
"worse".
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from splitscope.errors import InputError
from splitscope.evaluation.metrics import (
    expected_calibration_error,
    negative_log_likelihood,
    softmax,
)

LOG_T_BOUNDS = (-5.0, 5.0)


def to_logits(scores, score_kind: str) -> np.ndarray:
    """Logits for temperature scaling: the scores for ``logit``, log of the (clipped)
    probabilities for ``probability``; plain scores cannot be calibrated."""
    s = np.asarray(scores, dtype=np.float64)
    if score_kind == "logit":
        return s
    if score_kind == "probability":
        return np.log(np.clip(s, np.finfo(np.float64).tiny, None))
    raise InputError("temperature scaling needs scores declared as probabilities or logits")


def fit_temperature(y_true, scores, score_kind: str = "logit") -> float:
    """T* = argmin_T NLL(softmax(z / T)) on the given rows."""
    y = np.asarray(y_true, dtype=np.int64)
    z = to_logits(scores, score_kind)

    def nll(log_t: float) -> float:
        return negative_log_likelihood(y, softmax(z, float(np.exp(log_t))))

    res = minimize_scalar(nll, bounds=LOG_T_BOUNDS, method="bounded",
                          options={"xatol": 1e-6})
    return float(np.exp(res.x))


def apply_temperature(scores, temperature: float, score_kind: str = "logit") -> np.ndarray:
    """Calibrated probabilities softmax(z / T)."""
    return softmax(to_logits(scores, score_kind), temperature)


def temperature_transfer(y_fit, s_fit, y_eval, s_eval, score_kind: str = "logit") -> dict:
    """Fit T* on the fit population; evaluation ECE (15 bins, top-label) and NLL before and
    after; ``worse`` is True when the evaluation ECE rose."""
    t = fit_temperature(y_fit, s_fit, score_kind)
    before = apply_temperature(s_eval, 1.0, score_kind)
    after = apply_temperature(s_eval, t, score_kind)
    ece_b = expected_calibration_error(y_eval, before)
    ece_a = expected_calibration_error(y_eval, after)
    return {"temperature": t, "eval_ece_before": ece_b, "eval_ece_after": ece_a,
            "eval_nll_before": negative_log_likelihood(y_eval, before),
            "eval_nll_after": negative_log_likelihood(y_eval, after),
            "fit_ece_after": expected_calibration_error(y_fit, apply_temperature(s_fit, t,
                                                                                  score_kind)),
            "worse": bool(ece_a > ece_b)}


def summarize_temperature(results: pd.DataFrame) -> dict:
    """Across runs: how many got a worse evaluation ECE after temperature scaling."""
    n = len(results)
    worse = int(results["worse"].sum()) if n else 0
    return {"runs": n, "ece_worse": worse,
            "ece_worse_share": worse / n if n else float("nan"),
            "median_temperature": float(results["temperature"].median()) if n else float("nan")}
