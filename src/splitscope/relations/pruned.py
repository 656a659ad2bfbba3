"""Exact similarity search pruned by a projection bound (METHODS §2.2: same result as scoring
every pair).

Let P be the orthogonal projection onto a k-dimensional subspace spanned by the leading
principal directions of a seeded sample of the reference vectors. For unit vectors u, v

    ⟨u, v⟩ = ⟨Pu, Pv⟩ + ⟨(I−P)u, (I−P)v⟩   and   |⟨(I−P)u, (I−P)v⟩| ≤ e_u·e_v,

with e = ‖(I−P)u‖ = √(‖u‖² − ‖Pu‖²). So ``U = ⟨Pu, Pv⟩ + e_u·e_v`` bounds ρ from above at the
cost of a k-dimensional product. A pair is scored at full dimension only when its bound can
reach what it must beat:

- a pair can reach τ only if ``U ≥ τ``;
- a reference can be a query's best only if ``U ≥ t``, where t is the exact ρ of one actual
  reference (the one with the largest bound), so the best is at least t.

Everything else is discarded without loss: the best reference (lowest position on ties, as
in the brute force) and every pair with ρ ≥ τ are those of scoring every pair. Both tests
compare with a safety margin (:data:`MARGIN`) for floating-point rounding: the bound and
the exact ρ are float32 computations (about √d·2⁻²⁴ ≈ 6·10⁻⁶ of error for d = 9216, and
``d·2⁻²⁴ ≈ 5.5·10⁻⁴`` in the worst case), and the residual norms are rounded up
(:data:`RESIDUAL_GUARD`). Surviving pairs are scored by a dense matrix product over the block's
surviving queries × references when they are dense enough (:data:`GATHER_COST`), else pair
by pair.

The result holds whatever the data; only the speed depends on them: on images of one modality
most of a thumbnail's energy lies in a few dozen directions, the residuals are small and few
pairs survive; on white noise nothing is pruned and the search does the brute force's work
plus the projections.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.relations.ncc import (
    SETTLE,
    SearchMerge,
    _blocked_collect,
    canonical_values,
    settled_pairs,
)

#: Safety margin on both bound tests (see the module docstring).
MARGIN = 1e-3
#: Added to each residual norm² before the square root (rounds the residual up).
RESIDUAL_GUARD = 1e-6
#: References sampled (seeded) per dimension of the projection to estimate the principal
#: directions (any orthonormal basis keeps the search exact; a better one prunes more).
BASIS_SAMPLE_PER_RANK = 8
#: Below this many query × reference pairs the brute force runs instead.
MIN_PAIRS = 1_000_000
#: A pair scored on its own costs about this many pairs of a dense product (memory traffic of
#: gathering two d-vectors against the arithmetic of a blocked matrix product).
GATHER_COST = 24


def principal_basis(reference_vectors, positions: np.ndarray, rank: int, seed: int = 0
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal (d, k) float32 basis of the leading ``rank`` principal directions (second
    moments, not centred: what maximises ‖Pu‖²) of a seeded sample of reference vectors, and
    the sample's vectors."""
    rng = np.random.default_rng(seed)
    m = min(positions.size, BASIS_SAMPLE_PER_RANK * rank)
    sample = np.sort(rng.choice(positions, size=m, replace=False))
    x32 = np.asarray(reference_vectors(sample), dtype=np.float32)
    w, vecs = np.linalg.eigh((x32 @ x32.T).astype(np.float64))
    x = x32.astype(np.float64)
    w, vecs = w[::-1], vecs[:, ::-1]
    k = int(min(rank, m, x.shape[1], int((w > 1e-9 * max(w[0], 1e-300)).sum())))
    basis = x.T @ (vecs[:, :k] / np.sqrt(w[:k]))
    return np.linalg.qr(basis)[0].astype(np.float32), x32


def surviving_share(query_sample: np.ndarray, reference_sample: np.ndarray,
                    basis: np.ndarray, tau: float, collect_pairs: bool) -> float:
    """Share of sample query × reference pairs whose bound reaches the sample queries' best
    exact ρ over the sample (or τ): an over-estimate of the share that survives in the
    search, whose thresholds are set by the best over all references."""
    if len(query_sample) == 0 or len(reference_sample) == 0:
        return 1.0
    exact = query_sample @ reference_sample.T
    qp, qe = project(query_sample, basis)
    rp, re = project(reference_sample, basis)
    upper = qp @ rp.T + (qe[:, None] * re[None, :]).astype(np.float32)
    need = exact.max(axis=1) - MARGIN
    if collect_pairs:
        need = np.minimum(need, tau - MARGIN)
    return float((upper >= need[:, None]).mean())


