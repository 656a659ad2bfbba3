"""Exact similarity search pruned by a cell-mean bound (METHODS §2.2: same result as scoring
every pair): the bound, its choice on a sample (:func:`plan_search`) and the two passes that
bound every query × reference pair (:func:`pruned_passes`). The NCC search
(:mod:`splitscope.relations.ncc_index`) uses this bound over a cluster index of the references,
and these passes where the pairs are few (there the bounds of a chunk are kept between its two
passes, and clusters would cost more than they save).

Cut the S×S thumbnail grid into square cells of c×c pixels (c divides S). The indicator vectors of the cells, each divided by
the square root of its pixel count, are orthonormal; let P be the projection onto their span
(P replaces every pixel by its cell's mean). For unit vectors u, v

    ⟨u, v⟩ = ⟨Pu, Pv⟩ + ⟨(I−P)u, (I−P)v⟩   and   |⟨(I−P)u, (I−P)v⟩| ≤ e_u·e_v,

with e = ‖(I−P)u‖ = √(1 − ‖Pu‖²). So ``U = ⟨Pu, Pv⟩ + e_u·e_v`` bounds ρ from above at the
cost of a (S/c)²-dimensional product. The coordinates of Pu follow from integer sums of the
uint8 thumbnail (per cell, over the image, of the squares), so a reference that the bound
discards is never normalised. A pair is scored at full dimension only when its bound can
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

The form of the bound is chosen per search from a seeded sample (:func:`choose_bound`):
smaller cells keep more of a thumbnail's energy (a tighter bound) and cost more per pair; the
leading principal directions of fine cells (:class:`CellBound` with a basis) keep most of that
energy in few coordinates, which pays when there are many pairs. The sample queries' best ρ is
taken over a larger seeded sample of references (0.2% of the brute force's work), so that the
estimated surviving share is not far above what the search will see. The result holds
whatever the data; only the speed depends on them: on images of one modality most of a
thumbnail's energy is in its coarse structure, the residuals are small and few pairs
survive; on white noise nothing is pruned and the search scores every pair instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from splitscope.relations.ncc_core import (
    SETTLE,
    SearchMerge,
    _blocked_collect,
    canonical_values,
    centred_unit_vectors,
    settled_pairs,
)
from splitscope.threads import blas_threads

#: Safety margin on both bound tests (see the module docstring).
MARGIN = 1e-3
#: Added to each residual norm² before the square root (rounds the residual up).
RESIDUAL_GUARD = 1e-6
#: Cell sides (in pixels) tried for the bound (those that divide S).
CELL_SIDES = (12, 8, 6, 4, 3, 2)
#: Queries and references sampled (seeded) to choose the cell side.
SAMPLE = 128
#: The sample queries' best ρ is taken over a seeded sample of references that costs this
#: share of the brute force's pairs (at least :data:`BEST_SAMPLE_MIN` references, at most
#: :data:`BEST_SAMPLE_MAX`).
SAMPLE_WORK = 0.002
BEST_SAMPLE_MIN = 512
BEST_SAMPLE_MAX = 1 << 16
#: Below this many query × reference pairs the brute force runs instead.
MIN_PAIRS = 1_000_000
#: A surviving pair costs about this many pairs of a dense product: its own product, with the
#: reference vectors of each query gathered (2.2 vs 0.16 µs per pair at d = 9216 on one
#: core), and its share of normalising the surviving references (10 µs each, shared by the
#: queries of a chunk).
GATHER_COST = 24
#: Bounds of one query chunk against every reference are kept for the second pass (rather
#: than computed again) when they fit in this many bytes.
BOUND_CACHE_BYTES = 256 << 20
#: The cell coordinates of every reference are held during the search; cell sides whose
#: coordinates would take more than this many bytes are not tried (finer cells hold more).
COORDINATE_BYTES = 1 << 30
#: Directions of the principal forms of the bound (:class:`CellBound`), taken from the cell
#: coordinates of the finest cells with at most :data:`PRINCIPAL_CELLS` of them (each rank
#: below their count is one form), fitted on :data:`PRINCIPAL_SAMPLE` references other than
#: those the forms are compared on (so that a form is not judged on the references it fits).
PRINCIPAL_RANKS = (32, 64, 128)
PRINCIPAL_CELLS = 576
PRINCIPAL_SAMPLE = 512
#: Thumbnails turned into cell sums or coordinates at a time (keeps the work in cache).
STEP = 64


def cell_sums(thumbs: np.ndarray, side: int) -> np.ndarray:
    """Integer pixel sums of each thumbnail over its ``side``×``side`` cells, ``(n, S/side,
    S/side)`` (uint16 while a cell's sum stays below 2¹⁶, else uint32). ``side`` must divide S.
    Strided adds over a few thumbnails at a time, so the work stays in cache."""
    thumbs = np.asarray(thumbs)
    n, size = thumbs.shape[0], thumbs.shape[1]
    if size % side:
        raise ValueError(f"a cell side of {side} does not divide {size}")
    dtype = _sum_dtype(side)
    out = np.empty((n, size // side, size // side), dtype)
    for s in range(0, n, STEP):
        x = thumbs[s:s + STEP]
        cols = x[:, :, 0::side].astype(dtype)  # sums over each cell's columns, then its rows
        for i in range(1, side):
            cols += x[:, :, i::side]
        rows = out[s:s + STEP]
        rows[...] = cols[:, 0::side, :]
        for i in range(1, side):
            rows += cols[:, i::side, :]
    return out


def coarser_sums(sums: np.ndarray, factor: int, side: int) -> np.ndarray:
    """Cell sums over ``side``-pixel cells from sums over cells ``factor`` times smaller
    (exact)."""
    n, g = sums.shape[0], sums.shape[1] // factor
    return sums.reshape(n, g, factor, g, factor).sum(axis=(2, 4), dtype=_sum_dtype(side))


def _sum_dtype(side: int):
    return np.uint16 if side * side * 255 < 1 << 16 else np.uint32


def square_sums(thumbs: np.ndarray) -> np.ndarray:
    """Each thumbnail's sum of squared pixels (float64, exact): float32 row sums (below 2²⁴)
    added in float64."""
    thumbs = np.asarray(thumbs)
    n, size = thumbs.shape[0], thumbs.shape[1]
    out = np.empty(n, np.float64)
    ones = np.ones(size, np.float32)
    for s in range(0, n, STEP):
        x = thumbs[s:s + STEP].astype(np.float32)
        k = x.shape[0]
        x *= x
        out[s:s + k] = (x.reshape(k * size, size) @ ones).reshape(k, size).sum(
            axis=1, dtype=np.float64)
    return out


def coordinates_from_sums(sums: np.ndarray, squares: np.ndarray, side: int
                          ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`cell_coordinates` from the thumbnails' ``side``-pixel cell sums and their
    :func:`square_sums`."""
    n, cells = sums.shape[0], sums.shape[1]
    size = cells * side
    d, area = size * size, side * side
    coords = np.empty((n, cells * cells), np.float32)
    resid = np.empty(n, np.float64)
    for s in range(0, n, STEP):
        p = sums[s:s + STEP].reshape(-1, cells * cells).astype(np.float64)
        k = p.shape[0]
        s1 = p.sum(axis=1)
        spread = d * squares[s:s + k] - s1 * s1
        flat = spread == 0
        scale = np.where(flat, 0.0, 1.0 / np.sqrt(np.where(flat, 1.0, spread) * (area * d)))
        p *= d
        p -= area * s1[:, None]
        p *= scale[:, None]
        coords[s:s + k] = p
        res2 = np.where(flat, 1.0, 1.0 - np.einsum("ij,ij->i", p, p))
        resid[s:s + k] = np.sqrt(np.maximum(res2, 0.0) + RESIDUAL_GUARD)
    return coords, resid


def cell_coordinates(thumbs: np.ndarray, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates of each thumbnail's centred unit vector u on the orthonormal basis of
    ``side``×``side`` pixel cells (float32 ``(n, (S/side)²)``) and its residual norm
    ``‖(I−P)u‖`` (float64, rounded up). ``side`` must divide S.

    Integer arithmetic (exact in float64 at these magnitudes) up to one division:
    with d pixels, the pixel sum s₁, the sum of squares s₂ and a cell's sum p over its a
    pixels, the coordinate is ``(d·p − a·s₁) / √(a·d·(d·s₂ − s₁²))``. Flat thumbnails
    (``d·s₂ = s₁²``) get zeros and a residual of at least 1 (they are never compared).
    """
    return coordinates_from_sums(cell_sums(thumbs, side), square_sums(thumbs), side)


class CellSums:
    """The cell sums of a set of thumbnails at several sides, each computed once: from the
    thumbnails for the finest side, from the largest finer side that divides it otherwise
    (exact either way). Used to compare many forms of the bound on one sample."""

    def __init__(self, thumbs: np.ndarray):
        self.thumbs = np.asarray(thumbs)
        self.squares = square_sums(self.thumbs)
        self._sums: dict[int, np.ndarray] = {}

    def sums(self, side: int) -> np.ndarray:
        if side not in self._sums:
            base = max((c for c in self._sums if side % c == 0), default=None)
            self._sums[side] = (cell_sums(self.thumbs, side) if base is None
                                else coarser_sums(self._sums[base], side // base, side))
        return self._sums[side]

    def coordinates(self, bound: CellBound) -> tuple[np.ndarray, np.ndarray]:
        return bound.from_sums(self.sums(bound.side), self.squares)


def cell_options(size: int) -> list[int]:
    """Cell sides to choose from for S×S thumbnails (coarse to fine): those of
    :data:`CELL_SIDES` that divide S and leave at least 2 cells per side."""
    return [side for side in CELL_SIDES if size % side == 0 and size // side >= 2]


@dataclass(frozen=True, eq=False)
class CellBound:
    """One form of the bound: the cell means of ``side``×``side`` cells, or (``basis``, an
    orthonormal ``(cells, rank)`` matrix) their projection onto ``rank`` directions of the
    cell space. Both are orthogonal projections of u, so either bounds ρ the same way; the
    second keeps fewer coordinates per pair and needs no more arithmetic per thumbnail."""

    side: int
    basis: np.ndarray | None = None

    def dims(self, size: int) -> int:
        """Coordinates per S×S thumbnail (S = ``size``)."""
        return int(self.basis.shape[1]) if self.basis is not None else (size // self.side) ** 2

    def coordinates(self, thumbs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Coordinates (float32) and residual norms (float64, rounded up) of the thumbnails'
        centred unit vectors."""
        return self.from_sums(cell_sums(thumbs, self.side), square_sums(thumbs))

    def from_sums(self, sums: np.ndarray, squares: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`coordinates` from the thumbnails' cell sums at :attr:`side` and their
        :func:`square_sums`."""
        coords, resid = coordinates_from_sums(sums, squares, self.side)
        if self.basis is None:
            return coords, resid
        proj = coords.astype(np.float64) @ self.basis
        res2 = 1.0 - np.einsum("ij,ij->i", proj, proj)
        return proj.astype(np.float32), np.sqrt(np.maximum(res2, 0.0) + RESIDUAL_GUARD)

    def describe(self) -> dict:
        out = {"cell_side": int(self.side)}
        if self.basis is not None:
            out["rank"] = int(self.basis.shape[1])
        return out


def _cells(thumbs) -> CellSums:
    return thumbs if isinstance(thumbs, CellSums) else CellSums(thumbs)


def principal_bound(side: int, r_thumbs, rank: int) -> CellBound | None:
    """The bound on the leading ``rank`` principal directions (second moments, not centred:
    what keeps most of ‖Pu‖²) of sample references' cell coordinates at ``side``
    (``r_thumbs``: thumbnails or their :class:`CellSums`); ``None`` when the sample spans
    no direction."""
    forms = principal_bounds(side, r_thumbs, (rank,))
    return forms[0] if forms else None


def principal_bounds(side: int, r_thumbs, ranks) -> list[CellBound]:
    """:func:`principal_bound` at each of ``ranks`` from one decomposition (the leading
    directions of a higher rank include those of a lower one); ranks beyond the directions
    the sample spans are cut to them, and a form is given once. The directions come from the
    sample's Gram matrix (n × n, cheaper than the cells' when n is smaller) and are
    orthonormalised."""
    coords = _cells(r_thumbs).coordinates(CellBound(side))[0].astype(np.float64)
    gram = coords @ coords.T if len(coords) < coords.shape[1] else None
    w, vecs = np.linalg.eigh(gram if gram is not None else coords.T @ coords)
    spanned = int((w > 1e-9 * max(w[-1], 1e-300)).sum())
    top_rank = int(min(max(ranks), spanned))
    if top_rank < 1:
        return []
    top = vecs[:, ::-1][:, :top_rank]
    if gram is not None:  # right singular vectors from the left ones
        top = np.linalg.qr(coords.T @ top)[0]
    out = []
    for k in sorted({int(min(r, top_rank)) for r in ranks}):
        out.append(CellBound(side, np.ascontiguousarray(top[:, :k])))
    return out


def bound_options(size: int, r_thumbs, n_references: int) -> list[CellBound]:
    """The bounds to choose from: cell means at every side of :func:`cell_options` whose
    coordinates for ``n_references`` references fit in :data:`COORDINATE_BYTES`, and the
    principal directions (:data:`PRINCIPAL_RANKS`, each below the cell count) of the finest
    cells with at most :data:`PRINCIPAL_CELLS` coordinates (fitted on sample references
    ``r_thumbs``: thumbnails or their :class:`CellSums`)."""
    sides = cell_options(size)
    out = [CellBound(c) for c in sides
           if 4 * n_references * ((size // c) ** 2 + 1) <= COORDINATE_BYTES]
    fine = [c for c in sides if (size // c) ** 2 <= PRINCIPAL_CELLS]
    cells = _cells(r_thumbs)
    if fine and len(cells.thumbs):
        ranks = [r for r in PRINCIPAL_RANKS if r < (size // fine[-1]) ** 2]
        if ranks:
            out.extend(principal_bounds(fine[-1], cells, ranks))
    return out


def surviving_share(best: np.ndarray, q_thumbs, r_thumbs, bound: CellBound, tau: float,
                    collect_pairs: bool) -> float:
    """Share of sample query × reference pairs whose ``bound`` reaches what it must beat:
    each sample query's ``best`` exact ρ over a sample of references (or τ). An
    over-estimate of the share that survives in the search, whose thresholds are set by the
    best over all references. The samples are thumbnails or their :class:`CellSums`."""
    q_cells, r_cells = _cells(q_thumbs), _cells(r_thumbs)
    if best.size == 0 or len(r_cells.thumbs) == 0:
        return 1.0
    qp, qe = q_cells.coordinates(bound)
    rp, re = r_cells.coordinates(bound)
    upper = qp @ rp.T + (qe[:, None] * re[None, :]).astype(np.float32)
    need = best - MARGIN
    if collect_pairs:
        need = np.minimum(need, tau - MARGIN)
    return float((upper >= need[:, None]).mean())


def estimated_cost(dims: int, size: int, share: float) -> float:
    """Cost per query × reference pair of the pruned search with ``dims`` coordinates per
    thumbnail, in units of one pair of the brute force's d-dimensional product: the bound
    (``2·(dims + 1)/d`` for two passes) plus the surviving share × :data:`GATHER_COST` for
    scoring the survivors. The brute force costs 1."""
    return 2 * (dims + 1) / (size * size) + share * GATHER_COST


def choose_bound(q_thumbs: np.ndarray, r_thumbs: np.ndarray, best: np.ndarray, tau: float,
                 collect_pairs: bool, options: list[CellBound]
                 ) -> tuple[CellBound | None, float, list[tuple[CellBound, float]]]:
    """Of ``options``, the bound of lowest :func:`estimated_cost` on sample thumbnails
    (queries ``q_thumbs`` with their ``best`` exact ρ, references ``r_thumbs``; ``None``
    when there is no option) with its estimated surviving share, and every option with
    its share."""
    if not options:
        return None, 1.0, []
    q_cells, r_cells = _cells(q_thumbs), _cells(r_thumbs)
    size = q_cells.thumbs.shape[1]
    shares = [(b, surviving_share(best, q_cells, r_cells, b, tau, collect_pairs))
              for b in options]
    cheapest, share = min(shares, key=lambda x: estimated_cost(x[0].dims(size), size, x[1]))
    return cheapest, share, shares


def sample_best(q_vectors: np.ndarray, reference_vectors, positions: np.ndarray, block: int
                ) -> np.ndarray:
    """Each sample query's best exact ρ over the references at ``positions``
    (``reference_vectors`` returns their unit vectors)."""
    best = np.full(len(q_vectors), -np.inf, np.float32)
    for b0 in range(0, positions.size, block):
        rv = reference_vectors(positions[b0:b0 + block])
        np.maximum(best, (q_vectors @ rv.T).max(axis=1), out=best)
    return best


def pruned_search(query_thumbs, reference_thumbs, query_undefined: np.ndarray,
                  reference_undefined: np.ndarray, *, tau: float, block: int,
                  exclude: np.ndarray | None, query_chunk: int, collect_pairs: bool,
                  max_pairs: int, value: str, options: list[CellBound] | None = None,
                  seed: int = 0, fall_back: bool = True, workers: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray, pd.DataFrame, int, dict]:
    """The pruned search on its own: :func:`plan_search` and :func:`pruned_passes`, every
    query × reference pair bounded (the NCC search, :mod:`splitscope.relations.ncc_index`,
    runs these passes below its ``INDEX_MIN_PAIRS`` and clusters above; this is the kernel
    the bound is tested and measured with).

    The search of :func:`splitscope.relations.ncc._blocked_search` on the centred unit
    vectors of the thumbnails (same arguments, except that ``query_thumbs`` and
    ``reference_thumbs`` return uint8 ``(n, S, S)`` thumbnails for ascending positions; same
    result), pruned by the cell-mean bound; also returns its statistics: ``cell_side`` (and
    ``rank`` for the principal form), ``margin``, ``scored_pairs`` (pairs scored at full
    dimension), ``flops`` and ``brute_flops`` (what scoring every pair costs).

    ``options`` are the bounds to choose from (default :func:`bound_options`); the one of
    lowest estimated cost on a seeded sample is used (:func:`choose_bound`). With
    ``fall_back`` (default) the brute force runs instead when the sample says the bound
    would not pay. The pruned passes run on one BLAS thread: their products are small, and
    threads cost more than they save there; a brute force run instead uses at most
    ``workers`` (default: the BLAS pool as it is).
    """
    merge = SearchMerge(query_undefined.size, max_pairs=max_pairs)
    with blas_threads(workers):
        stats = collect_pruned(merge, query_thumbs, reference_thumbs, query_undefined,
                               reference_undefined, tau=tau, block=block, exclude=exclude,
                               query_chunk=query_chunk, collect_pairs=collect_pairs,
                               max_pairs=max_pairs, options=options, seed=seed,
                               fall_back=fall_back)
    return (*merge.result(value), stats)


def collect_pruned(merge: SearchMerge, query_thumbs, reference_thumbs,
                   query_undefined: np.ndarray, reference_undefined: np.ndarray, *,
                   tau: float, block: int, exclude: np.ndarray | None, query_chunk: int,
                   collect_pairs: bool, max_pairs: int, options: list[CellBound] | None = None,
                   seed: int = 0, fall_back: bool = True, value: str = "rho") -> dict:
    """:func:`pruned_search` into ``merge`` (see :class:`~splitscope.relations.ncc_core.
    SearchMerge`); returns its statistics."""
    from threadpoolctl import threadpool_limits

    args = (merge, query_thumbs, reference_thumbs, query_undefined, reference_undefined)
    kwargs = {"tau": tau, "block": block, "exclude": exclude, "query_chunk": query_chunk,
              "collect_pairs": collect_pairs, "max_pairs": max_pairs}
    if query_undefined.all() or reference_undefined.all():  # nothing to compare
        brute_collect(*args, **kwargs)
        return {"search": "brute (nothing to compare)", "flops": 0.0, "brute_flops": 0.0}
    with threadpool_limits(1):
        out = _pruned(merge, query_thumbs, reference_thumbs, query_undefined,
                      reference_undefined, **kwargs, options=options, seed=seed,
                      fall_back=fall_back)
    if "search" in out:  # the bound would not pay: score every pair
        brute_collect(*args, **kwargs)
    return out


def brute_collect(merge: SearchMerge, query_thumbs, reference_thumbs,
                  query_undefined: np.ndarray, reference_undefined: np.ndarray, **kwargs
                  ) -> None:
    """Every pair scored (the blocked search) into ``merge``, from thumbnails: where there
    is nothing to compare, or a bound would not pay."""
    _blocked_collect(merge, lambda pos: centred_unit_vectors(query_thumbs(pos))[0],
                     lambda pos: centred_unit_vectors(reference_thumbs(pos))[0],
                     query_undefined, reference_undefined, **kwargs)


class ReferenceVectors:
    """Unit vectors of references at ascending positions, normalised on demand into one
    buffer of ``rows`` vectors (each call's vectors are valid until the next call: memory
    used again is not faulted in afresh); counts the references normalised. One per thread."""

    def __init__(self, reference_thumbs, rows: int):
        self.read = reference_thumbs
        self.rows = max(1, int(rows))
        self.buffer: np.ndarray | None = None
        self.normalised = 0

    def __call__(self, pos: np.ndarray) -> np.ndarray:
        self.normalised += pos.size
        thumbs = np.asarray(self.read(pos))
        if pos.size > self.rows:
            return centred_unit_vectors(thumbs)[0]
        if self.buffer is None:
            self.buffer = np.empty((self.rows, thumbs[0].size), np.float32)
        return centred_unit_vectors(thumbs, out=self.buffer[:pos.size])[0]


@dataclass
class Plan:
    """What a bounded search (pruned, or indexed: :mod:`splitscope.relations.ncc_index`)
    settles before its passes: the form of the bound chosen on a seeded sample, the defined
    references ``r_keep`` with their coordinates and residual norm ``ref_p`` (``(nr, k + 1)``
    float32: one product with a query's gives the bound), and what the choice cost."""

    bound: CellBound
    share: float
    shares: list[tuple[CellBound, float]]
    size: int
    r_keep: np.ndarray
    ref_p: np.ndarray
    sample: dict
    seed: int
    sample_flops: float

    @property
    def dims(self) -> int:
        """Coordinates per thumbnail (k; the residual is one more)."""
        return self.bound.dims(self.size)

    def query_coordinates(self, thumbs: np.ndarray) -> np.ndarray:
        """``(n, k + 1)`` float32: the bound's coordinates and residual norm of thumbnails."""
        k = self.dims
        out = np.empty((len(thumbs), k + 1), np.float32)
        out[:, :k], out[:, k] = self.bound.coordinates(thumbs)
        return out

    def per_thumb_flops(self) -> int:
        """Work of one thumbnail's coordinates (cell sums, squares and coordinates)."""
        return _per_thumb(self.bound, self.size)

    def stats(self, *, n_defined_q: int, bound_pairs: int, scored: int, normalised: int,
              extra_flops: float = 0.0) -> dict:
        """The statistics of a search that used this plan."""
        d = self.size * self.size
        nr = self.r_keep.size
        k = self.dims
        flops = (self.sample_flops + (nr + n_defined_q) * self.per_thumb_flops()
                 + 2 * (k + 1) * bound_pairs + 2 * d * scored + extra_flops)
        return {**self.bound.describe(), "coordinates": int(k), "margin": MARGIN,
                "estimated_surviving_share": self.share if self.share == self.share else None,
                "sample": self.sample,
                "seed": self.seed, "scored_pairs": int(scored),
                "normalised_references": int(normalised), "flops": float(flops),
                "brute_flops": float(2 * n_defined_q * nr * d)}


def _per_thumb(b: CellBound, size: int) -> int:
    cells = (size // b.side) ** 2
    return 3 * size * size + 4 * cells + (2 * b.dims(size) * cells if b.basis is not None
                                          else 0)


def plan_search(query_thumbs, reference_thumbs, query_undefined: np.ndarray,
                reference_undefined: np.ndarray, *, tau: float, block: int,
                collect_pairs: bool, options: list[CellBound] | None, seed: int,
                fall_back: bool, ref_vectors: ReferenceVectors | None = None
                ) -> Plan | dict:
    """The :class:`Plan` of a bounded search: the bound of lowest estimated cost on a seeded
    sample (:func:`choose_bound`) and every defined reference's coordinates; or, when the
    bound would not pay (``fall_back``) or no cell side divides S, what was estimated with a
    ``search`` entry saying the brute force runs."""
    r_keep = np.flatnonzero(~reference_undefined)
    q_keep = np.flatnonzero(~query_undefined)
    rng = np.random.default_rng(seed)
    q_sample = np.sort(rng.choice(q_keep, size=min(q_keep.size, SAMPLE), replace=False))
    # the sample queries' best over enough references that the estimate is not far too
    # pessimistic (a share of the brute force's work), their bounds against SAMPLE of them
    n_best = int(min(r_keep.size, BEST_SAMPLE_MAX, max(
        BEST_SAMPLE_MIN, SAMPLE_WORK * q_keep.size * r_keep.size / max(1, q_sample.size))))
    r_best = rng.permutation(r_keep)[:n_best]
    r_sample = np.sort(r_best[:SAMPLE])
    # the principal forms are fitted on other references where there are enough
    r_fit = np.sort(r_best[SAMPLE:SAMPLE + PRINCIPAL_SAMPLE]) if n_best > SAMPLE else r_sample
    q_sample_thumbs = np.asarray(query_thumbs(q_sample))
    size = int(q_sample_thumbs.shape[1])
    d = size * size
    n_dense = 2 * int(q_keep.size) * int(r_keep.size)
    brute = {"flops": float(n_dense * d), "brute_flops": float(n_dense * d)}
    r_sample_cells = CellSums(reference_thumbs(r_sample))
    if options is None:
        fit = r_sample_cells if r_fit is r_sample else CellSums(reference_thumbs(r_fit))
        options = bound_options(size, fit, int(r_keep.size))
    if ref_vectors is None:
        ref_vectors = ReferenceVectors(reference_thumbs, min(int(block), r_keep.size))
    best = sample_best(centred_unit_vectors(q_sample_thumbs)[0], ref_vectors,
                       np.sort(r_best), block) if options else np.empty(0)
    bound, share, shares = choose_bound(CellSums(q_sample_thumbs), r_sample_cells, best, tau,
                                        collect_pairs, options)
    if bound is None:
        why = (f"no cell side of {list(CELL_SIDES)} divides {size}" if not cell_options(size)
               else f"the cell coordinates of {r_keep.size:,} references would exceed "
                    f"{COORDINATE_BYTES >> 20:,} MiB")
        return {"search": f"brute ({why})", **brute}
    k = bound.dims(size)
    if fall_back and estimated_cost(k, size, share) >= 1:
        return {"search": "brute (cell bound would keep too many pairs)", **bound.describe(),
                "estimated_surviving_share": share, **brute}
    nr = r_keep.size
    # the residual is one more coordinate: ⟨(Pu, e_u), (Pv, e_v)⟩ is the bound, one product
    ref_p = np.empty((nr, k + 1), np.float32)
    for b0 in range(0, nr, block):
        ref_p[b0:b0 + block, :k], ref_p[b0:b0 + block, k] = bound.coordinates(
            np.asarray(reference_thumbs(r_keep[b0:b0 + block])))
    n_sample = len(q_sample) * len(r_sample)
    sample_flops = (2 * len(q_sample) * n_best * d  # the sample queries' best
                    + sum(2 * n_sample * b.dims(size) + (len(q_sample) + len(r_sample))
                          * _per_thumb(b, size) for b, _ in shares))  # choosing the bound
    return Plan(bound, share, shares, size, r_keep, ref_p,
                {"queries": len(q_sample), "references": len(r_sample),
                 "references_for_best": n_best}, seed, float(sample_flops))


def score_survivors(merge: SearchMerge, qv: np.ndarray, qi: np.ndarray, rj: np.ndarray,
                    rpos: np.ndarray, ref_vectors, c_best: np.ndarray, qpos: np.ndarray,
                    tau: float, collect_pairs: bool) -> int:
    """Score exactly the surviving pairs (rows ``qi`` of ``qv`` × references ``rpos[rj]``,
    in row-major order) and add them to ``merge``: those near the running best ``c_best``
    (updated) as candidates, those reaching τ as pairs. A dense product over the surviving
    queries × references when they are dense enough (:data:`GATHER_COST`), else pair by
    pair. Returns the pairs scored at full dimension."""
    uq, ur = np.unique(qi), np.unique(rj)
    rv = ref_vectors(rpos[ur])
    if qi.size * GATHER_COST >= uq.size * ur.size:
        # dense enough: one product over the surviving queries × references
        prod = qv[uq] @ rv.T
        scored = prod.size
        keep = np.zeros(prod.shape, bool)
        keep[np.searchsorted(uq, qi), np.searchsorted(ur, rj)] = True
        prod[~keep] = -np.inf
        qi, ir = np.nonzero(prod > -np.inf)
        vals = prod[qi, ir]
        qi = uq[qi]
    else:
        ir = np.searchsorted(ur, rj)
        vals = _pair_dots(qv, qi, rv, ir)
        scored = qi.size
    np.maximum.at(c_best, qi, vals)
    sel = vals >= c_best[qi] - SETTLE
    _add(merge, qv, qi, rv, ir, vals, qpos, rpos[ur], tau, collect_pairs, near=sel)
    return scored


def add_top_pairs(merge: SearchMerge, qv: np.ndarray, has: np.ndarray, top_pos: np.ndarray,
                  ref_vectors, qpos: np.ndarray, tau: float, collect_pairs: bool
                  ) -> np.ndarray:
    """Score each query ``has[i]``'s top reference (position ``top_pos[i]``) exactly and
    return the values; as pairs they are added at once, as candidates they wait for the
    chunk's end (:func:`add_top_candidates`)."""
    uniq, inv = np.unique(top_pos, return_inverse=True)
    rv = ref_vectors(uniq)
    vals = _pair_dots(qv, has, rv, inv)
    if collect_pairs:
        _add(merge, qv, has, rv, inv, vals, qpos, uniq, tau, True,
             near=np.zeros(has.size, bool))
    return vals


def add_top_candidates(merge: SearchMerge, qv: np.ndarray, has: np.ndarray,
                       top_pos: np.ndarray, t: np.ndarray, c_best: np.ndarray,
                       ref_vectors, qpos: np.ndarray) -> None:
    """The top pairs of :func:`add_top_pairs` as candidates, those that nothing beat by
    more than SETTLE (``t``: their values, ``c_best``: each query's best at the chunk's
    end)."""
    near = t[has] >= c_best[has] - SETTLE
    if near.any():
        uniq, inv = np.unique(top_pos[near], return_inverse=True)
        rv = ref_vectors(uniq)
        merge.add_candidates(qpos[has[near]], uniq[inv],
                             canonical_values(qv, has[near], rv, inv))


def _pruned(merge, query_thumbs, reference_thumbs, query_undefined, reference_undefined, *,
            tau, block, exclude, query_chunk, collect_pairs, max_pairs, options, seed,
            fall_back) -> dict:
    """The pruned search into ``merge`` (its statistics returned), or, when the bound would
    not pay (``fall_back``) or no cell side divides S, what was estimated with a ``search``
    entry saying the brute force runs (``merge`` untouched)."""
    ref_vectors = ReferenceVectors(reference_thumbs,
                                   min(int(block), int((~reference_undefined).sum())))
    plan = plan_search(query_thumbs, reference_thumbs, query_undefined, reference_undefined,
                       tau=tau, block=block, collect_pairs=collect_pairs, options=options,
                       seed=seed, fall_back=fall_back, ref_vectors=ref_vectors)
    if not isinstance(plan, Plan):
        return plan
    return pruned_passes(merge, plan, query_thumbs, reference_thumbs, query_undefined,
                         tau=tau, block=block, exclude=exclude, query_chunk=query_chunk,
                         collect_pairs=collect_pairs, ref_vectors=ref_vectors)


def pruned_passes(merge: SearchMerge, plan: Plan, query_thumbs, reference_thumbs,
                  query_undefined: np.ndarray, *, tau: float, block: int,
                  exclude: np.ndarray | None, query_chunk: int, collect_pairs: bool,
                  ref_vectors: ReferenceVectors | None = None) -> dict:
    """The two passes of the pruned search over every query chunk × reference block, with
    the bound of ``plan``, into ``merge``; returns the statistics."""
    nq = query_undefined.size
    r_keep, ref_p = plan.r_keep, plan.ref_p
    if ref_vectors is None:
        ref_vectors = ReferenceVectors(reference_thumbs, min(int(block), r_keep.size))
    nr = r_keep.size
    scored = 0
    n_defined_q = 0
    bound_pairs = 0  # query × reference bounds computed
    for c0 in range(0, nq, query_chunk):
        qpos = c0 + np.flatnonzero(~query_undefined[c0:min(c0 + query_chunk, nq)])
        if qpos.size == 0 or nr == 0:
            continue
        n_defined_q += qpos.size
        qt = np.asarray(query_thumbs(qpos))
        qv = centred_unit_vectors(qt)[0]
        qp = plan.query_coordinates(qt)
        ex = exclude[qpos] if exclude is not None else None
        keep = qpos.size * nr * 4 <= BOUND_CACHE_BYTES
        kept: dict[int, np.ndarray] = {}

        def bounds(b0: int, qp=qp, ex=ex, kept=kept) -> np.ndarray:
            """Upper bounds (chunk, block) of ρ; excluded pairs get -inf."""
            if b0 in kept:
                return kept.pop(b0)
            u = qp @ ref_p[b0:b0 + block].T
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
            bound_pairs += u.size
            if keep:
                kept[b0] = u
            a = u.argmax(axis=1)
            v = u[np.arange(qpos.size), a]
            better = v > top_u
            top_u[better] = v[better]
            top[better] = b0 + a[better]
        has = np.flatnonzero(top >= 0)
        t = np.full(qpos.size, np.inf, np.float32)
        c_best = np.full(qpos.size, -np.inf, np.float32)
        if has.size:
            # the top pair is scored once here and added as it stands; pass 2 skips it
            t[has] = c_best[has] = add_top_pairs(merge, qv, has, r_keep[top[has]],
                                                 ref_vectors, qpos, tau, collect_pairs)
            scored += has.size
        need = t - MARGIN
        if collect_pairs:
            need = np.minimum(need, np.float32(tau - MARGIN))
        # pass 2: score every other pair whose bound reaches what it must beat
        for b0 in range(0, nr, block):
            if b0 not in kept:
                bound_pairs += qpos.size * min(block, nr - b0)
            survive = bounds(b0) >= need[:, None]
            mine = has[(top[has] >= b0) & (top[has] < b0 + block)]
            survive[mine, top[mine] - b0] = False
            qi, rj = np.nonzero(survive)
            if qi.size:
                scored += score_survivors(merge, qv, qi, rj, r_keep[b0:b0 + block],
                                          ref_vectors, c_best, qpos, tau, collect_pairs)
        # a top pair is a candidate only if nothing beat it by more than SETTLE
        if has.size:
            add_top_candidates(merge, qv, has, r_keep[top[has]], t, c_best, ref_vectors,
                               qpos)
    return plan.stats(n_defined_q=n_defined_q, bound_pairs=bound_pairs, scored=scored,
                      normalised=ref_vectors.normalised)


def _add(merge: SearchMerge, qv, qi, rv, ir, vals, qpos, rpos, tau: float, collect_pairs: bool,
         near: np.ndarray | None = None) -> None:
    """Scored pairs (rows ``qi`` of ``qv`` × rows ``ir`` of ``rv``, values ``vals``) into
    ``merge``: those ``near`` the running best as candidates, those reaching τ as pairs."""
    sel = slice(None) if near is None else near
    merge.add_candidates(qpos[qi[sel]], rpos[ir[sel]], canonical_values(qv, qi[sel], rv, ir[sel]))
    if collect_pairs:
        m = vals >= tau - SETTLE
        hq, hr, hv = settled_pairs(qv, qi[m], rv, ir[m], tau)
        merge.add_pairs(qpos[hq], rpos[hr], hv)


def _pair_dots(qv: np.ndarray, qi: np.ndarray, rv: np.ndarray, ri: np.ndarray) -> np.ndarray:
    """``⟨qv[qi[i]], rv[ri[i]]⟩`` for every i: one matrix-vector product per query (its
    references gathered once), several times cheaper than gathering both sides per pair."""
    out = np.empty(qi.size, np.float32)
    if qi.size == 0:
        return out
    order = np.argsort(qi, kind="stable")
    q_sorted = qi[order]
    cut = np.flatnonzero(q_sorted[1:] != q_sorted[:-1]) + 1
    for s, e in zip(np.r_[0, cut], np.r_[cut, qi.size]):
        idx = order[s:e]
        out[idx] = rv[ri[idx]] @ qv[q_sorted[s]]
    return out
