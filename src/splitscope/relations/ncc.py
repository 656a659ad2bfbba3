"""Normalized cross-correlation search (METHODS §2.2).

Each thumbnail (8-bit grayscale, S×S, direct resize, the scan's interpolation) becomes a float32
vector, centred and scaled to unit length: ``u = (x - mean x) / ||x - mean x||``. Then
``rho(q, r) = <u_q, u_r>``, which equals ``<x̃, ỹ> / (||x̃||·||ỹ|| + 1e-12)`` up to float32
rounding for every image that is not flat, and is invariant to brightness and contrast.
A flat image (zero variance) has no defined rho: it is flagged, its rho is NaN and it is never
anyone's counterpart.

The search is exact: every query is compared with every reference by blocked matrix products
(BLAS sgemm) ``Q_chunk @ R_block.T``. A running maximum gives each query's best reference, and
every pair with rho >= tau is collected block by block; near-ties of the best and pairs at τ
are settled on a value that does not depend on the blocking (:func:`canonical_values`), so
copies tie and the lowest reference position wins. The indexed search
(:mod:`splitscope.relations.ncc_index`, the default) bounds ρ on a low-dimensional projection
(:mod:`splitscope.relations.pruned`), skips the clusters of references whose bound cannot reach
what a query must beat, scores only the pairs whose own bound can, and gives the same result.
Memory is bounded by the query chunk and the reference block (``query_chunk × S²`` floats,
``block × S²`` floats and a ``query_chunk × block`` product), never by the full
query × reference matrix and never by the reference count.

The geometry (S, interpolation, exact/fast mode) is part of the predicate: a different geometry
is a different predicate and is reported under its own parameters.

Embedding similarity (METHODS §2.4, optional) runs through the same search: user-supplied
vectors are L2-normalised (float32) and compared by cosine similarity with
:func:`embedding_search`; a zero-norm or non-finite vector plays the part of a flat image
(undefined, flagged, never matched). Both searches are thin wrappers around one internal blocked
search that only asks for unit vectors of a set of positions and a per-row undefined mask.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.relations.ncc_core import (
    SearchMerge,
    ThumbnailRows,
    _blocked_collect,
    _check_thumbs,
    centred_unit_vectors,
)
from splitscope.relations.options import SEARCH_METHODS, SearchOptions
from splitscope.threads import blas_threads

DEFAULT_TAU = SearchOptions.tau  # METHODS §2.2
SWEEP = (0.90, 0.95, 0.98, 0.99, 0.995, 0.999)
#: The exact search methods (:func:`ncc_search`'s ``method``): the same result by each.
METHODS = SEARCH_METHODS
COUNTERPART_RULES = ("nearest", "first_candidate", "any_candidate")


@dataclass
class NCCResult:
    """Result of :func:`ncc_search` (positions index the query / reference arrays).

    ``best_index`` (-1 when the query is flat or has no non-flat reference), ``best_rho``
    (NaN likewise), ``pairs`` (``query, reference, rho`` for every pair with rho >= tau, sorted),
    ``query_flat``, ``reference_flat``.
    """

    tau: float
    best_index: np.ndarray
    best_rho: np.ndarray
    pairs: pd.DataFrame
    query_flat: np.ndarray
    reference_flat: np.ndarray
    params: dict = field(default_factory=dict)

    @property
    def flagged(self) -> np.ndarray:
        """*nearest* counterpart rule at tau: best rho >= tau (never for flat queries)."""
        return nearest_rule(self.best_rho, self.tau)

    def sweep(self, thresholds=SWEEP) -> pd.DataFrame:
        """Queries whose nearest reference reaches each threshold (see :func:`ncc_sweep`)."""
        return ncc_sweep(self.best_rho, thresholds)


def ncc_search(query, reference, *, tau: float = DEFAULT_TAU, block: int = 2048,
               exclude_self: bool = False, exclude=None, query_chunk: int = 8192,
               collect_pairs: bool = True, max_pairs: int = 5_000_000,
               method: str = "indexed", workers: int | None = None,
               references=None) -> NCCResult:
    """Exact NCC search: best reference per query and every pair with rho >= tau.

    Parameters
    ----------
    query : ndarray (nq, S, S) uint8
    reference : ndarray (nr, S, S) uint8
        Thumbnails of one geometry (S, interpolation); both sides must share it.
    tau : float
        Pair threshold, in (0, 1].
    block : int
        References per matrix product.
    exclude_self : bool
        Query i never matches reference i (a population against itself).
    exclude : array-like of int, optional
        Per query, a reference position never to match (-1: none); overrides ``exclude_self``.
    query_chunk : int
        Queries normalised and held at once (memory bound on the query side).
    collect_pairs : bool
        Skip the pair list when only the nearest reference is needed.
    max_pairs : int
        Bound on the stored pairs; beyond it pairs are counted (``params["pairs_total"]``)
        but not stored and ``params["pairs_truncated"]`` is True. Best references stay exact.
    method : {"indexed", "brute"}
        ``"brute"`` scores every pair; ``"indexed"`` (default) discards clusters of
        references and then pairs by a bound on a projection first and scores only the
        survivors (:mod:`splitscope.relations.ncc_index`), with the same result. Below
        :data:`splitscope.relations.pruned.MIN_PAIRS` query–reference pairs the brute force
        runs (the bound would cost more than it saves). ``params["search"]`` says which ran,
        with its FLOP count.
    workers : int, optional
        Threads of the search: the BLAS threads of the brute force's products, the threads
        over query chunks of the indexed search (one BLAS thread each); default: the BLAS
        pool as it is, every core. The result does not depend on it.
    references : splitscope.relations.saved_index.References, optional
        A saved reference index and each reference's content key: the indexed search uses
        and extends it, or builds and saves it (``params["index"]`` says which). The result
        does not depend on it.

    Returns
    -------
    NCCResult

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> ref = rng.integers(0, 256, (3, 8, 8), dtype=np.uint8)
    >>> res = ncc_search(ref[[2]], ref)
    >>> int(res.best_index[0]), bool(res.best_rho[0] > 0.999)
    (2, True)
    """
    q = _check_thumbs(query, "query thumbnails")
    r = _check_thumbs(reference, "reference thumbnails")
    if q.shape[0] and r.shape[0] and q.shape[1:] != r.shape[1:]:
        raise InputError(f"query thumbnails are {q.shape[1]}² and reference thumbnails "
                         f"{r.shape[1]}²: NCC needs one geometry on both sides")
    tau = _check_tau(tau)
    nq, nr = q.shape[0], r.shape[0]
    exclude = _check_exclude(exclude, exclude_self, nq, nr)
    q_flat = _flat(q)
    r_flat = _flat(r)
    best_idx, best_rho, pairs, n_pairs, search = search_thumbnails(
        lambda pos: q[pos], lambda pos: r[pos],
        q_flat, r_flat, tau=tau, block=block, exclude=exclude, query_chunk=query_chunk,
        collect_pairs=collect_pairs, max_pairs=max_pairs, value="rho", method=method,
        workers=workers, **({} if references is None else {"references": references}))
    return NCCResult(tau, best_idx, best_rho, pairs, q_flat, r_flat,
                     params={"tau": tau, "thumb_size": int(q.shape[1]) if nq else
                             (int(r.shape[1]) if nr else None),
                             "pairs_total": int(n_pairs), "pairs_truncated": n_pairs > len(pairs),
                             **search})


def search_thumbnails(query_thumbs, reference_thumbs, query_undefined: np.ndarray,
                      reference_undefined: np.ndarray, *, method: str = "indexed", **kwargs
                      ) -> tuple[np.ndarray, np.ndarray, pd.DataFrame, int, dict]:
    """The exact search by ``method`` (one of :data:`METHODS`) of the centred unit
    vectors of thumbnails: ``query_thumbs(positions)`` / ``reference_thumbs(positions)``
    return uint8 ``(n, S, S)`` thumbnails for ascending positions (other arguments as
    :func:`_blocked_search`, and ``workers``: the BLAS threads of the products); also
    returns what ran: ``search``, ``flops`` and ``brute_flops`` (2·d per scored pair), and
    the indexed search's statistics."""
    merge = SearchMerge(query_undefined.size, max_pairs=kwargs["max_pairs"])
    info = collect_thumbnails(merge, query_thumbs, reference_thumbs, query_undefined,
                              reference_undefined, method=method, **kwargs)
    return (*merge.result(kwargs["value"]), info)


