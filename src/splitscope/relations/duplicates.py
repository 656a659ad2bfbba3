"""The identity and near-duplicate audit (METHODS §1, §2): one entry point over a scan.

:func:`audit_duplicates` runs, for every boundary, the identity census (bytes, names, decoded
pixels) and every near-duplicate predicate (hash rules, NCC with its counterpart rules,
optionally the dihedral variants), attaches a negative control where one is given, and returns
one :class:`~splitscope.records.AuditRecord` per predicate × boundary plus the row-keyed tables
(contaminated rows per predicate, pair table, deduplicated splits, identity groups).
With user-supplied embeddings (METHODS §2.4) one more predicate, ``embedding_cosine`` (nearest
reference by cosine similarity reaches the embedding threshold), is measured per boundary;
without them it is not measured and has no record (like the optional dihedral predicates).
:func:`audit_external` runs it on the cross-corpus boundary (METHODS §2.9).

Counting unit of every rate: *affected query row*; denominator: all query rows of the boundary.
Query rows whose file could not be read (no digest, hash or thumbnail; an empty file is one of
them, never a byte copy of another empty file) are in the denominator and counted as not
assessed (status ``partial``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, Population
from splitscope.errors import InputError
from splitscope.features.failures import identity_rows
from splitscope.options import RunOptions
from splitscope.records import AuditRecord, LayerResult
from splitscope.records.ids import boundary_slug
from splitscope.relations.ann import check_index
from splitscope.relations.boundary_relations import (
    boundary_relations,
    geometry_of,
    resolve_boundaries,
)
from splitscope.relations.controls import control_rate
from splitscope.relations.duplicate_records import (
    comparison_records,
    dedup_record,
    predicate_records,
    transform_records,
    within_record,
)
from splitscope.relations.embedding import embedding_source
from splitscope.relations.identity import no_bytes, within_copies
from splitscope.relations.label_conflicts import (
    conflict_records,
    label_conflicts,
    union_record,
    within_conflict_record,
)
from splitscope.relations.ncc import DEFAULT_EMBEDDING_TAU
from splitscope.relations.options import SearchOptions
from splitscope.relations.predicates import (
    COMPARISON_PAIRS,
    DEDUP_PREDICATES,
    EXTERNAL_LAYER,
    SCREENS,
)
from splitscope.threads import blas_within_workers


def _control_boundary(control, scan) -> tuple[object, Boundary] | None:
    """(scan, boundary) of a control given as a Scan, a Boundary on ``scan``, or a pair."""
    if control is None:
        return None
    if isinstance(control, Boundary):
        return scan, control
    if isinstance(control, tuple) and len(control) == 2:
        cscan, cb = control
        return cscan, resolve_boundaries(cscan.manifest, cb)[0]
    if hasattr(control, "rows") and hasattr(control, "manifest"):
        return control, resolve_boundaries(control.manifest, None)[0]
    raise InputError("control must be a Scan, a Boundary on the audited scan, or (scan, "
                     "boundary)")


@blas_within_workers
def audit_duplicates(scan, boundaries=None, options: SearchOptions | None = None, *,
                     control=None, out_dir: str | Path | None = None,
                     workers: int | None = None, seed: int = RunOptions.seed, executor=None,
                     embeddings=None, embedding_tau: float = DEFAULT_EMBEDDING_TAU,
                     embedding_index: str = "exact", confirm: bool = True,
                     dedup_predicates=DEDUP_PREDICATES,
                     artifacts_manifest: bool = True) -> LayerResult:
    """Identity and near-duplicate audit of a scan (METHODS §1, §2).

    Parameters
    ----------
    scan : Scan
        From :func:`splitscope.features.scanning.scan` (``rows()``, ``thumbs()``, ``params``).
    boundaries : list, optional
        ``Boundary`` objects, ``(query, reference)`` selector pairs or ``"test->train"``
        strings (see :func:`resolve_boundaries`; default test → train, val → train).
    control : Scan, Boundary or (Scan, boundary), optional
        Negative control (METHODS §2.5): each predicate also runs on the control boundary and
        its flag rate is recorded beside the audited one; ``unreliable`` when it exceeds
        ``options.control_bound``.
    options : SearchOptions, optional
        τ (the sweep 0.90 … 0.999 is always reported), the hash radius k, dihedral matching
        (METHODS §2.8), the transform-sensitivity sample (METHODS §2.7: ``transforms``
        reference images drawn with ``seed``; 0 skips it), the pairs listed per query row, the
        negative control's bound (a predicate flagging more of the control is marked
        unreliable), SSIM on the listed pairs and the NCC search method (default: the
        method's, :class:`~splitscope.relations.options.SearchOptions`).
    out_dir : path-like, optional
        Write the exports (see :func:`splitscope.relations.exports.write_exports`).
    artifacts_manifest : bool
        With ``out_dir``: also write ``artifacts.json`` there (default; the full audit writes
        one for its whole folder instead).
    confirm : bool
        Confirm every crossing SHA-256 group byte for byte.
    workers : int, optional
        Threads of the hash and NCC searches, and of the BLAS/OpenMP pools for the whole
        audit (default: every core); the results do not depend on it.
    dedup_predicates : sequence of str
        Predicates whose flagged query rows the deduplicated splits remove.
    seed : int
        Seed of the transform-sensitivity sample and of the comparison pairs.
    embeddings : path-like, ndarray or DataFrame, optional
        User-supplied embeddings (METHODS §2.4; see :func:`embedding_source`): adds the
        ``embedding_cosine`` predicate on every boundary (and on a control on the same scan).
    embedding_tau : float
        Cosine threshold of ``embedding_cosine``; model-dependent, always reported with the
        sweep 0.80 … 0.999.
    embedding_index : {"exact", "faiss-ivf"}
        How the embedding search finds candidates: the exact blocked search (default), or a
        FAISS IVF-Flat index (``[scale]`` extra) whose candidates are re-checked exactly
        (:mod:`splitscope.relations.ann`); recorded with the predicate's parameters.
    executor : Executor, optional
        With a :class:`~splitscope.features.dask_executor.DaskExecutor`, the NCC search of
        every boundary (and of the control) is partitioned over its cluster
        (:func:`splitscope.relations.partitioned.scan_searcher`; same result); the tasks read
        the thumbnails from the workspace, which every worker must see. Otherwise local.

    Returns
    -------
    LayerResult
        Records (layer ``duplicates``, section ``identity`` or ``near_duplicate``) and
        tables ``contaminated`` (copies and near twins), ``screened`` (the hits of the
        hash rules and equal file names, no evidence alone: ``predicates.SCREENS``), ``pairs``, ``dedup_splits``, ``identity_groups``, ``within_copies``, ``query_flags``
        (and ``control_query_flags`` with a control);
        ``containment`` (cross-corpus boundaries: every query row, ``kept`` = in the cleaned
        external set), ``comparison_pairs`` and ``transform_sensitivity`` when measured;
        ``embedding_pairs`` (pairs with cosine >= ``embedding_tau``) with embeddings.
    """
    o = options or SearchOptions()
    rows = identity_rows(scan.rows())  # an empty file is a failure, never a copy
    geometry = geometry_of(scan)
    bounds = resolve_boundaries(scan.manifest, boundaries)
    emb = _embedding_inputs(rows, embeddings, embedding_tau, embedding_index)
    relations = [boundary_relations(rows, scan.thumbs, b, o, geometry=geometry,
                                    confirm=confirm, workers=workers,
                                    searcher=_searcher(executor, scan), **emb) for b in bounds]
    control_info, crel, cscan = _control_relations(control, scan, o, confirm=confirm,
                                                   workers=workers, executor=executor, emb=emb)
    records: list[AuditRecord] = []
    conflict_tables = []
    for rel in relations:
        recs, conflicts = _boundary_records(rel, rows, o, geometry, control_info)
        records.extend(recs)
        conflict_tables.append(conflicts)
    within_all, recs, conflicts = _within_populations(rows)
    records.extend(recs)
    conflict_tables.extend(conflicts)
    comparison_tables = []
    for rel in relations:
        recs, table = comparison_records(rel, rows, scan.thumbs, o.tau, geometry, seed)
        records.extend(recs)
        if table is not None:
            comparison_tables.append(table)
    transform_table = None
    if o.transforms > 0:
        recs, transform_table = transform_records(rows, bounds, o.transforms, seed, o.tau,
                                                   o.radius, geometry)
        records.extend(recs)
    from splitscope.relations.containment import cleaned_external, containment_records
    containment_tables = []
    for rel in relations:
        recs = containment_records(rel, rows, o.tau)
        records.extend(recs)
        if recs:
            containment_tables.append(cleaned_external(rel, rows))
    tables = _tables(relations, rows, within_all, conflict_tables, dedup_predicates)
    records.extend(dedup_record(b, tables["dedup_splits"], dedup_predicates, rows)
                   for b in bounds)
    if crel is not None:  # per control query row, e.g. for the control's ρ distribution
        from splitscope.relations.exports import query_flags_table
        tables["control_query_flags"] = query_flags_table([crel], cscan.rows())
    if containment_tables:
        tables["containment"] = pd.concat(containment_tables, ignore_index=True)
    if comparison_tables:
        tables[COMPARISON_PAIRS] = pd.concat(comparison_tables, ignore_index=True)
    if transform_table is not None:
        tables["transform_sensitivity"] = transform_table
    if emb:
        tables["embedding_pairs"] = pd.concat([rel.embedding["pairs"] for rel in relations],
                                              ignore_index=True)
    result = LayerResult(records, tables)
    if out_dir is not None:
        from splitscope.relations.exports import write_exports
        write_exports(result, out_dir, artifacts_manifest=artifacts_manifest)
    return result


def _embedding_inputs(rows: pd.DataFrame, embeddings, embedding_tau: float,
                      embedding_index: str) -> dict:
    """The keywords of :func:`boundary_relations` that add the embedding predicate (none
    without embeddings)."""
    if embeddings is None:
        return {}
    if not 0 < float(embedding_tau) <= 1:
        raise InputError(f"embedding_tau must be in (0, 1]; got {embedding_tau}")
    matrix, emb_params = embedding_source(embeddings, rows)
    emb_params["index"] = check_index(embedding_index)
    return {"embeddings": matrix, "embedding_tau": float(embedding_tau),
            "embedding_params": emb_params}


def _control_relations(control, scan, o: SearchOptions, *, confirm: bool, workers, executor,
                       emb: dict):
    """The negative control's relations and each predicate's flag rate on it (METHODS §2.5):
    ``(control info, relations, control scan)``, or three ``None`` without a control."""
    cb = _control_boundary(control, scan)
    if cb is None:
        return None, None, None
    cscan, cbound = cb
    # the embeddings describe the audited scan's rows: a control on it uses them too
    crel = boundary_relations(cscan.rows(), cscan.thumbs, cbound,
                              dataclasses.replace(o, ssim=False),
                              geometry=geometry_of(cscan), confirm=confirm, workers=workers,
                              searcher=_searcher(executor, cscan),
                              **(emb if cscan is scan else {}))
    info = {"boundary": cbound.to_dict(),
            "corpus": sorted(set(cscan.manifest["corpus"].dropna().astype(str))),
            "geometry": geometry_of(cscan),
            "rates": {p: control_rate(crel.flags[p], bound=o.control_bound)
                      for p in crel.predicates()}}
    return info, crel, cscan


def _boundary_records(rel, rows: pd.DataFrame, o: SearchOptions, geometry: dict,
                      control_info) -> tuple[list[AuditRecord], pd.DataFrame]:
    """One boundary's predicate, union and label-conflict records, and its conflict table."""
    records = predicate_records(rel, rows, o.tau, o.radius, geometry, control_info)
    slug = boundary_slug(rel.boundary)
    records.append(union_record(rel, rows, slug))
    rates = control_info["rates"] if control_info is not None else None
    conflicts = label_conflicts(rows, rel.boundary, rel.near.pairs, rates)
    records.extend(conflict_records(rel, rows, conflicts, tau=o.tau, radius=o.radius,
                                    geometry=geometry, slug=slug, control_rates=rates))
    return records, conflicts


def _within_populations(rows: pd.DataFrame):
    """Copies and label conflicts inside each split (or the whole release without splits):
    ``(within-copies table, records, conflict tables)``."""
    within_tables, records, conflict_tables = [], [], []
    for split in _splits(rows):
        pop = Population(split, np.sort(rows.loc[rows["split"].astype("string") == split, "row"]
                                        .to_numpy(np.int64))) if split != "*" else \
            Population("*", np.sort(rows["row"].to_numpy(np.int64)))
        arrays = bool(len(pop.rows)) and bool(no_bytes(rows[rows["row"].isin(pop.rows)]).all())
        # pixel arrays have no bytes: their copies are equal decoded pixels
        key = "pixel_xxh128" if arrays else "sha256"
        copies = within_copies(rows, pop, key=key)
        copies.insert(0, "population", split)
        within_tables.append(copies)
        assessed = int(rows.loc[rows["row"].isin(pop.rows), key].notna().sum())
        records.append(within_record(copies, pop, arrays, assessed))
        inside = Boundary(pop, pop)
        conflicts = label_conflicts(rows, inside, None)
        conflict_tables.append(conflicts)
        records.append(within_conflict_record(inside, rows, conflicts, boundary_slug(inside)))
    within_all = pd.concat(within_tables, ignore_index=True) if within_tables else pd.DataFrame()
    return within_all, records, conflict_tables


def _tables(relations, rows: pd.DataFrame, within_all: pd.DataFrame, conflict_tables,
            dedup_predicates) -> dict[str, pd.DataFrame]:
    """The layer's row-keyed tables (see :func:`audit_duplicates`)."""
    from splitscope.relations.exports import (
        contaminated_table,
        dedup_splits,
        identity_group_table,
        pair_table,
        query_flags_table,
    )
    flagged = contaminated_table(relations, rows)
    screened = flagged["predicate"].isin(SCREENS).to_numpy(bool)
    return {
        "contaminated": flagged[~screened].reset_index(drop=True),
        "screened": flagged[screened].reset_index(drop=True),
        "pairs": pair_table(relations),
        "dedup_splits": dedup_splits(rows, relations, within_all, dedup_predicates),
        "identity_groups": identity_group_table(relations),
        "within_copies": within_all,
        "query_flags": query_flags_table(relations, rows),
        "label_conflicts": pd.concat(conflict_tables, ignore_index=True),
    }


def _searcher(executor, scan):
    """The partitioned NCC search over the executor's Dask cluster; else the local search
    with the saved reference index of the scan's workspace."""
    client = getattr(executor, "search_client", None)
    if client is None:
        return _local_searcher(scan)
    from splitscope.relations.partitioned import scan_searcher

    return scan_searcher(client, scan)


def _local_searcher(scan):
    """:func:`~splitscope.relations.ncc.ncc_search` over thumbnail rows of ``scan`` with the
    saved index of its feature store (rows given as arrays are searched without one); None
    for a scan-like object without a workspace (nowhere to keep an index)."""
    if getattr(scan, "workspace", None) is None or getattr(scan, "params", None) is None:
        return None
    from splitscope.relations.ncc import ncc_search
    from splitscope.relations.ncc_core import ThumbnailRows
    from splitscope.relations.saved_index import scan_references

    def search(query, reference, **options):
        refs = (scan_references(scan, reference.rows)
                if isinstance(reference, ThumbnailRows) else None)
        return ncc_search(query, reference, references=refs, **options)

    return search


def _splits(rows: pd.DataFrame) -> list[str]:
    splits = sorted(rows["split"].dropna().astype(str).unique().tolist())
    return splits or ["*"]


def audit_external(audited, external, external_root: str | Path, out_dir: Path,
                   options: SearchOptions | None = None, *,
                   roots: Mapping[str, str] | None = None, **keywords):
    """Identity and near-duplicate findings of the cross-corpus boundary only (``options``
    and ``keywords`` as :func:`audit_duplicates`). ``roots``: per corpus, the release root
    the written manifest names files relative to (:mod:`splitscope.records.paths`; the
    audit's); without it, files are named where they lie.

    Returns ``(result, combined, boundary)``. Copies inside each split are the within-corpus
    audit's, so only the cross-corpus boundary's completed records are kept (marked ``kind:
    cross-corpus``); the tables are named ``external/<table>`` and their row ids are those of
    ``out_dir/manifest.csv`` (audited rows first, then the external corpus).
    """
    from splitscope.relations.external import combine_scans, external_boundary

    name = f"external:{Path(external_root).name}"
    combined = combine_scans(audited, external, other_corpus=name)
    boundary = external_boundary(audited.manifest, combined, name)
    out_dir.mkdir(parents=True, exist_ok=True)
    from splitscope.records.exports import write_csv
    from splitscope.records.paths import published_rows

    write_csv(published_rows(combined.manifest, roots or {}), out_dir / "manifest.csv")
    found = audit_duplicates(combined, [boundary], options, control=None, out_dir=out_dir,
                             artifacts_manifest=False, **keywords)
    kept = [r for r in found.records
            if (r.boundary or {}).get("name") == boundary.name or r.status != "completed"]
    for rec in kept:
        rec.layer = EXTERNAL_LAYER
        if rec.boundary is not None:
            rec.boundary = {**rec.boundary, "kind": "cross-corpus"}
    result = LayerResult(kept, {f"external/{k}": v for k, v in found.tables.items()})
    return result, combined, boundary
