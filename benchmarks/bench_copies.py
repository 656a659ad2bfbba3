"""Time to answer "which test images have a copy in train": ``splitscope duplicates`` against
imagededup, side by side.

Release: ``--n`` seeded 512² MRI-like JPEGs (the generator of ``bench_features.py``, grey
content stored as RGB, quality 90), laid out as ``train/<class>/`` and ``test/<class>/`` with
``--test-share`` of them in test; ``--planted`` of the test files are copies of training files
(half the same bytes, half re-encoded at quality 75). Written once under ``--cache``.

Arms, each in a fresh interpreter, alternating (order reversed every other repeat), a fresh
workspace every run:

``splitscope``  ``splitscope duplicates ROOT -q test -r train --workers W --json`` run through
                ``splitscope.cli.main`` (scan, every hash and NCC rule, the pair table and the
                records); the answer is the test rows flagged byte-identical, hash-near or
                NCC ≥ τ.
``splitscope-fast``  the same with ``--mode fast``: JPEGs decoded at reduced scale
                (METHODS §2.2), no decoded-pixel digest for them.
``imagededup``  ``PHash().encode_images(ROOT, recursive=True, num_enc_workers=W)``, then
                ``find_duplicates(encoding_map=…, max_distance_threshold=10)`` (its default),
                then the test files with a duplicate in train.

Each timer starts after the tool's package is imported (``splitscope.cli`` and the scan and
duplicates modules; ``imagededup.methods``) and stops when the answer is in hand. CPU seconds are
those of the process tree (``bench_features.run_child``: sampled from /proc every 50 ms,
imports included). Medians over ``--repeats``, with the 1-minute load average before each run.

Usage::

    nice python benchmarks/bench_copies.py --n 3000 --workers 2 --repeats 3 --json copies.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from bench_features import DEFAULT_CACHE, make_mri_set, run_child

ARMS = ("splitscope", "splitscope-fast", "imagededup")


def make_release(cache: Path, n: int, test_share: float, planted: int, workers: int) -> Path:
    """The train/test release over a cached MRI-like set (hard links where possible)."""
    folder = cache / f"copies-n{n}-t{test_share:g}-p{planted}"
    if (folder / ".complete").exists():
        return folder
    from PIL import Image

    base = make_mri_set(cache, n, workers=workers)
    files = sorted(base.rglob("*.jpg"))
    step = max(1, round(1 / test_share))  # every step-th file of each class is test
    test = files[::step]
    train = [f for i, f in enumerate(files) if i % step]
    if folder.exists():
        shutil.rmtree(folder)
    for split, chosen in (("train", train), ("test", test[planted:])):
        for f in chosen:
            dst = folder / split / f.parent.name / f.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(f, dst)
            except OSError:
                shutil.copy2(f, dst)
    for k, src in enumerate(train[:: max(1, len(train) // planted)][:planted]):
        dst = folder / "test" / src.parent.name / f"copy_{k:04d}.jpg"
        dst.parent.mkdir(parents=True, exist_ok=True)
        if k % 2 == 0:
            shutil.copyfile(src, dst)
        else:
            with Image.open(src) as im:
                im.save(dst, quality=75)
    (folder / ".complete").write_text("ok\n")
    return folder


def child_splitscope(root: str, workers: int, mode: str = "exact") -> None:
    import contextlib
    import io

    import splitscope.features.scanning
    import splitscope.relations.layer  # noqa: F401
    from splitscope.cli import main

    with tempfile.TemporaryDirectory(prefix="copies-ws-") as ws:
        out = io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stdout(out):
            code = main(["duplicates", root, "-q", "test", "-r", "train", "--workers",
                         str(workers), "--workspace", str(Path(ws) / "w"), "--mode", mode,
                         "--json"])
        seconds = time.perf_counter() - t
        meta = json.loads(next((Path(ws) / "w" / "features").glob("*/meta.json")).read_text())
    doc = json.loads(out.getvalue())
    flagged = {r["id"]: r.get("numerator") for r in doc["records"]
               if r["id"].split(".")[0] in ("identity", "near_duplicate", "ncc", "hash")}
    print(json.dumps({"method": f"splitscope-{mode}", "code": code, "seconds": seconds,
                      "scan_seconds": meta["seconds"], "flagged": flagged}))


def child_imagededup(root: str, workers: int) -> None:
    from imagededup.methods import PHash

    t = time.perf_counter()
    hasher = PHash(verbose=False)
    enc = hasher.encode_images(image_dir=root, recursive=True, num_enc_workers=workers)
    dups = hasher.find_duplicates(encoding_map=enc, max_distance_threshold=10)
    test_with_copy = sorted(k for k, v in dups.items()
                            if k.startswith("test") and any(d.startswith("train") for d in v))
    seconds = time.perf_counter() - t
    print(json.dumps({"method": "imagededup", "seconds": seconds, "files": len(enc),
                      "test_with_train_copy": len(test_with_copy)}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--test-share", type=float, default=0.2)
    ap.add_argument("--planted", type=int, default=60)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--arms", default="splitscope,splitscope-fast,imagededup",
                    help="comma-separated arms, from splitscope, splitscope-fast, imagededup")
    ap.add_argument("--child", choices=ARMS, default=None,
                    help=argparse.SUPPRESS)
    ap.add_argument("--root", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child in ("splitscope", "splitscope-fast"):
        child_splitscope(args.root, args.workers, "fast" if args.child.endswith("fast") else
                         "exact")
        return 0
    if args.child == "imagededup":
        child_imagededup(args.root, args.workers)
        return 0
    root = make_release(args.cache, args.n, args.test_share, args.planted, args.workers)
    print(f"release {root} ({args.n} files, {args.planted} planted copies in test)", flush=True)
    chosen = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(chosen) - set(ARMS))
    if unknown or "imagededup" not in chosen or len(chosen) < 2:
        ap.error(f"--arms: imagededup and at least one splitscope arm, from {', '.join(ARMS)}"
                 + (f"; unknown: {unknown}" if unknown else ""))
    runs: dict[str, list[dict]] = {arm: [] for arm in chosen}
    for r in range(args.repeats):
        for arm in (chosen if r % 2 == 0 else chosen[::-1]):
            res = run_child([sys.executable, str(HERE), "--child", arm, "--root", str(root),
                             "--workers", str(args.workers)])
            runs[arm].append(res)
            found = (res["test_with_train_copy"] if arm == "imagededup" else
                     {k.split(".")[1]: v for k, v in res["flagged"].items()
                      if k.split(".")[1] in ("sha256", "hash_joint", "ncc_nearest")})
            scan = f" (scan {res['scan_seconds']:.2f} s)" if "scan_seconds" in res else ""
            print(f"run {r + 1} {arm:10s} {res['seconds']:7.2f} s{scan}  CPU"
                  f" {res['cpu_seconds_tree']:.1f} s  load {res['load_1min']}  test rows found:"
                  f" {found}", flush=True)
    med = {arm: statistics.median(r["seconds"] for r in rs) for arm, rs in runs.items()}
    cpu = {arm: statistics.median(r["cpu_seconds_tree"] for r in rs) for arm, rs in runs.items()}
    ratio = {arm: med[arm] / med["imagededup"] for arm in runs if arm != "imagededup"}
    print(f"\nmedians of {args.repeats}: " + ", ".join(
        f"{arm} {med[arm]:.2f} s ({cpu[arm]:.1f} CPU-s)" for arm in runs) + "; ÷ imagededup: "
        + ", ".join(f"{arm} {v:.2f}×" for arm, v in ratio.items()))
    if args.json:
        args.json.write_text(json.dumps({"root": str(root), "n": args.n, "workers": args.workers,
                                         "runs": runs, "median_seconds": med,
                                         "median_cpu_seconds": cpu, "ratio": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
