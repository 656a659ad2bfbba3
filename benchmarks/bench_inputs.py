"""Scan speed of embedded-image inputs against the same images as files.

The same JPEGs are written as a folder (the baseline), as Hub-layout Parquet (one table per
split, 100 rows per row group as ``datasets`` writes image tables), as Arrow IPC streams (the
``save_to_disk`` format), and, decoded, as a MedMNIST-layout ``.npz``. Each is scanned with a
fresh workspace, alternating, ``--repeats`` times; the table gives the median images/s and the
ratio to the folder measured in the same run. Digests are checked equal between the folder and
the tables, and pixel digests between the folder and the archive.

    python benchmarks/bench_inputs.py --workers 2 --repeats 3 [--kermany PATH] [--json FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from splitscope.features.scanning import scan

_DEFAULT_KERMANY = Path(__file__).resolve().parents[2] / "shared" / "data" / \
    "kermany-chest-xray-224"


def _images(kermany: Path, n: int) -> list[tuple[str, str, str, bytes]]:
    """``(split, label, name, bytes)`` of Kermany's JPEGs, or generated ones when absent."""
    if kermany.is_dir():
        files = sorted(f for f in kermany.rglob("*.jpeg") if f.is_file())[:n]
        return [(f.parent.parent.name.lower(), f.parent.name, f.name, f.read_bytes())
                for f in files]
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        buf = io.BytesIO()
        pixels = rng.normal(120, 30, (224, 224)).clip(0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(buf, "JPEG", quality=90)
        out.append(("train" if i % 5 else "test", f"c{i % 2}", f"g{i:05d}.jpeg", buf.getvalue()))
    return out


def _table(rows) -> pa.Table:
    labels = sorted({r[1] for r in rows})
    return pa.table({"image": pa.array([{"bytes": d, "path": n} for _, _, n, d in rows]),
                     "label": [labels.index(r[1]) for r in rows]})


def build(images, root: Path) -> dict[str, Path]:
    splits = sorted({s for s, _, _, _ in images})
    folder, hub, arrow = root / "folder", root / "hub" / "data", root / "arrow"
    for s, lab, name, data in images:
        (folder / s / lab).mkdir(parents=True, exist_ok=True)
        (folder / s / lab / name).write_bytes(data)
    hub.mkdir(parents=True)
    arrow.mkdir()
    arrays = {}
    for s in splits:
        rows = [r for r in images if r[0] == s]
        table = _table(rows)
        pq.write_table(table, hub / f"{s}-00000-of-00001.parquet", row_group_size=100)
        with pa.OSFile(str(arrow / f"{s}.arrow"), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=1000)
        decoded = [np.asarray(Image.open(io.BytesIO(d)).convert("L")) for _, _, _, d in rows]
        arrays[f"{s}_images"] = np.stack(decoded)
        arrays[f"{s}_labels"] = np.array([r[1] for r in rows])
    np.savez(root / "images.npz", **arrays)
    return {"folder": folder, "parquet": root / "hub", "arrow": arrow,
            "npz": root / "images.npz"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kermany", type=Path, default=_DEFAULT_KERMANY)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        images = _images(args.kermany, args.n)
        inputs = build(images, root / "data")
        times: dict[str, list[float]] = {k: [] for k in inputs}
        digests = {}
        for _ in range(args.repeats):
            for kind, path in inputs.items():
                ws = root / f"ws-{kind}"
                shutil.rmtree(ws, ignore_errors=True)
                t = time.perf_counter()
                result = scan(path, ws, workers=args.workers, progress=False)
                times[kind].append(time.perf_counter() - t)
                rows = result.rows()
                assert (rows["status"] == "ok").all(), kind
                digests[kind] = sorted(rows["sha256"].dropna()), \
                    sorted(rows["pixel_xxh128"].dropna())
    assert digests["folder"][0] == digests["parquet"][0] == digests["arrow"][0]
    n = len(images)
    base = statistics.median(times["folder"])
    out = {"images": n, "workers": args.workers, "repeats": args.repeats,
           "set": "kermany" if args.kermany.is_dir() else "generated", "results": {}}
    print(f"{n} images, {args.workers} workers, median of {args.repeats}")
    print(f"{'input':<8} {'images/s':>9} {'vs folder':>10}")
    for kind, ts in times.items():
        med = statistics.median(ts)
        out["results"][kind] = {"seconds": med, "images_per_s": n / med, "ratio": base / med}
        print(f"{kind:<8} {n / med:>9,.0f} {base / med:>9.2f}×")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
