"""Header-only probe (METHODS §4.2): can the label be predicted from what a file's header says,
without its pixels?

Gradient-boosted trees (scikit-learn ``HistGradientBoostingClassifier``, seeded, balanced class
weights) on header features only, evaluated two ways:

(a) *within pool*: stratified 5-fold cross-validation over the pooled rows (group-aware,
    ``StratifiedGroupKFold``, when group keys are known), out-of-fold balanced accuracy;
(b) *cross split*: fit on the reference side (train), score the query side (test).

Both come with a percentile-bootstrap 95% interval over cases and permutation importances on
held-out rows (scoring balanced accuracy) that name the header fields carrying the signal.
High (a) means a construction shortcut; (a) ≫ (b) means pooling and re-splitting would reward it.
Chance is 1 / number of classes.

Features are the header columns (:data:`splitscope.features.header.HEADER_COLUMNS`): numbers as
they are, booleans as 0/1, strings ordinal-encoded (a native categorical feature when it has at
most 250 values), JPEG quantization tables expanded into one column per coefficient
(``jpeg_qt0[0]`` … ``jpeg_qt0[63]``). Constant and ID-like columns (a distinct string on nearly
every row) are dropped and listed. Pixel-derived columns (hashes, digests, thumbnails) are never
used; name-derived fields (``extension``, ``extension_mismatch``) are left out unless asked for,
since they describe the file name rather than the header.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.options import RunOptions
from splitscope.provenance.binning import one_sort_per_column
from splitscope.provenance.options import ProvenanceOptions
from splitscope.provenance.stats import (
    PARALLEL_CELLS,
    FoldTasks,
    balanced_accuracy_rows,
    bootstrap_balanced_accuracy,
    fit_sample,
    run_steps,
    shared_empty,
    single_threaded,
    stable_order,
)

__all__ = [
    "FIT_MAX_ROWS",
    "NAME_DERIVED",
    "PIXEL_DERIVED",
    "FeatureMatrix",
    "PoolMatrix",
    "ProbeResult",
    "cross_split_steps",
    "field_of",
    "header_columns",
    "header_feature_matrix",
    "header_probe_cross_split",
    "header_probe_within_pool",
    "permutation_importances",
    "single_field_accuracy",
    "within_pool_steps",
]

#: Columns derived from decoded pixels or row identity (a patient's DICOM PatientID digest is a
#: group key, METHODS §3.6); never header-probe inputs.
PIXEL_DERIVED = frozenset({
    "sha256", "pixel_xxh128", "phash", "dhash", "pdq", "flat", "thumb_index", "has_thumb",
    "status", "error", "row", "path", "file", "basename", "corpus", "split", "split_released",
    "label", "source", "group", "frame", "dicom_PatientID_digest",
})
#: Fields that describe the file name, not the header bytes.
NAME_DERIVED = frozenset({"extension", "extension_mismatch"})
_MAX_CATEGORIES = 250
#: At most this many rows fit one model of the probes and of the partition classifier (a
#: within-pool fold's training part, the cross split's training side); above it a seeded
#: sample stratified by class and spread over groups
#: (:func:`splitscope.provenance.stats.fit_sample`), fitted with early stopping, while every
#: held-out row is still scored (METHODS §4.7). Fitting grows with the rows and the
#: estimate's interval comes from the scored rows, so the cap makes the fits a fixed cost at
#: any size while the scan grows with the files. 20,000 is the smallest round cap at which
#: every estimate on the generated 28k release fell inside its uncapped interval (10,000
#: missed one of six); the real releases audited so far (Kermany 4,672 and the mixed 7k set
#: 5,600 training rows per fold) are far below it.
FIT_MAX_ROWS = 20_000

#: builds ``(X, info)`` from a row table, as :func:`header_feature_matrix` does: the probe's
#: engine runs on any such matrix (header fields here, image statistics in
#: :mod:`splitscope.provenance.image_stats_probe`)
FeatureMatrix = Callable[[pd.DataFrame], tuple[pd.DataFrame, dict[str, Any]]]


def header_columns() -> list[str]:
    """The header feature names the probe may use (from ``splitscope.features.header``)."""
    try:
        from splitscope.features.header import HEADER_COLUMNS
    except ImportError:  # pragma: no cover - the features layer is part of the package
        return []
    return [c for c in HEADER_COLUMNS if c not in PIXEL_DERIVED]


def _expand_qtable(values: pd.Series, name: str) -> pd.DataFrame:
    """``"a,b,c,…"`` (64 coefficients) → 64 numeric columns ``name[k]``. A release holds few
    distinct tables, so each distinct text is split once and the rows take their table's
    numbers (NaN for a row without one)."""
    s = values.astype("string")
    if s.isna().all():
        return pd.DataFrame(index=values.index)
    codes, uniques = pd.factorize(s)
    parts = pd.Series(uniques, dtype="string").str.split(",", expand=True)
    parts = parts.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    table = np.vstack([parts, np.full((1, parts.shape[1]), np.nan)])  # row -1: no table
    return pd.DataFrame(table[codes], index=values.index,
                        columns=[f"{name}[{k}]" for k in range(parts.shape[1])])


def header_feature_matrix(
    table: pd.DataFrame,
    columns: list[str] | None = None,
    *,
    include_name_fields: bool = False,
    expand_qtables: bool = True,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Numeric feature matrix of the header columns of ``table``.

    Parameters
    ----------
    table : DataFrame
        Rows with header columns (e.g. ``Scan.rows()``).
    columns : list of str, optional
        Header columns to use; default every header column present in ``table``.
    include_name_fields : bool
        Also use ``extension`` / ``extension_mismatch``.
    expand_qtables : bool
        One column per JPEG quantization coefficient (else the table as one categorical value).

    Returns
    -------
    X : DataFrame
        float64 (NaN where missing), one column per feature, index of ``table``.
    info : dict
        ``features``, ``categorical`` (bool per feature), ``dropped`` {column: reason}.
    """
    if columns is None:
        columns = [c for c in header_columns() if c in table.columns]
        if not columns:
            raise InputError(
                "no header columns in the table; run a scan first (splitscope scan) or pass "
                f"columns=…; found: {', '.join(map(str, table.columns))}")
    else:
        bad = [c for c in columns if c in PIXEL_DERIVED]
        if bad:
            raise InputError(f"column(s) {', '.join(bad)} are pixel- or identity-derived and "
                             "cannot be header-probe features")
        missing = [c for c in columns if c not in table.columns]
        if missing:
            raise InputError(f"header column(s) {', '.join(missing)} missing; found: "
                             f"{', '.join(map(str, table.columns))}")
    dropped: dict[str, str] = {}
    blocks: list[pd.DataFrame] = []
    categorical: list[bool] = []
    n = len(table)
    for col in columns:
        if col in NAME_DERIVED and not include_name_fields:
            dropped[col] = "name-derived (include_name_fields=False)"
            continue
        values = table[col]
        if expand_qtables and col.startswith("jpeg_qt") and col[7:].isdigit():
            block = _expand_qtable(values, col)
            blocks.append(block)
            categorical.extend([False] * block.shape[1])
            continue
        if pd.api.types.is_bool_dtype(values.dtype):
            blocks.append(values.astype("Float64").astype("float64").to_frame(col))
            categorical.append(False)
            continue
        if pd.api.types.is_numeric_dtype(values.dtype):
            blocks.append(values.astype("Float64").astype("float64").to_frame(col))
            categorical.append(False)
            continue
        s = values.astype("string")
        non_null = int(s.notna().sum())
        uniq = int(s.nunique())
        if non_null >= 20 and uniq >= 0.9 * non_null:
            dropped[col] = f"ID-like ({uniq} distinct values in {non_null} rows)"
            continue
        # booleans that arrived as strings/objects
        lowered = s.str.lower()
        if set(lowered.dropna().unique()) <= {"true", "false"}:
            blocks.append((lowered == "true").astype("Float64").where(s.notna())
                          .astype("float64").to_frame(col))
            categorical.append(False)
            continue
        codes, _ = pd.factorize(s, sort=True)
        code = pd.Series(codes, index=table.index, dtype="float64").where(codes >= 0)
        blocks.append(code.to_frame(col))
        categorical.append(uniq <= _MAX_CATEGORIES)
    # constant columns leave each block before the blocks are joined, so that the matrix is
    # built once (a float64 copy of every row per column: 8 MB a column at a million rows)
    kept: list[pd.DataFrame] = []
    kept_categorical: list[bool] = []
    constant: list[str] = []
    at = 0
    for block in blocks:
        varies = [block[c].nunique(dropna=False) > 1 for c in block.columns]
        constant.extend(c for c, v in zip(block.columns, varies) if not v)
        kept_categorical.extend(k for k, v in zip(categorical[at:at + len(varies)], varies) if v)
        at += len(varies)
        if all(varies):
            kept.append(block)
        elif any(varies):
            kept.append(block.loc[:, varies])
    blocks.clear()
    dropped.update(dict.fromkeys(constant, "constant"))
    X = pd.concat(kept, axis=1) if kept else pd.DataFrame(index=table.index)
    categorical = kept_categorical
    if n and X.shape[1] == 0:
        dropped["*"] = "no usable header feature"
    return X, {"features": list(X.columns), "categorical": categorical, "dropped": dropped}


