"""Group-disjoint re-splits (METHODS §3.5): stratified train/validation/test parts and k folds in
which no group (patient, video, lesion) spans two parts, for re-evaluation.

Rows without a group key are treated as groups of one (each such row is its own group) and
counted as ``ungrouped_rows``, so that nothing is silently dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from splitscope.errors import InputError

__all__ = ["class_balance", "group_disjoint_split", "group_kfold"]


def _units(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray, int]:
    """(unit code per row, label code per row, label names, unit × class counts, ungrouped)."""
    for col in ("row", "path", "label"):
        if col not in rows.columns:
            raise InputError(
                f"re-split needs column `{col}`; found: {', '.join(map(str, rows.columns))}")
    if len(rows) == 0:
        raise InputError("re-split got no rows")
    label = rows["label"].astype("string")
    if label.isna().any():
        raise InputError(
            f"{int(label.isna().sum())} row(s) have no label; a stratified re-split needs a label "
            "on every row (select labelled rows first)")
    group = rows["group"].astype("string") if "group" in rows.columns else \
        pd.Series(pd.NA, index=rows.index, dtype="string")
    ungrouped = int(group.isna().sum())
    key = group.fillna("\0row:" + rows["row"].astype(str))  # a group of one per ungrouped row
    unit, _ = pd.factorize(key, sort=True)
    lab, names = pd.factorize(label, sort=True)
    counts = np.zeros((unit.max() + 1, len(names)), dtype=np.int64)
    np.add.at(counts, (unit, lab), 1)
    return unit, lab, [str(x) for x in names], counts, ungrouped


def _assign(counts: np.ndarray, fractions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Greedy stratified assignment of units to parts with target ``fractions``.

    Units are visited in a seeded random order, largest-spread first (as scikit-learn's
    StratifiedGroupKFold does); each goes to the part that, after adding it, keeps the per-class
    shares closest to the targets (smallest summed spread of count / target over parts), ties to
    the part furthest below its target size.
    """
    n_units, n_classes = counts.shape
    k = fractions.size
    class_total = counts.sum(axis=0).astype(np.float64)
    target = fractions[:, None] * class_total[None, :]  # (k, C) expected counts
    target_size = fractions * counts.sum()
    perm = rng.permutation(n_units)
    spread = np.std(counts[perm] / np.maximum(counts[perm].sum(1, keepdims=True), 1), axis=1)
    order = perm[np.argsort(-spread, kind="stable")]
    part_counts = np.zeros((k, n_classes), dtype=np.float64)
    out = np.empty(n_units, dtype=np.int64)
    eye = np.eye(k)
    for u in order:
        c = counts[u].astype(np.float64)
        # candidate states: part j gets unit u, for every j at once -> (k, k, C)
        cand = part_counts[None, :, :] + eye[:, :, None] * c[None, None, :]
        ratio = cand / np.maximum(target[None, :, :], 1e-9)
        cost = np.std(ratio, axis=1)[:, class_total > 0].sum(axis=1)
        fill = (part_counts.sum(1) + c.sum()) / np.maximum(target_size, 1e-9)
        best = np.lexsort((fill, np.round(cost, 12)))[0]
        out[u] = best
        part_counts[best] += c
    return out


def group_disjoint_split(
    rows: pd.DataFrame,
    fractions: Sequence[float] = (0.7, 0.15, 0.15),
    names: Sequence[str] = ("train", "val", "test"),
    *,
    seed: int = 0,
) -> pd.DataFrame:
    """A stratified, group-disjoint split of ``rows`` into parts of about ``fractions``.

    Parameters
    ----------
    rows : DataFrame
        Manifest rows with ``row``, ``path``, ``label`` and ``group`` (ungrouped rows become
        groups of one).
    fractions : sequence of float
        Target share of rows per part; must be positive and sum to 1.
    names : sequence of str
        Part names, same length as ``fractions``.
    seed : int
        Seed of the visiting order.

    Returns
    -------
    DataFrame
        ``row``, ``path``, ``group``, ``label``, ``part`` in the input order;
        ``attrs["ungrouped_rows"]`` counts rows that were their own group.
    """
    fr = np.asarray(fractions, dtype=np.float64)
    if fr.ndim != 1 or fr.size < 2 or (fr <= 0).any() or abs(fr.sum() - 1) > 1e-6:
        raise InputError(f"fractions must be ≥2 positive shares summing to 1; got {list(fractions)}")
    if len(names) != fr.size:
        raise InputError(f"{len(names)} part names for {fr.size} fractions")
    unit, _, _, counts, ungrouped = _units(rows)
    if counts.shape[0] < fr.size:
        raise InputError(f"{counts.shape[0]} group(s) cannot fill {fr.size} group-disjoint parts")
    part_of_unit = _assign(counts, fr, np.random.default_rng(seed))
    out = _frame(rows)
    out["part"] = pd.array(np.asarray(names, dtype=object)[part_of_unit[unit]], dtype="string")
    out.attrs = {"ungrouped_rows": ungrouped, "seed": seed, "fractions": fr.tolist(),
                 "method": "greedy stratified group assignment"}
    return out


def group_kfold(rows: pd.DataFrame, k: int = 5, *, seed: int = 0) -> pd.DataFrame:
    """Stratified group-disjoint ``k`` folds of about equal size: the same seeded greedy
    assignment as :func:`group_disjoint_split` with ``k`` equal shares (scikit-learn's
    ``StratifiedGroupKFold`` follows the same idea but is slow with many small groups).

    Returns ``row``, ``path``, ``group``, ``label``, ``fold`` (0..k-1).
    """
    if int(k) < 2:
        raise InputError(f"k must be at least 2; got {k}")
    unit, _, _, counts, ungrouped = _units(rows)
    if counts.shape[0] < k:
        raise InputError(f"{counts.shape[0]} group(s) cannot fill {k} group-disjoint folds")
    fold_of_unit = _assign(counts, np.full(int(k), 1.0 / int(k)), np.random.default_rng(seed))
    out = _frame(rows)
    out["fold"] = fold_of_unit[unit]
    out.attrs = {"ungrouped_rows": ungrouped, "seed": seed, "k": int(k),
                 "method": "greedy stratified group assignment, k equal shares"}
    return out


def _frame(rows: pd.DataFrame) -> pd.DataFrame:
    out = pd.DataFrame({
        "row": rows["row"].to_numpy(dtype=np.int64),
        "path": rows["path"].astype("string").to_numpy(),
        "group": (rows["group"] if "group" in rows.columns
                  else pd.Series(pd.NA, index=rows.index)).astype("string").to_numpy(),
        "label": rows["label"].astype("string").to_numpy(),
    })
    for col in ("path", "group", "label"):
        out[col] = out[col].astype("string")
    return out


def class_balance(assignment: pd.DataFrame, part: str = "part") -> pd.DataFrame:
    """Rows per class in each part (``part`` or ``fold`` column), with each part's share of
    the class and the class's share of the part. Long format: part, label, rows,
    share_of_class, share_of_part."""
    if part not in assignment.columns:
        raise InputError(f"no column `{part}` in the assignment; found: "
                         f"{', '.join(map(str, assignment.columns))}")
    t = assignment.groupby([part, "label"], observed=True).size().rename("rows").reset_index()
    t["share_of_class"] = t["rows"] / t.groupby("label")["rows"].transform("sum")
    t["share_of_part"] = t["rows"] / t.groupby(part)["rows"].transform("sum")
    groups = assignment.groupby(part)["group"].nunique()
    t["groups_in_part"] = t[part].map(groups).astype("int64")
    return t.sort_values([part, "label"]).reset_index(drop=True)
