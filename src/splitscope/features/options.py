"""The feature geometry and read caps (:class:`FeatureParams`), an options group of the audit
(``options.features``) whose fields are also the flags ``--thumb-size``, ``--interpolation``,
``--mode`` and ``--max-file-size``.

This module imports no numerical or imaging library, so that the command line's flags cost
none; the extraction itself is :mod:`splitscope.features.extract`.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import Any

from splitscope.errors import InputError
from splitscope.options import DEFAULT_MAX_FILE_BYTES, option

__all__ = ["DEFAULT_MAX_PIXELS", "EXTRACT_VERSION", "INTERPOLATIONS", "MODES", "FeatureParams"]

EXTRACT_VERSION = "5"
"""Version of the extraction code (:mod:`splitscope.features.extract`); part of every cache
key. Bump when any feature changes."""

DEFAULT_MAX_PIXELS = 2**27
"""Default decompression-bomb bound: 134,217,728 pixels (e.g. 11,585 × 11,585). Decoding an RGB
image of that size takes ~400 MB plus ~130 MB for its grayscale copy, per worker; larger files
are listed as ``decompression_bomb``, not decoded (Pillow's own default warns at 89.5 M pixels
and refuses at twice that; here the one bound replaces both)."""

MODES = ("exact", "fast")

INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")
"""Thumbnail filters by name (Pillow's, :data:`splitscope.features.imaging.INTERPOLATIONS`);
``bicubic`` is the default of METHODS §2.2."""


def _positive_int(value: Any, minimum: int) -> bool:
    return (not isinstance(value, bool) and isinstance(value, numbers.Integral)
            and value >= minimum)


@dataclass(frozen=True)
class FeatureParams:
    """Extraction parameters; every value that changes a feature is part of :meth:`key`.

    Parameters
    ----------
    thumb_size : int
        Side S of the NCC thumbnail (default 96, METHODS §2.2).
    interpolation : str
        Thumbnail filter: ``bicubic`` (default), ``bilinear``, ``lanczos``, ``box``,
        ``hamming`` or ``nearest``.
    mode : str
        ``exact`` (default) or ``fast`` (reduced-scale JPEG decode; see the notes of
        :mod:`splitscope.features.extract`).
    max_pixels : int
        Decompression-bomb bound: files with more than this many pixels (width × height) are
        recorded as ``decompression_bomb`` and not decoded. Default 2**27.
    max_file_bytes : int
        Read cap: a larger file is recorded as ``too_large`` and never read (default 2 GiB).
        It decides what is read, not what a feature is, so it is not part of :meth:`key`;
        ``too_large`` entries are re-examined on every scan.
    """

    thumb_size: int = option(96, "Thumbnail side of pixel rules.")
    interpolation: str = option("bicubic", f"Thumbnail filter: {', '.join(INTERPOLATIONS)}.",
                                choices=INTERPOLATIONS, metavar="FILTER")
    mode: str = option(
        "exact", "'fast': JPEGs at reduced scale.", choices=MODES,
        section="performance")
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_file_bytes: int = option(
        DEFAULT_MAX_FILE_BYTES, "Never read larger files (default 2 GiB).",
        flag="--max-file-size", metavar="BYTES",
        show_default=False, section="inputs")

    def __post_init__(self) -> None:
        size = self.thumb_size
        if not _positive_int(size, 8):
            raise InputError(f"thumb_size must be an integer >= 8, got {size!r}")
        if self.interpolation not in INTERPOLATIONS:
            raise InputError(
                f"interpolation {self.interpolation!r} unknown; use one of "
                f"{', '.join(INTERPOLATIONS)}"
            )
        if self.mode not in MODES:
            raise InputError(f"mode {self.mode!r} unknown; use 'exact' or 'fast'")
        mp = self.max_pixels
        if not _positive_int(mp, 1):
            raise InputError(f"max_pixels must be a positive integer, got {mp!r}")
        cap = self.max_file_bytes
        if not _positive_int(cap, 1):
            raise InputError(f"max_file_bytes must be a positive integer, got {cap!r}")
        object.__setattr__(self, "thumb_size", int(size))
        object.__setattr__(self, "max_pixels", int(mp))
        object.__setattr__(self, "max_file_bytes", int(cap))

    def key(self) -> str:
        """Stable short string naming this geometry and code version (cache key), e.g.
        ``exact-s96-bicubic-p134217728-v2``."""
        return (
            f"{self.mode}-s{self.thumb_size}-{self.interpolation}"
            f"-p{self.max_pixels}-v{EXTRACT_VERSION}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the parameters (``FeatureParams(**d)`` rebuilds them)."""
        return dataclasses.asdict(self)
