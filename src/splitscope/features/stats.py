"""Intensity statistics of one decoded image (METHODS §4.5, §4.6), from the scan's single decode.

:func:`image_stats` takes the 8-bit grayscale image every other feature is computed from (and,
for the colour check, the decoded colour image) and returns plain numbers; the scan stores them
as feature columns, and the image-statistics probe and the quality flags read them. No second
pass over the files, no anatomy: each value summarises the whole image.

========================  =========================================================================
``intensity_mean``        mean grey level (0–255) of the full-resolution 8-bit image
``intensity_std``         its standard deviation (population, grey levels)
``intensity_p01``         1st percentile: the lowest grey level whose cumulative share is ≥ 1%
``intensity_p99``         99th percentile, the same rule (``p99 − p01`` is the contrast range)
``entropy_bits``          Shannon entropy of the 256-bin grey-level histogram, bits (0–8)
``laplacian_var``         variance of the 4-neighbour Laplacian of the S×S thumbnail
``sharpness``             ``laplacian_var`` / variance of the thumbnail (dimensionless; NA when
                          the thumbnail is flat): contrast-free, so a darkened image is not
                          "blurry"
``border_share``          share of the image area in uniform bands at its edges (0–1), on the
                          thumbnail
``colour_spread``         mean over pixels of max(R, G, B) − min(R, G, B), grey levels; 0 for a
                          grey image stored as colour, NA for an image without colour channels
========================  =========================================================================

Why the blur measure is computed on the thumbnail: the Laplacian's variance of the full image
falls with resolution (the same scene at 4× the pixels has ~¼ of the gradient per pixel), so it
would rank images by size, not by focus. The thumbnail is one fixed S×S grid for every image of
a scan (default 96², bicubic, antialiased, aspect not kept), so on it the measure is detail at
1/S of the image's extent whatever the stored size; blur finer than that grid is not seen, and
an image smaller than the grid is upsampled and has little detail at that scale. The thumbnail
is already computed, so the measure costs no resize; it depends on the thumbnail geometry,
which is part of the feature cache key (the blur flag compares rows of one scan only).

Uniform borders: from each edge, the run of rows (then, inside them, columns) whose every value
lies within ``BORDER_TOLERANCE`` grey levels of every value of the edge row — a constant band
such as padding, allowing a little compression noise. ``border_share`` = 1 − (area inside the
four runs) / (image area); a constant image has share 1. It is measured on the thumbnail: a
share of the area does not change when each axis is resized on its own, the thumbnail's
antialiasing evens out compression noise in the padding, and the cost does not grow with the
stored size; the share is resolved to 1/S of each side.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PIL import Image

__all__ = ["BLUR_SIDE", "BORDER_TOLERANCE", "STATS_COLUMNS", "STATS_DTYPES", "equal_bands",
           "image_stats"]

#: side of the grid the blur measure is computed on when no thumbnail is given (the default
#: thumbnail: 96², bicubic)
BLUR_SIDE = 96
#: grey levels of slack for a band at an edge to count as uniform (compression noise)
BORDER_TOLERANCE = 4

STATS_DTYPES: dict[str, str] = {
    "intensity_mean": "Float64",
    "intensity_std": "Float64",
    "intensity_p01": "Float64",
    "intensity_p99": "Float64",
    "entropy_bits": "Float64",
    "laplacian_var": "Float64",
    "sharpness": "Float64",
    "border_share": "Float64",
    "colour_spread": "Float64",
}
"""Column name → pandas dtype of the statistics (``<NA>`` where not computed)."""

STATS_COLUMNS: list[str] = list(STATS_DTYPES)

#: modes whose colour is read as stored (their first three bands are R, G, B)
_RGB_MODES = ("RGB", "RGBA", "RGBX", "RGBa")
#: colour modes converted to RGB for the colour check (LAB and HSV have no colorimetric
#: conversion in Pillow: not assessed)
_CONVERTED_MODES = ("P", "PA", "CMYK", "YCbCr")


def _histogram_stats(counts: np.ndarray) -> dict[str, float]:
    n = float(counts.sum())
    levels = np.arange(256, dtype=np.float64)
    p = counts / n
    mean = float(p @ levels)
    std = float(np.sqrt(max(float(p @ (levels - mean) ** 2), 0.0)))
    cum = np.cumsum(counts)
    p01 = float(np.searchsorted(cum, 0.01 * n))  # first level with cumulative count ≥ 1%
    p99 = float(np.searchsorted(cum, 0.99 * n))
    nz = p[p > 0]
    entropy = float(-(nz * np.log2(nz)).sum()) + 0.0  # + 0.0: no negative zero
    return {"intensity_mean": mean, "intensity_std": std, "intensity_p01": p01,
            "intensity_p99": p99, "entropy_bits": entropy}


def _blur_stats(small: np.ndarray) -> dict[str, float | None]:
    # the Laplacian of a uint8 grid is an integer of magnitude at most 4·255, exact in int16
    # (as it was in float32), and both variances are float64 sums of the same values in the
    # same order (C order whatever the input's), so their bits do not depend on the type
    small = np.ascontiguousarray(small, dtype=np.int16)
    lap = small[:-2, 1:-1] + small[2:, 1:-1]
    lap += small[1:-1, :-2]
    lap += small[1:-1, 2:]
    lap -= 4 * small[1:-1, 1:-1]
    lap_var = _variance(lap)
    var = _variance(small)
    return {"laplacian_var": lap_var, "sharpness": lap_var / var if var > 0 else None}


def _variance(a: np.ndarray) -> float:
    """``a.var(dtype=np.float64)``: numpy's operations (float64 mean, deviations, float64 sum
    of their squares) without its argument handling, which costs more than the sums here."""
    n = a.size
    mean = np.add.reduce(a, axis=None, dtype=np.float64, keepdims=True)
    mean /= n
    dev = np.subtract(a, mean)
    np.square(dev, out=dev)
    return float(np.add.reduce(dev, axis=None, dtype=np.float64)) / n


def _edge_run(mins: np.ndarray, maxs: np.ndarray) -> int:
    """Leading lines (rows or columns) whose values all lie within the tolerance of every value
    of the first line."""
    if int(maxs[0]) - int(mins[0]) > BORDER_TOLERANCE:  # the first line itself is not uniform
        return 0
    lo = int(maxs[0]) - BORDER_TOLERANCE
    hi = int(mins[0]) + BORDER_TOLERANCE
    inside = (mins >= lo) & (maxs <= hi)
    return len(inside) if inside.all() else int(np.argmin(inside))


def _border_share(a: np.ndarray) -> float:
    h, w = a.shape
    rmin, rmax = np.minimum.reduce(a, axis=1), np.maximum.reduce(a, axis=1)
    top = _edge_run(rmin, rmax)
    if top == h:
        return 1.0
    bottom = _edge_run(rmin[::-1], rmax[::-1])
    inner = a[top:h - bottom]
    cmin, cmax = np.minimum.reduce(inner, axis=0), np.maximum.reduce(inner, axis=0)
    left = _edge_run(cmin, cmax)
    right = 0 if left == w else _edge_run(cmin[::-1], cmax[::-1])
    kept = (h - top - bottom) * max(w - left - right, 0)
    return 1.0 - kept / (h * w)


def equal_bands(img: Image.Image, raw: bytes | None = None) -> Image.Image | np.ndarray | None:
    """The first band of an image whose first three bands (R, G, B) are equal at every pixel,
    else None. One middle row is compared first, so most colour images cost almost nothing
    here; the bands are split only when that row is grey.

    ``raw``: the image's ``tobytes()``, when the caller already has it; the bands are then
    compared as strided slices of it and the band comes back as a uint8 array (h, w), with no
    more copies out of Pillow."""
    w, h = img.size
    n = len(img.getbands())
    if raw is not None:
        start = (h // 2) * w * n
        row = raw[start:start + w * n]
    else:
        row = img.crop((0, h // 2, w, h // 2 + 1)).tobytes()
    if not (row[0::n] == row[1::n] == row[2::n]):
        return None
    if raw is not None:
        first = raw[0::n]
        if first == raw[1::n] and first == raw[2::n]:
            return np.frombuffer(first, dtype=np.uint8).reshape(h, w)
        return None
    r, g, b = img.split()[:3]
    rb = r.tobytes()
    return r if rb == g.tobytes() and rb == b.tobytes() else None


def _colour_spread(colour: Any) -> float | None:
    if colour is None:
        return None
    if isinstance(colour, Image.Image):
        if colour.mode in _CONVERTED_MODES:
            try:
                colour = colour.convert("RGB")
            except (ValueError, OSError):  # no RGB conversion for this mode: not assessed
                return None
        elif colour.mode not in _RGB_MODES:
            return None
        if equal_bands(colour) is not None:  # grey stored as colour: spread 0, fast
            return 0.0
        arr = np.asarray(colour)
    else:
        arr = np.asarray(colour)
    if arr.ndim != 3 or arr.shape[2] < 3 or arr.dtype != np.uint8:
        return None
    r, g, b = arr[..., 0], arr[..., 1], arr[..., 2]
    spread = np.maximum(np.maximum(r, g), b) - np.minimum(np.minimum(r, g), b)
    return float(spread.mean())


def image_stats(gray: Image.Image | np.ndarray, colour: Any = None,
                thumb: np.ndarray | None = None) -> dict[str, float | None]:
    """The statistics of :data:`STATS_COLUMNS` for one image.

    Parameters
    ----------
    gray : PIL image of mode ``L`` or uint8 array (h, w)
        The full-resolution 8-bit grayscale image (:func:`splitscope.features.imaging.to_gray8`).
    colour : PIL image or uint8 array (h, w, 3|4), optional
        The decoded image before grayscale conversion, for ``colour_spread``; ``None`` (or a
        single-channel image) when it has no colour channels.
    thumb : uint8 array (S, S), optional
        The scan's thumbnail of ``gray``, for the blur measure and the border share; default a
        96×96 bicubic resize (the default thumbnail).

    Returns
    -------
    dict
        One float (or ``None``) per column of :data:`STATS_COLUMNS`.
    """
    if isinstance(gray, Image.Image):
        if gray.mode != "L":
            raise ValueError(f"image_stats needs a mode L image, got {gray.mode}")
        img = gray
    else:
        a = np.asarray(gray)
        if a.ndim != 2 or a.dtype != np.uint8:
            raise ValueError(f"image_stats needs a 2-D uint8 array, got {a.dtype} {a.shape}")
        img = Image.fromarray(np.ascontiguousarray(a), mode="L")
    if img.size[0] * img.size[1] == 0:
        raise ValueError("image_stats needs a non-empty image")
    counts = np.asarray(img.histogram(), dtype=np.int64)  # Pillow's 256-bin count, in C
    if thumb is None:
        thumb = np.asarray(img.resize((BLUR_SIDE, BLUR_SIDE), Image.Resampling.BICUBIC))
    out: dict[str, float | None] = {**_histogram_stats(counts), **_blur_stats(thumb)}
    out["border_share"] = _border_share(np.asarray(thumb))
    out["colour_spread"] = _colour_spread(colour)
    return out
