"""A cold ``splitscope audit`` of a generated release of N image files, with every planted
finding checked.

The release (seeded, the same files on every machine) is written once under ``--folder``:
``ROOT/<train|test>/<class>/p<patient>_<index>.<jpg|png>``, four classes, patients of 1–8
images with one class each, 20% of patients on the test side. Each image is smooth random
grey content (an 8×8 random grid resized bicubically) of 64², 96² or 128², stored as JPEG
(quality 90) or, one file in ten, PNG. Planted:

- **a header shortcut**: class ``c1`` is stored at JPEG quality 70 (the header-only probe's
  within-pool balanced accuracy should be above chance, carried by the quantization tables);
- **shared groups**: 3% of patients have their rows on both sides (the group layer's
  overlap);
- **copies**: 0.5% of the test files are byte copies of a training file and 0.5% re-encodes
  (the same pixels saved as JPEG at quality 95, or as PNG), both taking over the source's
  class and patient; the identity layer must flag exactly the byte copies (SHA-256) and NCC
  (nearest, τ = 0.98) exactly the copies of both kinds.

What runs: ``splitscope audit ROOT --workers W --group-regex 'p(?P<group>\\d+)_'`` in a fresh
interpreter with an empty workspace (cold: the scan is included). Recorded: wall seconds, CPU
seconds of the process tree, peak resident memory of the tree (sampled every 0.5 s), the
scan's seconds and each layer's, the audit ÷ scan ratio, and the load average before and
after. Sizes run one after another; the growth curve is read off the JSON.

Usage::

    python benchmarks/bench_release_scale.py --folder /data/scale --sizes 28000
    python benchmarks/bench_release_scale.py --folder /data/scale --sizes 100000,300000,1000000 \\
        --json scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_audit_scale import patients

CLASSES = ("c0", "c1", "c2", "c3")
SIZES = (64, 96, 128)
GROUP_REGEX = r"p(?P<group>\d+)_"


def plan(n: int, seed: int = 0) -> pd.DataFrame:
    """One line per file: split, label, patient, side of the image, format, JPEG quality,
    the training file it copies (-1: none) and how (``byte`` or ``reencode``)."""
    rng = np.random.default_rng(seed)
    patient, label, test = patients(rng, n, len(CLASSES))
    side = np.asarray(SIZES)[rng.integers(len(SIZES), size=n)]
    png = rng.random(n) < 0.1
    quality = np.where(label == 1, 70, 90)
    copy_of = np.full(n, -1, np.int64)
    kind = np.full(n, "", object)
    test_rows, train_rows = np.flatnonzero(test), np.flatnonzero(~test)
    k = max(2, round(0.01 * len(test_rows)))
    copies = np.sort(rng.choice(test_rows, size=min(k, len(test_rows)), replace=False))
    copy_of[copies] = rng.choice(train_rows, size=len(copies), replace=False)
    kind[copies] = np.where(rng.random(len(copies)) < 0.5, "byte", "reencode")
    src = copy_of[copies]
    label[copies], patient[copies] = label[src], patient[src]
    side[copies] = side[src]
    byte = copies[kind[copies] == "byte"]
    png[byte] = png[copy_of[byte]]
    re = copies[kind[copies] == "reencode"]
    png[re] = ~png[copy_of[re]]  # the same pixels in the other format
    quality[re] = 95
    return pd.DataFrame({"split": np.where(test, "test", "train"),
                         "label": np.asarray(CLASSES)[label], "patient": patient,
                         "side": side, "png": png, "quality": quality, "copy_of": copy_of,
                         "kind": kind})


def relpath(p: pd.DataFrame, i: int) -> str:
    r = p.iloc[i]
    return f"{r.split}/{r.label}/p{int(r.patient):07d}_{i:07d}.{'png' if r.png else 'jpg'}"


def pixels(i: int, side: int, seed: int) -> np.ndarray:
    """Smooth random grey content of image ``i``: an 8×8 random grid resized bicubically."""
    from PIL import Image

    rng = np.random.default_rng([seed, i])
    grid = rng.integers(0, 256, (8, 8), dtype=np.uint8)
    img = Image.fromarray(grid).resize((side, side), Image.Resampling.BICUBIC)
    arr = np.asarray(img, dtype=np.int16) + rng.integers(-3, 4, (side, side))
    return np.clip(arr, 0, 255).astype(np.uint8)


def _write(job) -> int:
    root, seed, entries = job
    from PIL import Image

    for i, path, side, png, quality, source, kind in entries:
        target = Path(root) / path
        if target.exists():
            continue
        if kind == "byte":
            target.write_bytes((Path(root) / source).read_bytes())
            continue
        arr = pixels(source if kind == "reencode" else i, side, seed)
        img = Image.fromarray(arr)
        if png:
            img.save(target, format="PNG", compress_level=1)
        else:
            img.save(target, format="JPEG", quality=int(quality))
    return len(entries)


def make_release(folder: Path, n: int, seed: int = 0, workers: int = 2) -> tuple[Path, dict]:
    """The release of ``n`` files under ``folder`` (written once) and its generation time."""
    root = folder / f"release-n{n}-seed{seed}"
    done = root / ".complete"
    p = plan(n, seed)
    if done.exists():
        return root, {"generated_s": None}
    t = time.perf_counter()
    for split in ("train", "test"):
        for c in CLASSES:
            (root / split / c).mkdir(parents=True, exist_ok=True)
    paths = [relpath(p, i) for i in range(n)]
    src = p["copy_of"].to_numpy()
    entries = [(i, paths[i], int(p["side"].iat[i]), bool(p["png"].iat[i]),
                int(p["quality"].iat[i]),
                (paths[src[i]] if p["kind"].iat[i] == "byte" else int(src[i]))
                if src[i] >= 0 else -1, p["kind"].iat[i]) for i in range(n)]
    originals = [e for e in entries if not e[6]]
    copies = [e for e in entries if e[6]]
    step = 2000
    jobs = [(str(root), seed, originals[s:s + step]) for s in range(0, len(originals), step)]
    if workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:
            list(pool.map(_write, jobs))
    else:
        for job in jobs:
            _write(job)
    _write((str(root), seed, copies))  # after their sources exist
    done.write_text("ok\n")
    return root, {"generated_s": round(time.perf_counter() - t, 1)}


class TreeMeter:
    """Peak memory and CPU seconds of a process and its descendants, sampled (a worker's CPU
    counts up to its last sample). Two sums over the tree: resident set (counts a shared or
    mapped page once per process that touches it, so it overstates) and proportional set size
    (PSS: a shared page split among its users, so the sum is the memory the tree costs). The
    PSS timeline lets the peak be placed in a stage."""

    def __init__(self, pid: int, interval: float = 0.5, limit_mib: float | None = None):
        import psutil

        self.proc = psutil.Process(pid)
        self.psutil = psutil
        self.peak_kib = 0
        self.peak_pss_kib = 0
        self.peak_anon_kib = 0
        self.timeline: list[tuple[float, int, int]] = []  # (seconds, PSS KiB, anonymous PSS KiB)
        self.t0 = time.perf_counter()
        self.limit_kib = None if limit_mib is None else limit_mib * 1024
        self.stopped_at: dict | None = None  # set when the tree passed the limit and was killed
        self.cpu: dict[int, float] = {}  # CPU seconds last seen per process of the tree
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, args=(interval,), daemon=True)
        self.thread.start()

    def _loop(self, interval: float) -> None:
        while not self.stop.is_set():
            try:
                procs = [self.proc, *self.proc.children(recursive=True)]
            except self.psutil.Error:
                break
            rss = pss = anon = 0
            for pr in procs:
                try:
                    mem = rollup(pr.pid)
                    rss += mem.get("Rss", 0)
                    pss += mem.get("Pss", 0)
                    anon += mem.get("Pss_Anon", 0)
                    c = pr.cpu_times()
                    self.cpu[pr.pid] = c.user + c.system
                except self.psutil.Error:
                    continue
            self.peak_kib = max(self.peak_kib, rss)
            self.peak_pss_kib = max(self.peak_pss_kib, pss)
            self.peak_anon_kib = max(self.peak_anon_kib, anon)
            self.timeline.append((round(time.perf_counter() - self.t0, 1), pss, anon))
            if self.limit_kib is not None and pss > self.limit_kib and self.stopped_at is None:
                self.stopped_at = {"s": self.timeline[-1][0], "pss_mib": round(pss / 1024, 1)}
                for pr in reversed(procs):  # the machine is protected: the audit is killed
                    try:
                        pr.kill()
                    except self.psutil.Error:
                        pass
            self.stop.wait(interval)


def rollup(pid: int) -> dict:
    """A process's /proc/PID/smaps_rollup in KiB (Linux 4.14+; empty where unreadable)."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if rest.strip().endswith("kB"):
                    out[key] = int(rest.split()[0])
    except OSError:
        pass
    return out


