"""Embedding search through an approximate index, every candidate checked exactly.

At large reference sets the exact blocked search of :func:`~splitscope.relations.ncc.
embedding_search` costs one dot product per query × reference. :func:`ivf_embedding_search`
asks a FAISS inverted-file index (IVF-Flat over the inner product of L2-normalised float32
vectors, ``[scale]`` extra) for candidates instead: the ``k`` nearest of each query, and a
range search at τ − ``margin`` for the queries whose ``k``-th nearest still reaches it. Every
candidate's cosine is then recomputed from the two vectors (:func:`~splitscope.relations.ncc_core.
canonical_values`, float64), and the pairs, ties and the best reference are decided by the
same :class:`~splitscope.relations.ncc_core.SearchMerge` as the exact search. So every reported
pair is a true pair with its exact cosine; what the index can miss is a pair whose reference
lies in a cell it did not probe (recall, measured against the exact search in
``benchmarks/bench_embeddings.py``), and, below τ, a query's best is the best the index found
(a lower bound of the exact nearest).
The exact search stays the default and the check.
"""

from __future__ import annotations

import math

import numpy as np

from splitscope.errors import InputError
from splitscope.relations.ncc import (
    DEFAULT_EMBEDDING_TAU,
    EmbeddingResult,
    embedding_inputs,
    unit_vectors,
)
from splitscope.relations.ncc_core import SearchMerge, canonical_values

__all__ = ["DEFAULT_NPROBE", "INDEXES", "check_index", "default_nlist", "ivf_embedding_search",
           "search_params"]

#: the ``--index`` choices of the embedding search
INDEXES = ("exact", "faiss-ivf")

#: inverted lists probed per query (benchmarks/README.md: recall 1.0 of the pairs ≥ τ on the
#: 100k benchmark set from 8 up)
DEFAULT_NPROBE = 16

#: training vectors per inverted list (FAISS warns below 39)
TRAIN_PER_LIST = 48


def check_index(index: str) -> str:
    """``index`` if it is one of :data:`INDEXES`, else an ``InputError`` naming them."""
    if index not in INDEXES:
        raise InputError(f"unknown embedding index {index!r}; choose from {', '.join(INDEXES)}")
    return index


#: what :func:`search_params` copies from an index search's parameters into its record
_INDEX_KEYS = ("index_type", "nlist", "nprobe", "k", "margin", "train_vectors", "seed",
               "faiss", "recheck")


def search_params(params: dict) -> dict:
    """The search's choice (``index``: ``exact`` or ``faiss-ivf``) and, for an index, its
    parameters (``index_params``), from an :class:`EmbeddingResult`'s ``params``."""
    index = params.get("index", "exact")
    if index == "exact":
        return {"index": "exact"}
    return {"index": index, "index_params": {k: params[k] for k in _INDEX_KEYS if k in params}}


