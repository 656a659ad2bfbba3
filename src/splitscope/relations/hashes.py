"""Perceptual-hash rules (METHODS §2.1): screen, joint, sum and exact-pHash with radius k.

d_p and d_d are Hamming distances between 64-bit pHash and dHash values (bit-identical to
``imagehash.phash`` / ``imagehash.dhash`` with hash_size 8). For a query q against a reference
set R and a radius k:

- *screen*: ``min_r d_p(q, r) <= k`` and ``min_r d_d(q, r) <= k`` (the two minima may come from
  different references);
- *joint*: some single r has ``d_p <= k`` and ``d_d <= k``, i.e. ``min_r max(d_p, d_d) <= k``;
- *sum*: some r has ``d_p + d_d <= k``, i.e. ``min_r (d_p + d_d) <= k``;
- *exact-pHash*: some r has ``d_p == 0``.

Every rule is a function of four per-query minima, so one exhaustive pass over all
query × reference pairs gives all four rules at every radius. Hashes are packed as ``uint64``;
distances are ``popcount(q XOR r)`` in compiled loops over cache-sized blocks
(:mod:`splitscope.relations.hamming_kernel`), and blocks of queries run in threads. Ties are
broken by the lowest reference position, so results do not depend on block sizes or thread
count.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.relations.options import SearchOptions

RULES = ("screen", "joint", "sum", "exact_phash")
DEFAULT_RADIUS = SearchOptions.radius  # METHODS §2.3
QUERY_BLOCK = 1024  # queries per thread task: their keys (32 bytes each) stay in L2
REFERENCE_BLOCK = 2048  # references per pass: their two hashes (32 KiB) stay in L1
#: Distance reported for a query with no reference to compare with (index -1). It is larger than
#: any real distance (a single distance is at most 64, a sum at most 128), so ``<= k`` is False.
NO_REFERENCE = 255


def pack_hashes(values, *, name: str = "hashes") -> np.ndarray:
    """64-bit hashes as a ``uint64`` array.

    Accepts integers (Python ints, numpy ``uint64``/``int64``, pandas ``UInt64``) or 16-digit hex
    strings (``str(imagehash.phash(img))``). Missing values are an error here: callers pass only
    rows whose hashes exist and count the others as not assessed.
    """
    if isinstance(values, np.ndarray) and values.dtype == np.uint64:
        return np.ascontiguousarray(values.ravel())
    series = pd.Series(values) if not isinstance(values, pd.Series) else values
    if series.isna().any():
        raise InputError(f"{name}: {int(series.isna().sum())} missing value(s); "
                         "pass only rows with hashes and count the others as not assessed")
    if len(series) and isinstance(series.iloc[0], str):
        return np.array([int(v, 16) for v in series], dtype=np.uint64)
    arr = series.to_numpy()
    if arr.dtype == np.int64:
        return arr.view(np.uint64).copy()
    return np.asarray([int(v) for v in arr], dtype=np.uint64) if arr.dtype == object \
        else arr.astype(np.uint64)


def _workers(workers: int | None) -> int:
    """Threads of a hash search: ``workers`` (the run's ``--workers``), every core when
    None."""
    if workers is None:
        workers = os.cpu_count() or 1
    return max(1, int(workers))


def _check_exclude(exclude, nq: int, nr: int) -> np.ndarray | None:
    if exclude is None:
        return None
    exclude = np.asarray(exclude, dtype=np.int64)
    if exclude.shape != (nq,):
        raise InputError(f"exclude must have one entry per query ({nq}); got shape {exclude.shape}")
    if np.any(exclude >= nr):
        raise InputError("exclude names a reference position beyond the reference set")
    return exclude


@dataclass
class HammingResult:
    """Per query: the smallest Hamming distance to any reference and the lowest reference
    position achieving it (-1 and :data:`NO_REFERENCE` when there is no reference)."""

    distance: np.ndarray  # (nq,) int16
    index: np.ndarray  # (nq,) int64


def hamming_search(query, reference, *, exclude=None, block_query: int = QUERY_BLOCK,
                   block_reference: int = REFERENCE_BLOCK,
                   workers: int | None = None) -> HammingResult:
    """Exhaustive nearest neighbour by Hamming distance over packed 64-bit hashes.

    Parameters
    ----------
    query, reference : array-like of 64-bit hashes
        See :func:`pack_hashes`.
    exclude : array-like of int, optional
        Per query, one reference position never to match (-1: none). A boundary of a
        population with itself passes ``arange(n)`` so a row is never its own counterpart.
    block_query, block_reference : int
        Queries per thread task; references per cache block (16 bytes each).
    workers : int, optional
        Threads over query blocks (default: all cores).

    Returns
    -------
    HammingResult
    """
    q = pack_hashes(query, name="query hashes")
    r = pack_hashes(reference, name="reference hashes")
    full = hash_search(q, q, r, r, radius=0, exclude=exclude, block_query=block_query,
                       block_reference=block_reference, workers=workers, collect_pairs=False)
    return HammingResult(full.d_p, full.ref_p)


@dataclass
class HashSearch:
    """Per-query minima of an exhaustive pHash/dHash search and the pairs near enough to matter.

    ``d_p``/``ref_p``: min pHash distance and its reference; ``d_d``/``ref_d``: the same for
    dHash; ``d_joint``/``ref_joint``: min over r of ``max(d_p, d_d)``; ``d_sum``/``ref_sum``: min
    over r of ``d_p + d_d``. References are positions in the reference arrays (lowest position
    wins ties; -1 when there is no reference). ``pairs`` lists every pair with
    ``max(d_p, d_d) <= radius`` or ``d_p == 0`` (columns ``query, reference, d_p, d_d``), sorted.
    """

    radius: int
    n_reference: int
    d_p: np.ndarray
    ref_p: np.ndarray
    d_d: np.ndarray
    ref_d: np.ndarray
    d_joint: np.ndarray
    ref_joint: np.ndarray
    d_sum: np.ndarray
    ref_sum: np.ndarray
    pairs: pd.DataFrame = field(default_factory=lambda: _empty_pairs())
    n_pairs_total: int = 0  # pairs meeting the pair condition, stored or not
    pairs_truncated: bool = False

    def flags(self, rule: str, radius: int | None = None) -> np.ndarray:
        """Boolean flag per query for ``rule`` (one of :data:`RULES`) at ``radius``."""
        k = self.radius if radius is None else int(radius)
        if rule == "screen":
            return screen_rule(self, k)
        if rule == "joint":
            return joint_rule(self, k)
        if rule == "sum":
            return sum_rule(self, k)
        if rule == "exact_phash":
            return exact_phash_rule(self)
        raise InputError(f"unknown hash rule {rule!r}; use one of {', '.join(RULES)}")

    def counterpart(self, rule: str) -> np.ndarray:
        """The reference position that decides ``rule`` for each query (for *screen* the pHash
        minimum's reference; the dHash one is ``ref_d``)."""
        return {"screen": self.ref_p, "joint": self.ref_joint, "sum": self.ref_sum,
                "exact_phash": self.ref_p}[rule]


def screen_rule(result: HashSearch, radius: int = DEFAULT_RADIUS) -> np.ndarray:
    """*screen*: min d_p <= k and min d_d <= k, minima possibly from different references."""
    return (result.d_p <= radius) & (result.d_d <= radius)


def joint_rule(result: HashSearch, radius: int = DEFAULT_RADIUS) -> np.ndarray:
    """*joint*: one reference has both d_p <= k and d_d <= k."""
    return result.d_joint <= radius


def sum_rule(result: HashSearch, radius: int = DEFAULT_RADIUS) -> np.ndarray:
    """*sum*: one reference has d_p + d_d <= k."""
    return result.d_sum <= radius


def exact_phash_rule(result: HashSearch) -> np.ndarray:
    """*exact-pHash*: one reference has d_p == 0."""
    return result.d_p == 0


def _empty_pairs() -> pd.DataFrame:
    return pd.DataFrame({"query": np.empty(0, np.int64), "reference": np.empty(0, np.int64),
                         "d_p": np.empty(0, np.int16), "d_d": np.empty(0, np.int16)})


def hash_search(query_phash, query_dhash, reference_phash, reference_dhash, *,
                radius: int = DEFAULT_RADIUS, exclude=None, block_query: int = QUERY_BLOCK,
                block_reference: int = REFERENCE_BLOCK, workers: int | None = None,
                collect_pairs: bool = True, max_pairs: int = 5_000_000) -> HashSearch:
    """One exhaustive pass giving every hash rule's per-query minima (METHODS §2.1).

    Parameters
    ----------
    query_phash, query_dhash, reference_phash, reference_dhash : array-like
        64-bit hashes (see :func:`pack_hashes`), one per query / reference.
    radius : int
        k; pairs with ``max(d_p, d_d) <= k`` or ``d_p == 0`` are listed in ``pairs``. The minima
        do not depend on it, so rules can be re-evaluated at any radius afterwards.
    exclude : array-like of int, optional
        Per query, a reference position never to match (-1: none).
    block_query, block_reference, workers
        Blocking and threading (results do not depend on them).
    collect_pairs : bool
        Skip the pair list when only minima are needed.
    max_pairs : int
        Bound on the stored pairs (per worker thread, then overall): beyond it pairs are
        counted but not stored, and ``pairs_truncated`` says so (the minima stay exact).

    Returns
    -------
    HashSearch
    """
    from splitscope.relations import hamming_kernel as kernel

    qp = pack_hashes(query_phash, name="query pHash")
    rp = pack_hashes(reference_phash, name="reference pHash")
    qd = pack_hashes(query_dhash, name="query dHash")
    rd = pack_hashes(reference_dhash, name="reference dHash")
    if qp.shape != qd.shape or rp.shape != rd.shape:
        raise InputError("pHash and dHash arrays must have the same length on each side")
    if not 0 <= int(radius) <= 64:
        raise InputError(f"radius must be between 0 and 64; got {radius}")
    radius = int(radius)
    nq, nr = qp.size, rp.size
    if nr >= kernel.POSITION:
        raise InputError(f"{nr:,} reference hashes: a search takes fewer than {kernel.POSITION:,}")
    exclude = _check_exclude(exclude, nq, nr)
    ex = np.full(nq, -1, np.int64) if exclude is None else exclude
    keys = np.full((nq, 4), kernel.UNSET, np.int64)
    block_query = max(1, int(block_query))
    starts = list(range(0, nq, block_query))
    n_workers = min(_workers(workers), max(1, len(starts)))
    chunks = [starts[i::n_workers] for i in range(n_workers)]
    block = max(1, int(block_reference))
    counts: list[int] = []

    def work(my_starts: list[int]) -> list[tuple]:
        found: list[tuple] = []
        stored = 0
        total = 0
        for q0 in my_starts:
            q1 = min(q0 + block_query, nq)
            kernel.fold_minima(qp[q0:q1], qd[q0:q1], rp, rd, ex[q0:q1], keys[q0:q1], block)
            if not collect_pairs:
                continue
            best = kernel.distances(keys[q0:q1])
            near = (best[:, 2] <= radius) | (best[:, 0] == 0)
            for q in np.flatnonzero(near) + q0:
                pos, dp, dd = kernel.near_pairs(qp[q], qd[q], rp, rd, ex[q], radius)
                total += pos.size
                keep = max(0, min(pos.size, max_pairs - stored))
                if keep:
                    found.append((np.full(keep, q, np.int64), pos[:keep], dp[:keep], dd[:keep]))
                    stored += keep
        counts.append(total)
        return found

    if nr and nq:
        if n_workers == 1:
            results = [work(chunks[0])]
        else:
            with ThreadPoolExecutor(n_workers) as pool:
                results = list(pool.map(work, chunks))
    else:
        results = []
    # one row each for p, d, j, s; a query that met no reference reads NO_REFERENCE and -1
    dist = np.ascontiguousarray(kernel.distances(keys).T, dtype=np.int16)
    pos = np.ascontiguousarray(kernel.positions(keys).T)
    pieces = [t for res in results for t in res]
    if pieces:
        pairs = pd.DataFrame({
            "query": np.concatenate([t[0] for t in pieces]),
            "reference": np.concatenate([t[1] for t in pieces]),
            "d_p": np.concatenate([t[2] for t in pieces]),
            "d_d": np.concatenate([t[3] for t in pieces]),
        }).sort_values(["query", "reference"], kind="stable").reset_index(drop=True)
    else:
        pairs = _empty_pairs()
    n_total = int(sum(counts))
    truncated = n_total > len(pairs)
    if len(pairs) > max_pairs:
        pairs = pairs.iloc[:max_pairs].reset_index(drop=True)
    return HashSearch(radius, nr, *(a[col] for col in range(4) for a in (dist, pos)), pairs,
                      n_total, truncated)


def hamming_distance(a, b) -> np.ndarray:
    """Element-wise Hamming distance between two equal-length arrays of 64-bit hashes."""
    a = pack_hashes(a, name="a")
    b = pack_hashes(b, name="b")
    return np.bitwise_count(np.bitwise_xor(a, b)).astype(np.int16)