@dataclass
class ProbeResult:
    """One header-probe evaluation.

    ``balanced_accuracy`` has ``estimate``, ``low``, ``high`` and ``kind`` of the interval;
    ``chance`` = 1 / n_classes; ``importances`` (feature = header field, importance, std, rank)
    are permutation importances per header field on held-out rows (mean decrease in balanced
    accuracy, averaged over folds); ``single_field`` (feature, balanced_accuracy) is each
    field's own held-out balanced accuracy with a small tree (8 leaves), which still names a
    field whose information another field duplicates; ``predictions`` has one
    line per scored row (``row``, ``path``, ``label``, ``predicted``, ``fold``).
    """

    kind: str  # "within pool" | "cross split"
    balanced_accuracy: dict[str, Any]
    chance: float
    n_rows: int
    classes: list[str]
    class_support: dict[str, int]
    importances: pd.DataFrame
    predictions: pd.DataFrame
    features: list[str]
    dropped: dict[str, str]
    params: dict[str, Any] = field(default_factory=dict)
    single_field: pd.DataFrame | None = None

    def top_features(self, k: int = 5) -> list[str]:
        imp = self.importances
        return imp.loc[imp["importance"] > 0, "feature"].head(k).astype(str).tolist()


#: bins of the probe's model per numeric column (scikit-learn's default, set explicitly because
#: :func:`distinct_columns` relies on it)
MAX_BINS = 255
#: rows scikit-learn's bin mapper takes its bin edges from (a random sample of them above), so
#: the rows up to which every training value is its own bin when there are few enough
BIN_SAMPLE_ROWS = 200_000


def _model(seed: int, categorical: list[bool], early_stopping: bool | str = "auto"):
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(
        random_state=seed, class_weight="balanced", max_bins=MAX_BINS,
        early_stopping=early_stopping,
        categorical_features=np.asarray(categorical, bool) if any(categorical) else None)