def project(vectors: np.ndarray, basis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates ``Pu`` (float32) and residual norms ``e`` (float64, rounded up)."""
    p = vectors @ basis
    norm2 = np.einsum("ij,ij->i", vectors, vectors, dtype=np.float64)
    res2 = norm2 - np.einsum("ij,ij->i", p, p, dtype=np.float64)
    return p, np.sqrt(np.maximum(res2, 0.0) + RESIDUAL_GUARD)


def pruned_search(query_vectors, reference_vectors, query_undefined: np.ndarray,
                  reference_undefined: np.ndarray, *, tau: float, block: int,
                  exclude: np.ndarray | None, query_chunk: int, collect_pairs: bool,
                  max_pairs: int, value: str, rank: int = 32, seed: int = 0,
                  fall_back: bool = True
                  ) -> tuple[np.ndarray, np.ndarray, pd.DataFrame, int, dict]:
    """The search of :func:`splitscope.relations.ncc._blocked_search` (same arguments, same
    result), pruned by the projection bound; also returns its statistics: ``rank``,
    ``margin``, ``scored_pairs`` (pairs scored at full dimension), ``flops`` and
    ``brute_flops`` (what scoring every pair costs).

    With ``fall_back`` (default) the brute force runs instead when a seeded sample says that
    too many pairs would survive the bound for it to pay (:func:`surviving_share`). The pruned
    passes run on one BLAS thread: their products are small, and threads cost more than
    they save there.
    """
    merge = SearchMerge(query_undefined.size, max_pairs=max_pairs)
    stats = collect_pruned(merge, query_vectors, reference_vectors, query_undefined,
                           reference_undefined, tau=tau, block=block, exclude=exclude,
                           query_chunk=query_chunk, collect_pairs=collect_pairs,
                           max_pairs=max_pairs, value=value, rank=rank, seed=seed,
                           fall_back=fall_back)
    return (*merge.result(value), stats)


def collect_pruned(merge: SearchMerge, query_vectors, reference_vectors,
                   query_undefined: np.ndarray, reference_undefined: np.ndarray, *,
                   tau: float, block: int, exclude: np.ndarray | None, query_chunk: int,
                   collect_pairs: bool, max_pairs: int, value: str = "rho", rank: int = 32,
                   seed: int = 0, fall_back: bool = True) -> dict:
    """:func:`pruned_search` into ``merge`` (see :class:`~splitscope.relations.ncc.
    SearchMerge`); returns its statistics."""
    from threadpoolctl import threadpool_limits

    args = (merge, query_vectors, reference_vectors, query_undefined, reference_undefined)
    kwargs = {"tau": tau, "block": block, "exclude": exclude, "query_chunk": query_chunk,
              "collect_pairs": collect_pairs, "max_pairs": max_pairs}
    if query_undefined.all() or reference_undefined.all():  # nothing to compare
        _blocked_collect(*args, **kwargs)
        return {"search": "brute (nothing to compare)", "flops": 0.0, "brute_flops": 0.0}
    with threadpool_limits(1):
        out = _pruned(*args, **kwargs, rank=rank, seed=seed, fall_back=fall_back)
    if not isinstance(out, float):
        return out
    # most blocks would be scored densely anyway: the bound would only add its cost
    n_dense = 2 * int((~query_undefined).sum()) * int((~reference_undefined).sum())
    d = int(np.asarray(reference_vectors(np.flatnonzero(~reference_undefined)[:1])).shape[1])
    _blocked_collect(*args, **kwargs)
    return {"search": "brute (projection bound would keep too many pairs)", "rank": int(rank),
            "estimated_surviving_share": out, "flops": float(n_dense * d),
            "brute_flops": float(n_dense * d)}


def _pruned(merge, query_vectors, reference_vectors, query_undefined, reference_undefined, *,
            tau, block, exclude, query_chunk, collect_pairs, max_pairs, rank, seed, fall_back):
    """The pruned search into ``merge`` (its statistics returned), or, when ``fall_back`` and
    the bound would not pay, the estimated surviving share alone (``merge`` untouched)."""
    nq = query_undefined.size
    r_keep = np.flatnonzero(~reference_undefined)
    basis, ref_sample = principal_basis(reference_vectors, r_keep, rank, seed)
    q_keep = np.flatnonzero(~query_undefined)
    q_sample = np.sort(np.random.default_rng(seed).choice(
        q_keep, size=min(q_keep.size, len(ref_sample)), replace=False))
    share = surviving_share(query_vectors(q_sample), ref_sample, basis, tau, collect_pairs)
    if fall_back and share * GATHER_COST >= 1:
        return share
    d, k = basis.shape
    nr = r_keep.size
    ref_p = np.empty((nr, k), np.float32)
    ref_e = np.empty(nr, np.float64)
    for b0 in range(0, nr, block):
        ref_p[b0:b0 + block], ref_e[b0:b0 + block] = project(
            reference_vectors(r_keep[b0:b0 + block]), basis)
    ref_e32 = ref_e.astype(np.float32)
    scored = 0
    n_defined_q = 0
    for c0 in range(0, nq, query_chunk):
        qpos = c0 + np.flatnonzero(~query_undefined[c0:min(c0 + query_chunk, nq)])
        if qpos.size == 0 or nr == 0:
            continue
        n_defined_q += qpos.size
        qv = query_vectors(qpos)
        qp, qe = project(qv, basis)
        qe32 = qe.astype(np.float32)
        ex = exclude[qpos] if exclude is not None else None

        def bounds(b0: int, qp=qp, qe32=qe32, ex=ex) -> np.ndarray:
            """Upper bounds (chunk, block) of ρ; excluded pairs get -inf."""
            u = qp @ ref_p[b0:b0 + block].T
            u += qe32[:, None] * ref_e32[None, b0:b0 + block]
            if ex is not None:
                rpos = r_keep[b0:b0 + block]
                loc = np.minimum(np.searchsorted(rpos, ex), rpos.size - 1)
                hit = np.flatnonzero((ex >= 0) & (rpos[loc] == ex))
                u[hit, loc[hit]] = -np.inf
            return u

        # pass 1: each query's reference with the largest bound, scored exactly, gives t
        top_u = np.full(qpos.size, -np.inf, np.float32)
        top = np.full(qpos.size, -1, np.int64)
        for b0 in range(0, nr, block):
            u = bounds(b0)
            a = u.argmax(axis=1)
            v = u[np.arange(qpos.size), a]
            better = v > top_u
            top_u[better] = v[better]
            top[better] = b0 + a[better]
        has = top >= 0
        t = np.full(qpos.size, np.inf, np.float32)
        if has.any():
            t[has] = _pair_values(qv, np.flatnonzero(has), reference_vectors, r_keep, top[has])
            scored += int(has.sum())
        need = t - MARGIN
        if collect_pairs:
            need = np.minimum(need, np.float32(tau - MARGIN))
        # pass 2: score every pair whose bound reaches what it must beat
        c_best = np.full(qpos.size, -np.inf, np.float32)
        for b0 in range(0, nr, block):
            survive = bounds(b0) >= need[:, None]
            qi, rj = np.nonzero(survive)
            if qi.size == 0:
                continue
            uq, ur = np.flatnonzero(survive.any(axis=1)), np.flatnonzero(survive.any(axis=0))
            rv = reference_vectors(r_keep[b0 + ur])
            if qi.size * GATHER_COST >= uq.size * ur.size:
                # dense enough: one product over the surviving queries × references
                prod = qv[uq] @ rv.T
                scored += prod.size
                prod[~survive[np.ix_(uq, ur)]] = -np.inf
                qi, ir = np.nonzero(prod > -np.inf)
                vals = prod[qi, ir]
                qi = uq[qi]
            else:
                ir = np.searchsorted(ur, rj)
                vals = _pair_dots(qv, qi, rv, ir)
                scored += qi.size
            np.maximum.at(c_best, qi, vals)
            m = vals >= c_best[qi] - SETTLE
            merge.add_candidates(qpos[qi[m]], r_keep[b0 + ur[ir[m]]],
                                 canonical_values(qv, qi[m], rv, ir[m]))
            if collect_pairs:
                m = vals >= tau - SETTLE
                hq, hr, hv = settled_pairs(qv, qi[m], rv, ir[m], vals[m], tau)
                merge.add_pairs(qpos[hq], r_keep[b0 + ur[hr]], hv)
    m = min(nr, BASIS_SAMPLE_PER_RANK * rank)
    flops = (2 * 2 * m * m * d + 2 * m * d * k  # basis and the survivor estimate
             + 2 * (nr + n_defined_q) * d * k  # projections
             + 2 * 2 * n_defined_q * nr * k  # bounds, two passes
             + 2 * d * scored)  # pairs scored at full dimension
    stats = {"rank": int(k), "margin": MARGIN, "estimated_surviving_share": share,
             "basis_sample": int(m), "seed": seed,
             "scored_pairs": int(scored), "flops": float(flops),
             "brute_flops": float(2 * n_defined_q * nr * d)}
    return stats


def _pair_values(qv: np.ndarray, qi: np.ndarray, reference_vectors, r_keep: np.ndarray,
                 rj: np.ndarray) -> np.ndarray:
    """ρ of the pairs (query row ``qi`` of ``qv``, reference ``r_keep[rj]``), one each."""
    uniq, inv = np.unique(rj, return_inverse=True)
    return _pair_dots(qv, qi, reference_vectors(r_keep[uniq]), inv)


def _pair_dots(qv: np.ndarray, qi: np.ndarray, rv: np.ndarray, ri: np.ndarray,
               chunk: int = 1024) -> np.ndarray:
    """``⟨qv[qi[i]], rv[ri[i]]⟩`` for every i, a chunk of pairs at a time."""
    out = np.empty(qi.size, np.float32)
    for s in range(0, qi.size, chunk):
        out[s:s + chunk] = np.einsum("ij,ij->i", qv[qi[s:s + chunk]], rv[ri[s:s + chunk]])
    return out
