"""The exact NCC search partitioned over a Dask cluster (METHODS §2.2; ``[distributed]``).

The query × reference comparison is cut into tasks of ``query_block`` queries × ``reference_block``
references. Each task reads its own thumbnails — from the workspace's memory-mapped thumbnail
file when the search runs over a scan (:class:`StoredThumbnails`; every worker must see the
workspace under the same path), or from an array scattered to the cluster — runs the local exact
search over its part (:func:`~splitscope.relations.ncc.collect_thumbnails`: indexed or brute force,
block by block, in bounded memory) and returns what it found unresolved: each query's best
candidate with its float64 :func:`~splitscope.relations.ncc_core.canonical_values` value, and its
pairs that reached τ. The parent merges the parts in task order with
:meth:`~splitscope.relations.ncc_core.SearchMerge.merge`, the rule the local search uses, so the
best reference of each query (lowest position on ties), its ρ and the set of pairs equal those
of :func:`~splitscope.relations.ncc.ncc_search`; a pair's ρ agrees to float32 rounding (the
product that scored it had another shape). With more than ``max_pairs`` pairs, the stored ones
are the first in task order (counted in full either way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from splitscope.errors import InputError
from splitscope.relations.ncc import (
    DEFAULT_TAU,
    METHODS,
    NCCResult,
    _check_exclude,
    _check_tau,
    _flat,
    collect_thumbnails,
    ncc_search,
)
from splitscope.relations.ncc_core import SearchMerge, ThumbnailRows, _check_thumbs

__all__ = ["THUMBNAIL_SOURCES", "StoredThumbnails", "partitioned_ncc_search", "scan_searcher",
           "stored_rows", "thumbnail_sources"]

#: Default task shape: queries × references per task.
QUERY_BLOCK = 8192
REFERENCE_BLOCK = 65536


@dataclass(frozen=True)
class StoredThumbnails:
    """Thumbnails held in a ``.npy`` file of shape ``(n, S, S)`` uint8: position ``i`` is row
    ``index[i]`` of the file. Tasks open the file themselves (memory-mapped), so only the path
    and the index travel."""

    path: str
    index: np.ndarray
    size: int

    def __len__(self) -> int:
        return len(self.index)

    def part(self, start: int, stop: int) -> StoredThumbnails:
        return StoredThumbnails(self.path, np.asarray(self.index[start:stop], np.int64),
                                self.size)

    def rows(self) -> ThumbnailRows:
        """A lazy view for the local search (reads only the positions asked for)."""
        store = np.load(self.path, mmap_mode="r", allow_pickle=False)
        return ThumbnailRows(lambda ids: store[ids], self.index, self.size)


def _thumbs(source, start: int, stop: int):
    if isinstance(source, StoredThumbnails):
        return source.rows()
    return source[start:stop]


def search_part(query, reference, exclude, options: dict) -> dict:
    """One task: the exact search of query positions ``[q0, q1)`` against references
    ``[r0, r1)`` into a :class:`~splitscope.relations.ncc_core.SearchMerge`, returned as its
    :meth:`~splitscope.relations.ncc_core.SearchMerge.part` (global positions) with the two flat
    masks and what ran. A task searches on one thread: the cluster's workers are the
    parallelism."""
    q = _thumbs(*query)
    r = _thumbs(*reference)
    q_flat, r_flat = _flat(q), _flat(r)
    merge = SearchMerge(len(q_flat), max_pairs=options["max_pairs"])
    info = collect_thumbnails(
        merge, lambda pos: q[pos], lambda pos: r[pos], q_flat, r_flat, tau=options["tau"],
        block=options["block"], exclude=exclude, query_chunk=options["query_chunk"],
        collect_pairs=options["collect_pairs"], max_pairs=options["max_pairs"], value="rho",
        method=options["method"], workers=1)
    return {**merge.part(query[1], reference[1]), "query_flat": q_flat,
            "reference_flat": r_flat, "info": info}


def _spans(n: int, step: int) -> list[tuple[int, int]]:
    return [(s, min(s + step, n)) for s in range(0, n, step)]


def _local_exclude(exclude: np.ndarray | None, q0: int, q1: int, r0: int, r1: int):
    """The excluded reference of each query of ``[q0, q1)`` as a position in ``[r0, r1)``
    (-1 elsewhere); None when no query of the part excludes one there."""
    if exclude is None:
        return None
    ex = exclude[q0:q1]
    inside = (ex >= r0) & (ex < r1)
    return np.where(inside, ex - r0, -1).astype(np.int64) if inside.any() else None


def partitioned_ncc_search(client, query, reference, *, tau: float = DEFAULT_TAU,
                           block: int = 2048, exclude_self: bool = False, exclude=None,
                           query_chunk: int = 8192, collect_pairs: bool = True,
                           max_pairs: int = 5_000_000, method: str = "indexed",
                           query_block: int = QUERY_BLOCK,
                           reference_block: int = REFERENCE_BLOCK) -> NCCResult:
    """:func:`~splitscope.relations.ncc.ncc_search` as Dask tasks, with the same result.

    Parameters
    ----------
    client : distributed.Client
        A client of the cluster that runs the tasks.
    query, reference : StoredThumbnails or ndarray (n, S, S) uint8
        Stored thumbnails are read by the tasks from their file (workers must see it under
        the same path); arrays are scattered to the cluster once.
    tau, block, exclude_self, exclude, query_chunk, collect_pairs, max_pairs, method
        As in :func:`~splitscope.relations.ncc.ncc_search` (``block``, ``query_chunk``
        and ``method`` apply inside each task).
    query_block, reference_block : int
        Task shape: queries × references per task.

    Returns
    -------
    NCCResult
        ``params["search"]`` is ``"partitioned"``; ``params["partitions"]`` says how the work
        was cut and which search each task ran.
    """
    query_block, reference_block = int(query_block), int(reference_block)
    if query_block < 1 or reference_block < 1:
        raise InputError(f"query_block and reference_block must be at least 1; got "
                         f"{query_block}, {reference_block}")
    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(map(repr, METHODS))}; "
                         f"got {method!r}")
    tau = _check_tau(tau)
    same = query is reference
    if not isinstance(query, StoredThumbnails):
        query = _check_thumbs(query, "query thumbnails")
    if same:
        reference = query
    elif not isinstance(reference, StoredThumbnails):
        reference = _check_thumbs(reference, "reference thumbnails")
    nq, nr = len(query), len(reference)
    q_size = query.size if isinstance(query, StoredThumbnails) else query.shape[1]
    r_size = reference.size if isinstance(reference, StoredThumbnails) else reference.shape[1]
    if nq and nr and q_size != r_size:
        raise InputError(f"query thumbnails are {q_size}² and reference thumbnails "
                         f"{r_size}²: NCC needs one geometry on both sides")
    exclude = _check_exclude(exclude, exclude_self, nq, nr)
    options = {"tau": tau, "block": int(block), "query_chunk": int(query_chunk),
               "collect_pairs": bool(collect_pairs), "max_pairs": int(max_pairs),
               "method": method}
    if nq == 0 or nr == 0:  # nothing to cut: the local search gives the flat masks
        local = [x.rows() if isinstance(x, StoredThumbnails) else x for x in (query, reference)]
        return ncc_search(*local, tau=tau, block=block, exclude=exclude,
                          query_chunk=query_chunk, collect_pairs=collect_pairs,
                          max_pairs=max_pairs, method=method)

    def sources(thumbs, spans):
        if isinstance(thumbs, StoredThumbnails):
            return [(thumbs.part(s, e), s, e) for s, e in spans]
        future = client.scatter(thumbs, broadcast=False, hash=False)
        return [(future, s, e) for s, e in spans]

    q_spans, r_spans = _spans(nq, query_block), _spans(nr, reference_block)
    q_sources = sources(query, q_spans)
    r_sources = q_sources if same and q_spans == r_spans else sources(reference, r_spans)
    tasks = []
    for qs in q_sources:
        for rs in r_sources:
            ex = _local_exclude(exclude, qs[1], qs[2], rs[1], rs[2])
            tasks.append(client.submit(search_part, qs, rs, ex, options, pure=False))
    merge = SearchMerge(nq, max_pairs=max_pairs)
    q_flat, r_flat = np.zeros(nq, bool), np.zeros(nr, bool)
    ran: dict[str, int] = {}
    flops = brute_flops = 0.0
    try:
        for k, future in enumerate(tasks):  # in task order: the stored pairs do not race
            part = future.result()
            future.release()
            i, j = divmod(k, len(r_sources))
            merge.merge(part)
            if j == 0:
                q_flat[q_spans[i][0]:q_spans[i][1]] = part["query_flat"]
            if i == 0:
                r_flat[r_spans[j][0]:r_spans[j][1]] = part["reference_flat"]
            info = part["info"]
            ran[info["search"]] = ran.get(info["search"], 0) + 1
            flops += float(info.get("flops", 0.0))
            brute_flops += float(info.get("brute_flops", 0.0))
    finally:
        for future in tasks:
            future.cancel()
    best_idx, best_rho, pairs, n_pairs = merge.result("rho")
    return NCCResult(tau, best_idx, best_rho, pairs, q_flat, r_flat, params={
        "tau": tau, "thumb_size": int(q_size), "pairs_total": int(n_pairs),
        "pairs_truncated": n_pairs > len(pairs), "search": "partitioned",
        "partitions": {"engine": "dask", "tasks": len(tasks), "query_block": query_block,
                       "reference_block": reference_block, "task_searches": dict(sorted(
                           ran.items())), "method": method},
    })


#: ``Scan.meta`` key of a scan whose thumbnails come from several workspace files (a
#: combined scan, :func:`splitscope.relations.external.combine_scans`): ``[(path, start,
#: stop), …]``, thumbnail indices ``start … stop - 1`` being rows ``0 … stop - start - 1`` of
#: ``path``
THUMBNAIL_SOURCES = "thumbnail_sources"


def thumbnail_sources(scan) -> list[tuple[str, int, int]]:
    """The workspace files holding ``scan``'s thumbnails (see :data:`THUMBNAIL_SOURCES`);
    empty when they are held in memory only."""
    sources = (getattr(scan, "meta", None) or {}).get(THUMBNAIL_SOURCES)
    if sources:
        return [(str(p), int(a), int(b)) for p, a, b in sources]
    path = getattr(scan.thumbnails, "filename", None)
    return [] if path is None else [(str(path), 0, len(scan.thumbnails))]


def stored_rows(sources: list[tuple[str, int, int]], index: np.ndarray, size: int):
    """Thumbnails of thumbnail ``index`` as :class:`StoredThumbnails` of the one file that
    holds them all, or None when they span files."""
    index = np.asarray(index, np.int64)
    for path, start, stop in sources:
        if ((index >= start) & (index < stop)).all():
            return StoredThumbnails(path, index - start, int(size))
    return None


def scan_searcher(client, scan, **blocks) -> Callable[..., NCCResult] | None:
    """A search with :func:`~splitscope.relations.ncc.ncc_search`'s signature over
    :class:`~splitscope.relations.ncc_core.ThumbnailRows` of ``scan``'s manifest rows, partitioned
    over ``client``'s cluster; the tasks read the scan's thumbnail files in the workspace (a
    side whose rows span two files, e.g. of a combined scan, travels as an array).
    ``None`` when the scan holds no thumbnail file (nothing to search)."""
    sources = thumbnail_sources(scan)
    if not sources:
        return None
    blocks = {"query_block": QUERY_BLOCK, "reference_block": REFERENCE_BLOCK, **blocks}

    def stored(rows: ThumbnailRows):
        found = stored_rows(sources, scan.thumb_index(rows.rows), int(rows.shape[1]))
        return found if found is not None else rows[:]

    def search(query: ThumbnailRows, reference: ThumbnailRows, workers=None, **options
               ) -> NCCResult:
        # the cluster's workers are the parallelism: this run's local thread count is not
        q = stored(query)
        r = q if reference is query else stored(reference)
        return partitioned_ncc_search(client, q, r, **blocks, **options)

    return search