def distinct_columns(X: np.ndarray, categorical: list[bool]) -> np.ndarray:
    """Positions of the first of each set of columns of ``X`` that the model bins alike (same
    categorical flag), ascending; a column with no value (all NaN) is left out.

    Binned alike: the same missing rows and either the same order of values (one column a
    strictly increasing function of the other, e.g. quantization coefficients scaled by one
    quality factor) when both have at most :data:`MAX_BINS` distinct values (and ``X`` at most
    :data:`BIN_SAMPLE_ROWS` rows), or the same values. A histogram gradient-boosting fit reads
    only each column's bin codes, and with at most ``MAX_BINS`` distinct values every value is
    its own bin, numbered in increasing order, so such columns have the same codes; with more
    values (or rows) the bin edges are quantiles (of a sample), and only identical values are
    taken as the same column. Columns with the same codes have
    identical histograms at every node, so identical split gains, and the first of them always
    wins the tie (scikit-learn keeps a later feature only for a strictly larger gain). A fit on
    these columns is therefore the fit on all of them, tree for tree (its thresholds are those
    of the first column), and gives the same predictions and permutation importances, while
    each fit builds fewer histograms (144 columns → 12 on the mixed 7k set, a fit 3.5× faster).
    A column with no value on these rows puts every row in its missing bin, so no tree can
    split on it; left in, scikit-learn's binning of such a numeric column fails (a fold whose
    training rows all lack a field)."""
    X = np.asarray(X, dtype=np.float64)
    by_order = len(X) <= BIN_SAMPLE_ROWS
    seen: set[tuple] = set()
    keep = []
    for j in range(X.shape[1]):
        column = X[:, j]
        missing = np.isnan(column)
        if missing.all():
            continue
        values, codes = np.unique(column[~missing], return_inverse=True)
        if by_order and len(values) <= MAX_BINS:  # the bin codes themselves
            binned = np.full(len(column), -1, dtype=np.int32)
            binned[~missing] = codes
            key: tuple = (bool(categorical[j]), "codes", binned.tobytes())
        else:
            key = (bool(categorical[j]), "values",
                   np.where(missing, np.inf, column).tobytes() + missing.tobytes())
        if key not in seen:
            seen.add(key)
            keep.append(j)
    return np.asarray(keep, dtype=np.intp)


def fit_model(X: np.ndarray, y: np.ndarray, categorical: list[bool], seed: int,
              early_stopping: bool | str = "auto"):
    """The probe's model fit on ``X`` (rows × all columns): on its :func:`distinct_columns`,
    which gives the trees of fitting every column. Returns the model and the positions of
    the columns it reads (predict with ``X[:, columns]``). ``early_stopping`` is
    scikit-learn's (``True`` for a fit on a sample above the row cap, METHODS §4.7; the
    default ``"auto"`` is the unsampled fit's, which stops early above 10,000 rows).

    When no column has a value on these rows, a constant column is fitted in place of the
    first: no tree can split on it, so the model predicts the classes' balanced prior (and no
    field has importance)."""
    columns = distinct_columns(X, categorical)
    fitted = X[:, columns]
    flags = [bool(categorical[j]) for j in columns]
    if not len(columns) and X.shape[1]:
        columns, fitted, flags = np.zeros(1, dtype=np.intp), np.zeros((len(X), 1)), [False]
    model = _model(seed, flags, early_stopping)
    with warnings.catch_warnings(), one_sort_per_column():
        warnings.simplefilter("ignore")
        model.fit(fitted, y)
    return model, columns


def _labels(table: pd.DataFrame, label: str) -> pd.Series:
    if label not in table.columns:
        raise InputError(f"no label column `{label}`; found: {', '.join(map(str, table.columns))}")
    return table[label].astype("string")


def field_of(feature: str) -> str:
    """The header field a feature column comes from (``jpeg_qt0[17]`` → ``jpeg_qt0``)."""
    return feature.split("[", 1)[0]


