"""Hash rules (METHODS §2.1) on hand-built cases and against a brute-force reference."""

from __future__ import annotations

import imagehash
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from splitscope.errors import InputError
from splitscope.relations.hashes import (
    NO_REFERENCE,
    hamming_distance,
    hamming_search,
    hash_search,
    pack_hashes,
)


def bits(*positions: int) -> int:
    """A 64-bit value with the given bits set."""
    return sum(1 << p for p in positions)


def test_screen_and_joint_differ():
    # q = 0; reference A is close in pHash only, B close in dHash only
    q = [0]
    rp = [bits(0, 1), bits(*range(20))]  # A: d_p 2, B: d_p 20
    rd = [bits(*range(20)), bits(5, 6)]  # A: d_d 20, B: d_d 2
    res = hash_search(q, q, rp, rd, radius=6)
    assert res.flags("screen")[0]  # minima 2 and 2 from different references
    assert not res.flags("joint")[0]  # no single reference has both ≤ 6
    assert not res.flags("sum")[0]
    assert not res.flags("exact_phash")[0]
    assert (res.ref_p[0], res.ref_d[0]) == (0, 1)


def test_joint_and_sum_and_exact_differ():
    q = [0]
    # A: d_p 4, d_d 4 → joint at k=6 but not sum (8 > 6); B: d_p 0, d_d 30 → exact only
    rp = [bits(0, 1, 2, 3), 0]
    rd = [bits(10, 11, 12, 13), bits(*range(30))]
    res = hash_search(q, q, rp, rd, radius=6)
    assert res.flags("joint")[0] and not res.flags("sum")[0]
    assert res.flags("exact_phash")[0] and res.ref_p[0] == 1
    assert res.ref_joint[0] == 0 and res.d_joint[0] == 4 and res.d_sum[0] == 8
    assert res.flags("sum", radius=8)[0]  # rules re-evaluate at any radius
    pairs = res.pairs
    assert list(zip(pairs["reference"], pairs["d_p"], pairs["d_d"])) == [(0, 4, 4), (1, 0, 30)]


@pytest.mark.parametrize("workers,bq,br", [(1, 32, 4096), (2, 7, 100), (3, 1, 13)])
def test_matches_brute_force(workers, bq, br):
    rng = np.random.default_rng(3)
    base = rng.integers(0, 2**63, 4, dtype=np.uint64)

    def near(n):
        v = base[rng.integers(0, 4, n)].copy()
        for b in range(64):
            v ^= (rng.random(n) < 0.04).astype(np.uint64) << np.uint64(b)
        return v

    qp, qd, rp, rd = near(150), near(150), near(400), near(400)
    res = hash_search(qp, qd, rp, rd, radius=6, workers=workers, block_query=bq,
                      block_reference=br)
    P = np.bitwise_count(qp[:, None] ^ rp[None]).astype(int)
    D = np.bitwise_count(qd[:, None] ^ rd[None]).astype(int)
    for got, idx, mat in ((res.d_p, res.ref_p, P), (res.d_d, res.ref_d, D),
                          (res.d_joint, res.ref_joint, np.maximum(P, D)),
                          (res.d_sum, res.ref_sum, P + D)):
        np.testing.assert_array_equal(got, mat.min(1))
        np.testing.assert_array_equal(idx, mat.argmin(1))  # lowest position on ties
    qi, ri = np.nonzero((np.maximum(P, D) <= 6) | (P == 0))
    np.testing.assert_array_equal(res.pairs["query"], qi)
    np.testing.assert_array_equal(res.pairs["reference"], ri)
    assert res.flags("joint").sum() > 0 and res.flags("screen").sum() >= res.flags("joint").sum()


@pytest.mark.parametrize("workers,bq,br", [(1, 1024, 2048), (2, 5, 13), (2, 64, 1)])
def test_matches_brute_force_with_exclusions_and_every_bit(workers, bq, br):
    """Full 64-bit values (top bit included), one excluded reference per query placed at block
    edges, many equal distances: minima, lowest positions and pairs as a brute force gives."""
    rng = np.random.default_rng(11)
    pool = rng.integers(0, 2**64, 6, dtype=np.uint64)  # few distinct values: many ties
    qp, qd = pool[rng.integers(0, 6, 90)], pool[rng.integers(0, 6, 90)]
    rp, rd = pool[rng.integers(0, 6, 120)], pool[rng.integers(0, 6, 120)]
    qp[:30] ^= np.uint64(1) << np.uint64(63)
    exclude = rng.choice([-1, 0, 12, 13, 25, 26, 119], 90)
    res = hash_search(qp, qd, rp, rd, radius=4, exclude=exclude, workers=workers,
                      block_query=bq, block_reference=br)
    P = np.bitwise_count(qp[:, None] ^ rp[None]).astype(int)
    D = np.bitwise_count(qd[:, None] ^ rd[None]).astype(int)
    hit = exclude >= 0
    for mat in (P, D):
        mat[np.flatnonzero(hit), exclude[hit]] = 999
    for got, idx, mat in ((res.d_p, res.ref_p, P), (res.d_d, res.ref_d, D),
                          (res.d_joint, res.ref_joint, np.maximum(P, D)),
                          (res.d_sum, res.ref_sum, P + D)):
        np.testing.assert_array_equal(got, mat.min(1))
        np.testing.assert_array_equal(idx, mat.argmin(1))
    qi, ri = np.nonzero((np.maximum(P, D) <= 4) | (P == 0))
    np.testing.assert_array_equal(res.pairs["query"], qi)
    np.testing.assert_array_equal(res.pairs["reference"], ri)
    np.testing.assert_array_equal(res.pairs["d_p"], P[qi, ri])
    np.testing.assert_array_equal(res.pairs["d_d"], D[qi, ri])
    assert len(qi) > 100


