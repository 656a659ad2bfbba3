"""What the evaluated split is made of: each query row of a boundary in exactly one category,
the strongest evidence first — a byte copy of a reference row, a pixel-identical copy with
other bytes, a near twin (NCC ≥ τ, nearest rule), a row whose group (patient, video) also
occurs on the reference side, or none of these ("clean"; rows no predicate could assess are
counted apart). Read from the layers' tables, nothing is measured again; the report's first
figure draws it."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from splitscope.records.ids import slug
from splitscope.relations.predicates import NCC_NEAREST

__all__ = ["CATEGORIES", "composition"]

#: category → the per-row flag that puts a row in it (the first that holds wins)
CATEGORIES = (("byte copy", "sha256"), ("pixel-identical", "pixel_xxh128"),
              ("near twin", NCC_NEAREST), ("shared group", "group_shared"))


def composition(tables: Mapping[str, pd.DataFrame], boundary: str, tau: float
                ) -> dict | None:
    """Rows of ``boundary``'s query side per category (module notes), or None when the
    duplicates layer did not flag this boundary's rows."""
    flags = tables.get("query_flags")
    if flags is None or not len(flags) or "boundary" not in flags:
        return None
    mine = flags[flags["boundary"] == boundary].drop_duplicates("row").set_index("row")
    if not len(mine):
        return None
    group = tables.get(f"group_overlap_{slug(boundary)}")
    if group is not None and len(group) and "affected" in group:
        shared = group.drop_duplicates("row").set_index("row")["affected"]
        mine = mine.assign(group_shared=shared.reindex(mine.index).astype("boolean"))
    left = np.ones(len(mine), bool)
    assessed = np.zeros(len(mine), bool)
    counts = []
    for name, col in CATEGORIES:
        if col not in mine:
            continue
        values = pd.array(mine[col], dtype="boolean")
        hit = np.asarray(values.fillna(False), bool) & left
        assessed |= ~np.asarray(values.isna(), bool)
        counts.append({"category": name, "rows": int(hit.sum()), "flag": col})
        left &= ~hit
    counts.append({"category": "clean", "rows": int((left & assessed).sum()), "flag": None})
    counts.append({"category": "not assessed", "rows": int((left & ~assessed).sum()),
                   "flag": None})
    return {"boundary": boundary, "rows": len(mine), "categories": counts,
            "rule": "Each row is in the first category that holds: byte copy (SHA-256), "
                    "pixel-identical (decoded pixels, other bytes), near twin (NCC ≥ "
                    f"{tau:g}, nearest rule), shared group, else clean"}
