"""Wall time of a full, cold ``splitscope audit`` and of each of its layers.

What runs: ``splitscope audit ROOT --workspace <fresh> --out <fresh>`` in a fresh interpreter
(cold: an empty workspace, so the scan is included), with ``--workers W``. The audit's own
layer table gives the seconds of each layer; the scan is the rest. Each set is audited
``--repeats`` times, alternating sets; medians are reported.

Sets:

``kermany``  the Kermany chest X-ray set re-saved at 224² (``--kermany``, default
             ``../shared/data/kermany-chest-xray-224``, 5,840 JPEGs), group regex on the
             patient id.
``mixed7k``  a generated release of ``--n`` (default 7,000) MRI-like JPEGs, written once into
             ``--cache``: ROOT/<train|test>/<class>/file, four classes, 80/20 split, half of the
             files 512² and half 224², JPEG quality from {70, 80, 90, 95}, chroma subsampling
             4:2:0 or 4:4:4, some progressive, grey stored as L or RGB. Size and quality lean
             on the class (a planted header shortcut the provenance layer should find), and
             2% of the test files are byte copies or re-encodes of training files (planted
             near-duplicates). Seeded; the same files on every machine.

``list16``   a list release of ``--list-rows`` (default 10,000) rows over 16 Kermany files
             (4 per split × class, copied once into ``--cache``), each row a random one of
             them on a random side (20% test): cost that should follow the 16 files, not
             the rows.

With ``--baseline-src DIR`` the same audits also run with another source tree first on the
path (e.g. the previous release's ``src/``), interleaved, and the report gives the wall and
CPU ratios and which records' estimates differ.

Usage::

    python benchmarks/bench_audit.py --workers 2 --json bench-audit.json
    python benchmarks/bench_audit.py --baseline-src ../main/src --repeats 2
    python benchmarks/bench_audit.py --sets mixed7k --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_features import TreeSampler
from bench_output import emit

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
DEFAULT_KERMANY = ROOT.parent / "shared" / "data" / "kermany-chest-xray-224"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "splitscope-bench"
CLASSES = ("glioma", "meningioma", "notumor", "pituitary")


def _mri_like(rng: np.random.Generator, size: int) -> np.ndarray:
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.zeros((size, size))
    for _ in range(5):
        cy, cx = rng.random(2) * 0.8 + 0.1
        s = rng.uniform(0.03, 0.2)
        img += rng.uniform(0.3, 1.0) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
    img = img / img.max() * 200 + rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _plan(n: int, seed: int) -> list[dict]:
    """One entry per file: split, class, size, quality, subsampling, progressive, mode, and
    the index of a training file it copies (-1: none)."""
    rng = np.random.default_rng(seed)
    n_test = n // 5
    plan = []
    for i in range(n):
        c = int(rng.integers(len(CLASSES)))
        lean = 0.7 if c % 2 else 0.3  # classes 1 and 3 are mostly 512²
        plan.append({
            "i": i, "split": "test" if i >= n - n_test else "train", "label": CLASSES[c],
            "size": 512 if rng.random() < lean else 224,
            "quality": int(rng.choice((70, 80, 90, 95), p=(
                (0.1, 0.2, 0.3, 0.4) if c < 2 else (0.4, 0.3, 0.2, 0.1)))),
            "subsampling": int(rng.choice((0, 2))), "progressive": bool(rng.random() < 0.2),
            "mode": "L" if rng.random() < 0.5 else "RGB", "copy_of": -1})
    n_train = n - n_test
    for e in plan[n_train:]:
        if rng.random() < 0.02:
            e["copy_of"] = int(rng.integers(n_train))
    return plan


def _path(folder: Path, e: dict) -> Path:
    return folder / e["split"] / e["label"] / f"img_{e['i']:05d}.jpg"


def _write(args):
    folder, seed, entries, originals = args
    from PIL import Image

    folder = Path(folder)
    for e in entries:
        path = _path(folder, e)
        if path.exists():
            continue
        if e["copy_of"] >= 0:
            src = originals[e["copy_of"]]
            img = Image.open(_path(folder, src))
            if e["i"] % 2:  # a byte copy, else a re-encode at another quality
                path.write_bytes(_path(folder, src).read_bytes())
                continue
            img.save(path, quality=85)
            continue
        rng = np.random.default_rng([seed, e["i"]])
        img = Image.fromarray(_mri_like(rng, e["size"])).convert(e["mode"])
        img.save(path, quality=e["quality"], subsampling=e["subsampling"],
                 progressive=e["progressive"])
    return len(entries)


def make_mixed_set(cache: Path, n: int = 7000, seed: int = 0, workers: int = 1) -> Path:
    """The ``mixed7k`` release (see the module docstring), generated once under ``cache``."""
    folder = cache / f"mixed-n{n}-seed{seed}"
    done = folder / ".complete"
    if done.exists():
        return folder
    plan = _plan(n, seed)
    for e in plan:
        _path(folder, e).parent.mkdir(parents=True, exist_ok=True)
    fresh = [e for e in plan if e["copy_of"] < 0]
    copies = [e for e in plan if e["copy_of"] >= 0]
    step = 250
    jobs = [(str(folder), seed, fresh[s:s + step], None) for s in range(0, len(fresh), step)]
    if workers <= 1:
        for job in jobs:
            _write(job)
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            list(pool.map(_write, jobs))
    _write((str(folder), seed, copies, plan))  # after their originals exist
    done.write_text("ok\n")
    return folder


def make_list_set(cache: Path, kermany: Path, rows: int = 10_000, seed: int = 0) -> Path:
    """The ``list16`` release (see the module docstring), written once under ``cache``;
    returns its list file."""
    import shutil

    import pandas as pd

    folder = cache / f"list16-rows{rows}-seed{seed}"
    listed = folder / "release.csv"
    if listed.exists():
        return listed
    picks = []
    for split in ("train", "test"):
        for label in ("NORMAL", "PNEUMONIA"):
            for f in sorted((kermany / split / label).iterdir())[:4]:
                rel = f"files/{split}/{label}/{f.name}"
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, folder / rel)
                picks.append((rel, label))
    rng = np.random.default_rng(seed)
    idx = rng.integers(len(picks), size=rows)
    pd.DataFrame({"path": [picks[i][0] for i in idx],
                  "split": np.where(rng.random(rows) < 0.2, "test", "train"),
                  "label": [picks[i][1] for i in idx]}).to_csv(listed, index=False)
    return listed


def run_audit(folder: Path, workers: int, group_regex: str | None,
              src: Path | None = None) -> dict:
    """One cold audit of ``folder`` in a fresh interpreter: wall seconds, CPU seconds of the
    process tree and seconds per layer. ``src`` puts another source tree first on the path
    (the baseline's code)."""
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        out = Path(tmp) / "out"
        argv = [sys.executable, "-m", "splitscope.cli", "audit", str(folder), "--out", str(out),
                "--workspace", str(Path(tmp) / "ws"), "--workers", str(workers), "--json"]
        if group_regex:
            argv += ["--group-regex", group_regex]
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = str(src)
        t = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        sampler = TreeSampler(proc.pid)  # the scan's and the fits' workers included
        _, err = proc.communicate()
        seconds = time.perf_counter() - t
        cpu = sampler.stop()["cpu_seconds_tree"]
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"audit failed ({proc.returncode}): {err[-2000:]}")
        doc = json.loads((out / "audit.json").read_text())
    layers = {}
    for layer in doc.get("layers", []):
        layers[layer["layer"]] = layer.get("duration_s")
    records = {r["id"]: r.get("estimate") for r in doc.get("records", [])}
    scan_s = doc.get("manifest", {}).get("scan", {}).get("seconds")
    return {"seconds": seconds, "cpu_seconds": cpu, "layers": layers, "records": records,
            "scan_seconds": scan_s}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="kermany,mixed7k")
    ap.add_argument("--kermany", type=Path, default=DEFAULT_KERMANY)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--n", type=int, default=7000)
    ap.add_argument("--list-rows", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--generate-only", action="store_true")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="another source tree (e.g. a previous release's src/) audited "
                         "side by side, interleaved, as the baseline")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    sets = {}
    for name in args.sets.split(","):
        if name == "kermany":
            if args.kermany.exists():
                sets[name] = (args.kermany, r"(?P<group>person\d+)_")
            else:
                print(f"skipping kermany: {args.kermany} not found", file=sys.stderr)
        elif name == "list16":
            if args.kermany.exists():
                sets[name] = (make_list_set(args.cache, args.kermany, args.list_rows), None)
            else:
                print(f"skipping list16: {args.kermany} not found", file=sys.stderr)
        elif name == "mixed7k":
            sets[name] = (make_mixed_set(args.cache, args.n, workers=args.workers), None)
        else:
            raise SystemExit(f"unknown set {name!r}")
    report: dict = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
                    "workers": args.workers, "sets": {}}
    if args.generate_only:
        print(json.dumps({k: str(v[0]) for k, v in sets.items()}))
        return report
    codes = {"current": None} if args.baseline_src is None else {
        "current": None, "baseline": args.baseline_src}
    runs: dict[str, list[dict]] = {f"{k}/{c}": [] for k in sets for c in codes}
    for _ in range(args.repeats):  # alternating sets and code, so all see the same load
        for name, (folder, regex) in sets.items():
            for code, src in codes.items():
                runs[f"{name}/{code}"].append(run_audit(folder, args.workers, regex, src))
    for key, rs in runs.items():
        name = key.split("/")[0]
        layer_names = sorted({k for r in rs for k in r["layers"]})
        report["sets"][key] = {
            "folder": str(sets[name][0]), "repeats": len(rs),
            "seconds_median": statistics.median(r["seconds"] for r in rs),
            "seconds_all": [round(r["seconds"], 2) for r in rs],
            "cpu_seconds_median": statistics.median(r["cpu_seconds"] for r in rs),
            "audit_over_scan": [round(r["seconds"] / r["scan_seconds"], 2) for r in rs
                                if r.get("scan_seconds")],
            "layer_seconds_median": {
                k: statistics.median(r["layers"][k] for r in rs if r["layers"].get(k) is not None)
                for k in layer_names if any(r["layers"].get(k) is not None for r in rs)},
            "records": rs[-1]["records"]}
    if args.baseline_src is not None:
        for name in sets:
            cur, base = report["sets"][f"{name}/current"], report["sets"][f"{name}/baseline"]
            same = {k for k, v in cur["records"].items() if base["records"].get(k) == v}
            report["sets"][f"{name}/current"]["vs_baseline"] = {
                "wall_ratio": base["seconds_median"] / cur["seconds_median"],
                "cpu_ratio": base["cpu_seconds_median"] / cur["cpu_seconds_median"],
                "records_with_equal_estimate": len(same),
                "records_differing": sorted(set(cur["records"]) - same)}
    emit(report, args.json)
    return report


if __name__ == "__main__":
    main()
