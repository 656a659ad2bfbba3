"""Would an index pay for the Hamming rules? Multi-index hashing and a BK-tree against the
exhaustive search (``splitscope.relations.hashes``), on real pHash/dHash values.

The layer needs, for every query row, the exact minimum of d_p, d_d, max(d_p, d_d) and
d_p + d_d over all references and the lowest reference reaching it (``d_p_min`` … in the query
flags, however large), not only the pairs within the radius k. An index must therefore find
each query's nearest reference exactly, at whatever distance it lies. Measured here for the
simplest of the four, min d_p (a pHash nearest neighbour), on the test rows against the
training rows of a scanned release:

- the exhaustive search (``hamming_search``: XOR and popcount over cache-sized blocks, all
  pairs), its seconds with ``--workers`` threads;
- **multi-index hashing** (Norouzi, Punjani & Fleet, CVPR 2012): the 64 bits cut into m
  substrings, one sorted table per substring; a reference within distance d of a query agrees
  with it to within ⌊d/m⌋ bits on some substring, so probing every substring at radius
  s = 0, 1, … finds every reference within m·(s+1) − 1, and a query is settled once its best
  distance is at most that. A vectorised numpy implementation (probes of all active queries at
  once, ``searchsorted`` on the sorted tables), exact (checked equal to the exhaustive
  search, lowest position on ties), timed; with its probes and candidates per query;
- a **BK-tree** (Burkhard & Keller 1973): the references in a metric tree keyed by distance to
  the parent; exact nearest-neighbour search visits a child only if
  ``|d(q, node) − edge| ≤ best``. Only its work is counted (nodes visited per query, on a seeded
  sample of queries): each visit is one distance plus a pointer chase, far costlier than one
  pair of the exhaustive search's vectorised pass.

Also recorded: the distribution of the nearest distance and how full the substring buckets
are (skewed hashes — radiographs sharing one layout — make a few buckets hold most rows).

Usage::

    nice python benchmarks/bench_hamming_index.py --workspace WS_OF_RELEASE --json h.json
    nice python benchmarks/bench_hamming_index.py --root ../shared/data/kermany-chest-xray-224 \\
        --workspace /tmp/kermany-ws
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_output import emit


def load_hashes(root: str, workspace: str, workers: int) -> tuple[np.ndarray, np.ndarray]:
    """pHash of the test rows and of the training rows of a release (scanned once into
    ``workspace``)."""
    from splitscope.features.scanning import scan
    from splitscope.relations.hashes import pack_hashes

    rows = scan(root, workspace, workers=workers, progress=False).rows()
    ok = rows["phash"].notna()
    q = pack_hashes(rows.loc[ok & (rows["split"] == "test"), "phash"])
    r = pack_hashes(rows.loc[ok & (rows["split"] == "train"), "phash"])
    return q, r


def masks(bits: int, s: int) -> np.ndarray:
    """Every ``bits``-bit mask with ``s`` bits set."""
    out = [sum(1 << b for b in c) for c in combinations(range(bits), s)]
    return np.asarray(out, np.uint64)


def mih_nearest(q: np.ndarray, r: np.ndarray, m: int, budget: int = 1 << 23
                ) -> tuple[np.ndarray, np.ndarray, dict]:
    """Exact nearest reference by Hamming distance (lowest position on ties) by multi-index
    hashing with ``m`` substrings; also the work done (probes and candidates per query).
    At most ``budget`` probes or candidates are held at a time."""
    bits = 64 // m
    low = np.uint64((1 << bits) - 1)
    tables = []
    for t in range(m):
        sub = (r >> np.uint64(t * bits)) & low
        order = np.argsort(sub, kind="stable")
        tables.append((sub[order], order, (q >> np.uint64(t * bits)) & low))
    nq = q.size
    best = np.full(nq, 65 << 32, np.int64)  # distance << 32 | reference: min = the rule
    active = np.arange(nq)
    probes = candidates = 0
    s = 0
    for s in range(bits + 1):
        mk = masks(bits, s)
        step = max(1, budget // mk.size)
        for sorted_sub, order, q_sub in tables:
            for c0 in range(0, active.size, step):
                act = active[c0:c0 + step]
                keys = q_sub[act, None] ^ mk[None, :]
                lo = np.searchsorted(sorted_sub, keys, "left").ravel()
                n = np.searchsorted(sorted_sub, keys, "right").ravel() - lo
                owners = np.repeat(act, mk.size)
                probes += keys.size
                candidates += int(n.sum())
                ends = np.cumsum(n)
                cut = np.searchsorted(ends, np.arange(budget, int(ends[-1]), budget))
                for a, b in zip(np.r_[0, cut], np.r_[cut, n.size]):
                    nn = n[a:b]
                    total = int(nn.sum())
                    if total == 0:
                        continue
                    owner = np.repeat(owners[a:b], nn)
                    step_in = np.arange(total) - np.repeat(np.cumsum(nn) - nn, nn)
                    ref = order[np.repeat(lo[a:b], nn) + step_in]
                    d = np.bitwise_count(q[owner] ^ r[ref]).astype(np.int64)
                    np.minimum.at(best, owner, (d << 32) | ref)
        settled = (best[active] >> 32) <= m * (s + 1) - 1
        active = active[~settled]
        if active.size == 0:
            break
    return best >> 32, best & 0xFFFFFFFF, {
        "probes_per_query": probes / max(1, nq),
        "candidates_per_query": candidates / max(1, nq),
        "candidate_share_of_references": candidates / max(1, nq * r.size),
        "substring_radius_reached": s}


def bucket_skew(r: np.ndarray, m: int) -> dict:
    """How the references fill the substring tables: the largest bucket's share of them and
    the mean bucket a random reference sits in (large where hashes are skewed)."""
    bits = 64 // m
    low = np.uint64((1 << bits) - 1)
    largest, mean_own = [], []
    for t in range(m):
        _, counts = np.unique((r >> np.uint64(t * bits)) & low, return_counts=True)
        largest.append(counts.max() / r.size)
        mean_own.append(float((counts ** 2).sum() / r.size))
    return {"largest_bucket_share": round(float(max(largest)), 4),
            "mean_own_bucket": round(float(np.mean(mean_own)), 1),
            "uniform_bucket": round(r.size / 2 ** bits, 2)}


def bk_tree_visits(q: np.ndarray, r: np.ndarray, sample: int, seed: int) -> dict:
    """Nodes an exact BK-tree nearest-neighbour search visits per query (seeded sample of
    queries), as a share of the references."""
    rv = [int(x) for x in r]
    children: list[dict[int, int]] = [{}]
    for i in range(1, len(rv)):  # insert reference i under the root
        node = 0
        while True:
            d = (rv[i] ^ rv[node]).bit_count()
            nxt = children[node].get(d)
            if nxt is None:
                children[node][d] = i
                children.append({})
                break
            node = nxt
    rng = np.random.default_rng(seed)
    visits = []
    for qi in rng.choice(q.size, size=min(sample, q.size), replace=False):
        x, best, seen, stack = int(q[qi]), 65, 0, [0]
        while stack:
            node = stack.pop()
            seen += 1
            d = (x ^ rv[node]).bit_count()
            best = min(best, d)
            stack.extend(c for e, c in children[node].items() if abs(d - e) <= best)
        visits.append(seen)
    v = np.asarray(visits)
    return {"queries": int(v.size), "median_visits": float(np.median(v)),
            "median_share_of_references": round(float(np.median(v) / r.size), 3)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="the release (folder or list)")
    ap.add_argument("--workspace", required=True, help="its scan workspace (made if absent)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--substrings", default="4,8", help="m values of multi-index hashing")
    ap.add_argument("--bk-sample", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from splitscope.relations.hashes import hamming_search

    q, r = load_hashes(args.root, args.workspace, args.workers)
    exhaustive = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        res = hamming_search(q, r, workers=args.workers)
        exhaustive.append(time.perf_counter() - t)
    d = res.distance.astype(np.int64)
    report = {"host": platform.node(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
              "root": args.root, "queries": int(q.size), "references": int(r.size),
              "nearest_distance": {"median": float(np.median(d)),
                                   "p10": float(np.percentile(d, 10)),
                                   "p90": float(np.percentile(d, 90))},
              "exhaustive_s": {"median": round(float(np.median(exhaustive)), 3),
                               "workers": args.workers}, "mih": {}}
    for m in (int(x) for x in args.substrings.split(",")):
        times = []
        for _ in range(args.repeats if m == 4 else 1):  # the others: one run
            t = time.perf_counter()
            best, arg, work = mih_nearest(q, r, m)
            times.append(time.perf_counter() - t)
        exact = bool(np.array_equal(best, d) and np.array_equal(arg, res.index))
        report["mih"][str(m)] = {"seconds_median": round(float(np.median(times)), 3),
                                 "one_thread": True, "exact": exact,
                                 "ratio_to_exhaustive": round(float(np.median(times))
                                                              / report["exhaustive_s"]["median"],
                                                              1),
                                 **{k: round(v, 4) if isinstance(v, float) else v
                                    for k, v in work.items()}, **bucket_skew(r, m)}
    report["bk_tree"] = bk_tree_visits(q, r, args.bk_sample, seed=0)
    emit(report, args.json)
    return report


if __name__ == "__main__":
    main()
