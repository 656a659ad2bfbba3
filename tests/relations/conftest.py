"""Fixtures of the relations tests: a small synthetic release with planted relations, a
scan-like object built from it with the project's own imaging functions, and (real data) a
session-wide scan of the Kermany chest X-ray set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from relations_helpers import PLANTED, mini_scan, smooth_image


@pytest.fixture(scope="session")
def planted_root(tmp_path_factory) -> Path:
    """train/{A,B}/… and test/{A,B}/… with the PLANTED relations, plus clean test images, a
    flat test image, a within-train copy and an undecodable file."""
    root = tmp_path_factory.mktemp("planted")
    rng = np.random.default_rng(7)
    train = {}
    for cls in ("A", "B"):
        (root / "train" / cls).mkdir(parents=True)
        (root / "test" / cls).mkdir(parents=True)
    for i in range(14):
        arr = smooth_image(rng)
        name = f"train/A/a{i:02d}.png" if i < 10 else f"train/B/b{i:02d}.png"
        Image.fromarray(arr).save(root / name)
        train[name] = arr
    # within-train copy
    (root / "train/B/b10_copy.png").write_bytes((root / "train/B/b10.png").read_bytes())
    for kind, q, r in PLANTED:
        src = root / r
        arr = train[r]
        img = Image.fromarray(arr)
        if kind in ("byte_copy", "renamed_copy", "label_conflict"):
            (root / q).write_bytes(src.read_bytes())
        elif kind == "re_encode":
            img.save(root / q, compress_level=1)  # same pixels, other bytes
        elif kind == "resize":
            img.resize((img.width // 2, img.height // 2), Image.Resampling.BICUBIC).resize(
                img.size, Image.Resampling.BICUBIC).save(root / q)
        elif kind == "brightness_contrast":
            Image.fromarray(np.clip(arr.astype(float) * 0.8 + 30, 0, 255).astype(np.uint8)
                            ).save(root / q)
        elif kind == "crop":
            w, h = img.size
            img.crop((int(w * 0.2), int(h * 0.2), w, h)).save(root / q)
        elif kind == "rotate_small":
            img.rotate(10, resample=Image.Resampling.BILINEAR).save(root / q)
        elif kind == "flip_lr":
            img.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(root / q)
        elif kind == "rot90":
            img.transpose(Image.Transpose.ROTATE_90).save(root / q)
    for i in range(6):
        Image.fromarray(smooth_image(rng)).save(root / f"test/B/clean{i}.png")
    Image.fromarray(np.full((64, 64), 128, np.uint8)).save(root / "test/B/flat.png")
    (root / "test/B/broken.png").write_bytes(b"not an image at all")
    return root


@pytest.fixture(scope="session")
def planted_scan(planted_root):
    return mini_scan(planted_root)


@pytest.fixture(scope="session")
def kermany_scan(shared_data, kermany_workspace):
    """One scan of the Kermany chest X-ray set per session (in the session's Kermany
    workspace)."""
    root = shared_data / "kermany-chest-xray-224"
    if not root.is_dir():
        pytest.skip("kermany-chest-xray-224 absent")
    try:
        from splitscope.features.scanning import scan
        return scan(root, kermany_workspace, progress=False)
    except ImportError:
        return mini_scan(root)
