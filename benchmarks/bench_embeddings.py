"""Recall and speed of the FAISS IVF embedding search against the exact blocked search.

Generates ``--n`` embeddings of dimension ``--dim`` (seeded, in chunks): non-negative vectors
(as after a ReLU and average pooling) around ``--clusters`` class centres with a shared
low-rank variation, so that unrelated rows of one class have cosines around 0.6–0.85 as real
image embeddings do, and ``--planted`` near-copies of earlier rows (some in groups of up to
four copies) whose cosine to their original spreads over 0.90–0.999, across τ. Then, within
the whole set (a row never its own counterpart), at ``--tau``:

- the exact search (:func:`~splitscope.relations.ncc.embedding_search`, the baseline);
- the IVF search (:func:`~splitscope.relations.ann.ivf_embedding_search`) at each
  ``--nprobe``, its index build (k-means training and adding) included in its time;

interleaved, ``--repeat`` times, medians. Recall = pairs ≥ τ the IVF search reports that the
exact search reports / pairs ≥ τ of the exact search (the IVF search reports no other pair: it
re-checks every candidate, and this is checked); also the share of flagged queries whose best
reference agrees, the largest cosine difference on common pairs, and the planted copies found.

Run::

    python benchmarks/bench_embeddings.py                         # 100k × 256, τ = 0.95
    python benchmarks/bench_embeddings.py --n 20000 --repeat 1    # a quick look
    python benchmarks/bench_embeddings.py --json bench-embeddings.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

from splitscope.relations.ann import default_nlist, ivf_embedding_search
from splitscope.relations.ncc import embedding_search


def embeddings(n: int, dim: int, clusters: int, planted: int, seed: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """(n, dim) float32 embeddings and the (copy row, original row) pairs planted."""
    rng = np.random.default_rng(seed)
    centres = np.abs(rng.normal(size=(clusters, dim))) * rng.uniform(0.5, 1.5, (clusters, 1))
    loading = rng.normal(size=(32, dim)) / np.sqrt(32)
    out = np.empty((n, dim), np.float32)
    labels = rng.integers(0, clusters, n)
    for s in range(0, n, 8192):  # bounded temporary memory
        m = min(8192, n - s)
        v = centres[labels[s:s + m]] + 0.9 * rng.normal(size=(m, 32)) @ loading \
            + 0.6 * rng.normal(size=(m, dim))
        out[s:s + m] = np.maximum(v, 0.0)
    copies = np.sort(rng.choice(np.arange(n // 2, n), planted, replace=False))
    originals = rng.integers(0, n // 2, planted)
    groups = rng.random(planted) < 0.2  # a fifth copy an earlier copy's original: groups
    originals[groups] = originals[np.maximum(np.flatnonzero(groups) - 1, 0)]
    for c, o in zip(copies, originals):
        x = out[o].astype(np.float64)
        cos = rng.uniform(0.90, 0.999)
        noise = rng.normal(size=dim)
        noise -= noise @ x / (x @ x) * x  # orthogonal to the original
        noise *= np.linalg.norm(x) * np.sqrt(1 / cos**2 - 1) / np.linalg.norm(noise)
        out[c] = np.abs(x + noise)  # non-negative like the rest (cosine moves a little)
    return out, np.column_stack([copies, originals])


def _pairs(res) -> set[tuple[int, int]]:
    return set(zip(res.pairs["query"].tolist(), res.pairs["reference"].tolist()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--clusters", type=int, default=64)
    ap.add_argument("--planted", type=int, default=2000)
    ap.add_argument("--tau", type=float, default=0.95)
    ap.add_argument("--nprobe", default="4,8,16,32")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    t = time.perf_counter()
    x, planted = embeddings(args.n, args.dim, args.clusters, args.planted, args.seed)
    print(f"{args.n} × {args.dim} embeddings, {args.planted} planted copies "
          f"({time.perf_counter() - t:.1f} s to generate); nlist {default_nlist(args.n)}; "
          f"load {os.getloadavg()}")
    probes = [int(p) for p in args.nprobe.split(",")]
    times: dict[str, list[float]] = {"exact": [], **{f"ivf{p}": [] for p in probes}}
    results = {}
    for rep in range(args.repeat):
        arms = list(times)
        if rep % 2:
            arms.reverse()
        for arm in arms:
            t = time.perf_counter()
            if arm == "exact":
                res = embedding_search(x, x, tau=args.tau, exclude_self=True)
            else:
                res = ivf_embedding_search(x, x, tau=args.tau, exclude_self=True,
                                           nprobe=int(arm[3:]), seed=args.seed)
            times[arm].append(time.perf_counter() - t)
            print(f"  repeat {rep + 1} {arm}: {times[arm][-1]:.1f} s", flush=True)
            results[arm] = res
    exact = results["exact"]
    truth = _pairs(exact)
    flagged = exact.flagged
    cosine = dict(zip(zip(exact.pairs["query"], exact.pairs["reference"]),
                      exact.pairs["cosine"]))
    planted_set = {tuple(p) for p in planted.tolist()} | {(o, c) for c, o in planted.tolist()}
    planted_true = planted_set & truth
    base = statistics.median(times["exact"])
    rows = []
    for arm, arm_times in times.items():
        res = results[arm]
        got = _pairs(res)
        common = got & truth
        diff = max((abs(float(v) - float(cosine[(q, r)])) for q, r, v in zip(
            res.pairs["query"], res.pairs["reference"], res.pairs["cosine"])
            if (q, r) in cosine), default=0.0)
        rows.append({
            "arm": arm, "median_s": round(statistics.median(arm_times), 2),
            "times_s": [round(v, 2) for v in arm_times],
            "speedup_vs_exact": round(base / statistics.median(arm_times), 2),
            "pairs": len(got), "pairs_exact": len(truth), "pairs_not_exact": len(got - truth),
            "recall": len(common) / len(truth) if truth else 1.0,
            "flagged_queries": int(res.flagged.sum()),
            "flagged_queries_exact": int(flagged.sum()),
            "best_agrees": float(np.mean(res.best_index[flagged] == exact.best_index[flagged])),
            "max_abs_cosine_diff": diff,
            "planted_pairs_found": len(planted_true & got), "planted_pairs_true": len(planted_true),
            "params": {k: v for k, v in res.params.items() if k != "recheck"}})
    print(f"{'arm':8} {'median s':>9} {'×exact':>7} {'pairs':>7} {'recall':>8} {'best=':>7} "
          f"{'planted':>9} {'Δcos':>9}")
    for r in rows:
        print(f"{r['arm']:8} {r['median_s']:9.1f} {r['speedup_vs_exact']:7.2f} {r['pairs']:7d} "
              f"{r['recall']:8.5f} {r['best_agrees']:7.4f} "
              f"{r['planted_pairs_found']:4d}/{r['planted_pairs_true']:<4d} "
              f"{r['max_abs_cosine_diff']:9.2e}")
    print(f"load {os.getloadavg()}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "rows": rows, "machine": platform.platform(),
                       "cpus": os.cpu_count(), "load": os.getloadavg()}, fh, indent=1,
                      default=str)


if __name__ == "__main__":
    main()
