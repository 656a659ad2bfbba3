"""Feature extraction: speed, memory and fast-mode fidelity, side by side.

What runs (every speed run in a fresh interpreter, with the same worker count and the same
chunking, through :func:`splitscope.features.scanning.scan`, so pool start-up, batching and the
cache writes are identical and only the per-file work differs):

``exact``       splitscope exact mode: SHA-256 of the bytes, header fields, decoded-pixel
                digest (XXH3-128), pHash, dHash, 96² thumbnail (bit-identical to imagehash).
``baseline``    the same scan with a per-file extractor that opens each file with Pillow and
                calls ``imagehash.phash``, ``imagehash.dhash`` and
                ``img.convert("L").resize((96, 96), BICUBIC)`` — and nothing else.
``fast``        splitscope fast mode (reduced-scale JPEG decode; no Kermany file is large
                enough for it, so there it does the work of exact mode).
``decode``      the same scan with an extractor that only decodes every file with Pillow and
                computes nothing: the ceiling for any exact-mode extractor run by the scan
                (bit-identical pHash/dHash need every pixel decoded).
``decode_pool`` the bare decoding floor outside splitscope: an already started pool of W
                processes decodes every file and keeps nothing (no manifest, cache or output);
                the ceiling for any exact-mode tool on this machine.
``imagededup``  ``imagededup.methods.PHash().encode_images(dir, recursive=True,
                num_enc_workers=W)`` in another interpreter (``--imagededup-python``; skipped
                when not given or when it does not import). Its own pool, not the scan's.

Data: ``--kermany`` (default ``../shared/data/kermany-chest-xray-224``, 5,840 JPEGs 224²) and a
generated set of ``--n-mri`` (default 4,000) 512×512 MRI-like JPEGs (smooth Gaussian blobs plus
Gaussian noise of sd ``--mri-noise`` grey levels, default 8; grayscale content stored as RGB,
quality 90, seeded), written once to ``--cache``. Noise 8 compresses to about twice the bytes
per pixel of the real c3 brain-MRI JPEGs (harder to decode); ``--mri-noise 3`` matches them.
Memory: peak resident memory of the whole process tree (scan process + forkserver + workers,
sampled from /proc every 50 ms) for exact mode on the 4,000-image set and on a 16,000-image set
made of 4 hard-linked copies of it (distinct paths, so every file is extracted).

Images/s = files extracted / wall seconds of the ``scan()`` call (interpreter start excluded).
Images per CPU-second = files / CPU seconds (user + system) of the whole process tree
(interpreter start and imports included, as for every method); on a machine shared with other
work this is the steadier measure of the work each method does. Each run is repeated
``--repeats`` times, alternating methods; medians are reported, with the 1-minute load
average before each run (what else the machine was doing). ``--methods`` picks the runs.

Usage::

    python benchmarks/bench_features.py --workers 2 --json bench-features.json \\
        --imagededup-python /path/to/venv/bin/python
    python benchmarks/bench_features.py --fidelity-only     # exact vs fast fidelity only
    python benchmarks/bench_features.py --methods exact,fast --n-mri 2000 --repeats 3 \
        --skip-memory --skip-fidelity --imagededup-python /path/to/venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
DEFAULT_KERMANY = ROOT.parent / "shared" / "data" / "kermany-chest-xray-224"
DEFAULT_C3 = ROOT.parent / "shared" / "data" / "c3-brain-mri-yes-no"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "splitscope-bench"


# ----------------------------------------------------------------------------- baseline

def baseline_extract(files, params):
    """Per-file baseline: Pillow open, imagehash pHash and dHash, Pillow 96² thumbnail.

    It returns a raw batch (rows, thumbnails, hashes) like splitscope's own workers, so neither
    side's workers import pandas and the scan builds both tables the same way."""
    import imagehash
    from PIL import Image

    size = params.thumb_size
    thumbs = np.zeros((len(files), size, size), dtype=np.uint8)
    rows = []
    has = np.zeros(len(files), dtype=bool)
    ph = np.zeros(len(files), dtype=np.uint64)
    dh = np.zeros(len(files), dtype=np.uint64)
    for i, path in enumerate(files):
        try:
            with Image.open(path) as img:
                p = imagehash.phash(img)
                d = imagehash.dhash(img)
                thumbs[i] = np.asarray(img.convert("L").resize((size, size),
                                                               Image.Resampling.BICUBIC))
            rows.append({"file": path, "status": "ok"})
            ph[i], dh[i], has[i] = int(str(p), 16), int(str(d), 16), True
        except Exception as exc:  # noqa: BLE001
            rows.append({"file": path, "status": type(exc).__name__})
    return {"rows": rows, "thumbs": thumbs, "has_thumb": has, "phash": ph, "dhash": dh}


