"""Cross-corpus containment (METHODS §2.9).

For a boundary corpus B → corpus A: the share of B's rows with a byte-identical counterpart in A,
the share with an NCC ≥ τ counterpart (nearest rule), and the *cleaned external set*: B minus
the rows contained by either.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.records import AuditRecord
from splitscope.records.ids import boundary_slug
from splitscope.relations.predicates import IDENTITY, LAYER, NCC_NEAREST, NEAR_DUPLICATE


def is_cross_corpus(rel, rows: pd.DataFrame) -> bool:
    """True when the two sides of the boundary share no corpus."""
    by_row = rows.set_index("row")["corpus"].astype("string")
    qc = set(by_row.reindex(rel.boundary.query.rows).dropna())
    rc = set(by_row.reindex(rel.boundary.reference.rows).dropna())
    return bool(qc) and bool(rc) and not (qc & rc)


def containment(rel) -> pd.DataFrame:
    """Per query row of B: ``row, byte_contained, ncc_contained, contained`` (``<NA>`` where
    not assessed) and ``kept`` (in the cleaned external set: not contained by either rule;
    rows not assessed by both rules are kept and counted)."""
    f = rel.flags
    byte = f["sha256"] if "sha256" in f else pd.array([pd.NA] * len(f), dtype="boolean")
    ncc = f[NCC_NEAREST] if NCC_NEAREST in f else pd.array([pd.NA] * len(f),
                                                                dtype="boolean")
    b = np.asarray(pd.array(byte, dtype="boolean").fillna(False), bool)
    n = np.asarray(pd.array(ncc, dtype="boolean").fillna(False), bool)
    return pd.DataFrame({"row": f["row"].to_numpy(), "byte_contained": pd.array(byte,
                         dtype="boolean"), "ncc_contained": pd.array(ncc, dtype="boolean"),
                         "contained": b | n, "kept": ~(b | n)})


def containment_records(rel, rows: pd.DataFrame, tau: float) -> list[AuditRecord]:
    """Records for a cross-corpus boundary (none for a boundary inside one corpus)."""
    if not is_cross_corpus(rel, rows):
        return []
    table = containment(rel)
    n = len(table)
    b = rel.boundary
    slug = boundary_slug(b)
    out = []
    for name, col in (("byte", "byte_contained"), ("ncc", "ncc_contained"),
                      ("byte_or_ncc", "contained")):
        hits = int(pd.array(table[col], dtype="boolean").fillna(False).sum())
        out.append(AuditRecord(
            id=f"{NEAR_DUPLICATE}.containment_{name}.{slug}",
            layer=LAYER, section=NEAR_DUPLICATE if name != "byte" else IDENTITY,
            title=f"Containment of {b.query.name} in {b.reference.name} ({name})",
            boundary=b.to_dict(),
            predicate={"name": f"containment_{name}", "params": {"tau": tau}},
            unit="affected query row",
            numerator=hits,
            denominator=n,
            scope=f"rows of {b.query.name} with a counterpart in {b.reference.name}",
            conclusion=f"cleaned external set: {int(table['kept'].sum())} of {n} rows "
                       f"(minus byte or NCC ≥ {tau} counterparts)",
            details={"cleaned_external_rows": int(table["kept"].sum())},
        ))
    return out


def cleaned_external(rel, rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`containment` with ``boundary`` and ``path``: the cleaned external set is the
    rows with ``kept`` True."""
    table = containment(rel)
    table.insert(0, "boundary", rel.boundary.name)
    table.insert(2, "path", rows.set_index("row")["path"].reindex(table["row"]).to_numpy())
    return table
