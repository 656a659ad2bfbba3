"""Manifests of releases given as pixel arrays: ``.npz`` archives in the MedMNIST layout and
numpy arrays in memory.

A MedMNIST archive holds ``<split>_images`` (uint8, ``(N, H, W)`` or ``(N, H, W, 3)``) and
``<split>_labels`` (``(N,)`` or ``(N, 1)``) for the splits ``train``, ``val``, ``test``. One
manifest row per image, splits in that order, images in array order. ``file`` is the key
``<absolute archive path>::<split>_images/<index>`` (:mod:`splitscope.features.sources`),
``path`` is ``<archive name>::<split>_images/<index>``; ``basename`` is ``<NA>`` (an array row
has no file name to match). ``content`` is ``array``: such rows have no file bytes, so byte
identity, basename matching and header fields do not apply to them; decoded-pixel identity,
the hashes and NCC do.

In-memory arrays (:class:`Arrays`) are stored once in the workspace as an uncompressed
``.npz`` named by the SHA-256 of their pixels (``<workspace>/arrays/<digest>.npz``), so workers
can memory-map them and an unchanged array reuses its cached features.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from splitscope.errors import InputError

__all__ = ["MEDMNIST_SPLITS", "Arrays", "read_arrays", "read_npz"]

MEDMNIST_SPLITS = ("train", "val", "test")


@dataclass
class Arrays:
    """Images held in memory, for :func:`splitscope.scan` / :func:`splitscope.audit`.

    Parameters
    ----------
    images : ndarray
        uint8, ``(N, H, W)`` or ``(N, H, W, 3)``.
    labels : array-like, optional
        ``(N,)`` or ``(N, 1)``; any values (written as text).
    split : str or array-like, optional
        One split for every image, or one per image.
    name : str, optional
        Corpus name (default ``arrays``).
    """

    images: Any
    labels: Any = None
    split: Any = None
    name: str | None = None


def _check_images(images: Any, where: str) -> np.ndarray:
    arr = np.asarray(images)
    if arr.dtype != np.uint8:
        raise InputError(f"{where}: images must be uint8, got {arr.dtype}")
    if not (arr.ndim == 3 or (arr.ndim == 4 and arr.shape[-1] == 3)):
        raise InputError(f"{where}: images must be (N, H, W) or (N, H, W, 3), got shape "
                         f"{arr.shape}")
    if len(arr) == 0 or arr.shape[1] == 0 or arr.shape[2] == 0:
        raise InputError(f"{where}: no images (shape {arr.shape})")
    return arr


def _check_labels(labels: Any, n: int, where: str) -> list:
    arr = np.asarray(labels)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise InputError(f"{where}: labels must be (N,) or (N, 1), got shape {arr.shape} "
                         f"(multi-label arrays are not supported)")
    if len(arr) != n:
        raise InputError(f"{where}: {len(arr)} labels for {n} images")
    return [pd.NA if v is None else str(v.item() if hasattr(v, "item") else v) for v in arr]


def _header(archive: zipfile.ZipFile, name: str, where: str) -> tuple[tuple, np.dtype]:
    """Shape and dtype of an ``.npz`` member from its ``.npy`` header, without reading it."""
    with archive.open(name) as fh:
        version = np.lib.format.read_magic(fh)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read(fh)
    return shape, dtype


def read_npz(path: str | Path, *, corpus: str | None = None) -> pd.DataFrame:
    """Manifest of a MedMNIST-layout ``.npz`` (module notes). Image arrays are checked from
    their headers (never loaded here); labels are read. A missing pair, a length mismatch, a
    wrong dtype or shape is an :class:`InputError` naming the key."""
    from splitscope.manifest.rows import CONTENT_ARRAY, embedded_key, finish_rows

    path = Path(path)
    where = str(path)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(f"cannot read {where}: not a valid .npz (zip) archive: {exc}") from exc
    with archive:
        members = {n.removesuffix(".npy") for n in archive.namelist() if n.endswith(".npy")}
        splits = [s for s in MEDMNIST_SPLITS if f"{s}_images" in members]
        if not splits:
            raise InputError(f"{where} holds no MedMNIST image arrays (train_images, val_images, "
                             f"test_images); found: {', '.join(sorted(members)) or 'none'}")
        container = os.path.abspath(path)
        parts = []
        for s in splits:
            key = f"{s}_images"
            if f"{s}_labels" not in members:
                raise InputError(f"{where} has {key} but no {s}_labels")
            try:
                shape, dtype = _header(archive, f"{key}.npy", where)
                with np.load(path, allow_pickle=False) as npz:
                    labels = npz[f"{s}_labels"]
            except InputError:
                raise
            except Exception as exc:
                raise InputError(f"cannot read {where}: {type(exc).__name__}: {exc}") from exc
            if dtype != np.uint8 or not (len(shape) == 3 or (len(shape) == 4 and shape[-1] == 3)):
                raise InputError(f"{where}: {key} must be uint8 (N, H, W) or (N, H, W, 3), got "
                                 f"{dtype} {shape}")
            n = int(shape[0])
            label_text = _check_labels(labels, n, f"{where} {s}_labels")
            width = len(str(max(n - 1, 0)))
            parts.append(pd.DataFrame({
                "path": [f"{path.name}::{key}/{i}" for i in range(n)],
                "file": [embedded_key(container, key, i, width) for i in range(n)],
                "table": container, "table_row": np.arange(n, dtype=np.int64),
                "split_released": s, "label": label_text}))
    rows = pd.concat(parts, ignore_index=True)
    manifest = finish_rows(rows, corpus or path.stem, content=CONTENT_ARRAY)
    manifest.attrs = {"inputs": [{"kind": "npz", "path": str(path), "splits": splits,
                                  "rows": len(manifest)}], "excluded": []}
    return manifest


def _store(images: np.ndarray, folder: Path) -> Path:
    """``images`` saved (uncompressed) in ``folder`` under the digest of dtype, shape and
    pixels; an existing file of that name is kept as it is (same content, same cache)."""
    digest = hashlib.sha256(f"{images.dtype.str}:{images.shape}:".encode())
    digest.update(np.ascontiguousarray(images).data)
    target = folder / f"{digest.hexdigest()}.npz"
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{target.name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            np.savez(fh, images=images)
        os.replace(tmp, target)
    return target


def read_arrays(arrays: Arrays, store: str | Path | None) -> pd.DataFrame:
    """Manifest of in-memory arrays, stored in ``store`` (the scan passes
    ``<workspace>/arrays``); the rows are those of an ``.npz`` whose member is ``images``."""
    from splitscope.manifest.rows import CONTENT_ARRAY, embedded_key, finish_rows

    where = f"arrays {arrays.name or ''}".strip()
    images = _check_images(arrays.images, where)
    n = len(images)
    labels = _check_labels(arrays.labels, n, where) if arrays.labels is not None else \
        [pd.NA] * n
    split = arrays.split
    if split is None or isinstance(split, str):
        splits = [pd.NA if split is None else split] * n
    else:
        splits = [pd.NA if v is None else str(v) for v in np.asarray(split).ravel()]
        if len(splits) != n:
            raise InputError(f"{where}: {len(splits)} split values for {n} images")
    if store is None:
        raise InputError("in-memory arrays are read through splitscope.scan / audit, which keep "
                         "them in the workspace; save them as an .npz to build a manifest alone")
    target = _store(images, Path(store))
    container = os.path.abspath(target)
    width = len(str(max(n - 1, 0)))
    rows = pd.DataFrame({
        "path": [f"{arrays.name or 'arrays'}::images/{i}" for i in range(n)],
        "file": [embedded_key(container, "images", i, width) for i in range(n)],
        "table": container, "table_row": np.arange(n, dtype=np.int64),
        "split_released": splits, "label": labels})
    manifest = finish_rows(rows, arrays.name or "arrays", content=CONTENT_ARRAY)
    manifest.attrs = {"inputs": [{"kind": "arrays", "path": str(target), "rows": n,
                                  "sha256_of_pixels": target.stem}], "excluded": []}
    return manifest
