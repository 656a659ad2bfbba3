"""Metric implementations against scikit-learn (1e-12) and hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as skm

from splitscope.errors import InputError
from splitscope.evaluation import metrics as M


def _data(n=400, k=4, seed=0, ties=False):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    s = rng.random((n, k))
    s[np.arange(n), y] += 0.4
    if ties:
        s = np.round(s, 1)
    p = s / s.sum(axis=1, keepdims=True)
    return y, s, p


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ties", [False, True])
def test_counting_metrics_match_sklearn(seed, ties):
    y, s, _ = _data(seed=seed, ties=ties)
    k = s.shape[1]
    pred = M.predict(s)
    labels = list(range(k))
    assert M.accuracy(y, pred) == pytest.approx(skm.accuracy_score(y, pred), abs=1e-12)
    assert M.balanced_accuracy(y, pred, k) == pytest.approx(
        skm.balanced_accuracy_score(y, pred), abs=1e-12)
    np.testing.assert_allclose(M.per_class_recall(y, pred, k),
                               skm.recall_score(y, pred, average=None, labels=labels), atol=1e-12)
    np.testing.assert_allclose(M.per_class_precision(y, pred, k),
                               skm.precision_score(y, pred, average=None, labels=labels,
                                                   zero_division=0), atol=1e-12)
    np.testing.assert_allclose(M.per_class_f1(y, pred, k),
                               skm.f1_score(y, pred, average=None, labels=labels,
                                            zero_division=0), atol=1e-12)
    np.testing.assert_array_equal(M.confusion(y, pred, k),
                                  skm.confusion_matrix(y, pred, labels=labels))
    for c in range(k):  # specificity = recall of the negative class
        spec = skm.recall_score(y != c, pred != c)
        assert M.per_class_specificity(y, pred, k)[c] == pytest.approx(spec, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ties", [False, True])
def test_ranking_metrics_match_sklearn(seed, ties):
    y, s, p = _data(seed=seed, ties=ties)
    k = s.shape[1]
    for c in range(k):
        assert M.auroc(y == c, s[:, c]) == pytest.approx(
            skm.roc_auc_score(y == c, s[:, c]), abs=1e-12)
        assert M.average_precision(y == c, s[:, c]) == pytest.approx(
            skm.average_precision_score(y == c, s[:, c]), abs=1e-12)
    mauc, skipped = M.macro_auroc(y, s)
    assert skipped == []
    assert mauc == pytest.approx(np.mean([skm.roc_auc_score(y == c, s[:, c]) for c in range(k)]),
                                 abs=1e-12)
    # sklearn's multi-class OvR macro AUROC needs probabilities; on them it agrees
    assert M.macro_auroc(y, p)[0] == pytest.approx(
        skm.roc_auc_score(y, p, multi_class="ovr", average="macro"), abs=1e-12)
    assert M.macro_average_precision(y, s) == pytest.approx(
        skm.average_precision_score(np.eye(k)[y], s, average="macro"), abs=1e-12)


def test_probability_metrics_match_sklearn():
    y, _, p = _data(seed=3)
    k = p.shape[1]
    assert M.negative_log_likelihood(y, p) == pytest.approx(
        skm.log_loss(y, p, labels=list(range(k))), abs=1e-12)
    onehot = np.eye(k)[y]
    per_class = [skm.brier_score_loss(onehot[:, c], p[:, c]) for c in range(k)]
    assert M.brier_score(y, p) == pytest.approx(sum(per_class), abs=1e-12)
    f1 = M.per_class_f1(y, M.predict(p), k).mean()
    assert f1 == pytest.approx(skm.f1_score(y, M.predict(p), average="macro"), abs=1e-12)


def test_balanced_accuracy_undefined_when_required_class_absent():
    y = np.array([0, 0, 1, 1])
    pred = np.array([0, 1, 1, 1])
    assert np.isnan(M.balanced_accuracy(y, pred, 3))
    reason = M.balanced_accuracy_reason(y, 3, ["a", "b", "c"])
    assert "c" in reason and "undefined" in reason
    assert M.balanced_accuracy_present(y, pred, 3) == pytest.approx((0.5 + 1.0) / 2)
    # sklearn averages over the classes present: that is the *present-class* target
    assert M.balanced_accuracy_present(y, pred, 3) == pytest.approx(
        skm.balanced_accuracy_score(y, pred))
    assert M.balanced_accuracy(y, pred, 3, required=[0, 1]) == pytest.approx(0.75)


def test_macro_auroc_skips_and_names_classes():
    y = np.array([0, 0, 1, 1, 1])
    s = np.array([[0.9, 0.1, 0.0], [0.6, 0.4, 0.0], [0.3, 0.7, 0.0], [0.5, 0.5, 0.0],
                  [0.2, 0.8, 0.0]])
    mauc, skipped = M.macro_auroc(y, s, ["A", "B", "C"])
    assert skipped == ["C"]
    assert mauc == pytest.approx((1.0 + 1.0) / 2)


def test_auroc_on_supplied_scores_no_softmax():
    """AUROC is rank-based on the raw scores; a monotone map of one column keeps it, while a
    softmax across columns would not."""
    y, s, _ = _data(seed=5)
    logits = np.log(s)
    assert M.auroc(y == 0, logits[:, 0]) == pytest.approx(M.auroc(y == 0, s[:, 0]), abs=1e-15)


def test_ece_hand_computed():
    # 4 rows, 2 classes; confidences 0.9, 0.9 (bin 14), 0.6, 0.55 (bins 8, 8)
    p = np.array([[0.9, 0.1], [0.1, 0.9], [0.6, 0.4], [0.45, 0.55]])
    y = np.array([0, 0, 0, 1])
    # bin (0.8667, 0.9333]: conf mean 0.9, accuracy 1/2 → |0.5 − 0.9| × 2/4 = 0.2
    # bin (0.5333, 0.6]: conf 0.6 and 0.55 → mean 0.575, accuracy 1 → 0.425 × 2/4 = 0.2125
    assert M.expected_calibration_error(y, p) == pytest.approx(0.2 + 0.2125, abs=1e-12)
    # a confidence of exactly 1/15 · k sits in the lower bin (right-closed bins)
    assert M._bin_index(np.array([0.0, 1 / 15, 0.0667, 1.0]), 15).tolist() == [0, 0, 1, 14]


def test_brier_decomposition_hand_computed():
    # binary, probabilities constant within bins → the Murphy identity is exact
    p1 = np.array([0.2, 0.2, 0.2, 0.8, 0.8])
    y = np.array([0, 0, 1, 1, 1])
    p = np.c_[1 - p1, p1]
    d = M.brier_decomposition(y, p)
    # class 1: obar = 0.6; bins {0.2: o=1/3, n=3}, {0.8: o=1, n=2}
    rel1 = (3 * (0.2 - 1 / 3) ** 2 + 2 * (0.8 - 1.0) ** 2) / 5
    res1 = (3 * (1 / 3 - 0.6) ** 2 + 2 * (1.0 - 0.6) ** 2) / 5
    unc1 = 0.6 * 0.4
    assert d["reliability"] == pytest.approx(2 * rel1, abs=1e-12)  # class 0 mirrors class 1
    assert d["resolution"] == pytest.approx(2 * res1, abs=1e-12)
    assert d["uncertainty"] == pytest.approx(2 * unc1, abs=1e-12)
    assert d["residual"] == pytest.approx(0.0, abs=1e-12)
    assert d["brier"] == pytest.approx(d["reliability"] - d["resolution"] + d["uncertainty"])


def test_organizer_score_and_score_predictions():
    y, s, p = _data(seed=7)
    out = M.score_predictions(y, p, list("abcd"), "probability", per_class=True)
    assert out["organizer_score"] == pytest.approx((out["macro_auc"] + out["balanced_accuracy"])
                                                   / 2, abs=1e-15)
    assert out["probability_reason"] is None and np.isfinite(out["ece"])
    assert len(out["per_class"]) == 4
    plain = M.score_predictions(y, s, list("abcd"), "score")
    assert np.isnan(plain["ece"]) and "not declared" in plain["probability_reason"]
    logit = M.score_predictions(y, np.log(p), list("abcd"), "logit")
    assert logit["nll"] == pytest.approx(out["nll"], abs=1e-12)
    bad = M.score_predictions(y, s * 3, list("abcd"), "probability")
    assert np.isnan(bad["brier"]) and "outside" in bad["probability_reason"]


def test_invalid_inputs_raise():
    with pytest.raises(InputError):
        M.check_inputs(np.array([0, 1]), np.array([[0.1, np.nan], [0.2, 0.3]]))
    with pytest.raises(InputError):
        M.check_inputs(np.array([0, 3]), np.ones((2, 2)))
    with pytest.raises(InputError):
        M.check_inputs(np.array([0.5, 1.0]))


def test_reliability_bins_agree_with_ece():
    from splitscope.evaluation.metrics import expected_calibration_error, reliability_bins

    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(4), size=500)
    y = rng.integers(0, 4, size=500)
    bins = reliability_bins(y, probs)
    assert len(bins) == 15 and sum(b["count"] for b in bins) == 500
    ece = sum(b["count"] * abs(b["accuracy"] - b["confidence"]) for b in bins if b["count"]) / 500
    assert abs(ece - expected_calibration_error(y, probs)) < 1e-12
