"""NCC search and counterpart rules (METHODS §2.2), SSIM (§2.3), on known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from skimage.metrics import structural_similarity

from splitscope.errors import InputError
from splitscope.relations.ncc import (
    any_candidate,
    first_candidate,
    ncc_search,
    ncc_sweep,
    nearest_rule,
    pair_rho,
)
from splitscope.relations.ssim import ssim_for_pairs, ssim_pairs


def rho_reference(a: np.ndarray, b: np.ndarray) -> float:
    """The METHODS formula in float64."""
    x = a.astype(np.float64).ravel()
    y = b.astype(np.float64).ravel()
    x -= x.mean()
    y -= y.mean()
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-12))


@pytest.fixture
def thumbs():
    rng = np.random.default_rng(11)
    return rng.integers(0, 256, (40, 12, 12), dtype=np.uint8)


def test_rho_matches_formula_and_brute_force(thumbs):
    q = thumbs[:9]
    r = thumbs[5:]
    res = ncc_search(q, r, tau=0.2, block=4, query_chunk=3)
    full = np.array([[rho_reference(a, b) for b in r] for a in q])
    np.testing.assert_allclose(res.best_rho, full.max(1), atol=1e-5)
    np.testing.assert_array_equal(res.best_index, full.argmax(1))
    qi, ri = np.nonzero(full >= 0.2)
    np.testing.assert_array_equal(res.pairs["query"], qi)
    np.testing.assert_array_equal(res.pairs["reference"], ri)
    np.testing.assert_allclose(res.pairs["rho"], full[qi, ri], atol=1e-5)
    np.testing.assert_allclose(pair_rho(q, r, [0, 8], [3, 0]), [full[0, 3], full[8, 0]],
                               atol=1e-5)


def test_block_sizes_do_not_change_results(thumbs):
    a = ncc_search(thumbs[:10], thumbs, tau=0.1, exclude_self=False)
    b = ncc_search(thumbs[:10], thumbs, tau=0.1, block=3, query_chunk=4)
    np.testing.assert_array_equal(a.best_index, b.best_index)
    pd.testing.assert_frame_equal(a.pairs, b.pairs)


def test_brightness_contrast_invariance_and_ties(thumbs):
    base = (thumbs[0] // 2).astype(np.uint8)
    brighter = (base.astype(np.int32) * 2 + 1).astype(np.uint8)  # affine, no clipping
    ref = np.stack([thumbs[1], base, base, thumbs[2]])
    res = ncc_search(brighter[None], ref)
    assert res.best_index[0] == 1  # tie between positions 1 and 2: lowest wins
    assert res.best_rho[0] > 0.9999 and res.flagged[0]
    assert list(res.pairs["reference"]) == [1, 2]


def test_zero_variance_image_is_flagged_never_matched(thumbs):
    flat = np.full((1, 12, 12), 77, np.uint8)
    ref = np.concatenate([flat, thumbs[:3]])
    res = ncc_search(np.concatenate([flat, thumbs[:1]]), ref, tau=0.5)
    assert res.query_flat.tolist() == [True, False]
    assert res.reference_flat.tolist() == [True, False, False, False]
    assert res.best_index[0] == -1 and np.isnan(res.best_rho[0])
    assert res.best_index[1] == 1  # thumbs[0] itself, never the flat reference
    assert 0 not in set(res.pairs["reference"]) and 0 not in set(res.pairs["query"])
    # a query anti-correlated with everything still never picks the flat reference (rho 0)
    inverse = (255 - thumbs[0])[None]
    res2 = ncc_search(inverse, np.concatenate([flat, thumbs[:1]]))
    assert res2.best_index[0] == 1 and res2.best_rho[0] < -0.99
    assert np.isnan(pair_rho(flat, thumbs, [0], [0])[0])


def test_exclude_self(thumbs):
    ref = np.concatenate([thumbs[:5], thumbs[:1]])  # row 5 copies row 0
    res = ncc_search(ref, ref, exclude_self=True)
    assert res.best_index[0] == 5 and res.best_index[5] == 0
    assert res.flagged.tolist() == [True, False, False, False, False, True]
    assert set(zip(res.pairs["query"], res.pairs["reference"])) == {(0, 5), (5, 0)}


def test_sweep_and_rules():
    rho = np.array([0.85, 0.97, 0.985, 0.9995, np.nan], np.float32)
    sweep = ncc_sweep(rho)
    assert sweep["affected"].tolist() == [3, 3, 2, 1, 1, 1]
    assert (sweep["assessed"] == 4).all() and (sweep["flat_or_unmatched"] == 1).all()
    assert nearest_rule(rho, 0.98).tolist() == [False, False, True, True, False]


def test_counterpart_rules_differ():
    # one query; screened candidates (exact pHash): ref 7 at path "b.png" (rho 0.99) and
    # ref 3 at path "a.png" (rho 0.95); the nearest reference overall is ref 9 (0.995)
    candidates = pd.DataFrame({"query": [0, 0], "reference": [7, 3]})
    rho = np.array([0.99, 0.95], np.float32)
    paths = {7: "b.png", 3: "a.png"}
    pos = pd.DataFrame({"query": [0, 0], "reference": [0, 1]})
    first = first_candidate(pos, [paths[7], paths[3]], rho, tau=0.98)
    assert first["reference"].tolist() == [1]  # a.png (position 1), lexicographically first
    assert not first["flagged"][0]  # its rho 0.95 < 0.98
    anyc = any_candidate(candidates, rho, tau=0.98)
    assert anyc["reference"].tolist() == [7] and anyc["flagged"][0]
    assert nearest_rule(np.array([0.995]), 0.98)[0]
    with pytest.raises(InputError, match="one rho per candidate"):
        any_candidate(candidates, rho[:1])


def test_input_validation(thumbs):
    with pytest.raises(InputError, match="one geometry"):
        ncc_search(thumbs[:2], np.zeros((2, 8, 8), np.uint8))
    with pytest.raises(InputError, match="uint8"):
        ncc_search(thumbs[:2].astype(float), thumbs)
    with pytest.raises(InputError, match="tau"):
        ncc_search(thumbs, thumbs, tau=0)
    empty = ncc_search(thumbs[:2], np.zeros((0, 12, 12), np.uint8))
    assert (empty.best_index == -1).all() and np.isnan(empty.best_rho).all()


def test_ssim_equals_scikit_image():
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (4, 32, 32), dtype=np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-40, 40, a.shape), 0, 255).astype(np.uint8)
    b[3] = 9  # a flat image
    got = ssim_pairs(a, b)
    want = [structural_similarity(a[i], b[i], data_range=255) for i in range(4)]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ssim_for_pairs(a, b, [2, 0], [2, 0]), [want[2], want[0]],
                               atol=1e-12)
    with pytest.raises(InputError):
        ssim_pairs(a[:, :5, :5], b[:, :5, :5])


def test_pair_storage_is_bounded_and_counted(thumbs):
    same = np.repeat(thumbs[:1], 30, axis=0)
    res = ncc_search(same, same, max_pairs=50, block=7)
    assert res.params["pairs_total"] == 900 and res.params["pairs_truncated"]
    assert len(res.pairs) == 50 and (res.best_index == 0).all()
