"""Threshold rules and their transfer gap (§5.3); temperature scaling (§5.4)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_curve

from splitscope.errors import InputError
from splitscope.evaluation import calibration as C
from splitscope.evaluation import thresholds as T
from splitscope.evaluation.metrics import expected_calibration_error, softmax


def _binary(n=500, seed=0, shift=1.0):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.3
    s = 1 / (1 + np.exp(-(rng.normal(0, 1, n) + shift * y)))
    return y, np.round(s, 3)


def test_youden_equals_brute_force_and_roc_curve():
    y, s = _binary()
    t = T.youden_threshold(y, s)
    cands = np.unique(s)
    j = [T.rates_at(y, s, c)["youden_j"] for c in cands]
    assert T.rates_at(y, s, t)["youden_j"] == pytest.approx(max(j), abs=1e-12)
    assert t == max(c for c, v in zip(cands, j) if v == pytest.approx(max(j), abs=1e-12))
    fpr, tpr, _ = roc_curve(y, s)
    assert T.rates_at(y, s, t)["youden_j"] == pytest.approx(np.max(tpr - fpr), abs=1e-12)


def test_prevalence_threshold_is_smallest_observed_with_rate_below_target():
    s = np.array([0.1, 0.2, 0.2, 0.4, 0.9])
    assert T.prevalence_threshold(s, 0.4) == 0.4  # mean(s ≥ 0.4) = 0.4
    assert T.prevalence_threshold(s, 0.5) == 0.4  # mean(s ≥ 0.2) = 0.8 > 0.5
    assert T.prevalence_threshold(s, 0.0) == float("inf")
    for pi in np.linspace(0, 1, 11):
        t = T.prevalence_threshold(s, pi)
        assert np.mean(s >= t) <= pi + 1e-12
        smaller = s[s < t]
        assert all(np.mean(s >= u) > pi for u in smaller)


def test_threshold_transfer_table_and_gaps():
    y_fit, s_fit = _binary(seed=1)
    y_ev, s_ev = _binary(seed=2, shift=0.6)
    tab = T.threshold_transfer(y_fit, s_fit, y_ev, s_ev).set_index("rule")
    assert list(tab.index) == list(T.RULES)
    assert tab.loc["default", "threshold"] == 0.5
    assert tab.loc["oracle", "oracle_gap"] == pytest.approx(0.0)
    assert (tab["oracle_gap"] >= -1e-12).all()  # the oracle is the best on eval
    assert "invalid" in tab.loc["oracle", "fitted_on"]
    row = tab.loc["youden"]
    assert row["transfer_gap"] == pytest.approx(row["fit_balanced_accuracy"]
                                                - row["eval_balanced_accuracy"])
    multi = T.threshold_transfer_multiclass(np.array([0, 1, 2, 0, 1, 2]), np.eye(3)[[0, 1, 2, 0, 1,
                                                                                    2]],
                                            np.array([0, 1, 1, 0, 1, 1]),
                                            np.eye(3)[[0, 1, 1, 0, 1, 1]], ["a", "b", "c"])
    assert multi.set_index("class").loc["c", "reason"].startswith("class lacks")
    with pytest.raises(InputError):
        T.youden_threshold(np.ones(4), np.arange(4.0))


def test_temperature_scaling_recovers_known_temperature():
    rng = np.random.default_rng(0)
    n, k = 4000, 4
    base = rng.normal(0, 1.5, (n, k))
    y = np.array([rng.choice(k, p=p) for p in softmax(base)])  # calibrated at T = 1
    logits = base * 3.0  # overconfident: the right temperature is 3
    t = C.fit_temperature(y, logits, "logit")
    assert t == pytest.approx(3.0, rel=0.1)
    out = C.temperature_transfer(y[:2000], logits[:2000], y[2000:], logits[2000:], "logit")
    assert out["eval_ece_after"] < out["eval_ece_before"] and not out["worse"]
    assert out["eval_ece_before"] == pytest.approx(
        expected_calibration_error(y[2000:], softmax(logits[2000:])))
    probs = softmax(logits)
    assert C.fit_temperature(y, probs, "probability") == pytest.approx(t, rel=1e-3)
    with pytest.raises(InputError):
        C.fit_temperature(y, logits, "score")
    import pandas as pd
    summ = C.summarize_temperature(pd.DataFrame([out, {**out, "worse": True}]))
    assert summ["runs"] == 2 and summ["ece_worse"] == 1
