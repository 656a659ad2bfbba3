"""Cost of the intensity statistics (splitscope.features.stats) in the scan's per-file work.

Side by side, in one process, on the same files: ``extract_batch`` as shipped (``with``) and
the same call with ``image_stats`` replaced by a function returning no statistics
(``without``: the extraction before the statistics existed). Arms alternate over
``--repeats`` runs, in flipped order every other repeat; medians are reported, as milliseconds per image, with the added cost.
Also: ``image_stats`` alone on already decoded images and their thumbnails (its own cost, no
I/O, decode or resize).

Usage::

    python benchmarks/bench_image_stats.py --data ../shared/data/kermany-chest-xray-224 \\
        --n 1000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from PIL import Image

from splitscope.features import extract, stats
from splitscope.features.imaging import gray_features, to_gray8


def _files(root: Path, n: int, seed: int) -> list[str]:
    files = sorted(str(p) for p in root.rglob("*") if p.suffix.lower() in (".jpeg", ".jpg",
                                                                           ".png"))
    rng = np.random.default_rng(seed)
    take = rng.choice(len(files), size=min(n, len(files)), replace=False)
    return [files[i] for i in sorted(take)]


def _time_extract(files: list[str], stub: bool) -> float:
    real = stats.image_stats
    if stub:
        stats.image_stats = lambda gray, colour=None: {}
    try:
        t = time.perf_counter()
        extract.extract_batch(files, extract.FeatureParams())
        return time.perf_counter() - t
    finally:
        stats.image_stats = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "data"
                    / "kermany-chest-xray-224")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    files = _files(args.data, args.n, args.seed)
    _time_extract(files[:50], False)  # warm the resizer's geometry cache and imports
    times: dict[str, list[float]] = {"with": [], "without": []}
    for rep in range(args.repeats):  # the order of the arms flips every repeat
        for arm in (("without", "with") if rep % 2 == 0 else ("with", "without")):
            times[arm].append(_time_extract(files, arm == "without"))
    decoded = []
    for f in files:
        with Image.open(f) as img:
            img.load()
            gray = to_gray8(img)
            decoded.append((gray, img.copy(), gray_features(gray)[2]))
    alone = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        for gray, colour, thumb in decoded:
            stats.image_stats(gray, colour, thumb)
        alone.append(time.perf_counter() - t)
    ms = {arm: 1000 * statistics.median(v) / len(files) for arm, v in times.items()}
    out = {"files": len(files), "data": str(args.data), "repeats": args.repeats,
           "ms_per_image_with": ms["with"], "ms_per_image_without": ms["without"],
           "added_ms_per_image": ms["with"] - ms["without"],
           "added_share": (ms["with"] - ms["without"]) / ms["without"],
           "image_stats_alone_ms_per_image": 1000 * statistics.median(alone) / len(files)}
    print(json.dumps(out, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
