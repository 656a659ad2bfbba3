"""Pixel features of one decoded image: 8-bit grayscale, pHash, dHash, NCC thumbnail.

These are the rules of METHODS §2.1–2.2 applied to one image:

- :func:`to_gray8` — the single 8-bit grayscale image every other feature is computed from;
- :func:`phash64`, :func:`dhash64` — 64-bit perceptual and difference hashes, bit-identical to
  ``imagehash.phash`` / ``imagehash.dhash`` with ``hash_size=8`` on 8-bit images
  (``format(phash64(g), "016x") == str(imagehash.phash(img))``);
- :func:`thumbnail` — the S×S grayscale thumbnail for NCC/SSIM (direct resize, aspect not kept);
- :func:`image_features` — all of the above from one grayscale conversion, the way the scan does
  it, so transformed images (transform sensitivity, dihedral variants) are featurized exactly
  like released files.

Hash bits are packed row-major, first bit most significant, which is the order of imagehash's
hex string; a hash is a Python ``int`` in ``[0, 2**64)`` (stored as ``uint64`` in tables).

Every resize equals Pillow's ``Image.resize`` pixel for pixel (LANCZOS for the hashes, as
imagehash's ``ANTIALIAS``; the thumbnail's filter for the thumbnail). For speed,
:func:`gray_features` (used by :func:`image_features` and the scan) computes them with
:func:`resize_exact`, which carries out Pillow's fixed-point two-pass resampling exactly as
banded float64 matrix products, once it has checked on a real image of the same geometry which
pass order Pillow uses; a geometry it cannot reproduce stays with Pillow (see
:class:`_ExactResizer`). The results do not depend on which path ran (tested on every file of
the real sets).

EXIF orientation is *not* applied anywhere: features describe the stored pixels, so a rotated
copy with an orientation tag is a rotated image here (the dihedral predicate finds it).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from PIL import Image

__all__ = [
    "HASH_SIZE",
    "INTERPOLATIONS",
    "WIDE_MODES",
    "array_to_gray8",
    "dhash64",
    "dhash64_batch",
    "gray_features",
    "image_features",
    "phash64",
    "phash64_batch",
    "resize_exact",
    "thumbnail",
    "to_gray8",
]

HASH_SIZE = 8
"""Hash side: 8×8 = 64 bits, imagehash's default."""

_PHASH_SIDE = HASH_SIZE * 4  # imagehash highfreq_factor 4 -> 32×32 before the DCT

INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}
"""Thumbnail interpolation names (Pillow filters); ``bicubic`` is the default of METHODS §2.2."""

WIDE_MODES = ("I", "I;16", "I;16L", "I;16B", "I;16N", "F")
"""Pillow modes whose values are not 8-bit; :func:`to_gray8` maps them with the linear rule of
:func:`array_to_gray8` instead of ``convert("L")``."""


# --------------------------------------------------------------------------------------------
# 8-bit grayscale


def array_to_gray8(values: np.ndarray) -> np.ndarray:
    """Map a 2-D array of any numeric dtype to 8-bit grayscale by one linear rule.

    The rule (used for 16-bit, 32-bit integer and float images and for DICOM pixel data after
    rescale slope/intercept) is a min–max stretch of the stored values::

        g = round_half_to_even(255 * (v - min(v)) / (max(v) - min(v)))

    with ``min``/``max`` over the finite values of this image. A constant image (max = min),
    an image without finite values, and every non-finite value (NaN, ±inf) map to 0.

    Parameters
    ----------
    values : ndarray, shape (h, w)
        Stored pixel values.

    Returns
    -------
    ndarray of uint8, shape (h, w)
    """
    a = np.asarray(values)
    if a.ndim != 2:
        raise ValueError(f"expected a 2-D array of pixel values, got shape {a.shape}")
    a = a.astype(np.float64, copy=False)
    finite = np.isfinite(a)
    all_finite = bool(finite.all())
    if not all_finite and not finite.any():
        return np.zeros(a.shape, dtype=np.uint8)
    lo = float(a.min() if all_finite else a[finite].min())
    hi = float(a.max() if all_finite else a[finite].max())
    if hi == lo:
        return np.zeros(a.shape, dtype=np.uint8)
    out = np.rint((a - lo) / (hi - lo) * 255.0)
    if not all_finite:
        out[~finite] = 0.0
    return np.clip(out, 0.0, 255.0).astype(np.uint8)


