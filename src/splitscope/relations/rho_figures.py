"""Figure data of the near-duplicate layer: each query row's best NCC ρ as a histogram and as
a threshold sweep, for the audited boundary and its negative control. Computed from the
layer's own tables (nothing is searched again); the report draws it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from splitscope.relations.ncc import SWEEP, ncc_sweep

__all__ = ["best_rho_per_row", "boundary_figures", "control_best_rho", "distribution", "sweep"]

_RHO_COLUMNS = ("best_rho", "ncc_best_rho", "nearest_rho")


def best_rho_per_row(tables: Mapping[str, pd.DataFrame], boundary) -> np.ndarray | None:
    """Each query row's best NCC ρ on ``boundary``, from a table that has one (a column
    ``best_rho``, one line per query row); ``None`` when no table has it."""
    for name in sorted(tables):
        table = tables[name]
        if not isinstance(table, pd.DataFrame):
            continue
        col = next((c for c in _RHO_COLUMNS if c in table.columns), None)
        if col is None:
            continue
        part = table[table["boundary"].astype(str) == boundary.name] \
            if "boundary" in table.columns else table
        if "boundary" not in table.columns and len(part) != boundary.query.size:
            continue
        if "row" in part.columns:
            part = part[part["row"].isin(boundary.query.rows)]
        if len(part):
            return part[col].to_numpy(dtype=float)
    return None


def control_best_rho(control_table: pd.DataFrame | None) -> tuple[np.ndarray | None, str | None]:
    """Best ρ per control query row from the ``control_query_flags`` table, and a label
    naming the control boundary; ``(None, None)`` without a control."""
    if control_table is None or control_table.empty or "ncc_best_rho" not in control_table:
        return None, None
    name = str(control_table["boundary"].iloc[0])
    return control_table["ncc_best_rho"].to_numpy(dtype=float), name


def distribution(best_rho: np.ndarray, label: str, role: str, lo: float = 0.5) -> dict[str, Any]:
    """Histogram of best ρ (bins of 0.01 from ``lo`` to 1, one bin below ``lo`` for the rest;
    flat rows, whose ρ is undefined, are counted apart)."""
    rho = np.asarray(best_rho, dtype=float)
    defined = rho[np.isfinite(rho)]
    edges = np.concatenate([[-1.0], np.round(np.arange(lo, 1.0001, 0.01), 4)])
    counts, _ = np.histogram(np.clip(defined, -1.0, 1.0), bins=edges)
    return {"label": label, "role": role, "edges": edges.tolist(), "counts": counts.tolist(),
            "undefined": int((~np.isfinite(rho)).sum()), "rows": int(rho.size)}


def sweep(best_rho: np.ndarray, label: str, role: str,
          thresholds: Sequence[float] = SWEEP) -> dict[str, Any]:
    """Share of query rows whose best ρ reaches each threshold (nearest rule, counted by
    :func:`splitscope.relations.ncc.ncc_sweep`); the denominator is every query row of the
    population (flat and failed rows included), as in the records' rates."""
    n = int(np.asarray(best_rho).size)
    points = [{"tau": float(r.tau), "numerator": int(r.affected), "denominator": n,
               "rate": (int(r.affected) / n) if n else None}
              for r in ncc_sweep(best_rho, thresholds).itertuples()]
    return {"label": label, "role": role, "points": points}


def boundary_figures(tables: Mapping[str, pd.DataFrame], boundaries,
                     control_table: pd.DataFrame | None) -> dict[str, dict[str, Any]]:
    """``{boundary name: {"distribution": [...], "sweep": [...]}}`` for every boundary whose
    best ρ is in ``tables`` (audited first, then the negative control's when given)."""
    control_rho, control_name = control_best_rho(control_table)
    out: dict[str, dict[str, Any]] = {}
    for b in boundaries:
        rho = best_rho_per_row({n: t for n, t in tables.items() if "control" not in n}, b)
        if rho is None:
            continue
        fig = {"distribution": [distribution(rho, f"{b.name} (audited)", "audited")],
               "sweep": [sweep(rho, f"{b.name} (audited)", "audited")]}
        if control_rho is not None:
            label = f"negative control {control_name}"
            fig["distribution"].append(distribution(control_rho, label, "control"))
            fig["sweep"].append(sweep(control_rho, label, "control"))
        out[b.name] = fig
    return out