def decode_only_extract(files, params):
    """Decode floor: read each file and decode all its pixels with Pillow, nothing else.

    Exact mode must decode every pixel (imagehash's pHash and dHash are computed from the full
    image), so no exact-mode extractor run through the same scan can beat this rate."""
    from PIL import Image

    size = params.thumb_size
    rows = []
    for path in files:
        try:
            with Image.open(path) as img:
                img.load()
            rows.append({"file": path, "status": "ok"})
        except Exception as exc:  # noqa: BLE001
            rows.append({"file": path, "status": type(exc).__name__})
    n = len(files)
    return {"rows": rows, "thumbs": np.zeros((n, size, size), dtype=np.uint8),
            "has_thumb": np.zeros(n, dtype=bool), "phash": np.zeros(n, dtype=np.uint64),
            "dhash": np.zeros(n, dtype=np.uint64)}


def _decode_chunk(paths):
    from PIL import Image

    for path in paths:
        with Image.open(path) as img:
            img.load()
    return len(paths)


def child_decode_pool(folder: str, workers: int) -> None:
    """In a fresh interpreter: the bare decoding floor, outside splitscope. A plain process pool
    (already started, workers already importing Pillow) decodes every file in chunks of 64 and
    keeps nothing: no manifest, no cache, no hashing, no output. Print JSON."""
    from concurrent.futures import ProcessPoolExecutor

    files = sorted(str(p) for p in Path(folder).rglob("*")
                   if p.is_file() and not p.name.startswith("."))
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_decode_chunk, [files[:2]] * workers))  # start and warm the workers
        t = time.perf_counter()
        n = sum(pool.map(_decode_chunk, [files[i:i + 64] for i in range(0, len(files), 64)]))
        seconds = time.perf_counter() - t
    print(json.dumps({"method": "decode_pool", "files": n, "ok": n, "seconds": seconds,
                      "images_per_s": n / seconds}))


# ----------------------------------------------------------------------------- data

