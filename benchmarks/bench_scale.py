"""Growth of the near-duplicate search with the population, on synthetic thumbnails and hashes.

No image files are needed: a scan-like object (:class:`SyntheticScan`) holds a manifest, a
feature table with 64-bit pHash/dHash and a memory-mapped ``(n, 96, 96)`` uint8 thumbnail
store, exactly the parts ``audit_duplicates`` reads. Two kinds of population:

``smooth``   every image shares one smooth background (a bright disc with a vignette, as
             capsule-endoscopy frames or near-constant scans do) plus a few faint blobs and
             grain of its own, so that many unrelated pairs pass τ (the homogeneous case); hashes
             are pHash/dHash of the thumbnails themselves.
``varied``   random smooth content per image (a 6×6 grid of levels, bilinearly upsampled,
             plus grain) with 1% planted copies (small noise on an earlier image), random
             hashes with the planted copies' hashes one bit away. Smooth content is what makes
             the bound pay (most energy in few directions); on white noise the search falls
             back to the brute force.

What runs, each in a fresh interpreter (so peak memory is the call's own):

- ``duplicates``: ``audit_duplicates(scan, ["test->train"])`` on a ``smooth`` set of
  ``--smooth`` rows (default 20,000; 20% test): wall seconds, pairs, pairs measured.
- ``search``: NCC search (indexed, and brute force on the smaller sizes) and the hash search
  of test (20%) against train (80%) on ``varied`` sets of ``--sizes`` rows (default
  100,000 and 400,000): seconds and peak resident memory (``VmHWM``) and peak anonymous
  memory (sampled), and a projection to 1,000,000 rows (200k × 800k) from the measured growth
  (time ∝ Q·R for brute force; the indexed search is projected with the exponent fitted
  between the two measured sizes).

Usage::

    python benchmarks/bench_scale.py --json bench-scale.json
    python benchmarks/bench_scale.py --sizes 20000,80000 --smooth 5000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_output import emit

from splitscope.relations.options import SearchOptions

DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "splitscope-bench"


@dataclass
class SyntheticScan:
    """The parts of ``splitscope.features.scanning.Scan`` the relations layer reads."""

    manifest: pd.DataFrame
    features: pd.DataFrame
    thumbnails: np.ndarray
    params: object = None
    meta: dict = field(default_factory=lambda: {"thumb_size": 96, "interpolation": "bicubic",
                                                "mode": "exact"})

    def rows(self) -> pd.DataFrame:
        out = self.manifest.merge(self.features, on="file", how="left", sort=False)
        out.index = self.manifest.index
        return out

    def thumbs(self, rows) -> np.ndarray:
        # one file per row, thumbnail i for row i
        return np.asarray(self.thumbnails[np.asarray(rows, dtype=np.int64)])


def smooth_background(n: int, size: int = 96, seed: int = 0, out=None, grain: float = 5.7
                      ) -> np.ndarray:
    """``n`` thumbnails sharing one smooth background (a bright disc with a gradient), each
    with three blobs of its own (amplitude scaled per image) and Gaussian grain of sd
    ``grain`` grey levels. With the default, about a fifth of the rows of a 5,000-row set have
    a ρ ≥ 0.98 twin among the others although none is a copy: the homogeneous case."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, size, size), np.uint8) if out is None else out
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1) - 0.5
    background = 40 + 150 * np.exp(-(xx ** 2 + yy ** 2) / 0.08) + 30 * xx
    for s in range(0, n, 1024):
        m = min(1024, n - s)
        img = np.broadcast_to(background, (m, size, size)).copy()
        scale = rng.uniform(0.1, 1, (m, 1, 1)) ** 2
        for _ in range(3):
            cy, cx = rng.uniform(-0.35, 0.35, (2, m, 1, 1))
            w = rng.uniform(0.05, 0.15, (m, 1, 1))
            a = rng.uniform(-120, 120, (m, 1, 1)) * scale
            img += a * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * w * w))
        img += rng.normal(0, grain, img.shape)
        out[s:s + m] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return out


