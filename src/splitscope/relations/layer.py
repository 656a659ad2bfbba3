"""The identity and near-duplicate audit (METHODS §1, §2): one entry point over a scan.

:func:`audit_duplicates` runs, for every boundary, the identity census (bytes, names, decoded
pixels) and every near-duplicate predicate (hash rules, NCC with its counterpart rules,
optionally the dihedral variants), attaches a negative control where one is given, and returns
one :class:`~splitscope.records.AuditRecord` per predicate × boundary plus the row-keyed tables
(contaminated rows per predicate, pair table, deduplicated splits, identity groups).
With user-supplied embeddings (METHODS §2.4) one more predicate, ``embedding_cosine`` (nearest
reference by cosine similarity reaches the embedding threshold), is measured per boundary;
without them it is not measured and has no record (like the optional dihedral predicates).

Counting unit of every rate: *affected query row*; denominator: all query rows of the boundary.
Query rows whose file could not be read (no digest, hash or thumbnail) are in the denominator
and counted as not assessed (status ``partial``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, Population, release_boundaries
from splitscope.boundary import boundary as make_boundary
from splitscope.errors import InputError
from splitscope.records import AuditRecord, LayerResult
from splitscope.records.ids import boundary_slug
from splitscope.relations import predicates, reading
from splitscope.relations.ann import check_index, search_params
from splitscope.relations.controls import DEFAULT_CONTROL_BOUND, control_rate
from splitscope.relations.hashes import DEFAULT_RADIUS
from splitscope.relations.identity import (
    NO_BYTES_REASON,
    IdentityCensus,
    basename_matches,
    identity_census,
    no_bytes,
    pixel_identity,
    rate_breakdown,
    side,
    within_copies,
)
from splitscope.relations.label_conflicts import (
    conflict_records,
    label_conflicts,
    union_record,
    within_conflict_record,
)
from splitscope.relations.ncc import (
    DEFAULT_EMBEDDING_TAU,
    DEFAULT_TAU,
    EMBEDDING_SWEEP,
    embedding_search,
)
from splitscope.relations.near_duplicate import (
    NearDuplicates,
    _exclude_positions,
    near_duplicates,
)

IDENTITY_PREDICATES = ("sha256", "basename", "pixel_xxh128")
#: predicates that need file bytes or a file name: not applicable to rows given as pixel arrays
NEEDS_BYTES = ("sha256", "basename")

#: measured only when embeddings are supplied (METHODS §2.4)
EMBEDDING_PREDICATE = "embedding_cosine"
#: predicates whose query rows a deduplicated split removes by default
DEDUP_PREDICATES = ("sha256", "pixel_xxh128", "ncc_nearest", "ncc_nearest_dihedral")

_TITLES = {
    "sha256": "Byte-identical copies (SHA-256, confirmed byte for byte)",
    "basename": "Basename matches (filename only)",
    "pixel_xxh128": "Decoded-pixel identity with different bytes (re-encodes)",
    "hash_screen": "Hash screen (min d_p ≤ k and min d_d ≤ k)",
    "hash_joint": "Hash joint rule (one reference with d_p ≤ k and d_d ≤ k)",
    "hash_sum": "Hash sum rule (one reference with d_p + d_d ≤ k)",
    "hash_exact_phash": "Exact pHash (d_p = 0)",
    "ncc_nearest": "NCC, nearest counterpart (max ρ ≥ τ)",
    "ncc_first_candidate": "NCC, first exact-pHash candidate by path (ρ ≥ τ)",
    "ncc_any_candidate": "NCC, any exact-pHash candidate (ρ ≥ τ)",
    "embedding_cosine": "Embedding cosine similarity, nearest counterpart (max cos ≥ τ)",
}


@dataclass
class BoundaryRelations:
    """Everything measured on one boundary: the identity census, basename and pixel identity,
    and the near-duplicate predicates. ``flags`` has one row per query row and one boolean
    column per predicate (``<NA>`` = not assessed). ``embedding`` (when embeddings were
    supplied): the embedding predicate's parameters, sweep, counts and pairs."""

    boundary: Boundary
    census: IdentityCensus
    basenames: pd.DataFrame
    pixels: pd.DataFrame | None
    near: NearDuplicates
    flags: pd.DataFrame = field(default_factory=pd.DataFrame)
    embedding: dict | None = None

    def predicates(self) -> list[str]:
        return [p for p in (*IDENTITY_PREDICATES, *self.near.predicates(), EMBEDDING_PREDICATE)
                if p in self.flags]


def geometry_of(scan) -> dict:
    """Thumbnail geometry of a scan: ``thumb_size``, ``interpolation``, ``mode``."""
    params = getattr(scan, "params", None)
    meta = getattr(scan, "meta", {}) or {}
    out = {}
    for key, default in (("thumb_size", 96), ("interpolation", "bicubic"), ("mode", "exact")):
        value = getattr(params, key, None) if params is not None else None
        if value is None:
            value = meta.get(key, default)
        out[key] = value
    return out


