"""Source–label association (METHODS §4.3): does where a row comes from predict its label?

A source × label contingency table, Cramér's V (from the Pearson χ² statistic without
continuity correction: V = sqrt(χ² / (n · (min(r, c) − 1)))), and the dominant source of each
class (the source holding most of its rows, with that share). A V near 1 means a model can
score by recognising the source instead of the finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from splitscope.errors import InputError

__all__ = ["Association", "cramers_v", "source_label_association"]


def cramers_v(table: np.ndarray | pd.DataFrame) -> tuple[float, float, float, int]:
    """Cramér's V of a contingency table, with χ², its p-value and degrees of freedom.

    Rows or columns that are all zero are removed first. A table with one row or one column
    left has no association to measure: V is NaN.
    """
    from scipy.stats import chi2_contingency

    t = np.asarray(table, dtype=np.float64)
    if t.ndim != 2:
        raise InputError("a contingency table must be 2-D")
    t = t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0]
    if min(t.shape) < 2:
        return float("nan"), float("nan"), float("nan"), 0
    chi2, p, dof, _ = chi2_contingency(t, correction=False)
    v = np.sqrt(chi2 / (t.sum() * (min(t.shape) - 1)))
    return float(v), float(chi2), float(p), int(dof)


@dataclass
class Association:
    """Result of :func:`source_label_association`: ``table`` (sources × labels, row counts),
    ``cramers_v``, ``chi2``, ``p_value``, ``dof``, ``n`` (rows with both a source and a label),
    ``rows_missing`` (rows left out for lack of either), and ``dominant`` (one line per label:
    rows, dominant source, its rows, its share)."""

    table: pd.DataFrame
    cramers_v: float
    chi2: float
    p_value: float
    dof: int
    n: int
    rows_missing: int
    dominant: pd.DataFrame

    def to_dict(self) -> dict[str, Any]:
        return {
            "cramers_v": self.cramers_v, "chi2": self.chi2, "p_value": self.p_value,
            "dof": self.dof, "n": self.n, "rows_missing": self.rows_missing,
            "table": {str(s): {str(k): int(v) for k, v in row.items()}
                      for s, row in self.table.iterrows()},
            "dominant": self.dominant.to_dict(orient="records"),
        }


def source_label_association(rows: pd.DataFrame, *, source: str = "source",
                             label: str = "label") -> Association:
    """Contingency table, Cramér's V and dominant source per class over ``rows``.

    Rows missing a source or a label are left out and counted in ``rows_missing``.
    """
    for col in (source, label):
        if col not in rows.columns:
            raise InputError(f"source–label association needs column `{col}`; found: "
                             f"{', '.join(map(str, rows.columns))}")
    s = rows[source].astype("string")
    lab = rows[label].astype("string")
    ok = (s.notna() & lab.notna()).to_numpy(bool)
    if not ok.any():
        raise InputError("no row has both a source and a label")
    table = pd.crosstab(s[ok].rename("source"), lab[ok].rename("label")).sort_index(axis=0) \
        .sort_index(axis=1)
    v, chi2, p, dof = cramers_v(table.to_numpy())
    totals = table.sum(axis=0)
    top = table.to_numpy().argmax(axis=0)  # ties: the first source in sorted order
    dominant = pd.DataFrame({
        "label": pd.array(table.columns.astype(str), dtype="string"),
        "rows": totals.to_numpy(dtype=np.int64),
        "dominant_source": pd.array(table.index.astype(str)[top], dtype="string"),
        "dominant_rows": table.to_numpy()[top, np.arange(table.shape[1])].astype(np.int64),
    })
    dominant["dominant_share"] = dominant["dominant_rows"] / dominant["rows"]
    dominant["sources"] = (table > 0).sum(axis=0).to_numpy(dtype=np.int64)
    return Association(table=table, cramers_v=v, chi2=chi2, p_value=p, dof=dof,
                       n=int(ok.sum()), rows_missing=int((~ok).sum()), dominant=dominant)