def collect_thumbnails(merge: SearchMerge, query_thumbs, reference_thumbs,
                       query_undefined: np.ndarray, reference_undefined: np.ndarray, *,
                       method: str = "indexed", workers: int | None = None, **kwargs
                       ) -> dict:
    """Run the search of :func:`search_thumbnails` into ``merge`` (unresolved, so that the
    parts of a partitioned search can be merged by the same rule); returns what ran. It runs
    on at most ``workers`` threads (``None``: the BLAS pool as it is, every core). A
    ``references`` argument (a saved index) is for the indexed search; the brute force, which
    runs below :data:`~splitscope.relations.pruned.MIN_PAIRS` pairs, does without it."""
    from splitscope.relations import ncc_index, pruned

    if method not in METHODS:
        raise InputError(f"method must be one of {', '.join(map(repr, METHODS))}; "
                         f"got {method!r}")
    n_pairs = int((~query_undefined).sum()) * int((~reference_undefined).sum())
    with blas_threads(workers):
        if method == "indexed" and n_pairs >= pruned.MIN_PAIRS:
            return {"search": "indexed", **ncc_index.collect_indexed(
                merge, query_thumbs, reference_thumbs, query_undefined, reference_undefined,
                workers=workers, **kwargs)}
        _blocked_collect(merge, lambda pos: centred_unit_vectors(query_thumbs(pos))[0],
                         lambda pos: centred_unit_vectors(reference_thumbs(pos))[0],
                         query_undefined, reference_undefined,
                         **{k: v for k, v in kwargs.items() if k not in ("value", "references")})
    return {"search": "brute"}


