"""What the safety checks cost, each against the plain operation it guards, side by side.

- folder listing: :func:`splitscope.manifest.read_folder` (scandir walk with hidden, link and
  unlistable-folder accounting, containment of every symbolic link) vs a plain ``os.walk``
  listing of the same files, sorted (what the listing did before);
- list reading: :func:`splitscope.manifest.read_list` (valid-UTF-8 check, containment of every
  row) vs ``pandas.read_csv`` plus the path join it needs anyway;
- file reads: the feature stage's read (``stat`` + regular-file check, non-blocking open,
  ``fstat``, capped read) vs ``open(path, "rb").read()``, over the same files;
- workspace check: SHA-256 of a result's files (every reused scan and every ``load_scan``
  verifies them) vs reading the same files once.

Each figure is the median of ``--repeats`` interleaved runs (baseline, then the checked
version); the ratio is checked / baseline from the same run.

    python benchmarks/bench_safety.py --repeats 5 --json bench-safety.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def compare(name: str, unit: str, n: int, baseline, checked, repeats: int) -> dict:
    base, check = [], []
    for _ in range(repeats):
        base.append(_timed(baseline))
        check.append(_timed(checked))
    b, c = statistics.median(base), statistics.median(check)
    return {"what": name, "n": n, "unit": unit, "baseline_s": round(b, 4),
            "checked_s": round(c, 4), "ratio": round(c / b, 3)}


def plain_walk(root: Path) -> list[str]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        files += [os.path.join(dirpath, f) for f in filenames if not f.startswith(".")]
    return sorted(files)


def main() -> None:
    from splitscope.features.extract import _read_bytes
    from splitscope.features.workspace import file_record
    from splitscope.manifest import read_folder, read_list

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kermany", default=str(DATA / "kermany-chest-xray-224"))
    parser.add_argument("--list", default=str(DATA / "cv2024" /
                                              "capsule_vision_2024_train_val_index.csv"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    root = Path(args.kermany)
    if root.is_dir():
        files = plain_walk(root)
        rows.append(compare("folder listing", "files", len(files), lambda: plain_walk(root),
                            lambda: read_folder(root), args.repeats))

        def plain_reads():
            for f in files:
                with open(f, "rb") as fh:
                    fh.read()

        def checked_reads():
            for f in files:
                _read_bytes(f)

        rows.append(compare("file reads", "files", len(files), plain_reads, checked_reads,
                            args.repeats))
    listing = Path(args.list)
    if listing.is_file():
        def plain_list():
            table = pd.read_csv(listing, dtype=str, keep_default_na=False, na_values=[""])
            return [os.path.abspath(listing.parent / p) for p in table["image_path"]]

        n = len(pd.read_csv(listing, usecols=["image_path"]))
        rows.append(compare("list reading", "rows", n, plain_list,
                            lambda: read_list(listing), args.repeats))
    with tempfile.TemporaryDirectory() as tmp:
        n = 5840  # one Kermany-sized result: 96² thumbnails
        thumbs = Path(tmp) / "thumbnails.npy"
        np.save(thumbs, np.random.default_rng(0).integers(0, 256, (n, 96, 96), dtype=np.uint8))
        rows.append(compare("result check (SHA-256)", "thumbnails", n,
                            lambda: thumbs.read_bytes(), lambda: file_record(thumbs),
                            args.repeats))
    width = max(len(r["what"]) for r in rows)
    print(f"{'what':<{width}}  {'n':>7}  {'baseline s':>10}  {'checked s':>10}  ratio")
    for r in rows:
        print(f"{r['what']:<{width}}  {r['n']:>7,}  {r['baseline_s']:>10.4f}  "
              f"{r['checked_s']:>10.4f}  {r['ratio']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
