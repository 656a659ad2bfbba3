"""The report's gallery: which flagged pairs to show per boundary, chosen from the audit's
row-keyed tables (pair tables first, highest similarity first), each with its measurements
and both rows' path, label, split and file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["MAX_GALLERY_PAIRS", "gallery"]

MAX_GALLERY_PAIRS = 60


def _boundary_rows(table: pd.DataFrame, boundary_name: str) -> pd.DataFrame:
    if "boundary" in table.columns:
        return table[table["boundary"].astype(str) == boundary_name]
    return table


def _find_column(table: pd.DataFrame, names: Sequence[str]) -> str | None:
    for n in names:
        if n in table.columns:
            return n
    return None


def gallery(tables: Mapping[str, pd.DataFrame], boundary, rows: pd.DataFrame,
            limit: int = MAX_GALLERY_PAIRS) -> list[dict[str, Any]]:
    """The flagged pairs to show for ``boundary``: from layer pair tables (columns naming the
    query row and the reference row), highest similarity first, at most ``limit``; each with
    its measurements and both rows' path, label, split and file."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[int, int]] = set()
    by_row = rows.set_index("row", drop=False)
    # pair tables (every measurement per pair) first, then other row-keyed tables
    for name in sorted(tables, key=lambda n: (0 if "pair" in n else 1, n)):
        table = tables[name]
        if not isinstance(table, pd.DataFrame) or not len(table):
            continue
        q_col = _find_column(table, ("query_row", "row"))
        r_col = _find_column(table, ("reference_row", "counterpart_row", "ref_row"))
        if q_col is None or r_col is None:
            continue
        part = _boundary_rows(table, boundary.name)
        part = part[part[q_col].isin(boundary.query.rows) & part[r_col].isin(boundary.reference.rows)]
        if not len(part):
            continue
        sort_col = _find_column(part, ("rho", "ncc_rho", "best_rho", "ssim"))
        if sort_col is not None:
            part = part.sort_values(sort_col, ascending=False, kind="stable", na_position="last")
        measure_cols = [c for c in part.columns if c in (
            "rho", "ncc_rho", "best_rho", "ssim", "d_p", "d_d", "phash_distance",
            "dhash_distance", "byte_identical", "pixel_identical", "variant")]
        if "rules" in part.columns:  # selected pairs that satisfy no rule are not flagged
            part = part[part["rules"].fillna("").astype(str) != ""]
        pred_col = _find_column(part, ("predicate", "rules", "rule", "kind"))
        for rec in part.head(limit * 2).to_dict("records"):
            key = (int(rec[q_col]), int(rec[r_col]))
            if key in seen:
                continue
            seen.add(key)
            out.append({
                "boundary": boundary.name,
                "table": name,
                "predicate": str(rec[pred_col]) if pred_col else name,
                "measurements": {c: _plain(rec[c]) for c in measure_cols},
                "query": _row_info(by_row, key[0]),
                "reference": _row_info(by_row, key[1]),
            })
            if len(out) >= limit:
                return out
    return out


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _row_info(by_row: pd.DataFrame, row: int) -> dict[str, Any]:
    if row not in by_row.index:
        return {"row": row}
    r = by_row.loc[row]
    return {"row": int(row), **{c: (None if pd.isna(r[c]) else str(r[c]))
                                for c in ("path", "label", "split", "corpus", "file")
                                if c in by_row.columns}}
