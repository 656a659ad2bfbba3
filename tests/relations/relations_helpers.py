"""Helpers of the relations tests: a scan-like object computed with the project's own imaging
functions, smooth synthetic images and the planted relations of the synthetic release."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

from splitscope.manifest import build_manifest


@dataclass
class MiniScan:
    """The part of ``splitscope.features.scanning.Scan`` the relations layer uses, computed with
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
               "pixel_xxh128": pd.NA, "phash": pd.NA, "dhash": pd.NA, "flat": pd.NA,
               "thumb_index": -1, "status": "ok" if data else "missing"}
        try:
            with Image.open(f) as img:
                img.load()
                arr = np.asarray(img)
                row["pixel_xxh128"] = hashlib.sha256(
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