_LAYER_LINE = re.compile(r"^\s*([0-9.]+) .*layer \d+/\d+ (\w+): (started|completed|not |failed)")


def stage_windows(lines: list[str], wall: float) -> list[tuple[str, float, float]]:
    """``(stage, start s, end s)`` from the audit's stamped progress lines: the scan and
    start-up until the first layer starts, each layer from its ``started`` line to its next
    line, and the document (audit.json, lists, report) from the last layer's end to the end."""
    starts, ends = {}, {}
    for line in lines:
        m = _LAYER_LINE.match(line)
        if m:
            at, name, what = float(m.group(1)), m.group(2), m.group(3)
            (starts if what == "started" else ends).setdefault(name, at)
    layers = [(name, at, ends.get(name, wall)) for name, at in starts.items()]
    if not layers:
        return [("scan and start-up", 0.0, wall)]
    first, last = min(a for _, a, _ in layers), max(e for _, _, e in layers)
    return [("scan and start-up", 0.0, first), *layers, ("document", last, wall)]


def stage_peaks(timeline, windows: list[tuple[str, float, float]]) -> dict:
    """Peak PSS and its anonymous part (MiB) in each stage's window (layers that ran beside
    one another share samples: each peak is what the tree held while that stage ran)."""
    out = {}
    for name, lo, hi in windows:
        got = [(pss, anon) for t, pss, anon in timeline if lo <= t <= hi]
        out[name] = ({"pss_mib": round(max(g[0] for g in got) / 1024, 1),
                      "anon_pss_mib": round(max(g[1] for g in got) / 1024, 1)} if got else None)
    return out


