"""Bin edges from one sort per column are scikit-learn's, bit for bit, and so are the fits."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.utils.stats import _weighted_percentile

from splitscope.provenance.binning import (
    SortedColumn,
    one_sort_per_column,
    weighted_percentile_sorted,
)

GRID = np.linspace(0, 100, 256)[1:-1]  # the ranks of a 255-bin fit's edges
binning = importlib.import_module("sklearn.ensemble._hist_gradient_boosting.binning")


def _column(kind: int, n: int, rng) -> np.ndarray:
    if kind == 0:
        return rng.normal(size=n)
    if kind == 1:  # many ties
        return rng.integers(0, 400, n).astype(float)
    if kind == 2:  # a few values only
        return rng.integers(0, 3, n).astype(float)
    return np.round(rng.exponential(size=n), 2)


def _weights(n: int, rng) -> np.ndarray:
    y = rng.integers(0, 3, n)
    counts = np.bincount(y, minlength=3).clip(1)
    return (n / (3 * counts))[y]  # balanced class weights, as the probes fit


def _cases():
    rng = np.random.default_rng(0)
    for case in range(24):
        n = int(rng.integers(1, 1500))
        values = _column(case % 4, n, rng)
        if case % 2:
            values = np.sort(values)  # the library sorts before it asks
        weights = _weights(n, rng) if case % 3 else rng.uniform(0.1, 3.0, n)
        yield values, weights, bool(case % 5)


@pytest.mark.parametrize("values,weights,average", list(_cases()))
def test_same_percentiles_as_scikit_learn(values, weights, average):
    theirs = np.array([_weighted_percentile(values, weights, p, average=average) for p in GRID])
    ours = weighted_percentile_sorted(SortedColumn(values, weights), GRID, average)
    assert ours.tobytes() == theirs.tobytes()


def _fit(X, y, early_stopping):
    model = HistGradientBoostingClassifier(random_state=3, class_weight="balanced",
                                           max_bins=255, early_stopping=early_stopping)
    return model.fit(X, y)


@pytest.mark.slow
@pytest.mark.parametrize("early_stopping", [False, True])
def test_a_fit_is_the_library_fit_tree_for_tree(early_stopping):
    rng = np.random.default_rng(5)
    n = 3000
    X = np.column_stack([rng.normal(size=n), rng.integers(0, 900, n).astype(float),
                         np.round(rng.exponential(size=n), 1), rng.integers(0, 4, n)])
    X[rng.random(n) < 0.1, 0] = np.nan  # missing values go to the library's own function
    y = (X[:, 1] + 300 * rng.normal(size=n) > 450).astype(int) + (X[:, 3] > 2)
    calls = []
    original = binning._weighted_percentile
    theirs = _fit(X, y, early_stopping)
    with one_sort_per_column():
        assert binning._weighted_percentile is not original
        wrapped = binning._weighted_percentile
        binning._weighted_percentile = lambda *a, **k: calls.append(1) or wrapped(*a, **k)
        try:
            ours = _fit(X, y, early_stopping)
        finally:
            binning._weighted_percentile = wrapped
    assert binning._weighted_percentile is original
    assert len(calls) >= 254  # the weighted path ran, so the edges came from one sort
    assert theirs.n_iter_ == ours.n_iter_
    for a, b in zip(theirs._bin_mapper.bin_thresholds_, ours._bin_mapper.bin_thresholds_):
        assert a.tobytes() == b.tobytes()
    for a, b in zip(theirs._predictors, ours._predictors):
        assert [p.nodes.tobytes() for p in a] == [p.nodes.tobytes() for p in b]
    assert theirs.predict_proba(X).tobytes() == ours.predict_proba(X).tobytes()


@pytest.mark.parametrize("case", ["nan", "zero weight", "two columns", "several ranks"])
def test_what_it_does_not_cover_goes_to_the_library(case):
    rng = np.random.default_rng(2)
    values, weights, rank = np.sort(rng.normal(size=500)), rng.uniform(0.5, 2, 500), 37.5
    if case == "nan":
        values[-3:] = np.nan
    elif case == "zero weight":
        weights[:10] = 0
    elif case == "two columns":
        values = np.column_stack([values, values[::-1]])
    else:
        rank = np.array([10.0, 37.5, 90.0])
    theirs = _weighted_percentile(values, weights, rank, average=True)
    with one_sort_per_column():
        ours = binning._weighted_percentile(values, weights, rank, average=True)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_a_new_column_is_sorted_again():
    """The sort of one array is never used for another."""
    rng = np.random.default_rng(4)
    values, weights = np.sort(rng.normal(size=400)), np.ones(400)
    with one_sort_per_column():
        first = binning._weighted_percentile(values, weights, 50.0, average=True)
        other = values + 10
        second = binning._weighted_percentile(other, weights, 50.0, average=True)
    assert second == pytest.approx(first + 10)
    assert second == _weighted_percentile(other, weights, 50.0, average=True)
