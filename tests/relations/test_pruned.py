"""The pruned NCC search returns exactly what the brute force returns (best reference per query
with its tie rule, every pair with ρ ≥ τ) on inputs chosen to defeat the bound: white noise,
one shared background, many duplicates and ties, flat images, excluded pairs; and on real
thumbnails."""

from __future__ import annotations

import numpy as np
import pytest

from splitscope.relations import ncc_index, pruned
from splitscope.relations.ncc import _blocked_search, _flat, ncc_search
from splitscope.relations.ncc_core import ThumbnailRows, centred_unit_vectors


def _background(n, rng, size=32, own=6.0):
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1) - 0.5
    base = 60 + 120 * np.exp(-(xx ** 2 + yy ** 2) / 0.08) + 30 * xx
    img = base + rng.normal(0, own, (n, size, size))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _smooth(n, rng, size=32):
    """Low-frequency content (a 4×4 grid of levels, bilinearly upsampled) plus faint grain."""
    from scipy.ndimage import zoom

    low = rng.uniform(0, 200, (n, 4, 4))
    img = zoom(low, (1, size / 4, size / 4), order=1) + rng.normal(0, 1.0, (n, size, size))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _inputs(kind: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    if kind == "random":
        r = rng.integers(0, 256, (700, 32, 32), dtype=np.uint8)
        q = rng.integers(0, 256, (300, 32, 32), dtype=np.uint8)
        q[:20] = r[rng.choice(700, 20, replace=False)]
    elif kind == "background":
        r, q = _background(700, rng), _background(300, rng)
    elif kind == "duplicates":  # every reference four times, queries copies: ties everywhere
        base = _background(175, rng, own=12.0)
        r = np.concatenate([base] * 4)[rng.permutation(700)]
        q = np.concatenate([base[:150], _background(150, rng, own=12.0)])
    elif kind == "smooth":
        r, q = _smooth(700, rng), _smooth(300, rng)
        q[:30] = np.clip(r[:30].astype(int) + rng.integers(-2, 3, (30, 32, 32)), 0, 255)
    elif kind == "flat":
        r, q = _background(700, rng), _background(300, rng)
        r[::7] = 128
        q[::11] = 40
    else:
        raise ValueError(kind)
    return q, r


def _option(name, r):
    """None (the default options), a cell side ("cells 8") or the principal form ("pca 4")."""
    if name is None:
        return None
    kind, side = name.split()
    if kind == "cells":
        return [pruned.CellBound(int(side))]
    return [pruned.principal_bound(int(side), r[:128], 12)]


def _both(q, r, *, tau=0.98, exclude=None, fall_back=False, option=None):
    qf, rf = _flat(q), _flat(r)
    qv = lambda pos: centred_unit_vectors(q[pos])[0]
    rv = lambda pos: centred_unit_vectors(r[pos])[0]
    kw = {"tau": tau, "block": 128, "exclude": exclude, "query_chunk": 100, "collect_pairs": True,
              "max_pairs": 10 ** 7, "value": "rho"}
    brute = _blocked_search(qv, rv, qf, rf, **kw)
    fast = pruned.pruned_search(lambda pos: q[pos], lambda pos: r[pos], qf, rf,
                                options=_option(option, r), fall_back=fall_back, **kw)
    return brute, fast


def _same(brute, fast):
    b_idx, b_val, b_pairs, b_n = brute
    p_idx, p_val, p_pairs, p_n, stats = fast
    np.testing.assert_array_equal(p_idx, b_idx)  # best reference, lowest position on ties
    np.testing.assert_allclose(p_val, b_val, atol=2e-6, equal_nan=True)
    assert p_n == b_n
    assert p_pairs[["query", "reference"]].equals(b_pairs[["query", "reference"]])
    return stats


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["random", "background", "duplicates", "smooth", "flat"])
@pytest.mark.parametrize("tau", [0.9, 0.98])
@pytest.mark.parametrize("option", [None, "cells 2", "cells 8", "pca 4"])
def test_pruned_equals_brute_force(kind, tau, option):
    q, r = _inputs(kind)
    stats = _same(*_both(q, r, tau=tau, option=option))
    assert 0 < stats["scored_pairs"] and stats["flops"] > 0
    assert stats["brute_flops"] == 2 * (~_flat(q)).sum() * (~_flat(r)).sum() * 32 * 32


