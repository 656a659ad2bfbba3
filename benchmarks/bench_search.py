"""Speed and memory of the exact searches of the near-duplicate layer.

NCC: ``ncc_search`` on Q × R thumbnails (default 5,000 × 20,000 at 96²), top-1 plus every pair
with ρ ≥ τ, against the machine's float32 GEMM throughput measured in the same run with plain
``numpy.matmul`` over the same shapes (the query matrix times each reference block). The
effective rate of the search is ``2·Q·R·S² / time`` FLOP/s; the report gives it as a fraction
of the GEMM rate. Peak memory (``tracemalloc``, numpy allocations included) is measured with
R and 2·R references: it is bounded by the query chunk and the block, not by R.

Hamming: ``hamming_search`` (one 64-bit hash) and ``hash_search`` (pHash and dHash, all four
rules) over packed ``uint64`` hashes, in query × reference pairs per second.

Pruned vs brute force (``--real NAME=FOLDER,...``; default the Kermany set and the generated
mixed 7k release of ``bench_audit.py`` when present): each folder is scanned once into
``--cache``, then the test thumbnails are searched against the train thumbnails by both
methods, interleaved, ``--repeat`` times (medians): end to end (``ncc_search`` from uint8
thumbnails, normalisation included: the default, indexed search, which runs the pruned passes
below ``ncc_index.INDEX_MIN_PAIRS`` pairs) and the kernel alone (the brute force given precomputed
unit vectors; the pruned search given the thumbnails, since it normalises only the queries and
the references that survive its bound, and computes its cell coordinates from the integers),
in wall and CPU seconds (the steadier measure on a shared machine;
run with ``OMP_NUM_THREADS=1`` to compare the work of one core). The outputs must be identical
(best reference per query, every pair ≥ τ); the FLOP reduction is the pruned search's own count
against 2·Q·R·d. ``--ceiling`` also measures, per form of the bound, the costs no search of
that form avoids and the speed-up they cap (:func:`pruning_ceiling`).

Run::

    python benchmarks/bench_search.py                      # the full configuration
    python benchmarks/bench_search.py --queries 500 --references 2000   # a quick look
    python benchmarks/bench_search.py --only-real --repeat 3   # pruned vs brute force only
    python benchmarks/bench_search.py --only-real --ceiling    # and what caps the pruning
    OMP_NUM_THREADS=2 python benchmarks/bench_search.py --workers 2 --json bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from splitscope.relations.hashes import hamming_search, hash_search
from splitscope.relations.ncc import ncc_search
from splitscope.relations.ncc_core import centred_unit_vectors

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_output import emit


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


def real_thumbnails(folder: Path, cache: Path, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Test and train thumbnails of a release folder (scanned once into ``cache``)."""
    from splitscope.features.scanning import scan

    sc = scan(folder, cache / f"ws-{name}", progress=False)
    rows = sc.rows()
    ok = rows["thumb_index"] >= 0
    q = sc.thumbs(rows.loc[ok & (rows["split"] == "test"), "row"].to_numpy())
    r = sc.thumbs(rows.loc[ok & (rows["split"] == "train"), "row"].to_numpy())
    return q, r


def pruned_vs_brute(q: np.ndarray, r: np.ndarray, tau: float, repeat: int) -> dict:
    """Both methods interleaved, end to end and kernel only; identical outputs checked."""
    from splitscope.relations import pruned
    from splitscope.relations.ncc import _blocked_search, _flat

    qf, rf = _flat(q), _flat(r)
    qv, rv = centred_unit_vectors(q)[0], centred_unit_vectors(r)[0]
    kw = {"tau": tau, "block": 2048, "exclude": None, "query_chunk": 8192, "collect_pairs": True,
              "max_pairs": 5_000_000, "value": "rho"}
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    same = True
    stats = {}

    def timed(name, fn):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        times.setdefault(name, []).append(time.perf_counter() - t)
        cpu.setdefault(name, []).append(time.process_time() - c)
        return out

    for _ in range(repeat):  # interleaved, so both see the same machine load
        b = timed("brute", lambda: ncc_search(q, r, tau=tau, method="brute"))
        p = timed("indexed", lambda: ncc_search(q, r, tau=tau, method="indexed"))
        same &= bool(np.array_equal(b.best_index, p.best_index)
                     and b.pairs[["query", "reference"]].equals(p.pairs[["query", "reference"]]))
        bk = timed("brute_kernel", lambda: _blocked_search(
            lambda pos: qv[pos], lambda pos: rv[pos], qf, rf, **kw))
        pk = timed("pruned_kernel", lambda: pruned.pruned_search(
            lambda pos: q[pos], lambda pos: r[pos], qf, rf, **kw))
        same &= bool(np.array_equal(bk[0], pk[0]) and bk[2][["query", "reference"]].equals(
            pk[2][["query", "reference"]]))
        stats = pk[4]
    med = {k: float(np.median(v)) for k, v in times.items()}
    med_cpu = {k: float(np.median(v)) for k, v in cpu.items()}
    return {"queries": len(q), "references": len(r), "tau": tau,
            "identical_outputs": same, "pairs": len(p.pairs),
            "search_used_by_ncc_search": p.params.get("search"),
            "flop_reduction": stats["brute_flops"] / stats["flops"],
            "scored_pairs": stats.get("scored_pairs"), "cell_side": stats.get("cell_side"),
            "cells": stats.get("cells"),
            "estimated_surviving_share": stats.get("estimated_surviving_share"),
            "kernel_search": stats.get("search", "pruned"),
            "seconds_median": med, "seconds_all": times,
            "wall_ratio_end_to_end": med["brute"] / med["indexed"],
            "wall_ratio_kernel": med["brute_kernel"] / med["pruned_kernel"],
            "cpu_seconds_median": med_cpu,
            "cpu_ratio_end_to_end": med_cpu["brute"] / med_cpu["indexed"],
            "cpu_ratio_kernel": med_cpu["brute_kernel"] / med_cpu["pruned_kernel"]}


