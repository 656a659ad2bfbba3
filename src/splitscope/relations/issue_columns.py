"""The duplicates layer's columns of the audit's issue table (``lists/issues.*``), read from
its own tables (nothing is measured again):

- ``query_flags``: one boolean column per predicate (``sha256``, ``ncc_nearest``,
  ``hash_screen``, …), the scores the near-duplicate predicates declare
  (:func:`splitscope.relations.near_predicates.score_columns`: ``ncc_best_rho``,
  ``d_p_min``, …) and ``ncc_nearest_counterpart``; ``queried_on`` names the boundaries the
  row was a query row of.
  A row that is a query row of several boundaries has a flag when any boundary flags it, the
  largest ρ and the smallest distances. ``<NA>`` means not assessed, not "no": a row that is
  no query row of any boundary (a training row), a row whose bytes could not be read (every
  flag but ``basename``) or decoded (every pixel flag), a row of pixels without file bytes or
  a file name (``sha256``, ``basename``);
- ``dedup_splits``: ``dedup_removed`` (the row leaves the deduplicated split) and
  ``dedup_removed_by``;
- ``label_conflicts``: ``label_conflict`` (a pixel rule links the row to a counterpart with
  another label, across a boundary or inside one split, either row of the pair; trusted
  predicates only, METHODS §2.10; ``<NA>`` for a row without a label).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from splitscope.relations.near_predicates import score_columns

__all__ = ["issue_columns"]


def _predicates(flags: pd.DataFrame) -> list[str]:
    return [c for c in flags.columns if c not in ("flat",) and not c.endswith("_only")
            and (pd.api.types.is_bool_dtype(flags[c]) or str(flags[c].dtype) == "boolean")]


def _query_part(flags: pd.DataFrame, ids: pd.Index) -> pd.DataFrame:
    """``query_flags`` (one line per boundary × query row) combined per row."""
    flags = flags[flags["row"].notna()]
    preds = _predicates(flags)
    flags = flags.astype({c: "boolean" for c in preds})
    g = flags.groupby("row", sort=True)
    parts = [g[preds].max()]  # True on any boundary; <NA> when no boundary assessed it
    # per-query scores of the near-duplicate predicates, and how boundaries combine
    scores = {c: how for c, how in score_columns().items() if c in flags.columns}
    if scores:
        parts.append(g.agg(scores))
    if "ncc_nearest_counterpart" in flags:
        best = flags.sort_values(["row", "ncc_best_rho"], ascending=[True, False],
                                 na_position="last", kind="stable")
        parts.append(best.groupby("row", sort=True)[["ncc_nearest_counterpart"]].first())
    parts.append(g["boundary"].agg(lambda s: "; ".join(sorted(set(map(str, s)))))
                 .rename("queried_on").to_frame())
    return pd.concat(parts, axis=1).reindex(ids)


def issue_columns(ids: pd.Index, tables: Mapping[str, pd.DataFrame],
                  rows: pd.DataFrame) -> pd.DataFrame:
    """The layer's issue columns (module notes), indexed by ``ids`` (the audited rows' ids,
    in ``rows``' order)."""
    out = pd.DataFrame(index=ids)
    flags = tables.get("query_flags")
    if flags is not None and len(flags):
        out = out.join(_query_part(flags, ids))  # <NA> where the layer did not assess
    dedup = tables.get("dedup_splits")
    if dedup is not None and len(dedup):
        d = dedup.drop_duplicates("row").set_index("row").reindex(ids)
        out["dedup_removed"] = (~d["kept"].astype("boolean")).astype("boolean")
        out["dedup_removed_by"] = d["removed_by"].astype("string").to_numpy()
    conflicts = tables.get("label_conflicts")
    if conflicts is not None:
        trusted = conflicts[conflicts["trusted"].astype("boolean").fillna(False)] \
            if "trusted" in conflicts else conflicts
        # either row of a pair; <NA> where there is no label to compare
        hit = set(trusted["row"].astype("int64")) | set(
            trusted["counterpart_row"].astype("int64"))
        flag = pd.array([r in hit for r in ids], dtype="boolean")
        if "label" in rows:
            flag[rows["label"].isna().to_numpy(bool)] = pd.NA
        out["label_conflict"] = flag
    return out
