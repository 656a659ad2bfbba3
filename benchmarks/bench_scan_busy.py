"""How busy the scan keeps its workers, against a bare decode-and-resize pool, side by side.

Two arms, each in a fresh interpreter, alternating (order reversed every other repeat):

``scan``  a cold ``splitscope.features.scanning.scan`` of the folder (``--mode``, exact by
          default; ``--workers`` W, a fresh workspace under ``--workspace-root``), the call
          timed from start to return
          (folder walk, pool start, extraction, shard commits with their fsyncs, the result
          table and its files, the manifest).
``pool``  the same files, listed beforehand, decoded by a plain ``ProcessPoolExecutor`` of W
          processes doing only Pillow's decode, ``convert("L")`` and a 96² bicubic resize, in
          chunks of 64, keeping nothing; timed from the pool's creation to its shutdown. With
          ``--mode fast`` a JPEG is decoded as the fast scan decodes it (Pillow ``draft("L")``
          at the reduced DCT scale that keeps both sides ≥ 192, for images at least 384 on
          their short side).

Busy-core share = CPU seconds (user + system) of the process tree during the timed call ÷
(wall seconds × W). The tree is the timing process and all its descendants (from
``getrusage`` of the process and of its reaped children; the fork server is stopped and reaped
after the call, so the scan's workers count in full); the CPU before the call is subtracted. For the scan the timing process is the parent (its CPU is reported
apart as ``parent_cpu_s``); its work competes with the workers for the same cores. For the
scan, ``in_batch_share`` = the workers' wall seconds inside their batches ÷ (wall seconds of
the extraction stage × W): below 1 by the time workers wait for work (the parent's commits,
start-up of the pool, the last batches). Images/s =
files ÷ wall seconds of the call. Medians over ``--repeats``, with the 1-minute load average
before each run.

Usage::

    nice python benchmarks/bench_scan_busy.py --folder ../shared/data/kermany-chest-xray-224 \\
        --workers 2 --repeats 5 --json busy.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
DEFAULT_FOLDER = ROOT.parent / "shared" / "data" / "kermany-chest-xray-224"
def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


class TreeCPU:
    """CPU seconds (user + system) of this process and of the descendants it has reaped,
    between :meth:`start` and :meth:`stop`. The scan's workers are children of the fork
    server, which reaps them; :meth:`stop` ends the fork server and reaps it, so its CPU and
    its workers' land in this process's children. No sampling: nothing else runs meanwhile."""

    def start(self) -> None:
        self.before = (_cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN))

    def stop(self) -> dict[str, float]:
        from multiprocessing import forkserver

        server = forkserver._forkserver
        if getattr(server, "_forkserver_pid", None) is not None:
            server._stop()  # closes its pipe and waits for it
        me = _cpu(resource.RUSAGE_SELF) - self.before[0]
        children = _cpu(resource.RUSAGE_CHILDREN) - self.before[1]
        return {"cpu_s": me + children, "parent_cpu_s": me}


def _decode_resize(paths: list[str], mode: str = "exact") -> int:
    from PIL import Image

    need = 2 * 96  # the fast scan's decode: twice the thumbnail side (features/extract.py)
    for path in paths:
        with Image.open(path) as img:
            if mode == "fast" and img.format == "JPEG" and min(img.size) >= 2 * need:
                img.draft("L", (need, need))
            img.convert("L").resize((96, 96), Image.Resampling.BICUBIC)
    return len(paths)


def child(arm: str, folder: str, workers: int, workspace_root: str | None,
          mode: str = "exact") -> None:
    files = sorted(str(p) for p in Path(folder).rglob("*")
                   if p.is_file() and not p.name.startswith("."))
    meter = TreeCPU()
    if arm == "pool":
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        import PIL.Image  # noqa: F401  (imported before the timing, as the scan's fork server does)

        chunks = [files[i:i + 64] for i in range(0, len(files), 64)]
        meter.start()
        t = time.perf_counter()
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            n = sum(pool.map(_decode_resize, chunks, [mode] * len(chunks)))
        seconds = time.perf_counter() - t
        timings = {}
    else:
        from splitscope.features.scanning import scan
        from splitscope.features.workspace import FeatureStore

        with tempfile.TemporaryDirectory(prefix="busy-ws-", dir=workspace_root) as ws:
            meter.start()
            t = time.perf_counter()
            result = scan(folder, Path(ws) / "workspace", workers=workers, mode=mode,
                          progress=False)
            seconds = time.perf_counter() - t
            n = len(result.features)
            meta = FeatureStore(Path(ws) / "workspace", result.params.key()).meta()
            timings = meta.get("timings", {})
    cpu = meter.stop()
    extra = {}
    if timings:  # workers' wall seconds inside batches ÷ (extraction wall × W)
        extra["in_batch_share"] = timings["extract_cpu_in_batches"] / (timings["extract"] * workers)
    print(json.dumps({"arm": arm, **extra, "files": n, "seconds": seconds, "images_per_s": n / seconds,
                      "busy_core_share": cpu["cpu_s"] / (seconds * workers), **cpu,
                      "timings": timings}))


def run(arm: str, args) -> dict:
    load = os.getloadavg()[0]
    cmd = [sys.executable, str(HERE), "--child", arm, "--folder", str(args.folder),
           "--workers", str(args.workers), "--mode", args.mode]
    if args.workspace_root:
        cmd += ["--workspace-root", args.workspace_root]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"}).stdout
    res = json.loads(out.strip().splitlines()[-1])
    res["load_1min"] = round(load, 2)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--mode", choices=["exact", "fast"], default="exact",
                    help="the scan's mode; fast: the pool decodes JPEGs as the fast scan does")
    ap.add_argument("--workspace-root", default=None,
                    help="where the scan's workspaces go (default: the temporary folder)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--child", choices=["scan", "pool"], default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, str(args.folder), args.workers, args.workspace_root, args.mode)
        return 0
    runs: dict[str, list[dict]] = {"scan": [], "pool": []}
    for r in range(args.repeats):
        for arm in (("scan", "pool") if r % 2 == 0 else ("pool", "scan")):
            res = run(arm, args)
            runs[arm].append(res)
            print(f"run {r + 1} {arm:4s}: {res['seconds']:6.2f} s  {res['images_per_s']:7.1f}"
                  f" images/s  busy {res['busy_core_share']:.2f}  cpu {res['cpu_s']:.2f} s"
                  f" (parent {res['parent_cpu_s']:.2f})"
                  + (f"  in batches {res['in_batch_share']:.2f}" if "in_batch_share" in res else "")
                  + f"  load {res['load_1min']}", flush=True)
    summary = {}
    for arm, rs in runs.items():
        summary[arm] = {k: statistics.median(r[k] for r in rs)
                        for k in ("seconds", "images_per_s", "busy_core_share", "cpu_s",
                                  "parent_cpu_s") if k in rs[0]}
        if "in_batch_share" in rs[0]:
            summary[arm]["in_batch_share"] = statistics.median(r["in_batch_share"] for r in rs)
        summary[arm]["load_1min"] = [r["load_1min"] for r in rs]
    ratio = summary["scan"]["images_per_s"] / summary["pool"]["images_per_s"]
    print(f"\nmedians of {args.repeats}, {args.workers} workers, {args.mode} mode,"
          f" {args.folder.name}:")
    for arm, s in summary.items():
        print(f"  {arm:4s} {s['images_per_s']:8.1f} images/s  busy-core share"
              f" {s['busy_core_share']:.2f}  CPU {s['cpu_s']:.2f} s (parent {s['parent_cpu_s']:.2f})")
    print(f"  scan ÷ pool, images/s: {ratio:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"folder": str(args.folder), "workers": args.workers,
                                         "mode": args.mode,
                                         "repeats": args.repeats, "runs": runs,
                                         "summary": summary, "scan_over_pool": ratio}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