def _check_tau(tau) -> float:
    if not 0.0 < float(tau) <= 1.0:
        raise InputError(f"tau must be in (0, 1]; got {tau}")
    return float(tau)


def _check_exclude(exclude, exclude_self: bool, nq: int, nr: int) -> np.ndarray | None:
    """Per-query excluded reference position (-1: none), from ``exclude`` or ``exclude_self``."""
    if exclude is None and exclude_self:
        if nq != nr:
            raise InputError("exclude_self needs query and reference of equal length")
        exclude = np.arange(nq, dtype=np.int64)
    if exclude is not None:
        exclude = np.asarray(exclude, dtype=np.int64)
        if exclude.shape != (nq,):
            raise InputError(f"exclude must have one entry per query ({nq})")
    return exclude


def _blocked_search(query_vectors, reference_vectors, query_undefined: np.ndarray,
                    reference_undefined: np.ndarray, *, tau: float, block: int,
                    exclude: np.ndarray | None, query_chunk: int, collect_pairs: bool,
                    max_pairs: int, value: str) -> tuple[np.ndarray, np.ndarray, pd.DataFrame,
                                                         int]:
    """The exact blocked search shared by NCC and embedding cosine similarity.

    Parameters
    ----------
    query_vectors, reference_vectors : callable
        ``f(positions) -> ndarray (len(positions), d) float32`` of unit vectors for the given
        (ascending) positions; called only for defined positions, one query chunk or one
        reference block at a time (this is what bounds memory).
    query_undefined, reference_undefined : ndarray of bool
        Rows whose similarity is undefined (flat image, zero or non-finite vector): never
        compared, never anyone's best reference, never in a pair.
    tau, block, exclude, query_chunk, collect_pairs, max_pairs
        As in :func:`ncc_search` (``exclude`` already validated: one position or -1 per query).
    value : str
        Name of the similarity column of the pair table (``rho``, ``cosine``).

    Returns
    -------
    best_index : ndarray (nq,) int64
        Best reference position (lowest position on ties); -1 when undefined or unmatched.
    best_value : ndarray (nq,) float32
        Its similarity clipped to [-1, 1]; NaN when undefined or unmatched.
    pairs : DataFrame ``query, reference, <value>``
        Every pair with similarity >= tau (up to ``max_pairs``), sorted by query, reference.
    pairs_total : int
        Pairs that reached tau, stored or not.
    """
    merge = SearchMerge(query_undefined.size, max_pairs=max_pairs)
    _blocked_collect(merge, query_vectors, reference_vectors, query_undefined,
                     reference_undefined, tau=tau, block=block, exclude=exclude,
                     query_chunk=query_chunk, collect_pairs=collect_pairs, max_pairs=max_pairs)
    return merge.result(value)


