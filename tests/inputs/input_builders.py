"""Builders for the input-kind tests: one set of images written as a folder, as Hugging Face
tables, as a save_to_disk folder, and as a MedMNIST .npz."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

CLASSES = ["no", "yes"]


def jpeg_bytes(pixels: np.ndarray, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def png_bytes(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG")
    return buf.getvalue()


def decoded(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("L"))


def decoded_as_stored(data: bytes) -> np.ndarray:
    """The decoded pixels in their own mode (L or RGB), for an exact re-encode."""
    with Image.open(io.BytesIO(data)) as img:
        img.load()
        return np.asarray(img if img.mode in ("L", "RGB") else img.convert("RGB"))


def with_comment(jpeg: bytes) -> bytes:
    """The same JPEG with a comment segment after its start marker: other bytes, the same
    decoded pixels (a re-encode that keeps every header field of the other files defined)."""
    if jpeg[:2] != b"\xff\xd8":  # not a JPEG (a PNG under a JPEG name): re-encode as PNG
        return png_bytes(decoded_as_stored(jpeg))
    text = b"re-saved"
    return jpeg[:2] + b"\xff\xfe" + (len(text) + 2).to_bytes(2, "big") + text + jpeg[2:]


def generated_jpegs(n: int, seed: int = 0, size: int = 96) -> list[bytes]:
    """``n`` smooth MRI-like grey JPEGs (blobs plus noise), distinct from one another."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    out = []
    for _ in range(n):
        img = np.zeros((size, size))
        for _ in range(4):
            cy, cx, r = rng.uniform(10, size - 10, 2).tolist() + [rng.uniform(6, 25)]
            img += rng.uniform(40, 120) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
        img += rng.normal(0, 6, img.shape)
        out.append(jpeg_bytes(np.clip(img, 0, 255).astype(np.uint8)))
    return out


def planted_release(originals: list[bytes]) -> dict[str, list[tuple[str, str, bytes]]]:
    """Train and test rows ``(label, name, bytes)`` with planted leaks: two byte copies (one
    renamed), one copy with other bytes and the same pixels, one brightened near copy; the
    other test images are unrelated. Rows are in folder order (class, then name)."""
    n = len(originals)
    half = n - max(4, n // 4)
    train = [(CLASSES[i % 2], f"img{i:03d}.jpg", originals[i]) for i in range(half)]
    test = [(CLASSES[i % 2], f"img{i:03d}.jpg", originals[i]) for i in range(half, n)]
    brighter = np.clip(decoded(originals[3]).astype(int) + 12, 0, 255).astype(np.uint8)
    test += [
        (CLASSES[0], "img000.jpg", originals[0]),  # byte copy, same name
        (CLASSES[1], "copy_of_1.jpg", originals[1]),  # byte copy, renamed
        (CLASSES[0], "recommented_2.jpg", with_comment(originals[2])),  # pixel identity
        (CLASSES[1], "brighter_3.jpg", jpeg_bytes(brighter, quality=95)),  # near copy
    ]
    return {"train": sorted(train, key=_folder_order), "test": sorted(test, key=_folder_order)}


def _folder_order(row: tuple) -> tuple[str, str]:
    return row[0], row[1]


def write_folder(root: Path, release: dict) -> Path:
    for split, rows in release.items():
        for label, name, data in rows:
            f = root / split / label / name
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data)
    return root


def hf_metadata(extra: dict | None = None) -> dict:
    feats = {"image": {"_type": "Image"},
             "label": {"names": CLASSES, "_type": "ClassLabel"}, **(extra or {})}
    return {b"huggingface": json.dumps({"info": {"features": feats}}).encode()}


def image_table(rows: list[tuple[str, str, bytes | None]]) -> pa.Table:
    cells = [{"bytes": data, "path": name} for _, name, data in rows]
    table = pa.table({"image": pa.array(cells, pa.struct([("bytes", pa.binary()),
                                                          ("path", pa.string())])),
                      "label": pa.array([CLASSES.index(lab) for lab, _, _ in rows], pa.int64())})
    return table.replace_schema_metadata(hf_metadata())


def write_hub(root: Path, release: dict, row_group_size: int = 5) -> Path:
    """The Hub's Parquet layout: ``data/<split>-00000-of-00001.parquet``."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    for split, rows in release.items():
        pq.write_table(image_table(rows), root / "data" / f"{split}-00000-of-00001.parquet",
                       row_group_size=row_group_size)
    return root


def write_npz(path: Path, images: dict[str, np.ndarray], labels: dict[str, np.ndarray]) -> Path:
    arrays = {}
    for split, pixels in images.items():
        arrays[f"{split}_images"] = pixels
        arrays[f"{split}_labels"] = labels[split]
    np.savez(path, **arrays)
    return path


def dataset_dict(datasets, release: dict):
    """A ``datasets.DatasetDict`` of a release (split → rows of label, name, bytes) with an
    Image and a ClassLabel column."""
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=CLASSES)})
    return datasets.DatasetDict({
        split: datasets.Dataset.from_dict(
            {"image": [{"bytes": d, "path": n} for _, n, d in rows],
             "label": [CLASSES.index(lab) for lab, _, _ in rows]}, features=features)
        for split, rows in release.items()})
