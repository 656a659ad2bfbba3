"""Bounded pair work: the pair table lists and measures at most a set number of pairs per query
row (every pair that decides a rule first), while the counts of pairs and of affected rows stay
exact; SSIM and ρ of the listed pairs are scikit-image's and the formula's; the search holds
blocks, not the population (peak memory flat in the reference count)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from benchmark_module import load_benchmark
from skimage.metrics import structural_similarity

from splitscope.boundary import boundary
from splitscope.relations.ncc import pair_rho
from splitscope.relations.near_duplicate import cap_pairs, near_duplicates
from splitscope.relations.options import SearchOptions


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_scale")


@pytest.fixture(scope="module")
def smooth(bench, tmp_path_factory):
    """600 rows sharing one smooth background (many unrelated pairs pass τ)."""
    return bench.synthetic_scan("smooth", 600, tmp_path_factory.mktemp("scale"), grain=3.0)


def test_cap_pairs_keeps_deciding_pairs_first_then_by_rho():
    pairs = pd.DataFrame({
        "query_row": [0] * 6 + [1, 1],
        "reference_row": [10, 11, 12, 13, 14, 15, 10, 11],
        "variant": "identity",
        "decides": [False, False, False, False, False, True, False, False],
        "search_rho": [0.99, np.nan, 0.995, 0.981, np.nan, np.nan, 0.99, 0.985],
        "d_sum": [3, 1, 9, 2, 0, 12, 4, 4],
    })
    listed, counts = cap_pairs(pairs, 3)
    assert listed[listed["query_row"] == 0]["reference_row"].tolist() == [10, 12, 15]
    assert listed[listed["query_row"] == 1]["reference_row"].tolist() == [10, 11]
    assert counts["pairs_total"] == 8 and counts["pairs_listed"] == 5
    assert counts["query_rows_capped"] == 1 and counts["max_pairs_per_query"] == 3
    one, _ = cap_pairs(pairs, 1)  # a deciding pair is never dropped
    assert one[one["query_row"] == 0]["reference_row"].tolist() == [15]
    with pytest.raises(Exception, match="at least 1"):
        cap_pairs(pairs, 0)


@pytest.mark.slow
def test_cap_changes_what_is_measured_never_the_counts(smooth):
    rows = smooth.rows()
    b = boundary(smooth.manifest, "test", "train")
    geometry = {"thumb_size": 96, "interpolation": "bicubic", "mode": "exact"}
    full = near_duplicates(rows, smooth.thumbs, b, SearchOptions(max_pairs_per_query=10 ** 6),
                           geometry=geometry)
    capped = near_duplicates(rows, smooth.thumbs, b, SearchOptions(max_pairs_per_query=2),
                             geometry=geometry)
    assert full.flags["ncc_nearest"].sum() >= 20  # the homogeneous case: many rows pass τ
    pd.testing.assert_frame_equal(full.flags, capped.flags)  # affected rows and counterparts
    pd.testing.assert_frame_equal(full.sweep, capped.sweep)
    fc, cc = full.notes["pairs"], capped.notes["pairs"]
    assert fc["pairs_total"] == cc["pairs_total"] == fc["pairs_listed"] > cc["pairs_listed"]
    assert cc["query_rows_capped"] > 0 and capped.params["max_pairs_per_query"] == 2
    per_query = capped.pairs.groupby("query_row").size()
    deciding = capped.flags.set_index("row")["ncc_nearest_counterpart"]
    assert (per_query <= 2 + 5).all()  # cap plus the pairs deciding a rule (≤ one per rule)
    # every flagged row's nearest counterpart is listed
    hit = capped.flags["ncc_nearest"].fillna(False).to_numpy(bool)
    listed = set(zip(capped.pairs["query_row"], capped.pairs["reference_row"]))
    for q in capped.flags.loc[hit, "row"]:
        assert (q, deciding[q]) in listed
    # the listed pairs carry the same measurements in both tables
    merged = capped.pairs.merge(full.pairs, on=["query_row", "reference_row", "variant"])
    assert len(merged) == len(capped.pairs)
    np.testing.assert_array_equal(merged["rho_x"], merged["rho_y"])
    np.testing.assert_array_equal(merged["ssim_x"], merged["ssim_y"])


def test_listed_pairs_measure_ssim_and_rho_like_the_references(smooth):
    rows = smooth.rows()
    b = boundary(smooth.manifest, "test", "train")
    nd = near_duplicates(rows, smooth.thumbs, b, geometry={"thumb_size": 96})
    sample = nd.pairs.iloc[:: max(1, len(nd.pairs) // 12)]
    qa = smooth.thumbs(sample["query_row"].to_numpy())
    ra = smooth.thumbs(sample["reference_row"].to_numpy())
    want = [structural_similarity(x, y, data_range=255) for x, y in zip(qa, ra)]
    np.testing.assert_allclose(sample["ssim"], want, rtol=0, atol=1e-12)
    idx = np.arange(len(sample))
    np.testing.assert_array_equal(sample["rho"].to_numpy(), pair_rho(qa, ra, idx, idx))


_MEMORY = r"""
import json, sys, threading, numpy as np
from splitscope.relations.ncc import ThumbnailRows, ncc_search
from splitscope.relations.options import SearchOptions
n_q, n_r, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
store = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(n_q + n_r, 96, 96))
for s in range(0, n_q + n_r, 1000):
    m = min(1000, n_q + n_r - s)
    low = rng.integers(0, 200, (m, 8, 8)).astype(np.int16)
    store[s:s + m] = (np.repeat(np.repeat(low, 12, 1), 12, 2) + rng.integers(0, 56, (m, 96, 96))).astype(np.uint8)
store.flush(); del store
store = np.load(path, mmap_mode="r")
def anon():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith("RssAnon:"))
peak, stop = [0], threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], anon()); stop.wait(0.005)
read = lambda ids: np.asarray(store[np.asarray(ids)])
before = anon()
threading.Thread(target=sample, daemon=True).start()
res = ncc_search(ThumbnailRows(read, np.arange(n_q), 96),
                 ThumbnailRows(read, np.arange(n_q, n_q + n_r), 96), method=sys.argv[4],
                 block=1024, query_chunk=1024)
stop.set()
print(json.dumps({"extra_kib": max(peak[0], anon()) - before, "pairs": len(res.pairs)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["brute", "indexed"])
def test_search_memory_is_flat_in_the_reference_count(tmp_path, method):
    """Peak anonymous memory of the search (above what the process held before it) at R and
    4R references: it grows far less than holding the extra references would cost."""
    out = {}
    for n_r in (3000, 12000):
        proc = subprocess.run([sys.executable, "-c", _MEMORY, "600", str(n_r),
                               str(tmp_path / f"t{n_r}.npy"), method],
                              capture_output=True, text=True, check=True)
        out[n_r] = json.loads(proc.stdout.strip().splitlines()[-1])["extra_kib"] / 1024
    extra_refs_uint8 = 9000 * 96 * 96 / 2 ** 20  # 79 MiB; as float32 vectors 316 MiB
    assert out[12000] - out[3000] < 0.25 * extra_refs_uint8, out
