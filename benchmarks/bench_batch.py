"""A new batch of images checked against a corpus whose audit left its workspace behind: the
time against the cold audit of the corpus, and the records against a cold run of the batch.

The corpus is the generated release of ``bench_release_scale.py`` (``--n`` files, 80/20 split).
The batch is ``--batch`` new files (the same kind of smooth random grey images, another seed)
of which 1% are byte copies of training files, written once under ``--cache``. A list file
names the release's training files (split ``train``) and the batch (split ``test``).

Runs, each a fresh ``python -m splitscope.cli`` process, timed by wall clock:

1. ``cold``: ``audit RELEASE --workspace WS`` into an empty workspace (every layer; this
   saves the NCC search's reference index in the workspace);
2. ``batch``: ``audit LIST --layers duplicates --workspace WS``: the training files' features
   and the saved reference index are reused, the batch is scanned;
3. ``batch-cold``: the same command into an empty workspace (scans every file, builds the
   index), for the records: audit.json's duplicates records (without the search's own notes),
   the query flags and the pair table must be identical to run 2's.

Reports the walls, ``batch ÷ cold``, what the search said about the index, and the planted
copies found. ``--reuse-cold`` takes run 1 (its time and a copy of its workspace) from an
earlier run of the script.

Usage::

    nice python benchmarks/bench_batch.py --n 100000 --batch 10000 --json bench-batch.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_output import emit
from bench_release_scale import make_release, pixels

DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "splitscope-bench"


def make_batch(cache: Path, release: Path, n: int, seed: int = 1) -> tuple[Path, list[str]]:
    """``n`` new files under ``cache/batch-n<n>/`` (1% byte copies of training files) and a
    list file naming the release's training files and the batch; returns the list and the
    batch paths that copy a training file."""
    from PIL import Image

    folder = cache / f"batch-n{n}-seed{seed}"
    listed = cache / f"batch-n{n}-seed{seed}.csv"
    train = sorted(p.relative_to(cache).as_posix() for p in (release / "train").rglob("*")
                   if p.is_file())
    rng = np.random.default_rng(seed)
    copies = set(rng.choice(n, size=max(1, n // 100), replace=False).tolist())
    sources = rng.choice(len(train), size=n, replace=False)
    planted, rows = [], []
    if not (folder / "done").is_file():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    for i in range(n):
        if i in copies:
            src = cache / train[sources[i]]
            target = folder / f"b{i:07d}{src.suffix}"
            planted.append(target.relative_to(cache).as_posix())
            if not target.exists():
                target.write_bytes(src.read_bytes())
        else:
            target = folder / f"b{i:07d}.jpg"
            if not target.exists():
                Image.fromarray(pixels(10_000_000 + i, 96, seed)).save(target, quality=90)
        rows.append({"path": target.relative_to(cache).as_posix(), "split": "test",
                     "label": "c0"})
    (folder / "done").write_text("ok")
    frame = pd.DataFrame([{"path": p, "split": "train", "label": p.split("/")[-2]}
                          for p in train] + rows)
    frame.to_csv(listed, index=False)
    return listed, planted


def run(args: list[str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "splitscope.cli", *args, "--quiet"],
                          check=False, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode not in (0, 1, 3):
        raise RuntimeError(f"{args[:2]} failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return wall


def outcome(out: Path) -> dict:
    """What must agree between two runs of the batch, and what the search said."""
    doc = json.loads((out / "audit.json").read_text())
    records, said = [], []
    for rec in doc["records"]:
        if rec.get("layer") != "duplicates":
            continue
        search = rec.get("details", {}).get("notes", {}).pop("ncc_search", None)
        if search:
            said.append(search.get("index"))
        rec.pop("software", None)
        records.append(rec)
    flags = pd.read_parquet(out / "lists" / "query_flags.parquet")
    pairs = pd.read_parquet(out / "lists" / "pairs.parquet") \
        if (out / "lists" / "pairs.parquet").is_file() else pd.DataFrame()
    return {"records": records, "flags": flags, "pairs": pairs, "index": said}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--work", type=Path, default=None, help="workspaces and outputs (temp)")
    ap.add_argument("--reuse-cold", action="store_true",
                    help="take the cold audit's time and workspace from an earlier run")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    release, _ = make_release(a.cache, a.n, workers=a.workers)
    listed, planted = make_batch(a.cache, release, a.batch)
    work = a.work or a.cache / "bench-batch-work"
    w = ["--workers", str(a.workers)]
    load = [os.getloadavg()[0]]
    kept = work / "cold.json"
    if a.reuse_cold and kept.is_file() and (work / "ws-after-cold").is_dir():
        cold = json.loads(kept.read_text())["cold_audit_s"]
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        cold = run(["audit", str(release), "--workspace", str(work / "ws"), "--out",
                    str(work / "cold"), *w])
        shutil.copytree(work / "ws", work / "ws-after-cold")
        kept.write_text(json.dumps({"cold_audit_s": cold}))
    for name in ("ws", "ws-fresh", "batch", "batch-cold"):
        shutil.rmtree(work / name, ignore_errors=True)
    shutil.copytree(work / "ws-after-cold", work / "ws")  # the corpus's workspace, as left
    load.append(os.getloadavg()[0])
    batch = run(["audit", str(listed), "--root", str(a.cache), "--layers", "duplicates",
                 "--workspace", str(work / "ws"), "--out", str(work / "batch"), *w])
    load.append(os.getloadavg()[0])
    batch_cold = run(["audit", str(listed), "--root", str(a.cache), "--layers", "duplicates",
                      "--workspace", str(work / "ws-fresh"), "--out",
                      str(work / "batch-cold"), *w])
    load.append(os.getloadavg()[0])
    warm, fresh = outcome(work / "batch"), outcome(work / "batch-cold")
    same_records = warm["records"] == fresh["records"]
    same_flags = warm["flags"].equals(fresh["flags"])
    same_pairs = warm["pairs"].equals(fresh["pairs"])
    flags = warm["flags"]
    found = set(flags.loc[flags["ncc_best_rho"] > 0.999, "path"].astype(str))
    report = {
        "corpus_files": a.n, "batch_files": a.batch, "workers": a.workers,
        "cold_audit_s": round(cold, 1), "batch_s": round(batch, 1),
        "batch_over_cold": round(batch / cold, 3), "batch_cold_s": round(batch_cold, 1),
        "index_said": {"batch": warm["index"], "batch_cold": fresh["index"]},
        "identical": {"records": same_records, "query_flags": same_flags,
                      "pairs": same_pairs},
        "planted_copies_found": f"{sum(any(f.endswith(p) for f in found) for p in planted)}"
                                f" of {len(planted)}",
        "load_1min": [round(x, 2) for x in load],
    }
    emit(report, a.json)
    return report


if __name__ == "__main__":
    main()
