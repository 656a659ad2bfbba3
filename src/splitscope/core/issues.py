"""The per-row issue table (``lists/issues.parquet|csv``, ``AuditResult.issues``).

One row per manifest row, in manifest order, with the row's identity columns and, for every
predicate and check the audit ran, a boolean flag and its score, so the audit can be filtered
in pandas (``issues[issues.ncc_nearest & (issues.split == "test")]``). It is assembled from the
tables the layers already produced (nothing is measured again):

- the scan: ``readable``, ``failure_reason`` (the row's status when it is not ``ok``),
  ``byte_copies`` / ``pixel_copies`` (other manifest rows with the same file SHA-256 / the same
  decoded-pixel digest, anywhere in the release) and ``byte_group`` (the SHA-256);
- every layer that ran and declares ``issue_columns(ids, tables, rows)``: its columns, from
  its own tables, in the layers' order (the duplicates layer's predicate flags and scores,
  the deduplicated split and label conflicts; the group layer's shared groups; the quality
  layer's flags).

Columns are documented in docs/data-model.md ("Issue table").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from splitscope.features.failures import identity_rows

IDENTITY = ("row", "path", "split", "label", "corpus", "source", "group", "file")


def _copies(values: pd.Series) -> pd.Series:
    """Other rows with the same non-missing value."""
    v = values.astype("string")
    counts = v.map(v.value_counts(dropna=True))
    return (counts.fillna(1).astype("int64") - 1).where(v.notna(), pd.NA).astype("Int64")


def issue_table(rows: pd.DataFrame, tables: Mapping[str, pd.DataFrame],
                columns: Sequence[Callable] = ()) -> pd.DataFrame:
    """The issue table of one audit (module docstring): ``rows`` is the audited scan's
    ``rows()`` (manifest left-joined with features), ``tables`` the layers' tables by name.
    ``columns`` are the layers' own contributions (a layer's ``issue_columns(ids, tables,
    rows)``: a table indexed by row id, or None), joined after the core's columns."""
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

    for contribute in columns:
        part = contribute(ids, tables, rows)
        if part is not None and len(part.columns):
            clash = sorted(set(part.columns) & set(out.columns))
            if clash:
                raise ValueError(f"issue columns {clash} are already in the issue table")
            out = out.join(part.reindex(ids))
    return out.reset_index()

