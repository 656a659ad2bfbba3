"""Dask against the process pool on one machine: the per-file stage and the NCC search, on a
LocalCluster or on separate ``dask scheduler`` and ``dask worker`` processes.

A generated release (``--n`` JPEGs, 128² grey, smooth random content per image with 1% planted
near copies, 20% test) is written once into a cache folder. Then, alternating, each repeat:

- ``scan``: :func:`splitscope.features.scanning.scan` into a fresh workspace with
  ``ProcessExecutor(workers)`` and with ``DaskExecutor(workers=workers)`` (a LocalCluster of
  ``workers`` one-thread processes, started before the clock starts; its start-up is timed
  apart). Both workspaces' results are checked equal.
- ``search``: NCC test → train (τ = 0.98) over the scan's thumbnails, local
  (:func:`~splitscope.relations.ncc.ncc_search`, in this process, BLAS on every core) and
  partitioned over the same cluster (:func:`~splitscope.relations.partitioned.
  partitioned_ncc_search`, tasks reading the workspace's thumbnail file). Results checked
  equal (best index, pair set).

The two engines swap order every repeat (``order`` 0 = first). Wall seconds of each call;
medians over ``--repeats``; the 1-minute load average before each call, since the machine may
be shared.

Options:

- ``--cluster processes``: instead of a LocalCluster, a ``dask scheduler`` and ``--workers``
  ``dask worker --nthreads 1 --no-nanny`` processes started from the ``dask`` command line (a
  scheduler file, free ports, BLAS on one thread), as on a batch system; the scan and the
  search connect to it by address (``DaskExecutor(scheduler=…)``).
- ``--what search``: only the search, on a release scanned once (not timed; a scanned
  ``--workspace`` is reused). ``--release DIR`` audits an existing release folder (e.g. one of
  ``bench_release_scale.py``) instead of the generated one. The local search runs with
  ``workers`` BLAS threads; the search's stats (method, visited share, scored pairs, tasks and
  what each ran) are recorded. Results checked equal: best index, best ρ (exact), pair set.
- ``--query-block``/``--reference-block``: the partitioned search's task shape (default the
  audit's, :data:`~splitscope.relations.partitioned.QUERY_BLOCK` ×
  :data:`~splitscope.relations.partitioned.REFERENCE_BLOCK`).

Usage::

    python benchmarks/bench_dask.py --n 20000 --workers 2 --repeats 3 --json bench-dask.json
    nice python benchmarks/bench_dask.py --what search --cluster processes --workers 2 \\
        --release CACHE/release-n100000-seed0 --workspace CACHE/ws/n100000 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_output import emit

DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "splitscope-bench"


def make_release(root: Path, n: int, seed: int = 0, size: int = 128) -> Path:
    """``n`` grey JPEGs under ``root/{train,test}/{a,b}/``, written once (a ``done`` marker)."""
    if (root / "done").is_file():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(seed)
    coarse = 8
    n_test = n // 5
    planted = max(1, n // 100)
    images = []
    for i in range(n):
        if i >= n - planted:  # a near copy of an earlier training image
            base = images[int(rng.integers(0, n - n_test - planted))]
            img = np.clip(base.astype(np.int16) + rng.integers(-2, 3, base.shape), 0, 255)
        else:
            grid = rng.normal(0, 1, (coarse, coarse))
            img = np.asarray(Image.fromarray(((grid - grid.min()) / np.ptp(grid) * 200 + 20)
                                             .astype(np.uint8)).resize((size, size),
                                                                       Image.BILINEAR))
            img = np.clip(img.astype(np.int16) + rng.normal(0, 4, img.shape), 0, 255)
        images.append(img.astype(np.uint8))
    order = rng.permutation(n)
    for k, i in enumerate(order):
        split = "test" if k < n_test else "train"
        label = "ab"[i % 2]
        folder = root / split / label
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[i]).save(folder / f"img{i:06d}.jpg", quality=90)
    (root / "done").write_text(str(n))
    return root


@contextlib.contextmanager
def dask_processes(workers: int, folder: Path):
    """A ``dask scheduler`` and ``workers`` one-thread ``dask worker`` processes (each in its
    own session, ended at exit); yields the scheduler's address."""
    from splitscope.features.executors import BLAS_THREAD_VARIABLES

    dask_cli = [sys.executable, "-c",
                "import sys; from dask.__main__ import main; sys.exit(main())"]
    env = {**os.environ, **{name: "1" for name in BLAS_THREAD_VARIABLES}}
    src = str(Path(__import__("splitscope").__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    scheduler_file = folder / "scheduler.json"
    procs = []

    def start(*args, log):
        with open(folder / log, "wb") as out:
            procs.append(subprocess.Popen([*dask_cli, *args], env=env, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True))

    try:
        start("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
              "--scheduler-file", str(scheduler_file), log="scheduler.log")
        deadline = time.monotonic() + 120
        while not scheduler_file.is_file() or not scheduler_file.stat().st_size:
            if procs[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dask scheduler did not start; see "
                                   f"{folder / 'scheduler.log'}")
            time.sleep(0.1)
        for k in range(workers):
            start("worker", "--scheduler-file", str(scheduler_file), "--nthreads", "1",
                  "--no-nanny", "--host", "127.0.0.1", "--no-dashboard", "--local-directory",
                  str(folder / f"worker{k}"), log=f"worker{k}.log")
        yield json.loads(scheduler_file.read_text())["address"]
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


def _load() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return float("nan")


def _timed(fn):
    load = _load()
    t = time.perf_counter()
    out = fn()
    return out, {"seconds": round(time.perf_counter() - t, 3), "load_1min": load}


def _search_inputs(scan):
    from splitscope.relations.ncc_core import ThumbnailRows
    from splitscope.relations.partitioned import StoredThumbnails

    rows = scan.rows()
    ok = (rows["thumb_index"] >= 0).to_numpy()
    test = rows.loc[ok & (rows["split"] == "test").to_numpy(), "row"].to_numpy(np.int64)
    train = rows.loc[ok & (rows["split"] == "train").to_numpy(), "row"].to_numpy(np.int64)
    size = scan.thumbnails.shape[1]
    local = (ThumbnailRows(scan.thumbs, test, size), ThumbnailRows(scan.thumbs, train, size))
    path = str(scan.thumbnails.filename)
    stored = (StoredThumbnails(path, scan.thumb_index(test), size),
              StoredThumbnails(path, scan.thumb_index(train), size))
    return local, stored


def _search_stats(result) -> dict:
    p = result.params
    keys = ("search", "visited_share", "scored_pairs", "clusters", "rank", "pairs_total")
    out = {k: p[k] for k in keys if k in p}
    if "partitions" in p:
        out.update({k: p["partitions"][k] for k in ("tasks", "query_block", "reference_block",
                                                     "task_searches")})
    return out


def _same_search(a, b) -> dict:
    """Best index, best ρ (canonical values: exact) and pair set of two searches."""
    pairs = [set(zip(x.pairs["query"].tolist(), x.pairs["reference"].tolist(), strict=True))
             for x in (a, b)]
    return {"best_index": bool(np.array_equal(a.best_index, b.best_index)),
            "best_rho": bool(np.array_equal(a.best_rho, b.best_rho)),
            "pairs": bool(pairs[0] == pairs[1]), "pairs_count": len(pairs[0])}


def run(n: int, workers: int, repeats: int, cache: Path, tau: float = 0.98, *,
        cluster: str = "local", what: str = "both", release: Path | None = None,
        workspace: Path | None = None, query_block: int | None = None,
        reference_block: int | None = None) -> dict:
    import pandas as pd

    from splitscope.features.dask_executor import DaskExecutor
    from splitscope.features.executor import ProcessExecutor
    from splitscope.features.scanning import scan
    from splitscope.relations import partitioned
    from splitscope.relations.ncc import ncc_search

    blocks = {"query_block": query_block or partitioned.QUERY_BLOCK,
              "reference_block": reference_block or partitioned.REFERENCE_BLOCK}
    root = release if release is not None else make_release(cache / f"dask-bench-{n}", n)
    stack = contextlib.ExitStack()
    t = time.perf_counter()
    try:
        if cluster == "processes":
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-dask-")))
            dask = DaskExecutor(scheduler=stack.enter_context(dask_processes(workers, folder)))
        else:
            dask = DaskExecutor(workers=workers)
        stack.callback(dask.close)
        dask.client.wait_for_workers(workers, timeout=300)
    except BaseException:
        stack.close()
        raise
    cluster_start = time.perf_counter() - t
    runs: dict[str, list[dict]] = {"search_local": [], "search_dask": []}
    if what == "both":
        runs = {"scan_process": [], "scan_dask": [], **runs}
    checks = []
    prepared = None
    with stack:
        if what == "search":  # one scan (not timed) for every repeat
            ws = workspace or cache / f"ws-dask-bench-{root.name}"
            t = time.perf_counter()
            prepared = scan(root, ws, workers=workers, progress=False)
            prepare_seconds = round(time.perf_counter() - t, 3)
        for rep in range(repeats):
            tmp = Path(tempfile.mkdtemp(prefix="bench-dask-"))
            try:
                if prepared is None:
                    engines = {"process": ProcessExecutor(workers), "dask": dask}
                    scans = {}
                    for order, name in enumerate(("process", "dask") if rep % 2 == 0
                                                 else ("dask", "process")):
                        scans[name], m = _timed(lambda tmp=tmp, name=name, engines=engines:
                                                scan(root, tmp / f"ws-{name}",
                                                     executor=engines[name], progress=False))
                        runs[f"scan_{name}"].append({**m, "order": order})
                    local_scan, dask_scan = scans["process"], scans["dask"]
                    pd.testing.assert_frame_equal(local_scan.features, dask_scan.features)
                else:
                    local_scan = dask_scan = prepared
                (ql, rl), _ = _search_inputs(local_scan)
                _, (qs, rs) = _search_inputs(dask_scan)
                if rep == 0:  # imports and thread pools, here and on the workers, untimed
                    ncc_search(ql[:2], rl[:2], tau=tau, workers=workers)
                    partitioned.partitioned_ncc_search(dask.client, qs.part(0, 2),
                                                       rs.part(0, 2), tau=tau)
                searches = {
                    "local": lambda ql=ql, rl=rl: ncc_search(ql, rl, tau=tau, workers=workers),
                    "dask": lambda qs=qs, rs=rs: partitioned.partitioned_ncc_search(
                        dask.client, qs, rs, tau=tau, **blocks)}
                found = {}
                for order, name in enumerate(("local", "dask") if rep % 2 == 0
                                             else ("dask", "local")):
                    found[name], m = _timed(searches[name])
                    runs[f"search_{name}"].append({**m, "order": order,
                                                   **_search_stats(found[name])})
                same = _same_search(found["local"], found["dask"])
                checks.append({"scan_equal": True if prepared is None else None, **same, "queries": len(ql),
                               "references": len(rl)})
                if not (same["best_index"] and same["best_rho"] and same["pairs"]):
                    raise AssertionError(f"partitioned search differs from the local: {same}")
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    medians = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    ratios = {"search_dask_over_local": round(medians["search_dask"] / medians["search_local"],
                                              3)}
    out = {"n_images": len(local_scan.rows()),
           "release": str(root), "workers": workers, "cluster": cluster, "what": what,
           "repeats": repeats, "tau": tau, "blocks": blocks,
           "cluster_start_seconds": round(cluster_start, 3), "median_seconds": medians}
    if prepared is not None:
        out["prepare_scan_seconds"] = prepare_seconds
    else:
        out["images_per_second"] = {k: round(out["n_images"] / medians[k], 1)
                                    for k in ("scan_process", "scan_dask")}
        ratios["scan_dask_over_process"] = round(medians["scan_dask"] / medians["scan_process"],
                                                 3)
    return {**out, "ratios": ratios, "runs": runs, "checks": checks,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                        "python": platform.python_version()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--cluster", choices=("local", "processes"), default="local",
                    help="a LocalCluster, or dask scheduler/worker processes from the CLI")
    ap.add_argument("--what", choices=("both", "search"), default="both",
                    help="scan and search, or the search alone on a release scanned once")
    ap.add_argument("--release", type=Path, default=None,
                    help="an existing release folder instead of the generated one")
    ap.add_argument("--workspace", type=Path, default=None,
                    help="with --what search: the workspace scanned (or reused) once")
    ap.add_argument("--query-block", type=int, default=None)
    ap.add_argument("--reference-block", type=int, default=None)
    args = ap.parse_args(argv)
    result = run(args.n, args.workers, args.repeats, args.cache, cluster=args.cluster,
                 what=args.what, release=args.release, workspace=args.workspace,
                 query_block=args.query_block, reference_block=args.reference_block)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
