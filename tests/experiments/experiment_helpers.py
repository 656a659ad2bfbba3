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
        _write_classes(rng, root / split, n, split)
    _copy_train(root, root / "test", "leak", range(LEAKS))
    return root


def _write_classes(rng, folder: Path, n: int, prefix: str) -> None:
    """``n`` images of each class into ``folder/{a,b}/<prefix>_<class>_<i>.png``."""
    for label in ("a", "b"):
        d = folder / label
        d.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(_image(rng, label)).save(d / f"{prefix}_{label}_{i:02d}.png")


def _copy_train(release: Path, folder: Path, prefix: str, indices) -> None:
    """Byte copies of training images ``train_<class>_<i>`` (classes alternating)."""
    for k, i in enumerate(indices):
        label = "ab"[k % 2]
        shutil.copyfile(release / "train" / label / f"train_{label}_{i:02d}.png",
                        folder / label / f"{prefix}_{label}_{k:02d}.png")


EXTERNAL_NEW = 6  # new images per class
EXTERNAL_CONTAINED = 2  # training images copied into the external corpus


def make_external(root: Path, release: Path, seed: int = 7) -> Path:
    """``root/{a,b}/*.png``: ``EXTERNAL_NEW`` new images per class, ``EXTERNAL_CONTAINED``
    byte copies of training images of the release (rows contained in train) and one image
    of a class the release has not (left out of the evaluation, counted)."""
    rng = np.random.default_rng(seed)
    _write_classes(rng, root, EXTERNAL_NEW, "ext")
    _copy_train(release, root, "copied", range(10, 10 + EXTERNAL_CONTAINED))
    (root / "c").mkdir(exist_ok=True)
    Image.fromarray(_image(rng, "a")).save(root / "c" / "other_class.png")
    return root
