"""Percentile-bootstrap AUC of the provenance probes at release scale: seconds of one
``bootstrap_auc`` (2,000 resamples by default, scores pooled within 5 folds, as the partition
classifier's) on synthetic scores of ``--rows`` rows, on one thread, and the interval it gives.

The baseline is the code before, given on ``PYTHONPATH`` in a second run of this script (for
example under ``farm-bench``, A B A B): both print the same interval bit for bit, or the change
moved a result.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_bootstrap.py --rows 100000,1000000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_output import emit


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="100000,1000000")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--test-share", type=float, default=0.2)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)

    import splitscope
    from splitscope.provenance.stats import bootstrap_auc

    out = {"code": str(Path(splitscope.__file__).resolve().parent), "runs": []}
    for n in (int(x) for x in a.rows.split(",")):
        rng = np.random.default_rng(1)
        y = rng.random(n) < a.test_share
        score = rng.random(n) + 0.1 * y
        fold = rng.integers(0, a.folds, n)
        start, cpu = time.perf_counter(), time.process_time()
        r = bootstrap_auc(y, score, n_resamples=a.resamples, seed=0, strata=fold)
        out["runs"].append({
            "rows": n, "resamples": a.resamples, "folds": a.folds,
            "seconds": round(time.perf_counter() - start, 2),
            "cpu_seconds": round(time.process_time() - cpu, 2),
            "estimate": r["estimate"], "low": r["low"], "high": r["high"]})
    emit(out, a.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
