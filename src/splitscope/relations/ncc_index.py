"""Exact NCC search over a cluster index of the projected references (METHODS §2.2: the same
result as scoring every pair).

The pruned search (:mod:`splitscope.relations.pruned`) bounds ρ by ``U = ⟨a_u, a_v⟩`` with
``a = (Pu, e_u)``, the coordinates of a thumbnail's centred unit vector u on an orthonormal
projection P and its residual norm ``e_u = ‖(I−P)u‖`` (rounded up); so ``‖a‖ ≈ 1`` and U is
the cosine of the angle between two points of a (k+1)-dimensional sphere. It computes U for
every query × reference pair. This search computes it only inside clusters that can hold a
reference reaching what the query must beat:

- the references' ``a`` are grouped by spherical k-means (seeded, on a sample, then every
  reference assigned to its nearest centre); each cluster keeps its unit centre c, its angular
  radius θ (the largest angle between c and a member) and its members' norms;
- the angle between a query's ``a_q`` and any member is at least ``φ − θ``, φ the angle between
  ``a_q`` and c (triangle inequality on the sphere), so
  ``U ≤ ‖a_q‖·‖a_v‖·cos(max(0, φ − θ))`` for every member: one product per query × cluster
  bounds a whole cluster (:func:`cap_bounds`, computed in float64 with a slack of
  :data:`CAP_SLACK` above it).

Each query chunk runs the pruned search's two passes over clusters instead of reference
blocks: pass 1 scores exactly the member of largest U in the query's :data:`FIRST_CLUSTERS`
nearest clusters, which gives t (the exact ρ of one actual reference, so the best is at least
t); pass 2 visits, cluster
by cluster, the queries whose cluster bound reaches ``min(best so far, τ) − MARGIN``, computes
U against the members and scores exactly the pairs whose U reaches it, as the pruned search
does (:func:`splitscope.relations.pruned.score_survivors`), the best so far rising as pairs are
scored. A skipped cluster holds no reference that could be a query's best, tie within
:data:`~splitscope.relations.ncc_core.SETTLE` or a pair ≥ τ; so the best reference (lowest
position on ties), its ρ and every pair ≥ τ are those of the brute force, bit for bit (the
values are the shared :func:`~splitscope.relations.ncc_core.canonical_values`).

The speed depends on the data, never the result. Where the nearest references are much closer
than the clusters are wide (frames of one video, a release built from copies) few clusters are
visited: on drifting video frames 4% of the query × reference bounds are computed. Where
thumbnails spread over many directions every cluster can hold a query's best, since the
nearest-counterpart rule needs each query's best reference however far it is: on generated
smooth random images (about 63 independent directions, best ρ about 0.6) and on Kermany every
cluster is visited, and the search is the pruned search's second pass with a pass 1 that
costs a few clusters instead of every pair (one bound per pair instead of two). Below
:data:`INDEX_MIN_PAIRS` pairs the pruned passes run without clusters. Query chunks run on
``workers`` threads (one BLAS thread each); their parts are merged in chunk order by the
merge's one rule, so the result does not depend on them.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.sparse import csr_matrix

from splitscope.relations.ncc_core import SearchMerge, centred_unit_vectors
from splitscope.relations.pruned import (
    BOUND_CACHE_BYTES,
    MARGIN,
    Plan,
    ReferenceVectors,
    add_top_candidates,
    add_top_pairs,
    brute_collect,
    plan_search,
    pruned_passes,
    score_survivors,
)

__all__ = ["ClusterIndex", "build_index", "cap_bounds", "collect_indexed"]

#: Clusters per reference: ``CLUSTERS_PER_ROOT · √R`` clusters for R references.
CLUSTERS_PER_ROOT = 2.0
#: References sampled (seeded) per cluster to place the centres; every reference is then
#: assigned to its nearest one.
SAMPLE_PER_CLUSTER = 16
#: Iterations of spherical k-means on the sample.
ITERATIONS = 4
#: Added to every cluster bound: float64 rounding of the angles and norms is far below it.
CAP_SLACK = 1e-6
#: References assigned to centres at a time (bounds the memory of the assignment).
ASSIGN_BLOCK = 8192
#: Below this many query × reference pairs the pruned search's passes run instead (without
#: clusters): the pruned search then keeps each chunk's bounds for its second pass
#: (:data:`splitscope.relations.pruned.BOUND_CACHE_BYTES`), and building the clusters would
#: cost more than they save.
INDEX_MIN_PAIRS = BOUND_CACHE_BYTES // 4
#: Pass 1 looks for each query's t in its this many nearest clusters.
FIRST_CLUSTERS = 8
#: Queries whose cluster bounds are computed at a time (float64 temporaries).
CAP_BLOCK = 1024
#: A cluster needed by at least 1/FULL_CHUNK of a chunk's queries is bounded for all of them
#: (one product without gathering their rows; the others cannot pass, U being at most the
#: cluster's bound).
FULL_CHUNK = 4


@dataclass(frozen=True)
class ClusterIndex:
    """Clusters of the references' bound coordinates ``a`` (rows of ``Plan.ref_p``).

    ``order`` lists reference indices (into ``r_keep``) cluster by cluster, ascending inside
    each; cluster j holds ``order[start[j]:start[j + 1]]`` and their coordinates
    ``coords[start[j]:start[j + 1]]``; ``slot`` is the inverse of ``order`` (where each
    reference sits). ``centres`` are unit vectors (float64), ``cos_radius``
    the cosine of each cluster's angular radius, ``norm_min``/``norm_max`` its members' norms.
    """

    order: np.ndarray
    slot: np.ndarray
    start: np.ndarray
    coords: np.ndarray
    centres: np.ndarray
    cos_radius: np.ndarray
    norm_min: np.ndarray
    norm_max: np.ndarray

    def __len__(self) -> int:
        return int(self.centres.shape[0])

    def members(self, j: int) -> slice:
        return slice(int(self.start[j]), int(self.start[j + 1]))

    def labels(self) -> np.ndarray:
        """Each reference's cluster (by index into ``r_keep``)."""
        return np.repeat(np.arange(len(self)), np.diff(self.start))[self.slot]

    def place(self, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Cluster and position inside it of references ``ref`` (indices into ``r_keep``)."""
        slot = self.slot[ref]
        cluster = np.searchsorted(self.start, slot, side="right") - 1
        return cluster, slot - self.start[cluster]


def n_clusters(n_references: int) -> int:
    """Clusters for ``n_references`` references (:data:`CLUSTERS_PER_ROOT` · √R, at least 1)."""
    return int(max(1, min(n_references, round(CLUSTERS_PER_ROOT * np.sqrt(n_references)))))


def build_index(ref_p: np.ndarray, *, clusters: int | None = None, seed: int = 0
                ) -> ClusterIndex:
    """Spherical k-means clusters of the rows of ``ref_p`` (``(R, k + 1)`` float32, rows of
    norm about 1): centres placed on a seeded sample of :data:`SAMPLE_PER_CLUSTER` rows per
    cluster in :data:`ITERATIONS` rounds, every row then assigned to its nearest centre, each
    centre moved to its members' normalised mean and its radius measured on them (float64).
    Empty clusters are dropped. The index is exact whatever the clusters: they only decide
    the speed."""
    a = np.asarray(ref_p, np.float32)
    n = a.shape[0]
    if n == 0:
        raise ValueError("an index needs at least one reference")
    c = n_clusters(n) if clusters is None else int(max(1, min(n, clusters)))
    rng = np.random.default_rng(seed)
    sample = a[np.sort(rng.choice(n, size=min(n, SAMPLE_PER_CLUSTER * c), replace=False))]
    centres = sample[rng.choice(len(sample), size=c, replace=False)]
    rows = np.arange(len(sample))
    for _ in range(ITERATIONS):
        label = (sample @ centres.T).argmax(axis=1)
        member = csr_matrix((np.ones(len(sample), np.float32), (label, rows)),
                            shape=(c, len(sample)))
        sums = np.asarray(member @ sample)
        norms = np.linalg.norm(sums, axis=1)
        centres = sample[rng.choice(len(sample), size=c)]  # an empty cluster restarts there
        live = norms > 0
        centres[live] = sums[live] / norms[live, None]
    return index_of(a, assign(a, centres))


def assign(a: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """Each row of ``a``'s nearest centre (largest cosine; the first on ties), int64."""
    centres = np.asarray(centres, np.float32)
    label = np.empty(a.shape[0], np.int64)
    for s in range(0, a.shape[0], ASSIGN_BLOCK):
        label[s:s + ASSIGN_BLOCK] = (a[s:s + ASSIGN_BLOCK] @ centres.T).argmax(axis=1)
    return label


def index_of(a: np.ndarray, label: np.ndarray, centres: np.ndarray | None = None
             ) -> ClusterIndex:
    """The :class:`ClusterIndex` of rows ``a`` grouped by ``label``: each cluster's unit
    centre is ``centres[label]`` when given, else its members' normalised mean; its radius
    and norms are measured on its members (float64). Empty clusters are dropped."""
    a = np.asarray(a, np.float32)
    n = a.shape[0]
    order = np.argsort(label, kind="stable")  # ascending reference index inside a cluster
    used, counts = np.unique(label, return_counts=True)
    start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    coords = a[order]
    m = start.size - 1
    unit = np.empty((m, a.shape[1]), np.float64)
    cos_radius, norm_min, norm_max = np.empty(m), np.empty(m), np.empty(m)
    for j in range(m):  # float64, one cluster at a time
        x = coords[start[j]:start[j + 1]].astype(np.float64)
        centre = x.sum(axis=0) if centres is None else np.asarray(centres[used[j]], np.float64)
        size = np.linalg.norm(centre)
        unit[j] = centre / size if size > 0 else x[0] / np.linalg.norm(x[0])
        norm = np.sqrt(np.einsum("ij,ij->i", x, x))
        cos_radius[j] = np.clip(x @ unit[j] / norm, -1.0, 1.0).min()
        norm_min[j], norm_max[j] = norm.min(), norm.max()
    slot = np.empty(n, np.int64)
    slot[order] = np.arange(n)
    return ClusterIndex(order, slot, start, coords, unit, cos_radius, norm_min, norm_max)


def cap_bounds(index: ClusterIndex, qa: np.ndarray, nearest: int = 1
               ) -> tuple[np.ndarray, np.ndarray]:
    """For query coordinates ``qa`` (``(n, k + 1)``): an upper bound of ``⟨a_q, a_v⟩`` over
    the members of each cluster, ``(clusters, n)`` float32 (at least the float64 bound plus
    :data:`CAP_SLACK`), and each query's ``nearest`` clusters (largest cosine to their
    centres; ``(nearest, n)``, nearest first). Float64 work on :data:`CAP_BLOCK` queries at a
    time."""
    n, c = qa.shape[0], len(index)
    p = min(int(nearest), c)
    out = np.empty((c, n), np.float32)
    near = np.empty((p, n), np.int64)
    ca = index.cos_radius[:, None]
    sa = np.sqrt(np.maximum(1.0 - ca * ca, 0.0))
    for s in range(0, n, CAP_BLOCK):
        q64 = np.asarray(qa[s:s + CAP_BLOCK], np.float64)
        qn = np.linalg.norm(q64, axis=1)
        cos = (index.centres @ q64.T) / np.where(qn > 0, qn, 1.0)[None, :]  # (clusters, b)
        np.clip(cos, -1.0, 1.0, out=cos)
        top = (np.argpartition(-cos, p - 1, axis=0)[:p] if p < c
               else np.broadcast_to(np.arange(p)[:, None], cos.shape).copy())
        near[:, s:s + CAP_BLOCK] = np.take_along_axis(
            top, np.argsort(-np.take_along_axis(cos, top, axis=0), axis=0, kind="stable"),
            axis=0)
        # cos(max(0, φ − θ)): 1 inside the cap, cos φ cos θ + sin φ sin θ outside it
        bound = np.where(cos >= ca, 1.0,
                         cos * ca + np.sqrt(np.maximum(1.0 - cos * cos, 0.0)) * sa)
        bound *= np.where(bound >= 0, index.norm_max[:, None], index.norm_min[:, None])
        bound *= qn[None, :]
        bound += CAP_SLACK
        block = out[:, s:s + CAP_BLOCK]
        block[...] = bound
        np.nextafter(block, np.float32(np.inf), out=block)  # float32 rounding stays above
    return out, near


def collect_indexed(merge: SearchMerge, query_thumbs, reference_thumbs,
                    query_undefined: np.ndarray, reference_undefined: np.ndarray, *,
                    tau: float, block: int, exclude: np.ndarray | None, query_chunk: int,
                    collect_pairs: bool, max_pairs: int, seed: int = 0, fall_back: bool = True,
                    workers: int | None = None, clusters: int | None = None,
                    options=None, value: str = "rho", references=None) -> dict:
    """The indexed search into ``merge`` (arguments as
    :func:`splitscope.relations.pruned.collect_pruned`; ``clusters`` overrides
    :func:`n_clusters`); returns its statistics (those of the pruned search, and
    ``clusters``, ``cluster_bounds``: query × cluster bounds computed, ``visited_share``: the
    share of query × reference bounds computed). Query chunks run on ``workers`` threads (all
    cores when None), one BLAS thread each.

    With ``references`` (:class:`~splitscope.relations.saved_index.References`: a saved
    index and each reference's content key), a saved index's bound, coordinates and clusters
    are used (whatever the number of pairs) and extended by the references it lacks; when
    there is none to use (or it cannot be read), an index built at
    :data:`INDEX_MIN_PAIRS` pairs or more is saved; ``index`` in the statistics says which.
    The result is the same either way."""
    from threadpoolctl import threadpool_limits

    args = (merge, query_thumbs, reference_thumbs, query_undefined, reference_undefined)
    kwargs = {"tau": tau, "block": block, "exclude": exclude, "query_chunk": query_chunk,
              "collect_pairs": collect_pairs, "max_pairs": max_pairs}
    if query_undefined.all() or reference_undefined.all():  # nothing to compare
        brute_collect(*args, **kwargs)
        return {"search": "brute (nothing to compare)", "flops": 0.0, "brute_flops": 0.0}
    defined = np.flatnonzero(~query_undefined)
    # one BLAS thread throughout, as the pruned search: these products are small, and
    # threads that wait on each other cost more than they save
    with threadpool_limits(1):
        found, why = _saved_plan(references, reference_thumbs, reference_undefined, block,
                                 seed)
        if found is None:
            plan = plan_search(query_thumbs, reference_thumbs, query_undefined,
                               reference_undefined, tau=tau, block=block,
                               collect_pairs=collect_pairs, options=options, seed=seed,
                               fall_back=fall_back)
    if found is not None:
        plan, index, kept = found
    elif not isinstance(plan, Plan):  # the bound would not pay: score every pair
        brute_collect(*args, **kwargs)
        return plan
    elif defined.size * plan.r_keep.size < INDEX_MIN_PAIRS:
        # few pairs: the pruned search bounds each chunk once (its bounds are kept for its
        # second pass), which the clusters would not save; no index is built or saved
        with threadpool_limits(1):
            stats = pruned_passes(merge, plan, query_thumbs, reference_thumbs, query_undefined,
                                  tau=tau, block=block, exclude=exclude,
                                  query_chunk=query_chunk, collect_pairs=collect_pairs)
        return {**stats, "search": f"pruned (fewer than {INDEX_MIN_PAIRS:,} pairs: no index)"}
    else:
        with threadpool_limits(1):
            index = build_index(plan.ref_p, clusters=clusters, seed=seed)
        kept = _keep(references, plan, index, why)
    plan.ref_p = index.coords[:0]  # the index holds them, in its own order
    threads = int(workers) if workers is not None else (os.cpu_count() or 1)
    # at least one chunk per thread, at most query_chunk queries in one
    size = max(1, min(int(query_chunk), -(-defined.size // threads)))
    chunks = [defined[s:s + size] for s in range(0, defined.size, size)]

    def run(qpos: np.ndarray) -> tuple[dict, dict]:
        part = SearchMerge(query_undefined.size, max_pairs=max_pairs)
        # an OpenMP pool's limit is the calling thread's own: set in each thread
        with threadpool_limits(1, user_api="openmp"):
            counts = _chunk(part, plan, index, qpos, query_thumbs, reference_thumbs,
                            exclude=exclude, tau=tau, collect_pairs=collect_pairs,
                            block=block)
        return part.part(), counts

    # one BLAS thread per chunk: the BLAS limit is process-wide, so it is set here, once, for
    # every thread of the pool
    with threadpool_limits(1):
        if threads > 1 and len(chunks) > 1:
            with ThreadPoolExecutor(max_workers=min(threads, len(chunks))) as pool:
                done = list(pool.map(run, chunks))  # merged in chunk order below
        else:
            done = [run(c) for c in chunks]
    total = {"bound_pairs": 0, "scored": 0, "normalised": 0, "cluster_bounds": 0}
    for part, counts in done:
        merge.merge(part)
        for key in total:
            total[key] += counts[key]
    nr, k = plan.r_keep.size, plan.dims
    n_sample = min(nr, SAMPLE_PER_CLUSTER * len(index))
    build = nr * len(index) + ITERATIONS * n_sample * len(index)  # k-means and assignment
    stats = plan.stats(n_defined_q=int(defined.size), bound_pairs=total["bound_pairs"],
                       scored=total["scored"], normalised=total["normalised"],
                       extra_flops=2.0 * (k + 1) * (total["cluster_bounds"] + build))
    return {**stats, "clusters": len(index), "index": kept,
            "cluster_bounds": int(total["cluster_bounds"]),
            "visited_share": total["bound_pairs"] / max(1, defined.size * nr),
            "threads": min(threads, len(chunks))}


def _chunk(merge: SearchMerge, plan: Plan, index: ClusterIndex, qpos: np.ndarray,
           query_thumbs, reference_thumbs, *, exclude: np.ndarray | None, tau: float,
           collect_pairs: bool, block: int) -> dict:
    """Both passes for the queries at ``qpos`` (defined, ascending) into ``merge``."""
    r_keep = plan.r_keep
    ref_vectors = ReferenceVectors(reference_thumbs, min(int(block), r_keep.size))
    qt = np.asarray(query_thumbs(qpos))
    qv = centred_unit_vectors(qt)[0]
    qa = plan.query_coordinates(qt)
    del qt
    n = qpos.size
    ub, near = cap_bounds(index, qa, FIRST_CLUSTERS)
    # each query's excluded reference as (cluster, slot inside it); -1: none
    ex_cluster = np.full(n, -1, np.int64)
    ex_slot = np.zeros(n, np.int64)
    if exclude is not None:
        ex = exclude[qpos]
        loc = np.minimum(np.searchsorted(r_keep, ex), r_keep.size - 1)
        hit = np.flatnonzero((ex >= 0) & (r_keep[loc] == ex))
        ex_cluster[hit], ex_slot[hit] = index.place(loc[hit])
    everyone = np.arange(n)

    def bounds(j: int, qs: np.ndarray) -> np.ndarray:
        """U of queries ``qs`` × the members of cluster j; excluded pairs get -inf."""
        u = (qa if qs.size == n else qa[qs]) @ index.coords[index.members(j)].T
        rows = np.flatnonzero(ex_cluster[qs] == j)
        u[rows, ex_slot[qs[rows]]] = -np.inf
        return u

    # pass 1: in each query's FIRST_CLUSTERS nearest clusters, the member of largest U,
    # scored exactly
    top = np.full(n, -1, np.int64)  # index into r_keep
    top_u = np.full(n, -np.inf, np.float32)
    bound_pairs = 0
    for nearest in near:
        by_cluster = np.argsort(nearest, kind="stable")
        cut = np.flatnonzero(np.diff(nearest[by_cluster])) + 1
        for qs in np.split(by_cluster, cut):
            j = int(nearest[qs[0]])
            u = bounds(j, qs)
            bound_pairs += u.size
            a = u.argmax(axis=1)
            v = u[np.arange(qs.size), a]
            better = v > top_u[qs]
            top_u[qs[better]] = v[better]
            top[qs[better]] = index.order[index.start[j] + a[better]]
    has = np.flatnonzero(top >= 0)
    c_best = np.full(n, -np.inf, np.float32)
    t = np.full(n, -np.inf, np.float32)
    scored = 0
    top_cluster = np.full(n, -1, np.int64)
    top_slot = np.zeros(n, np.int64)
    if has.size:
        t[has] = c_best[has] = add_top_pairs(merge, qv, has, r_keep[top[has]], ref_vectors,
                                             qpos, tau, collect_pairs)
        scored += has.size
        top_cluster[has], top_slot[has] = index.place(top[has])
    # what a pair must reach: the lowest finite float32 where nothing is known yet, so that
    # an excluded pair (-inf) never does
    floor, margin = np.float32(np.finfo(np.float32).min), np.float32(MARGIN)
    cap = np.float32(tau - MARGIN) if collect_pairs else np.float32(np.inf)

    def need_of(best: np.ndarray) -> np.ndarray:
        return np.maximum(np.minimum(best - margin, cap), floor)

    need = need_of(c_best)
    # pass 2: cluster by cluster, the queries whose cluster bound reaches what they must beat;
    # the survivors of about ``block`` references' clusters are scored together
    waiting: list[tuple[np.ndarray, np.ndarray]] = []
    gathered = 0

    def score_waiting() -> int:
        qi = np.concatenate([w[0] for w in waiting])
        rj = np.concatenate([w[1] for w in waiting])
        waiting.clear()
        order = np.lexsort((rj, qi))  # row-major, as a product's survivors
        qi, rj = qi[order], rj[order]
        done = score_survivors(merge, qv, qi, rj, r_keep, ref_vectors, c_best, qpos, tau,
                               collect_pairs)
        touched = np.unique(qi)
        need[touched] = need_of(c_best[touched])
        return done

    for j in range(len(index)):
        qs = np.flatnonzero(ub[j] >= need)
        if qs.size == 0:
            continue
        if qs.size * FULL_CHUNK >= n:  # most of the chunk: no gather (U ≤ its cluster bound)
            qs = everyone
        u = bounds(j, qs)
        bound_pairs += u.size
        rows = np.flatnonzero(u.max(axis=1) >= need[qs])
        if rows.size == 0:
            continue
        survive = u[rows] >= need[qs[rows], None]
        mine = np.flatnonzero(top_cluster[qs[rows]] == j)
        survive[mine, top_slot[qs[rows[mine]]]] = False
        qi, rj = np.nonzero(survive)
        if qi.size:
            waiting.append((qs[rows[qi]], index.order[index.start[j] + rj]))
            gathered += u.shape[1]
        if gathered >= block:
            scored += score_waiting()
            gathered = 0
    if waiting:
        scored += score_waiting()
    # a top pair is a candidate only if nothing beat it by more than SETTLE
    if has.size:
        add_top_candidates(merge, qv, has, r_keep[top[has]], t, c_best, ref_vectors, qpos)
    return {"bound_pairs": int(bound_pairs), "scored": int(scored),
            "normalised": int(ref_vectors.normalised), "cluster_bounds": int(ub.size)}


def _saved_plan(references, reference_thumbs, reference_undefined: np.ndarray, block: int,
                seed: int):
    """``(plan, index, what happened)`` from the saved index of ``references``, or None when
    there is none to use (the search then plans afresh and :func:`_keep` saves); and why
    not."""
    if references is None:
        return None, "no store"
    from splitscope.relations.saved_index import disagrees, from_saved

    r_keep = np.flatnonzero(~reference_undefined)
    keys = np.asarray(references.keys)[r_keep]
    if (keys == b"").any():
        return None, "a reference without a content key"
    saved, why = references.store.load()
    if saved is None:
        return None, why
    size = int(np.asarray(reference_thumbs(r_keep[:1])).shape[1])
    if size != saved.size:
        return None, f"saved for {saved.size}² thumbnails, not {size}²"
    wrong = disagrees(saved, keys, reference_thumbs, r_keep, seed)
    if wrong is not None:
        return None, wrong
    new = int((pd.Index(saved.keys).get_indexer(np.unique(keys)) < 0).sum())
    if new > len(saved.keys):  # mostly other references: cluster them afresh
        return None, f"{new:,} new references outnumbered the {len(saved.keys):,} saved"
    plan, label, extended, added = from_saved(saved, keys, reference_thumbs, r_keep, block,
                                              seed, assign)
    index = index_of(plan.ref_p, label, saved.centres)
    if extended is not None:
        references.store.save(extended)
        return (plan, index, f"saved index extended by {added:,} references"), "loaded"
    return (plan, index, "saved index reused"), "loaded"


def _keep(references, plan: Plan, index: ClusterIndex, why: str) -> str:
    """Save the index just built for ``references`` (when given and every reference has a
    content key; ``why`` no saved one was used); returns what happened."""
    if references is None:
        return "built"
    from splitscope.relations.saved_index import saved_of

    keys = np.asarray(references.keys)[plan.r_keep]
    if (keys == b"").any():
        return "built (not saved: a reference without a content key)"
    references.store.save(saved_of(plan, index.labels(), index.centres, keys))
    return "built and saved" if why == "none saved" else f"built and saved ({why} before)"
