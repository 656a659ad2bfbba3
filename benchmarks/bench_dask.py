"""Dask LocalCluster against the process pool on one machine: the per-file stage and the NCC
search.

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

Usage::

    python benchmarks/bench_dask.py --n 20000 --workers 2 --repeats 3 --json bench-dask.json
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
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


def run(n: int, workers: int, repeats: int, cache: Path, tau: float = 0.98) -> dict:
    import pandas as pd

    from splitscope.features.dask_executor import DaskExecutor
    from splitscope.features.executor import ProcessExecutor
    from splitscope.features.scanning import scan
    from splitscope.relations.ncc import ncc_search
    from splitscope.relations.partitioned import partitioned_ncc_search

    root = make_release(cache / f"dask-bench-{n}", n)
    t = time.perf_counter()
    dask = DaskExecutor(workers=workers)
    dask.client.wait_for_workers(workers)
    cluster_start = time.perf_counter() - t
    runs: dict[str, list[dict]] = {"scan_process": [], "scan_dask": [], "search_local": [],
                                   "search_dask": []}
    checks = []
    try:
        for rep in range(repeats):
            tmp = Path(tempfile.mkdtemp(prefix="bench-dask-"))
            try:
                engines = {"process": ProcessExecutor(workers), "dask": dask}
                scans = {}
                for order, name in enumerate(("process", "dask") if rep % 2 == 0
                                             else ("dask", "process")):
                    scans[name], m = _timed(lambda tmp=tmp, name=name, engines=engines: scan(
                        root, tmp / f"ws-{name}", executor=engines[name], progress=False))
                    runs[f"scan_{name}"].append({**m, "order": order})
                local_scan, dask_scan = scans["process"], scans["dask"]
                pd.testing.assert_frame_equal(local_scan.features, dask_scan.features)
                (ql, rl), _ = _search_inputs(local_scan)
                _, (qs, rs) = _search_inputs(dask_scan)
                searches = {
                    "local": lambda ql=ql, rl=rl: ncc_search(ql, rl, tau=tau),
                    "dask": lambda qs=qs, rs=rs: partitioned_ncc_search(
                        dask.client, qs, rs, tau=tau, query_block=1024, reference_block=8192)}
                found = {}
                for order, name in enumerate(("local", "dask") if rep % 2 == 0
                                             else ("dask", "local")):
                    found[name], m = _timed(searches[name])
                    params = found[name].params
                    runs[f"search_{name}"].append({**m, "order": order,
                                                   "search": params["search"], **(
                        {"tasks": params["partitions"]["tasks"],
                         "task_searches": params["partitions"]["task_searches"]}
                        if name == "dask" else {})})
                a, b = found["local"], found["dask"]
                same = (np.array_equal(a.best_index, b.best_index)
                        and a.pairs[["query", "reference"]].equals(
                            b.pairs[["query", "reference"]]))
                checks.append({"scan_equal": True, "search_equal": bool(same),
                               "queries": len(a.best_index), "references": len(rl),
                               "pairs": len(a.pairs)})
                if not same:
                    raise AssertionError("partitioned search differs from the local search")
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        dask.close()
    medians = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    return {
        "n_images": n, "workers": workers, "repeats": repeats, "tau": tau,
        "cluster_start_seconds": round(cluster_start, 3),
        "median_seconds": medians,
        "images_per_second": {k: round(n / medians[k], 1) for k in ("scan_process", "scan_dask")},
        "ratios": {"scan_dask_over_process": round(medians["scan_dask"] / medians["scan_process"],
                                                   3),
                   "search_dask_over_local": round(medians["search_dask"]
                                                   / medians["search_local"], 3)},
        "runs": runs, "checks": checks,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    result = run(args.n, args.workers, args.repeats, args.cache)
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
