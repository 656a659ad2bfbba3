"""Per-file feature extraction: one read, at most one decode, every feature (METHODS §1, §2, §4.1).

For each file, :func:`extract_files` reads the bytes once (one ``open().read()``) and computes
from those bytes, in order:

1. ``size_bytes`` and ``sha256`` of the bytes;
2. header fields without a pixel decode (:func:`splitscope.features.header.header_fields`);
3. one decode from the in-memory bytes (Pillow; DICOM through pydicom), the decoded-pixel
   digest ``pixel_xxh128`` (XXH3-128 over mode, size and raw pixel bytes — and, for palette
   images, the palette — so two re-encodes with equal pixels match and a different mode or
   shape never does). It is an equality key, not a security digest: 128 bits make an
   accidental collision among even 10**12 images a chance of about 10**-15, and the byte
   digest ``sha256`` stays SHA-256. It hashes the decoded buffer where one exists (an 8-bit
   grayscale image's pixel array, shared with step 4) instead of a further copy;
4. one 8-bit grayscale conversion (:func:`splitscope.features.imaging.to_gray8`), from which
   pHash, dHash, the S×S thumbnail and its flatness are computed;
5. intensity statistics of that grayscale image and of the decoded colour image
   (:func:`splitscope.features.stats.image_stats`: mean, spread, percentiles, entropy, blur
   on the thumbnail, uniform borders, colour spread). In fast mode they describe the
   reduced-scale decode.

The bytes come from a file (the hardened :func:`_read_bytes`) or, for an embedded image, from
a table cell read by :func:`splitscope.features.sources.fetch` (one open per table and batch);
either way steps 1–4 and the reason codes below are the same. A pixel array (an ``.npz`` row)
has no bytes: steps 1–2 do not apply (no ``size_bytes``, ``sha256`` or header fields) and its
pixels stand for the decoded image in steps 3–4.

Bad input never raises: the row gets a ``status`` reason code and an ``error`` detail, and keeps
what could be computed (a file whose bytes were read keeps ``size_bytes``, ``sha256`` and its
header fields). Reason codes:

========================  ==================================================================
``missing``               the path does not exist (also a dangling symbolic link)
``permission_denied``     the file exists but may not be read
``special_file``          not a regular file (a FIFO, socket, device or directory): never
                          opened for reading, so a FIFO cannot block and a device cannot
                          stream without end
``too_large``             larger than ``FeatureParams.max_file_bytes``; never read into memory
``unreadable``            any other error reading the bytes
``worker_crashed``        the worker process extracting the file's batch died twice (killed,
                          out of memory, a crash in a decoder); retried on the next scan
``zero_byte``             the file is empty
``not_an_image``          no image format in its magic bytes, and Pillow (or, for DICOM bytes,
                          pydicom) does not recognise it
``unsupported``           recognised, but cannot be decoded here (no decoder, a variant Pillow
                          cannot open such as an unknown TIFF compression, a mode with no
                          grayscale conversion, DICOM without the ``[dicom]`` extra or without
                          pixel data)
``truncated``             decoding failed part-way and the data ends early (Pillow's
                          ``LOAD_TRUNCATED_IMAGES`` is off, so missing data is never padded),
                          or a Huffman-coded JPEG is too short to code the 8×8 blocks its
                          frame header declares (:func:`jpeg_data_too_short`; not decoded)
``corrupt``               decoding failed although the data is complete (a JPEG with its end
                          marker, a PNG with its ``IEND`` chunk): damaged image data
``decompression_bomb``    width × height exceeds ``FeatureParams.max_pixels``; not decoded
========================  ==================================================================

Modes (``FeatureParams.mode``):

- ``exact`` (default): full decode; pHash and dHash are bit-identical to ``imagehash.phash`` and
  ``imagehash.dhash`` on 8-bit images, the thumbnail is Pillow's direct resize of the full image.
  A colour (YCbCr) JPEG is decoded by its luma alone (Pillow ``draft("L", None)``) when its
  chroma coefficients are provably zero from its Huffman tables
  (:mod:`splitscope.features.jpeg_chroma`): its RGB decode would be (Y, Y, Y), so the features
  are those of the RGB decode, ``decoded_mode`` stays ``RGB`` and ``chroma_flat`` is True.
  Otherwise the luma alone equals ``convert("L")`` only where both upsampled chroma planes are
  128 at every pixel, which Pillow cannot establish for less than a full decode (its YCbCr
  decode costs as much as the RGB one and it does not expose the coefficients): such files,
  grey or not, are decoded to RGB.
- ``fast``: JPEGs whose both sides are at least 2 × 2·T (T = max(thumb_size, 32)) are decoded at
  reduced DCT scale (Pillow ``draft``: scale 1/2, 1/4 or 1/8, chosen so that the decoded image
  keeps at least 2·T pixels on each side; for YCbCr JPEGs the Y channel is decoded as the
  grayscale image instead of Pillow's RGB→L conversion), then resized with the same
  antialiasing Pillow filters as exact mode (LANCZOS for the hashes, the thumbnail
  interpolation for the thumbnail). It is a different geometry: ``FeatureParams.key()`` differs, so fast features are
  cached apart and never compared with exact ones. Files decoded at reduced scale get no
  ``pixel_xxh128`` (their full-resolution pixels were never decoded; decoded-pixel identity is
  not assessed for them). Other files are decoded exactly as in exact mode.

  Fidelity versus exact mode (same file, exact vs fast features; measured with
  ``benchmarks/bench_features.py``, Pillow 13, libjpeg-turbo):

  - c3-brain-mri-yes-no: 56 of 253 files are large enough to be decoded at reduced scale;
    for them the NCC of the exact and fast 96² thumbnails has median 0.99990 and minimum 0.9877
    (5th percentile 0.9956); pHash differs in 0 bits for 40 files and 2 bits for 16 (max 2);
    dHash in 0 bits for 44, 1 for 9, 2 for 2, 3 for 1 (max 3).
  - 1,000 generated 512² MRI-like JPEGs (smooth blobs plus noise, quality 90; all reduced):
    NCC median 0.99992, minimum 0.99975; pHash bits median 0, 95th percentile 2, max 4;
    dHash bits median 1, 95th percentile 6, max 13 (on such smooth images adjacent 9×8 means
    differ by little, so dHash bits flip easily; use a dHash radius accordingly).
  - kermany-chest-xray-224: 224² is below 2 × 192, so no file is reduced and fast features
    equal exact ones.

Image orientation: EXIF orientation is *not* applied — features describe the stored pixels.
Multi-frame files (GIF, TIFF, multi-frame DICOM) are featurized by their first frame.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash
from PIL import Image, ImageFile, UnidentifiedImageError

from splitscope.errors import InputError
from splitscope.features import header as header_mod
from splitscope.features import imaging, jpeg_chroma, sources, stats
from splitscope.features.options import FeatureParams
from splitscope.options import DEFAULT_MAX_FILE_BYTES

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FEATURE_COLUMNS",
    "REASONS",
    "extract_files",
]

REASONS = (
    "missing",
    "permission_denied",
    "special_file",
    "too_large",
    "unreadable",
    "worker_crashed",
    "zero_byte",
    "not_an_image",
    "unsupported",
    "truncated",
    "corrupt",
    "decompression_bomb",
)
"""Failure reason codes (``status`` of a row that is not ``ok``)."""

"""Default read cap: files larger than 2 GiB are listed as ``too_large`` and never read."""

_DICOM_EXTRA = "install the [dicom] extra (pip install 'splitscope[dicom]') to decode DICOM"


# --------------------------------------------------------------------------------------------
# Output schema

_OWN_DTYPES: dict[str, str] = {
    "file": "string",
    "status": "string",
    "error": "string",
    "size_bytes": "Int64",
    "sha256": "string",
    "pixel_xxh128": "string",
    "decoded_mode": "string",
    "gray_rule": "string",
    "chroma_flat": "boolean",
    "phash": "UInt64",
    "dhash": "UInt64",
    "flat": "boolean",
    "has_thumb": "bool",
    **stats.STATS_DTYPES,
}


_DTYPES: dict[str, str] = {
    **_OWN_DTYPES,
    **{k: v for k, v in header_mod.HEADER_DTYPES.items() if k not in _OWN_DTYPES},
}


FEATURE_COLUMNS: list[str] = list(_DTYPES)
"""Columns of :func:`extract_files`'s table, in order: own columns, then header fields.