@pytest.mark.slow
def test_pruned_equals_brute_force_with_exclusions_and_ties():
    q, r = _inputs("duplicates", 1)
    ex = np.arange(300) % 7 - 1  # some queries exclude a reference, others none (-1)
    _same(*_both(q, r, exclude=ex))
    _same(*_both(r, r, exclude=np.arange(700)))  # a population against itself


def test_nothing_to_compare():
    q, r = _inputs("background")
    r[:] = 128  # every reference flat
    (b_idx, _b_val, _b_pairs, _), (p_idx, p_val, p_pairs, _, stats) = _both(q, r)
    assert (p_idx == -1).all() and np.isnan(p_val).all() and len(p_pairs) == 0
    np.testing.assert_array_equal(p_idx, b_idx)
    assert stats["search"].startswith("brute")


def test_bound_prunes_on_one_modality_and_falls_back_on_noise():
    q, r = _inputs("smooth")
    *_, stats = _both(q, r, fall_back=True)[1]
    assert "search" not in stats  # the pruned search ran
    assert stats["scored_pairs"] < 0.05 * 300 * 700  # most pairs discarded by the bound
    # (at this small size the fixed cost of choosing the cells is most of the rest)
    assert stats["flops"] < stats["brute_flops"]
    q, r = _inputs("random")
    *_, noise = _both(q, r, fall_back=True)[1]
    assert noise["search"].startswith("brute")  # nothing to prune in white noise
    assert noise["estimated_surviving_share"] * pruned.GATHER_COST >= 1


def test_ncc_search_methods_agree_on_lazy_thumbnails():
    q, r = _inputs("background", 2)
    store = np.concatenate([q, r])
    reads = []

    def read(ids):
        reads.append(len(ids))
        return store[ids]

    lazy_q = ThumbnailRows(read, np.arange(300), 32)
    lazy_r = ThumbnailRows(read, np.arange(300, 1000), 32)
    a = ncc_search(lazy_q, lazy_r, method="brute", block=128, query_chunk=100)
    b = ncc_search(lazy_q, lazy_r, method="indexed", block=128, query_chunk=100)
    assert b.params["search"] == "brute"  # 210,000 pairs: below pruned.MIN_PAIRS
    np.testing.assert_array_equal(a.best_index, b.best_index)
    assert a.pairs[["query", "reference"]].equals(b.pairs[["query", "reference"]])
    assert max(reads) <= 700  # read in blocks, never all 1,000 thumbnails at once
    with pytest.raises(Exception, match="method"):
        ncc_search(q, r, method="annoy")


@pytest.mark.realdata
@pytest.mark.slow
def test_pruned_equals_brute_force_on_kermany(kermany_scan):
    rows = kermany_scan.rows()
    te = rows[(rows["split"] == "test") & (rows["thumb_index"] >= 0)]["row"].to_numpy()
    tr = rows[(rows["split"] == "train") & (rows["thumb_index"] >= 0)]["row"].to_numpy()
    q, r = kermany_scan.thumbs(te), kermany_scan.thumbs(tr)
    stats = _same(*_both(q, r, tau=0.95))
    assert stats["scored_pairs"] < len(te) * len(tr)


