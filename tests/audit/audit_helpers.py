"""The small image releases the audit tests run on, written by one builder."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from PIL import Image


def tiny_release(root: Path, *, seed: int = 0, sizes=(("train", 5), ("test", 3)),
                 side: int | None = 32, name: str = "{split}_{i}.png",
                 copy: tuple[str, str] | None = None) -> Path:
    """``root/<split>/<a|b>/<name>``: ``n`` seeded noise images per split and class (``sizes``
    gives ``(split, n)``), ``side``² grey pixels or, with ``side=None``, a side of 16–40 drawn
    per image (file sizes spread around their median). ``name`` may use ``split``, ``i`` and
    ``patient`` (``i % 3``); ``copy`` is one (source, target) path under ``root`` to copy."""
    rng = np.random.default_rng(seed)
    for split, n in sizes:
        for label in ("a", "b"):
            (root / split / label).mkdir(parents=True)
            for i in range(n):
                s = side if side is not None else 16 + 8 * int(rng.integers(0, 4))
                Image.fromarray(rng.integers(0, 256, (s, s), dtype=np.uint8)).save(
                    root / split / label / name.format(split=split, i=i, patient=i % 3))
    if copy is not None:
        shutil.copy(root / copy[0], root / copy[1])
    return root
