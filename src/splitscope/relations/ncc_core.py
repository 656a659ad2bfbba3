"""The blocked exact search that the NCC search (:mod:`splitscope.relations.ncc`), the
pruned passes (:mod:`splitscope.relations.pruned`) and the indexed search
(:mod:`splitscope.relations.ncc_index`) share: centred unit vectors, the merge of
best counterparts and pairs at τ across blocks (:class:`SearchMerge`), and the settling of
near-ties on values that do not depend on the blocking."""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.errors import InputError


class ThumbnailRows:
    """Thumbnails of some manifest rows, read on demand.

    ``read(row_ids)`` returns ``(len(row_ids), S, S)`` uint8 thumbnails (e.g. ``Scan.thumbs``
    over the workspace's memory-mapped store). Indexing with a slice or an array of positions
    reads only those rows, so a search over it holds one block at a time, never the whole
    population.

    ``flat``, when given, is each row's flatness (every pixel equal) as the scan recorded it
    from the same thumbnail: the search then takes it from there instead of reading every
    thumbnail once more to find it.
    """

    ndim = 3
    dtype = np.dtype(np.uint8)

    def __init__(self, read, rows, size: int, flat: np.ndarray | None = None):
        self.read = read
        self.rows = np.asarray(rows, dtype=np.int64)
        self.shape = (int(self.rows.size), int(size), int(size))
        if flat is not None:
            flat = np.asarray(flat, dtype=bool)
            if flat.shape != self.rows.shape:
                raise InputError(f"flat has {flat.size} entries for {self.rows.size} rows")
        self.flat = flat

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        ids = self.rows[key]
        if np.ndim(ids) == 0:
            return self[[key]][0]
        if ids.size == 0:
            return np.zeros((0, *self.shape[1:]), np.uint8)
        return np.asarray(self.read(ids), dtype=np.uint8)



def _check_thumbs(thumbs, name: str) -> np.ndarray:
    if isinstance(thumbs, ThumbnailRows):
        return thumbs
    arr = np.asarray(thumbs)
    if arr.ndim == 2 and arr.shape[0] == 0:
        arr = arr.reshape(0, 1, 1)
    if arr.ndim != 3 or arr.shape[1] != arr.shape[2]:
        raise InputError(f"{name}: expected thumbnails of shape (n, S, S); got {arr.shape}")
    if arr.dtype != np.uint8:
        raise InputError(f"{name}: expected uint8 thumbnails; got {arr.dtype}")
    return arr


