"""The whole audit past the scan, stage by stage, on synthetic populations of 20k to 400k rows.

No image files are needed. A population is written as a real feature workspace by the
scan's own machinery (``splitscope.features.scanning.scan`` with an ``extractor`` that
returns synthetic features instead of decoding files), then ``splitscope.audit`` runs
every layer on it exactly as on a scanned release: its scan step finds every file in the
cache (``extracted`` 0) and the layers, the document, the lists and the report follow.

The population (seeded, the same on every machine), ``n`` rows, four classes:

- patients of 1–8 rows (one class each); a patient's rows are on one side of the split,
  except 3% of patients whose rows straddle it; 20% of rows are test;
- header fields from 64 real JPEG headers (512² or 224², quality 70/80/90/95, 4:2:0 or 4:4:4,
  progressive or not, L or RGB), parsed by ``splitscope.features.header``; size and quality
  lean on the class (a planted construction shortcut), file size varies with content;
- 96² thumbnails of smooth random content (``bench_scale.varied``), with a faint class
  brightness offset (2 grey levels per class); pHash and dHash are those of the thumbnails,
  and the intensity statistics are ``splitscope.features.stats.image_stats`` of them;
- 1% of rows are planted copies: test rows copying a random training row (label and patient
  taken over), half byte copies (same SHA-256, pixel digest, header and thumbnail), half
  re-encodes (another quality, thumbnail ±2 grey levels).

What is measured, in a fresh interpreter per size: wall seconds, CPU seconds of the process
tree (this process from ``os.times``, worker processes sampled every 0.2 s with psutil) and
peak memory (sums over the tree of resident set, PSS and PSS's anonymous part, sampled from
``/proc/PID/smaps_rollup``) of each stage: the scan step
(cache lookup), each layer, within the provenance layer each probe, then the document
(records, lists) and the writing (audit.json, report.html). The projection to 1,000,000 rows
(200k test × 800k train) fits ``t = a · n^b`` per stage through the two largest sizes.

Usage::

    nice python benchmarks/bench_audit_scale.py --sizes 20000 --json a20k.json
    nice python benchmarks/bench_audit_scale.py --sizes 100000,400000 --json a400k.json
    nice python benchmarks/bench_audit_scale.py --sizes 100000 --layers provenance
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.core.options import AuditOptions

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "splitscope-bench"
CLASSES = ("glioma", "meningioma", "notumor", "pituitary")
QUALITIES = (70, 80, 90, 95)
TARGET_ROWS, TARGET_TEST = 1_000_000, 200_000


# ----------------------------------------------------------------------------- population


def patients(rng: np.random.Generator, n: int, n_classes: int):
    """Patient, class and side of ``n`` rows: patients of 1–8 rows with one class each, 20%
    of patients on the test side, and 3% whose rows straddle the split (each row on the
    other side with probability one half). Returns ``(patient, label code, is_test)``."""
    sizes = rng.integers(1, 9, size=n)  # more than enough patients
    group = np.repeat(np.arange(n), sizes)[:n]
    n_groups = int(group[-1]) + 1
    g_label = rng.integers(n_classes, size=n_groups)
    g_test = rng.random(n_groups) < 0.2
    straddle = rng.random(n_groups) < 0.03
    label = g_label[group]
    test = g_test[group].copy()
    flip = straddle[group] & (rng.random(n) < 0.5)
    test[flip] = ~test[flip]
    return group, label, test


def plan(n: int, seed: int = 0) -> pd.DataFrame:
    """One row per file: split, label, group, header template, copy source (-1: none) and
    copy kind (``byte`` or ``reencode``)."""
    rng = np.random.default_rng(seed)
    group, label, test = patients(rng, n, len(CLASSES))
    lean = np.where(label % 2 == 1, 0.7, 0.3)  # classes 1 and 3 are mostly 512²
    big = rng.random(n) < lean
    p_low = np.array([(0.1, 0.2, 0.3, 0.4), (0.1, 0.2, 0.3, 0.4), (0.4, 0.3, 0.2, 0.1),
                      (0.4, 0.3, 0.2, 0.1)])
    cum = p_low.cumsum(axis=1)[label]
    quality = (rng.random(n)[:, None] > cum).sum(axis=1)
    subsampling = rng.integers(2, size=n)
    progressive = rng.random(n) < 0.2
    rgb = rng.random(n) < 0.5
    template = ((big * 4 + quality) * 2 + subsampling) * 4 + progressive * 2 + rgb
    copy_of = np.full(n, -1, dtype=np.int64)
    test_rows, train_rows = np.flatnonzero(test), np.flatnonzero(~test)
    k = round(0.01 * n)
    copies = np.sort(rng.choice(test_rows, size=min(k, len(test_rows)), replace=False))
    copy_of[copies] = rng.choice(train_rows, size=len(copies))
    byte = np.zeros(n, bool)
    byte[copies] = rng.random(len(copies)) < 0.5
    src = copy_of[copies]
    label[copies], group[copies] = label[src], group[src]
    template[copies] = template[src]
    requal = copies[~byte[copies]]  # re-encoded at another quality
    t = template[requal]
    q = (t // 8) % 4
    template[requal] = t - q * 8 + ((q + 1) % 4) * 8
    return pd.DataFrame({"split": np.where(test, "test", "train"),
                         "label": np.asarray(CLASSES)[label], "group": group,
                         "template": template, "copy_of": copy_of, "byte_copy": byte})


def header_templates() -> pd.DataFrame:
    """Header fields of 64 real JPEGs (index = template id of :func:`plan`), parsed by the
    scan's header reader; ``file_size`` is the template's own."""
    from PIL import Image

    from splitscope.features.header import header_fields

    rng = np.random.default_rng(7)
    rows = []
    for tid in range(64):
        big, rest = divmod(tid, 32)
        quality, rest = divmod(rest, 8)
        subsampling, rest = divmod(rest, 4)
        progressive, rgb = divmod(rest, 2)
        size = 512 if big else 224
        yy, xx = np.mgrid[0:size, 0:size] / size
        img = 120 + 60 * np.sin(6 * xx + rng.random()) * np.cos(5 * yy) + rng.normal(0, 4, (size, size))
        im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).convert("RGB" if rgb else "L")
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=QUALITIES[quality], subsampling=2 * subsampling,
                progressive=bool(progressive))
        rows.append(header_fields(buf.getvalue(), "x.jpg"))
    return pd.DataFrame(rows)


def thumbnails(p: pd.DataFrame, path: Path, seed: int = 0) -> np.ndarray:
    """The 96² thumbnails of the plan, memory-mapped at ``path`` (written once)."""
    from bench_scale import varied

    if path.exists():
        return np.load(path, mmap_mode="r")
    n = len(p)
    tmp = path.with_suffix(".partial.npy")
    mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(n, 96, 96))
    varied(n, seed=seed, out=mm, copies=0)
    shift = pd.Categorical(p["label"], categories=CLASSES).codes.astype(np.int16) * 2
    rng = np.random.default_rng([seed, 1])
    for s in range(0, n, 4096):
        block = mm[s:s + 4096].astype(np.int16) + shift[s:s + 4096, None, None]
        mm[s:s + 4096] = np.clip(block, 0, 255).astype(np.uint8)
    for i in np.flatnonzero(p["copy_of"].to_numpy() >= 0):
        j = int(p["copy_of"].iat[i])
        img = mm[j].astype(np.int16)
        if not p["byte_copy"].iat[i]:
            img = img + rng.integers(-2, 3, img.shape)
        mm[i] = np.clip(img, 0, 255).astype(np.uint8)
    mm.flush()
    del mm
    os.replace(tmp, path)
    return np.load(path, mmap_mode="r")


class Population:
    """The plan, templates and thumbnails of one size; :meth:`extract` is the scan's
    extractor for its files."""

    def __init__(self, n: int, folder: Path, seed: int = 0):
        self.n, self.folder = n, folder
        folder.mkdir(parents=True, exist_ok=True)
        self.plan = plan(n, seed)
        self.templates = header_templates()
        self.thumbs = thumbnails(self.plan, folder / f"thumbs-n{n}-seed{seed}.npy", seed)
        self.root = folder / "release"
        self.root.mkdir(exist_ok=True)
        ident = np.arange(n)
        src = self.plan["copy_of"].to_numpy()
        byte = self.plan["byte_copy"].to_numpy()
        ident[byte] = src[byte]  # a byte copy has its source's bytes
        self.ident = ident
        rng = np.random.default_rng([seed, 2])
        self.size_factor = rng.lognormal(0, 0.15, n)
        self.size_factor[byte] = self.size_factor[src[byte]]

    def relpath(self, i: int) -> str:
        r = self.plan.iloc[i]
        return f"{r.split}/{r.label}/p{int(r.group):07d}_{i:07d}.jpg"

    def write_list(self) -> Path:
        path = self.folder / "release" / "release.csv"
        if not path.exists():
            p = self.plan
            names = [f"{s}/{lab}/p{g:07d}_{i:07d}.jpg" for i, (s, lab, g) in
                     enumerate(zip(p["split"], p["label"], p["group"]))]
            pd.DataFrame({"path": names, "split": p["split"], "label": p["label"],
                          "group": p["group"].map(lambda g: f"p{g:07d}")}).to_csv(path, index=False)
        return path

    def extract(self, files, params):
        """The scan's extractor: synthetic features of ``files`` (paths ending in the row
        index), in the column types of ``extract_files``."""
        from splitscope.features import extract, stats
        from splitscope.features.imaging import dhash64, phash64

        empty, _ = extract.extract_files([], params)
        if not len(files):
            return empty, np.zeros((0, 96, 96), np.uint8)
        idx = np.array([int(os.path.basename(f)[-11:-4]) for f in files], dtype=np.int64)
        tid = self.plan["template"].to_numpy()[idx]
        head = self.templates.iloc[tid].reset_index(drop=True)
        size = np.rint(head["file_size"].to_numpy(float) * self.size_factor[idx]).astype(np.int64)
        head["file_size"] = size
        head["bytes_per_pixel"] = size / (head["width"] * head["height"]).to_numpy(float)
        th = np.asarray(self.thumbs[idx])
        ident = self.ident[idx]
        st = pd.DataFrame([stats.image_stats(t, None, t) for t in th])
        rgb = head["mode"].eq("RGB").to_numpy()
        st["colour_spread"] = np.where(rgb, 0.8, np.nan)
        cols = {
            "file": list(files), "status": "ok", "error": None, "size_bytes": size,
            "sha256": [hashlib.sha256(f"row{j}".encode()).hexdigest() for j in ident],
            "pixel_xxh128": [f"{j:032x}" for j in ident],
            "decoded_mode": head["mode"], "gray_rule": "convert",
            "chroma_flat": np.where(rgb, False, None),
            "phash": np.array([phash64(t) for t in th], dtype=np.uint64),
            "dhash": np.array([dhash64(t) for t in th], dtype=np.uint64),
            "flat": th.min(axis=(1, 2)) == th.max(axis=(1, 2)), "has_thumb": True,
        }
        table = pd.DataFrame({c: cols[c] if c in cols else (st[c] if c in st else head[c])
                              for c in empty.columns})
        table = table.astype({c: t for c, t in empty.dtypes.items()})
        return table, th


def build_workspace(pop: Population, workspace: Path) -> tuple[Path, dict]:
    """The list file and a finished scan of it in ``workspace`` (written once)."""
    from splitscope.features.scanning import scan

    listed = pop.write_list()
    t = time.perf_counter()
    s = scan(listed, workspace, extractor=pop.extract, workers=1, batch_size=8192,
             progress=False)
    return listed, {"seconds": time.perf_counter() - t, "extracted": s.meta.get("extracted"),
                    "rows": len(s.manifest)}


# ----------------------------------------------------------------------------- measuring


class StageMeter:
    """Wall and CPU seconds and peak memory of named stages of this process and its
    descendants (sampled every ``interval`` seconds; boundaries sampled at once)."""

    KEYS = ("rss", "anon", "pss", "pss_anon")

    def __init__(self, interval: float = 0.2):
        import psutil

        self.psutil = psutil
        self.me = psutil.Process()
        self.interval = interval
        self.lock = threading.Lock()
        self.cpu_seen: dict[int, float] = {}
        self.stages: list[dict] = []
        self.current: dict | None = None
        self.stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    @staticmethod
    def _status(pid: int) -> tuple[int, int, int, int]:
        """Resident set, its anonymous part, PSS and PSS's anonymous part (KiB) of ``pid``
        (``/proc/PID/smaps_rollup``; zeros where unreadable)."""
        got = {}
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    key, _, rest = line.partition(":")
                    if rest.strip().endswith("kB"):
                        got[key] = int(rest.split()[0])
        except OSError:
            pass
        return (got.get("Rss", 0), got.get("Anonymous", 0), got.get("Pss", 0),
                got.get("Pss_Anon", 0))

    def _sample(self) -> None:
        try:
            kids = self.me.children(recursive=True)
        except self.psutil.Error:
            kids = []
        tot = list(self._status(self.me.pid))
        for k in kids:
            try:
                c = k.cpu_times()
                self.cpu_seen[k.pid] = c.user + c.system
            except self.psutil.Error:
                continue
            tot = [x + y for x, y in zip(tot, self._status(k.pid))]
        cur = self.current
        if cur is not None:
            for key, v in zip(self.KEYS, tot):
                cur[f"peak_{key}_kib"] = max(cur[f"peak_{key}_kib"], v)

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            with self.lock:
                self._sample()

    def _cpu(self) -> tuple[float, dict[int, float]]:
        t = os.times()
        return t.user + t.system, dict(self.cpu_seen)

    @contextlib.contextmanager
    def stage(self, name: str):
        with self.lock:
            outer = self.current
            self._sample()
            own0, kids0 = self._cpu()
            st = {"stage": name, **{f"peak_{k}_kib": 0 for k in self.KEYS},
                  "_t": time.perf_counter()}
            self.current = st
            self._sample()
        try:
            yield st
        finally:
            with self.lock:
                self._sample()
                own1, kids1 = self._cpu()
                st["wall_s"] = round(time.perf_counter() - st.pop("_t"), 3)
                kid = sum(v - kids0.get(pid, 0.0) for pid, v in kids1.items())
                st["cpu_s"] = round(own1 - own0 + kid, 3)
                for k in self.KEYS:
                    st[f"peak_{k}_mib"] = round(st.pop(f"peak_{k}_kib") / 1024, 1)
                self.stages.append(st)
                if outer is not None:  # the enclosing stage saw this one's peaks too
                    for k in self.KEYS:
                        outer[f"peak_{k}_kib"] = max(outer[f"peak_{k}_kib"],
                                                     st[f"peak_{k}_mib"] * 1024)
                self.current = outer


def instrument(meter: StageMeter) -> None:
    """Wrap the audit's stages (module attributes the run looks up when called)."""
    from splitscope.core import run as run_mod
    from splitscope.provenance import checks as prov

    def wrap(module, attr, name_of):
        fn = getattr(module, attr)

        def wrapped(*a, **k):
            with meter.stage(name_of(*a, **k)):
                return fn(*a, **k)

        setattr(module, attr, wrapped)

    wrap(run_mod, "_context", lambda *a, **k: "scan (cache lookup), fingerprints")
    wrap(run_mod, "run_layer", lambda layer, *a, **k: f"layer {layer.name}")
    wrap(run_mod, "_document", lambda *a, **k: "document: records, lists")
    wrap(run_mod, "_write", lambda *a, **k: "write: audit.json, report.html")
    wrap(prov, "header_records", lambda *a, **k: "provenance: header probe")
    wrap(prov, "image_stats_records", lambda *a, **k: "provenance: image-statistics probe")
    wrap(prov, "association_record", lambda *a, **k: "provenance: source-label")
    wrap(prov, "partition_records", lambda *a, **k: "provenance: partition classifier")


