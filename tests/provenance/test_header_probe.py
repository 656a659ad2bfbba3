"""Header-only probe (METHODS §4.2) on synthetic header tables with a planted field."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitscope.errors import InputError
from splitscope.provenance.header_probe import (
    header_columns,
    header_feature_matrix,
    header_probe_cross_split,
    header_probe_within_pool,
)


def _table(n=240, seed=0, signal=True):
    rng = np.random.default_rng(seed)
    label = np.where(rng.random(n) < 0.5, "a", "b")
    fmt = np.where(label == "a", "JPEG", "PNG") if signal else rng.choice(["JPEG", "PNG"], n)
    flip = rng.random(n) < 0.1  # 90% aligned
    fmt = np.where(flip, np.where(fmt == "JPEG", "PNG", "JPEG"), fmt)
    return pd.DataFrame({
        "row": np.arange(n), "path": [f"x/{i}.img" for i in range(n)],
        "label": pd.array(label, dtype="string"),
        "split": pd.array(np.where(np.arange(n) < n * 3 // 4, "train", "test"), dtype="string"),
        "format": pd.array(fmt, dtype="string"),
        "width": pd.array(rng.integers(100, 300, n), dtype="Int64"),  # noise
        "bit_depth": pd.array([8] * n, dtype="Int64"),  # constant
        "exif_software": pd.array([f"id{i}" for i in range(n)], dtype="string"),  # ID-like
        "jpeg_qt0": pd.array([",".join(["2"] * 63 + [str(rng.integers(1, 3))]) for _ in range(n)],
                             dtype="string"),
        "app_exif": pd.array(rng.random(n) < 0.5, dtype="boolean"),
        "extension": pd.array(np.where(label == "a", "jpg", "png"), dtype="string"),
        "sha256": [f"{i:064x}" for i in range(n)],
    })


def test_feature_matrix_encodes_drops_and_never_uses_pixels():
    X, info = header_feature_matrix(_table())
    assert "format" in X.columns and "width" in X.columns and "app_exif" in X.columns
    assert info["dropped"]["bit_depth"] == "constant"
    assert info["dropped"]["exif_software"].startswith("ID-like")
    assert "name-derived" in info["dropped"]["extension"]
    assert "jpeg_qt0[63]" in X.columns and "jpeg_qt0[0]" not in X.columns  # constant coefficient
    assert not any(c.startswith("sha256") for c in X.columns)
    with pytest.raises(InputError, match="pixel"):
        header_feature_matrix(_table(), columns=["format", "sha256"])


def test_feature_matrix_drops_constant_columns_in_place_of_order():
    """Constant columns leave each block before the join: the matrix, its column order, the
    categorical flags and the order of ``dropped`` are those of dropping them after it."""
    t = _table()
    t["jpeg_qt1"] = t["jpeg_qt0"]
    t["colour_type"] = pd.array(["rgb"] * len(t), dtype="string")  # constant categorical
    X, info = header_feature_matrix(t)
    kinds = dict(zip(info["features"], info["categorical"]))
    assert list(X.columns) == info["features"] and len(info["categorical"]) == X.shape[1]
    assert info["features"].index("jpeg_qt0[63]") < info["features"].index("jpeg_qt1[63]")
    assert kinds["format"] and not kinds["jpeg_qt1[63]"] and not kinds["width"]
    constant = [k for k, v in info["dropped"].items() if v == "constant"]
    assert list(info["dropped"])[-len(constant):] == constant  # after the other reasons
    qt0 = [c for c in constant if c.startswith("jpeg_qt0[")]
    assert qt0 == [f"jpeg_qt0[{k}]" for k in range(63)] and "jpeg_qt1[0]" in constant
    fields = [c.split("[")[0] for c in constant]
    order = {c: i for i, c in enumerate(header_columns())}
    assert fields == sorted(fields, key=order.__getitem__)  # in the order of the columns
    full, _ = header_feature_matrix(t.assign(bit_depth=pd.array(np.arange(len(t)) % 2,
                                                                 dtype="Int64")))
    np.testing.assert_array_equal(X.to_numpy(), full[info["features"]].to_numpy())


def test_within_pool_detects_planted_field_and_names_it():
    r = header_probe_within_pool(_table(), n_resamples=300, importance_repeats=3)
    ba = r.balanced_accuracy
    assert r.chance == 0.5
    assert ba["low"] > 0.75  # 90% aligned format field
    assert r.importances.iloc[0]["feature"] == "format"
    assert r.top_features(1) == ["format"]
    assert len(r.predictions) == 240 and set(r.predictions["fold"]) == set(range(5))


def test_within_pool_at_chance_without_signal():
    r = header_probe_within_pool(_table(signal=False, seed=3), n_resamples=300,
                                 importance_repeats=2)
    assert r.balanced_accuracy["low"] < 0.5 < r.balanced_accuracy["high"] + 0.05
    assert r.balanced_accuracy["estimate"] < 0.65


def test_group_aware_folds_keep_groups_together():
    t = _table()
    t["group"] = pd.array([f"g{i // 4}" for i in range(len(t))], dtype="string")
    r = header_probe_within_pool(t, n_resamples=100, importance_repeats=1)
    folds = r.predictions.assign(group=t["group"].to_numpy()).groupby("group")["fold"].nunique()
    assert folds.max() == 1
    assert "StratifiedGroupKFold" in r.params["cv"]


def test_cross_split_fit_train_score_test():
    t = _table()
    r = header_probe_cross_split(t[t.split == "train"], t[t.split == "test"], n_resamples=300,
                                 importance_repeats=2)
    assert r.n_rows == 60 and r.balanced_accuracy["estimate"] > 0.75
    assert r.importances.iloc[0]["feature"] == "format"


def test_single_class_is_input_error():
    t = _table()
    t["label"] = "a"
    with pytest.raises(InputError, match="two classes"):
        header_probe_within_pool(t)


def _importances_scoring_every_tree(model, X, y, names, repeats, seed, max_rows):
    """Permutation importances the plain way: every permuted copy scored with
    ``model.predict`` (the same sample and permutations as the probe draws)."""
    from splitscope.provenance.header_probe import field_of
    from splitscope.provenance.stats import balanced_accuracy_rows

    rng = np.random.default_rng(seed)
    if len(y) > max_rows:
        take = np.sort(rng.choice(len(y), size=max_rows, replace=False))
        X, y = X[take], y[take]
    fields = list(dict.fromkeys(field_of(n) for n in names))
    perms = [rng.permutation(len(y)) for _ in range(len(fields) * repeats)]
    base = balanced_accuracy_rows(y, model.predict(X))[0]
    out = []
    for fi, f in enumerate(fields):
        cols = [i for i, n in enumerate(names) if field_of(n) == f]
        drops = []
        for r in range(repeats):
            Xp = X.copy()
            Xp[:, cols] = X[perms[fi * repeats + r]][:, cols]
            drops.append(base - balanced_accuracy_rows(y, model.predict(Xp))[0])
        out.append((f, np.mean(drops), np.std(drops)))
    return pd.DataFrame(out, columns=["field", "importance", "std"])


@pytest.mark.slow
@pytest.mark.parametrize("classes", [2, 3])
def test_importances_equal_scoring_every_tree(classes):
    """Re-evaluating only the trees that use a field gives the importances of scoring every
    tree, with categorical columns (which the model moves first) and NaN present."""
    from splitscope.provenance.header_probe import _model, permutation_importances

    rng = np.random.default_rng(3)
    t = _table(n=600, seed=3)
    t["label"] = pd.array(rng.choice(list("abc")[:classes], 600), dtype="string")
    t["quality"] = pd.array(np.where(t["label"] == "a", 90, 75) + rng.integers(0, 3, 600),
                            dtype="Int64")
    t.loc[rng.random(600) < 0.1, "width"] = pd.NA
    X, info = header_feature_matrix(t)
    assert any(info["categorical"]) and not all(info["categorical"])
    Xv, y = X.to_numpy(np.float64), t["label"].to_numpy(str)
    model = _model(0, info["categorical"]).fit(Xv[:400], y[:400])
    fast = permutation_importances(model, Xv[400:], y[400:], info["features"], repeats=4,
                                   seed=5, max_rows=150)
    plain = _importances_scoring_every_tree(model, Xv[400:], y[400:], info["features"], 4, 5,
                                            150)
    pd.testing.assert_frame_equal(fast, plain.astype({"field": "string"}), check_exact=True)
    assert (fast["importance"] != 0).any()


@pytest.mark.slow
def test_folds_in_worker_processes_give_the_same_probe():
    a = header_probe_within_pool(_table(), n_resamples=200, importance_repeats=2, jobs=1)
    b = header_probe_within_pool(_table(), n_resamples=200, importance_repeats=2, jobs=2)
    assert a.balanced_accuracy == b.balanced_accuracy
    pd.testing.assert_frame_equal(a.importances, b.importances)
    pd.testing.assert_frame_equal(a.predictions, b.predictions)
    pd.testing.assert_frame_equal(a.single_field, b.single_field)


def test_quantization_tables_expand_per_row_as_their_text_says():
    from splitscope.provenance.header_probe import _expand_qtable

    rng = np.random.default_rng(2)
    texts = [",".join(map(str, rng.integers(1, 60, 64))) for _ in range(4)] + ["7,x,9", None]
    values = pd.Series(pd.array(rng.choice(np.array(texts, dtype=object), 300), dtype="string"),
                       index=np.arange(300) * 2)
    got = _expand_qtable(values, "jpeg_qt0")
    assert list(got.columns) == [f"jpeg_qt0[{k}]" for k in range(64)]
    assert got.index.equals(values.index)
    for i, text in zip(values.index, values):  # each row from its own text
        want = np.full(64, np.nan)
        if text is not pd.NA:
            nums = pd.to_numeric(pd.Series(text.split(",")), errors="coerce").to_numpy(float)
            want[:len(nums)] = nums
        np.testing.assert_array_equal(got.loc[i].to_numpy(), want)
    assert _expand_qtable(pd.Series(pd.array([None] * 3, dtype="string")), "q").shape == (3, 0)


def test_distinct_columns_keep_the_first_of_identical_ones():
    from splitscope.provenance.header_probe import distinct_columns

    a = np.array([1.0, np.nan, 3.0, 3.0, 2.0])
    X = np.column_stack([a, a.copy(), np.where(np.isnan(a), 0.0, a), a, a * 2, -a, a ** 2])
    # a * 2 and a ** 2 order the rows as a does: the same bins; -a reverses the order
    assert distinct_columns(X, [False] * 7).tolist() == [0, 2, 5]
    # the same values in a categorical and a numeric column are not the same column
    assert distinct_columns(X, [False, True] + [False] * 5).tolist() == [0, 1, 2, 5]


@pytest.mark.slow
@pytest.mark.parametrize("classes", [2, 3])
def test_a_fit_on_the_distinct_columns_is_the_fit_on_every_column(classes):
    """Duplicated columns (inside a field, across fields, a whole field, a categorical one)
    change neither the predictions nor the permutation importances: the fit on the distinct
    columns gives the trees of the fit on all of them."""
    from splitscope.provenance.header_probe import (
        _model,
        distinct_columns,
        fit_model,
        permutation_importances,
    )

    rng = np.random.default_rng(11)
    n = 700
    y = rng.choice(list("abc")[:classes], n)
    q = np.where(y == "a", 90, 75) + rng.integers(0, 4, n)
    noise = rng.integers(0, 50, n).astype(float)
    noise[rng.random(n) < 0.1] = np.nan
    fmt = (y == "b").astype(float) + (rng.random(n) < 0.2)
    X = np.column_stack([q, q // 2, q // 2, noise, q, noise, fmt, fmt, rng.normal(size=n)])
    names = ["quality", "jpeg_qt0[0]", "jpeg_qt0[1]", "jpeg_qt0[2]", "jpeg_qt1[0]",
             "jpeg_qt1[1]", "format", "copy_of_format", "width"]
    cat = [False] * 6 + [True, True, False]
    tr, te = np.arange(500), np.arange(500, n)
    assert distinct_columns(X[tr], cat).tolist() == [0, 1, 3, 6, 8]
    full = _model(0, cat).fit(X[tr], y[tr])
    model, cols = fit_model(X[tr], y[tr], cat, 0)
    np.testing.assert_array_equal(model.predict_proba(X[te][:, cols]), full.predict_proba(X[te]))
    kw = {"repeats": 4, "seed": 5, "max_rows": 150}
    fast = permutation_importances(model, X[te], y[te], names, columns=cols, **kw)
    plain = permutation_importances(full, X[te], y[te], names, **kw)
    pd.testing.assert_frame_equal(fast, plain, check_exact=True)
    assert fast.set_index("field").loc["copy_of_format", "importance"] == 0.0
    assert (fast["importance"] != 0).any()


@pytest.mark.slow
def test_columns_in_the_same_order_are_binned_alike_and_fitted_once():
    """A column that is a strictly increasing function of an earlier one (a quality factor and
    the coefficients it scales) has the same bin codes when there are few enough distinct
    values: it is fitted once, and the predictions (held-out values the fit never saw included)
    and the permutation importances are those of the fit on every column. With more distinct
    values than bins, the bin edges are quantiles and only identical columns are merged."""
    from splitscope.provenance.header_probe import (
        MAX_BINS,
        _model,
        distinct_columns,
        fit_model,
        permutation_importances,
    )

    rng = np.random.default_rng(5)
    n = 900
    y = rng.choice(list("abc"), n)
    q = np.where(y == "a", 60, 80) + rng.integers(0, 20, n).astype(float)
    q[rng.random(n) < 0.05] = np.nan
    scaled = np.ceil(q * 1.7) + 0.5  # strictly increasing on whole q: the same order
    cubed = q ** 3 + 7.0
    coarse = np.floor(q / 4)  # fewer values: a coarser partition, not the same column
    wide = rng.normal(size=n) + (y == "b")  # about n distinct values, more than MAX_BINS
    assert np.unique(wide).size > MAX_BINS
    X = np.column_stack([q, scaled, cubed, coarse, wide, np.exp(wide), wide.copy()])
    names = ["jpeg_quality", "jpeg_qt0[0]", "jpeg_qt0[1]", "jpeg_qt1[0]", "file_size",
             "bytes_per_pixel", "copy_of_file_size"]
    cat = [False] * 7
    tr, te = np.arange(600), np.arange(600, n)
    # held-out values no training row has (between two bins and below all): predicted by the
    # first column's thresholds, as the fit on every column does
    X[te[:20], 0:3] = [70.5, np.ceil(70.5 * 1.7) + 0.5, 70.5 ** 3 + 7.0]
    X[te[20:40], 0:3] = [41.0, np.ceil(41 * 1.7) + 0.5, 41.0 ** 3 + 7.0]
    assert distinct_columns(X[tr], cat).tolist() == [0, 3, 4, 5]
    full = _model(0, cat).fit(X[tr], y[tr])
    model, cols = fit_model(X[tr], y[tr], cat, 0)
    assert cols.tolist() == [0, 3, 4, 5]
    np.testing.assert_array_equal(model.predict_proba(X[te][:, cols]), full.predict_proba(X[te]))
    kw = {"repeats": 3, "seed": 2, "max_rows": 250}
    fast = permutation_importances(model, X[te], y[te], names, columns=cols, **kw)
    plain = permutation_importances(full, X[te], y[te], names, **kw)
    pd.testing.assert_frame_equal(fast, plain, check_exact=True)
    by_field = fast.set_index("field")["importance"]
    assert by_field["jpeg_quality"] > 0.1 and by_field["copy_of_file_size"] == 0.0


@pytest.mark.slow
def test_columns_without_a_value_on_the_training_rows_are_not_fitted():
    """A numeric column that is all NaN on the training rows made scikit-learn's binning fail;
    it is left out, which changes no tree (every row sits in its missing bin)."""
    from splitscope.provenance.header_probe import (
        distinct_columns,
        fit_model,
        permutation_importances,
    )

    rng = np.random.default_rng(3)
    n = 300
    y = rng.choice(["a", "b"], n)
    q = np.where(y == "a", 90.0, 75.0) + rng.integers(0, 6, n)
    empty = np.full(n, np.nan)
    later = np.where(np.arange(n) >= 250, 1.0, np.nan)  # a value only on the held-out rows
    X = np.column_stack([empty, q, later, rng.normal(size=n)])
    names = ["jpeg_comment", "jpeg_quality", "app_icc", "width"]
    cat = [True, False, False, False]
    tr, te = np.arange(250), np.arange(250, n)
    assert distinct_columns(X[tr], cat).tolist() == [1, 3]
    model, cols = fit_model(X[tr], y[tr], cat, 0)
    plain, plain_cols = fit_model(X[tr][:, [1, 3]], y[tr], [False, False], 0)
    np.testing.assert_array_equal(model.predict_proba(X[te][:, cols]),
                                  plain.predict_proba(X[te][:, [1, 3]][:, plain_cols]))
    imp = permutation_importances(model, X[te], y[te], names, columns=cols, repeats=3, seed=1)
    by_field = imp.set_index("field")["importance"]
    assert by_field["jpeg_comment"] == 0.0 and by_field["app_icc"] == 0.0
    assert by_field["jpeg_quality"] > 0.2


@pytest.mark.slow
def test_no_column_with_a_value_gives_the_prior_not_a_crash():
    from splitscope.provenance.header_probe import fit_model

    X = np.full((40, 2), np.nan)
    y = np.array(["a"] * 30 + ["b"] * 10)
    model, cols = fit_model(X, y, [False, True], 0)
    proba = model.predict_proba(np.column_stack([np.arange(40.0), np.ones(40)])[:, cols])
    np.testing.assert_allclose(proba, 0.5)  # balanced classes, no split


def test_within_pool_with_a_field_only_some_folds_have():
    """Small release, one field present on one row only: the fold that holds it out has no
    value of it on its training rows, which ran into scikit-learn's binning error before."""
    rng = np.random.default_rng(0)
    n = 20
    table = pd.DataFrame({
        "label": pd.array(rng.choice(["a", "b"], n), dtype="string"),
        "group": [f"g{i}" for i in range(n)],
        "jpeg_quality": pd.array([None] * (n - 1) + [90.0], dtype="Float64"),
        "file_size": pd.array(rng.integers(1000, 2000, n), dtype="Int64"),
    })
    res = header_probe_within_pool(table, folds=3, n_resamples=50, importance_repeats=2)
    assert res.n_rows == n and len(res.predictions) == n
    assert set(res.importances["feature"]) == {"jpeg_quality", "file_size"}
    only = header_probe_within_pool(table.drop(columns="file_size"), folds=3, n_resamples=50,
                                    importance_repeats=2)
    assert len(only.predictions) == n and 0.0 <= only.balanced_accuracy["estimate"] <= 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_single_field_accuracy_is_that_of_balanced_trees_on_the_labels(seed):
    """Label ranks and each split's weights computed once give the trees scikit-learn grows
    from the string labels with class_weight="balanced", fit by fit (a split may lack a
    class)."""
    from sklearn.tree import DecisionTreeClassifier

    from splitscope.provenance.header_probe import field_of, single_field_accuracy
    from splitscope.provenance.stats import balanced_accuracy_rows

    rng = np.random.default_rng(seed)
    n = 600
    y = rng.choice(np.array(["b", "a", "c", "z"]), n, p=[0.5, 0.3, 0.19, 0.01])
    X = np.column_stack([rng.normal(size=n) + (y == "a"), rng.integers(0, 5, n),
                         rng.normal(size=n), np.where(rng.random(n) < 0.2, np.nan, 1.0)])
    names = ["f[0]", "f[1]", "g", "h"]
    order = rng.permutation(n)
    splits = [(np.setdiff1d(order, order[i::3]), np.sort(order[i::3])) for i in range(3)]
    rare = np.flatnonzero(y == "z")
    splits[0] = (np.setdiff1d(splits[0][0], rare), np.union1d(splits[0][1], rare))  # no "z"
    ours = single_field_accuracy(X, y, names, splits, seed=seed)
    scored = np.concatenate([te for _, te in splits])
    expected = {}
    for f in dict.fromkeys(field_of(c) for c in names):
        cols = [i for i, c in enumerate(names) if field_of(c) == f]
        pred = np.empty(n, dtype=object)
        for tr, te in splits:
            tree = DecisionTreeClassifier(max_leaf_nodes=8, class_weight="balanced",
                                          random_state=seed).fit(X[np.ix_(tr, cols)], y[tr])
            pred[te] = tree.predict(X[np.ix_(te, cols)])
        expected[f] = float(balanced_accuracy_rows(y[scored], pred[scored].astype(str))[0])
    assert dict(zip(ours["feature"], ours["balanced_accuracy"])) == expected
