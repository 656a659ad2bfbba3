"""The provenance layer with and without its fit row cap (METHODS §4.7), on a scanned release.

What runs: ``audit_provenance`` on one scan (from a workspace that already holds it, e.g. the
one ``bench_release_scale.py --keep-output`` leaves), alternately with the default cap
(``FIT_MAX_ROWS``, or ``--cap``) and uncapped (``fit_max_rows=None``), ``--repeats`` times each, in this
process. Reported: wall and CPU seconds of each (medians; CPU of this process and its worker
processes, from ``os.times`` and psutil), and per record the two estimates and whether the
capped estimate lies inside the uncapped 95% interval.

Usage::

    python benchmarks/bench_provenance_cap.py /data/scale/release-n28000-seed0 \\
        --workspace /data/scale/audit-n28000/workspace --group-regex 'p(?P<group>\\d+)_'
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_output import emit


def _cpu(seen: dict[int, float]) -> float:
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            c = child.cpu_times()
            seen[child.pid] = c.user + c.system
        except psutil.Error:
            continue
    t = os.times()
    return t.user + t.system + sum(seen.values())


def run(sc, cap) -> tuple[dict, float, float]:
    import threading

    from splitscope.provenance.checks import audit_provenance

    seen: dict[int, float] = {}
    stop = threading.Event()

    def sample():
        while not stop.wait(0.2):
            _cpu(seen)

    threading.Thread(target=sample, daemon=True).start()
    c0, t0 = _cpu(seen), time.perf_counter()
    kwargs = {"fit_max_rows": cap}
    res = audit_provenance(sc, **kwargs)
    wall = time.perf_counter() - t0
    stop.set()
    cpu = _cpu(seen) - c0
    recs = {r.id: {"estimate": r.estimate,
                   "low": r.uncertainty.low if r.uncertainty else None,
                   "high": r.uncertainty.high if r.uncertainty else None,
                   "fit_rows": ((r.predicate or {}).get("params") or {}).get("fit_rows")}
            for r in res.records if r.estimate is not None}
    return recs, wall, cpu


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--workspace", type=Path, required=True)
    ap.add_argument("--group-regex", default=None)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--cap", type=int, default=None,
                    help="the cap to compare (default FIT_MAX_ROWS)")
    ap.add_argument("--reuse-uncapped", type=Path, default=None,
                    help="a JSON of an earlier run on the same scan: its uncapped records "
                         "(seeded, so the same) instead of fitting them again")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from splitscope.features.scanning import scan
    from splitscope.provenance.header_probe import FIT_MAX_ROWS

    sc = scan(args.root, args.workspace, group_regex=args.group_regex, progress=False)
    if sc.meta.get("extracted"):
        print(f"note: the scan extracted {sc.meta['extracted']} file(s) (not all cached)")
    cap = FIT_MAX_ROWS if args.cap is None else args.cap
    times = {"default": [], "uncapped": []}
    recs = {}
    arms = [("default", cap), ("uncapped", None)]
    if args.reuse_uncapped is not None:
        old = json.loads(args.reuse_uncapped.read_text())
        recs["uncapped"] = {r["record"]: {"estimate": r["uncapped"], "low": r["uncapped_low"],
                                          "high": r["uncapped_high"],
                                          "fit_rows": r["fit_rows_uncapped"]}
                            for r in old["records"]}
        times["uncapped"] = [(old["wall_s"]["uncapped"], old["cpu_s"]["uncapped"])]
        arms = arms[:1]
    for _ in range(args.repeats):
        for name, c in arms:
            recs[name], wall, cpu = run(sc, c)
            times[name].append((wall, cpu))
    rows = []
    for rid, u in recs["uncapped"].items():
        c = recs["default"].get(rid)
        if c is None:
            continue
        inside = (u["low"] is not None and u["high"] is not None
                  and u["low"] <= c["estimate"] <= u["high"])
        rows.append({"record": rid, "capped": c["estimate"], "uncapped": u["estimate"],
                     "uncapped_low": u["low"], "uncapped_high": u["high"], "inside": inside,
                     "fit_rows_capped": c["fit_rows"], "fit_rows_uncapped": u["fit_rows"]})
    report = {"rows": len(sc.manifest), "cap": cap, "load": os.getloadavg(),
              "wall_s": {k: statistics.median(w for w, _ in v) for k, v in times.items()},
              "cpu_s": {k: statistics.median(c for _, c in v) for k, v in times.items()},
              "records": rows, "all_inside": all(r["inside"] for r in rows)}
    emit(report, args.json, default=str)
    return report


if __name__ == "__main__":
    main()
