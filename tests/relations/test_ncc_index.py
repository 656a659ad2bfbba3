"""The indexed NCC search returns, bit for bit, what the brute force returns (each query's best
reference with its tie rule and its ρ, every pair with ρ ≥ τ and their values, the pair
count) on inputs chosen to defeat the index: white noise (no cluster can be skipped), one flat
image repeated, pairs within 1e-4 of τ, many equal similarities, queries with no reference
near them, tiny inputs, exclusions, any number of threads; and on random releases of several
seeds. The index itself (its cluster bounds) is checked against the members it bounds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitscope.errors import InputError
from splitscope.relations import ncc_index, pruned
from splitscope.relations.ncc import _blocked_search, _flat, ncc_search
from splitscope.relations.ncc_core import SearchMerge, canonical_values, centred_unit_vectors
from splitscope.relations.options import SearchOptions

SIZE = 24  # divisible by 2, 3, 4, 6, 8 and 12: every form of the bound can be chosen


@pytest.fixture(autouse=True)
def index_at_any_size(monkeypatch):
    """The index is built whatever the size (below these sizes the pruned passes run)."""
    monkeypatch.setattr(ncc_index, "INDEX_MIN_PAIRS", 0)


def _smooth(n: int, rng, levels: int = 4, grain: float = 1.0) -> np.ndarray:
    """Low-frequency content: a levels×levels grid of grey levels, upsampled, plus grain."""
    grid = rng.uniform(20, 230, (n, levels, levels))
    img = np.kron(grid, np.ones((SIZE // levels, SIZE // levels)))
    img = img + rng.normal(0, grain, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _copies(src: np.ndarray, rng, noise: float) -> np.ndarray:
    return np.clip(np.rint(src + rng.normal(0, noise, src.shape)), 0, 255).astype(np.uint8)


def _brute(q, r, *, tau, exclude=None, max_pairs=10 ** 7):
    qf, rf = _flat(q), _flat(r)
    return _blocked_search(lambda pos: centred_unit_vectors(q[pos])[0],
                           lambda pos: centred_unit_vectors(r[pos])[0], qf, rf, tau=tau,
                           block=64, exclude=exclude, query_chunk=50, collect_pairs=True,
                           max_pairs=max_pairs, value="rho")


def _indexed(q, r, *, tau, exclude=None, max_pairs=10 ** 7, workers=1, clusters=None,
             query_chunk=64, fall_back=False, seed=0):
    qf, rf = _flat(q), _flat(r)
    merge = SearchMerge(qf.size, max_pairs=max_pairs)
    stats = ncc_index.collect_indexed(
        merge, lambda pos: q[pos], lambda pos: r[pos], qf, rf, tau=tau, block=64,
        exclude=exclude, query_chunk=query_chunk, collect_pairs=True, max_pairs=max_pairs,
        workers=workers, clusters=clusters, fall_back=fall_back, seed=seed)
    return (*merge.result("rho"), stats)


def _same(brute, indexed) -> dict:
    """Bit for bit: best reference, best ρ (float32), the pair table and the pair count."""
    b_idx, b_val, b_pairs, b_n = brute
    i_idx, i_val, i_pairs, i_n, stats = indexed
    np.testing.assert_array_equal(i_idx, b_idx)
    np.testing.assert_array_equal(i_val, b_val)  # NaN where undefined, on both sides
    assert i_val.dtype == b_val.dtype == np.float32
    pd.testing.assert_frame_equal(i_pairs, b_pairs)
    assert i_n == b_n
    return stats


def _inputs(kind: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    if kind == "random":  # smooth images, a fifth of the queries noisy copies
        r = _smooth(400, rng)
        q = _smooth(150, rng)
        q[:30] = _copies(r[rng.choice(400, 30, replace=False)], rng, 2.0)
    elif kind == "noise":  # white noise: every cluster can hold a query's best
        r = rng.integers(0, 256, (400, SIZE, SIZE), dtype=np.uint8)
        q = rng.integers(0, 256, (150, SIZE, SIZE), dtype=np.uint8)
        q[:10] = r[:10]
    elif kind == "videos":  # drifting frames: the index skips most clusters
        frames = []
        for _ in range(20):
            g = rng.uniform(20, 230, (4, 4))
            for _ in range(30):
                g = np.clip(g + rng.normal(0, 3, g.shape), 0, 255)
                frames.append(np.kron(g, np.ones((SIZE // 4, SIZE // 4))))
        x = np.clip(np.rint(np.asarray(frames) + rng.normal(0, 1, (600, SIZE, SIZE))), 0, 255)
        x = x.astype(np.uint8)
        test = rng.random(600) < 0.25
        q, r = x[test], x[~test]
    elif kind == "ties":  # one image four times among the references, queries its copies
        base = _smooth(60, rng)
        r = np.concatenate([base] * 4)[rng.permutation(240)]
        q = np.concatenate([base[:40], _smooth(40, rng)])
    elif kind == "flat":  # one flat image repeated on both sides, among others
        r, q = _smooth(300, rng), _smooth(120, rng)
        r[::5] = 128
        q[::4] = 128
    elif kind == "far":  # queries unlike every reference: no pair reaches τ
        r = _smooth(300, rng, levels=2)
        q = rng.integers(0, 256, (80, SIZE, SIZE), dtype=np.uint8)
    else:
        raise ValueError(kind)
    return q, r


@pytest.mark.parametrize("kind", ["random", "noise", "videos", "ties", "flat", "far"])
@pytest.mark.parametrize("tau", [0.9, 0.98])
def test_indexed_equals_brute_force(kind, tau):
    q, r = _inputs(kind)
    stats = _same(_brute(q, r, tau=tau), _indexed(q, r, tau=tau))
    assert stats["clusters"] >= 1 and stats["scored_pairs"] > 0
    assert stats["brute_flops"] == 2 * (~_flat(q)).sum() * (~_flat(r)).sum() * SIZE * SIZE


def test_the_index_skips_clusters_where_the_nearest_references_are_close():
    q, r = _inputs("videos")
    stats = _same(_brute(q, r, tau=0.98), _indexed(q, r, tau=0.98))
    assert stats["visited_share"] < 0.5  # most query × reference bounds never computed
    q, r = _inputs("noise")
    stats = _same(_brute(q, r, tau=0.98), _indexed(q, r, tau=0.98))
    assert stats["visited_share"] > 0.9  # white noise: nothing to skip, still exact


def test_pairs_within_1e4_of_tau_are_settled_as_the_brute_force_settles_them():
    rng = np.random.default_rng(3)
    r = _smooth(200, rng)
    q = _copies(np.repeat(r[:20], 6, axis=0), rng, 3.2)  # ρ of the copies near one value
    qv, rv = centred_unit_vectors(q)[0], centred_unit_vectors(r)[0]
    rho = canonical_values(qv, np.arange(120), rv, np.repeat(np.arange(20), 6))
    tau = float(np.sort(rho)[60])  # one copy exactly at τ, the others around it
    near = np.abs(rho - tau) < 1e-4
    assert near.sum() >= 3 and (rho == tau).any()
    brute = _brute(q, r, tau=tau)
    _same(brute, _indexed(q, r, tau=tau))
    at_tau = brute[2][(brute[2]["rho"] - tau).abs() < 1e-4]
    assert len(at_tau) >= 2  # the test holds pairs on both sides of τ's rounding


def test_equal_similarities_go_to_the_lowest_reference_position():
    q, r = _inputs("ties", 1)
    brute = _brute(q, r, tau=0.95)
    indexed = _indexed(q, r, tau=0.95, clusters=37)
    _same(brute, indexed)
    idx = indexed[0][:40]
    # each copied query's best is the first of the four equal references
    for i, j in enumerate(idx):
        equal = np.flatnonzero((r == r[j]).all(axis=(1, 2)))
        assert j == equal.min()


def test_exclusions_and_a_population_against_itself():
    q, r = _inputs("ties", 2)
    ex = np.arange(len(q)) % 7 - 1  # some queries exclude a reference, others none (-1)
    _same(_brute(q, r, tau=0.95, exclude=ex), _indexed(q, r, tau=0.95, exclude=ex))
    own = np.arange(len(r))
    brute = _brute(r, r, tau=0.95, exclude=own)
    _same(brute, _indexed(r, r, tau=0.95, exclude=own, clusters=len(r)))  # one per cluster
    assert (brute[0] != own).all()


def test_one_reference_no_reference_no_query():
    rng = np.random.default_rng(5)
    q, r = _smooth(30, rng), _smooth(1, rng)
    _same(_brute(q, r, tau=0.9), _indexed(q, r, tau=0.9))
    nothing = np.zeros((0, SIZE, SIZE), np.uint8)
    for qq, rr in ((q, nothing), (nothing, r), (q, np.full((3, SIZE, SIZE), 9, np.uint8))):
        b_idx = _brute(qq, rr, tau=0.9)[0]
        i_idx, i_val, i_pairs, i_n, stats = _indexed(qq, rr, tau=0.9)
        assert (i_idx == -1).all() and np.isnan(i_val).all() and len(i_pairs) == i_n == 0
        np.testing.assert_array_equal(i_idx, b_idx)
        assert stats["search"].startswith("brute (nothing to compare)")
    for method in ("indexed", "brute"):  # the public search, one reference
        res = ncc_search(q, r, method=method)
        assert res.best_index.tolist() == [0] * 30


@pytest.mark.parametrize("seed", range(6))
def test_random_releases_equal_the_brute_force(seed):
    """Property: whatever the release, τ, clusters, chunks and threads, the same result."""
    rng = np.random.default_rng(100 + seed)
    n_r, n_q = int(rng.integers(1, 300)), int(rng.integers(1, 120))
    r = _smooth(n_r, rng, levels=int(rng.choice([2, 4, 8])), grain=float(rng.uniform(0, 8)))
    q = _smooth(n_q, rng, levels=int(rng.choice([2, 4, 8])))
    k = int(rng.integers(0, min(n_q, n_r) + 1))
    q[:k] = _copies(r[rng.choice(n_r, k)], rng, float(rng.uniform(0, 6)))
    r[rng.random(n_r) < 0.05] = int(rng.integers(0, 256))  # some flat references
    q[rng.random(n_q) < 0.05] = 0
    tau = float(rng.choice([0.9, 0.95, 0.98, 0.99]))
    ex = np.where(rng.random(n_q) < 0.3, rng.integers(0, n_r, n_q), -1)
    indexed = _indexed(q, r, tau=tau, exclude=ex, workers=int(rng.integers(1, 4)),
                       clusters=int(rng.integers(1, n_r + 1)),
                       query_chunk=int(rng.integers(1, 80)), seed=seed)
    _same(_brute(q, r, tau=tau, exclude=ex), indexed)


def test_threads_and_chunks_do_not_change_the_result():
    q, r = _inputs("random", 4)
    base = _indexed(q, r, tau=0.9, workers=1, query_chunk=150)
    for workers, chunk in ((2, 150), (3, 7), (None, 1)):
        _same(base[:4], _indexed(q, r, tau=0.9, workers=workers, query_chunk=chunk))


def test_stored_pairs_are_capped_and_counted_in_full():
    q, r = _inputs("ties", 6)
    b = _brute(q, r, tau=0.9, max_pairs=7)
    i = _indexed(q, r, tau=0.9, max_pairs=7, workers=2, query_chunk=10)
    assert len(b[2]) == len(i[2]) == 7 and b[3] == i[3] > 7
    np.testing.assert_array_equal(i[0], b[0])


def test_cluster_bounds_are_upper_bounds_of_their_members():
    q, r = _inputs("random", 7)
    plan = pruned.plan_search(lambda p: q[p], lambda p: r[p], _flat(q), _flat(r), tau=0.98,
                              block=64, collect_pairs=True, options=None, seed=0,
                              fall_back=False)
    index = ncc_index.build_index(plan.ref_p, clusters=23)
    qa = plan.query_coordinates(q)
    ub, near = ncc_index.cap_bounds(index, qa, 3)
    exact = qa.astype(np.float64) @ index.coords.T.astype(np.float64)  # U, member order
    for j in range(len(index)):
        m = index.members(j)
        assert (ub[j][:, None] >= exact[:, m]).all()
    centres = qa.astype(np.float64) @ index.centres.T
    assert (near[0] == centres.argmax(axis=1)).all()
    assert sorted(np.concatenate([index.order[index.members(j)] for j in range(len(index))])
                  ) == list(range(len(plan.r_keep)))


def test_the_search_option_and_the_public_search_know_the_method(monkeypatch):
    assert SearchOptions(search="indexed").search == "indexed"
    with pytest.raises(InputError, match="indexed"):
        SearchOptions(search="annoy")
    q, r = _inputs("videos", 8)
    monkeypatch.setattr(pruned, "MIN_PAIRS", 1)
    monkeypatch.setattr(pruned, "estimated_cost", lambda *a: 0.0)  # the bound always pays
    a = ncc_search(q, r, method="brute")
    b = ncc_search(q, r, method="indexed", workers=2)
    assert b.params["search"] == "indexed" and b.params["clusters"] >= 1
    np.testing.assert_array_equal(a.best_index, b.best_index)
    np.testing.assert_array_equal(a.best_rho, b.best_rho)
    pd.testing.assert_frame_equal(a.pairs, b.pairs)
    with pytest.raises(InputError, match="method"):
        ncc_search(q, r, method="annoy")


def test_few_pairs_run_the_pruned_passes(monkeypatch):
    monkeypatch.setattr(ncc_index, "INDEX_MIN_PAIRS", 10 ** 9)
    q, r = _inputs("random", 9)
    stats = _same(_brute(q, r, tau=0.95), _indexed(q, r, tau=0.95))
    assert stats["search"].startswith("pruned (fewer than")


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_bound_the_threads_that_search_at_once(workers):
    """At most ``workers`` threads read and score at a time, each on one BLAS thread."""
    import threading
    import time

    from threadpoolctl import threadpool_info

    q, r = _inputs("random", 10)
    lock, busy, peak, blas = threading.Lock(), [0], [0], []

    def reader(x):
        def read(pos):
            with lock:
                busy[0] += 1
                peak[0] = max(peak[0], busy[0])
                blas.append(max(p["num_threads"] for p in threadpool_info()))
            time.sleep(0.002)  # long enough for the threads to overlap
            with lock:
                busy[0] -= 1
            return x[pos]
        return read

    qf, rf = _flat(q), _flat(r)
    merge = SearchMerge(qf.size, max_pairs=10 ** 7)
    stats = ncc_index.collect_indexed(
        merge, reader(q), reader(r), qf, rf, tau=0.9, block=64, exclude=None, query_chunk=20,
        collect_pairs=True, max_pairs=10 ** 7, workers=workers, fall_back=False)
    assert stats["threads"] == workers and peak[0] <= workers and max(blas) == 1
    _same(_brute(q, r, tau=0.9), (*merge.result("rho"), stats))
