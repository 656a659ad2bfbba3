"""The report's gallery: which flagged pairs to show per boundary, chosen from the audit's
row-keyed tables and sampled across similarity bands (label conflicts first), each with its
band, its measurements and both rows' path, label, split and file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["BANDS", "MAX_GALLERY_PAIRS", "flagged_pairs", "gallery"]

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


#: gallery bands, in the order they are shown and filled
BANDS = ("label conflict", "identical", "near-twin ≥ τ", "below τ")
#: the bands the gallery shows (a pair below τ is a screen's hit, not a finding)
SHOWN = BANDS[:3]
IDENTICAL_RHO = 0.9999


def flagged_pairs(tables: Mapping[str, pd.DataFrame], boundary) -> pd.DataFrame:
    """Every flagged pair of ``boundary`` once: from the tables that name a query row and a
    reference row (pair tables first, so a pair keeps its full measurements), pairs that
    satisfy no rule left out. Columns: ``query``, ``reference``, ``table``, ``predicate``,
    ``rho`` and ``record`` (the table line, for its measurements)."""
    found = []
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
        if "rules" in part.columns:  # selected pairs that satisfy no rule are not flagged
            part = part[part["rules"].fillna("").astype(str) != ""]
        if not len(part):
            continue
        pred_col = _find_column(part, ("predicate", "rules", "rule", "kind"))
        rho_col = _find_column(part, ("rho", "ncc_rho", "best_rho"))
        found.append(pd.DataFrame({
            "query": part[q_col].to_numpy(np.int64),
            "reference": part[r_col].to_numpy(np.int64),
            "table": name,
            "predicate": part[pred_col].astype(str).to_numpy() if pred_col else name,
            "rho": (pd.to_numeric(part[rho_col], errors="coerce").to_numpy(np.float64)
                    if rho_col else np.full(len(part), np.nan)),
            "record": part.to_dict("records"),
        }))
    if not found:
        return pd.DataFrame(columns=["query", "reference", "table", "predicate", "rho", "record"])
    return pd.concat(found, ignore_index=True).drop_duplicates(["query", "reference"])


def _bands(pairs: pd.DataFrame, conflicts: set[tuple[int, int]], tau: float) -> np.ndarray:
    keys = list(zip(pairs["query"], pairs["reference"]))
    conflict = np.array([k in conflicts for k in keys], bool)
    rho = pairs["rho"].to_numpy(np.float64)
    identical = (rho >= IDENTICAL_RHO) | (np.isnan(rho) & pairs["predicate"].isin(
        ["sha256", "pixel_xxh128"]).to_numpy(bool))
    return np.select([conflict, identical, rho >= tau], list(BANDS[:3]), BANDS[3])


def _spread(index: np.ndarray, k: int) -> np.ndarray:
    """``k`` positions spread evenly over ``index`` (ends included)."""
    if k >= index.size:
        return index
    return index[np.unique(np.linspace(0, index.size - 1, k).round().astype(int))]


def gallery(tables: Mapping[str, pd.DataFrame], boundary, rows: pd.DataFrame,
            limit: int = MAX_GALLERY_PAIRS, tau: float = 0.98
            ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The flagged pairs to show for ``boundary`` and how they were chosen.

    Every flagged pair falls in one band: *label conflict* (a twin whose rows carry different
    labels under a trusted predicate, from the ``label_conflicts`` table), *identical*
    (ρ ≥ 0.9999, or byte/pixel identical), *near-twin ≥ τ*, or *below τ* (flagged by a hash
    rule only: no evidence alone, so counted but never shown). Label conflicts are shown
    first; the rest of ``limit`` is shared evenly among the identical and near-twin bands,
    each sampled evenly along ρ (highest first) so its whole range is seen, and what one band
    cannot fill goes to the other. Returns the items (each naming its band) and a summary
    with the number of flagged pairs per band and shown per band.
    """
    pairs = flagged_pairs({n: t for n, t in tables.items() if n != "label_conflicts"}, boundary)
    lc = tables.get("label_conflicts")
    conflicts: set[tuple[int, int]] = set()
    if isinstance(lc, pd.DataFrame) and len(lc):
        mine = lc[lc["boundary"].astype(str) == boundary.name]
        if "trusted" in mine.columns:  # pairs of a predicate no control found reliable
            mine = mine[mine["trusted"].astype(str).str.lower().isin(["true", "1"])]
        conflicts = set(zip(mine["row"].astype(int), mine["counterpart_row"].astype(int)))
    pairs = pairs.assign(band=_bands(pairs, conflicts, tau) if len(pairs) else [])
    pairs = pairs.sort_values("rho", ascending=False, kind="stable", na_position="last")
    by_band = {band: pairs.index[pairs["band"].to_numpy() == band].to_numpy() for band in BANDS}
    take: dict[str, np.ndarray] = {"label conflict": by_band["label conflict"][:limit]}
    left = limit - take["label conflict"].size
    rest = [b for b in SHOWN[1:] if by_band[b].size]
    quota = {b: 0 for b in rest}
    while left > 0 and any(quota[b] < by_band[b].size for b in rest):
        for b in rest:
            if left and quota[b] < by_band[b].size:
                quota[b] += 1
                left -= 1
    for b in rest:
        take[b] = _spread(by_band[b], quota[b])
    by_row = rows.set_index("row", drop=False)
    items = []
    for band in BANDS:
        for i in take.get(band, []):
            p = pairs.loc[i]
            rec = p["record"]
            items.append({
                "boundary": boundary.name,
                "band": band,
                "table": p["table"],
                "predicate": str(p["predicate"]),
                "measurements": {c: _plain(rec[c]) for c in _MEASURES if c in rec},
                "query": _row_info(by_row, int(p["query"])),
                "reference": _row_info(by_row, int(p["reference"])),
            })
    summary = {"flagged_pairs": len(pairs), "shown": len(items),
               "bands": {b: {"flagged": int(by_band[b].size),
                             "shown": len(take.get(b, []))} for b in BANDS},
               "rule": ("label conflicts first, then identical and near-twin pairs in equal "
                        "shares, each spread evenly along ρ; pairs below τ (hash rules only) "
                        "are counted, not shown"), "limit": int(limit)}
    return items, summary


_MEASURES = ("rho", "ncc_rho", "best_rho", "ssim", "d_p", "d_d", "phash_distance",
             "dhash_distance", "byte_identical", "pixel_identical", "variant")


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
                                for c in ("path", "label", "split", "corpus", "file",
                                          "path_issue")
                                if c in by_row.columns}}
