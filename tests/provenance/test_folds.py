"""The fast stratified group folds are scikit-learn's, index for index."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import StratifiedGroupKFold

from splitscope.provenance.folds import GroupFolds


def _cases():
    rng = np.random.default_rng(0)
    for case in range(60):
        n = int(rng.integers(20, 600))
        classes = int(rng.integers(2, 5))
        y = rng.integers(0, classes, n)
        if case % 3 == 0:  # every row its own group: ties on almost every step
            groups = np.arange(n)
        elif case % 3 == 1:  # a few large groups among singletons
            groups = np.where(rng.random(n) < 0.5, rng.integers(0, 8, n), 1000 + np.arange(n))
        else:
            groups = rng.integers(0, max(6, n // 4), n)
        yield y, groups, int(rng.integers(2, 6)), int(rng.integers(0, 1000)), bool(case % 4)


@pytest.mark.parametrize("y,groups,k,seed,shuffle", list(_cases()))
def test_same_folds_as_scikit_learn(y, groups, k, seed, shuffle):
    kwargs = {"n_splits": k, "shuffle": shuffle, "random_state": seed if shuffle else None}
    X = np.zeros((len(y), 1))
    ours = list(GroupFolds(**kwargs).split(X, y, groups))
    theirs = list(StratifiedGroupKFold(**kwargs).split(X, y, groups))
    assert len(ours) == len(theirs) == k
    for (a_tr, a_te), (b_tr, b_te) in zip(ours, theirs):
        np.testing.assert_array_equal(a_tr, b_tr)
        np.testing.assert_array_equal(a_te, b_te)


def test_string_labels_and_groups_like_the_probes():
    rng = np.random.default_rng(1)
    y = rng.choice(np.array(["glioma", "notumor", "pituitary"], dtype=object), 900).astype(str)
    groups = np.where(rng.random(900) < 0.3, "p" + rng.integers(0, 40, 900).astype(str),
                      "\0row:" + np.arange(900).astype(str))
    ours = list(GroupFolds(5, shuffle=True, random_state=7).split(np.zeros(900), y, groups))
    theirs = list(StratifiedGroupKFold(5, shuffle=True, random_state=7).split(
        np.zeros(900), y, groups))
    for (a_tr, a_te), (b_tr, b_te) in zip(ours, theirs):
        np.testing.assert_array_equal(a_tr, b_tr)
        np.testing.assert_array_equal(a_te, b_te)


@pytest.mark.parametrize("k,classes", [(8, 3), (3, 9), (10, 12)])
def test_same_folds_as_scikit_learn_beyond_the_python_scores(k, classes):
    """More folds or classes than :data:`PYTHON_MAX`: the NumPy scores, the same folds."""
    rng = np.random.default_rng(k * 100 + classes)
    y = rng.integers(0, classes, 1500)
    groups = rng.integers(0, 500, 1500)
    X = np.zeros((1500, 1))
    ours = GroupFolds(k, shuffle=True, random_state=3).split(X, y, groups)
    theirs = StratifiedGroupKFold(k, shuffle=True, random_state=3).split(X, y, groups)
    for (_, a_te), (_, b_te) in zip(ours, theirs):
        np.testing.assert_array_equal(a_te, b_te)


@pytest.mark.slow
def test_python_fold_scores_equal_numpys_bit_for_bit():
    from splitscope.provenance.folds import PYTHON_MAX, fold_scores, fold_scores_numpy

    rng = np.random.default_rng(5)
    for k in range(2, PYTHON_MAX + 1):
        for c in range(2, PYTHON_MAX + 1):
            for _ in range(200):
                scale = int(rng.choice([3, 30, 3000]))
                counts = rng.integers(0, scale, (k, c)).astype(float)
                y_cnt = counts.sum(0).astype(np.int64) + rng.integers(1, scale, c)
                group = rng.integers(0, max(2, scale // 10), c).astype(float)
                assert fold_scores(counts.tolist(), y_cnt.tolist(), group.tolist()) == \
                    fold_scores_numpy(counts, y_cnt, group)