@pytest.mark.parametrize("side", [2, 3, 8])
def test_cell_coordinates_are_the_projection_of_the_unit_vector(side):
    """The integer-sum coordinates equal the centred unit vector (float64) projected onto the
    orthonormal cell basis, and the residual is ‖(I−P)u‖ rounded up."""
    q, _ = _inputs("smooth", 3)
    q = np.concatenate([q[:40], np.full((1, 32, 32), 77, np.uint8)])  # and one flat image
    q = q[:, :24, :24]  # 24 is divisible by 2, 3 and 8
    coords, resid = pruned.cell_coordinates(q, side)
    x = q.reshape(len(q), -1).astype(np.float64)
    x -= x.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(x, axis=1)
    live = norm > 0
    u = x[live] / norm[live, None]
    m = 24 // side
    cells = u.reshape(-1, m, side, m, side).sum(axis=(2, 4)).reshape(-1, m * m) / side
    np.testing.assert_allclose(coords[live], cells, atol=1e-6)
    expect = np.sqrt(np.maximum(1 - (cells ** 2).sum(axis=1), 0))
    assert (resid[live] >= expect - 1e-9).all()
    np.testing.assert_allclose(resid[live], expect, atol=2e-3)
    assert (coords[~live] == 0).all() and (resid[~live] >= 1).all()
    with pytest.raises(ValueError, match="divide"):
        pruned.cell_coordinates(q, 5)


def test_a_thumbnail_size_without_a_cell_side_runs_the_brute_force():
    rng = np.random.default_rng(4)
    q, r = _background(60, rng, size=37), _background(100, rng, size=37)  # 37 is prime
    assert pruned.cell_options(37) == []
    brute, fast = _both(q, r)
    stats = _same(brute, fast)
    assert stats["search"].startswith("brute (no cell side")


def test_the_chosen_bound_has_the_lowest_estimated_cost():
    q, r = _inputs("smooth", 5)
    best = (centred_unit_vectors(q[:100])[0] @ centred_unit_vectors(r)[0].T).max(axis=1)
    options = pruned.bound_options(32, r[:100], 700)
    assert [b.side for b in options if b.basis is None] == pruned.cell_options(32)
    # every rank of PRINCIPAL_RANKS below the 256 cells of 2 px; 128 is cut to the 100
    # directions that the 100 sample references span
    assert pruned.PRINCIPAL_RANKS == (32, 64, 128)
    assert [b.dims(32) for b in options if b.basis is not None] == [32, 64, 100]
    chosen, share, shares = pruned.choose_bound(q[:100], r[:100], best, 0.98, True, options)
    costs = [pruned.estimated_cost(b.dims(32), 32, v) for b, v in shares]
    assert any(b is chosen and v == share for b, v in shares)
    assert pruned.estimated_cost(chosen.dims(32), 32, share) == min(costs)
    # nested cells (2 inside 4 inside 8) keep more energy: the share cannot grow
    by_side = {b.side: v for b, v in shares if b.basis is None}
    assert by_side[2] <= by_side[4] <= by_side[8]


def test_principal_form_is_an_orthonormal_projection_of_the_cells():
    q, r = _inputs("smooth", 7)
    b = pruned.principal_bound(4, r[:200], 10)
    np.testing.assert_allclose(b.basis.T @ b.basis, np.eye(10), atol=1e-10)
    coords, resid = b.coordinates(q)
    cells, cell_resid = pruned.cell_coordinates(q, 4)
    np.testing.assert_allclose(coords, cells.astype(np.float64) @ b.basis, atol=1e-6)
    # fewer directions keep less of u: the residual is never below the cells' residual
    assert (resid >= cell_resid - 1e-6).all()


def test_bounds_whose_coordinates_exceed_the_memory_budget_are_not_tried(monkeypatch):
    q, r = _inputs("smooth", 6)
    monkeypatch.setattr(pruned, "COORDINATE_BYTES", 4 * 700 * 17)  # 16 cells + the residual
    options = pruned.bound_options(32, r[:50], 700)
    assert {b.side for b in options if b.basis is None} == {8}
    monkeypatch.setattr(pruned, "COORDINATE_BYTES", 10)
    monkeypatch.setattr(pruned, "PRINCIPAL_CELLS", 0)
    brute, fast = _both(q, r)
    assert _same(brute, fast)["search"].startswith("brute (the cell coordinates of 700")