def test_exclude_self_and_no_reference():
    h = np.array([5, 5, 9], dtype=np.uint64)
    res = hamming_search(h, h, exclude=np.arange(3))
    assert list(res.distance) == [0, 0, 2] and list(res.index) == [1, 0, 0]
    only = hamming_search(h[:1], h[:1], exclude=[0])
    assert only.index[0] == -1 and only.distance[0] == NO_REFERENCE
    empty = hash_search(h, h, np.empty(0, np.uint64), np.empty(0, np.uint64))
    assert (empty.ref_p == -1).all() and not empty.flags("screen").any()


def test_pack_hashes_matches_imagehash_hex():
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (40, 50), dtype=np.uint8))
    hexes = [str(imagehash.phash(img)), str(imagehash.dhash(img))]
    packed = pack_hashes(hexes)
    assert [format(int(v), "016x") for v in packed] == hexes
    assert hamming_distance(packed[:1], packed[1:])[0] == imagehash.phash(img) - \
        imagehash.dhash(img)


def test_bad_input():
    with pytest.raises(InputError, match="missing"):
        pack_hashes([1, None])
    with pytest.raises(InputError, match="radius"):
        hash_search([1], [1], [1], [1], radius=65)
    with pytest.raises(InputError, match="one entry per query"):
        hash_search([1], [1], [1], [1], exclude=[0, 0])


def test_pair_storage_is_bounded_and_counted():
    h = np.zeros(50, np.uint64)  # every pair has distance 0
    res = hash_search(h, h, h, h, max_pairs=100, workers=2, block_query=8)
    assert res.n_pairs_total == 2500 and res.pairs_truncated and len(res.pairs) == 100
    assert (res.d_p == 0).all()  # minima stay exact


def _random_hashes(rng, n):
    return rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64)


def test_hash_search_gives_the_same_result_on_any_number_of_threads():
    rng = np.random.default_rng(5)
    rp, rd = _random_hashes(rng, 300), _random_hashes(rng, 300)
    qp, qd = rp[:200] ^ np.uint64(3), rd[:200] ^ np.uint64(1)  # near copies: pairs to list
    runs = [hash_search(qp, qd, rp, rd, radius=6, block_query=16, workers=w)
            for w in (1, 2, None)]
    for other in runs[1:]:
        for name in ("d_p", "ref_p", "d_d", "ref_d", "d_joint", "ref_joint", "d_sum",
                     "ref_sum"):
            np.testing.assert_array_equal(getattr(runs[0], name), getattr(other, name))
        pd.testing.assert_frame_equal(runs[0].pairs, other.pairs)
    assert len(runs[0].pairs) >= 200


def test_one_worker_searches_in_the_calling_thread(monkeypatch):
    """``workers=1`` starts no thread pool; more do (so the check can fail)."""
    from splitscope.relations import hashes

    def no_pool(*args, **kwargs):
        raise AssertionError("a thread pool was started")

    monkeypatch.setattr(hashes, "ThreadPoolExecutor", no_pool)
    rng = np.random.default_rng(6)
    q, r = _random_hashes(rng, 100), _random_hashes(rng, 50)
    hash_search(q, q, r, r, block_query=16, workers=1)
    with pytest.raises(AssertionError, match="thread pool"):
        hash_search(q, q, r, r, block_query=16, workers=2)
    assert hashes._workers(1) == 1 and hashes._workers(None) >= 1


def test_kernels_compile_uncached_where_no_cache_folder_can_be_written(monkeypatch):
    """numba refuses ``cache=True`` (at compile time) where neither the package's folder nor
    the user's cache folder can be written: the loops are then compiled without a cache."""
    import numba

    from splitscope.relations import hamming_kernel

    real = numba.njit
    asked = []

    def njit(**options):
        asked.append(options.get("cache", False))
        if options.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'x'")
        return real(**options)

    monkeypatch.setattr(hamming_kernel.nb, "njit", njit)

    def add(a, b):
        return a + b

    assert hamming_kernel._compiled(add)(2, 3) == 5
    assert asked == [True, False]
