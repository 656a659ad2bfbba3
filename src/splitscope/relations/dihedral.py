"""Rotated and flipped copies (METHODS §2.8): the eight dihedral variants of an image.

A variant name ``g`` says that the query is ``g`` applied to its reference (e.g. ``flip_lr``:
the query is the reference mirrored left–right; ``rot90``: rotated 90° counter-clockwise).
Matching a query against ``g(reference)`` for every reference is computed, equivalently and
far more cheaply, by featurizing ``g⁻¹(query)`` once and searching it against the plain
references: NCC is unchanged by applying one pixel permutation to both images, and the hashes
are computed by the same featurization as the scan on the transformed image
(:func:`splitscope.features.imaging.image_features`). A match found this way is its own
predicate, counted apart from plain matches.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from splitscope.manifest.sources import open_for_image

#: name → (PIL transpose op applied to an image, numpy op on an (S, S) array)
VARIANTS: dict[str, tuple[int | None, object]] = {
    "identity": (None, lambda a: a),
    "rot90": (Image.Transpose.ROTATE_90, lambda a: np.rot90(a, 1)),
    "rot180": (Image.Transpose.ROTATE_180, lambda a: np.rot90(a, 2)),
    "rot270": (Image.Transpose.ROTATE_270, lambda a: np.rot90(a, 3)),
    "flip_lr": (Image.Transpose.FLIP_LEFT_RIGHT, lambda a: a[:, ::-1]),
    "flip_ud": (Image.Transpose.FLIP_TOP_BOTTOM, lambda a: a[::-1, :]),
    "transpose": (Image.Transpose.TRANSPOSE, lambda a: a.T),
    "transverse": (Image.Transpose.TRANSVERSE, lambda a: np.rot90(a, 2).T),
}
#: the inverse of each variant (rotations by 90° and 270° swap; the rest are involutions)
INVERSE = {"identity": "identity", "rot90": "rot270", "rot180": "rot180", "rot270": "rot90",
           "flip_lr": "flip_lr", "flip_ud": "flip_ud", "transpose": "transpose",
           "transverse": "transverse"}
NON_IDENTITY = tuple(v for v in VARIANTS if v != "identity")


def apply_image(img: Image.Image, variant: str) -> Image.Image:
    """``variant`` applied to a PIL image."""
    op = VARIANTS[variant][0]
    return img if op is None else img.transpose(op)


def apply_array(arr: np.ndarray, variant: str) -> np.ndarray:
    """``variant`` applied to the last two axes of an array (a thumbnail or a stack)."""
    fn = VARIANTS[variant][1]
    if arr.ndim == 2:
        return np.ascontiguousarray(fn(arr))
    return np.ascontiguousarray(np.stack([fn(a) for a in arr])) if len(arr) else arr.copy()


def query_side_features(files, variant: str, *, thumb_size: int = 96,
                        interpolation: str = "bicubic") -> dict:
    """Features of ``inverse(variant)`` applied to each query image, featurized like the scan.

    Returns ``{"phash": uint64 (n,), "dhash": uint64 (n,), "thumb": uint8 (n, S, S),
    "ok": bool (n,)}``; ``ok`` is False where the file could not be decoded (those queries are
    not assessed for the variant).
    """
    from splitscope.features.imaging import image_features

    inv = INVERSE[variant]
    n = len(files)
    ph = np.zeros(n, np.uint64)
    dh = np.zeros(n, np.uint64)
    th = np.zeros((n, thumb_size, thumb_size), np.uint8)
    ok = np.zeros(n, bool)
    for i, f in enumerate(files):
        try:
            with Image.open(open_for_image(f)) as img:
                img.load()
                feats = image_features(apply_image(img, inv), thumb_size=thumb_size,
                                       interpolation=interpolation)
        except Exception:  # noqa: BLE001, S112 - an undecodable query is counted, not raised
            continue
        ph[i] = np.uint64(int(feats["phash"]))
        dh[i] = np.uint64(int(feats["dhash"]))
        th[i] = feats["thumb"]
        ok[i] = True
    return {"phash": ph, "dhash": dh, "thumb": th, "ok": ok}