class _TreeOutputs:
    """A fitted ``HistGradientBoostingClassifier`` evaluated tree by tree.

    Each tree is scored with scikit-learn's own tree predictor (the one ``predict`` loops
    over), and each tree's raw output is kept, so class predictions are the model's own
    (tested). A permuted field is then scored by re-evaluating only the trees that split on
    one of its columns: the other trees' outputs cannot change. The model's column-wise
    preprocessing (categorical columns encoded and moved first) is applied once;
    :meth:`permuted_raw` takes raw column positions and maps them.
    """

    def __init__(self, model, X: np.ndarray, threads: int):
        self.model = model
        self.threads = max(1, int(threads))
        self.X = np.ascontiguousarray(model._preprocess_X(X, reset=False))
        self.bitsets, self.index_map = model._bin_mapper.make_known_categories_bitsets()
        self.position = _preprocessed_positions(model, X.shape[1])
        self.trees = [(k, t) for it in model._predictors for k, t in enumerate(it)]
        self.columns = [frozenset(t.nodes["feature_idx"][~t.nodes["is_leaf"].astype(bool)]
                                  .tolist()) for _, t in self.trees]
        self.per_tree = np.stack([self._tree(t, self.X) for _, t in self.trees]) \
            if self.trees else np.zeros((0, len(X)))
        self.base_raw = self._sum(self.per_tree, range(len(self.trees)), len(X))

    def _tree(self, tree, X: np.ndarray) -> np.ndarray:
        return tree.predict(X, known_cat_bitsets=self.bitsets, f_idx_map=self.index_map,
                            n_threads=self.threads)

    def _sum(self, outputs, which, n: int) -> np.ndarray:
        k = self.model.n_trees_per_iteration_
        raw = np.zeros((n, k)) + self.model._baseline_prediction
        for row, t in zip(outputs, which):
            raw[:, self.trees[t][0]] += row
        return raw

    def predict_from_raw(self, raw: np.ndarray) -> np.ndarray:
        classes = self.model.classes_
        if raw.shape[1] == 1:  # binary log loss: class 1 when the raw score is positive
            return classes[(raw[:, 0] > 0).astype(np.intp)]
        return classes[np.argmax(raw, axis=1)]

    def trees_using(self, columns, raw: bool = False) -> list[int]:
        """Trees that split on one of ``columns`` (preprocessed positions, or raw ones)."""
        if raw:
            columns = self.position[np.asarray(columns, dtype=np.intp)]
        cols = set(np.asarray(columns).tolist())
        return [t for t, used in enumerate(self.columns) if used & cols]

    def permuted_raw(self, columns: list[int], perms: np.ndarray) -> np.ndarray:
        """Raw scores (len(perms), n, k) with ``columns`` permuted together by each row
        permutation in ``perms``; only the trees that split on those columns are evaluated."""
        n = self.X.shape[0]
        columns = self.position[np.asarray(columns, dtype=np.intp)]
        which = self.trees_using(columns)
        raw = np.broadcast_to(self.base_raw, (len(perms), n, self.base_raw.shape[1])).copy()
        if not which:
            return raw
        stacked = np.tile(self.X, (len(perms), 1))
        for b, perm in enumerate(perms):
            stacked[b * n:(b + 1) * n, columns] = self.X[perm][:, columns]
        for t in which:
            k, tree = self.trees[t]
            raw[:, :, k] += (self._tree(tree, stacked) - np.tile(self.per_tree[t], len(perms))
                             ).reshape(len(perms), n)
        return raw


def _preprocessed_positions(model, n_columns: int) -> np.ndarray:
    """Position of each raw column in the model's preprocessed matrix (its column
    transformer concatenates the outputs of its transformers in order)."""
    pre = getattr(model, "_preprocessor", None)
    if pre is None:
        return np.arange(n_columns)
    order = []
    for _, trans, cols in pre.transformers_:
        if isinstance(trans, str) and trans == "drop":
            continue
        cols = np.asarray(cols)
        order.extend((np.flatnonzero(cols) if cols.dtype == bool else cols).tolist())
    if sorted(order) != list(range(n_columns)):
        raise AttributeError("unexpected column layout of the model's preprocessing")
    position = np.empty(n_columns, dtype=np.intp)
    position[np.asarray(order, dtype=np.intp)] = np.arange(n_columns)
    return position