def _flat(thumbs: np.ndarray) -> np.ndarray:
    """Zero variance per thumbnail; for :class:`ThumbnailRows` that carry it, the recorded
    flatness (no thumbnail read)."""
    if isinstance(thumbs, ThumbnailRows) and thumbs.flat is not None:
        return thumbs.flat.copy()
    n = thumbs.shape[0]
    if n == 0:
        return np.zeros(0, bool)
    flat = np.empty(n, bool)
    for s in range(0, n, 4096):  # bounded temporary memory
        v = thumbs[s:s + 4096].reshape(min(4096, n - s), -1)
        flat[s:s + v.shape[0]] = v.min(axis=1) == v.max(axis=1)
    return flat


# ---- embedding similarity (METHODS §2.4) ---------------------------------------------------

#: Default cosine threshold for user-supplied embeddings. Unlike rho, cosine similarity has no
#: model-free scale: what "near-identical" means depends on the model, its layer and its
#: training, so this default is only a starting point and every embedding result is reported
#: with the sweep :data:`EMBEDDING_SWEEP` (and the threshold used) beside it.
DEFAULT_EMBEDDING_TAU = 0.95
#: Sweep reported with every embedding result (wider below than the NCC sweep, since embedding
#: cosines of unrelated images are often high).
EMBEDDING_SWEEP = (0.80, 0.85, 0.90, 0.95, 0.98, 0.99, 0.995, 0.999)


def _check_vectors(vectors, name: str) -> np.ndarray:
    arr = np.asarray(vectors)
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, 1)
    if arr.ndim != 2:
        raise InputError(f"{name}: expected an (n, d) array of vectors; got shape {arr.shape}")
    if arr.shape[1] == 0:
        raise InputError(f"{name}: vectors have dimension 0")
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise InputError(f"{name}: expected real numbers; got dtype {arr.dtype}")
    return arr


def unit_vectors(vectors) -> tuple[np.ndarray, np.ndarray]:
    """L2-normalise vectors (cosine similarity is then a dot product).

    The norm is taken in float64 after scaling each row by its largest absolute entry (no
    overflow or underflow for any finite input); the unit vectors are returned as float32.

    Parameters
    ----------
    vectors : array-like (n, d) of real numbers

    Returns
    -------
    unit : ndarray (n, d) float32
        Unit vectors (all zeros for undefined rows).
    undefined : ndarray (n,) bool
        Zero norm or any non-finite entry: cosine similarity undefined.
    """
    arr = _check_vectors(vectors, "vectors")
    n = arr.shape[0]
    out = np.zeros(arr.shape, np.float32)
    undefined = np.zeros(n, bool)
    step = 4096  # float64 work on a few rows at a time
    for s in range(0, n, step):
        v = arr[s:s + step].astype(np.float64)
        bad = ~np.isfinite(v).all(axis=1)
        v[bad] = 0.0
        peak = np.abs(v).max(axis=1)
        bad |= peak == 0
        v /= np.where(bad, 1.0, peak)[:, None]
        norms = np.sqrt(np.einsum("ij,ij->i", v, v))
        out[s:s + step] = v / np.where(bad, 1.0, norms)[:, None]
        undefined[s:s + step] = bad
    return out, undefined


@dataclass
class EmbeddingResult:
    """Result of :func:`embedding_search` (positions index the query / reference arrays).

    ``best_index`` (-1 when the query's vector is undefined or no defined reference is left),
    ``best_cosine`` (NaN likewise), ``pairs`` (``query, reference, cosine`` for every pair with
    cosine >= tau, sorted), ``query_undefined`` and ``reference_undefined`` (zero-norm or
    non-finite vectors: never compared, never matched).
    """

    tau: float
    best_index: np.ndarray
    best_cosine: np.ndarray
    pairs: pd.DataFrame
    query_undefined: np.ndarray
    reference_undefined: np.ndarray
    params: dict = field(default_factory=dict)

    @property
    def flagged(self) -> np.ndarray:
        """*nearest* counterpart rule at tau: best cosine >= tau (never for undefined queries)."""
        return nearest_rule(self.best_cosine, self.tau)

    def sweep(self, thresholds=EMBEDDING_SWEEP) -> pd.DataFrame:
        """Queries whose nearest reference reaches each threshold (see :func:`ncc_sweep`;
        ``flat_or_unmatched`` counts undefined or unmatched queries)."""
        return ncc_sweep(self.best_cosine, thresholds)