def pruning_ceiling(q: np.ndarray, r: np.ndarray, tau: float, repeat: int,
                    brute_seconds: float, seed: int = 0) -> dict:
    """What caps the pruned search on these thumbnails, whatever else is made faster.

    The pruned search computes, for every query × reference pair, the bound of one form
    (cell means or principal directions of cells) before it discards the pair. For each form
    it can choose, this measures the three costs no search of that form avoids (medians of
    ``repeat``, one BLAS thread): the coordinates of all Q + R thumbnails, the bound's product
    over all pairs, and scoring the pairs whose bound reaches what they must beat when that is
    each query's true best ρ (or τ), the fewest any such search must score (their references
    normalised, each pair's product as the search computes it). ``speedup_cap`` is
    ``brute_seconds`` (the brute-force kernel's median time of :func:`pruned_vs_brute`, same
    run) over the sum: no search that bounds every pair with that form
    and scores the survivors this way is faster by more. Also: how many references lie within δ of each query's best ρ (the slack
    the bound must resolve)."""
    from threadpoolctl import threadpool_limits

    from splitscope.relations import pruned

    qv, rv = centred_unit_vectors(q)[0], centred_unit_vectors(r)[0]
    size = q.shape[1]
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(len(r), size=min(len(r), pruned.SAMPLE), replace=False))
    with threadpool_limits(1):
        blocks = range(0, len(r), 2048)
        best = np.max([(qv @ rv[b:b + 2048].T).max(axis=1) for b in blocks], axis=0)
        deltas = (0.02, 0.05, 0.1, 0.2)
        close = np.zeros(len(deltas))
        for b in blocks:
            gap = best[:, None] - qv @ rv[b:b + 2048].T
            close += [(gap < d).sum() for d in deltas]
        within = {str(d): float(c / len(q)) for d, c in zip(deltas, close)}
        need = np.minimum(best, tau) - pruned.MARGIN
        forms = []
        for bound in pruned.bound_options(size, r[sample], len(r)):
            coord_s, prod_s, score_s = [], [], []
            for _ in range(repeat):
                t = time.perf_counter()
                qp, qe = bound.coordinates(q)
                rp, re = bound.coordinates(r)
                coord_s.append(time.perf_counter() - t)
                qa = np.concatenate([qp, qe[:, None].astype(np.float32)], axis=1)
                ra = np.concatenate([rp, re[:, None].astype(np.float32)], axis=1)
                t = time.perf_counter()
                hits = [np.nonzero(qa @ ra[b:b + 2048].T >= need[:, None]) for b in blocks]
                prod_s.append(time.perf_counter() - t)
                qi = np.concatenate([h[0] for h in hits])
                rj = np.concatenate([h[1] + b for h, b in zip(hits, blocks)])
                t = time.perf_counter()
                used, inv = np.unique(rj, return_inverse=True)
                pruned._pair_dots(qv, qi, centred_unit_vectors(r[used])[0], inv)
                score_s.append(time.perf_counter() - t)
            survive = qi.size
            floor = float(np.median(coord_s) + np.median(prod_s) + np.median(score_s))
            forms.append({**bound.describe(), "coordinates": bound.dims(size),
                          "mean_residual": float(qe.mean()),
                          "surviving_share_at_true_best": survive / (len(q) * len(r)),
                          "coordinate_seconds": float(np.median(coord_s)),
                          "bound_product_seconds": float(np.median(prod_s)),
                          "scoring_seconds": float(np.median(score_s)),
                          "speedup_cap": brute_seconds / floor})
    return {"queries": len(q), "references": len(r), "tau": tau,
            "brute_kernel_seconds": brute_seconds,
            "references_within_delta_of_best": within, "forms": forms,
            "best_speedup_cap": max(f["speedup_cap"] for f in forms)}


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
    ap.add_argument("--real", default=None,
                    help="NAME=FOLDER,... releases for pruned vs brute force (see above)")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "XDG_CACHE_HOME", Path.home() / ".cache")) / "splitscope-bench")
    ap.add_argument("--only-real", action="store_true", help="only pruned vs brute force")
    ap.add_argument("--ceiling", action="store_true",
                    help="also measure what caps the pruned search on each real set")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    report: dict = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                                "numpy": np.__version__,
                                "omp_threads": os.environ.get("OMP_NUM_THREADS")}}
    if args.real is None:
        here = Path(__file__).resolve().parents[1]
        candidates = {"kermany": here.parent / "shared" / "data" / "kermany-chest-xray-224",
                      "mixed7k": args.cache / "mixed-n7000-seed0"}
        real = {k: v for k, v in candidates.items() if v.exists()}
    else:
        real = {k: Path(v) for k, v in (x.split("=", 1) for x in args.real.split(",") if x)}
    report["pruned_vs_brute"] = {}
    for name, folder in real.items():
        q, r = real_thumbnails(folder, args.cache, name)
        report["pruned_vs_brute"][name] = pruned_vs_brute(q, r, args.tau, args.repeat)
        print(json.dumps({name: report["pruned_vs_brute"][name]}), flush=True)
        if args.ceiling:
            report.setdefault("pruning_ceiling", {})[name] = pruning_ceiling(
                q, r, args.tau, args.repeat,
                report["pruned_vs_brute"][name]["seconds_median"]["brute_kernel"])
            print(json.dumps({name: report["pruning_ceiling"][name]}), flush=True)
    if args.only_real:
        emit(report, args.json)
        return report
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
    emit(report, args.json)
    return report


if __name__ == "__main__":
    main()