def varied(n: int, size: int = 96, seed: int = 0, out=None, copies: float = 0.01) -> np.ndarray:
    """``n`` thumbnails of random smooth content (a 6×6 grid of levels, bilinearly upsampled,
    plus Gaussian grain of sd 3); the last ``copies`` share are noisy copies of earlier ones."""
    from scipy.ndimage import zoom

    rng = np.random.default_rng(seed)
    out = np.empty((n, size, size), np.uint8) if out is None else out
    for s in range(0, n, 2048):
        m = min(2048, n - s)
        low = rng.uniform(0, 220, (m, 6, 6))
        img = zoom(low, (1, size / 6, size / 6), order=1) + rng.normal(0, 3, (m, size, size))
        out[s:s + m] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    k = round(copies * n)
    if k:
        src = rng.choice(n - k, size=k, replace=False)
        for i, j in enumerate(src):
            noisy = out[j].astype(np.int16) + rng.integers(-2, 3, (size, size))
            out[n - k + i] = np.clip(noisy, 0, 255).astype(np.uint8)
    return out


def thumbnail_hashes(thumbs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """pHash and dHash of each thumbnail (the project's imagehash-identical functions)."""
    from splitscope.features.imaging import dhash64, phash64

    p = np.array([phash64(t) for t in thumbs], dtype=np.uint64)
    d = np.array([dhash64(t) for t in thumbs], dtype=np.uint64)
    return p, d


def random_hashes(n: int, seed: int, copies: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p, d = rng.integers(0, 2 ** 63, (2, n), dtype=np.uint64)
    k = round(copies * n)
    if k:
        src = rng.choice(n - k, size=k, replace=False)
        flip = np.uint64(1) << rng.integers(0, 64, k).astype(np.uint64)
        p[n - k:] = p[src] ^ flip
        d[n - k:] = d[src]
    return p, d


def synthetic_scan(kind: str, n: int, folder: Path, seed: int = 0,
                   test_share: float = 0.2, grain: float = 5.7) -> SyntheticScan:
    """A scan-like object of ``n`` rows (the last ``test_share`` are test), thumbnails in a
    memory-mapped file under ``folder`` (generated once, then reused); ``grain`` is the
    ``smooth`` set's noise (see :func:`smooth_background`)."""
    from splitscope.manifest.rows import _finish

    folder.mkdir(parents=True, exist_ok=True)
    name = f"{kind}-n{n}-seed{seed}" + (f"-grain{grain:g}" if kind == "smooth" else "")
    path = folder / f"{name}.npy"
    hashes = folder / f"{name}-hashes.npz"
    if not (path.exists() and hashes.exists()):
        tmp = path.with_suffix(".partial.npy")
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(n, 96, 96))
        if kind == "smooth":
            smooth_background(n, seed=seed, out=mm, grain=grain)
            p, d = thumbnail_hashes(mm)
        elif kind == "varied":
            varied(n, seed=seed, out=mm)
            p, d = random_hashes(n, seed)
        else:
            raise ValueError(f"unknown kind {kind!r}")
        mm.flush()
        del mm
        np.savez(hashes, phash=p, dhash=d)
        os.replace(tmp, path)
    thumbs = np.load(path, mmap_mode="r")
    h = np.load(hashes)
    n_test = round(test_share * n)
    split = np.where(np.arange(n) >= n - n_test, "test", "train")
    files = [f"/synthetic/{kind}/{i:07d}.png" for i in range(n)]
    manifest = _finish(pd.DataFrame({
        "path": [f"{s}/{i:07d}.png" for i, s in enumerate(split)], "split_released": split,
        "label": np.where(np.arange(n) % 2, "a", "b"), "file": files}), "synthetic")
    digest = pd.array([f"{i:064x}" for i in range(n)], dtype="string")
    features = pd.DataFrame({
        "file": pd.array(files, dtype="string"), "sha256": digest, "pixel_xxh128": digest,
        "phash": pd.array(h["phash"], dtype="UInt64"), "dhash": pd.array(h["dhash"], dtype="UInt64"),
        "flat": np.zeros(n, bool), "thumb_index": np.arange(n),
        "status": "ok"})
    return SyntheticScan(manifest, features, thumbs)


# ----------------------------------------------------------------------------- measuring


def _peak_memory_sampler() -> tuple[dict, threading.Event]:
    peak = {"anon_kib": 0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("RssAnon:"):
                        peak["anon_kib"] = max(peak["anon_kib"], int(line.split()[1]))
                        break
            stop.wait(0.01)

    threading.Thread(target=sample, daemon=True).start()
    return peak, stop


def _vm_hwm_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def child(task: str, kind: str, n: int, cache: str, extra: str) -> None:
    """In a fresh interpreter: one measured call; prints one JSON line."""
    from splitscope.boundary import boundary

    s = synthetic_scan(kind, n, Path(cache))
    rows = s.rows()
    b = boundary(s.manifest, "test", "train")
    peak, stop = _peak_memory_sampler()
    stop.wait(0.05)
    base_anon = peak["anon_kib"]
    t = time.perf_counter()
    out: dict = {"task": task, "kind": kind, "rows": n, "queries": len(b.query.rows),
                 "references": len(b.reference.rows)}
    if task == "duplicates":
        from splitscope.relations.duplicates import audit_duplicates

        res = audit_duplicates(s, [b], SearchOptions(transforms=0))
        rec = next(r for r in res.records if r.predicate["name"] == "ncc_nearest")
        out.update(ncc_rows=rec.numerator, pairs_listed=len(res.tables["pairs"]),
                   pair_counts=rec.details.get("notes", {}).get("pairs"))
    elif task in ("ncc_indexed", "ncc_brute"):
        from splitscope.relations.ncc import ncc_search
        from splitscope.relations.ncc_core import ThumbnailRows

        q = ThumbnailRows(s.thumbs, b.query.rows, 96)
        r = ThumbnailRows(s.thumbs, b.reference.rows, 96)
        res = ncc_search(q, r, method="indexed" if task == "ncc_indexed" else "brute")
        out.update(pairs=int(res.params["pairs_total"]),
                   flops=res.params.get("flops"), brute_flops=res.params.get("brute_flops"))
    elif task == "hash":
        from splitscope.relations.hashes import hash_search

        q = rows.iloc[b.query.rows]
        r = rows.iloc[b.reference.rows]
        res = hash_search(q["phash"], q["dhash"], r["phash"], r["dhash"], workers=2)
        out.update(pairs=int(res.n_pairs_total))
    else:
        raise ValueError(task)
    out["seconds"] = time.perf_counter() - t
    stop.set()
    out["peak_rss_mib"] = round(_vm_hwm_kib() / 1024, 1)
    out["peak_anon_mib"] = round(peak["anon_kib"] / 1024, 1)
    out["anon_before_mib"] = round(base_anon / 1024, 1)
    print(json.dumps(out))


def run_child(task: str, kind: str, n: int, cache: Path, extra: str = "") -> dict:
    argv = [sys.executable, __file__, "--child", task, kind, str(n), str(cache), extra]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{task} {kind} {n} failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def project(points: list[dict], key: str, target_pairs: float) -> dict:
    """Fit ``key = a · (Q·R)^b`` through the two largest measured sizes and evaluate it at
    ``target_pairs`` query–reference pairs."""
    (p1, p2) = sorted(points, key=lambda p: p["queries"] * p["references"])[-2:]
    x1, x2 = p1["queries"] * p1["references"], p2["queries"] * p2["references"]
    b = np.log(p2[key] / p1[key]) / np.log(x2 / x1)
    return {"exponent_in_QR": float(b), "projected": float(p2[key] * (target_pairs / x2) ** b)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=5, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="100000,400000")
    ap.add_argument("--brute-max", type=int, default=100000,
                    help="largest size also searched by brute force")
    ap.add_argument("--smooth", type=int, default=20000)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE / "scale")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.child:
        task, kind, n, cache, extra = args.child
        child(task, kind, int(n), cache, extra)
        return {}
    report: dict = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()}}
    if args.smooth:
        report["duplicates_smooth"] = run_child("duplicates", "smooth", args.smooth, args.cache)
        print(json.dumps(report["duplicates_smooth"]), flush=True)
    runs = []
    for n in [int(v) for v in args.sizes.split(",") if v]:
        tasks = ["ncc_indexed", "hash"] + (["ncc_brute"] if n <= args.brute_max else [])
        for task in tasks:
            res = run_child(task, "varied", n, args.cache)
            print(json.dumps(res), flush=True)
            runs.append(res)
    report["search"] = runs
    target = 200_000 * 800_000
    proj = {}
    for task in ("ncc_indexed", "ncc_brute", "hash"):
        pts = [r for r in runs if r["task"] == task]
        if len(pts) >= 2:
            proj[task] = {"seconds": project(pts, "seconds", target),
                          "peak_rss_mib": project(pts, "peak_rss_mib", target)}
        elif len(pts) == 1:  # brute force: time ∝ Q·R
            p = pts[0]
            proj[task] = {"seconds": {"exponent_in_QR": 1.0, "projected": p["seconds"] * target
                                      / (p["queries"] * p["references"])}}
    report["projection_1M"] = {"queries": 200_000, "references": 800_000, **proj}
    emit(report, args.json)
    return report


if __name__ == "__main__":
    main()