def resolve_boundaries(manifest: pd.DataFrame, boundaries=None) -> list[Boundary]:
    """Boundaries from ``Boundary`` objects, ``(query, reference)`` selector pairs or
    ``"query->reference"`` strings; default: the release's test → train and val → train, or,
    when the release has no such splits, every row against itself (copies within the set)."""
    if boundaries is None:
        return release_boundaries(manifest)
    if isinstance(boundaries, (Boundary, str, tuple)):
        boundaries = [boundaries]
    out = []
    for b in boundaries:
        if isinstance(b, Boundary):
            out.append(b)
        elif isinstance(b, tuple) and len(b) == 2:
            out.append(make_boundary(manifest, b[0], b[1]))
        elif isinstance(b, str) and ("->" in b or "→" in b):
            qsel, rsel = re.split(r"->|→", b, maxsplit=1)
            out.append(make_boundary(manifest, qsel.strip(), rsel.strip()))
        else:
            raise InputError(f"cannot read boundary {b!r}; use 'test->train', a (query, "
                             "reference) pair of selectors, or a Boundary")
    if not out:
        raise InputError("no boundary given")
    return out


def boundary_relations(rows: pd.DataFrame, thumbs, boundary: Boundary, *,
                       tau: float = DEFAULT_TAU, radius: int = DEFAULT_RADIUS,
                       geometry: dict | None = None, dihedral: bool = False,
                       confirm: bool = True, ssim: bool = True,
                       workers: int | None = None, embeddings: np.ndarray | None = None,
                       embedding_tau: float = DEFAULT_EMBEDDING_TAU,
                       embedding_params: dict | None = None,
                       searcher=None) -> BoundaryRelations:
    """Identity and near-duplicate relations of one boundary (see module docstring).

    ``embeddings``, when given, is an (len(rows), d) array aligned with ``rows`` (NaN lines for
    rows without an embedding); it adds the ``embedding_cosine`` predicate at
    ``embedding_tau``, recorded with ``embedding_params`` (source file, digest, dimension).
    ``searcher`` runs the NCC search in place of the local one (see :func:`near_duplicates`).
    """
    census = identity_census(rows, boundary, confirm=confirm)
    names = basename_matches(rows, boundary)
    pixels = pixel_identity(rows, boundary) if "pixel_xxh128" in rows.columns else None
    near = near_duplicates(rows, thumbs, boundary, tau=tau, radius=radius, geometry=geometry,
                           dihedral=dihedral, ssim=ssim, workers=workers, searcher=searcher)
    q = side(rows, boundary.query)
    flags = pd.DataFrame({"row": q["row"].to_numpy(np.int64)})
    has_digest = q["sha256"].notna().to_numpy()
    for name, hit_rows in (("sha256", census.affected["row"]),
                           ("basename", names.loc[names["basename_match"], "row"]),
                           ("pixel_xxh128", pixels["row"] if pixels is not None else None)):
        if hit_rows is None:
            continue
        col = pd.array(flags["row"].isin(set(hit_rows)).to_numpy(), dtype="boolean")
        if name == "sha256":
            col[~has_digest] = pd.NA
        if name == "pixel_xxh128":
            col[~q["pixel_xxh128"].notna().to_numpy()] = pd.NA
        if name == "basename":  # a pixel array has no file name to match
            col[no_bytes(q)] = pd.NA
        flags[name] = col
    for p in near.predicates():
        flags[p] = near.flags[p].to_numpy()
    emb = None
    if embeddings is not None:
        emb = embedding_relations(rows, embeddings, boundary, tau=embedding_tau,
                                  index=(embedding_params or {}).get("index", "exact"))
        emb["params"] = {**emb["params"], **(embedding_params or {})}
        flags[EMBEDDING_PREDICATE] = emb.pop("flag")
        for col, values in emb.pop("columns").items():  # counterpart and measure per row
            near.flags[col] = values
    return BoundaryRelations(boundary, census, names, pixels, near, flags, emb)