def child(n: int, cache: str, workers: int, layers: str = "", records: str = "") -> None:
    """In a fresh interpreter: build (once) and audit one population; prints one JSON line.
    With ``records`` (a folder), the audit's records go to ``records/records-nN.json``."""
    from splitscope.core.run import audit

    folder = Path(cache) / f"audit-scale-n{n}"
    t = time.perf_counter()
    pop = Population(n, folder)
    generated = time.perf_counter() - t
    workspace = folder / "workspace"
    listed, built = build_workspace(pop, workspace)
    from splitscope.features.workspace import release_pages

    release_pages(pop.thumbs)  # a fresh build read them: the audit is measured without them
    built["generate_seconds"] = round(generated, 2)
    meter = StageMeter()
    instrument(meter)
    with tempfile.TemporaryDirectory(prefix="bench-audit-scale-") as tmp:
        with meter.stage("audit, total") as total:
            options = AuditOptions.from_flags(workspace=workspace, workers=workers,
                                              progress=False, layers=layers or None)
            res = audit(listed, options, out_dir=Path(tmp) / "out")
        doc = res.document
        lists_mib = sum(f.stat().st_size for f in (Path(tmp) / "out").rglob("*")
                        if f.is_file()) / 2**20
    meter.stop.set()
    if records:
        Path(records).mkdir(parents=True, exist_ok=True)
        (Path(records) / f"records-n{n}.json").write_text(
            json.dumps(doc["records"], indent=1, default=str))
    layer_status = {x["layer"]: x["status"] for x in doc["layers"]}
    recs = {r["id"]: r for r in doc["records"]}
    picks = {}
    for rid, r in recs.items():
        if r["status"] in ("completed", "partial"):
            params = (r.get("predicate") or {}).get("params") or {}
            picks[rid] = {"estimate": r.get("estimate"), "numerator": r.get("numerator"),
                          "denominator": r.get("denominator"), "status": r.get("status"),
                          "fit_rows": params.get("fit_rows")}
    out = {"rows": n, "test": int((pop.plan["split"] == "test").sum()),
           "built": built, "exit_code": res.exit_code, "layers": layer_status,
           "scan_extracted": doc["manifest"]["scan"].get("extracted"),
           "outputs_mib": round(lists_mib, 1), "records": len(doc["records"]),
           "some_records": picks, "total": total,
           "stages": [s for s in meter.stages if s is not total]}
    print(json.dumps(out, default=str))


