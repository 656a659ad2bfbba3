"""What the evaluated split is made of: each query row of a boundary in exactly one category,
the strongest evidence first — by default a byte copy of a reference row, a pixel-identical
copy with other bytes, a near twin, a row whose group (patient, video) also occurs on the
reference side — or none of these ("clean"; rows no predicate could assess are counted apart).

The categories are the registered layers' ``composition`` segments
(:class:`~splitscope.records.metrics.Segment`), in the order of their ``rank``; each reads its
layer's tables, so nothing is measured again. The report's first figure draws it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from splitscope.records.metrics import Segment

__all__ = ["composition"]


def composition(tables: Mapping[str, pd.DataFrame], boundary: str,
                segments: Sequence[Segment], groups: Mapping[str, Any]) -> dict | None:
    """Rows of ``boundary``'s query side per category (module notes), or None when no
    segment that names the query rows (``population``) has them; ``groups`` are the options
    groups the segments' descriptions are formatted with."""
    segments = sorted(segments, key=lambda s: s.rank)
    flags = {s.category: s.flags(tables, boundary) for s in segments}
    population = None
    for s in segments:
        found = flags[s.category]
        if s.population and found is not None and len(found):
            population = found.index if population is None else population.append(
                found.index.difference(population))
    if population is None:
        return None
    left = np.ones(len(population), bool)
    assessed = np.zeros(len(population), bool)
    counts = []
    for s in segments:
        found = flags[s.category]
        if found is None:
            continue
        values = pd.array(found.reindex(population), dtype="boolean")
        hit = np.asarray(values.fillna(False), bool) & left
        assessed |= ~np.asarray(values.isna(), bool)
        counts.append({"category": s.category, "rows": int(hit.sum()), "flag": s.flag})
        left &= ~hit
    counts.append({"category": "clean", "rows": int((left & assessed).sum()), "flag": None})
    counts.append({"category": "not assessed", "rows": int((left & ~assessed).sum()),
                   "flag": None})
    words = ", ".join(s.describe.format(**groups) for s in segments)
    return {"boundary": boundary, "rows": len(population), "categories": counts,
            "rule": f"Each row is in the first category that holds: {words}, else clean"}