def embedding_relations(rows: pd.DataFrame, embeddings: np.ndarray, boundary: Boundary, *,
                        tau: float = DEFAULT_EMBEDDING_TAU, index: str = "exact") -> dict:
    """The ``embedding_cosine`` predicate on one boundary (METHODS §2.4).

    Each query row's nearest reference row by cosine similarity of the supplied embeddings
    (:func:`~splitscope.relations.ncc.embedding_search`, exact); the row is flagged when that
    cosine reaches ``tau``. A row whose vector is undefined (zero norm, non-finite, or no
    embedding for its path) is not assessed and never a counterpart; on a boundary of a
    population with itself a row is never its own counterpart. With ``index="faiss-ivf"`` a
    FAISS index gives the candidates (:func:`~splitscope.relations.ann.ivf_embedding_search`,
    each re-checked exactly; its parameters are in ``params``).

    Returns
    -------
    dict
        ``flag`` (boolean array per query row in ``row`` order, ``<NA>`` = not assessed),
        ``columns`` (``embedding_best_cosine``, ``embedding_cosine_counterpart`` (row, -1),
        ``embedding_undefined``), ``sweep`` (:data:`EMBEDDING_SWEEP`), ``pairs`` (row-keyed
        pairs with cosine >= tau), ``undefined_query_rows``, ``params``.
    """
    vectors = np.asarray(embeddings)
    if vectors.ndim != 2 or len(vectors) != len(rows):
        raise InputError(f"embeddings must be one vector per manifest row: got shape "
                         f"{vectors.shape} for {len(rows)} rows")
    q = side(rows, boundary.query)
    r = q if boundary.within else side(rows, boundary.reference)
    at = pd.Index(rows["row"].to_numpy(np.int64))
    q_rows = q["row"].to_numpy(np.int64)
    r_rows = r["row"].to_numpy(np.int64)
    exclude = _exclude_positions(q_rows, r_rows) if boundary.within else None
    search = embedding_search
    if index != "exact":
        from splitscope.relations.ann import ivf_embedding_search as search
    res = search(vectors[at.get_indexer(q_rows)], vectors[at.get_indexer(r_rows)], tau=tau,
                 exclude=exclude)
    assessed = np.isfinite(res.best_cosine)
    flag = pd.array([pd.NA] * len(q_rows), dtype="boolean")
    flag[assessed] = res.best_cosine[assessed] >= tau
    counterpart = np.where(res.best_index >= 0, r_rows[np.maximum(res.best_index, 0)]
                           if r_rows.size else -1, -1).astype(np.int64)
    sweep = res.sweep(EMBEDDING_SWEEP)
    sweep["rows"] = len(q_rows)
    paths = rows.set_index("row")["path"]
    qp = res.pairs["query"].to_numpy(np.int64)
    rp = res.pairs["reference"].to_numpy(np.int64)
    pairs = pd.DataFrame({
        "boundary": boundary.name, "row": q_rows[qp],
        "path": paths.reindex(q_rows[qp]).to_numpy(),
        "reference_row": r_rows[rp], "reference_path": paths.reindex(r_rows[rp]).to_numpy(),
        "cosine": res.pairs["cosine"].to_numpy(np.float32),
        "nearest": counterpart[qp] == r_rows[rp], "tau": tau})
    return {
        "flag": flag,
        "columns": {"embedding_best_cosine": res.best_cosine.astype(np.float32),
                    "embedding_cosine_counterpart": counterpart,
                    "embedding_undefined": res.query_undefined.copy()},
        "sweep": sweep,
        "pairs": pairs,
        "undefined_query_rows": int(res.query_undefined.sum()),
        "unmatched_query_rows": int((~assessed & ~res.query_undefined).sum()),
        "undefined_reference_rows": int(res.reference_undefined.sum()),
        "params": {"tau": tau, "counterpart_rule": "nearest", "similarity": "cosine",
                   "normalisation": res.params["normalisation"],
                   "pairs_total": res.params["pairs_total"],
                   "pairs_truncated": res.params["pairs_truncated"],
                   **search_params(res.params)},
    }