def embedding_search(query_vectors, reference_vectors, *, tau: float = DEFAULT_EMBEDDING_TAU,
                     block: int = 2048, exclude_self: bool = False, exclude=None,
                     query_chunk: int = 8192, collect_pairs: bool = True,
                     max_pairs: int = 5_000_000) -> EmbeddingResult:
    """Exact cosine-similarity search over user-supplied embeddings (METHODS §2.4).

    Every vector is L2-normalised (float32, see :func:`unit_vectors`); the search is the same
    exact blocked search as :func:`ncc_search` (best reference per query with the lowest
    position winning ties, every pair with cosine >= tau, same exclusion and pair bound), with
    memory bounded by the query chunk and the reference block. A zero-norm or non-finite vector
    has no defined cosine: it is flagged in ``query_undefined``/``reference_undefined``, its
    best cosine is NaN and it is never anyone's counterpart.

    Parameters
    ----------
    query_vectors : array-like (nq, d)
    reference_vectors : array-like (nr, d)
        Embeddings of one model (one dimension d on both sides).
    tau : float
        Pair threshold, in (0, 1]. Model-dependent: report it with :meth:`EmbeddingResult.sweep`.
    block, exclude_self, exclude, query_chunk, collect_pairs, max_pairs
        As in :func:`ncc_search`.

    Returns
    -------
    EmbeddingResult

    Examples
    --------
    >>> import numpy as np
    >>> ref = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 0.0]])
    >>> res = embedding_search(np.array([[3.0, 4.0], [0.0, 0.0]]), ref)
    >>> res.best_index.tolist(), res.query_undefined.tolist(), res.reference_undefined.tolist()
    ([1, -1], [False, True], [False, False, True])
    """
    q, r, tau, exclude, q_undef, r_undef = embedding_inputs(
        query_vectors, reference_vectors, tau, exclude, exclude_self)
    nq, nr = q.shape[0], r.shape[0]
    best_idx, best_cos, pairs, n_pairs = _blocked_search(
        lambda pos: unit_vectors(q[pos])[0],
        lambda pos: unit_vectors(r[pos])[0],
        q_undef, r_undef, tau=tau, block=block, exclude=exclude, query_chunk=query_chunk,
        collect_pairs=collect_pairs, max_pairs=max_pairs, value="cosine")
    dim = int(q.shape[1]) if nq else (int(r.shape[1]) if nr else None)
    return EmbeddingResult(tau, best_idx, best_cos, pairs, q_undef, r_undef,
                           params={"tau": tau, "similarity": "cosine",
                                   "normalisation": "L2, float32", "dimension": dim,
                                   "pairs_total": int(n_pairs),
                                   "pairs_truncated": n_pairs > len(pairs)})


def embedding_inputs(query_vectors, reference_vectors, tau, exclude, exclude_self: bool):
    """The checked inputs of an embedding search: ``q, r`` (arrays), ``tau``, ``exclude``
    (one position or -1 per query, or None) and the undefined query and reference rows."""
    q = _check_vectors(query_vectors, "query vectors")
    r = _check_vectors(reference_vectors, "reference vectors")
    if q.shape[0] and r.shape[0] and q.shape[1] != r.shape[1]:
        raise InputError(f"query vectors have dimension {q.shape[1]} and reference vectors "
                         f"{r.shape[1]}: cosine similarity needs one embedding on both sides")
    exclude = _check_exclude(exclude, exclude_self, q.shape[0], r.shape[0])
    return q, r, _check_tau(tau), exclude, _undefined_rows(q), _undefined_rows(r)


def _undefined_rows(arr: np.ndarray) -> np.ndarray:
    """Zero-norm or non-finite rows, in bounded memory (no unit vectors kept)."""
    n = arr.shape[0]
    undefined = np.zeros(n, bool)
    for s in range(0, n, 4096):
        undefined[s:s + 4096] = unit_vectors(arr[s:s + 4096])[1]
    return undefined


def pair_rho(query, reference, query_index, reference_index, *, chunk: int = 4096) -> np.ndarray:
    """rho for selected pairs ``(query[query_index[i]], reference[reference_index[i]])``.

    NaN where either image is flat. Vectorized over pairs in chunks.
    """
    q = _check_thumbs(query, "query thumbnails")
    r = _check_thumbs(reference, "reference thumbnails")
    qi = np.asarray(query_index, dtype=np.int64)
    ri = np.asarray(reference_index, dtype=np.int64)
    if qi.shape != ri.shape:
        raise InputError("query_index and reference_index must have the same length")
    out = np.full(qi.size, np.nan, np.float32)
    for s in range(0, qi.size, chunk):
        a, fa = centred_unit_vectors(q[qi[s:s + chunk]])
        b, fb = centred_unit_vectors(r[ri[s:s + chunk]])
        rho = np.einsum("ij,ij->i", a, b)
        rho[fa | fb] = np.nan
        out[s:s + chunk] = np.clip(rho, -1, 1)
    return out