``decoded_mode`` is the mode of the decoded image (Pillow mode, or ``DICOM``); ``gray_rule`` says
how it became 8-bit grayscale: ``convert`` (``Image.convert("L")``, imagehash semantics) or
``minmax`` (the linear rule of :func:`splitscope.features.imaging.array_to_gray8`).
``chroma_flat`` is True for a colour JPEG whose chroma is provably flat (decoded by its luma
alone: R = G = B at every pixel, ``decoded_mode`` still ``RGB``), ``<NA>`` where that was not
established (which says nothing either way)."""


# --------------------------------------------------------------------------------------------
# One file


class _Failure(Exception):
    def __init__(self, status: str, error: str):
        super().__init__(error)
        self.status = status
        self.error = error


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"))


def _not_regular(mode: int) -> str | None:
    """What a non-regular file is (``None`` for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _FILE_KINDS if test(mode)), "not a regular file")


def _open_nonblocking(path: str, flags: int) -> int:
    # a FIFO swapped in after the check must not block the open
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


_READ_STEP = 1 << 20


def _read_bytes(path: str, limit: int = DEFAULT_MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, read once.

    ``os.stat`` comes first: anything but a regular file is a ``special_file`` failure and is
    never opened; a file above ``limit`` is ``too_large`` and never read. The file is opened
    non-blocking and checked again on the open descriptor, and the read stops at ``limit``
    (a file that grows, or one whose size the system reports as 0, cannot run past it).
    A URL (``s3://…``; see :mod:`splitscope.manifest.sources`) is read through fsspec with
    the same cap and reason codes (:func:`_read_url`)."""
    if "://" in path:
        from splitscope.manifest.sources import is_url

        if is_url(path):
            return _read_url(path, limit)
    try:
        st = os.stat(path)
        kind = _not_regular(st.st_mode)
        if kind is not None:
            raise _Failure("special_file", f"{kind}, not a regular file; not read")
        if st.st_size > limit:
            raise _Failure("too_large", f"{st.st_size:,} bytes exceeds max_file_bytes = "
                                        f"{limit:,}; not read")
        with open(path, "rb", opener=_open_nonblocking) as fh:
            kind = _not_regular(os.fstat(fh.fileno()).st_mode)
            if kind is not None:
                raise _Failure("special_file", f"{kind}, not a regular file; not read")
            data = fh.read(st.st_size + 1)
            if len(data) > st.st_size:  # longer than stat said: read on, up to the cap
                parts = [data]
                total = len(data)
                while total <= limit:
                    more = fh.read(_READ_STEP)
                    if not more:
                        break
                    parts.append(more)
                    total += len(more)
                data = b"".join(parts)
            if len(data) > limit:
                raise _Failure("too_large", f"more than max_file_bytes = {limit:,} bytes; "
                                            f"not read")
            return data
    except _Failure:
        raise
    except FileNotFoundError:
        kind = "dangling symbolic link" if os.path.islink(path) else "no such file"
        raise _Failure("missing", f"{kind}: {path}") from None
    except PermissionError as exc:
        raise _Failure("permission_denied", f"permission denied: {exc.strerror or exc}") from None
    except IsADirectoryError:
        raise _Failure("special_file", "a directory, not a regular file; not read") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise _Failure("unreadable", f"{type(exc).__name__}: {exc}") from None


def _read_url(url: str, limit: int) -> bytes:
    """The bytes of a URL through ``fsspec.open``: ``fs.info`` first (not a file:
    ``special_file``; above ``limit``: ``too_large``, never read), then a read capped at
    ``limit``; a missing object is ``missing``, a refused one ``permission_denied``, a scheme
    without its filesystem package ``unsupported``."""
    try:
        import fsspec
    except ImportError:
        from splitscope.manifest.sources import FSSPEC_HINT

        raise _Failure("unsupported", f"{url} is a URL: {FSSPEC_HINT}") from None
    try:
        of = fsspec.open(url, "rb")
        info = of.fs.info(of.path)
        if info.get("type") not in (None, "file"):
            raise _Failure("special_file", f"a {info.get('type')}, not a file; not read")
        size = info.get("size")
        if size is not None and size > limit:
            raise _Failure("too_large", f"{size:,} bytes exceeds max_file_bytes = {limit:,}; "
                                        f"not read")
        with of as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise _Failure("too_large", f"more than max_file_bytes = {limit:,} bytes; not read")
        return data
    except _Failure:
        raise
    except FileNotFoundError:
        raise _Failure("missing", f"no such object: {url}") from None
    except PermissionError as exc:
        raise _Failure("permission_denied", f"permission denied: {exc}") from None
    except ImportError as exc:  # the scheme's filesystem package is not installed
        raise _Failure("unsupported", f"{url}: {exc}") from None
    except ValueError as exc:  # "Protocol not known"
        raise _Failure("unsupported", f"{url}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any other failure of a remote read
        raise _Failure("unreadable", f"{type(exc).__name__}: {exc}"[:300]) from None


def _is_dicom(name: str, header: dict[str, Any]) -> bool:
    """DICOM by its preamble (the header's ``format``, sniffed from the bytes); by the ``.dcm``
    suffix only when the bytes name no other format (DICOM files without the 128-byte
    preamble exist)."""
    fmt = header["format"]
    if fmt is not None:
        return fmt == "DICOM"
    return name.lower().endswith((".dcm", ".dicom"))


def _pixel_digest(img: Image.Image, pixels: np.ndarray | bytes | None = None) -> str:
    """XXH3-128 (hex) of the decoded image: mode, size, palette (with its transparency) and the
    raw pixel bytes of ``img.tobytes()``. ``pixels``, when given, holds those bytes: the
    bytes themselves, or the C-contiguous array of them (``np.asarray(img)`` of a
    one-byte-per-pixel mode), hashed in place."""
    h = xxhash.xxh3_128()
    h.update(f"{img.mode}:{img.size[0]}x{img.size[1]}:".encode())
    if img.mode in ("P", "PA") and img.palette is not None:
        h.update(img.palette.mode.encode() + b":" + bytes(img.palette.tobytes()) + b":")
        transparency = img.info.get("transparency")
        if transparency is not None:
            h.update(repr(transparency).encode() + b":")
    w, height = img.size
    if pixels is not None:
        h.update(pixels)
    elif w * height <= _DIGEST_STRIP_PIXELS:
        h.update(img.tobytes())
    else:  # same bytes in row strips, so a large image is not copied whole once more
        step = max(1, _DIGEST_STRIP_PIXELS // max(w, 1))
        for top in range(0, height, step):
            h.update(img.crop((0, top, w, min(top + step, height))).tobytes())
    return h.hexdigest()


_DIGEST_STRIP_PIXELS = 1 << 22


def _luma_gray_and_rgb_digest(img: Image.Image) -> tuple[Image.Image | np.ndarray, str]:
    """For the luma-only decode (mode ``L``) of a colour JPEG whose chroma is zero: the gray
    image, and the digest of the RGB decode, (Y, Y, Y) at every pixel — the bytes of its
    ``tobytes()``, so :func:`_pixel_digest` of the RGB image gives the same value."""
    w, height = img.size
    h = xxhash.xxh3_128()
    h.update(f"RGB:{w}x{height}:".encode())
    if w * height <= _DIGEST_STRIP_PIXELS:
        y = np.asarray(img)
        h.update(np.repeat(y.reshape(-1), 3))
        return y, h.hexdigest()
    step = max(1, _DIGEST_STRIP_PIXELS // max(w, 1))
    for top in range(0, height, step):
        strip = np.asarray(img.crop((0, top, w, min(top + step, height))))
        h.update(np.repeat(strip.reshape(-1), 3))
    return img, h.hexdigest()


_TRUNCATION_WORDS = ("truncat", "broken", "premature", "unexpected end", "eof", "incomplete")
_UNSUPPORTED_WORDS = ("not available", "not supported", "unsupported", "not installed",
                      "unable to locate", "ghostscript", "unknown", "not implemented")


def _is_complete(data: bytes) -> bool:
    """True when the bytes end as a whole image file does: a JPEG's end-of-image marker or a
    PNG's ``IEND`` chunk near the end (trailing padding allowed)."""
    tail = data[-1024:]
    if data[:3] == b"\xff\xd8\xff":
        return b"\xff\xd9" in tail
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return b"IEND" in tail
    return False


def _decode_failure(exc: BaseException, data: bytes = b"") -> _Failure:
    msg = f"{type(exc).__name__}: {exc}"[:300]
    text = str(exc).lower()
    if isinstance(exc, Image.DecompressionBombError | Image.DecompressionBombWarning):
        return _Failure("decompression_bomb", msg)
    if isinstance(exc, NotImplementedError) or any(w in text for w in _UNSUPPORTED_WORDS):
        return _Failure("unsupported", msg)
    if _is_complete(data):  # the data is all there: damaged, not cut short
        return _Failure("corrupt", f"decoding failed on complete data (corrupt image data): "
                                   f"{msg}")
    if isinstance(exc, EOFError) or any(w in text for w in _TRUNCATION_WORDS):
        return _Failure("truncated", msg)
    return _Failure("truncated", f"decoding failed (corrupt data?): {msg}")


def _unidentified(header: dict[str, Any]) -> _Failure:
    """Pillow cannot open the bytes: not an image, unless the magic bytes name a format."""
    fmt = header["format"]
    if fmt is None:
        return _Failure("not_an_image", "not a recognised image format")
    problem = header["header_error"]
    if problem and any(w in problem.lower() for w in _TRUNCATION_WORDS):
        return _Failure("truncated", f"{fmt} file cannot be opened: {problem}")
    detail = f" (header: {problem})" if problem else ""
    return _Failure("unsupported", f"{fmt} recognised from its bytes, but Pillow cannot open "
                                   f"this variant{detail}")


def _bomb(w: Any, h: Any, params: FeatureParams) -> _Failure:
    """The decompression-bomb failure, naming the one bound that applies (``max_pixels``;
    Pillow's own message would name its own limit, twice as large)."""
    if not isinstance(w, int) or not isinstance(h, int):
        size = "more pixels than"
    else:
        size = f"{int(w)}x{int(h)} = {int(w) * int(h):,} pixels, more than"
    return _Failure("decompression_bomb",
                    f"{size} max_pixels = {params.max_pixels:,}; not decoded")


_HUFFMAN_SOF = {"SOF0", "SOF1", "SOF2"}  # arithmetic coding can spend less than a bit a block


def jpeg_data_too_short(data: bytes, w: int, h: int, header: dict[str, Any]) -> str | None:
    """Why a Huffman-coded JPEG cannot hold the image its frame header declares (``w`` ×
    ``h``), or None.

    Every 8×8 block of every component is coded with at least one bit (a Huffman code is at
    least one bit long, and each block's DC difference has one), so when fewer than blocks / 8
    bytes follow the first scan header (``FF DA``; an earlier one inside an embedded thumbnail
    only loosens the bound) the file lacks image data. libjpeg fills such missing blocks with grey and goes
    on: it warns, but Pillow discards decoder warnings, so neither ``LOAD_TRUNCATED_IMAGES``
    nor an error tells. Checked from the header alone, before any pixel is allocated, it
    bounds the memory a lying header can claim by the file's own size."""
    if header.get("jpeg_sof") not in _HUFFMAN_SOF:
        return None
    try:
        factors = [tuple(int(x) for x in f.split("x"))
                   for f in str(header.get("jpeg_sampling") or "").split(",") if f]
    except ValueError:
        return None
    if not factors:
        return None
    hmax = max(f[0] for f in factors) or 1
    vmax = max(f[1] for f in factors) or 1
    # blocks of a component: ⌈w·H/(8·Hmax)⌉ × ⌈h·V/(8·Vmax)⌉ (ceiling by negated floor)
    blocks = sum(-(-w * hi // (8 * hmax)) * -(-h * vi // (8 * vmax)) for hi, vi in factors)
    coded = len(data) - max(0, data.find(b"\xff\xda"))
    if coded * 8 >= blocks:
        return None
    return (f"the frame header declares {w}x{h} pixels ({blocks:,} 8x8 blocks, at least "
            f"{-(-blocks // 8):,} bytes of coded data) but {coded:,} bytes follow the scan "
            f"header; not decoded, as missing blocks would be filled with grey")


def _decode_pillow(
    data: bytes, params: FeatureParams, header: dict[str, Any], luma: bool = True
) -> tuple[Image.Image | np.ndarray, str, str | None, str, Image.Image | None, bool | None,
           bool]:
    """Decode with Pillow; return (8-bit gray image or uint8 array, decoded mode, pixel digest
    or None, gray rule, the decoded image (or, for RGB, its uint8 array (h, w, 3)) when it
    has colour channels that differ somewhere else None, chroma flat: True for a colour JPEG
    decoded by its luma alone, else None, grey: a colour image with R = G = B at every pixel).

    A colour JPEG whose chroma coefficients are provably zero
    (:func:`splitscope.features.jpeg_chroma.chroma_provably_zero`) is decoded by its luma
    alone (``luma``): its RGB decode would be (Y, Y, Y), so the gray image, the decoded mode
    (``RGB``) and the digest of the RGB pixels are those of the RGB decode. Should that decode
    fail, the file is decoded again the usual way, so its failure is reported as before."""
    try:
        img = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise _unidentified(header) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _bomb(header.get("width"), header.get("height"), params) from None
    except Exception as exc:  # noqa: BLE001 - a malformed header may raise anything
        raise _decode_failure(exc, data) from None
    w, h = img.size
    if w * h > params.max_pixels:
        raise _bomb(w, h, params)
    if img.format == "JPEG":
        short = jpeg_data_too_short(data, w, h, header)
        if short:
            raise _Failure("truncated", short)
    reduced = False
    if params.mode == "fast" and img.format == "JPEG":
        need = 2 * max(params.thumb_size, 32)
        if min(w, h) >= 2 * need:
            img.draft("L", (need, need))
            reduced = img.size != (w, h)
    # the header fields rule out most files at no cost: standard Huffman tables code every
    # symbol, and only sequential three-component frames can be proved
    luma_only = (luma and not reduced and img.format == "JPEG" and img.mode == "RGB"
                 and len(img.tile) == 1 and header.get("jpeg_optimized_huffman") is True
                 and header.get("jpeg_sof") in ("SOF0", "SOF1")
                 and jpeg_chroma.chroma_provably_zero(data))
    if luma_only:
        img.draft("L", None)
        luma_only = img.mode == "L" and img.size == (w, h)
    try:
        img.load()
    except Exception as exc:  # noqa: BLE001 - decoders raise OSError, SyntaxError, ValueError...
        if luma_only:
            return _decode_pillow(data, params, header, luma=False)
        raise _decode_failure(exc, data) from None
    if luma_only:
        gray, digest = _luma_gray_and_rgb_digest(img)
        return gray, "RGB", digest, "convert", None, True, True
    mode = img.mode
    rule = "minmax" if mode in imaging.WIDE_MODES else "convert"
    # an 8-bit grayscale or RGB image is copied out of Pillow once (a very large one stays in
    # Pillow, hashed in strips): the digest hashes that copy; the resizes read the grayscale
    # array, and the grey check and the colour spread read the RGB bytes
    small = w * h <= _DIGEST_STRIP_PIXELS
    pixels = np.asarray(img) if mode == "L" and small else None
    raw = img.tobytes() if mode == "RGB" and small else None
    digest = None if reduced else _pixel_digest(img, pixels if raw is None else raw)
    if pixels is not None:
        return pixels, mode, digest, rule, None, None, False
    band = stats.equal_bands(img, raw) if mode == "RGB" else None
    # grey stored as colour: Pillow converts RGB to L as (19595·R + 38470·G + 7471·B + 2¹⁵)
    # >> 16, whose weights sum to 2¹⁶, so with R = G = B the band *is* the grayscale image
    if band is not None:
        return band, mode, digest, rule, None, None, True
    try:
        gray = imaging.to_gray8(img)
    except (ValueError, OSError) as exc:
        raise _Failure("unsupported", f"no grayscale conversion for mode {mode}: {exc}") from None
    if raw is not None:  # colour, proved above: its bytes as the array np.asarray(img) gives
        pixels = np.frombuffer(raw, dtype=np.uint8).reshape(img.size[1], img.size[0], 3)
        return gray, mode, digest, rule, pixels, None, False
    return gray, mode, digest, rule, (img if img is not gray else None), None, False


def _decode_dicom(data: bytes, params: FeatureParams
                  ) -> tuple[np.ndarray, str, str, str, np.ndarray | None]:
    try:
        import pydicom
    except ImportError:
        raise _Failure("unsupported", f"DICOM file: {_DICOM_EXTRA}") from None
    try:
        ds = pydicom.dcmread(io.BytesIO(data), force=True)
    except Exception as exc:  # noqa: BLE001
        raise _Failure("not_an_image", f"not readable as DICOM: {exc}"[:300]) from None
    if "PixelData" not in ds:
        raise _Failure("unsupported", "DICOM file without pixel data")
    rows, cols = int(getattr(ds, "Rows", 0) or 0), int(getattr(ds, "Columns", 0) or 0)
    if rows * cols > params.max_pixels:
        raise _Failure(
            "decompression_bomb",
            f"{cols}x{rows} = {rows * cols} pixels exceeds max_pixels = {params.max_pixels}",
        )
    try:
        arr = ds.pixel_array
    except Exception as exc:  # noqa: BLE001 - missing handler, corrupt data, ...
        text = str(exc).lower()
        status = "truncated" if any(w in text for w in _TRUNCATION_WORDS) else "unsupported"
        raise _Failure(status, f"DICOM pixel data not decodable: {exc}"[:300]) from None
    arr = np.asarray(arr)
    digest = xxhash.xxh3_128()
    digest.update(f"DICOM:{arr.dtype.str}:{'x'.join(map(str, arr.shape))}:".encode())
    digest.update(np.ascontiguousarray(arr))
    frames = int(getattr(ds, "NumberOfFrames", 1) or 1)
    samples = int(getattr(ds, "SamplesPerPixel", 1) or 1)
    frame = arr[0] if frames > 1 else arr
    if samples == 1 and frame.ndim == 2:
        slope = float(getattr(ds, "RescaleSlope", 1.0) or 1.0)
        intercept = float(getattr(ds, "RescaleIntercept", 0.0) or 0.0)
        values = frame.astype(np.float64) * slope + intercept
        return imaging.array_to_gray8(values), "DICOM", digest.hexdigest(), "minmax", None
    if frame.ndim == 3 and frame.shape[-1] == 3:
        if frame.dtype == np.uint8:
            gray = Image.fromarray(np.ascontiguousarray(frame), mode="RGB").convert("L")
            return np.asarray(gray), "DICOM", digest.hexdigest(), "convert", frame
        luma = frame.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
        return imaging.array_to_gray8(luma), "DICOM", digest.hexdigest(), "minmax", None
    raise _Failure("unsupported", f"DICOM pixel array of shape {frame.shape} not supported")


def _from_array(pixels: np.ndarray, params: FeatureParams
                ) -> tuple[Image.Image, str, str, str, Image.Image | None]:
    """An image given as pixels (an array row, no encoded bytes): the same digest and the same
    grayscale conversion as a decoded image of that mode (``L`` for (H, W), ``RGB`` for
    (H, W, 3), uint8), and the colour image when it has colour channels."""
    h, w = pixels.shape[:2]
    if w * h > params.max_pixels:
        raise _Failure("decompression_bomb",
                       f"{w}x{h} = {w * h} pixels exceeds max_pixels = {params.max_pixels}")
    img = Image.fromarray(np.ascontiguousarray(pixels))
    colour = img if img.mode in ("RGB", "RGBA") else None
    return imaging.to_gray8(img), img.mode, _pixel_digest(img), "convert", colour


def _content(path: str, params: FeatureParams,
             embedded: sources.Embedded | None) -> tuple[bytes | np.ndarray, str]:
    """What to extract and the name it was released under: a file's bytes (the hardened
    read), or what :func:`splitscope.features.sources.fetch` read for an embedded key."""
    if embedded is None:
        return _read_bytes(path, params.max_file_bytes), os.path.basename(path)
    if embedded.failure is not None:
        raise _Failure(embedded.failure.status, embedded.failure.error)
    return embedded.content, os.path.basename(embedded.name or "")


def _extract_one(path: str, params: FeatureParams,
                 embedded: sources.Embedded | None = None) -> tuple[dict, np.ndarray | None]:
    row: dict[str, Any] = {"file": path}
    try:
        data, name = _content(path, params, embedded)
        chroma_flat = None
        grey = False  # a colour image with R = G = B everywhere (its colour spread is 0)
        if isinstance(data, np.ndarray):  # pixels without bytes: no digest, no header
            gray, mode, digest, rule, colour = _from_array(data, params)
        else:
            row["size_bytes"] = len(data)
            row["sha256"] = hashlib.sha256(data).hexdigest()
            header = header_mod.header_fields(data, name)
            for k, v in header.items():
                if k not in _OWN_DTYPES:
                    row[k] = v
            if not data:
                raise _Failure("zero_byte", "empty file (0 bytes)")
            if _is_dicom(name, header):
                gray, mode, digest, rule, colour = _decode_dicom(data, params)
            else:
                gray, mode, digest, rule, colour, chroma_flat, grey = _decode_pillow(
                    data, params, header)
        row["decoded_mode"] = mode
        row["gray_rule"] = rule
        row["chroma_flat"] = chroma_flat
        row["pixel_xxh128"] = digest
        small32, small9, thumb = imaging.gray_features(
            gray, params.thumb_size, params.interpolation
        )
        row.update(stats.image_stats(gray, colour, thumb))
        if grey:  # R = G = B at every pixel (compared, or proved by the luma decode)
            row["colour_spread"] = 0.0
    except _Failure as f:
        row["status"] = f.status
        row["error"] = f.error
        return row, None
    except MemoryError:
        row["status"] = "decompression_bomb"
        row["error"] = "out of memory while decoding"
        return row, None
    except Exception as exc:  # noqa: BLE001 - a bad file must never abort a run
        row["status"] = "unsupported"
        row["error"] = f"unexpected {type(exc).__name__}: {exc}"[:300]
        return row, None
    row["status"] = "ok"
    row["flat"] = bool(thumb.min() == thumb.max())
    row["_small"] = (small32, small9)
    return row, thumb


class _ExtractionContext:
    """Pillow settings for one extraction: bomb bound, no silent truncation, warnings as
    errors only for decompression bombs (other decoder warnings are not failures).

    The settings are process-wide Pillow globals, restored on exit: run concurrent extractions
    in processes (as the scan does), not in threads of one process."""

    def __init__(self, params: FeatureParams):
        self.params = params

    def __enter__(self):
        self._max = Image.MAX_IMAGE_PIXELS
        self._trunc = ImageFile.LOAD_TRUNCATED_IMAGES
        Image.MAX_IMAGE_PIXELS = self.params.max_pixels
        ImageFile.LOAD_TRUNCATED_IMAGES = False
        self._warn = warnings.catch_warnings()
        self._warn.__enter__()
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        return self

    def __exit__(self, *exc):
        self._warn.__exit__(*exc)
        Image.MAX_IMAGE_PIXELS = self._max
        ImageFile.LOAD_TRUNCATED_IMAGES = self._trunc
        return False


def extract_files(
    files: Sequence[str], params: FeatureParams | None = None
) -> tuple[pd.DataFrame, np.ndarray]:
    """Features of each file: one table row and one thumbnail per input path, in input order.

    Parameters
    ----------
    files : sequence of str
        Paths (absolute paths as in the manifest's ``file`` column). Duplicates are extracted
        again; pass unique files.
    params : FeatureParams, optional
        Extraction parameters (default ``FeatureParams()``: exact mode, 96² bicubic).

    Returns
    -------
    table : DataFrame
        One row per file, columns :data:`FEATURE_COLUMNS` (docs/data-model.md "Features"
        without ``thumb_index``, plus ``has_thumb``, ``decoded_mode``, ``gray_rule`` and every
        header field). ``status`` is ``ok`` or a reason code of :data:`REASONS`; ``error`` the
        detail. ``phash``/``dhash`` are ``UInt64`` (``<NA>`` when not decoded).
    thumbs : ndarray of uint8, shape (len(files), S, S)
        Thumbnails; all zeros where ``has_thumb`` is False.

    Notes
    -----
    Never raises for a bad file (see the module notes for the reason codes); raises
    :class:`~splitscope.errors.InputError` only for invalid ``params`` or a non-list input.
    """
    if params is None:
        params = FeatureParams()
    if not isinstance(params, FeatureParams):
        raise InputError(f"params must be a FeatureParams, got {type(params).__name__}")
    if isinstance(files, (str, bytes, os.PathLike)):
        raise InputError("files must be a list of paths, not a single path")
    return table_from_batch(extract_batch(files, params))


def extract_batch(files: Sequence[str], params: FeatureParams) -> dict[str, Any]:
    """The work of :func:`extract_files` without building the table (no pandas), for worker
    processes: ``{"rows": [dict per file], "thumbs", "has_thumb", "phash", "dhash"}``;
    :func:`table_from_batch` turns it into ``(table, thumbs)``."""
    files = [os.fspath(f) for f in files]
    size = params.thumb_size
    thumbs = np.zeros((len(files), size, size), dtype=np.uint8)
    rows: list[dict[str, Any]] = []
    ok_positions: list[int] = []
    smalls32: list[np.ndarray] = []
    smalls9: list[np.ndarray] = []
    embedded = sources.fetch(files, params.max_file_bytes)
    with _ExtractionContext(params):
        for i, path in enumerate(files):
            row, thumb = _extract_one(path, params, embedded.get(path))
            if thumb is not None:
                thumbs[i] = thumb
                s32, s9 = row.pop("_small")
                smalls32.append(s32)
                smalls9.append(s9)
                ok_positions.append(i)
            rows.append(row)
    has_thumb = np.zeros(len(files), dtype=bool)
    has_thumb[ok_positions] = True
    hashes = {}
    for name, small, fn in (("phash", smalls32, imaging.phash64_batch),
                            ("dhash", smalls9, imaging.dhash64_batch)):
        full = np.zeros(len(files), dtype=np.uint64)
        if ok_positions:
            full[ok_positions] = fn(np.stack(small))
        hashes[name] = full
    return {"rows": rows, "thumbs": thumbs, "has_thumb": has_thumb, **hashes}


def failure_batch(files: Sequence[str], params: FeatureParams, status: str,
                  error: str) -> dict[str, Any]:
    """A batch in :func:`extract_batch`'s shape in which every file failed with ``status``
    (e.g. ``worker_crashed``: nothing of it could be computed)."""
    size = params.thumb_size
    n = len(files)
    return {"rows": [{"file": os.fspath(f), "status": status, "error": error} for f in files],
            "thumbs": np.zeros((n, size, size), dtype=np.uint8),
            "has_thumb": np.zeros(n, dtype=bool),
            "phash": np.zeros(n, dtype=np.uint64), "dhash": np.zeros(n, dtype=np.uint64)}


def table_from_batch(batch: dict[str, Any]) -> tuple[pd.DataFrame, np.ndarray]:
    """``(table, thumbs)`` of :func:`extract_files` from :func:`extract_batch`'s output."""
    import pandas as pd

    table = _build_table(batch["rows"])
    has_thumb = batch["has_thumb"]
    table["has_thumb"] = has_thumb
    if has_thumb.any():
        for name in ("phash", "dhash"):
            table[name] = pd.arrays.IntegerArray(batch[name], ~has_thumb)
    return table, batch["thumbs"]


# Python types whose conversion to Arrow gives what pandas gives for each dtype (NaN is missing
# for Float64 in both); a column holding anything else is converted by pandas itself.
_PLAIN_TYPES: dict[str, type] = {"string": str, "Int64": int, "UInt64": int, "Float64": float,
                                 "boolean": bool}


def arrow_from_batch(batch: dict[str, Any], schema: Any, fixed: dict[str, Any]) -> Any:
    """:func:`table_from_batch`'s table of ``batch`` as a ``pyarrow.Table`` of ``schema``, built
    column by column without pandas (the scan commits every batch in this form).

    ``schema`` is the Arrow schema of that table (its pandas metadata included, so that reading
    it back restores the dtypes); ``fixed`` gives whole columns (``file``, the stat signature).
    A column whose values are all ``None`` or of the plain Python type of its dtype is converted
    by Arrow directly; any other column (a numpy scalar, a number in a text column) goes
    through ``pandas.array`` as in :func:`table_from_batch`, so the values are the same."""
    import pyarrow as pa

    rows = batch["rows"]
    has_thumb = np.asarray(batch["has_thumb"], dtype=bool)
    arrays = []
    for field in schema:
        name = field.name
        if name in fixed:
            arrays.append(pa.array(fixed[name], type=field.type))
        elif name == "has_thumb":
            arrays.append(pa.array(has_thumb, type=field.type))
        elif name in ("phash", "dhash") and has_thumb.any():
            arrays.append(pa.array(np.asarray(batch[name], dtype=np.uint64), type=field.type,
                                   mask=~has_thumb))
        else:
            arrays.append(_arrow_column([r.get(name) for r in rows], _DTYPES[name], field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _arrow_column(values: list[Any], dtype: str, arrow_type: Any) -> Any:
    import pyarrow as pa

    plain = _PLAIN_TYPES.get(dtype)
    if plain is not None and all(v is None or type(v) is plain for v in values):
        try:
            return pa.array(values, type=arrow_type, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass  # e.g. an integer beyond the range of the type: pandas says why below
    import pandas as pd

    if dtype == "bool":
        column: Any = np.array([bool(v) for v in values], dtype=bool)
    elif dtype == "UInt64":
        column = _build_table([{"v": v} for v in values], {"v": "UInt64"})["v"].array
    else:
        column = pd.array([pd.NA if v is None else v for v in values], dtype=dtype)
    return pa.array(column, type=arrow_type, from_pandas=True)


def _build_table(rows: list[dict[str, Any]],
                 dtypes: dict[str, str] | None = None) -> pd.DataFrame:
    import pandas as pd

    columns: dict[str, Any] = {}
    n = len(rows)
    for name, dtype in (_DTYPES if dtypes is None else dtypes).items():
        values = [r.get(name) for r in rows]
        if dtype == "UInt64":
            arr = np.zeros(n, dtype=np.uint64)
            mask = np.ones(n, dtype=bool)
            for i, v in enumerate(values):
                if v is not None:
                    arr[i] = v
                    mask[i] = False
            columns[name] = pd.arrays.IntegerArray(arr, mask) if n else pd.array([], "UInt64")
        elif dtype == "bool":
            columns[name] = np.array([bool(v) for v in values], dtype=bool)
        else:
            columns[name] = pd.array(
                [pd.NA if v is None else v for v in values], dtype=dtype
            )
    return pd.DataFrame(columns, index=pd.RangeIndex(n))