def embedding_source(embeddings, rows: pd.DataFrame) -> tuple[np.ndarray, dict]:
    """Load embeddings aligned with ``rows`` and describe their source.

    ``embeddings`` is what :func:`splitscope.provenance.partition.load_embeddings` reads: an (n, d)
    array or ``.npy`` file in manifest order, or a Parquet/CSV file or DataFrame with a ``path``
    column (the manifest's released path) and the vector. Rows without an embedding get a NaN
    line (not assessed, counted). Returns the matrix and the parameters recorded with the
    predicate: ``source`` (file name), ``source_sha256`` (file digest; None in memory),
    ``dimension``, ``values_sha256`` (digest of the aligned float32 matrix) and
    ``rows_without_embedding`` (all-NaN lines, including paths missing from the table).
    """
    from splitscope.features.embeddings import load_embeddings
    from splitscope.records.model import sha256_file

    if isinstance(embeddings, (str, Path)):
        path = Path(embeddings)
        if not path.is_file():
            raise InputError(f"embeddings file not found: {path}")
        source, digest = path.name, sha256_file(path)
    else:
        source = "in-memory " + ("table" if isinstance(embeddings, pd.DataFrame) else "array")
        digest = None
    matrix = np.ascontiguousarray(load_embeddings(embeddings, rows["path"], missing="nan"),
                                  dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        raise InputError(f"embeddings must be (n, d) with d > 0; got shape {matrix.shape}")
    return matrix, {"source": source, "source_sha256": digest,
                    "dimension": int(matrix.shape[1]),
                    "values_sha256": hashlib.sha256(matrix.tobytes()).hexdigest(),
                    "rows_without_embedding": int(np.isnan(matrix).all(axis=1).sum()),
                    "tau_note": "cosine thresholds are model-dependent: read tau with the "
                                "sweep"}


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


def audit_duplicates(scan, boundaries=None, *, control=None, tau: float = DEFAULT_TAU,
                     radius: int = DEFAULT_RADIUS, dihedral: bool = False,
                     out_dir: str | Path | None = None,
                     control_bound: float = DEFAULT_CONTROL_BOUND, confirm: bool = True,
                     ssim: bool = True, workers: int | None = None,
                     dedup_predicates=DEDUP_PREDICATES, transform_sample: int = 0,
                     seed: int = 0, embeddings=None,
                     embedding_tau: float = DEFAULT_EMBEDDING_TAU,
                     artifacts_manifest: bool = True, executor=None,
                     embedding_index: str = "exact") -> LayerResult:
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
        ``control_bound``.
    tau : float
        NCC threshold (the sweep 0.90 … 0.999 is always reported).
    radius : int
        Hash radius k.
    dihedral : bool
        Also match against the eight dihedral variants (METHODS §2.8).
    out_dir : path-like, optional
        Write the exports (see :func:`splitscope.relations.exports.write_exports`).
    artifacts_manifest : bool
        With ``out_dir``: also write ``artifacts.json`` there (default; the full audit writes
        one for its whole folder instead).
    control_bound : float
        Control flag rate above which a predicate is marked unreliable (default 1%).
    confirm : bool
        Confirm every crossing SHA-256 group byte for byte.
    dedup_predicates : sequence of str
        Predicates whose flagged query rows the deduplicated splits remove.
    transform_sample : int
        When > 0, transform sensitivity (METHODS §2.7) on this many reference-side images
        drawn with ``seed``.
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
        Records (layer ``identity`` or ``near_duplicate``) and tables ``contaminated``,
        ``pairs``, ``dedup_splits``, ``identity_groups``, ``within_copies``, ``query_flags``
        (and ``control_query_flags`` with a control);
        ``containment`` (cross-corpus boundaries: every query row, ``kept`` = in the cleaned
        external set), ``comparison_pairs`` and ``transform_sensitivity`` when measured;
        ``embedding_pairs`` (pairs with cosine >= ``embedding_tau``) with embeddings.
    """
    rows = scan.rows()
    geometry = geometry_of(scan)
    bounds = resolve_boundaries(scan.manifest, boundaries)
    if not 0 < float(tau) <= 1:
        raise InputError(f"tau must be in (0, 1]; got {tau}")
    emb: dict = {}
    if embeddings is not None:
        if not 0 < float(embedding_tau) <= 1:
            raise InputError(f"embedding_tau must be in (0, 1]; got {embedding_tau}")
        matrix, emb_params = embedding_source(embeddings, rows)
        emb_params["index"] = check_index(embedding_index)
        emb = {"embeddings": matrix, "embedding_tau": float(embedding_tau),
               "embedding_params": emb_params}
    relations = [boundary_relations(rows, scan.thumbs, b, tau=tau, radius=radius,
                                    geometry=geometry, dihedral=dihedral, confirm=confirm,
                                    ssim=ssim, workers=workers, searcher=_searcher(executor, scan),
                                    **emb) for b in bounds]
    control_info = crel = None
    cb = _control_boundary(control, scan)
    if cb is not None:
        cscan, cbound = cb
        # the embeddings describe the audited scan's rows: a control on it uses them too
        crel = boundary_relations(cscan.rows(), cscan.thumbs, cbound, tau=tau, radius=radius,
                                  geometry=geometry_of(cscan), dihedral=dihedral,
                                  confirm=confirm, ssim=False, workers=workers,
                                  searcher=_searcher(executor, cscan),
                                  **(emb if cscan is scan else {}))
        control_info = {"boundary": cbound.to_dict(),
                        "corpus": sorted(set(cscan.manifest["corpus"].dropna().astype(str))),
                        "geometry": geometry_of(cscan),
                        "rates": {p: control_rate(crel.flags[p], bound=control_bound)
                                  for p in crel.predicates()}}
    records: list[AuditRecord] = []
    conflict_tables = []
    for rel in relations:
        records.extend(_records(rel, rows, tau, radius, geometry, control_info))
        slug = boundary_slug(rel.boundary)
        records.append(union_record(rel, rows, slug))
        rates = control_info["rates"] if control_info is not None else None
        conflicts = label_conflicts(rows, rel.boundary, rel.near.pairs, rates)
        conflict_tables.append(conflicts)
        records.extend(conflict_records(rel, rows, conflicts, tau=tau, radius=radius,
                                        geometry=geometry, slug=slug, control_rates=rates))
    within_tables = []
    for split in _splits(rows):
        pop = Population(split, np.sort(rows.loc[rows["split"].astype("string") == split, "row"]
                                        .to_numpy(np.int64))) if split != "*" else \
            Population("*", np.sort(rows["row"].to_numpy(np.int64)))
        arrays = bool(len(pop.rows)) and bool(no_bytes(rows[rows["row"].isin(pop.rows)]).all())
        # pixel arrays have no bytes: their copies are equal decoded pixels
        copies = within_copies(rows, pop, key="pixel_xxh128" if arrays else "sha256")
        copies.insert(0, "population", split)
        within_tables.append(copies)
        records.append(_within_record(copies, pop, arrays))
        inside = Boundary(pop, pop)
        conflicts = label_conflicts(rows, inside, None)
        conflict_tables.append(conflicts)
        records.append(within_conflict_record(inside, rows, conflicts, boundary_slug(inside)))
    within_all = pd.concat(within_tables, ignore_index=True) if within_tables else pd.DataFrame()
    comparison_tables = []
    for rel in relations:
        recs, table = _comparison_records(rel, rows, scan.thumbs, tau, geometry, seed)
        records.extend(recs)
        if table is not None:
            comparison_tables.append(table)
    transform_table = None
    if transform_sample and transform_sample > 0:
        recs, transform_table = _transform_records(rows, bounds, transform_sample, seed, tau,
                                                   radius, geometry)
        records.extend(recs)
    from splitscope.relations.containment import cleaned_external, containment_records
    containment_tables = []
    for rel in relations:
        recs = containment_records(rel, rows, tau)
        records.extend(recs)
        if recs:
            containment_tables.append(cleaned_external(rel, rows))
    from splitscope.relations.exports import (
        contaminated_table,
        dedup_splits,
        identity_group_table,
        pair_table,
        query_flags_table,
    )
    tables = {
        "contaminated": contaminated_table(relations, rows),
        "pairs": pair_table(relations),
        "dedup_splits": dedup_splits(rows, relations, within_all, dedup_predicates),
        "identity_groups": identity_group_table(relations),
        "within_copies": within_all,
        "query_flags": query_flags_table(relations, rows),
    }
    tables["label_conflicts"] = pd.concat(conflict_tables, ignore_index=True)
    records.extend(_dedup_record(b, tables["dedup_splits"], dedup_predicates, rows)
                   for b in bounds)
    if crel is not None:  # per control query row, e.g. for the control's ρ distribution
        tables["control_query_flags"] = query_flags_table([crel], cscan.rows())
    if containment_tables:
        tables["containment"] = pd.concat(containment_tables, ignore_index=True)
    if comparison_tables:
        tables["comparison_pairs"] = pd.concat(comparison_tables, ignore_index=True)
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


def _searcher(executor, scan):
    """The partitioned NCC search over the executor's Dask cluster, or None (local)."""
    client = getattr(executor, "search_client", None)
    if client is None:
        return None
    from splitscope.relations.partitioned import scan_searcher

    return scan_searcher(client, scan)


def _dedup_record(b: Boundary, dedup: pd.DataFrame, predicates, rows: pd.DataFrame
                  ) -> AuditRecord:
    """How many query rows the deduplicated split keeps (METHODS §5.6)."""
    mine = dedup[dedup["row"].isin(b.query.rows)]
    kept = int(mine["kept"].sum())
    q = rows[rows["row"].isin(b.query.rows)]
    arrays = bool(len(q)) and bool(no_bytes(q).all())  # copies inside: equal pixels
    within = "pixel_xxh128_within" if arrays else "sha256_within"
    return AuditRecord(
        id=f"near_duplicate.dedup_split.{boundary_slug(b)}",
        layer="near_duplicate",
        title=f"Deduplicated {b.query.name} split",
        boundary=b.to_dict(),
        predicate={"name": "dedup_split",
                   "params": {"removed_by": list(predicates) + [within]}},
        unit="row",
        numerator=kept,
        denominator=len(mine),
        scope=f"rows of {b.query.name} that no dedup predicate flags",
        conclusion=(f"{kept} of {len(mine)} rows of {b.query.name} remain after removing rows "
                    f"with a counterpart in {b.reference.name} under "
                    f"{', '.join(predicates)} and extra "
                    f"{'pixel-identical' if arrays else 'byte'} copies inside the split"),
        outputs=["dedup_splits"],
        details={"removed": len(mine) - kept},
    )


def _splits(rows: pd.DataFrame) -> list[str]:
    splits = sorted(rows["split"].dropna().astype(str).unique().tolist())
    return splits or ["*"]


def _within_record(copies: pd.DataFrame, pop: Population,
                   arrays: bool = False) -> AuditRecord:
    n_rows = int(copies["n_rows"].sum()) if len(copies) else 0
    excess = n_rows - len(copies)
    b = Boundary(pop, pop)
    conflicting = int((copies["label_relation"] == "conflicting").sum()) if len(copies) else 0
    if arrays:  # every row of the population is a pixel array: copies are equal pixels
        return AuditRecord(
            id=f"identity.within_pixel_copies.{boundary_slug(b)}", layer="identity",
            title=f"Pixel-identical copies within {pop.name}", boundary=b.to_dict(),
            predicate={"name": "pixel_xxh128_within", "params": {}}, unit="affected row",
            numerator=n_rows, denominator=pop.size,
            scope=f"rows of {pop.name} whose decoded pixels equal another row's of {pop.name} "
                  "(pixel arrays: byte identity does not apply)",
            conclusion=(f"{len(copies)} pixel-identity group(s) hold {n_rows} rows; {excess} "
                        f"row(s) are extra copies; {conflicting} group(s) carry conflicting "
                        "labels") if len(copies)
            else "no pixel-identical copies inside the population",
            details={"groups": len(copies), "extra_copies": excess,
                     "label_conflicting_groups": conflicting,
                     "not_applicable": {"sha256_within": NO_BYTES_REASON}})
    return AuditRecord(
        id=f"identity.within_copies.{boundary_slug(b)}",
        layer="identity",
        title=f"Byte-identical copies within {pop.name}",
        boundary=b.to_dict(),
        predicate={"name": "sha256_within", "params": {}},
        unit="affected row",
        numerator=n_rows,
        denominator=pop.size,
        scope=f"rows of {pop.name} sharing their bytes with another row of {pop.name}",
        conclusion=(f"{len(copies)} identity group(s) hold {n_rows} rows; {excess} row(s) are "
                    f"extra copies; {conflicting} group(s) carry conflicting labels")
        if len(copies) else "no byte-identical copies inside the population",
        details={"groups": len(copies), "extra_copies": excess,
                 "label_conflicting_groups": conflicting},
    )


def _breakdowns(q: pd.DataFrame, hit_rows) -> dict:
    out = {}
    for by in ("source", "label"):
        if by in q.columns and q[by].notna().any():
            out[f"by_{by}"] = rate_breakdown(q, hit_rows, by).to_dict("records")
    return out


def _records(rel: BoundaryRelations, rows: pd.DataFrame, tau: float, radius: int,
             geometry: dict, control_info: dict | None) -> list[AuditRecord]:
    b = rel.boundary
    q = side(rows, b.query)
    n_query = len(q)
    class_support = {str(k): int(v) for k, v in
                     q["label"].astype("string").fillna("<NA>").value_counts().sort_index()
                     .items()}
    out = []
    for pred in rel.predicates():
        flags = rel.flags[pred]
        hit = flags.fillna(False).to_numpy(bool)
        assessed = int(flags.notna().sum())
        hit_rows = rel.flags.loc[hit, "row"].to_numpy(np.int64)
        layer = "identity" if pred in IDENTITY_PREDICATES else "near_duplicate"
        params = _params(pred, tau, radius, geometry)
        details = _breakdowns(q, hit_rows)
        details["not_assessed"] = n_query - assessed
        inputs = []
        if pred == EMBEDDING_PREDICATE:
            e = rel.embedding
            params = {k: v for k, v in e["params"].items() if k != "tau_note"}
            details.update({"sweep": e["sweep"].to_dict("records"),
                            "undefined_query_rows": e["undefined_query_rows"],
                            "unmatched_query_rows": e["unmatched_query_rows"],
                            "undefined_reference_rows": e["undefined_reference_rows"],
                            "note": e["params"].get("tau_note")})
            if e["params"].get("source_sha256"):
                inputs = [{"path": e["params"]["source"], "sha256": e["params"]["source_sha256"]}]
        if pred == "sha256":
            c = rel.census
            g = c.groups
            details.update({
                "identity_groups": len(g),
                "renamed_groups": int(g["renamed"].sum()) if len(g) else 0,
                "label_disjoint_groups": int((g["label_relation"].isin(
                    ["disjoint", "conflicting"])).sum()) if len(g) else 0,
                "label_intersecting_groups": int((g["label_relation"].isin(
                    ["intersecting", "consistent"])).sum()) if len(g) else 0,
                "renamed_rows": int(c.affected["renamed"].sum()) if len(c.affected) else 0,
                "confirmation": c.confirmation,
            })
        if pred == "basename":
            rel_counts = rel.basenames["relation"].value_counts().to_dict()
            details["relation_counts"] = {str(k): int(v) for k, v in rel_counts.items()}
        if pred == "ncc_nearest":
            details["sweep"] = rel.near.sweep.to_dict("records")
            fl = rel.near.flags["flat"]
            details["flat_query_rows"] = int(fl.fillna(False).astype(bool).sum())
        if pred.endswith("_dihedral"):
            only = rel.near.flags.get(f"{pred}_only")
            details["dihedral_only_rows"] = int(np.asarray(only, bool).sum()) \
                if only is not None else None
            var = rel.near.flags.get(f"{pred}_variant")
            if var is not None:
                vc = pd.Series(var)[hit].value_counts().to_dict()
                details["variants"] = {str(k): int(v) for k, v in vc.items() if k}
        if rel.near.notes:
            details["notes"] = dict(rel.near.notes)
        conclusion = (f"{int(hit.sum())} of {n_query} query rows ({hit.sum() / n_query:.2%}) "
                      f"have a counterpart under {pred}" if n_query else "no query rows")
        if control_info is not None:
            crate = control_info["rates"].get(pred)
            details["control"] = {"boundary": control_info["boundary"],
                                  "corpus": control_info["corpus"], **(crate or {})} \
                if crate else {"status": "not assessed on the control"}
            if crate and crate["unreliable"]:
                conclusion += (f"; UNRELIABLE for this modality: it flags {crate['rate']:.2%} of "
                               f"the clean control (bound {crate['bound']:.0%})")
        status, reason = "completed", None
        inapplicable = int(no_bytes(q).sum()) if pred in NEEDS_BYTES else 0
        numerator: int | None = int(hit.sum())
        if inapplicable:
            details["not_applicable"] = inapplicable
            details["not_assessed"] = n_query - assessed - inapplicable
        if inapplicable and inapplicable == n_query:
            status, numerator = "not applicable", None
            reason = NO_BYTES_REASON
            conclusion = f"{pred} does not apply: {NO_BYTES_REASON}"
        elif assessed == 0:
            status = "not assessed"
            reason = "no query row could be assessed (unreadable files or no reference)"
        elif assessed < n_query:
            status, reason = "partial", f"{n_query - assessed} query row(s) not assessed"
            if inapplicable:
                reason = (f"{inapplicable} query row(s) are pixel arrays without file bytes "
                          f"(not applicable); {n_query - assessed - inapplicable} not assessed")
        out.append(AuditRecord(
            id=f"{layer}.{pred}.{boundary_slug(b)}",
            layer=layer,
            title=_TITLES.get(pred, pred.replace("_", " ")),
            boundary=b.to_dict(),
            predicate={"name": pred, "params": params},
            unit="affected query row",
            numerator=numerator,
            denominator=n_query,
            coverage={"assessed": assessed, "total": n_query},
            class_support=class_support,
            scope=f"query rows of {b.query.name} with a counterpart in {b.reference.name}",
            conclusion=conclusion,
            unresolved=None if layer == "identity" else
            "a near-duplicate predicate describes similarity, not the cause; see the control "
            "rate and the transform sensitivity",
            status=status,
            reason=reason,
            inputs=inputs,
            details=details,
        ))
    return out


def _params(pred: str, tau: float, radius: int, geometry: dict) -> dict:
    if pred in IDENTITY_PREDICATES:
        return {}
    base = pred.removesuffix("_dihedral")
    params: dict = {"dihedral": pred.endswith("_dihedral")}
    if base.startswith("hash_"):
        params.update({"rule": base[len("hash_"):], "radius": radius, "hash_size": 8,
                       "hashes": "imagehash phash/dhash", "mode": geometry.get("mode")})
    else:
        params.update({"tau": tau, "counterpart_rule": base[len("ncc_"):], **geometry})
        if base in ("ncc_first_candidate", "ncc_any_candidate"):
            params["screen"] = "exact_phash"
    return params


def _comparison_records(rel: BoundaryRelations, rows: pd.DataFrame, thumbs, tau: float,
                        geometry: dict, seed: int) -> tuple[list[AuditRecord], pd.DataFrame | None]:
    """Same-modality comparison pairs (METHODS §2.6) for NCC-flagged pairs inside groups with
    frame indices; nothing when the release has no groups or frames."""
    from splitscope.relations.controls import comparison_pairs, median_difference
    from splitscope.relations.ncc import pair_rho
    from splitscope.relations.ssim import ssim_pairs

    if "group" not in rows or "frame" not in rows:
        return [], None
    q = side(rows, rel.boundary.query)
    if not (q["group"].notna() & q["frame"].notna()).any():
        return [], None
    pairs = rel.near.pairs
    flagged = pairs[pairs["rules"].astype(str).str.contains("ncc") & (pairs["variant"] ==
                                                                      "identity")]
    table = comparison_pairs(rows, flagged, reference_rows=rel.boundary.reference.rows)
    if "thumb_index" in rows:
        has = rows.set_index("row")["thumb_index"]
        ok = (has.reindex(table["query_row"]).to_numpy() >= 0) & \
             (has.reindex(table["reference_row"]).to_numpy() >= 0)
        table = table[ok].reset_index(drop=True)
    if len(table):
        a = np.asarray(thumbs(table["query_row"].to_numpy(np.int64)))
        b = np.asarray(thumbs(table["reference_row"].to_numpy(np.int64)))
        idx = np.arange(len(table))
        table["rho"] = pair_rho(a, b, idx, idx)
        table["ssim"] = ssim_pairs(a, b)
    else:
        table["rho"] = pd.Series(dtype=float)
        table["ssim"] = pd.Series(dtype=float)
    table.insert(0, "boundary", rel.boundary.name)
    results = {f"{m}_{c}": median_difference(table, measure=m, control=c, seed=seed)
               for m in ("rho", "ssim") for c in ("adjacent", "distant")}
    main = results["ssim_adjacent"]
    status = "completed" if main["status"] == "completed" else "not assessed"
    rec = AuditRecord(
        id=f"near_duplicate.comparison_pairs.{boundary_slug(rel.boundary)}",
        layer="near_duplicate",
        title="Flagged pairs vs same-group comparison pairs (adjacent and distant frames)",
        boundary=rel.boundary.to_dict(),
        predicate={"name": "comparison_pairs", "params": {"tau": tau, "distant_gap": 500,
                                                          **geometry}},
        unit="pair",
        numerator=int((table["kind"] == "flagged").sum()) if len(table) else 0,
        denominator=None,
        status=status,
        reason=None if status == "completed" else main.get("reason"),
        conclusion=(f"median SSIM of flagged pairs minus adjacent controls: "
                    f"{main['difference']:.3f}") if main["status"] == "completed" else None,
        details={"contrasts": results},
    )
    return [rec], table


def _transform_records(rows: pd.DataFrame, bounds, n: int, seed: int, tau: float, radius: int,
                       geometry: dict) -> tuple[list[AuditRecord], pd.DataFrame]:
    """Transform sensitivity (METHODS §2.7) on a seeded sample of reference-side images."""
    from splitscope.relations.transforms import transform_sensitivity

    ref_rows = np.unique(np.concatenate([b.reference.rows for b in bounds]))
    sub = rows[rows["row"].isin(ref_rows)]
    if "status" in sub:
        sub = sub[sub["status"].astype("string") == "ok"]
    files = sub["file"].dropna().astype(str).tolist()
    summary, _ = transform_sensitivity(files, n=n, seed=seed, tau=tau, radius=radius,
                                       thumb_size=int(geometry.get("thumb_size", 96)),
                                       interpolation=str(geometry.get("interpolation",
                                                                      "bicubic")))
    recs = []
    for pred, part in summary.groupby("predicate", sort=False):
        rates = {r["transform"]: {"passed": int(r["passed"]), "assessed": int(r["assessed"]),
                                  "pass_rate": r["pass_rate"]} for _, r in part.iterrows()}
        recs.append(AuditRecord(
            id=f"near_duplicate.transform_sensitivity.{pred}",
            layer="near_duplicate",
            title=f"Transform sensitivity of {pred}",
            predicate={"name": pred, "params": _params(pred, tau, radius, geometry)},
            unit="transformed image",
            scope="a seeded sample of reference-side images; describes the tested transforms, "
                  "not recall",
            details={"pass_rates": rates, "sample": summary.attrs.get("sample"),
                     "skipped": summary.attrs.get("skipped")},
        ))
    return recs, summary


def audit_external(audited, external, external_root: str | Path, out_dir: Path, **options):
    """Identity and near-duplicate findings of the cross-corpus boundary only.

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

    write_csv(combined.manifest, out_dir / "manifest.csv")
    found = audit_duplicates(combined, [boundary], control=None, out_dir=out_dir,
                             artifacts_manifest=False, **options)
    kept = [r for r in found.records
            if (r.boundary or {}).get("name") == boundary.name or r.status != "completed"]
    for rec in kept:
        if rec.boundary is not None:
            rec.boundary = {**rec.boundary, "kind": "cross-corpus"}
    result = LayerResult(kept, {f"external/{k}": v for k, v in found.tables.items()})
    return result, combined, boundary


# ------------------------------------------------------------------------- audit layers

def _search_options(context) -> dict:
    search = context.options.search
    return {"tau": search.tau, "radius": search.radius, "dihedral": search.dihedral}


def _duplicates_options(context) -> dict:
    return {**_search_options(context), "executor": context.executor,
            "transform_sample": context.options.search.transforms,
            "seed": context.options.run.seed}


class DuplicatesLayer:
    """Identity and near duplicates on the release's boundaries (METHODS §1, §2), with the
    negative control when one is given; writes its lists into the audit's ``lists/``."""

    name = "duplicates"
    order = 10
    metrics = tuple(predicates.METRICS.values())  # --fail-on (splitscope.audit.conditions)
    rules = reading.RULES  # "what this means" (splitscope.audit.meaning)
    verdicts = reading.VERDICTS  # verdict lines (splitscope.audit.verdicts)

    def run(self, context) -> LayerResult:
        from splitscope.relations.rho_figures import boundary_figures

        result = audit_duplicates(context.scan, context.boundaries,
                                  control=context.scans.get("control"),
                                  out_dir=context.lists_dir, artifacts_manifest=False,
                                  **_duplicates_options(context))
        result.figures = boundary_figures(result.tables, context.boundaries,
                                          result.tables.get("control_query_flags"))
        return result


class ExternalLayer:
    """Cross-corpus containment (METHODS §2.9): the external corpus against the audited
    training rows; its lists go to ``lists/external/``."""

    name = "external"
    order = 60
    metrics = tuple(predicates.EXTERNAL_METRICS.values())
    verdicts = reading.EXTERNAL_VERDICTS
    needs: ClassVar[dict[str, str]] = {"external": "no external corpus given (--external ROOT)"}
    title = "cross-corpus containment"

    def run(self, context) -> LayerResult:
        from splitscope.relations.rho_figures import boundary_figures

        result, combined, boundary = audit_external(
            context.scan, context.scans["external"], context.paths["external"],
            context.lists_dir / "external", **_duplicates_options(context))
        result.boundaries = [(boundary, "cross-corpus")]
        result.rows = combined.rows()
        duplicates = context.outcomes.get("duplicates")
        control = duplicates.result.tables.get("control_query_flags") if duplicates else None
        tables = {k.removeprefix("external/"): v for k, v in result.tables.items()}
        result.figures = boundary_figures(tables, [boundary], control)
        return result


#: the layers of this package, in the method's order (see :mod:`splitscope.audit.protocol`)
LAYERS = [DuplicatesLayer(), ExternalLayer()]