def centred_unit_vectors(thumbs, out: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Centre and L2-normalise thumbnails.

    Parameters
    ----------
    thumbs : ndarray (n, S, S) uint8
    out : ndarray (n, S*S) float32, optional
        Where to write the vectors (returned as ``vectors``): a buffer used again saves the
        page faults of fresh memory.

    Returns
    -------
    vectors : ndarray (n, S*S) float32
        Unit vectors (all zeros for flat images).
    flat : ndarray (n,) bool
        Zero variance (every pixel equal): rho undefined.
    """
    arr = _check_thumbs(thumbs, "thumbnails")
    n = arr.shape[0]
    flat_view = arr.reshape(n, -1)
    x = np.empty(flat_view.shape, np.float32) if out is None else out
    flat = np.zeros(n, bool)
    # float64 work on a few rows at a time: exact centring, temporaries that stay in cache
    step = 64
    work = np.empty((min(step, n), flat_view.shape[1]), np.float64)
    for s in range(0, n, step):
        v = work[:min(step, n - s)]
        v[...] = flat_view[s:s + step]
        v -= v.mean(axis=1, keepdims=True)
        norms = np.sqrt(np.einsum("ij,ij->i", v, v))
        # integer pixels: the centred row is exactly zero iff every pixel is equal
        is_flat = norms == 0
        scale = np.where(is_flat, 0.0, 1.0 / (norms + 1e-12))
        np.multiply(v, scale[:, None], out=x[s:s + step], casting="same_kind")
        flat[s:s + step] = is_flat
    return x, flat


def _blocked_collect(merge: SearchMerge, query_vectors, reference_vectors,
                     query_undefined: np.ndarray, reference_undefined: np.ndarray, *,
                     tau: float, block: int, exclude: np.ndarray | None, query_chunk: int,
                     collect_pairs: bool, max_pairs: int) -> None:
    """The loop of :func:`_blocked_search`: every query chunk against every reference block,
    each block's near-best candidates and pairs added to ``merge``."""
    nq = query_undefined.size
    block = max(1, int(block))
    query_chunk = max(1, int(query_chunk))
    r_keep = np.flatnonzero(~reference_undefined)  # undefined references never enter products
    for c0 in range(0, nq, query_chunk):
        c1 = min(c0 + query_chunk, nq)
        qpos = c0 + np.flatnonzero(~query_undefined[c0:c1])
        if qpos.size == 0 or r_keep.size == 0:
            continue
        qv = query_vectors(qpos)
        ex = exclude[qpos] if exclude is not None else None
        c_best = np.full(qpos.size, -np.inf, np.float32)
        for b0 in range(0, r_keep.size, block):
            rpos = r_keep[b0:b0 + block]
            rv = reference_vectors(rpos)
            prod = qv @ rv.T  # (chunk, block) float32, BLAS sgemm
            if ex is not None:
                # positions of excluded references inside this block
                loc = np.searchsorted(rpos, ex)
                loc_c = np.minimum(loc, rpos.size - 1)
                hit = np.flatnonzero((ex >= 0) & (rpos[loc_c] == ex))
                prod[hit, loc_c[hit]] = -np.inf
            np.maximum(c_best, prod.max(axis=1), out=c_best)
            qi, ri = np.nonzero((prod >= (c_best - SETTLE)[:, None]) & (prod > -np.inf))
            merge.add_candidates(qpos[qi], rpos[ri], canonical_values(qv, qi, rv, ri))
            if collect_pairs:
                qi, ri = np.nonzero(prod >= tau - SETTLE)
                qi, ri, vals = settled_pairs(qv, qi, rv, ri, tau)
                merge.add_pairs(qpos[qi], rpos[ri], vals)
            del prod, rv  # free this block before the next one is built


class SearchMerge:
    """What an exact search collects, part by part, and the one rule that makes its result.

    Every search fills one: the blocked and the pruned search block by block, the indexed
    search one part per query chunk (merged in chunk order), a search
    partitioned over a cluster one (query block × reference block) task at a time
    (:mod:`splitscope.relations.partitioned`, which ships :meth:`part` and merges it with
    :meth:`merge`). The result does not depend on how the work was cut: a query's best is
    the candidate with the highest :func:`canonical_values` value, lowest reference position
    on ties (:class:`NearBest`), and the pairs are those that reached τ, settled the same way.
    Pairs are stored in the order they are added up to ``max_pairs`` and counted beyond it.
    """

    def __init__(self, n_queries: int, *, max_pairs: int):
        self.near = NearBest(int(n_queries))
        self.max_pairs = int(max_pairs)
        self.found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.stored = 0
        self.pairs_total = 0

    def add_candidates(self, qpos: np.ndarray, rpos: np.ndarray, canon: np.ndarray) -> None:
        """References near a query's best so far (query and reference positions, canonical
        values)."""
        self.near.add(qpos, rpos, canon)

    def add_pairs(self, qpos: np.ndarray, rpos: np.ndarray, vals: np.ndarray,
                  total: int | None = None) -> None:
        """Pairs that reached τ; ``total`` counts them where more were found than given."""
        self.pairs_total += int(qpos.size if total is None else total)
        keep = max(0, min(qpos.size, self.max_pairs - self.stored))
        if keep:
            self.found.append((qpos[:keep], rpos[:keep], vals[:keep]))
            self.stored += keep

    def part(self, query_offset: int = 0, reference_offset: int = 0) -> dict:
        """This merge's content as plain arrays, positions shifted by the offsets: the one
        best candidate per query (float64 canonical value), the stored pairs and their
        count."""
        qi, rpos, canon = self.near.reduce()
        if self.found:
            pq, pr, pv = (np.concatenate(x) for x in zip(*self.found))
        else:
            pq, pr, pv = np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32)
        return {"candidates": (qi + query_offset, rpos + reference_offset, canon),
                "pairs": (pq.astype(np.int64) + query_offset,
                          pr.astype(np.int64) + reference_offset, pv.astype(np.float32)),
                "pairs_total": int(self.pairs_total)}

    def merge(self, part: dict) -> None:
        """Add a :meth:`part` (of a search over a subset, positions already global)."""
        self.add_candidates(*part["candidates"])
        self.add_pairs(*part["pairs"], total=part["pairs_total"])

    def result(self, value: str) -> tuple[np.ndarray, np.ndarray, pd.DataFrame, int]:
        """``best_index, best_value, pairs, pairs_total`` (see :func:`_blocked_search`)."""
        best_val, best_idx = self.near.best()
        return (*search_result(best_val, best_idx, self.found, value), int(self.pairs_total))