def _mri_like(rng: np.random.Generator, size: int = 512, noise: float = 8.0) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.zeros((size, size))
    for _ in range(6):
        cy, cx = rng.random(2) * 0.8 + 0.1
        s = rng.uniform(0.03, 0.2)
        img += rng.uniform(0.3, 1.0) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
    img = img / img.max() * 200 + rng.normal(0, noise, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _write_mri(args):
    start, stop, folder, seed, noise = args
    from PIL import Image

    for i in range(start, stop):
        rng = np.random.default_rng([seed, i])
        path = Path(folder) / f"class{i % 2}" / f"mri_{i:05d}.jpg"
        if not path.exists():
            Image.fromarray(_mri_like(rng, noise=noise)).convert("RGB").save(path, quality=90)
    return stop - start


def make_mri_set(cache: Path, n: int, seed: int = 0, workers: int = 2,
                 noise: float = 8.0) -> Path:
    """``n`` seeded 512² MRI-like JPEGs under ``cache`` (generated once, then reused).

    ``noise`` is the standard deviation of the added Gaussian noise (grey levels). The default 8
    gives ~0.31 compressed bytes per pixel, about twice the real c3-brain-mri-yes-no JPEGs
    (median 0.156); noise 3 gives ~0.15 and matches them. Decoding cost grows with the
    compressed size, so the default is the harder case."""
    folder = cache / (f"mri512-n{n}-seed{seed}" + ("" if noise == 8.0 else f"-noise{noise:g}"))
    done = folder / ".complete"
    if done.exists():
        return folder
    for c in range(2):
        (folder / f"class{c}").mkdir(parents=True, exist_ok=True)
    step = 250
    jobs = [(s, min(s + step, n), str(folder), seed, noise) for s in range(0, n, step)]
    if workers <= 1:
        for job in jobs:
            _write_mri(job)
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            list(pool.map(_write_mri, jobs))
    done.write_text("ok\n")
    return folder


def make_grown_set(base: Path, copies: int) -> Path:
    """``copies`` hard-linked copies of ``base`` (distinct paths; falls back to copying)."""
    folder = base.parent / f"{base.name}-x{copies}"
    done = folder / ".complete"
    if done.exists():
        return folder
    for k in range(copies):
        for src in sorted(base.rglob("*.jpg")):
            dst = folder / f"copy{k}" / src.relative_to(base)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if not dst.exists():
                try:
                    os.link(src, dst)
                except OSError:
                    shutil.copyfile(src, dst)
    done.write_text("ok\n")
    return folder


# ----------------------------------------------------------------------------- measuring

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _tree_sample(root_pid: int) -> tuple[int, int, int, dict[int, int]]:
    """Resident memory (sum and max over the tree, and the sum of anonymous memory: heap rather
    than file-backed pages such as a written memmap; KiB) and CPU ticks per process of
    ``root_pid`` and all its descendants, read from /proc."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        pid = int(entry)
        stats[pid] = fields
        children.setdefault(int(fields[1]), []).append(pid)
    total, largest, anon, cpu, stack = 0, 0, 0, {}, [root_pid]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        fields = stats.get(pid)
        if fields is None:
            continue
        cpu[pid] = int(fields[11]) + int(fields[12])  # utime + stime
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        kib = int(line.split()[1])
                        total += kib
                        largest = max(largest, kib)
                    elif line.startswith("RssAnon:"):
                        anon += int(line.split()[1])
                        break
        except OSError:
            continue
    return total, largest, anon, cpu


class TreeSampler:
    """Samples the process tree of ``pid`` every ``interval`` seconds in a thread, from start to
    :meth:`stop`: peak resident memory (sum over the tree, largest process, anonymous) and
    CPU seconds (each process's last sample, so workers of a fork server or of loky count too;
    a process that ends between samples loses at most ``interval``)."""

    def __init__(self, pid: int, interval: float = 0.05):
        self.pid, self.interval = pid, interval
        self.peak = {"sum": 0, "max": 0, "anon": 0}
        self.ticks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total, largest, anon, ticks = _tree_sample(self.pid)
            self.peak["sum"] = max(self.peak["sum"], total)
            self.peak["max"] = max(self.peak["max"], largest)
            self.peak["anon"] = max(self.peak["anon"], anon)
            for pid, t in ticks.items():
                self.ticks[pid] = max(self.ticks.get(pid, 0), t)
            self._stop.wait(self.interval)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return {"peak_rss_tree_mib": round(self.peak["sum"] / 1024, 1),
                "peak_rss_largest_process_mib": round(self.peak["max"] / 1024, 1),
                "peak_rss_anon_tree_mib": round(self.peak["anon"] / 1024, 1),
                "cpu_seconds_tree": round(sum(self.ticks.values()) / _TICK, 2)}


def run_child(argv: list[str], src: Path | None = None) -> dict:
    """Run ``argv`` (its last stdout line is JSON) while sampling its process tree every
    50 ms (:class:`TreeSampler`). The 1-minute load average just before the run is kept with it
    (``load_1min``): on a shared machine it says what else was running."""
    load_before = os.getloadavg()[0]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore",
                                 **({"PYTHONPATH": str(src)} if src is not None else {})})
    sampler = TreeSampler(proc.pid)
    out, err = proc.communicate()
    sampled = sampler.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed ({proc.returncode}): {err[-2000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result.update(sampled)
    result["load_1min"] = round(load_before, 2)
    return result


def child_scan(folder: str, method: str, workers: int) -> None:
    """In a fresh interpreter: one scan of ``folder`` with ``method``; print JSON."""
    if method == "decode_pool":
        child_decode_pool(folder, workers)
        return
    from splitscope.features.scanning import scan

    kwargs = {"workers": workers, "progress": False}
    if method == "baseline":
        kwargs["extractor"] = baseline_extract
    elif method == "decode":
        kwargs["extractor"] = decode_only_extract
    elif method == "fast":
        kwargs["mode"] = "fast"
    # BENCH_WORKSPACE_ROOT: where the scan's workspace goes (e.g. a tmpfs, so the cache's
    # fsyncs do not wait on other users' disk traffic); default the system temporary folder
    root = os.environ.get("BENCH_WORKSPACE_ROOT") or None
    with tempfile.TemporaryDirectory(prefix="bench-ws-", dir=root) as ws:
        t = time.perf_counter()
        result = scan(folder, Path(ws) / "workspace", **kwargs)
        seconds = time.perf_counter() - t
        feats = result.features
        n = len(feats)
        n_ok = int((feats["status"] == "ok").sum())
    print(json.dumps({"method": method, "files": n, "ok": n_ok, "seconds": seconds,
                      "images_per_s": n / seconds}))


_IMAGEDEDUP_SNIPPET = r"""
import json, sys, time, types
# imagededup's package __init__ files import its CNN method and a torchvision model wrapper;
# PHash uses neither. Where torchvision cannot load (CPU torch without a matching
# torchvision build) they are replaced by empty stand-ins; the PHash code path is untouched.
try:
    import torchvision  # noqa: F401
    stubbed = False
except Exception:
    for name, attr in (("imagededup.methods.cnn", "CNN"), ("imagededup.utils.models", "CustomModel")):
        m = types.ModuleType(name); setattr(m, attr, type(attr, (), {})); sys.modules[name] = m
    stubbed = True
import imagededup
from imagededup.methods import PHash
folder, workers = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
enc = PHash(verbose=False).encode_images(image_dir=folder, recursive=True, num_enc_workers=workers)
seconds = time.perf_counter() - t
n = len(enc)
print(json.dumps({"method": "imagededup", "files": n, "ok": sum(v is not None for v in enc.values()),
                  "seconds": seconds, "images_per_s": n / seconds,
                  "version": imagededup.__version__, "cnn_module_stubbed": stubbed}))
"""


def imagededup_run(python: str, folder: Path, workers: int) -> dict:
    return run_child([python, "-c", _IMAGEDEDUP_SNIPPET, str(folder), str(workers)])


def _per_cpu(res: dict) -> float:
    """Files per CPU-second of the whole process tree (interpreter start and imports included,
    the same for every method); far less sensitive than wall time to other load."""
    return res["files"] / res["cpu_seconds_tree"] if res["cpu_seconds_tree"] else float("nan")


def speed_table(name: str, folder: Path, methods: list[str], workers: int, repeats: int,
                imagededup_python: str | None, baseline_src: Path | None = None,
                baseline_methods: tuple[str, ...] = ("exact",)) -> dict:
    """Alternate the methods ``repeats`` times on one data set; medians per method.
    ``baseline_src``: each of ``baseline_methods`` (default exact mode) also runs with that
    source tree first on the path (``<method>_baseline_src``), e.g. the code before a change."""
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    baseline_plan = [(f"{m}_baseline_src", m, baseline_src) for m in baseline_methods
                     if baseline_src is not None and m != "decode_pool"]
    for label, _, _ in baseline_plan:
        runs[label] = []
    if imagededup_python:
        runs["imagededup"] = []
    for r in range(repeats):
        plan = [(m, m, None) for m in methods] + baseline_plan
        for label, method, src in plan:
            res = run_child([sys.executable, str(HERE), "_scan", str(folder), method,
                             str(workers)], src=src)
            runs[label].append(res)
            print(f"  {name} {label:10s} run {r + 1}: {res['images_per_s']:8.1f} images/s "
                  f"({res['files']} files, {res['seconds']:.2f} s wall, "
                  f"{res['cpu_seconds_tree']:.1f} CPU-s, {_per_cpu(res):.1f} images/CPU-s, "
                  f"load {res['load_1min']:.2f})", flush=True)
        if imagededup_python:
            try:
                res = imagededup_run(imagededup_python, folder, workers)
            except RuntimeError as exc:
                print(f"  imagededup failed: {exc}", flush=True)
                runs.pop("imagededup")
                imagededup_python = None
                continue
            runs["imagededup"].append(res)
            print(f"  {name} imagededup run {r + 1}: {res['images_per_s']:8.1f} images/s "
                  f"({res['seconds']:.2f} s wall, {res['cpu_seconds_tree']:.1f} CPU-s, "
                  f"{_per_cpu(res):.1f} images/CPU-s, load {res['load_1min']:.2f})", flush=True)
    summary = {}
    for method, rs in runs.items():
        if not rs:
            continue
        summary[method] = {
            "images_per_s_median": statistics.median(r["images_per_s"] for r in rs),
            "images_per_s_runs": [round(r["images_per_s"], 1) for r in rs],
            "images_per_cpu_s_median": statistics.median(_per_cpu(r) for r in rs),
            "images_per_cpu_s_runs": [round(_per_cpu(r), 1) for r in rs],
            "files": rs[0]["files"],
            "ok": rs[0]["ok"],
            "peak_rss_tree_mib_max": max(r["peak_rss_tree_mib"] for r in rs),
            "load_1min_runs": [r["load_1min"] for r in rs],
            **({"version": rs[0].get("version"), "cnn_module_stubbed":
                rs[0].get("cnn_module_stubbed")} if method == "imagededup" else {}),
        }
    base = summary.get("baseline", {}).get("images_per_s_median")
    ided = summary.get("imagededup", {}).get("images_per_s_median")
    base_cpu = summary.get("baseline", {}).get("images_per_cpu_s_median")
    ided_cpu = summary.get("imagededup", {}).get("images_per_cpu_s_median")
    for method, s in summary.items():
        if base:
            s["ratio_vs_baseline"] = s["images_per_s_median"] / base
            s["cpu_ratio_vs_baseline"] = s["images_per_cpu_s_median"] / base_cpu
        if ided:
            s["ratio_vs_imagededup"] = s["images_per_s_median"] / ided
            s["cpu_ratio_vs_imagededup"] = s["images_per_cpu_s_median"] / ided_cpu
    return summary


def memory_table(small: Path, large: Path, workers: int) -> dict:
    out = {}
    for label, folder in (("small", small), ("large", large)):
        res = run_child([sys.executable, str(HERE), "_scan", str(folder), "exact", str(workers)])
        out[label] = {k: res[k] for k in ("files", "seconds", "images_per_s", "cpu_seconds_tree",
                                          "peak_rss_tree_mib", "peak_rss_largest_process_mib",
                                          "peak_rss_anon_tree_mib")}
        print(f"  memory {res['files']:6d} files: peak tree RSS {res['peak_rss_tree_mib']} MiB "
              f"(anonymous {res['peak_rss_anon_tree_mib']} MiB), largest process "
              f"{res['peak_rss_largest_process_mib']} MiB", flush=True)
    out["growth_tree_rss"] = out["large"]["peak_rss_tree_mib"] / out["small"]["peak_rss_tree_mib"]
    return out


# ----------------------------------------------------------------------------- fidelity

def fidelity(folders: dict[str, Path], limit: int | None = None) -> dict:
    """Exact vs fast features of the same files: thumbnail NCC and hash bit differences."""
    from splitscope.features.extract import FeatureParams, extract_files

    out = {}
    for name, folder in folders.items():
        files = sorted(str(p) for p in folder.rglob("*") if p.is_file()
                       and not p.name.startswith("."))[:limit]
        ex, te = extract_files(files, FeatureParams())
        fa, tf = extract_files(files, FeatureParams(mode="fast"))
        ok = (ex["status"] == "ok").to_numpy() & (fa["status"] == "ok").to_numpy()
        reduced = ok & fa["pixel_xxh128"].isna().to_numpy()
        n_red, pixels = int(reduced.sum()), te.shape[1] * te.shape[2]
        x = te[reduced].reshape(n_red, pixels).astype(np.float64)
        y = tf[reduced].reshape(n_red, pixels).astype(np.float64)
        x -= x.mean(axis=1, keepdims=True)
        y -= y.mean(axis=1, keepdims=True)
        rho = (x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1) + 1e-12)

        def bits(col, ex=ex, fa=fa, reduced=reduced):
            a = ex.loc[reduced, col].to_numpy(dtype=np.uint64)
            b = fa.loc[reduced, col].to_numpy(dtype=np.uint64)
            return np.array([int(v).bit_count() for v in a ^ b], dtype=np.int64)

        pb, db = bits("phash"), bits("dhash")

        def dist(v):
            if len(v) == 0:
                return None
            return {"median": float(np.median(v)), "p95": float(np.percentile(v, 95)),
                    "max": float(v.max()), "min": float(v.min()),
                    "histogram": {int(k): int(c) for k, c in zip(*np.unique(v, return_counts=True))}
                    if v.dtype.kind == "i" else None}

        same = ok & ~reduced
        out[name] = {
            "files": len(files),
            "decoded_both_modes": int(ok.sum()),
            "reduced_scale_in_fast_mode": int(reduced.sum()),
            "identical_features_when_not_reduced": bool(
                (ex.loc[same, "phash"].to_numpy() == fa.loc[same, "phash"].to_numpy()).all()
                and np.array_equal(te[same], tf[same])),
            "thumbnail_ncc": None if not len(rho) else {
                "median": float(np.median(rho)), "min": float(rho.min()),
                "p05": float(np.percentile(rho, 5))},
            "phash_bit_differences": dist(pb),
            "dhash_bit_differences": dist(db),
        }
        print(f"  fidelity {name}: {json.dumps(out[name])}", flush=True)
    return out


# ----------------------------------------------------------------------------- main

def _print_speed(name: str, summary: dict) -> None:
    def x(v):
        return "" if v is None else f"{v:.2f}x"

    print(f"\n{name}  (medians; wall = images/s of the scan call, cpu = images per CPU-second "
          f"of the process tree)")
    print(f"  {'method':19s} {'wall img/s':>10s} {'vs base':>8s} {'vs idd':>8s} "
          f"{'img/CPU-s':>10s} {'vs base':>8s} {'vs idd':>8s} {'peak RSS MiB':>13s} "
          f"{'load (1 min)':>18s}")
    for method, s in summary.items():
        load = "–".join(f"{v:.1f}" for v in (min(s["load_1min_runs"]), max(s["load_1min_runs"])))
        print(f"  {method:19s} {s['images_per_s_median']:10.1f} {x(s.get('ratio_vs_baseline')):>8s}"
              f" {x(s.get('ratio_vs_imagededup')):>8s} {s['images_per_cpu_s_median']:10.1f}"
              f" {x(s.get('cpu_ratio_vs_baseline')):>8s} {x(s.get('cpu_ratio_vs_imagededup')):>8s}"
              f" {s['peak_rss_tree_mib_max']:13.1f} {load:>18s}")


METHODS = ("exact", "fast", "baseline", "decode", "decode_pool")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_scan":
        child_scan(argv[1], argv[2], int(argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kermany", type=Path, default=DEFAULT_KERMANY)
    ap.add_argument("--c3", type=Path, default=DEFAULT_C3)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                    help="where the generated MRI-like set is written once")
    ap.add_argument("--n-mri", type=int, default=4000)
    ap.add_argument("--mri-noise", type=float, default=8.0,
                    help="noise sd of the generated set (8: default; 3: matches real MRI JPEGs)")
    ap.add_argument("--grow", type=int, default=4, help="copies of the MRI set for memory")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--imagededup-python", default=None,
                    help="python of an environment where imagededup is installed")
    ap.add_argument("--workspace-root", type=Path, default=None,
                    help="folder for the scans' temporary workspaces (default: the system "
                         "temporary folder; a tmpfs such as /dev/shm takes the cache's fsyncs "
                         "off a shared disk)")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="also run exact mode with this source tree (e.g. the previous code)")
    ap.add_argument("--baseline-methods", default="exact",
                    help="the scan methods run with --baseline-src, comma-separated (default "
                         "exact; e.g. exact,decode)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"speed runs, comma-separated, of {', '.join(METHODS)} (imagededup "
                         f"runs too when --imagededup-python is given)")
    ap.add_argument("--skip-kermany", action="store_true")
    ap.add_argument("--skip-mri", action="store_true",
                    help="no speed runs on the generated 512² set")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    ap.add_argument("--skip-fidelity", action="store_true")
    ap.add_argument("--fidelity-only", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.workspace_root is not None:
        os.environ["BENCH_WORKSPACE_ROOT"] = str(args.workspace_root)  # read by the children

    report: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "workers": args.workers,
        "repeats": args.repeats,
        "workspace_root": str(args.workspace_root) if args.workspace_root else None,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average_at_start": os.getloadavg()},
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(f"generating / reusing {args.n_mri} MRI-like 512² JPEGs in {args.cache}", flush=True)
    mri = make_mri_set(args.cache, args.n_mri, workers=args.workers, noise=args.mri_noise)

    if not args.skip_fidelity or args.fidelity_only:
        folders = {"mri512": mri}
        if args.c3.is_dir():
            folders["c3-brain-mri-yes-no"] = args.c3
        if args.kermany.is_dir():
            folders["kermany-chest-xray-224"] = args.kermany
        report["fidelity"] = fidelity(folders, limit=1000)
    if args.fidelity_only:
        _write(report, args.json)
        return 0

    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        ap.error(f"unknown method(s) {', '.join(unknown)}; use {', '.join(METHODS)}")
    baseline_methods = tuple(m for m in args.baseline_methods.split(",") if m)
    if set(baseline_methods) - set(METHODS):
        ap.error(f"unknown baseline method(s) {', '.join(sorted(set(baseline_methods) - set(METHODS)))}")
    report["speed"] = {}
    if not args.skip_speed and not args.skip_kermany and args.kermany.is_dir():
        print(f"speed on {args.kermany}", flush=True)
        report["speed"]["kermany-chest-xray-224"] = speed_table(
            "kermany", args.kermany, methods, args.workers, args.repeats,
            args.imagededup_python, args.baseline_src, baseline_methods)
    if not args.skip_speed and not args.skip_mri:
        print(f"speed on {mri}", flush=True)
        report["speed"]["mri512"] = speed_table(
            "mri512", mri, methods, args.workers, args.repeats, args.imagededup_python,
            args.baseline_src, baseline_methods)
    if not args.skip_memory:
        grown = make_grown_set(mri, args.grow)
        print(f"memory: {mri} vs {grown}", flush=True)
        report["memory_exact"] = memory_table(mri, grown, args.workers)
    report["machine"]["load_average_at_end"] = os.getloadavg()
    for name, summary in report["speed"].items():
        _print_speed(name, summary)
    if "memory_exact" in report:
        m = report["memory_exact"]
        print(f"\nmemory (exact, {args.workers} workers): {m['small']['files']} files "
              f"{m['small']['peak_rss_tree_mib']} MiB -> {m['large']['files']} files "
              f"{m['large']['peak_rss_tree_mib']} MiB (x{m['growth_tree_rss']:.2f}); anonymous "
              f"{m['small']['peak_rss_anon_tree_mib']} -> {m['large']['peak_rss_anon_tree_mib']} "
              f"MiB; largest process {m['small']['peak_rss_largest_process_mib']} -> "
              f"{m['large']['peak_rss_largest_process_mib']} MiB")
    _write(report, args.json)
    return 0


def _write(report: dict, path: Path | None) -> None:
    if path is not None:
        path.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