def to_gray8(img: Image.Image) -> Image.Image:
    """The 8-bit grayscale image (mode ``L``) that hashes and thumbnails are computed from.

    - 8-bit modes (``L``, ``RGB``, ``RGBA``, ``LA``, ``P`` with or without transparency, ``1``,
      ``CMYK``, ``YCbCr``, ...): exactly ``img.convert("L")``, which is what imagehash does, so
      the hashes are bit-identical to imagehash's. Alpha and palette transparency are ignored
      (the stored colour values are used).
    - 16-bit (``I;16``, ``I;16B``, ...), 32-bit integer (``I``) and float (``F``) images: the
      linear min–max rule of :func:`array_to_gray8`. imagehash would clip these at 255 instead;
      a min–max stretch keeps the content of a 12/16-bit radiograph visible.

    EXIF orientation is not applied: the features describe the stored pixels.
    """
    if img.mode == "L":
        return img
    if img.mode in WIDE_MODES:
        return Image.fromarray(array_to_gray8(np.asarray(img)), mode="L")
    return img.convert("L")


def _as_gray(gray: Image.Image | np.ndarray) -> Image.Image:
    if isinstance(gray, np.ndarray):
        if gray.dtype != np.uint8:
            return Image.fromarray(array_to_gray8(gray), mode="L")
        return Image.fromarray(gray, mode="L")
    return to_gray8(gray)


# --------------------------------------------------------------------------------------------
# Exact re-implementation of Pillow's 8-bit resampling (Resample.c), for speed

_PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed-point precision for 8-bit resampling
_FILTER_SUPPORT = {
    Image.Resampling.BOX: 0.5,
    Image.Resampling.BILINEAR: 1.0,
    Image.Resampling.HAMMING: 1.0,
    Image.Resampling.BICUBIC: 2.0,
    Image.Resampling.LANCZOS: 3.0,
}


def _filter_weights(resample: int, x: np.ndarray) -> np.ndarray:
    """Pillow's filter functions, vectorized (same operation order as Resample.c)."""
    if resample == Image.Resampling.LANCZOS:
        def sinc(v):
            with np.errstate(invalid="ignore", divide="ignore"):
                p = v * math.pi
                s = np.sin(p) / p
            return np.where(v == 0.0, 1.0, s)

        return np.where((x >= -3.0) & (x < 3.0), sinc(x) * sinc(x / 3), 0.0)
    if resample == Image.Resampling.BICUBIC:
        a = -0.5
        ax = np.abs(x)
        inner = ((a + 2.0) * ax - (a + 3.0)) * ax * ax + 1
        outer = (((ax - 5) * ax + 8) * ax - 4) * a
        return np.where(ax < 1.0, inner, np.where(ax < 2.0, outer, 0.0))
    if resample == Image.Resampling.BILINEAR:
        ax = np.abs(x)
        return np.where(ax < 1.0, 1.0 - ax, 0.0)
    if resample == Image.Resampling.BOX:
        return np.where((x > -0.5) & (x <= 0.5), 1.0, 0.0)
    raise KeyError(resample)


class _Axis:
    """Pillow's fixed-point filter for one axis (in_size -> out_size), in output blocks.

    ``blocks`` is a list of ``(out_start, out_stop, in_start, in_stop, matrix)`` where
    ``matrix[i, j]`` is Pillow's integer coefficient of input ``in_start + i`` for output
    ``out_start + j``, times 2**-22 (float64); inputs outside ``in_start:in_stop`` have zero
    weight for those outputs. Blocks keep the matrix products banded: each output uses only a few inputs.
    """

    __slots__ = ("blocks", "first", "last", "out_size")

    def __init__(self, blocks, first: int, last: int, out_size: int):
        self.blocks = blocks
        self.first = first
        self.last = last
        self.out_size = out_size


