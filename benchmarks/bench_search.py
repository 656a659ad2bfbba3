"""Speed and memory of the exact searches of the near-duplicate layer.

NCC: ``ncc_search`` on Q × R thumbnails (default 5,000 × 20,000 at 96²), top-1 plus every pair
with ρ ≥ τ, against the machine's float32 GEMM throughput measured in the same run with plain
``numpy.matmul`` over the same shapes (the query matrix times each reference block). The
effective rate of the search is ``2·Q·R·S² / time`` FLOP/s; the report gives it as a fraction
of the GEMM rate. Peak memory (``tracemalloc``, numpy allocations included) is measured with
R and 2·R references: it is bounded by the query chunk and the block, not by R.

Hamming: ``hamming_search`` (one 64-bit hash) and ``hash_search`` (pHash and dHash, all four
rules) over packed ``uint64`` hashes, in query × reference pairs per second.

Run::

    python benchmarks/bench_search.py                      # the full configuration
    python benchmarks/bench_search.py --queries 500 --references 2000   # a quick look
    OMP_NUM_THREADS=2 python benchmarks/bench_search.py --workers 2 --json bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from splitscope.relations.hashes import hamming_search, hash_search
from splitscope.relations.ncc import centred_unit_vectors, ncc_search


def thumbnails(n: int, size: int, seed: int, path: Path | None = None) -> np.ndarray:
    """Random-ish smooth thumbnails (low-frequency pattern plus noise), optionally as a memmap
    file like the scan's thumbnail store."""
    rng = np.random.default_rng(seed)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(n, size, size)) \
        if path is not None else np.empty((n, size, size), np.uint8)
    cell = max(1, size // 8)
    for s in range(0, n, 2048):
        m = min(2048, n - s)
        low = rng.integers(0, 200, (m, 8, 8)).astype(np.int16)
        img = np.repeat(np.repeat(low, cell, axis=1), cell, axis=2)[:, :size, :size]
        img = img + rng.integers(0, 56, (m, size, size), dtype=np.int16)
        out[s:s + m] = img.astype(np.uint8)
    return out


def gemm_rate(q: np.ndarray, r: np.ndarray, block: int) -> float:
    """FLOP/s of plain numpy matmul over the same shapes the search uses (the normalised
    query matrix times each normalised reference block, blocks prepared beforehand)."""
    qv, _ = centred_unit_vectors(q)
    d = qv.shape[1]
    seconds = 0.0
    for b in range(0, r.shape[0], block):
        rv = centred_unit_vectors(r[b:b + block])[0]
        start = time.perf_counter()
        np.matmul(qv, rv.T)
        seconds += time.perf_counter() - start
    return 2.0 * q.shape[0] * r.shape[0] * d / seconds


def ncc_rate(q: np.ndarray, r: np.ndarray, block: int, tau: float) -> tuple[float, float, int]:
    d = q.shape[1] * q.shape[2]
    start = time.perf_counter()
    res = ncc_search(q, r, tau=tau, block=block)
    seconds = time.perf_counter() - start
    return 2.0 * q.shape[0] * r.shape[0] * d / seconds, seconds, len(res.pairs)


def peak_memory(q: np.ndarray, r: np.ndarray, block: int, tau: float) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    ncc_search(q, r, tau=tau, block=block)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def hamming_rates(nq: int, nr: int, workers: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    qp, qd = rng.integers(0, 2**63, (2, nq), dtype=np.uint64)
    rp, rd = rng.integers(0, 2**63, (2, nr), dtype=np.uint64)
    hamming_search(qp[:64], rp[:4096], workers=workers)  # warm-up
    start, cpu = time.perf_counter(), time.process_time()
    hamming_search(qp, rp, workers=workers)
    single = nq * nr / (time.perf_counter() - start)
    single_cpu = nq * nr / (time.process_time() - cpu)
    start, cpu = time.perf_counter(), time.process_time()
    hash_search(qp, qd, rp, rd, radius=6, workers=workers)
    rules = nq * nr / (time.perf_counter() - start)
    rules_cpu = nq * nr / (time.process_time() - cpu)
    return {"queries": nq, "references": nr, "workers": workers,
            "one_hash_pairs_per_s": single, "four_rules_two_hashes_pairs_per_s": rules,
            # work per CPU-second of this process: what each core does when it is not shared
            "one_hash_pairs_per_cpu_s": single_cpu,
            "four_rules_two_hashes_pairs_per_cpu_s": rules_cpu}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=5000)
    ap.add_argument("--references", type=int, default=20000)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--block", type=int, default=2048)
    ap.add_argument("--tau", type=float, default=0.98)
    ap.add_argument("--repeat", type=int, default=2, help="interleaved GEMM/NCC repeats (best)")
    ap.add_argument("--hamming-queries", type=int, default=20000)
    ap.add_argument("--hamming-references", type=int, default=200000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    report: dict = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                                "numpy": np.__version__,
                                "omp_threads": os.environ.get("OMP_NUM_THREADS")}}
    with tempfile.TemporaryDirectory() as tmp:
        q = thumbnails(args.queries, args.size, 1)
        r = thumbnails(args.references, args.size, 2, Path(tmp) / "r.npy")
        q[:10] = r[:10]  # a few planted pairs so the pair collection does real work
        gemm, ncc, secs, pairs = [], [], [], 0
        for _ in range(args.repeat):  # interleaved, so both see the same machine load
            gemm.append(gemm_rate(q, r, args.block))
            rate, s, pairs = ncc_rate(q, r, args.block, args.tau)
            ncc.append(rate)
            secs.append(s)
        report["ncc"] = {
            "queries": args.queries, "references": args.references, "size": args.size,
            "block": args.block, "tau": args.tau, "pairs_found": pairs,
            "gemm_flops": max(gemm), "ncc_effective_flops": max(ncc),
            "fraction_of_gemm": max(ncc) / max(gemm), "ncc_seconds": min(secs),
            "all_gemm_flops": gemm, "all_ncc_flops": ncc,
        }
        if not args.skip_memory:
            m1 = peak_memory(q, r, args.block, args.tau)
            del r
            r2 = thumbnails(2 * args.references, args.size, 3, Path(tmp) / "r2.npy")
            m2 = peak_memory(q, r2, args.block, args.tau)
            del r2
            report["memory"] = {"peak_bytes_R": m1, "peak_bytes_2R": m2,
                                "references": [args.references, 2 * args.references],
                                "ratio": m2 / m1,
                                "full_matrix_bytes": 4 * args.queries * args.references}
    report["hamming"] = hamming_rates(args.hamming_queries, args.hamming_references,
                                      args.workers, 4)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)
    return report


if __name__ == "__main__":
    main()
