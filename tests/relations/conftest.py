"""Fixtures of the relations tests: a small synthetic release with planted relations, a
scan-like object built from it with the project's own imaging functions, and (real data) a
session-wide scan of the Kermany chest X-ray set."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from splitscope.manifest import build_manifest


@dataclass
class MiniScan:
    """The part of ``splitscope.features.scan.Scan`` the relations layer uses, computed with
    ``splitscope.features.imaging.image_features`` exactly as the scan does."""

    manifest: pd.DataFrame
    features: pd.DataFrame
    thumbnails: np.ndarray
    params: object = None
    meta: dict = field(default_factory=lambda: {"thumb_size": 96, "interpolation": "bicubic",
                                                "mode": "exact"})

    def rows(self) -> pd.DataFrame:
        out = self.manifest.merge(self.features, on="file", how="left", sort=False)
        out["thumb_index"] = out["thumb_index"].fillna(-1).astype("int64")
        out.index = self.manifest.index
        return out

    def thumbs(self, rows) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        idx = self.rows().set_index("row")["thumb_index"].reindex(rows).to_numpy()
        if (idx < 0).any():
            raise ValueError("row without thumbnail")
        return self.thumbnails[idx]


def mini_scan(inputs, thumb_size: int = 96) -> MiniScan:
    from splitscope.features.imaging import image_features

    manifest = build_manifest(inputs)
    files = sorted(set(manifest["file"].dropna()))
    feats, thumbs = [], []
    for f in files:
        data = Path(f).read_bytes() if Path(f).exists() else None
        row = {"file": f, "sha256": hashlib.sha256(data).hexdigest() if data else pd.NA,
               "pixel_sha256": pd.NA, "phash": pd.NA, "dhash": pd.NA, "flat": pd.NA,
               "thumb_index": -1, "status": "ok" if data else "missing"}
        try:
            with Image.open(f) as img:
                img.load()
                arr = np.asarray(img)
                row["pixel_sha256"] = hashlib.sha256(
                    f"{img.mode}{arr.shape}".encode() + arr.tobytes()).hexdigest()
                ft = image_features(img, thumb_size=thumb_size)
            row.update(phash=np.uint64(ft["phash"]), dhash=np.uint64(ft["dhash"]),
                       flat=ft["flat"], thumb_index=len(thumbs))
            thumbs.append(ft["thumb"])
        except Exception:  # noqa: BLE001
            if data:
                row["status"] = "not_an_image"
        feats.append(row)
    table = pd.DataFrame(feats)
    for c in ("phash", "dhash"):
        table[c] = pd.array([pd.NA if v is pd.NA else int(v) for v in table[c]], dtype="UInt64")
    arr = np.stack(thumbs) if thumbs else np.zeros((0, thumb_size, thumb_size), np.uint8)
    return MiniScan(manifest, table, arr)


def smooth_image(rng, size=(160, 128)) -> np.ndarray:
    """A random smooth grayscale image (distinct hashes, realistic low-frequency content)."""
    h, w = size[1], size[0]
    small = rng.integers(0, 256, (6, 6)).astype(np.uint8)
    img = Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC)
    arr = np.asarray(img).astype(np.int16)
    arr += rng.integers(-6, 7, arr.shape).astype(np.int16)
    # an asymmetric marker so that flips and rotations change the image
    arr[: h // 5, : w // 6] = 250
    return np.clip(arr, 0, 255).astype(np.uint8)


PLANTED = [
    # kind, query (test) path, reference (train) path
    ("byte_copy", "test/A/a00.png", "train/A/a00.png"),
    ("renamed_copy", "test/A/renamed.png", "train/A/a01.png"),
    ("label_conflict", "test/B/conflict.png", "train/A/a02.png"),
    ("re_encode", "test/A/reencode.png", "train/A/a03.png"),
    ("resize", "test/A/resized.png", "train/A/a04.png"),
    ("brightness_contrast", "test/A/bright.png", "train/A/a05.png"),
    ("crop", "test/A/crop.png", "train/A/a06.png"),
    ("rotate_small", "test/A/rot5.png", "train/A/a07.png"),
    ("flip_lr", "test/A/flip.png", "train/A/a08.png"),
    ("rot90", "test/A/rot90.png", "train/A/a09.png"),
]


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
def kermany_scan(shared_data, tmp_path_factory):
    """One scan of the Kermany chest X-ray set per session (cached in a temporary workspace)."""
    root = shared_data / "kermany-chest-xray-224"
    if not root.is_dir():
        pytest.skip("kermany-chest-xray-224 absent")
    try:
        from splitscope.features.scan import scan
        return scan(root, tmp_path_factory.mktemp("kermany-ws"), progress=False)
    except ImportError:
        return mini_scan(root)