def permutation_importances(model, X: np.ndarray, y: np.ndarray, names: list[str], *,
                            repeats: int = 5, seed: int = RunOptions.seed,
                            max_rows: int = 2000,
                            chunk_rows: int = 200_000, threads: int = 1,
                            columns: np.ndarray | None = None) -> pd.DataFrame:
    """Permutation importance per header *field*, on held-out rows.

    For each field (all columns of a field, e.g. the 64 coefficients of one quantization table,
    are permuted together with one row permutation) and each of ``repeats`` seeded
    permutations, the drop in balanced accuracy from the unpermuted score; mean and standard
    deviation over repeats. Rows beyond ``max_rows`` are left out by a seeded sample.

    Each tree's output on the rows is kept and each permuted copy is scored by
    re-evaluating only the trees that split on the field (see :class:`_TreeOutputs`): the
    predictions, hence the importances, are those of scoring every tree on the permuted raw
    rows. A field that no tree splits on has importance exactly 0. The permutations drawn
    are the same as scoring every field in turn, so the result does not depend on that
    shortcut. ``threads`` is the OpenMP thread count of the tree evaluation. ``columns``: the
    columns of ``X`` (one per name) that the model reads, in its order (default all; see
    :func:`fit_model`); a field none of whose columns it reads has importance exactly 0.
    """
    rng = np.random.default_rng(seed)
    if len(y) > max_rows:
        take = np.sort(rng.choice(len(y), size=max_rows, replace=False))
        X, y = X[take], y[take]
    fields = list(dict.fromkeys(field_of(n) for n in names))
    if columns is not None:  # the model's own matrix, and each name's position in it
        at = {int(c): i for i, c in enumerate(columns)}
        X = X[:, np.asarray(columns, dtype=np.intp)]
        cols = {f: [at[i] for i, n in enumerate(names) if field_of(n) == f and i in at]
                for f in fields}
    else:
        cols = {f: [i for i, n in enumerate(names) if field_of(n) == f] for f in fields}
    if not fields or np.unique(y).size < 2:
        return pd.DataFrame({"field": pd.array(fields, dtype="string"),
                             "importance": np.nan, "std": np.nan})
    n = len(y)
    perms = np.stack([rng.permutation(n) for _ in range(len(fields) * repeats)])
    try:
        trees = _TreeOutputs(model, X, threads)
    except AttributeError:  # a model without scikit-learn's tree internals: score it whole
        trees = None
    if trees is None:
        base = float(balanced_accuracy_rows(y, model.predict(X))[0])
    else:
        base = float(balanced_accuracy_rows(y, trees.predict_from_raw(trees.base_raw))[0])
    scores = np.full(len(fields) * repeats, base)
    per_call = max(1, chunk_rows // max(n, 1))
    for fi, f in enumerate(fields):
        c = cols[f]
        if not c or (trees is not None and not trees.trees_using(c, raw=True)):
            continue  # no tree reads this field: permuting it changes nothing
        for start in range(0, repeats, per_call):
            reps = range(start, min(start + per_call, repeats))
            batch = perms[[fi * repeats + r for r in reps]]
            if trees is not None:
                raw = trees.permuted_raw(c, batch)
                pred = np.stack([trees.predict_from_raw(r) for r in raw])
            else:
                stacked = np.tile(X, (len(batch), 1))
                for b, perm in enumerate(batch):
                    stacked[b * n:(b + 1) * n, c] = X[perm][:, c]
                pred = model.predict(stacked).reshape(len(batch), n)
            scores[[fi * repeats + r for r in reps]] = balanced_accuracy_rows(y, pred)
    drops = base - scores.reshape(len(fields), repeats)
    return pd.DataFrame({"field": pd.array(fields, dtype="string"),
                         "importance": drops.mean(axis=1), "std": drops.std(axis=1)})


def single_field_accuracy(X: np.ndarray, y: np.ndarray, names: list[str],
                          splits: list[tuple[np.ndarray, np.ndarray]],
                          seed: int = RunOptions.seed) -> pd.DataFrame:
    """Held-out balanced accuracy of each header field alone (all its columns), with a
    decision tree of at most 8 leaves (balanced class weights; NaN handled by the tree) over
    the given (train, test) index splits, predictions pooled over the splits. ``X``: an array
    or a :class:`PoolMatrix`."""
    from sklearn.tree import DecisionTreeClassifier
    from sklearn.utils.class_weight import compute_sample_weight

    fields = list(dict.fromkeys(field_of(n) for n in names))
    scored = np.concatenate([te for _, te in splits]) if splits else np.array([], int)
    # the labels' ranks (what scikit-learn encodes them to, in the same order) and each
    # split's balanced class weights (what class_weight="balanced" gives the fit) once, rather
    # than strings sorted and weights counted again by every field's fit: the same trees
    codes = np.unique(np.asarray(y), return_inverse=True)[1].reshape(-1)
    weights = [compute_sample_weight("balanced", codes[tr]) for tr, _ in splits]
    out = []
    for f in fields:
        cols = [i for i, n in enumerate(names) if field_of(n) == f]
        pred = np.full(len(y), -1, dtype=np.int64)
        for (tr, te), w in zip(splits, weights):
            tree = DecisionTreeClassifier(max_leaf_nodes=8, random_state=seed)
            tree.fit(_take(X, tr, cols), codes[tr], sample_weight=w)
            pred[te] = tree.predict(_take(X, te, cols))
        out.append(float(balanced_accuracy_rows(codes[scored], pred[scored])[0]))
    t = pd.DataFrame({"feature": pd.array(fields, dtype="string"),
                      "balanced_accuracy": np.asarray(out, dtype=float)})
    return t.sort_values(["balanced_accuracy", "feature"], ascending=[False, True],
                         kind="stable").reset_index(drop=True)


def _importance_table(parts: list[pd.DataFrame]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame({"feature": pd.array([], dtype="string"), "importance": [],
                             "std": [], "rank": []})
    allp = pd.concat(parts, ignore_index=True)
    t = allp.groupby("field", sort=True).agg(importance=("importance", "mean"),
                                             std=("std", "mean")).reset_index()
    t = t.rename(columns={"field": "feature"})
    t["feature"] = t["feature"].astype("string")
    t = t.sort_values(["importance", "feature"], ascending=[False, True], kind="stable")
    t["rank"] = np.arange(1, len(t) + 1)
    return t.reset_index(drop=True)


def _frame_out(table: pd.DataFrame, y: np.ndarray, pred: np.ndarray, fold: np.ndarray,
               order: np.ndarray) -> pd.DataFrame:
    """The probe's row table, back in the order its rows were given (``order``: the positions
    :func:`~splitscope.provenance.stats.stable_order` gave ``table``)."""
    out = pd.DataFrame({
        "row": table["row"].to_numpy(dtype=np.int64) if "row" in table else np.arange(len(table)),
        "path": (table["path"] if "path" in table else pd.Series(pd.NA, index=table.index))
        .astype("string").to_numpy(),
        "label": pd.array(y, dtype="string"),
        "predicted": pd.array(pred, dtype="string"),
        "fold": fold,
    })
    return out.iloc[np.argsort(order)].reset_index(drop=True)


def _check_classes(y: pd.Series, where: str) -> None:
    if y.isna().any():
        raise InputError(f"{int(y.isna().sum())} row(s) without a label in {where}; "
                         "select labelled rows")
    if y.nunique() < 2:
        raise InputError(f"{where} has fewer than two classes ({sorted(y.unique().tolist())})")


#: the width at which a narrow feature matrix is counted when choosing worker processes for the
#: folds (:func:`splitscope.provenance.stats.fold_jobs`)
MIN_COST_COLUMNS = 32


def header_probe_within_pool(
    table: pd.DataFrame,
    *,
    label: str = "label",
    group: str | None = "group",
    folds: int = ProvenanceOptions.folds,
    seed: int = RunOptions.seed,
    n_resamples: int = RunOptions.resamples,
    importance_repeats: int = 5,
    importance_max_rows: int = 2000,
    fit_max_rows: int | None = FIT_MAX_ROWS,
    columns: list[str] | None = None,
    include_name_fields: bool = False,
    threads: int | None = 1,
    jobs: int | None = None,
    feature_matrix: FeatureMatrix | None = None,
) -> ProbeResult:
    """(a) Within pool: out-of-fold balanced accuracy of the header-only model (METHODS §4.2).

    Folds are ``StratifiedGroupKFold`` (shuffled, seeded) when ``group`` is a column with at
    least one known key (rows without a key are groups of one), else ``StratifiedKFold``.
    Permutation importances are computed on each fold's held-out rows (at most
    ``importance_max_rows``, a seeded sample) and averaged over folds. Each fold's model is fit
    on at most ``fit_max_rows`` of its training rows (:func:`~splitscope.provenance.stats.
    fit_sample`, seeded with ``seed`` + fold; ``None``: all), and scores all its held-out rows;
    the rows fitted per fold are in ``params["fit_rows"]``. ``threads`` bounds
    the OpenMP/BLAS pools during the fits (see :func:`splitscope.provenance.stats.single_threaded`).
    The folds run in ``jobs`` worker processes (default: one per core once the pool is large
    enough to pay for them, see :func:`splitscope.provenance.stats.fold_jobs`); every fold is
    seeded on its own, so the result does not depend on ``jobs``. ``feature_matrix`` replaces
    the header features by another matrix builder (``columns`` and ``include_name_fields``
    then do not apply).
    """
    with single_threaded(threads):
        return run_steps([within_pool_steps(
            table, label=label, group=group, folds=folds, seed=seed, n_resamples=n_resamples,
            importance_repeats=importance_repeats, importance_max_rows=importance_max_rows,
            fit_max_rows=fit_max_rows, columns=columns, include_name_fields=include_name_fields,
            jobs=jobs, feature_matrix=feature_matrix)])[0]


def _header_matrix(columns: list[str] | None, include_name_fields: bool) -> FeatureMatrix:
    def build(table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
        return header_feature_matrix(table, columns, include_name_fields=include_name_fields)

    return build


def _fold_weight(rows: int, columns: int, fits: int = 5) -> float:
    """The cost of a probe's fits on ``rows`` (five folds, or one cross-split fit) as a share
    of what pays for worker processes (:func:`~splitscope.provenance.stats.fold_jobs`: five
    folds of ``PARALLEL_CELLS`` cells): a boosted fit and its importances cost about as much
    with a few columns as with :data:`MIN_COST_COLUMNS` (binning and per-tree predictions
    dominate), so a narrow matrix such as the image statistics is counted at that width."""
    return rows * max(columns, MIN_COST_COLUMNS) / PARALLEL_CELLS * fits / 5


class PoolMatrix:
    """A feature matrix kept compact while the folds run, given back as float64 rows.

    The within-pool probe scores every pool row, one fold at a time, so the matrix of every
    row is held (and mapped by each fold worker) while the folds run. Columns whose values
    float32 holds exactly (integers below 2^24, quantization coefficients, category codes,
    flags, NaN) are stored as float32, the others as float64; :meth:`rows` gives the float64
    values of any rows and columns bit for bit, so every fit sees the matrix it saw before.
    """

    def __init__(self, X: pd.DataFrame | np.ndarray):
        frame = isinstance(X, pd.DataFrame)
        n, d = X.shape
        narrow, wide = [], []
        for j in range(d):  # a column at a time: no float64 copy of the whole matrix
            col = (X.iloc[:, j].to_numpy(np.float64) if frame
                   else np.asarray(X[:, j], np.float64))
            small = col.astype(np.float32)
            same = small.astype(np.float64) == col
            exact = bool(np.all(same | (np.isnan(col) & np.isnan(small))))
            (narrow if exact else wide).append((j, small if exact else col))
        self.shape = (n, d)
        #: (column positions, values): float32 columns, float64 columns
        self.narrow = _stack(narrow, n, np.float32)
        self.wide = _stack(wide, n, np.float64)

    def rows(self, index: np.ndarray, columns: np.ndarray | None = None) -> np.ndarray:
        """float64 values of ``index`` (positions) × ``columns`` (default all), in order."""
        index = np.asarray(index)
        cols = np.arange(self.shape[1]) if columns is None else np.asarray(columns, np.intp)
        out = np.empty((len(index), len(cols)), dtype=np.float64)
        for at, values in (self.narrow, self.wide):
            where = np.flatnonzero(np.isin(cols, at))
            if not where.size:
                continue
            pos = np.searchsorted(at, cols[where])
            out[:, where] = (values[index] if np.array_equal(pos, np.arange(len(at)))
                             else values[np.ix_(index, pos)])
        return out


def _stack(parts: list[tuple[int, np.ndarray]], n: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    at = np.asarray([j for j, _ in parts], dtype=np.intp)
    values = shared_empty((n, len(parts)), dtype)  # the fold workers map it, not copy it
    for i, (_, col) in enumerate(parts):
        values[:, i] = col
    return at, values


def _take(X, index: np.ndarray, columns: list[int] | None = None) -> np.ndarray:
    """float64 rows ``index`` (and ``columns``) of an array or a :class:`PoolMatrix`."""
    if not isinstance(X, np.ndarray):  # a PoolMatrix
        return X.rows(index, columns)
    return X[index] if columns is None else X[np.ix_(index, columns)]


def _fit_fold(X, y, train, test, names, categorical, seed, importance_seed, repeats,
              max_rows, sampled=False) -> tuple[np.ndarray, pd.DataFrame]:
    """One within-pool fold: fit on ``train`` (with early stopping when it is a sample above
    the row cap), predict ``test``, permutation importances on ``test``. ``X``: an array or
    a :class:`PoolMatrix`, of which only these rows become float64."""
    model, columns = fit_model(_take(X, train), y[train], categorical, seed,
                               True if sampled else "auto")
    held_out = _take(X, test)
    return model.predict(held_out[:, columns]), permutation_importances(
        model, held_out, y[test], names, repeats=repeats, seed=importance_seed,
        max_rows=max_rows, columns=columns)


def within_pool_steps(table: pd.DataFrame, *, label: str = "label", group: str | None = "group",
                      folds: int = ProvenanceOptions.folds, seed: int = RunOptions.seed,
                      n_resamples: int = RunOptions.resamples,
                      importance_repeats: int = 5, importance_max_rows: int = 2000,
                      fit_max_rows: int | None = FIT_MAX_ROWS, columns: list[str] | None = None,
                      include_name_fields: bool = False, jobs: int | None = None,
                      feature_matrix: FeatureMatrix | None = None):
    """:func:`header_probe_within_pool` as a step generator (:func:`~splitscope.provenance.
    stats.run_steps`), so that its folds can share the worker processes with other probes'."""
    from sklearn.model_selection import StratifiedKFold

    from splitscope.provenance.folds import GroupFolds

    matrix = feature_matrix or _header_matrix(columns, include_name_fields)
    order = stable_order(table)  # folds, samples and resamples do not follow the listing
    table = table.iloc[order]
    y = _labels(table, label)
    _check_classes(y, "the pool")
    X, info = matrix(table)
    names = info["features"]
    classes = sorted(y.unique().tolist())
    support = {c: int((y == c).sum()) for c in classes}
    k = int(min(folds, min(support.values())))
    if k < 2:
        raise InputError(f"a class has {min(support.values())} row(s); within-pool CV needs ≥ 2")
    yv = y.to_numpy(dtype=object).astype(str)
    grouped = group is not None and group in table.columns and table[group].notna().any()
    if grouped:
        g = table[group].astype("string").fillna("\0row:" + pd.Series(
            np.arange(len(table)), index=table.index).astype(str))
        gcodes = pd.factorize(g)[0]
        cv = GroupFolds(n_splits=k, shuffle=True, random_state=seed)
        splits = list(cv.split(np.zeros(len(yv)), yv, gcodes))
    else:
        gcodes = None
        cv = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
        splits = list(cv.split(np.zeros(len(yv)), yv))
    # each fold's model is fit on at most fit_max_rows of its training rows; all held-out
    # rows are scored
    available = [len(tr) for tr, _ in splits]
    splits = [(tr[fit_sample(yv[tr], None if gcodes is None else gcodes[tr], fit_max_rows,
                             seed + i)], te) for i, (tr, te) in enumerate(splits)]
    sampled = [len(tr) < a for (tr, _), a in zip(splits, available)]
    # float32 where that holds the values exactly: each fold takes its rows as float64
    Xv = PoolMatrix(X)
    del X  # the frame's copy is not needed while the folds run (a row's worth per field)
    # the output table reads only the rows' identity (the features are in the matrix)
    table = table[[c for c in ("row", "path") if c in table.columns]]
    pred = np.empty(len(yv), dtype=object)
    fold_of = np.empty(len(yv), dtype=np.int64)
    imp_parts: list[pd.DataFrame] = []
    single = None
    if names:
        calls = [(_fit_fold, (Xv, yv, tr, te, names, info["categorical"], seed, seed + i,
                              importance_repeats, importance_max_rows, sampled[i]))
                 for i, (tr, te) in enumerate(splits)]
        calls.append((single_field_accuracy, (Xv, yv, names, splits, seed)))
        *done, single = yield FoldTasks(calls, jobs, _fold_weight(len(yv), Xv.shape[1]))
    for i, (tr, te) in enumerate(splits):
        fold_of[te] = i
        if not names:
            pred[te] = pd.Series(yv[tr]).mode().iloc[0]
            continue
        pred[te], part = done[i]
        imp_parts.append(part)
    ba = bootstrap_balanced_accuracy(yv, pred.astype(str), n_resamples=n_resamples, seed=seed)
    imp = _importance_table(imp_parts)
    return ProbeResult(
        kind="within pool", balanced_accuracy=ba, chance=1.0 / len(classes), n_rows=len(yv),
        classes=classes, class_support=support, importances=imp,
        predictions=_frame_out(table, yv, pred.astype(str), fold_of, order), features=names,
        dropped=info["dropped"],
        params={"model": "HistGradientBoostingClassifier(class_weight='balanced')",
                "cv": ("StratifiedGroupKFold" if grouped else "StratifiedKFold") + f"({k}, shuffle)",
                "seed": seed, "importance": f"permutation, {importance_repeats} repeats, held-out "
                f"rows of each fold (≤{importance_max_rows}), scoring balanced accuracy",
                "include_name_fields": include_name_fields,
                **_fit_params(fit_max_rows, [len(tr) for tr, _ in splits],
                              [len(yv) - len(te) - len(tr) for tr, te in splits])},
        single_field=single)


def _fit_params(cap: int | None, fitted: list[int], left_out: list[int]) -> dict[str, Any]:
    """What the fit row cap did: the cap, rows each model was fit on, and (when it bound)
    the sampling rule."""
    capped = any(x > 0 for x in left_out)
    return {"fit_max_rows": cap, "fit_rows": fitted if len(fitted) > 1 else fitted[0],
            **({"fit_sample": "seeded, stratified by class, round-robin over groups; "
                f"{sum(left_out):,} training row(s) left out of the fits",
                "early_stopping": "on the sampled fits: 10% of the sample held out, stop "
                "after 10 rounds without improvement of its loss"} if capped else {})}


def header_probe_cross_split(
    train: pd.DataFrame,
    test: pd.DataFrame,
    *,
    label: str = "label",
    seed: int = RunOptions.seed,
    n_resamples: int = RunOptions.resamples,
    importance_repeats: int = 5,
    importance_max_rows: int = 2000,
    fit_max_rows: int | None = FIT_MAX_ROWS,
    columns: list[str] | None = None,
    include_name_fields: bool = False,
    group: str | None = "group",
    threads: int | None = 1,
    feature_matrix: FeatureMatrix | None = None,
) -> ProbeResult:
    """(b) Cross split: fit the header-only model on ``train``, score ``test`` (METHODS §4.2).

    Features are encoded over both tables together (an encoding, not a fit: labels are not
    used) and columns constant on ``train`` are dropped. Importances are permutation
    importances on ``test``. The model is fit on at most ``fit_max_rows`` training rows (the
    sample of :func:`header_probe_within_pool`, spread over ``group``; ``None``: all) and scores
    every test row. ``feature_matrix`` as in :func:`header_probe_within_pool`.
    """
    with single_threaded(threads):
        return run_steps([cross_split_steps(
            train, test, label=label, seed=seed, n_resamples=n_resamples,
            importance_repeats=importance_repeats, importance_max_rows=importance_max_rows,
            fit_max_rows=fit_max_rows, columns=columns, include_name_fields=include_name_fields,
            group=group, feature_matrix=feature_matrix)])[0]


def _fit_cross(xtr, ytr, xte, yte, keep, categorical, seed, repeats, max_rows,
               sampled=False):
    """The cross split's work: fit on the training side (early stopping when it is a sample
    above the row cap), predict the query side, permutation importances on it, and the
    single-field trees (fit on the same training rows)."""
    model, columns = fit_model(xtr, ytr, categorical, seed, True if sampled else "auto")
    pred = model.predict(xte[:, columns]).astype(str)
    imp = permutation_importances(model, xte, yte, keep, repeats=repeats, seed=seed,
                                  max_rows=max_rows, columns=columns)
    single = single_field_accuracy(
        np.concatenate([xtr, xte]), np.concatenate([ytr, yte]), keep,
        [(np.arange(len(ytr)), np.arange(len(ytr), len(ytr) + len(yte)))], seed)
    return pred, imp, single


def cross_split_steps(train: pd.DataFrame, test: pd.DataFrame, *, label: str = "label",
                      seed: int = RunOptions.seed, n_resamples: int = RunOptions.resamples,
                      importance_repeats: int = 5,
                      importance_max_rows: int = 2000, fit_max_rows: int | None = FIT_MAX_ROWS,
                      columns: list[str] | None = None, include_name_fields: bool = False,
                      group: str | None = "group", feature_matrix: FeatureMatrix | None = None):
    """:func:`header_probe_cross_split` as a step generator (see :func:`within_pool_steps`);
    the fit, its importances and the single-field trees are one call."""
    matrix = feature_matrix or _header_matrix(columns, include_name_fields)
    train = train.iloc[stable_order(train)]
    test_order = stable_order(test)
    test = test.iloc[test_order]
    y_tr = _labels(train, label)
    y_te = _labels(test, label)
    _check_classes(y_tr, "the training side")
    if y_te.isna().any():
        raise InputError(f"{int(y_te.isna().sum())} test row(s) without a label")
    both = pd.concat([train, test], ignore_index=True)
    X, info = matrix(both)
    Xtr, Xte = X.iloc[: len(train)], X.iloc[len(train):]
    keep = [c for c in X.columns if Xtr[c].nunique(dropna=False) > 1]
    dropped = dict(info["dropped"])
    dropped.update({c: "constant on the training side" for c in X.columns if c not in keep})
    cat = [info["categorical"][list(X.columns).index(c)] for c in keep]
    ytr = y_tr.to_numpy(dtype=object).astype(str)
    yte = y_te.to_numpy(dtype=object).astype(str)
    classes = sorted(set(ytr) | set(yte))
    groups = (train[group].astype("string").to_numpy(dtype=object)
              if group is not None and group in train.columns else None)
    fit = fit_sample(ytr, groups, fit_max_rows, seed)
    if keep:
        # only the fitted rows of the training side become a matrix
        xfit, xte = Xtr[keep].iloc[fit].to_numpy(np.float64), Xte[keep].to_numpy(np.float64)
        del X, Xtr, Xte, both  # the frames are not needed while the fit runs
        # the output table reads only the rows' identity; the training side is not read
        test, train = test[[c for c in ("row", "path") if c in test.columns]], None
        (pred, imp, single), = yield FoldTasks(
            [(_fit_cross, (xfit, ytr[fit], xte, yte, keep, cat, seed, importance_repeats,
                           importance_max_rows, len(fit) < len(ytr)))],
            weight=_fold_weight(len(fit), len(keep), fits=1))
        imp_parts = [imp]
    else:
        pred = np.full(len(yte), pd.Series(ytr).mode().iloc[0])
        imp_parts = []
        single = None
    ba = bootstrap_balanced_accuracy(yte, pred, n_resamples=n_resamples, seed=seed)
    return ProbeResult(
        kind="cross split", balanced_accuracy=ba, chance=1.0 / len(classes), n_rows=len(yte),
        classes=classes, class_support={c: int((yte == c).sum()) for c in classes},
        importances=_importance_table(imp_parts),
        predictions=_frame_out(test, yte, pred, np.full(len(yte), -1), test_order),
        features=keep,
        dropped=dropped,
        params={"model": "HistGradientBoostingClassifier(class_weight='balanced')",
                "fit": "training side", "scored": "query side", "seed": seed,
                "importance": f"permutation, {importance_repeats} repeats, query rows "
                f"(≤{importance_max_rows}), scoring balanced accuracy",
                "include_name_fields": include_name_fields, "train_rows": len(ytr),
                **_fit_params(fit_max_rows, [len(fit)], [len(ytr) - len(fit)])},
        single_field=single)
