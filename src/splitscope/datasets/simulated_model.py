"""Simulated model outputs for the demo benchmark: saved predictions and attribution maps.

No model is trained or loaded. The numbers come from a seeded rule that mimics a classifier
which memorised the training images, so that the audit's evaluation and attribution layers
have something to measure on the demo:

- **Predictions** (``predictions.csv``: ``path``, then one probability column per class
  of :data:`~splitscope.datasets.demo.CLASSES`) for every test file and every validation
  file. A test file that is a copy or near-copy of a training image (a planted test → train
  relation found by a pixel predicate, see :data:`LEAKED_KINDS`) gets probability
  ``MEMORISED_P`` for its training counterpart's label, which is wrong for the label-conflict
  copy. Every other file (every validation file: that split is clean) gets
  ``sigmoid(±SIGNAL + N(0, NOISE²))`` for ``lesion`` (+ for lesion files, − for normal ones),
  a balanced accuracy of about Φ(SIGNAL / NOISE) ≈ 0.77. With both splits predicted, the
  evaluation layer fits thresholds and a temperature on validation and scores them on test.
- **Attribution maps and masks** (``attribution_maps.npz``, ``attribution_masks.npz``, keyed by released path, ``MAP_SIDE``² arrays). The mask is
  the head: the image's area-mean downsample thresholded at ``HEAD_LEVEL``. A clean file's map
  is a Gaussian blob at the head's centre of mass, so it lies inside the mask. A leaked file's
  map puts a share ``SHORTCUT_SHARE`` of its mass on the image border, outside the head, the
  way a model that matched a memorised image by its surroundings would.

``simulated.json`` records the rule, its parameters and the seed. The output depends only
on the demo folder and the seed.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
from PIL import Image

from splitscope.datasets.demo import CLASSES
from splitscope.errors import InputError

__all__ = ["LEAKED_KINDS", "simulate_model_outputs"]

#: Planted kinds whose test file a memorising model recognises (a pixel copy of a train image).
LEAKED_KINDS = ("byte_copy", "renamed_copy", "label_conflict", "pixel_reencode",
                "lossy_reencode", "resized", "intensity")
SIGNAL = 1.2
NOISE = 1.6
MEMORISED_P = 0.97
MAP_SIDE = 32
HEAD_LEVEL = 60
SHORTCUT_SHARE = 0.6


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _head_mask(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        small = img.convert("L").resize((MAP_SIDE, MAP_SIDE), Image.Resampling.BOX)
    return (np.asarray(small) > HEAD_LEVEL).astype(np.uint8)


def _attribution(mask: np.ndarray, leaked: bool) -> np.ndarray:
    yy, xx = np.mgrid[0:MAP_SIDE, 0:MAP_SIDE].astype(np.float64)
    if mask.any():
        cy, cx = float(yy[mask > 0].mean()), float(xx[mask > 0].mean())
    else:
        cy = cx = (MAP_SIDE - 1) / 2
    blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * (MAP_SIDE / 10) ** 2)) * mask
    blob /= blob.sum() if blob.sum() > 0 else 1.0
    if not leaked:
        return blob
    border = np.zeros((MAP_SIDE, MAP_SIDE))
    border[:2, :], border[-2:, :], border[:, :2], border[:, -2:] = 1, 1, 1, 1
    border *= mask == 0
    border /= border.sum() if border.sum() > 0 else 1.0
    return SHORTCUT_SHARE * border + (1 - SHORTCUT_SHARE) * blob


def simulate_model_outputs(root: str | Path, out_dir: str | Path,
                           seed: int = 0) -> dict[str, Path]:
    """Write the simulated predictions, attribution maps and masks of a demo folder.

    Parameters
    ----------
    root : path-like
        A folder written by :func:`splitscope.datasets.make_demo` (with ``planted.csv``).
    out_dir : path-like
        Where the files go; outside ``root``, which holds only the released images.
    seed : int
        Seed of the clean files' score noise.

    Returns
    -------
    dict
        Paths of ``predictions``, ``attribution_maps``, ``attribution_masks`` and
        ``description`` (``simulated.json``), all under ``out_dir``.
    """
    root = Path(root)
    with open(root / "planted.csv", newline="", encoding="utf-8") as fh:
        planted = list(csv.DictReader(fh))
    memorised = {r["query_path"]: r["reference_label"] for r in planted
                 if r["kind"] in LEAKED_KINDS and r["query_split"] == "test"}
    files = sorted(p for p in (root / "test").rglob("*") if p.is_file())
    val_files = sorted(p for p in (root / "val").rglob("*") if p.is_file()) \
        if (root / "val").is_dir() else []
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, NOISE, len(files))  # test first: its draws do not depend on val
    val_noise = rng.normal(0.0, NOISE, len(val_files))
    out = Path(out_dir)
    if out.resolve().is_relative_to(root.resolve()):
        raise InputError(f"{out} lies inside the demo release {root}; write it elsewhere")
    out.mkdir(parents=True, exist_ok=True)
    rows, maps, masks = [], {}, {}
    for f, e in zip(files + val_files, [*noise, *val_noise], strict=True):
        rel = f.relative_to(root).as_posix()
        label = f.parent.name
        if rel in memorised:
            p_lesion = MEMORISED_P if memorised[rel] == "lesion" else 1 - MEMORISED_P
        else:
            p_lesion = float(_sigmoid(np.array(SIGNAL * (1 if label == "lesion" else -1) + e)))
        rows.append({"path": rel, CLASSES[0]: 1 - p_lesion, CLASSES[1]: p_lesion})
        if f.parent.parent.name == "test":  # maps for the audited test rows
            mask = _head_mask(f)
            masks[rel] = mask
            maps[rel] = _attribution(mask, rel in memorised)
    paths = {"predictions": out / "predictions.csv", "attribution_maps": out / "attribution_maps.npz",
             "attribution_masks": out / "attribution_masks.npz",
             "description": out / "simulated.json"}
    with open(paths["predictions"], "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["path", *CLASSES])
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v)
                             for k, v in r.items()})
    np.savez_compressed(paths["attribution_maps"], **maps)
    np.savez_compressed(paths["attribution_masks"], **masks)
    paths["description"].write_text(json.dumps({
        "what": "simulated outputs of a classifier that memorised the training images; no "
                "model was trained or loaded",
        "seed": seed, "leaked_kinds": list(LEAKED_KINDS), "signal": SIGNAL, "noise": NOISE,
        "expected_clean_balanced_accuracy": round(0.5 * (1 + math.erf(SIGNAL / NOISE
                                                                      / math.sqrt(2))), 4),
        "memorised_probability": MEMORISED_P, "map_side": MAP_SIDE, "head_level": HEAD_LEVEL,
        "shortcut_share": SHORTCUT_SHARE, "test_files": len(files),
        "val_files": len(val_files),
        "memorised_test_files": sorted(memorised),
    }, indent=1) + "\n")
    return paths
