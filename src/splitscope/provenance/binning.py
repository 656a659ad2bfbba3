"""The bin edges of a sample-weighted histogram gradient-boosting fit, from one sort per column.

scikit-learn (1.8 and 1.9) takes a weighted fit's bin edges for a column with more distinct
values than bins as ``max_bins - 1`` separate calls of its weighted percentile, and each call
sorts the column and sums its weights again: 254 sorts per column per fit, about 0.2 s per
column at 5,000 rows and two thirds of a probe's fit (the probes weight by class, so every fit
takes this path). :func:`one_sort_per_column` answers those calls, while a fit runs, from one
sort and one cumulative sum of the column, with the same operations on the same sorted order,
so every edge, and so every tree, is the same bit for bit (tested against the library). A call
this does not cover (NaN values, zero or non-finite weights, several columns, several
percentiles, another array library) goes to the library's own function, and a version that
computes its edges another way never calls it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

__all__ = ["SortedColumn", "one_sort_per_column", "weighted_percentile_sorted"]

_BINNING = "sklearn.ensemble._hist_gradient_boosting.binning"
_NAME = "_weighted_percentile"
_EPS = np.finfo(np.float64).eps


class SortedColumn:
    """A column and its weights sorted as the library sorts them (``argsort`` of the column as
    an (n, 1) array along axis 0, NumPy's default kind) and the cumulative sum of the sorted
    weights (left to right, as ``cumsum`` always sums)."""

    def __init__(self, values: np.ndarray, weights: np.ndarray):
        self.values, self.weights = values, weights
        self.order = np.argsort(values.reshape(-1, 1), axis=0)[:, 0]
        self.cdf = np.cumsum(weights[self.order])


def weighted_percentile_sorted(column: SortedColumn, ranks: np.ndarray,
                               average: bool) -> np.ndarray:
    """Weighted percentiles (ranks in percent) of a :class:`SortedColumn`: the inverted-CDF
    value, or with ``average`` the mean of it and the next value where the rank falls exactly
    on a step of the CDF (NumPy's ``averaged_inverted_cdf`` for unit weights). The same float
    operations as scikit-learn's ``_weighted_percentile`` of one column with positive weights
    and no NaN."""
    values, order, cdf = column.values, column.order, column.cdf
    last = len(order) - 1
    ranks = np.asarray(ranks, dtype=np.float64)
    target = ranks / 100 * cdf[-1]
    target = np.where(target == 0, np.nextafter(target, target + 1), target)
    at = np.clip(np.searchsorted(cdf, target), 0, last)
    value = values[order[at]]
    if not average:
        return value
    above = (cdf[at] - target) > _EPS
    following = values[order[np.clip(at + 1, 0, last)]]
    return np.where(above, value, (value + following) / 2)


def _covered(array, sample_weight, percentile_rank, xp) -> bool:
    return (xp is None and type(array) is np.ndarray and type(sample_weight) is np.ndarray
            and array.ndim == 1 and array.dtype == np.float64
            and sample_weight.dtype == np.float64 and sample_weight.shape == array.shape
            and array.size > 0 and np.ndim(percentile_rank) == 0)


def _valid(array: np.ndarray, weights: np.ndarray) -> bool:
    return bool(not np.isnan(array).any() and np.isfinite(weights).all() and (weights > 0).all())


def _from_one_sort(original: Callable) -> Callable:
    state = threading.local()  # the last column seen in this thread

    def weighted_percentile(array, sample_weight, percentile_rank=50, average=False, xp=None):
        if not _covered(array, sample_weight, percentile_rank, xp):
            return original(array, sample_weight, percentile_rank, average=average, xp=xp)
        seen = getattr(state, "column", None)
        if seen is None or seen[0] is not array or seen[1] is not sample_weight:
            column = SortedColumn(array, sample_weight) if _valid(array, sample_weight) else None
            seen = state.column = (array, sample_weight, column)
        if seen[2] is None:
            return original(array, sample_weight, percentile_rank, average=average, xp=xp)
        return weighted_percentile_sorted(seen[2], np.asarray([percentile_rank]), average)[0]

    return weighted_percentile


@contextmanager
def one_sort_per_column() -> Iterator[None]:
    """While the block runs, scikit-learn's histogram gradient boosting takes each column's
    weighted percentiles from one sort of it (the same edges; module docstring). Nothing
    changes where the library's binning does not call a weighted percentile."""
    import importlib

    try:
        module = importlib.import_module(_BINNING)
    except ImportError:
        module = None
    original = getattr(module, _NAME, None)
    if original is None:
        yield
        return
    setattr(module, _NAME, _from_one_sort(original))
    try:
        yield
    finally:
        setattr(module, _NAME, original)
