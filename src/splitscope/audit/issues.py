"""The per-row issue table (``lists/issues.parquet|csv``, ``AuditResult.issues``).

One row per manifest row, in manifest order, with the row's identity columns and, for every
predicate and check the audit ran, a boolean flag and its score, so the audit can be filtered
in pandas (``issues[issues.ncc_nearest & (issues.split == "test")]``). It is assembled from the
tables the layers already produced (nothing is measured again):

- the scan: ``readable``, ``failure_reason`` (the row's status when it is not ``ok``),
  ``byte_copies`` / ``pixel_copies`` (other manifest rows with the same file SHA-256 / the same
  decoded-pixel digest, anywhere in the release) and ``byte_group`` (the SHA-256);
- the duplicates layer's ``query_flags``: one boolean column per predicate (``sha256``,
  ``ncc_nearest``, ``hash_screen``, …) and the scores ``ncc_best_rho``, ``d_p_min``,
  ``d_d_min`` and ``ncc_nearest_counterpart``; ``queried_on`` names the boundaries the row was
  a query row of. A row that is a query row of several boundaries has a flag when any boundary
  flags it, the largest ρ and the smallest distances. ``<NA>`` means not assessed, not "no":
  a row that is no query row of any boundary (a training row), a row whose bytes could not be
  read (every flag but ``basename``) or decoded (every pixel flag), a row of pixels without
  file bytes or a file name (``sha256``, ``basename``);
- ``dedup_splits``: ``dedup_removed`` (the row leaves the deduplicated split) and
  ``dedup_removed_by``;
- ``label_conflicts``: ``label_conflict`` (a pixel rule links the row to a counterpart with
  another label, across a boundary or inside one split, either row of the pair; trusted
  predicates only, METHODS §2.10; ``<NA>`` for a row without a label);
- ``group_overlap_*``: ``group_shared`` (the row's group also has rows on the other side of
  a boundary) and ``group_reference_rows``;
- the quality layer's ``quality`` table (METHODS §4.6): ``quality_<flag>`` and
  ``quality_<flag>_score`` for every image-quality flag (dark, light, low contrast, blurry, …).

Columns are documented in docs/data-model.md ("Issue table").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from splitscope.features.failures import identity_rows

IDENTITY = ("row", "path", "split", "label", "corpus", "source", "group", "file")
#: per-query scores of ``query_flags`` and how rows of several boundaries are combined
SCORES = {"ncc_best_rho": "max", "ncc_best_rho_dihedral": "max", "d_p_min": "min",
          "d_d_min": "min", "d_joint_min": "min", "d_sum_min": "min"}


def _copies(values: pd.Series) -> pd.Series:
    """Other rows with the same non-missing value."""
    v = values.astype("string")
    counts = v.map(v.value_counts(dropna=True))
    return (counts.fillna(1).astype("int64") - 1).where(v.notna(), pd.NA).astype("Int64")


def _predicates(flags: pd.DataFrame) -> list[str]:
    return [c for c in flags.columns if c not in ("flat",) and not c.endswith("_only")
            and (pd.api.types.is_bool_dtype(flags[c]) or str(flags[c].dtype) == "boolean")]


def _query_part(flags: pd.DataFrame, rows: pd.Index) -> pd.DataFrame:
    """``query_flags`` (one line per boundary × query row) combined per row."""
    flags = flags[flags["row"].notna()]
    preds = _predicates(flags)
    flags = flags.astype({c: "boolean" for c in preds})
    g = flags.groupby("row", sort=True)
    parts = [g[preds].max()]  # True on any boundary; <NA> when no boundary assessed it
    scores = {c: how for c, how in SCORES.items() if c in flags.columns}
    if scores:
        parts.append(g.agg(scores))
    if "ncc_nearest_counterpart" in flags:
        best = flags.sort_values(["row", "ncc_best_rho"], ascending=[True, False],
                                 na_position="last", kind="stable")
        parts.append(best.groupby("row", sort=True)[["ncc_nearest_counterpart"]].first())
    parts.append(g["boundary"].agg(lambda s: "; ".join(sorted(set(map(str, s)))))
                 .rename("queried_on").to_frame())
    return pd.concat(parts, axis=1).reindex(rows)


def issue_table(rows: pd.DataFrame, tables: Mapping[str, pd.DataFrame],
                columns: Sequence[Callable] = ()) -> pd.DataFrame:
    """The issue table of one audit (module docstring): ``rows`` is the audited scan's
    ``rows()`` (manifest left-joined with features), ``tables`` the layers' tables by name.
    ``columns`` are the layers' own contributions (a layer's ``issue_columns(ids, tables)``:
    a table indexed by row id, or None), joined after the columns above."""
    ids = pd.Index(rows["row"].astype("int64"), name="row")
    out = pd.DataFrame({c: rows[c].to_numpy() for c in IDENTITY if c in rows and c != "row"},
                       index=ids)
    extra = [c for c in ("table", "table_row", "stored_path", "content", "frame") if c in rows]
    for c in extra:
        out[c] = rows[c].to_numpy()
    status = rows["status"].astype("string") if "status" in rows else pd.Series(
        pd.NA, index=rows.index, dtype="string")
    out["readable"] = (status == "ok").fillna(False).to_numpy(bool)
    out["failure_reason"] = status.where(status != "ok").to_numpy()
    rows = identity_rows(rows)  # an empty file is a failure, never a copy
    for col, name in (("sha256", "byte"), ("pixel_xxh128", "pixel")):
        if col in rows:
            out[f"{name}_copies"] = _copies(rows[col]).to_numpy()
    if "sha256" in rows:
        out["byte_group"] = rows["sha256"].astype("string").to_numpy()

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
    groups = [t for n, t in tables.items() if n.startswith("group_overlap") and len(t)]
    if groups:
        g = pd.concat(groups, ignore_index=True)
        per = g.groupby("row").agg(group_shared=("affected", "any"),
                                   group_reference_rows=("reference_rows_same_group", "max"))
        per = per.reindex(ids)
        out["group_shared"] = per["group_shared"].astype("boolean")
        out["group_reference_rows"] = per["group_reference_rows"].astype("Int64")
    quality = tables.get("quality")
    if quality is not None and len(quality):
        from splitscope.provenance.quality import FLAGS

        q = quality.drop_duplicates("row").set_index("row").reindex(ids)
        for f in FLAGS:
            if f.name in q:
                out[f"quality_{f.name}"] = q[f.name].astype("boolean")
                out[f"quality_{f.name}_score"] = q[f"{f.name}_score"].to_numpy()
    for contribute in columns:
        part = contribute(ids, tables)
        if part is not None and len(part.columns):
            clash = sorted(set(part.columns) & set(out.columns))
            if clash:
                raise ValueError(f"issue columns {clash} are already in the issue table")
            out = out.join(part.reindex(ids))
    return out.reset_index()