def run_audit(root: Path, workers: int, out: Path, workspace: Path,
              limit_mib: float | None = None, log: Path | None = None) -> dict:
    argv = [sys.executable, "-m", "splitscope.cli", "audit", str(root), "--out", str(out),
            "--workspace", str(workspace), "--workers", str(workers), "--group-regex",
            GROUP_REGEX, "--json"]
    load0 = os.getloadavg()
    before = os.times()
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    meter = TreeMeter(proc.pid, limit_mib=limit_mib)
    lines = []  # the audit's progress lines, stamped with seconds since its start
    for line in proc.stderr:
        lines.append(f"{time.perf_counter() - t:8.1f} {line.rstrip()}")
        if log is not None:
            with open(log, "a") as fh:
                fh.write(lines[-1] + "\n")
    proc.wait()
    err = "\n".join(lines)
    wall = time.perf_counter() - t
    meter.stop.set()
    after = os.times()
    if log is not None:  # the memory timeline beside the progress lines
        log.with_suffix(".memory.tsv").write_text("s\tpss_kib\tanon_pss_kib\n" + "".join(
            f"{a}\t{b}\t{c}\n" for a, b, c in meter.timeline))
    if meter.stopped_at is not None:
        raise MemoryError(f"the audit's process tree passed {limit_mib:,.0f} MiB PSS at "
                          f"{meter.stopped_at['s']} s and was killed; its last lines:\n"
                          + "\n".join(lines[-15:]))
    if proc.returncode not in (0, 1, 3) or not (out / "audit.json").is_file():
        raise RuntimeError(f"audit failed ({proc.returncode}): {err[-3000:]}")
    reaped = (after.children_user - before.children_user
              + after.children_system - before.children_system)
    cpu = max(reaped, sum(meter.cpu.values()))
    doc = json.loads((out / "audit.json").read_text())
    layers = {x["layer"]: x.get("duration_s") for x in doc["layers"]}
    scan_s = doc["manifest"]["scan"].get("seconds")
    peaks = stage_peaks(meter.timeline, stage_windows(lines, wall))
    # exit code 3: the audit finished but a layer failed; the run is reported, each layer that
    # did not complete named with its reason
    failed = {x["layer"]: f"{x.get('status')}: {x.get('reason')}" for x in doc["layers"]
              if x.get("status") in ("partial", "not assessed")}
    return {"exit_code": proc.returncode, "layers_not_completed": failed,
            "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "peak_rss_mib": round(meter.peak_kib / 1024, 1),
            "peak_pss_mib": round(meter.peak_pss_kib / 1024, 1),
            "peak_anon_pss_mib": round(meter.peak_anon_kib / 1024, 1),
            "peak_pss_mib_by_stage": peaks, "scan_s": round(scan_s, 1),
            "audit_over_scan": round(wall / scan_s, 2) if scan_s else None,
            "layers_s": {k: round(v, 1) for k, v in layers.items() if v},
            "layer_share": {k: round(v / wall, 3) for k, v in layers.items() if v},
            "load_before": [round(x, 2) for x in load0],
            "load_after": [round(x, 2) for x in os.getloadavg()], "doc": doc}