def run_child(n: int, cache: Path, workers: int, layers: str = "", records: str = "") -> dict:
    argv = [sys.executable, str(HERE), "--child", str(n), str(cache), str(workers), layers,
            records]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"size {n} failed: {proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def projection(runs: list[dict]) -> dict:
    """Per stage: ``t = a · n^b`` through the two largest sizes, evaluated at 1M rows (and
    the same for peak memory)."""
    (r1, r2) = sorted(runs, key=lambda r: r["rows"])[-2:]
    n1, n2 = r1["rows"], r2["rows"]
    by1 = {s["stage"]: s for s in r1["stages"] + [r1["total"]]}
    out = {}
    for s in r2["stages"] + [r2["total"]]:
        a = by1.get(s["stage"])
        if a is None:
            continue
        row = {}
        for key in ("wall_s", "cpu_s", "peak_anon_mib", "peak_rss_mib", "peak_pss_mib",
                    "peak_pss_anon_mib"):
            if key not in a or key not in s:
                continue
            y1, y2 = max(a[key], 1e-3), max(s[key], 1e-3)
            b = float(np.log(y2 / y1) / np.log(n2 / n1))
            row[key] = {"exponent": round(b, 3),
                        "projected": round(float(y2 * (TARGET_ROWS / n2) ** b), 1),
                        "linear": round(float(y2 * TARGET_ROWS / n2), 1)}
        out[s["stage"]] = row
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=5, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="100000,400000")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--layers", default="",
                    help="run only these layers (comma-separated; default all)")
    ap.add_argument("--records", type=Path, default=None,
                    help="folder for each size's audit records (records-nN.json), to compare runs")
    ap.add_argument("--previous", type=Path, nargs="*", default=[],
                    help="JSON files of earlier runs whose sizes join the projection")
    args = ap.parse_args(argv)
    if args.child:
        n, cache, workers, layers, records = args.child
        child(int(n), cache, int(workers), layers, records)
        return {}
    runs = []
    for f in args.previous:
        runs.extend(json.loads(f.read_text())["runs"])
    for n in [int(v) for v in args.sizes.split(",") if v]:
        res = run_child(n, args.cache, args.workers, args.layers,
                        str(args.records or ""))
        print(json.dumps(res), flush=True)
        runs = [r for r in runs if r["rows"] != n] + [res]
    report = {"machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                          "load_average": os.getloadavg()}, "runs": runs}
    if len(runs) >= 2:
        report["projection_1M"] = projection(runs)
    text = json.dumps(report, indent=2, default=str)
    if args.json:
        args.json.write_text(text)
    for r in sorted(runs, key=lambda r: r["rows"]):
        print(f"\n{r['rows']:,} rows ({r['test']:,} test):")
        for s in r["stages"] + [r["total"]]:
            print(f"  {s['stage']:<42} {s['wall_s']:>9.1f} s  {s['cpu_s']:>9.1f} CPU-s  "
                  f"pss {s['peak_pss_mib']:>7.0f} / anon {s['peak_pss_anon_mib']:>7.0f} MiB  "
                  f"rss {s['peak_rss_mib']:>7.0f} MiB")
    return report


if __name__ == "__main__":
    main()
