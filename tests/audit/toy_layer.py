"""A toy layer that owns its whole reading in one module: its option, its records, its
``--fail-on`` metric, its verdict line and its issue-table column. Nothing in ``splitscope.core``
names it.

It flags the query rows of each split boundary whose file is larger than ``factor`` times the
release's median file size (``--large-factor``, default 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from splitscope.options import option
from splitscope.records import AuditRecord, LayerResult
from splitscope.records.metrics import Metric, Verdict

NAME = "large_files"
PREDICATE = "larger_than_median"


@dataclass(frozen=True)
class LargeFilesOptions:
    """The toy layer's one option."""

    group: ClassVar[str] = NAME

    factor: float = option(1.0, "Toy layer: a file is large above this many times the median "
                                "file size.", flag="--large-factor")


def large_rows(rows: pd.DataFrame, factor: float = 1.0) -> np.ndarray:
    """Row ids whose file is larger than ``factor`` times the median file size."""
    size = pd.to_numeric(rows["size_bytes"], errors="coerce")
    return rows.loc[size > factor * size.median(), "row"].to_numpy(np.int64)


class LargeFilesLayer:
    name = NAME
    order = 36
    title = "Files larger than the median"
    options = LargeFilesOptions
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("large_file_rate", "share of query rows whose file is larger than the median",
               (NAME,), (PREDICATE,), unit="row"),)

    def run(self, context) -> LayerResult:
        rows = context.scan.rows()
        factor = context.options.large_files.factor
        large = set(large_rows(rows, factor).tolist())
        result = LayerResult(tables={"large_files": pd.DataFrame(
            {"row": sorted(large)}, dtype="int64")})
        for b in context.split_boundaries:
            hit = sum(int(r) in large for r in b.query.rows)
            result.records.append(AuditRecord(
                id=f"{NAME}.{b.name}", layer=NAME, title=f"Large files of {b.name}",
                boundary=b.to_dict(), predicate={"name": PREDICATE, "params": {"factor": factor}},
                unit="row",
                numerator=hit, denominator=b.query.size,
                estimate=hit / b.query.size if b.query.size else None, status="completed"))
        return result

    verdicts: ClassVar[tuple[Verdict, ...]] = (Verdict(NAME, lambda doc: [
        f"{r['numerator']} of {r['denominator']} {r['boundary']['query']['name']} rows are "
        "larger than the median file." for r in doc["records"]
        if r["layer"] == NAME and r["status"] == "completed"]),)

    def issue_columns(self, ids: pd.Index, tables, rows) -> pd.DataFrame:
        large = set(tables["large_files"]["row"].tolist())
        return pd.DataFrame({"large_file": pd.array([i in large for i in ids], dtype="boolean")},
                            index=ids)
