"""End-to-end speed of re-scoring the Capsule Vision 2024 submissions, by workbook parser.

One run is what ``splitscope rescore`` does for the challenge: read the validation truth, the
27 validation workbooks and the 27 test workbooks (the final ranking, basename alignment),
check scoreability, score the official and the non-KVASIR views, rank, correlate and
aggregate. It is timed with the workbooks parsed by

- ``openpyxl`` (the baseline: the parser used before),
- ``calamine`` (python-calamine through pandas ``engine="calamine"``, the default now),
- ``cached``: calamine with the parsed-workbook cache already filled (a second run in the
  same workspace).

The three are run alternately, ``--repeats`` times each, in one process; each figure is the
median wall time of its runs, and the speed-ups are ratios of those medians. The results of
the runs are checked to be equal (the same scores for every entry and view).

Run::

    python benchmarks/bench_rescore.py --repeats 3 --json bench-rescore.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from splitscope.evaluation.predictions import read_truth
from splitscope.evaluation.readers import ReadOptions
from splitscope.evaluation.rescore import final_ranking, rescore
from splitscope.evaluation.views import view_where

KINDS = {"*": "probability", "DeepScope_Innovators": "logit", "EndoAI": "score"}
_DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "cv2024"


def one_run(root: Path, read: ReadOptions):
    """The full re-scoring with workbooks read under ``read``; returns the result."""
    truth = read_truth(root / "validation_data.xlsx", read=read)
    test_truth = read_truth(root / "test_data.xlsx", truth.classes, read=read)
    final = final_ranking(root / "submissions" / "testing", test_truth, score_kind=KINDS,
                          path_mode="basename", read=read)
    views = [view_where(truth, "source!=KVASIR", "non-KVASIR")]
    return rescore(root / "submissions" / "validation", truth, views, score_kind=KINDS,
                   final=final, exclude=["taaldhwaj"], read=read)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cv2024", type=Path, default=_DEFAULT,
                    help="the cv2024 folder of the shared data")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not args.cv2024.is_dir():
        raise SystemExit(f"no CV2024 data at {args.cv2024}")
    workbooks = len(list((args.cv2024 / "submissions").glob("*/*.xlsx")))
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "parsed-tables"
        arms = {"openpyxl": ReadOptions(engine="openpyxl"),
                "calamine": ReadOptions(engine="calamine"),
                "cached": ReadOptions(engine="calamine", cache=cache)}
        one_run(args.cv2024, arms["cached"])  # fills the cache (not timed)
        times: dict[str, list[float]] = {k: [] for k in arms}
        results = {}
        for _ in range(args.repeats):
            for name, read in arms.items():
                t0 = time.perf_counter()
                results[name] = one_run(args.cv2024, read)
                times[name].append(time.perf_counter() - t0)
    ref = results["openpyxl"].scores.sort_values(["entry", "view"]).reset_index(drop=True)
    for name, res in results.items():
        got = res.scores.sort_values(["entry", "view"]).reset_index(drop=True)
        np.testing.assert_array_equal(got["organizer_score"].to_numpy(),
                                      ref["organizer_score"].to_numpy(), err_msg=name)
    med = {k: statistics.median(v) for k, v in times.items()}
    report = {
        "what": f"rescore of the CV2024 validation workbooks with the test workbooks as the "
                f"final ranking ({workbooks} submission workbooks + 2 truth workbooks)",
        "repeats": args.repeats, "seconds": times, "median_seconds": med,
        "speedup_calamine_vs_openpyxl": med["openpyxl"] / med["calamine"],
        "speedup_cached_vs_openpyxl": med["openpyxl"] / med["cached"],
        "speedup_per_round_calamine": [o / c for o, c in zip(times["openpyxl"],
                                                             times["calamine"])],
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
    }
    print(f"{report['what']}; median of {args.repeats} alternating runs")
    for k in arms:
        print(f"  {k:9s} {med[k]:7.2f} s   ({', '.join(f'{t:.2f}' for t in times[k])})")
    print(f"  calamine vs openpyxl: {report['speedup_calamine_vs_openpyxl']:.2f}×; "
          f"cached vs openpyxl: {report['speedup_cached_vs_openpyxl']:.2f}×; per round, "
          f"calamine: {', '.join(f'{r:.2f}×' for r in report['speedup_per_round_calamine'])}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