def _block_size(scale: float) -> int:
    """Outputs per block of the banded products: 8, whatever the scale. Measured on 224² and
    512² inputs for the three resizes of the scan (one core): 8 took 0.20 and 0.65 ms per
    image, against 0.25–0.27 and 0.80–1.02 ms for 4, 6, 10, 32 or a block that shrinks with the
    scale (narrow products that fit the BLAS kernel's tile beat skipping more zeros)."""
    return 8


@functools.lru_cache(maxsize=128)
def _axis(in_size: int, out_size: int, resample: int) -> _Axis | None:
    """Pillow's coefficients for one axis (Resample.c ``precompute_coeffs`` and
    ``normalize_coeffs_8bpc``), or ``None`` when some coefficient lies so close to a rounding
    boundary that last-ulp differences of ``sin`` could change it (the caller then uses Pillow).
    """
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = _FILTER_SUPPORT[resample] * filterscale
    centers = (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    xmin = np.maximum((centers - support + 0.5).astype(np.int64), 0)  # C casts truncate
    xmax = np.minimum((centers + support + 0.5).astype(np.int64), in_size) - xmin
    ksize = int(xmax.max())
    taps = np.arange(ksize)
    valid = taps[None, :] < xmax[:, None]
    pos = (taps[None, :] + xmin[:, None]).astype(np.float64)
    w = _filter_weights(resample, (pos - centers[:, None] + 0.5) * (1.0 / filterscale))
    w = np.where(valid, w, 0.0)
    ww = np.cumsum(w, axis=1)[:, -1]  # sequential sum, like the C loop
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(ww[:, None] != 0.0, w / ww[:, None], w)
    scaled = k * float(1 << _PRECISION_BITS)
    frac = np.abs(scaled - np.trunc(scaled))
    if np.any(valid & (np.abs(frac - 0.5) < 1e-6)):
        return None
    kint = np.where(valid, np.where(scaled < 0, np.trunc(-0.5 + scaled),
                                    np.trunc(0.5 + scaled)), 0.0)
    blocks = []
    step = _block_size(scale)
    for o0 in range(0, out_size, step):
        o1 = min(o0 + step, out_size)
        i0 = int(xmin[o0:o1].min())
        i1 = int((xmin[o0:o1] + xmax[o0:o1]).max())
        m = np.zeros((i1 - i0, o1 - o0), dtype=np.float64)
        for j in range(o0, o1):
            n = int(xmax[j])
            m[xmin[j] - i0: xmin[j] - i0 + n, j - o0] = kint[j, :n]
        # scaled by 2**-22 (exact: a power of two), so a product is already Pillow's
        # accumulator shifted right, up to the rounding half added in _fixed_to_u8; stored
        # transposed (outputs × inputs), the left operand of both passes
        blocks.append((o0, o1, i0, i1, np.ascontiguousarray(m.T) * (1.0 / (1 << _PRECISION_BITS))))
    return _Axis(blocks, int(xmin.min()), int((xmin + xmax).max()), out_size)


def _fixed_to_u8(acc: np.ndarray) -> np.ndarray:
    """Pillow's ``clip8`` on an accumulator already scaled by 2**-22: add the rounding half,
    floor (the arithmetic shift), clip to 0..255 (in place)."""
    acc += 0.5
    np.floor(acc, out=acc)
    return np.clip(acc, 0.0, 255.0, out=acc)


def _pass_rows(work: np.ndarray, axis: _Axis, offset: int) -> np.ndarray:
    """Horizontal pass: resample the columns of ``work`` (input columns start at ``offset``).
    Computed transposed (outputs × rows: a long product per block rather than a narrow one)
    and returned as a transposed view."""
    out = np.empty((axis.out_size, work.shape[0]))
    for o0, o1, i0, i1, mt in axis.blocks:
        np.matmul(mt, work[:, i0 - offset: i1 - offset].T, out=out[o0:o1])
    return _fixed_to_u8(out).T


def _pass_cols(work: np.ndarray, axis: _Axis, offset: int) -> np.ndarray:
    """Vertical pass: resample the rows of ``work`` (input rows start at ``offset``)."""
    out = np.empty((axis.out_size, work.shape[1]))
    for o0, o1, i0, i1, mt in axis.blocks:
        np.matmul(mt, work[i0 - offset: i1 - offset], out=out[o0:o1])
    return _fixed_to_u8(out)


def _resample(work: np.ndarray, horiz: _Axis | None, vert: _Axis | None, order: str) -> np.ndarray:
    """Pillow's two-pass resampling of a float64 image with integer values 0..255.

    ``order`` ``"h"``: horizontal pass first, over the rows the vertical pass uses (what
    Resample.c does); ``"v"``: vertical pass first, over the columns the horizontal pass uses.
    An axis that is ``None`` keeps its size (no pass).
    """
    if horiz is None and vert is None:
        return work.copy()
    if vert is None:  # the horizontal pass's result is a transposed view: made C-ordered,
        return np.ascontiguousarray(_pass_rows(work, horiz, 0))  # like every result
    if horiz is None:
        return _pass_cols(work, vert, 0)
    if order == "h":
        tmp = _pass_rows(work[vert.first: vert.last], horiz, 0)
        return _pass_cols(tmp, vert, vert.first)
    tmp = _pass_cols(work[:, horiz.first: horiz.last], vert, 0)
    return np.ascontiguousarray(_pass_rows(tmp, horiz, horiz.first))


def _axes(in_w: int, in_h: int, out_w: int, out_h: int, resample: int):
    """(horizontal, vertical) axes for one resize, ``None`` for an unchanged axis, or
    ``False`` when the exact computation cannot be trusted for this geometry."""
    if int(resample) not in _FILTER_SUPPORT or int(resample) == Image.Resampling.HAMMING:
        return False
    horiz = _axis(in_w, out_w, int(resample)) if out_w != in_w else None
    vert = _axis(in_h, out_h, int(resample)) if out_h != in_h else None
    if (out_w != in_w and horiz is None) or (out_h != in_h and vert is None):
        return False
    return horiz, vert


def resize_exact(
    gray: np.ndarray,
    size: tuple[int, int],
    resample: int = Image.Resampling.LANCZOS,
    order: str = "h",
) -> np.ndarray:
    """Pillow's 8-bit two-pass resampling of a 2-D uint8 array, as exact float64 matrix products.

    Pillow resamples 8-bit images in two passes, each with 22-bit fixed-point integer
    coefficients, rounding and clipping to 0..255 after each pass (Resample.c). Here each pass
    is a (banded) float64 matrix product: every term is an integer below 2**31 and every sum
    below 2**53, so the products are exact whatever the summation order. Pillow chooses which
    pass runs first (``order``: ``"h"`` horizontal first, ``"v"`` vertical first); with the order
    it used, the result equals ``Image.fromarray(gray).resize(size, resample)`` pixel for pixel.

    Parameters
    ----------
    gray : ndarray of uint8, shape (h, w)
    size : (width, height) of the output, as in Pillow.
    resample : Pillow filter (BOX, BILINEAR, BICUBIC or LANCZOS; others go to Pillow).
    order : ``"h"`` or ``"v"``, used only when both axes change.

    Returns
    -------
    ndarray of uint8, shape (height, width); Pillow's own result when a filter coefficient is
    too close to a rounding boundary for the float computation to be trusted.
    """
    gray = np.asarray(gray)
    out_w, out_h = int(size[0]), int(size[1])
    in_h, in_w = gray.shape
    axes = _axes(in_w, in_h, out_w, out_h, resample)
    if axes is False:
        img = Image.fromarray(np.ascontiguousarray(gray, dtype=np.uint8), mode="L")
        return np.asarray(img.resize((out_w, out_h), resample))
    return _resample(gray.astype(np.float64), *axes, order).astype(np.uint8)


class _GraySource:
    """One 8-bit grayscale image as Pillow and numpy need it, each form made once, on demand:
    a Pillow image (for Pillow's resize) and a float64 array (for the matrix products)."""

    __slots__ = ("_array", "_image", "_work", "size")

    def __init__(self, gray: Image.Image | np.ndarray):
        self._image = gray if isinstance(gray, Image.Image) else None
        self._array = None if self._image is not None else gray
        self._work = None
        self.size = self._image.size if self._image is not None else gray.shape[::-1]

    def image(self) -> Image.Image:
        if self._image is None:
            self._image = Image.fromarray(self._array, mode="L")
        return self._image

    def work(self) -> np.ndarray:
        if self._work is None:
            a = self._array if self._array is not None else np.asarray(self._image)
            self._work = a.astype(np.float64)
        return self._work


class _ExactResizer:
    """Resizes of 8-bit grayscale images that equal Pillow's ``Image.resize``, computed faster.

    Per geometry (input size, output size, filter): the first image is resized by Pillow. For the
    second, Pillow's result is compared with :func:`resize_exact` in both pass orders; if exactly
    one order reproduces it, that order is remembered and later images of that geometry are
    resized by the banded matrix products (for the hash sizes several times faster than Pillow on
    large images). If no order reproduces Pillow (another Pillow version, or a coefficient too
    near a rounding boundary) the geometry stays with Pillow for good. Every result therefore
    equals Pillow's; only the cost depends on how often a geometry recurs.
    """

    _MAX_GEOMETRIES = 4096
    _MAX_PIXELS = 1 << 24  # bound the float64 working copy (128 MiB); Pillow streams

    def __init__(self) -> None:
        self._state: dict[tuple, object] = {}

    def resize(self, gray: Image.Image | np.ndarray, targets) -> list[np.ndarray]:
        """``gray``: a mode ``L`` image or a C-contiguous 2-D uint8 array; ``targets``: list of
        ``((width, height), resample)``; returns uint8 arrays. An array is wrapped for Pillow
        without a copy, and an image is copied out of Pillow once, only when needed."""
        src = _GraySource(gray)
        w, h = src.size
        if w * h > self._MAX_PIXELS or w * h < 64 * 64:
            return [np.asarray(src.image().resize(size, f)) for size, f in targets]
        if len(self._state) > self._MAX_GEOMETRIES:
            self._state.clear()
        out: list = [None] * len(targets)
        planned = []
        for i, (size, f) in enumerate(targets):
            key = (w, h, size[0], size[1], int(f))
            state = self._state.get(key, 0)
            if state in ("h", "v"):
                planned.append((i, state, _axes(w, h, size[0], size[1], f)))
                continue
            out[i] = np.asarray(src.image().resize(size, f))
            if state == 0:
                self._state[key] = 1
            elif state == 1:
                self._state[key] = self._learn(src, out[i], size, f)
        if planned:
            work = src.work()
            for i, order, axes in planned:
                out[i] = _resample(work, *axes, order).astype(np.uint8)
        return out

    @staticmethod
    def _learn(src: _GraySource, expected: np.ndarray, size, f) -> object:
        axes = _axes(src.size[0], src.size[1], size[0], size[1], f)
        if axes is False:
            return "pillow"
        work = src.work()
        orders = ("h", "v") if axes[0] is not None and axes[1] is not None else ("h",)
        match = [o for o in orders if np.array_equal(_resample(work, *axes, o), expected)]
        if len(match) == 1:
            return match[0]
        return 1 if len(match) == 2 else "pillow"  # both match: undecided, learn again later


_RESIZER = _ExactResizer()


# --------------------------------------------------------------------------------------------
# Hashes


def _pack_bits(bits: np.ndarray) -> int:
    """Row-major bool array -> int, first bit most significant (imagehash's hex order)."""
    return int.from_bytes(np.packbits(bits.ravel()).tobytes(), "big")


def _pack_bits_rows(bits: np.ndarray) -> np.ndarray:
    """(n, 64) bool -> (n,) uint64, first bit most significant."""
    packed = np.packbits(bits.reshape(len(bits), -1), axis=1)  # (n, 8) big-endian bytes
    return packed.view(">u8").ravel().astype(np.uint64)


def _phash_from_small(small: np.ndarray) -> int:
    import scipy.fftpack

    dct = scipy.fftpack.dct(scipy.fftpack.dct(np.asarray(small, dtype=np.float64), axis=0), axis=1)
    low = dct[:HASH_SIZE, :HASH_SIZE]
    return _pack_bits(low > np.median(low))


def phash64(gray: Image.Image | np.ndarray) -> int:
    """64-bit perceptual hash, bit-identical to ``imagehash.phash(img)`` (hash_size 8).

    The 8-bit grayscale image is resized to 32×32 with Pillow's LANCZOS filter, transformed
    with a type-II DCT along rows then columns (``scipy.fftpack.dct``), and each of the 8×8
    lowest-frequency coefficients becomes a bit: 1 when it is above their median.

    Parameters
    ----------
    gray : PIL image (any mode; converted with :func:`to_gray8`) or uint8 array (h, w).

    Returns
    -------
    int in [0, 2**64); ``format(value, "016x")`` is imagehash's string.
    """
    g = _as_gray(gray)
    small = np.asarray(g.resize((_PHASH_SIDE, _PHASH_SIDE), Image.Resampling.LANCZOS))
    return _phash_from_small(small)


def dhash64(gray: Image.Image | np.ndarray) -> int:
    """64-bit difference hash, bit-identical to ``imagehash.dhash(img)`` (hash_size 8).

    The 8-bit grayscale image is resized to 9×8 (width×height) with LANCZOS; bit (r, c) is 1
    when pixel (r, c+1) is brighter than pixel (r, c).
    """
    g = _as_gray(gray)
    small = np.asarray(g.resize((HASH_SIZE + 1, HASH_SIZE), Image.Resampling.LANCZOS))
    return _pack_bits(small[:, 1:] > small[:, :-1])


_NEAR_MEDIAN = 1e-10


@functools.lru_cache(maxsize=1)
def _dct_rows() -> np.ndarray:
    """First 8 rows of the unnormalized type-II DCT matrix of size 32 (scipy.fftpack's)."""
    n = _PHASH_SIDE
    k = np.arange(HASH_SIZE)[:, None]
    i = np.arange(n)[None, :]
    return 2.0 * np.cos(np.pi * k * (2 * i + 1) / (2 * n))


def phash64_batch(smalls: np.ndarray) -> np.ndarray:
    """pHash of many 32×32 LANCZOS-resized grayscale images at once.

    The low-frequency DCT block is computed as one batched matrix product ``C X Cᵀ``. Its values
    differ from ``scipy.fftpack.dct`` by rounding only, so a bit could flip only where a
    coefficient lies within rounding distance of the median; such images (e.g. flat ones, where
    every AC coefficient is ~0) are recomputed with ``scipy.fftpack`` exactly as imagehash does.
    Each coefficient is two sums of 32 products with ``|C| <= 2``, so either computation is
    within about ``64 · 2⁻⁵³ · 4 Σ|x| ≈ 7e-15 · 4 Σ|x|`` of the exact value; an image is
    recomputed when a coefficient lies within ``1e-10 · (4 Σ|x| + 1)`` of the median, a margin
    of about 10⁴ over that bound (on Kermany no image is, so a worker rarely imports scipy).

    Parameters
    ----------
    smalls : ndarray, shape (n, 32, 32), values 0..255

    Returns
    -------
    ndarray of uint64, shape (n,)
    """
    x = np.asarray(smalls, dtype=np.float64)
    if x.ndim != 3 or x.shape[1:] != (_PHASH_SIDE, _PHASH_SIDE):
        raise ValueError(f"expected shape (n, 32, 32), got {x.shape}")
    if len(x) == 0:
        return np.zeros(0, dtype=np.uint64)
    c = _dct_rows()
    low = c @ x @ c.T  # (n, 8, 8): DCT along axis 0 (rows k) then axis 1
    flat = low.reshape(len(x), -1)
    med = np.median(flat, axis=1)
    bits = flat > med[:, None]
    tol = _NEAR_MEDIAN * (4.0 * np.abs(x).sum(axis=(1, 2)) + 1.0)
    near = np.abs(flat - med[:, None]).min(axis=1) <= tol
    out = _pack_bits_rows(bits)
    for i in np.flatnonzero(near):
        out[i] = _phash_from_small(x[i])
    return out


def dhash64_batch(smalls: np.ndarray) -> np.ndarray:
    """dHash of many 9×8 (width×height) resized grayscale images: (n, 8, 9) -> (n,) uint64."""
    x = np.asarray(smalls)
    if x.ndim != 3 or x.shape[1:] != (HASH_SIZE, HASH_SIZE + 1):
        raise ValueError(f"expected shape (n, 8, 9), got {x.shape}")
    if len(x) == 0:
        return np.zeros(0, dtype=np.uint64)
    return _pack_bits_rows(x[:, :, 1:] > x[:, :, :-1])


# --------------------------------------------------------------------------------------------
# Thumbnail and the full feature set


def _resample_filter(interpolation: str) -> int:
    try:
        return INTERPOLATIONS[interpolation]
    except KeyError:
        raise ValueError(
            f"unknown interpolation {interpolation!r}; use one of {', '.join(INTERPOLATIONS)}"
        ) from None


def _check_size(size: int) -> int:
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 2:
        raise ValueError(f"thumbnail size must be an integer >= 2, got {size!r}")
    return int(size)


def thumbnail(
    gray: Image.Image | np.ndarray, size: int = 96, interpolation: str = "bicubic"
) -> np.ndarray:
    """S×S 8-bit grayscale thumbnail for NCC and SSIM (METHODS §2.2).

    Direct resize of the :func:`to_gray8` image to ``size``×``size`` (aspect ratio not kept)
    with Pillow's filter named by ``interpolation``.

    Returns
    -------
    ndarray of uint8, shape (size, size), writable.
    """
    size = _check_size(size)
    g = _as_gray(gray)
    return np.array(g.resize((size, size), _resample_filter(interpolation)), dtype=np.uint8)


def gray_features(
    gray: Image.Image | np.ndarray, thumb_size: int = 96, interpolation: str = "bicubic"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three resizes every feature needs, from one 8-bit grayscale image.

    Parameters
    ----------
    gray : PIL image of mode ``L`` or uint8 array (h, w)
    thumb_size, interpolation : thumbnail geometry (see :func:`thumbnail`).

    Returns
    -------
    (small32, small9x8, thumb)
        The 32×32 and 8×9 (rows×columns) LANCZOS images behind pHash and dHash and the S×S
        thumbnail, uint8 arrays, each equal to Pillow's ``Image.resize`` of the same image.
    """
    size = _check_size(thumb_size)
    thumb_filter = _resample_filter(interpolation)
    if isinstance(gray, np.ndarray):
        if gray.ndim != 2:
            raise ValueError(f"gray_features needs a 2-D array, got shape {gray.shape}")
        img = np.ascontiguousarray(gray, dtype=np.uint8)
    else:
        img = gray
        if img.mode != "L":
            raise ValueError(f"gray_features needs a mode L image, got {img.mode}")
    lanczos = Image.Resampling.LANCZOS
    small32, small9, thumb = _RESIZER.resize(
        img,
        [((_PHASH_SIDE, _PHASH_SIDE), lanczos), ((HASH_SIZE + 1, HASH_SIZE), lanczos),
         ((size, size), thumb_filter)],
    )
    thumb = np.array(thumb, dtype=np.uint8)  # writable
    return small32, small9, thumb


def image_features(
    img: Image.Image, thumb_size: int = 96, interpolation: str = "bicubic"
) -> dict[str, object]:
    """pHash, dHash, thumbnail and flatness of one image, from one grayscale conversion.

    This is exactly what the scan computes for a decoded file in exact mode, so transformed
    images are comparable with the released ones.

    Returns
    -------
    dict
        ``phash`` (int), ``dhash`` (int), ``thumb`` (uint8 array (S, S)) and ``flat`` (bool:
        the thumbnail has zero variance, so NCC is undefined).
    """
    small32, small9, thumb = gray_features(to_gray8(img), thumb_size, interpolation)
    return {
        "phash": _phash_from_small(small32),
        "dhash": _pack_bits(small9[:, 1:] > small9[:, :-1]),
        "thumb": thumb,
        "flat": bool(thumb.min() == thumb.max()),
    }