def default_nlist(n: int) -> int:
    """Inverted lists for ``n`` reference vectors: about 2·√n (training and probing cost
    about the same at 100k), at most one per 39 vectors."""
    return max(1, min(round(2 * math.sqrt(max(n, 1))), n // 39))


def _faiss():
    try:
        import faiss
    except ImportError as exc:
        raise InputError("the faiss-ivf index needs FAISS: pip install 'splitscope[scale]' "
                         "(or use the exact search, --index exact)") from exc
    return faiss


def ivf_embedding_search(query_vectors, reference_vectors, *,
                         tau: float = DEFAULT_EMBEDDING_TAU, exclude_self: bool = False,
                         exclude=None, nlist: int | None = None, nprobe: int = DEFAULT_NPROBE,
                         k: int = 8, margin: float = 1e-3, seed: int = 0,
                         query_chunk: int = 8192, add_chunk: int = 65536,
                         collect_pairs: bool = True, max_pairs: int = 5_000_000
                         ) -> EmbeddingResult:
    """Cosine-similarity search over embeddings through a FAISS IVF-Flat index, candidates
    re-checked exactly (see the module docstring).

    Parameters
    ----------
    query_vectors, reference_vectors, tau, exclude_self, exclude, query_chunk, collect_pairs,
    max_pairs
        As in :func:`~splitscope.relations.ncc.embedding_search`.
    nlist : int, optional
        Inverted lists (k-means cells); default :func:`default_nlist` of the defined
        references.
    nprobe : int
        Cells searched per query (more: higher recall, slower).
    k : int
        Nearest candidates asked per query; a query whose ``k``-th still reaches τ − margin
        is also range-searched, so none of its pairs in the probed cells is cut off.
    margin : float
        The range search runs at τ − margin, so the index's own rounding cannot drop a pair
        the exact check keeps.
    seed : int
        Seed of the training sample and of k-means.
    add_chunk : int
        References normalised and added at a time (bounds the temporary memory).

    Returns
    -------
    EmbeddingResult
        ``params`` records the index and its parameters (``index``, ``nlist``, ``nprobe``,
        ``k``, ``margin``, ``train_vectors``, ``seed``, ``faiss`` version, ``recheck``).
    """
    faiss = _faiss()
    q, r, tau, exclude, q_undef, r_undef = embedding_inputs(
        query_vectors, reference_vectors, tau, exclude, exclude_self)
    if int(nprobe) < 1 or int(k) < 1 or not 0 <= float(margin) < 1:
        raise InputError(f"nprobe and k must be >= 1 and margin in [0, 1); got nprobe "
                         f"{nprobe}, k {k}, margin {margin}")
    nq, nr = q.shape[0], r.shape[0]
    r_keep = np.flatnonzero(~r_undef)
    dim = int(q.shape[1]) if nq else (int(r.shape[1]) if nr else None)
    nlist = default_nlist(r_keep.size) if nlist is None else max(1, int(nlist))
    merge = SearchMerge(nq, max_pairs=max_pairs)
    n_train = 0
    if r_keep.size and nq:
        index, n_train = _build(faiss, r, r_keep, nlist, seed, add_chunk)
        index.nprobe = min(int(nprobe), nlist)
        kk = min(int(k) + (exclude is not None), r_keep.size)
        for c0 in range(0, nq, max(1, int(query_chunk))):
            qpos = c0 + np.flatnonzero(~q_undef[c0:c0 + query_chunk])
            if qpos.size:
                _query_chunk(index, merge, q, r, r_keep, qpos, exclude, tau=tau, kk=kk,
                             margin=float(margin), collect_pairs=collect_pairs)
    best_idx, best_cos, pairs, n_pairs = merge.result("cosine")
    return EmbeddingResult(tau, best_idx, best_cos, pairs, q_undef, r_undef, params={
        "tau": tau, "similarity": "cosine", "normalisation": "L2, float32", "dimension": dim,
        "pairs_total": int(n_pairs), "pairs_truncated": n_pairs > len(pairs),
        "index": "faiss-ivf", "index_type": "IVF-Flat, inner product of L2-normalised "
                                            "float32 vectors, spherical k-means",
        "nlist": nlist, "nprobe": min(int(nprobe), nlist), "k": int(k),
        "margin": float(margin), "train_vectors": int(n_train), "seed": int(seed),
        "faiss": getattr(faiss, "__version__", None),
        "recheck": "every candidate's cosine recomputed from the two vectors (float64); pairs "
                   ">= tau are exact, pairs in unprobed cells can be missed (recall measured "
                   "in benchmarks/); below tau the best is the best candidate found"})


def _build(faiss, r: np.ndarray, r_keep: np.ndarray, nlist: int, seed: int, add_chunk: int):
    """The trained IVF-Flat index holding the defined references in position order."""
    d = r.shape[1]
    quantizer = faiss.IndexFlatIP(d)
    index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = int(seed)
    index.cp.spherical = True
    rng = np.random.default_rng(seed)
    n_train = min(r_keep.size, max(nlist * TRAIN_PER_LIST, 1))
    sample = np.sort(rng.choice(r_keep.size, n_train, replace=False))
    index.train(unit_vectors(r[r_keep[sample]])[0])
    for s in range(0, r_keep.size, max(1, int(add_chunk))):
        index.add(unit_vectors(r[r_keep[s:s + add_chunk]])[0])
    return index, n_train


def _query_chunk(index, merge: SearchMerge, q, r, r_keep, qpos, exclude, *, tau: float,
                 kk: int, margin: float, collect_pairs: bool) -> None:
    """Candidates of one chunk of queries, each re-checked on its canonical cosine and handed
    to ``merge``: the ``kk`` nearest of every query, and a range search at τ − margin for the
    queries whose ``kk``-th nearest still reaches it (they may have more pairs)."""
    qv = unit_vectors(q[qpos])[0]
    sims, nn = index.search(qv, kk)
    qi = np.repeat(np.arange(qpos.size), kk)
    ri = nn.reshape(-1)
    full = np.flatnonzero((nn[:, -1] >= 0) & (sims[:, -1] >= tau - margin))
    if collect_pairs and full.size:
        lims, _, ids = index.range_search(np.ascontiguousarray(qv[full]),
                                          float(tau - margin))
        qi = np.concatenate([qi, np.repeat(full, np.diff(lims.astype(np.int64)))])
        ri = np.concatenate([ri, ids])
    ok = ri >= 0
    qi, ri = qi[ok], ri[ok].astype(np.int64)
    rpos = r_keep[ri]
    if exclude is not None:
        ex = exclude[qpos][qi]
        qi, rpos = qi[rpos != ex], rpos[rpos != ex]
    order = np.lexsort((rpos, qi))  # one copy of each pair, in query, reference order
    qi, rpos = qi[order], rpos[order]
    first = np.r_[True, (qi[1:] != qi[:-1]) | (rpos[1:] != rpos[:-1])] if qi.size else \
        np.zeros(0, bool)
    qi, rpos = qi[first], rpos[first]
    uniq, at = np.unique(rpos, return_inverse=True)
    rv = unit_vectors(r[uniq])[0]
    canon = canonical_values(qv, qi, rv, at)
    merge.add_candidates(qpos[qi], rpos, canon)
    if collect_pairs:
        hit = canon >= tau
        merge.add_pairs(qpos[qi[hit]], rpos[hit], canon[hit].astype(np.float32))