def search_result(best_val: np.ndarray, best_idx: np.ndarray, found: list, value: str
                  ) -> tuple[np.ndarray, np.ndarray, pd.DataFrame]:
    """A search's outputs in their final form: the best index (-1 where no similarity is
    defined), the best value clipped to [-1, 1] (NaN where undefined) and the stored pairs
    ``(query positions, reference positions, values)`` as one table sorted by query and
    reference."""
    best_val[~np.isfinite(best_val)] = np.nan
    best_idx[np.isnan(best_val)] = -1
    best_val = np.clip(best_val, -1.0, 1.0)
    if found:
        pairs = pd.DataFrame({
            "query": np.concatenate([f[0] for f in found]).astype(np.int64),
            "reference": np.concatenate([f[1] for f in found]).astype(np.int64),
            value: np.clip(np.concatenate([f[2] for f in found]), -1, 1).astype(np.float32),
        }).sort_values(["query", "reference"], kind="stable").reset_index(drop=True)
    else:
        pairs = pd.DataFrame({"query": np.empty(0, np.int64), "reference": np.empty(0, np.int64),
                              value: np.empty(0, np.float32)})
    return best_idx, best_val, pairs


#: Similarities this close to a query's best, or to τ, are settled by :func:`canonical_values`.
SETTLE = 1e-5


def canonical_values(qv: np.ndarray, qi: np.ndarray, rv: np.ndarray, ri: np.ndarray,
                     chunk: int = 64) -> np.ndarray:
    """``⟨qv[qi[k]], rv[ri[k]]⟩`` in float64, one pair at a time.

    A blocked float32 matrix product may round one pair differently depending on where the
    pair sits in the block (two copies of one image need not get equal values). Where the
    outcome hangs on such rounding — which of nearly equal references is a query's best, and
    whether a pair within :data:`SETTLE` of τ reaches it — the searches decide on this value
    instead, which depends only on the two vectors; so ties between copies go to the lowest
    position, and every search (blocked, pruned, indexed) gives the same answer. ``chunk`` pairs are
    gathered at a time (64: the rows stay in cache, twice as fast as 1,024 at d = 9,216); each
    value does not depend on it.
    """
    out = np.empty(qi.size, np.float64)
    for s in range(0, qi.size, chunk):
        out[s:s + chunk] = np.einsum("ij,ij->i", qv[qi[s:s + chunk]], rv[ri[s:s + chunk]],
                                     dtype=np.float64)
    return out


def settled_pairs(qv, qi, rv, ri, tau: float):
    """The pairs ``(qi, ri)`` (found at ≥ τ − :data:`SETTLE` by a product) that reach τ,
    each with its :func:`canonical_values` value: it decides those within :data:`SETTLE` of τ,
    and it is the value stored, so two copies of one image get equal values wherever their
    pairs sat in a block (the pair table ranks capped pairs by it, ties by reference row)."""
    canon = canonical_values(qv, qi, rv, ri)
    keep = canon >= tau
    return qi[keep], ri[keep], canon[keep].astype(np.float32)


class NearBest:
    """The references within :data:`SETTLE` of each query's running best, with their
    :func:`canonical_values`; :meth:`best` picks the highest canonical value, lowest position
    on ties. That choice is associative, so what is held is cut down to one candidate per
    query whenever it grows past a few per query (memory stays bounded by the query count)."""

    def __init__(self, n: int):
        self.n = n
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.held = 0
        self.limit = max(4 * n, 1 << 20)

    def add(self, qi: np.ndarray, rpos: np.ndarray, canon: np.ndarray) -> None:
        if qi.size:
            self.parts.append((np.asarray(qi, np.int64), np.asarray(rpos, np.int64),
                               np.asarray(canon, np.float64)))
            self.held += qi.size
            if self.held > self.limit:
                self.parts = [self.reduce()]
                self.held = self.parts[0][0].size

    def reduce(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One candidate per query that has any: (query, reference position, canonical
        value float64), sorted by query."""
        if not self.parts:
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64)
        qi, rpos, canon = (np.concatenate(x) for x in zip(*self.parts))
        order = np.lexsort((rpos, -canon, qi))
        first = order[np.r_[True, qi[order][1:] != qi[order][:-1]]]
        return qi[first], rpos[first], canon[first]

    def best(self) -> tuple[np.ndarray, np.ndarray]:
        """(value float32, reference position) per query; -inf and -1 where none."""
        val = np.full(self.n, -np.inf, np.float32)
        idx = np.full(self.n, -1, np.int64)
        qi, rpos, canon = self.reduce()
        val[qi] = canon.astype(np.float32)
        idx[qi] = rpos
        return val, idx
