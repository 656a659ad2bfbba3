"""The image-quality records (METHODS §4.6): one per flag, with its rate per split × class, and
one of the flags' association with the label."""

from __future__ import annotations

from typing import Any

import numpy as np

from splitscope.provenance.checks import scan_rows
from splitscope.provenance.predicates import QUALITY_ASSOCIATION, QUALITY_LAYER, QUALITY_PREFIX
from splitscope.records import AuditRecord, LayerResult, Uncertainty, not_run_record
from splitscope.records.format import percent
from splitscope.records.inputs import release_inputs
from splitscope.threads import blas_within_workers


@blas_within_workers
def audit_quality(scan: Any, params: Any = None, *, workers: int | None = None) -> LayerResult:
    """Image-quality records and the per-row list ``quality`` (METHODS §4.6): one record per
    flag (rate over the assessed rows, with every split × class cell in ``details`` and in the
    conclusion) and one record of each flag's association with the label.

    Parameters
    ----------
    scan : Scan or DataFrame
        A finished scan, or its row table (``Scan.rows()``).
    params : QualityParams, optional
        Thresholds (default :class:`splitscope.provenance.options.QualityParams`).
    workers : int, optional
        BLAS/OpenMP threads at most (the run's ``workers``; default: the pools as they are).
    """
    from splitscope.provenance.options import QualityParams
    from splitscope.provenance.quality import (
        FLAGS,
        flag_label_association,
        quality_rates,
        quality_table,
    )

    rows, _ = scan_rows(scan)
    inputs = release_inputs(rows)
    params = params or QualityParams()
    out = LayerResult()
    if "intensity_mean" not in rows.columns:
        out.records.append(not_run_record(QUALITY_LAYER, "not assessed", "no image statistics: scan the release with this version (splitscope scan)", id="quality.flags", title="Image quality flags", inputs=inputs))
        return out
    table, rules = quality_table(rows, params)
    rates = quality_rates(table)
    out.tables["quality"] = table
    labels = table["label"].astype("string")
    for f in FLAGS:
        col = table[f.name]
        assessed = int(col.notna().sum())
        flagged = int(col.fillna(False).sum())
        rule = rules[f.name]["rule"]
        cells = rates[rates["flag"] == f.name]
        said = "; ".join(
            f"{percent(c.rate)} of {c.split}/{c.label} ({c.flagged:,} of {c.assessed:,} rows)"
            if c.assessed else f"{c.split}/{c.label}: no row assessed"
            for c in cells.itertuples())
        rid = f"quality.{f.name}"
        status = "completed" if assessed == len(table) else "partial"
        if not assessed:
            out.records.append(not_run_record(QUALITY_LAYER, "not applicable", f"no row has the score of this flag ({f.score})", id=rid, title=f"Image quality: {f.name.replace('_', ' ')}", inputs=inputs))
            continue
        out.records.append(AuditRecord(
            id=rid, layer=QUALITY_LAYER, title=f"Image quality: {f.name.replace('_', ' ')} ({rule})",
            predicate={"name": f"{QUALITY_PREFIX}{f.name}",
                       "params": {**params.to_dict(), **{k: v for k, v in rules[f.name].items()
                                                        if k != "rule"}, "rule": rule}},
            unit="row", numerator=flagged, denominator=assessed,
            coverage={"traceable": assessed, "total": len(table),
                      "share": assessed / len(table) if len(table) else None},
            class_support={str(k): int(v) for k, v in
                           labels.fillna("(no label)").value_counts().sort_index().items()},
            scope=(f"every row of the release whose score is defined ({assessed:,} of "
                   f"{len(table):,}); rates per split × class in details.by_split_class"),
            conclusion=f"{flagged:,} of {assessed:,} rows are {f.name.replace('_', ' ')} "
                       f"({rule}): {said}",
            unresolved=("a flag describes the stored image, not whether it is unusable for "
                        "diagnosis; thresholds are stated, not tuned to this release"),
            status=status,
            reason=None if status == "completed" else
            f"{len(table) - assessed:,} row(s) without the score (not decoded, or no size)",
            inputs=inputs, outputs=["quality"],
            details={"score": f.score, "by_split_class": cells.drop(columns="flag")
                     .to_dict(orient="records")}))
    out.records.append(_quality_association_record(table, params, inputs,
                                                    flag_label_association))
    return out


def _quality_association_record(table, params, inputs, association) -> AuditRecord:
    rid, title = "quality.flag_label_association", "Image quality flags × label (Cramér's V)"
    if table["label"].dropna().nunique() < 2:
        return not_run_record(QUALITY_LAYER, "not applicable", "fewer than two labels in the release", id=rid, title=title, inputs=inputs)
    assoc = association(table)
    v = assoc["cramers_v"].astype(float)
    measured = assoc[np.isfinite(v)]
    rows = int(assoc["rows"].max()) if len(assoc) else 0
    if measured.empty:
        best, conclusion = None, ("no flag varies across the labelled rows, so no flag can "
                                  "tell the classes apart")
    else:
        best = float(measured["cramers_v"].max())
        strong = measured[measured["cramers_v"] >= params.association_v] \
            .sort_values("cramers_v", ascending=False)
        if strong.empty:
            top = measured.loc[measured["cramers_v"].idxmax()]
            conclusion = (f"no flag's rate differs strongly between classes (largest Cramér's "
                          f"V {top['cramers_v']:.3f}, {top['flag']}; shortcut hint from V ≥ "
                          f"{params.association_v:g})")
        else:
            conclusion = "; ".join(
                f"{r.flag} differs strongly between classes (Cramér's V {r.cramers_v:.3f}: "
                + ", ".join(f"{percent(x)} of {lab}" for lab, x in r.rate_by_label.items())
                + ")" for r in strong.itertuples()) + (
                "; a model can use such a flag as a shortcut: check whether the class "
                "difference is the finding or how the images were made")
    return AuditRecord(
        id=rid, layer=QUALITY_LAYER, title=title,
        predicate={"name": QUALITY_ASSOCIATION,
                   "params": {"statistic": "Cramér's V, Pearson χ² without continuity "
                              "correction", "association_v": params.association_v}},
        unit="row", denominator=rows,
        coverage={"traceable": rows, "total": len(table),
                  "share": rows / len(table) if len(table) else None},
        estimate=best,
        uncertainty=Uncertainty(kind="none: a descriptive statistic of the census", level=None),
        scope="labelled rows whose flag is defined, per flag; the estimate is the largest V",
        conclusion=conclusion,
        unresolved="association is not causation: a class may legitimately differ in quality",
        status="completed", inputs=inputs, outputs=["quality"],
        details={"flags": assoc.to_dict(orient="records")})
