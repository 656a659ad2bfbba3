"""Stratified group folds, as scikit-learn's ``StratifiedGroupKFold`` makes them, faster.

scikit-learn assigns the groups one at a time to the fold that keeps the class shares most even
(the mean over classes of the spread of each class's share across folds, ties to the smaller
fold). For every group it tries each fold in a Python loop (``np.std``, ``np.mean`` and
``np.isclose`` on small arrays, per fold), which dominates the probes' folds on releases with
thousands of groups (every row without a patient id is a group of its own). Here the same
``_find_best_fold`` scores all folds at once with the same float operations in the same order:
on Python floats while the folds and the classes are at most :data:`PYTHON_MAX` (NumPy's own
sums of axes that short run left to right, so the values are the same bit for bit, and the
per-call cost of NumPy on such small arrays is gone), else in one array operation; the rule's
comparisons run on Python floats. Everything else (input checks, the shuffle, the order of the
groups, the test indices) is scikit-learn's own code. The folds are the same, index for index
(tested against scikit-learn).
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.model_selection import StratifiedGroupKFold

__all__ = ["GroupFolds", "fold_scores", "fold_scores_numpy"]

# np.isclose's defaults
_RTOL, _ATOL = 1e-05, 1e-08


#: folds and classes up to which the fold scores are computed on Python floats: NumPy sums an
#: axis this short from left to right, as ``sum`` does (from 8 elements on, a sum along a
#: contiguous axis is pairwise, and the last bits can differ)
PYTHON_MAX = 7


class GroupFolds(StratifiedGroupKFold):
    """``StratifiedGroupKFold`` (same parameters, same folds) with the fold choice of each
    group computed for all folds at once."""

    def _find_best_fold(self, y_counts_per_fold, y_cnt, group_y_counts):
        k = self.n_splits
        if k <= PYTHON_MAX and 2 <= y_cnt.size <= PYTHON_MAX:
            evals = fold_scores(y_counts_per_fold.tolist(), y_cnt.tolist(),
                                group_y_counts.tolist())
        else:
            evals = fold_scores_numpy(y_counts_per_fold, y_cnt, group_y_counts)
        # integer counts: their float sum is exact in any order, so one reduction gives the
        # sizes scikit-learn's per-fold np.sum gives
        sizes = y_counts_per_fold.sum(axis=1).tolist()
        best_fold, min_eval, min_size = None, float("inf"), float("inf")
        for i, (fold_eval, size) in enumerate(zip(evals, sizes)):
            close = min_eval != float("inf") and \
                abs(fold_eval - min_eval) <= _ATOL + _RTOL * abs(min_eval)
            if fold_eval < min_eval or (close and size < min_size):
                best_fold, min_eval, min_size = i, fold_eval, size
        return best_fold


def fold_scores_numpy(y_counts_per_fold: np.ndarray, y_cnt: np.ndarray,
                      group_y_counts: np.ndarray) -> list[float]:
    """scikit-learn's score of adding the group to each fold: the mean over classes of the
    standard deviation across folds of each class's share, for all folds at once."""
    k = len(y_counts_per_fold)
    # trial[i]: the fold counts with the group added to fold i (counts are integers, so
    # adding is exact, as scikit-learn's add-then-subtract is)
    trial = np.repeat(y_counts_per_fold[None], k, axis=0)
    trial[np.arange(k), np.arange(k)] += group_y_counts
    return np.std(trial / y_cnt.reshape(1, 1, -1), axis=1).mean(axis=1).tolist()


def fold_scores(counts: list[list[float]], y_cnt: list, group: list[float]) -> list[float]:
    """:func:`fold_scores_numpy` on Python floats, the same operations in the same order
    (``np.std``: the mean, then the mean of squared deviations, then the square root), so the
    same values bit for bit while the folds and the classes are at most :data:`PYTHON_MAX`;
    without NumPy's per-call cost, which dominates arrays this small."""
    k, c = len(counts), len(y_cnt)
    columns = [[row[j] / y_cnt[j] for row in counts] for j in range(c)]  # class j's shares
    scores = []
    for i in range(k):
        stds = []
        for j in range(c):
            shares = columns[j].copy()
            shares[i] = (counts[i][j] + group[j]) / y_cnt[j]
            mean = sum(shares) / k
            stds.append(math.sqrt(sum((v - mean) * (v - mean) for v in shares) / k))
        scores.append(sum(stds) / c)
    return scores
