"""Header features without pixel decode (METHODS §4.1).

What a file says about where it came from, read from its bytes alone: format (from the magic
bytes, not the name), size, mode, bit depth, bytes per pixel; for JPEG the quantization tables
with an estimated IJG quality, chroma subsampling, progressive and optimized-Huffman coding, the
restart interval, APPn segments and the EXIF orientation; for PNG the colour type, bit depth,
interlace, the chunk list and the zlib level; for DICOM selected header tags. These are the
inputs of the header-only probe (§4.2): a construction shortcut shows up here when one class
was saved differently from another. The DICOM PatientID is kept only as a digest
(:data:`DICOM_PATIENT_DIGEST`), for the group layer's proposed keys (§3.6), and is no probe
input.

JPEG markers and PNG chunks are walked here directly; Pillow is used only to open other formats
lazily (``Image.open`` parses the header; no ``load()``), and pydicom, when importable, reads
DICOM with ``stop_before_pixels=True``. Nothing here decodes pixels, so it is cheap enough to run
on every file.

Every returned dict has every key of :data:`HEADER_COLUMNS` (``None`` where a field does not
apply or could not be read). A malformed or truncated header never raises: what could be parsed
is returned together with ``header_error``, a short reason.
"""

from __future__ import annotations

import functools
import hashlib
import io
import struct
import warnings
from typing import Any

import numpy as np

__all__ = [
    "DICOM_PATIENT_DIGEST",
    "HEADER_COLUMNS",
    "HEADER_DTYPES",
    "estimate_jpeg_quality",
    "header_fields",
    "sniff_format",
]

#: Number of quantization-table slots a JPEG can define (ids 0..3).
_N_QT = 4

#: PNG chunks that get a presence flag ``png_<type>``.
PNG_FLAG_CHUNKS = (
    "PLTE", "tRNS", "gAMA", "cHRM", "sRGB", "iCCP", "pHYs", "sBIT",
    "tEXt", "zTXt", "iTXt", "tIME", "bKGD", "eXIf",
)

#: DICOM attributes copied as ``dicom_<keyword>``.
DICOM_TAGS = (
    "Modality", "Manufacturer", "ManufacturerModelName", "PhotometricInterpretation",
    "BitsAllocated", "BitsStored", "Rows", "Columns", "PixelSpacing", "TransferSyntaxUID",
    "InstitutionName",
)
#: The DICOM PatientID, kept only as a digest (the first 16 hex digits of the SHA-256 of its
#: text): a group key the group layer may propose (METHODS §3.6), never the identifier itself
#: in the cache or an output; equal ids give equal digests. Not a header-probe input.
DICOM_PATIENT_DIGEST = "dicom_PatientID_digest"

#: Column name -> pandas dtype, for building a table from many ``header_fields`` dicts.
HEADER_DTYPES: dict[str, str] = {
    "header_error": "string",
    "format": "string",
    "extension": "string",
    "extension_mismatch": "boolean",
    "file_size": "Int64",
    "width": "Int64",
    "height": "Int64",
    "aspect": "Float64",
    "mode": "string",
    "channels": "Int64",
    "bit_depth": "Int64",
    "bytes_per_pixel": "Float64",
    "density_x": "Float64",
    "density_y": "Float64",
    "density_unit": "string",
    # JPEG
    "jpeg_sof": "string",
    "jpeg_progressive": "boolean",
    "jpeg_components": "Int64",
    "jpeg_sampling": "string",
    "jpeg_subsampling": "string",
    "jpeg_n_qtables": "Int64",
    **{f"jpeg_qt{i}": "string" for i in range(_N_QT)},
    **{f"jpeg_qt{i}_sum": "Int64" for i in range(_N_QT)},
    "jpeg_quality": "Int64",
    "jpeg_quality_error": "Float64",
    "jpeg_optimized_huffman": "boolean",
    "jpeg_restart_interval": "Int64",
    "jpeg_comment": "boolean",
    "app_jfif": "boolean",
    "app_exif": "boolean",
    "app_xmp": "boolean",
    "app_icc": "boolean",
    "app_adobe": "boolean",
    "app_photoshop": "boolean",
    "app_segments": "string",
    "exif_orientation": "Int64",
    "exif_make": "string",
    "exif_model": "string",
    "exif_software": "string",
    # PNG
    "png_color_type": "Int64",
    "png_bit_depth": "Int64",
    "png_interlace": "Int64",
    "png_chunks": "string",
    "png_idat_count": "Int64",
    "png_zlib_level": "Int64",
    "png_text_keys": "string",
    **{f"png_{c}": "boolean" for c in PNG_FLAG_CHUNKS},
    # DICOM
    **{
        f"dicom_{t}": ("Int64" if t in ("BitsAllocated", "BitsStored", "Rows", "Columns")
                       else "string")
        for t in DICOM_TAGS
    },
    DICOM_PATIENT_DIGEST: "string",
}

