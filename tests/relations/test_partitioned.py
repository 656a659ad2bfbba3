"""The NCC search partitioned over a real Dask LocalCluster equals the local search: best
reference per query (ties to the lowest position), its ρ, the flat masks and the pair set,
on random and adversarial data (copies, ties, flat images, exclusions, τ on a pair's value)."""

from __future__ import annotations

import numpy as np
import pytest

from splitscope.errors import InputError
from splitscope.relations.ncc import ncc_search
from splitscope.relations.ncc_core import canonical_values, centred_unit_vectors
from splitscope.relations.partitioned import StoredThumbnails, partitioned_ncc_search

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


def _smooth(n, rng, size=16):
    coarse = rng.normal(0, 1, (n, 4, 4))
    fine = np.kron(coarse, np.ones((size // 4, size // 4)))
    return np.clip(128 + 40 * fine + rng.normal(0, 2, (n, size, size)), 0, 255).astype(np.uint8)


def _inputs(kind, seed=0):
    rng = np.random.default_rng(seed)
    if kind == "random":
        r = rng.integers(0, 256, (500, 12, 12), dtype=np.uint8)
        q = rng.integers(0, 256, (230, 12, 12), dtype=np.uint8)
        q[:30] = r[rng.choice(500, 30, replace=False)]
    elif kind == "ties":  # every reference four times, in shuffled order: ties everywhere
        base = _smooth(120, rng)
        r = np.concatenate([base] * 4)[rng.permutation(480)]
        q = np.concatenate([base[:100], _smooth(100, rng)])
        q[100:110] = np.clip(q[100:110].astype(int) * 2 - 40, 0, 255)  # contrast copies
    elif kind == "flat":
        r, q = _smooth(400, rng), _smooth(150, rng)
        r[::7] = 128
        q[::11] = 40
        q[1] = r[3]
    else:
        raise ValueError(kind)
    return q, r


def _same(local, part):
    np.testing.assert_array_equal(part.best_index, local.best_index)
    np.testing.assert_array_equal(part.best_rho, local.best_rho)  # canonical values: exact
    np.testing.assert_array_equal(part.query_flat, local.query_flat)
    np.testing.assert_array_equal(part.reference_flat, local.reference_flat)
    assert part.pairs[["query", "reference"]].equals(local.pairs[["query", "reference"]])
    np.testing.assert_allclose(part.pairs["rho"], local.pairs["rho"], atol=2e-6)
    assert part.params["pairs_total"] == local.params["pairs_total"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["random", "ties", "flat"])
@pytest.mark.parametrize("tau", [0.5, 0.95])
def test_partitioned_equals_local(client, kind, tau):
    q, r = _inputs(kind)
    local = ncc_search(q, r, tau=tau)
    part = partitioned_ncc_search(client, q, r, tau=tau, query_block=64, reference_block=96,
                                  block=40, query_chunk=30)
    _same(local, part)
    assert part.params["partitions"]["tasks"] == -(-len(q) // 64) * -(-len(r) // 96)
    assert part.params["search"] == "partitioned"
    if kind == "ties":  # the copies' best is the lowest of the four positions
        first = {}
        for pos, img in enumerate(r):
            first.setdefault(img.tobytes(), pos)
        for i in range(100):
            assert part.best_index[i] == first[q[i].tobytes()]


@pytest.mark.slow
def test_exclusions_and_a_population_against_itself(client):
    q, r = _inputs("ties", 1)
    ex = np.arange(len(q)) % 9 - 1
    _same(ncc_search(q, r, tau=0.9, exclude=ex),
          partitioned_ncc_search(client, q, r, tau=0.9, exclude=ex, query_block=50,
                                 reference_block=70))
    _same(ncc_search(r, r, tau=0.9, exclude_self=True),
          partitioned_ncc_search(client, r, r, tau=0.9, exclude_self=True, query_block=77,
                                 reference_block=77))


def test_tau_on_a_pair_value(client):
    """τ equal to a pair's exact value: settled on the canonical value in both searches."""
    q, r = _inputs("random", 2)
    qv, _ = centred_unit_vectors(q[:5])
    rv, _ = centred_unit_vectors(r[:5])
    tau = float(canonical_values(qv, np.array([2]), rv, np.array([3]))[0])
    tau = abs(tau) if tau != 0 else 0.01
    local = ncc_search(q, r, tau=tau)
    part = partitioned_ncc_search(client, q, r, tau=tau, query_block=40, reference_block=128)
    _same(local, part)
    for t in (np.nextafter(tau, 0), np.nextafter(tau, 1)):
        if t <= 1:
            _same(ncc_search(q, r, tau=t),
                  partitioned_ncc_search(client, q, r, tau=t, query_block=40,
                                         reference_block=128))


def test_pruned_tasks_and_stored_thumbnails(client, tmp_path):
    """Tasks large enough for the bounded search (its pruned passes: too few pairs for an
    index), reading a thumbnail file by index."""
    rng = np.random.default_rng(4)
    store = _smooth(2300, rng)
    store[2000:2100] = store[:100]
    path = tmp_path / "thumbnails.npy"
    np.save(path, store)
    qi = rng.permutation(2300)[:1100]
    ri = np.setdiff1d(np.arange(2300), qi)[::-1].copy()
    local = ncc_search(store[qi], store[ri], tau=0.97)
    part = partitioned_ncc_search(client, StoredThumbnails(str(path), qi, 16),
                                  StoredThumbnails(str(path), ri, 16), tau=0.97,
                                  query_block=1000, reference_block=1000)
    _same(local, part)
    assert any(s.startswith("pruned (fewer than") for s in part.params["partitions"][
        "task_searches"])
    assert local.params["search"].startswith("pruned (fewer than")


def test_pair_cap_counts_every_pair(client):
    q, r = _inputs("ties")
    local = ncc_search(q, r, tau=0.5, max_pairs=10**9)
    part = partitioned_ncc_search(client, q, r, tau=0.5, max_pairs=25, query_block=64,
                                  reference_block=96)
    assert len(part.pairs) == 25 and part.params["pairs_truncated"]
    assert part.params["pairs_total"] == len(local.pairs)
    np.testing.assert_array_equal(part.best_index, local.best_index)


def test_empty_sides_and_bad_input(client):
    q, r = _inputs("random")
    empty = np.zeros((0, 12, 12), np.uint8)
    res = partitioned_ncc_search(client, q, empty)
    assert (res.best_index == -1).all() and len(res.query_flat) == len(q)
    with pytest.raises(InputError, match="one geometry"):
        partitioned_ncc_search(client, q, np.zeros((3, 8, 8), np.uint8))
    with pytest.raises(InputError, match="at least 1"):
        partitioned_ncc_search(client, q, r, query_block=0)