def nearest_rule(best_rho, tau: float = DEFAULT_TAU) -> np.ndarray:
    """*nearest* counterpart: the query's maximum rho over all references reaches tau."""
    rho = np.asarray(best_rho, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(rho, nan=-np.inf) >= tau


def ncc_sweep(best_rho, thresholds=SWEEP) -> pd.DataFrame:
    """Affected queries at each threshold (nearest rule): columns ``tau, affected, assessed,
    flat_or_unmatched, rate``; ``rate = affected / assessed`` where assessed queries have a
    defined best rho (flat queries and queries without a non-flat reference are counted apart).
    """
    rho = np.asarray(best_rho, dtype=np.float64)
    assessed = int(np.isfinite(rho).sum())
    rows = []
    for t in thresholds:
        hits = int(nearest_rule(rho, t).sum())
        rows.append({"tau": float(t), "affected": hits, "assessed": assessed,
                     "flat_or_unmatched": int(rho.size - assessed),
                     "rate": hits / assessed if assessed else np.nan})
    return pd.DataFrame(rows)


def first_candidate(candidates: pd.DataFrame, reference_paths, rho,
                    tau: float = DEFAULT_TAU) -> pd.DataFrame:
    """*first candidate* counterpart rule.

    Among each query's screened candidate references (e.g. pairs with exact pHash), take the
    lexicographically first reference *path* (code-point order) and its rho; the query is flagged
    when that rho reaches tau.

    Parameters
    ----------
    candidates : DataFrame with ``query`` and ``reference`` (positions)
    reference_paths : sequence of str, indexed by reference position
    rho : array-like, one rho per candidate row (NaN for flat)
    tau : float

    Returns
    -------
    DataFrame ``query, reference, rho, flagged`` with one row per query that has a candidate.
    """
    cand = _candidates(candidates, rho)
    if cand.empty:
        return cand.assign(flagged=pd.Series(dtype=bool))
    paths = np.asarray(reference_paths, dtype=object)
    cand["_path"] = paths[cand["reference"].to_numpy()]
    first = (cand.sort_values(["query", "_path", "reference"], kind="stable")
             .drop_duplicates("query", keep="first").drop(columns="_path"))
    first["flagged"] = nearest_rule(first["rho"].to_numpy(), tau)
    return first.sort_values("query").reset_index(drop=True)


def any_candidate(candidates: pd.DataFrame, rho, tau: float = DEFAULT_TAU) -> pd.DataFrame:
    """*any candidate* counterpart rule: some screened reference of the query reaches tau.

    Returns one row per query with a candidate: ``query, reference`` (the screened reference with
    the highest rho, lowest position on ties), ``rho`` and ``flagged``.
    """
    cand = _candidates(candidates, rho)
    if cand.empty:
        return cand.assign(flagged=pd.Series(dtype=bool))
    cand["_key"] = np.nan_to_num(cand["rho"].to_numpy(np.float64), nan=-np.inf)
    best = (cand.sort_values(["query", "_key", "reference"], ascending=[True, False, True],
                             kind="stable")
            .drop_duplicates("query", keep="first").drop(columns="_key"))
    best["flagged"] = nearest_rule(best["rho"].to_numpy(), tau)
    return best.sort_values("query").reset_index(drop=True)


def _candidates(candidates: pd.DataFrame, rho) -> pd.DataFrame:
    missing = {"query", "reference"} - set(candidates.columns)
    if missing:
        raise InputError(f"candidate table lacks column(s) {sorted(missing)}; found: "
                         f"{', '.join(map(str, candidates.columns))}")
    rho = np.asarray(rho, dtype=np.float32)
    if rho.shape != (len(candidates),):
        raise InputError("one rho per candidate pair is needed")
    return pd.DataFrame({"query": candidates["query"].to_numpy(np.int64),
                         "reference": candidates["reference"].to_numpy(np.int64),
                         "rho": rho})