#: Every key :func:`header_fields` returns, in a stable order.
HEADER_COLUMNS: list[str] = list(HEADER_DTYPES)

# ---------------------------------------------------------------------------------------------
# Reference tables (ITU-T T.81 Annex K; the IJG library uses them as its defaults)

#: Natural (row-major) index of each zigzag position: ``natural[ZIGZAG[k]] = zigzag[k]``.
ZIGZAG = np.array([
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
    12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
    35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
    58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
])

_STD_LUMA_NATURAL = np.array([
    16, 11, 10, 16, 24, 40, 51, 61,
    12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56,
    14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77,
    24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101,
    72, 92, 95, 98, 112, 100, 103, 99,
])
_STD_CHROMA_NATURAL = np.array([
    17, 18, 24, 47, 99, 99, 99, 99,
    18, 21, 26, 66, 99, 99, 99, 99,
    24, 26, 56, 99, 99, 99, 99, 99,
    47, 66, 99, 99, 99, 99, 99, 99,
] + [99] * 32)


def _ijg_tables(base_natural: np.ndarray, max_value: int) -> np.ndarray:
    """(100, 64) tables in zigzag order for quality 1..100, scaled as ``jpeg_set_quality``."""
    q = np.arange(1, 101)
    scale = np.where(q < 50, 5000 // q, 200 - 2 * q)
    base = base_natural[ZIGZAG]
    tables = (base[None, :] * scale[:, None] + 50) // 100
    return np.clip(tables, 1, max_value)


_IJG_LUMA = {8: _ijg_tables(_STD_LUMA_NATURAL, 255), 16: _ijg_tables(_STD_LUMA_NATURAL, 32767)}
_IJG_CHROMA = {8: _ijg_tables(_STD_CHROMA_NATURAL, 255),
               16: _ijg_tables(_STD_CHROMA_NATURAL, 32767)}

# Huffman tables of Annex K.3 as (class, bits counts, values); class 0 = DC, 1 = AC.
_AC_LUMA_VALUES = bytes([
    0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61,
    0x07, 0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xA1, 0x08, 0x23, 0x42, 0xB1, 0xC1, 0x15, 0x52,
    0xD1, 0xF0, 0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0A, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x25,
    0x26, 0x27, 0x28, 0x29, 0x2A, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x43, 0x44, 0x45,
    0x46, 0x47, 0x48, 0x49, 0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x63, 0x64,
    0x65, 0x66, 0x67, 0x68, 0x69, 0x6A, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A, 0x83,
    0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99,
    0x9A, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6,
    0xB7, 0xB8, 0xB9, 0xBA, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xCA, 0xD2, 0xD3,
    0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA, 0xE1, 0xE2, 0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8,
    0xE9, 0xEA, 0xF1, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8, 0xF9, 0xFA,
])
_AC_CHROMA_VALUES = bytes([
    0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61,
    0x71, 0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xA1, 0xB1, 0xC1, 0x09, 0x23, 0x33,
    0x52, 0xF0, 0x15, 0x62, 0x72, 0xD1, 0x0A, 0x16, 0x24, 0x34, 0xE1, 0x25, 0xF1, 0x17, 0x18,
    0x19, 0x1A, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x43, 0x44,
    0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5A, 0x63,
    0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6A, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7A,
    0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97,
    0x98, 0x99, 0x9A, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4,
    0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xCA,
    0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA, 0xE2, 0xE3, 0xE4, 0xE5, 0xE6, 0xE7,
    0xE8, 0xE9, 0xEA, 0xF2, 0xF3, 0xF4, 0xF5, 0xF6, 0xF7, 0xF8, 0xF9, 0xFA,
])
_STANDARD_HUFFMAN = frozenset({
    (0, bytes([0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]), bytes(range(12))),
    (0, bytes([0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]), bytes(range(12))),
    (1, bytes([0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7D]), _AC_LUMA_VALUES),
    (1, bytes([0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77]), _AC_CHROMA_VALUES),
})

_SOF_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_PROGRESSIVE_SOF = {0xC2, 0xC6, 0xCA, 0xCE}

_EXTENSION_FORMAT = {
    "jpg": "JPEG", "jpeg": "JPEG", "jpe": "JPEG", "jfif": "JPEG",
    "png": "PNG", "gif": "GIF", "bmp": "BMP", "dib": "BMP",
    "tif": "TIFF", "tiff": "TIFF", "webp": "WEBP",
    "dcm": "DICOM", "dicom": "DICOM",
    "jp2": "JPEG2000", "j2k": "JPEG2000", "jpx": "JPEG2000",
    "pgm": "PPM", "ppm": "PPM", "pbm": "PPM", "pnm": "PPM",
}

_MODE_BIT_DEPTH = {
    "1": 1, "L": 8, "P": 8, "LA": 8, "PA": 8, "RGB": 8, "RGBA": 8, "RGBX": 8, "CMYK": 8,
    "YCbCr": 8, "LAB": 8, "HSV": 8, "I;16": 16, "I;16B": 16, "I;16L": 16, "I;16N": 16,
    "I": 32, "F": 32,
}
_MODE_CHANNELS = {
    "1": 1, "L": 1, "P": 1, "LA": 2, "PA": 2, "RGB": 3, "RGBA": 4, "RGBX": 4, "CMYK": 4,
    "YCbCr": 3, "LAB": 3, "HSV": 3, "I;16": 1, "I;16B": 1, "I;16L": 1, "I;16N": 1, "I": 1,
    "F": 1,
}

_MAX_TEXT = 64


class _HeaderError(Exception):
    """A header structure problem; its message becomes ``header_error``."""


# ---------------------------------------------------------------------------------------------
# Public API


def header_fields(data: bytes, name: str | None = None) -> dict[str, Any]:
    """Header features of one file, read from its bytes without decoding pixels.

    Parameters
    ----------
    data : bytes
        The whole file (only the header is parsed, but ``file_size`` and ``bytes_per_pixel``
        use its length).
    name : str, optional
        File name or path as released; gives ``extension`` and ``extension_mismatch`` (the
        extension names a different format than the magic bytes, e.g. a PNG saved as
        ``.jpg``). ``extension_mismatch`` is ``None`` when the extension is absent or not
        an image extension known here, or when the bytes are not a recognized format.

    Returns
    -------
    dict
        One flat dict with every key of :data:`HEADER_COLUMNS`, values ``int``, ``float``,
        ``bool``, ``str`` or ``None`` (not applicable or not readable). Lists are joined with
        commas. ``header_error`` is ``None`` when the header parsed, else a short reason; the
        fields read before the problem are kept.

    Notes
    -----
    - ``format`` comes from the magic bytes: ``JPEG``, ``PNG``, ``GIF``, ``BMP``, ``TIFF``,
      ``WEBP``, ``DICOM`` (128-byte preamble + ``DICM``), ``JPEG2000``, ``PPM``, else what
      Pillow's lazy ``Image.open`` recognizes, else ``None``.
    - ``jpeg_qt<i>`` is table id *i* as stored (zigzag order), 64 comma-separated values;
      ``jpeg_quality`` is the IJG quality 1..100 whose scaled Annex K tables fit the file's
      luminance (and chrominance) tables best, ``jpeg_quality_error`` the mean absolute
      coefficient difference at that quality (0 means the file used exactly the IJG tables;
      a large value means the tables are not IJG-scaled and the quality is only indicative).
    - ``app_segments`` lists the distinct APPn markers in order of first appearance
      (``"APP0,APP1,APP2"``); ``png_chunks`` likewise lists distinct chunk types.
      ``png_zlib_level`` is the FLEVEL field of the first IDAT's zlib header (0 fastest …
      3 maximum compression), an encoder fingerprint.
    - ``jpeg_optimized_huffman`` is True when any DHT table before the first scan differs
      from the Annex K tables. Only the header up to the first SOS is read, so tables that a
      progressive file defines between later scans are not seen.
    - ``mode`` is Pillow's mode for the file (what a decoder would produce); ``channels`` and
      ``bit_depth`` are the stored samples per pixel and bits per sample where the header says
      (JPEG components/precision, PNG colour type/bit depth, DICOM SamplesPerPixel/BitsStored),
      else derived from the mode.
    - DICOM tags are read only when pydicom is importable; otherwise they stay ``None``.
      ``mode`` stays ``None`` for DICOM (Pillow does not open it); ``dicom_PhotometricInterpretation``,
      ``channels`` and ``bit_depth`` describe the pixels instead.

    Examples
    --------
    >>> import io
    >>> from PIL import Image
    >>> buf = io.BytesIO()
    >>> Image.new("L", (40, 20), 128).save(buf, "PNG")
    >>> h = header_fields(buf.getvalue(), "x.jpg")
    >>> h["format"], h["width"], h["height"], h["extension_mismatch"]
    ('PNG', 40, 20, True)
    """
    out: dict[str, Any] = dict.fromkeys(HEADER_COLUMNS)
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise TypeError(f"header_fields needs bytes, got {type(data).__name__}")
    out["file_size"] = len(data)
    if name is not None:
        ext = _extension(name)
        out["extension"] = ext
    try:
        if not data:
            raise _HeaderError("empty file")
        fmt = sniff_format(data)
        out["format"] = fmt
        if fmt == "JPEG":
            _parse_jpeg(data, out)
        elif fmt == "PNG":
            _parse_png(data, out)
        elif fmt == "DICOM":
            _parse_dicom(data, out)
        else:
            _parse_with_pillow(data, out, fmt)
    except _HeaderError as exc:
        out["header_error"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - a header must never abort a scan
        out["header_error"] = f"{type(exc).__name__}: {exc}"[:200]
    if name is not None and out["extension"] and out["format"] is not None:
        expected = _EXTENSION_FORMAT.get(out["extension"])
        out["extension_mismatch"] = None if expected is None else expected != out["format"]
    w, h = out["width"], out["height"]
    if isinstance(w, int) and isinstance(h, int) and w > 0 and h > 0:
        out["aspect"] = w / h
        out["bytes_per_pixel"] = len(data) / (w * h)
    if out["mode"] is not None:
        if out["channels"] is None:
            out["channels"] = _MODE_CHANNELS.get(out["mode"])
        if out["bit_depth"] is None:
            out["bit_depth"] = _MODE_BIT_DEPTH.get(out["mode"])
    return out


def sniff_format(data: bytes) -> str | None:
    """Image format from the magic bytes (``None`` when none is recognized here).

    Parameters
    ----------
    data : bytes
        At least the first 132 bytes of the file for DICOM, 12 for the others.

    Returns
    -------
    str or None
        ``JPEG``, ``PNG``, ``GIF``, ``BMP``, ``TIFF``, ``WEBP``, ``DICOM``, ``JPEG2000``,
        ``PPM``, or ``None``.
    """
    if data[128:132] == b"DICM":  # first: the 128-byte preamble may hold any bytes
        return "DICOM"
    if data[:3] == b"\xff\xd8\xff":
        return "JPEG"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "PNG"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if data[:2] == b"BM" and len(data) >= 26:
        return "BMP"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "TIFF"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    if data[:12] == b"\x00\x00\x00\x0cjP  \r\n\x87\n" or data[:4] == b"\xff\x4f\xff\x51":
        return "JPEG2000"
    if data[:1] == b"P" and data[1:2] in (b"1", b"2", b"3", b"4", b"5", b"6") \
            and data[2:3] in (b" ", b"\n", b"\r", b"\t"):
        return "PPM"
    return None


def estimate_jpeg_quality(
    luma_zigzag: np.ndarray | list[int],
    chroma_zigzag: np.ndarray | list[int] | None = None,
    precision_bits: int = 8,
) -> tuple[int, float]:
    """IJG quality (1..100) whose scaled standard tables best fit the given tables.

    libjpeg's ``jpeg_set_quality(q)`` scales the Annex K tables by ``s = 5000/q`` (q < 50) or
    ``s = 200 − 2q`` and sets each coefficient to ``clamp((base·s + 50) // 100, 1, 255)``.
    This inverts it by search: the q with the smallest mean absolute coefficient difference.

    Parameters
    ----------
    luma_zigzag : array-like of 64 ints
        Luminance table in file (zigzag) order.
    chroma_zigzag : array-like of 64 ints, optional
        Chrominance table in zigzag order; included in the fit when given.
    precision_bits : {8, 16}
        Table precision (8-bit tables clamp at 255, 16-bit ones at 32767).

    Returns
    -------
    quality : int
        Best-fitting quality, ties going to the lower quality.
    error : float
        Mean absolute coefficient difference at that quality (0.0 = exact IJG table).
    """
    key = 16 if precision_bits == 16 else 8
    luma = np.asarray(luma_zigzag, dtype=np.int64)
    if luma.shape != (64,):
        raise ValueError(f"a quantization table has 64 coefficients, got shape {luma.shape}")
    err = np.abs(_IJG_LUMA[key] - luma[None, :]).sum(axis=1)
    n = 64
    if chroma_zigzag is not None:
        chroma = np.asarray(chroma_zigzag, dtype=np.int64)
        err = err + np.abs(_IJG_CHROMA[key] - chroma[None, :]).sum(axis=1)
        n = 128
    best = int(np.argmin(err))
    return best + 1, float(err[best]) / n


# ---------------------------------------------------------------------------------------------
# Helpers


def _extension(name: str) -> str:
    base = str(name).replace("\\", "/").rsplit("/", 1)[-1]
    if "." not in base.lstrip("."):
        return ""
    return base.rsplit(".", 1)[-1].lower()


def _clean_text(raw: bytes) -> str | None:
    text = raw.split(b"\x00", 1)[0].decode("latin-1").strip()
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text[:_MAX_TEXT] or None


def _subsampling_name(factors: list[tuple[int, int]]) -> str:
    """Name chroma subsampling from per-component (H, V) sampling factors."""
    if len(factors) == 1:
        return "gray"
    (hy, vy), chroma = factors[0], factors[1:]
    if len(factors) == 3 and chroma[0] == chroma[1]:
        hc, vc = chroma[0]
        if hc and vc and hy % hc == 0 and vy % vc == 0:
            names = {(1, 1): "4:4:4", (2, 1): "4:2:2", (2, 2): "4:2:0", (1, 2): "4:4:0",
                     (4, 1): "4:1:1", (4, 2): "4:1:0"}
            name = names.get((hy // hc, vy // vc))
            if name:
                return name
    if all(f == factors[0] for f in factors):
        return "4:4:4"
    return "other"


def _parse_jpeg(data: bytes, out: dict[str, Any]) -> None:
    """Walk JPEG markers from SOI to the first SOS."""
    n = len(data)
    pos = 2
    qtables: dict[int, tuple[int, list[int]]] = {}
    apps: list[str] = []
    huffman_seen = False
    optimized = False
    components: list[tuple[int, int, int, int]] = []
    restart = 0
    comment = False
    flags = dict.fromkeys(("app_jfif", "app_exif", "app_xmp", "app_icc", "app_adobe",
                           "app_photoshop"), False)
    reached_sos = False

    def finish() -> None:
        out.update(flags)
        out["app_segments"] = ",".join(dict.fromkeys(apps))
        out["jpeg_comment"] = comment
        out["jpeg_restart_interval"] = restart
        out["jpeg_n_qtables"] = len(qtables)
        for tid, (prec, values) in sorted(qtables.items()):
            if tid < _N_QT:
                out[f"jpeg_qt{tid}"], out[f"jpeg_qt{tid}_sum"] = _qtable_text(values)
        if huffman_seen:
            out["jpeg_optimized_huffman"] = optimized
        elif out["jpeg_sof"] in ("SOF0", "SOF1", "SOF2") and reached_sos:
            out["jpeg_optimized_huffman"] = False  # no DHT: the decoder's standard tables
        if qtables:
            luma_id = components[0][3] if components else min(qtables)
            chroma_id = components[1][3] if len(components) > 1 else None
            if luma_id in qtables:
                prec, luma = qtables[luma_id]
                chroma = None
                if chroma_id is not None and chroma_id != luma_id and chroma_id in qtables:
                    chroma = qtables[chroma_id][1]
                q, err = _quality_of(luma, chroma, 16 if prec else 8)
                out["jpeg_quality"] = q
                out["jpeg_quality_error"] = round(err, 4)

    try:
        while True:
            # find the next marker (skip fill bytes; tolerate stray bytes between segments)
            if pos >= n:
                raise _HeaderError("truncated JPEG: no SOS before end of file")
            if data[pos] != 0xFF:
                nxt = data.find(b"\xff", pos)
                if nxt < 0:
                    raise _HeaderError("truncated JPEG: no SOS before end of file")
                pos = nxt
            while pos < n and data[pos] == 0xFF:
                pos += 1
            if pos >= n:
                raise _HeaderError("truncated JPEG: no SOS before end of file")
            marker = data[pos]
            pos += 1
            if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:
                continue  # standalone markers
            if marker == 0xD9:
                raise _HeaderError("JPEG ends (EOI) before any scan")
            if pos + 2 > n:
                raise _HeaderError(f"truncated JPEG: marker FF{marker:02X} without length")
            length = int.from_bytes(data[pos:pos + 2], "big")
            if length < 2:
                raise _HeaderError(f"malformed JPEG: segment FF{marker:02X} length {length}")
            seg = data[pos + 2:pos + length]
            truncated = pos + length > n
            pos += length
            if marker == 0xDA:
                reached_sos = True
                break
            if truncated:
                raise _HeaderError(f"truncated JPEG: segment FF{marker:02X} runs past end of file")
            if 0xE0 <= marker <= 0xEF:
                apps.append(f"APP{marker - 0xE0}")
                _jpeg_app(marker - 0xE0, seg, flags, out)
            elif marker == 0xDB:
                _jpeg_dqt(seg, qtables)
            elif marker == 0xC4:
                huffman_seen = True
                if _jpeg_dht_nonstandard(seg):
                    optimized = True
            elif marker in _SOF_MARKERS:
                if len(seg) < 6:
                    raise _HeaderError("malformed JPEG: short SOF segment")
                precision = seg[0]
                height, width = struct.unpack(">HH", seg[1:5])
                ncomp = seg[5]
                if len(seg) < 6 + 3 * ncomp:
                    raise _HeaderError("malformed JPEG: SOF shorter than its component list")
                components = [
                    (seg[6 + 3 * i], seg[7 + 3 * i] >> 4, seg[7 + 3 * i] & 15, seg[8 + 3 * i])
                    for i in range(ncomp)
                ]
                out["jpeg_sof"] = f"SOF{marker - 0xC0}"
                out["jpeg_progressive"] = marker in _PROGRESSIVE_SOF
                out["width"], out["height"] = width, height
                out["bit_depth"] = precision
                out["channels"] = ncomp
                out["jpeg_components"] = ncomp
                factors = [(c[1], c[2]) for c in components]
                out["jpeg_sampling"] = ",".join(f"{h}x{v}" for h, v in factors)
                out["jpeg_subsampling"] = _subsampling_name(factors) if ncomp else None
                out["mode"] = {1: "L", 3: "RGB", 4: "CMYK"}.get(ncomp)
                if precision != 8 and ncomp == 1:
                    out["mode"] = "I;16"
            elif marker == 0xDD:
                if len(seg) >= 2:
                    restart = int.from_bytes(seg[:2], "big")
            elif marker == 0xFE:
                comment = True
        if out["jpeg_sof"] is None:
            raise _HeaderError("malformed JPEG: scan (SOS) before frame header (SOF)")
    finally:
        finish()


# A release's files mostly share a few quantization tables: their text and quality fit are
# computed once per distinct table (pure functions of the values; tuples as cache keys).


@functools.lru_cache(maxsize=1024)
def _qtable_text_cached(values: tuple[int, ...]) -> tuple[str, int]:
    return ",".join(map(str, values)), int(sum(values))


def _qtable_text(values: list[int]) -> tuple[str, int]:
    """(comma-separated coefficients, their sum) of one table."""
    return _qtable_text_cached(tuple(values))


@functools.lru_cache(maxsize=1024)
def _quality_cached(luma: tuple[int, ...], chroma: tuple[int, ...] | None,
                    bits: int) -> tuple[int, float]:
    return estimate_jpeg_quality(luma, chroma, bits)


def _quality_of(luma: list[int], chroma: list[int] | None, bits: int) -> tuple[int, float]:
    """:func:`estimate_jpeg_quality`, once per distinct pair of tables."""
    return _quality_cached(tuple(luma), None if chroma is None else tuple(chroma), bits)


def _jpeg_app(n: int, seg: bytes, flags: dict[str, bool], out: dict[str, Any]) -> None:
    if n == 0 and seg[:5] == b"JFIF\x00":
        flags["app_jfif"] = True
        if len(seg) >= 12:
            unit, xd, yd = seg[7], int.from_bytes(seg[8:10], "big"), int.from_bytes(seg[10:12], "big")
            out["density_unit"] = {0: "none", 1: "dpi", 2: "dpcm"}.get(unit, f"unit{unit}")
            out["density_x"], out["density_y"] = float(xd), float(yd)
    elif n == 1 and seg[:6] == b"Exif\x00\x00":
        flags["app_exif"] = True
        _parse_exif(seg[6:], out)
    elif n == 1 and seg.startswith(
        (b"http://ns.adobe.com/xap/1.0/\x00", b"http://ns.adobe.com/xmp/extension/")
    ):
        flags["app_xmp"] = True
    elif n == 2 and seg[:12] == b"ICC_PROFILE\x00":
        flags["app_icc"] = True
    elif n == 14 and seg[:5] == b"Adobe":
        flags["app_adobe"] = True
    elif n == 13 and seg[:14] == b"Photoshop 3.0\x00":
        flags["app_photoshop"] = True


def _jpeg_dqt(seg: bytes, qtables: dict[int, tuple[int, list[int]]]) -> None:
    p = 0
    while p < len(seg):
        pq, tq = seg[p] >> 4, seg[p] & 15
        p += 1
        size = 128 if pq else 64
        if p + size > len(seg):
            raise _HeaderError("malformed JPEG: DQT shorter than its table")
        if pq:
            values = list(struct.unpack(">64H", seg[p:p + 128]))
        else:
            values = list(seg[p:p + 64])
        qtables[tq] = (pq, values)
        p += size


def _jpeg_dht_nonstandard(seg: bytes) -> bool:
    p = 0
    nonstandard = False
    while p + 17 <= len(seg):
        tc = seg[p] >> 4
        bits = seg[p + 1:p + 17]
        count = sum(bits)
        values = seg[p + 17:p + 17 + count]
        if len(values) < count:
            raise _HeaderError("malformed JPEG: DHT shorter than its table")
        if (tc, bits, values) not in _STANDARD_HUFFMAN:
            nonstandard = True
        p += 17 + count
    return nonstandard


def _parse_exif(tiff: bytes, out: dict[str, Any]) -> None:
    """Read Orientation, Make, Model and Software from IFD0 of a TIFF-structured EXIF block.

    Bad offsets leave the fields ``None``; EXIF problems are not header errors (the image
    header itself is fine).
    """
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return
    bo = "<" if tiff[:2] == b"II" else ">"
    if struct.unpack(bo + "H", tiff[2:4])[0] != 42:
        return
    ifd = struct.unpack(bo + "I", tiff[4:8])[0]
    if ifd + 2 > len(tiff):
        return
    count = struct.unpack(bo + "H", tiff[ifd:ifd + 2])[0]
    for i in range(min(count, 512)):
        e = ifd + 2 + 12 * i
        if e + 12 > len(tiff):
            break
        tag, typ, cnt = struct.unpack(bo + "HHI", tiff[e:e + 8])
        value = tiff[e + 8:e + 12]
        if tag == 0x0112 and typ == 3 and cnt >= 1:
            out["exif_orientation"] = struct.unpack(bo + "H", value[:2])[0]
        elif tag in (0x010F, 0x0110, 0x0131) and typ == 2:
            if cnt <= 4:
                raw = value[:cnt]
            else:
                off = struct.unpack(bo + "I", value)[0]
                raw = tiff[off:off + min(cnt, 256)]
            key = {0x010F: "exif_make", 0x0110: "exif_model", 0x0131: "exif_software"}[tag]
            out[key] = _clean_text(raw)


_PNG_MODES = {
    (0, 1): "1", (0, 2): "L", (0, 4): "L", (0, 8): "L", (0, 16): "I;16",
    (2, 8): "RGB", (2, 16): "RGB", (3, 1): "P", (3, 2): "P", (3, 4): "P", (3, 8): "P",
    (4, 8): "LA", (4, 16): "RGBA", (6, 8): "RGBA", (6, 16): "RGBA",
}
_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def _parse_png(data: bytes, out: dict[str, Any]) -> None:
    """Walk PNG chunks (lengths only; chunk data other than small headers is not read)."""
    n = len(data)
    pos = 8
    chunks: list[str] = []
    idat = 0
    text_keys: list[str] = []
    try:
        while pos + 8 <= n:
            length = int.from_bytes(data[pos:pos + 4], "big")
            ctype = data[pos + 4:pos + 8].decode("latin-1")
            start = pos + 8
            end = start + length
            if length > 0x7FFFFFFF or not ctype.isalpha():
                raise _HeaderError(f"malformed PNG: bad chunk header at byte {pos}")
            if not chunks and ctype != "IHDR":
                raise _HeaderError("malformed PNG: first chunk is not IHDR")
            if end + 4 > n:
                chunks.append(ctype)
                if ctype == "IHDR" and end <= n:
                    _png_ihdr(data[start:end], out)
                raise _HeaderError(f"truncated PNG: chunk {ctype} runs past end of file")
            chunks.append(ctype)
            body = data[start:end]
            if ctype == "IHDR":
                _png_ihdr(body, out)
            elif ctype == "IDAT":
                if idat == 0 and length >= 2:
                    cmf, flg = body[0], body[1]
                    if cmf & 15 == 8 and (cmf * 256 + flg) % 31 == 0:
                        out["png_zlib_level"] = flg >> 6
                idat += 1
            elif ctype == "pHYs" and length >= 9:
                px, py = struct.unpack(">II", body[:8])
                out["density_x"], out["density_y"] = float(px), float(py)
                out["density_unit"] = "per_metre" if body[8] == 1 else "none"
            elif ctype in ("tEXt", "zTXt", "iTXt"):
                key = _clean_text(body[:80])
                if key:
                    text_keys.append(key)
            elif ctype == "eXIf":
                _parse_exif(body, out)
            pos = end + 4
            if ctype == "IEND":
                break
        else:
            if pos < n or not chunks or chunks[-1] != "IEND":
                raise _HeaderError("truncated PNG: no IEND chunk")
    finally:
        distinct = list(dict.fromkeys(chunks))
        out["png_chunks"] = ",".join(distinct)
        out["png_idat_count"] = idat
        out["png_text_keys"] = ",".join(dict.fromkeys(text_keys))
        present = set(distinct)
        for c in PNG_FLAG_CHUNKS:
            out[f"png_{c}"] = c in present
    if out["png_color_type"] is None:
        raise _HeaderError("malformed PNG: no IHDR")


def _png_ihdr(body: bytes, out: dict[str, Any]) -> None:
    if len(body) < 13:
        raise _HeaderError("malformed PNG: short IHDR")
    width, height, depth, ctype, _comp, _filt, interlace = struct.unpack(">IIBBBBB", body[:13])
    out["width"], out["height"] = width, height
    out["png_bit_depth"], out["png_color_type"], out["png_interlace"] = depth, ctype, interlace
    out["bit_depth"] = depth
    out["channels"] = _PNG_SAMPLES.get(ctype)
    out["mode"] = _PNG_MODES.get((ctype, depth))


def _parse_with_pillow(data: bytes, out: dict[str, Any], fmt: str | None) -> None:
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            im = Image.open(io.BytesIO(data))
        except Image.DecompressionBombError as exc:
            raise _HeaderError(f"decompression bomb: {exc}") from exc
        except Exception as exc:
            if fmt is None:
                raise _HeaderError("unrecognized format") from exc
            raise _HeaderError(f"{fmt} header not readable: {type(exc).__name__}") from exc
        with im:
            pil_fmt = (im.format or "").upper() or None
            out["format"] = fmt or pil_fmt
            out["width"], out["height"] = int(im.size[0]), int(im.size[1])
            out["mode"] = im.mode
            dpi = im.info.get("dpi")
            if isinstance(dpi, tuple) and len(dpi) == 2:
                try:
                    out["density_x"], out["density_y"] = float(dpi[0]), float(dpi[1])
                    out["density_unit"] = "dpi"
                except (TypeError, ValueError):
                    pass
            if out["format"] == "TIFF":
                bits = getattr(im, "tag_v2", {}).get(258)
                if isinstance(bits, tuple) and bits:
                    out["bit_depth"] = int(bits[0])
                    out["channels"] = len(bits)


def _parse_dicom(data: bytes, out: dict[str, Any]) -> None:
    try:
        import pydicom
    except ImportError:
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = pydicom.dcmread(io.BytesIO(data), stop_before_pixels=True)
    except Exception as exc:
        raise _HeaderError(f"DICOM header not readable: {type(exc).__name__}") from exc
    for tag in DICOM_TAGS:
        if tag == "TransferSyntaxUID":
            meta = getattr(ds, "file_meta", None)
            value = getattr(meta, "TransferSyntaxUID", None) if meta is not None else None
        else:
            value = ds.get(tag)
        out[f"dicom_{tag}"] = _dicom_scalar(value, HEADER_DTYPES[f"dicom_{tag}"])
    out[DICOM_PATIENT_DIGEST] = _patient_digest(ds.get("PatientID"))
    out["width"] = out["dicom_Columns"]
    out["height"] = out["dicom_Rows"]
    out["bit_depth"] = out["dicom_BitsStored"]
    spp = ds.get("SamplesPerPixel")
    out["channels"] = int(spp) if isinstance(spp, int) else None
    if out["width"] is None or out["height"] is None:
        raise _HeaderError("DICOM header has no Rows/Columns (truncated, or not an image)")


def _patient_digest(value: Any) -> str | None:
    """The first 16 hex digits of the SHA-256 of a PatientID's text (``None`` when empty)."""
    text = str(value).strip() if value is not None else ""
    if not text:
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _dicom_scalar(value: Any, dtype: str) -> Any:
    if value is None or value == "":
        return None
    if dtype == "Int64":
        try:
            return int(value)
        except (TypeError, ValueError):
            return None
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return ",".join(str(v) for v in value)[:_MAX_TEXT * 2]
    return str(value)[:_MAX_TEXT * 2]