def test_canonical_values_do_not_depend_on_how_many_pairs_are_gathered_at_a_time():
    from splitscope.relations.ncc_core import canonical_values

    q, r = _inputs("background", 12)
    qv, rv = centred_unit_vectors(q)[0], centred_unit_vectors(r)[0]
    rng = np.random.default_rng(0)
    qi, ri = rng.integers(0, len(qv), 500), rng.integers(0, len(rv), 500)
    want = (qv[qi].astype(np.float64) * rv[ri].astype(np.float64)).sum(axis=1)
    values = [canonical_values(qv, qi, rv, ri, chunk=c) for c in (1, 7, 64, 1024)]
    for v in values[1:]:
        np.testing.assert_array_equal(v, values[0])
    np.testing.assert_allclose(values[0], want, rtol=0, atol=1e-12)


def test_recorded_flatness_replaces_a_pass_over_the_thumbnails():
    q, r = _inputs("background", 2)
    q[[3, 40]] = 77  # two flat queries: never matched, never a counterpart
    r[[5]] = 0
    store = np.concatenate([q, r])
    reads = []

    def read(ids):
        reads.append(len(ids))
        return store[ids]

    def search(flat_q=None, flat_r=None):
        reads.clear()
        res = ncc_search(ThumbnailRows(read, np.arange(300), 32, flat_q),
                         ThumbnailRows(read, np.arange(300, 1000), 32, flat_r),
                         method="brute", block=128, query_chunk=100)
        return res, sum(reads)

    found, read_found = search()
    given, read_given = search(_flat(q), _flat(r))
    np.testing.assert_array_equal(found.query_flat, given.query_flat)
    np.testing.assert_array_equal(found.best_index, given.best_index)
    np.testing.assert_array_equal(found.best_rho, given.best_rho)
    assert found.pairs.equals(given.pairs)
    assert given.query_flat[[3, 40]].all() and (given.best_index[[3, 40]] == -1).all()
    assert read_found - read_given == 1000  # the pass that found the flat rows is gone
    with pytest.raises(Exception, match="flat has 2 entries"):
        ThumbnailRows(read, np.arange(3), 32, np.zeros(2, bool))


def test_ncc_search_products_run_on_its_workers_with_the_same_result(monkeypatch):
    """``workers`` bounds the BLAS threads while the search runs (read from the pools each
    time it reads thumbnails); brute or indexed (its pruned passes, or its index), the
    result does not depend on it."""
    import pandas as pd
    from threadpoolctl import threadpool_info

    q, r = _inputs("smooth", 3)  # low-frequency content: the bound pays
    store = np.concatenate([q, r])
    seen = []

    def read(ids):
        seen.append(max(p["num_threads"] for p in threadpool_info()))
        return store[ids]

    # flatness given, so that every read happens inside the search
    lazy_q = ThumbnailRows(read, np.arange(300), 32, _flat(q))
    lazy_r = ThumbnailRows(read, np.arange(300, 1000), 32, _flat(r))
    monkeypatch.setattr(pruned, "MIN_PAIRS", 1)  # the bounded search runs at this size
    results = {}
    # the indexed search runs its pruned passes at this size, and its index when told to
    for label, method, index_from in (("brute", "brute", None), ("indexed", "indexed", None),
                                      ("index", "indexed", 0)):
        if index_from is not None:
            monkeypatch.setattr(ncc_index, "INDEX_MIN_PAIRS", index_from)
        for workers in (1, 2, None):
            seen.clear()
            results[label, workers] = ncc_search(lazy_q, lazy_r, method=method, block=128,
                                                 query_chunk=100, workers=workers)
            assert seen and (workers is None or max(seen) <= workers)
    assert results["indexed", 1].params["search"].startswith("pruned (fewer than")
    assert results["index", 2].params["search"] == "indexed"
    base = results["brute", None]
    for res in results.values():
        np.testing.assert_array_equal(res.best_index, base.best_index)
        np.testing.assert_array_equal(res.best_rho, base.best_rho)
        pd.testing.assert_frame_equal(res.pairs, base.pairs)
