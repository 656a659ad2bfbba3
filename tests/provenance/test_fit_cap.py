"""The probes' fit row cap: a seeded class- and group-aware sample above it, nothing below."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitscope.errors import InputError
from splitscope.provenance.checks import audit_provenance
from splitscope.provenance.header_probe import (
    FIT_MAX_ROWS,
    header_probe_cross_split,
    header_probe_within_pool,
)
from splitscope.provenance.image_stats_probe import (
    IMAGE_STATS_FEATURES,
    image_stats_probe_within_pool,
)
from splitscope.provenance.stats import fit_sample


def _table(n=600, seed=0):
    rng = np.random.default_rng(seed)
    label = rng.choice(["a", "b", "c"], n, p=[0.5, 0.3, 0.2])
    fmt = np.where(rng.random(n) < 0.8, np.where(label == "a", "JPEG", "PNG"),
                   rng.choice(["JPEG", "PNG"], n))
    return pd.DataFrame({
        "row": np.arange(n), "path": [f"x/{i}.img" for i in range(n)],
        "label": pd.array(label, dtype="string"),
        "split": pd.array(np.where(np.arange(n) < n * 3 // 4, "train", "test"), dtype="string"),
        "group": pd.array([f"g{i // 3}" for i in range(n)], dtype="string"),
        "format": pd.array(fmt, dtype="string"),
        "width": pd.array(np.where(label == "c", 512, 224) + rng.integers(0, 3, n),
                          dtype="Int64"),
        "app_exif": pd.array(rng.random(n) < 0.5, dtype="boolean"),
        **{c: pd.array(rng.normal(100, 10, n) + (5 * (label == "b") if c == "intensity_mean"
                                                  else 0), dtype="Float64")
           for c in IMAGE_STATS_FEATURES},
    })


def test_fit_sample_keeps_every_row_at_or_below_the_cap():
    y = np.array(["a", "b"] * 50)
    assert np.array_equal(fit_sample(y, None, 100, 0), np.arange(100))
    assert np.array_equal(fit_sample(y, None, None, 0), np.arange(100))


def test_fit_sample_is_class_stratified_group_spread_and_seeded():
    rng = np.random.default_rng(1)
    y = rng.choice(["a", "b", "c"], 3000, p=[0.6, 0.3, 0.1])
    groups = np.repeat(np.arange(600), 5)  # patients of 5 images
    take = fit_sample(y, groups, 500, seed=3)
    assert len(take) == 500 and np.all(np.diff(take) > 0)
    counts = pd.Series(y[take]).value_counts()
    full = pd.Series(y).value_counts()
    for c in full.index:  # each class keeps its share within one row (largest remainder)
        assert abs(counts[c] - 500 * full[c] / 3000) < 1
    # round-robin: per class, no patient gives a second image before all gave one
    for c in full.index:
        in_class = np.unique(groups[y == c])
        picked = groups[take][y[take] == c]
        assert len(np.unique(picked)) == min(len(picked), len(in_class))
    assert np.array_equal(fit_sample(y, groups, 500, seed=3), take)
    assert not np.array_equal(fit_sample(y, groups, 500, seed=4), take)


def test_fit_sample_rows_without_group_and_a_rare_class():
    y = np.array(["a"] * 990 + ["b"] * 10)
    groups = np.array([None] * 1000, dtype=object)  # no key: each row its own group
    take = fit_sample(y, groups, 50, seed=0)
    assert len(take) == 50 and (y[take] == "b").sum() == 1  # ≥ one row of every class
    with pytest.raises(InputError, match="at least 1"):
        fit_sample(y, None, 0, 0)


def _same(a, b):
    assert a.balanced_accuracy == b.balanced_accuracy
    pd.testing.assert_frame_equal(a.predictions, b.predictions)
    pd.testing.assert_frame_equal(a.importances, b.importances)
    pd.testing.assert_frame_equal(a.single_field, b.single_field)


@pytest.mark.slow
@pytest.mark.parametrize("cap", [600, FIT_MAX_ROWS])
def test_below_the_cap_the_probes_equal_the_uncapped_ones(cap):
    t = _table()
    opts = {"n_resamples": 200, "importance_repeats": 2}
    _same(header_probe_within_pool(t, fit_max_rows=cap, **opts),
          header_probe_within_pool(t, fit_max_rows=None, **opts))
    tr, te = t[t.split == "train"], t[t.split == "test"]
    a = header_probe_cross_split(tr, te, fit_max_rows=cap, **opts)
    _same(a, header_probe_cross_split(tr, te, fit_max_rows=None, **opts))
    assert a.params["fit_rows"] == len(tr) and "fit_sample" not in a.params
    s = image_stats_probe_within_pool(t, fit_max_rows=cap, **opts)
    _same(s, image_stats_probe_within_pool(t, fit_max_rows=None, **opts))
    assert s.params["fit_max_rows"] == cap


@pytest.mark.slow
def test_above_the_cap_models_fit_on_the_sample_and_score_every_row():
    t = _table()
    r = header_probe_within_pool(t, fit_max_rows=200, n_resamples=200, importance_repeats=2)
    assert r.params["fit_rows"] == [200] * 5 and r.params["fit_max_rows"] == 200
    assert "round-robin over groups" in r.params["fit_sample"]
    assert len(r.predictions) == len(t) and r.n_rows == len(t)  # every held-out row scored
    assert r.balanced_accuracy["low"] > 1 / 3  # the planted fields are still found
    tr, te = t[t.split == "train"], t[t.split == "test"]
    c = header_probe_cross_split(tr, te, fit_max_rows=100, n_resamples=200,
                                 importance_repeats=2)
    assert c.params["fit_rows"] == 100 and c.params["train_rows"] == len(tr)
    assert f"{len(tr) - 100:,} training row(s) left out" in c.params["fit_sample"]
    assert len(c.predictions) == len(te)
    again = header_probe_cross_split(tr, te, fit_max_rows=100, n_resamples=200,
                                     importance_repeats=2)
    _same(c, again)  # seeded


@pytest.mark.slow
def test_layer_records_say_how_many_rows_fit_the_models():
    t = _table()
    res = audit_provenance(t, n_resamples=100, importance_repeats=1, partition=False,
                           fit_max_rows=150)
    by_id = {r.id: r for r in res.records}
    wp = by_id["provenance.header_probe.within_pool"]
    assert wp.predicate["params"]["fit_max_rows"] == 150
    assert wp.predicate["params"]["fit_rows"] == [150] * 5
    assert "at most 150 training rows" in wp.scope
    assert wp.denominator == len(t)
    cs = by_id["provenance.image_stats_probe.cross_split[test_train]"]
    assert cs.predicate["params"]["fit_rows"] == 150 and "at most 150" in cs.scope
    plain = audit_provenance(t, n_resamples=100, importance_repeats=1, partition=False)
    wp0 = {r.id: r for r in plain.records}["provenance.header_probe.within_pool"]
    assert wp0.predicate["params"]["fit_max_rows"] == FIT_MAX_ROWS
    assert "fit_sample" not in wp0.predicate["params"] and "at most" not in wp0.scope


def _partition_data(n=900, seed=0):
    rng = np.random.default_rng(seed)
    is_test = rng.random(n) < 0.25
    X = rng.normal(size=(n, 6)) + 0.4 * is_test[:, None]
    groups = np.array([f"g{i // 3}" for i in range(n)], dtype=object)
    return X, is_test, groups


def test_partition_classifier_below_the_cap_equals_uncapped_and_above_scores_every_row():
    from splitscope.provenance.partition import partition_classifier

    X, y, g = _partition_data()
    a = partition_classifier(X, y, groups=g, n_resamples=200)
    b = partition_classifier(X, y, groups=g, n_resamples=200, fit_max_rows=None)
    assert a.auc == b.auc and a.control == b.control
    pd.testing.assert_frame_equal(a.scores, b.scores)
    assert a.params["fit_max_rows"] == FIT_MAX_ROWS and "fit_sample" not in a.params
    c = partition_classifier(X, y, groups=g, n_resamples=200, fit_max_rows=300)
    assert c.params["fit_rows"] == [300] * 5 and "left out of the fits" in c.params["fit_sample"]
    assert np.isfinite(c.scores["prob_test"]).all()  # every held-out row scored
    assert c.auc["low"] > 0.5  # the planted shift is still found
