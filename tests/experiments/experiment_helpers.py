"""A tiny release made in code: 48² grey PNGs, two classes, planted leaks.

Class ``a`` has a bright disc on the left, class ``b`` on the right, both over seeded noise.
Three test images are byte copies of training images (planted leaks the duplicates layer
flags on both boundaries)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from PIL import Image

SIDE = 48
LEAKS = 3


def _image(rng, label: str) -> np.ndarray:
    yy, xx = np.mgrid[:SIDE, :SIDE]
    cx = SIDE * (0.3 if label == "a" else 0.7) + rng.normal(0, 2)
    cy = SIDE * 0.5 + rng.normal(0, 4)
    disc = ((yy - cy) ** 2 + (xx - cx) ** 2) < (SIDE * 0.15) ** 2
    img = rng.normal(70, 25, (SIDE, SIDE)) + 120 * disc
    return np.clip(img, 0, 255).astype(np.uint8)


def make_release(root: Path, per_class=(20, 8), seed: int = 0) -> Path:
    """``root/{train,test}/{a,b}/*.png`` with ``LEAKS`` test files copied from train."""
    rng = np.random.default_rng(seed)
    for split, n in zip(("train", "test"), per_class):
        for label in ("a", "b"):
            d = root / split / label
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                Image.fromarray(_image(rng, label)).save(d / f"{split}_{label}_{i:02d}.png")
    for i in range(LEAKS):
        label = "ab"[i % 2]
        shutil.copyfile(root / "train" / label / f"train_{label}_{i:02d}.png",
                        root / "test" / label / f"leak_{label}_{i:02d}.png")
    return root


EXTERNAL_NEW = 6  # new images per class
EXTERNAL_CONTAINED = 2  # training images copied into the external corpus


def make_external(root: Path, release: Path, seed: int = 7) -> Path:
    """``root/{a,b}/*.png``: ``EXTERNAL_NEW`` new images per class, ``EXTERNAL_CONTAINED``
    byte copies of training images of the release (rows contained in train) and one image
    of a class the release has not (left out of the evaluation, counted)."""
    rng = np.random.default_rng(seed)
    for label in ("a", "b"):
        d = root / label
        d.mkdir(parents=True, exist_ok=True)
        for i in range(EXTERNAL_NEW):
            Image.fromarray(_image(rng, label)).save(d / f"ext_{label}_{i:02d}.png")
    for i in range(EXTERNAL_CONTAINED):
        label = "ab"[i % 2]
        shutil.copyfile(release / "train" / label / f"train_{label}_{10 + i:02d}.png",
                        root / label / f"copied_{label}_{i:02d}.png")
    (root / "c").mkdir(exist_ok=True)
    Image.fromarray(_image(rng, "a")).save(root / "c" / "other_class.png")
    return root