def check(p: pd.DataFrame, root: Path, doc: dict, out: Path) -> dict:
    """Every planted finding against what the audit wrote: exact sets of test files."""
    flags = pd.read_parquet(out / "lists" / "query_flags.parquet")
    flags = flags[flags["boundary"].astype(str).str.startswith("test")] \
        if "boundary" in flags.columns else flags
    name = flags["path"].astype(str).str.rsplit("/", n=1).str[-1]
    index = name.str.extract(r"_(\d{7})\.")[0].astype(int).to_numpy()
    test = p["split"].to_numpy() == "test"
    byte = set(np.flatnonzero(p["kind"].to_numpy() == "byte"))
    copies = set(np.flatnonzero(p["copy_of"].to_numpy() >= 0))

    def flagged(col: str) -> set:
        v = flags[col].astype("boolean").fillna(False).to_numpy(bool)
        return set(index[v].tolist())

    records = {r["id"]: r for r in doc["records"]}
    overlap = next((r for rid, r in records.items()
                    if rid.startswith("group.overlap[") and "test" in rid), None)
    pt = p["patient"].to_numpy()
    train_patients = set(pt[~test])
    expected_overlap = int(sum(1 for i in np.flatnonzero(test) if pt[i] in train_patients))
    header = records.get("provenance.header_probe.within_pool", {})
    unc = header.get("uncertainty") or {}
    chance = (header.get("details") or {}).get("chance")
    top = (header.get("details") or {}).get("top_fields") or []
    out_ = {
        "byte_copies": {"planted": len(byte), "flagged_sha256": len(flagged("sha256")),
                        "exact": flagged("sha256") == byte},
        "all_copies": {"planted": len(copies), "flagged_ncc": len(flagged("ncc_nearest")),
                       "exact": flagged("ncc_nearest") == copies},
        "group_overlap": {"expected_rows": expected_overlap,
                          "measured_rows": None if overlap is None else overlap.get("numerator"),
                          "exact": overlap is not None
                          and overlap.get("numerator") == expected_overlap},
        "header_shortcut": {"low": unc.get("low"), "chance": chance, "top_fields": top[:3],
                            "found": bool(unc.get("low") is not None and chance is not None
                                          and unc["low"] > chance
                                          and any(f.startswith("jpeg_q") for f in top[:3]))},
    }
    out_["all_recovered"] = all(v["exact"] if "exact" in v else v["found"]
                                for v in out_.values())
    return out_


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", type=Path, required=True,
                    help="where the releases are written (once) and kept")
    ap.add_argument("--sizes", default="28000")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-output", action="store_true",
                    help="keep the audit's output and workspace (FOLDER/audit-nN)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--max-pss-gib", type=float, default=None,
                    help="kill the audit when its process tree's PSS passes this (protects the "
                    "machine; the run is then reported as failed)")
    args = ap.parse_args(argv)
    runs = []
    for n in [int(v) for v in args.sizes.split(",") if v]:
        root, gen = make_release(args.folder, n, args.seed, args.workers)
        p = plan(n, args.seed)
        with tempfile.TemporaryDirectory(prefix="bench-release-", dir=args.folder) as tmp:
            keep = args.folder / f"audit-n{n}"
            out = keep / "out" if args.keep_output else Path(tmp) / "out"
            workspace = keep / "workspace" if args.keep_output else Path(tmp) / "workspace"
            if args.keep_output and keep.exists():
                import shutil

                shutil.rmtree(keep)  # cold: an empty workspace every run
            limit = None if args.max_pss_gib is None else args.max_pss_gib * 1024
            res = run_audit(root, args.workers, out, workspace, limit,
                            args.folder / f"audit-n{n}.log")
            doc = res.pop("doc")
            res["checks"] = check(p, root, doc, out)
        res.update({"files": n, "test_files": int((p["split"] == "test").sum()), **gen,
                    "cpu_count": os.cpu_count()})
        print(json.dumps(res), flush=True)
        runs.append(res)
        if args.json:
            args.json.write_text(json.dumps(runs, indent=2))
    return runs


if __name__ == "__main__":
    main()
