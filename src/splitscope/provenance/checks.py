"""The provenance checks over a scan (METHODS §4): :func:`audit_provenance` runs the
header-only probe, the image-statistics probe, the source–label association and the partition
classifier, and returns their records and row tables (keyed by the manifest's ``row``). A check
that cannot run on the input becomes a record with status ``not applicable`` (or ``not
assessed``) and the reason."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, boundaries_or_default
from splitscope.errors import InputError
from splitscope.memory import trim_heap
from splitscope.options import RunOptions
from splitscope.provenance.distinct import distinct_content, expand_to_rows
from splitscope.provenance.header_probe import FIT_MAX_ROWS
from splitscope.provenance.options import ProvenanceOptions
from splitscope.provenance.partition_records import partition_records
from splitscope.provenance.probe_records import (
    association_record,
    header_records,
    image_stats_records,
)
from splitscope.provenance.stats import run_steps, shared_arrays, single_threaded
from splitscope.records import LayerResult
from splitscope.records.inputs import release_inputs
from splitscope.threads import blas_within_workers

#: pool rows (one per file and side) above which the probes and the partition classifier run
#: one after another rather than together (:func:`audit_provenance`): together, each holds its
#: matrices while the others' folds run (18 GB in the auditing process at a million rows);
#: every fold is seeded on its own, so the records are the same either way
TOGETHER_MAX_ROWS = 200_000


def scan_rows(scan: Any) -> tuple[pd.DataFrame, Any]:
    if isinstance(scan, pd.DataFrame):
        return scan, None
    if hasattr(scan, "rows"):
        return scan.rows(), scan
    raise InputError("audit_provenance needs a Scan (splitscope.features.scanning) or a row table")


@blas_within_workers
def audit_provenance(
    scan: Any,
    boundaries: Sequence[Boundary] | None = None,
    *,
    seed: int = RunOptions.seed,
    n_resamples: int = RunOptions.resamples,
    folds: int = ProvenanceOptions.folds,
    header: bool = True,
    image_stats: bool = True,
    association: bool = True,
    partition: bool = True,
    embeddings: Any = None,
    classifier: str = "logistic",
    internal_share: float = 0.2,
    max_partition_rows: int | None = None,
    importance_repeats: int = 5,
    include_name_fields: bool = False,
    fit_max_rows: int | None = FIT_MAX_ROWS,
    workers: int | None = None,
) -> LayerResult:
    """Provenance-layer records and tables (METHODS §4).

    Parameters
    ----------
    scan : Scan or DataFrame
        A finished scan (header columns and thumbnails); a row table with header columns
        works for the header probe and the association (the partition classifier then needs
        ``embeddings``).
    boundaries : list of Boundary, optional
        Default: the release's test → train and val → train. The within-pool probe pools the
        rows of all boundaries (every labelled row when there is none).
    max_partition_rows : int, optional
        Seeded subsample of each boundary's rows for the partition classifier (stratified by
        side), recorded in the record; default all rows.
    fit_max_rows : int, optional
        Rows each model of the header and image-statistics probes and of the partition
        classifier is fit on at most (a seeded sample stratified by class, or by side, and
        spread over groups; every held-out row is still scored; recorded as ``fit_max_rows``
        and ``fit_rows``); ``None`` fits on all rows.
    embeddings : ndarray or path, optional
        Vectors for the partition classifier instead of the thumbnail features.
    workers : int, optional
        At most this many fold worker processes at a time, and BLAS/OpenMP threads in this
        process (the fits themselves run on one); default: by cost, up to every core. Every
        fold is seeded on its own, so the records do not depend on it.
    """
    rows, sc = scan_rows(scan)
    bounds = boundaries_or_default(rows, boundaries)
    inputs = release_inputs(rows)
    result = LayerResult()
    has_label = "label" in rows.columns and rows["label"].notna().any()
    if bounds:
        pool_ids = np.unique(np.concatenate([np.r_[b.query.rows, b.reference.rows]
                                             for b in bounds]))
        in_pool = rows["row"].isin(pool_ids)
        pool = rows if in_pool.all() else rows[in_pool]  # no copy of a pool of every row
    else:
        pool = rows
    # rows that name one file (with one label, on one side) count once (METHODS §4.7): the
    # probes and the partition classifier run on one row per file and side, and their
    # row tables are expanded to every row at the end
    distinct = distinct_content(rows, pool, bounds) if embeddings is None else None
    # the association is a census of two columns: the rest of the pool is not kept for it
    census_pool = pool[[c for c in ("source", "label") if c in pool.columns]]
    if distinct is not None:
        rows, pool = distinct["rows"], distinct["pool"]
    # the probes and the partition classifier are step generators run together, so that all
    # their fits share the worker processes (run_steps); records keep the order below
    steps: dict[str, Any] = {}
    if header:
        steps["header"] = header_records(rows, pool, bounds, has_label, seed=seed,
                                          n_resamples=n_resamples, folds=folds,
                                          repeats=importance_repeats,
                                          include_name_fields=include_name_fields,
                                          inputs=inputs, fit_max_rows=fit_max_rows)
    if image_stats:
        steps["image_stats"] = image_stats_records(rows, pool, bounds, has_label, seed=seed,
                                                    n_resamples=n_resamples, folds=folds,
                                                    repeats=importance_repeats, inputs=inputs,
                                                    fit_max_rows=fit_max_rows)
    if partition:
        steps["partition"] = partition_records(
            rows, sc, bounds, embeddings, seed=seed, n_resamples=n_resamples, folds=folds,
            classifier=classifier, internal_share=internal_share, max_rows=max_partition_rows,
            inputs=inputs, fit_max_rows=fit_max_rows,
            distinct=None if distinct is None else distinct["side_ids"])
    # above TOGETHER_MAX_ROWS pool rows they run one after another instead, so that one
    # probe's matrices are held at a time, not all of them at once
    parts = [list(steps)] if len(pool) <= TOGETHER_MAX_ROWS else [[k] for k in steps]
    done: dict[str, Any] = {}
    # with fold workers, the probes' matrices are mapped from files they share with them
    with single_threaded(1), shared_arrays(workers is None or workers > 1):
        for names in parts:
            done.update(zip(names, run_steps([steps.pop(k) for k in names], limit=workers)))
            if len(parts) > 1:  # the next probe starts from what is still referenced
                trim_heap()
    if association:  # a census of the rows, not a fit
        done["association"] = association_record(census_pool, inputs)
    for part in ("header", "image_stats", "association", "partition"):
        if part in done:
            result.extend(done[part])
    if distinct is not None:
        expand_to_rows(result, distinct)
    return result
