"""The provenance layer's options (METHODS §4): the cross-validation folds of the header-only
probe, the image-statistics probe and the partition classifier (default 5). The audit's
``--folds`` is generated from this field; ``context.options.provenance`` is one of these. The
quality layer's thresholds are :class:`QualityParams` (``context.options.quality``; the flags
themselves are :mod:`splitscope.provenance.quality`). This module imports no numerical library,
so that the command line's flags cost none."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

from splitscope.errors import InputError
from splitscope.options import option

__all__ = ["ProvenanceOptions", "QualityParams"]


@dataclass(frozen=True)
class ProvenanceOptions:
    """The provenance probes: cross-validation folds."""

    group: ClassVar[str] = "provenance"

    folds: int = option(5, "CV folds of the probes.", minimum=2)

    def __post_init__(self) -> None:
        if int(self.folds) < 2:
            raise InputError(f"folds must be at least 2; got {self.folds}")
        object.__setattr__(self, "folds", int(self.folds))


@dataclass(frozen=True)
class QualityParams:
    """Thresholds of the quality flags (METHODS §4.6); every value is recorded.

    Parameters
    ----------
    dark_mean, light_mean : float
        Dark: mean grey level below ``dark_mean`` (default 40 of 255); light: above
        ``light_mean`` (default 215).
    low_contrast_range : float
        Low contrast: ``p99 − p01`` below this many grey levels (default 40).
    low_information_bits : float
        Low information: histogram entropy below this (default 4 bits, i.e. fewer than ~16
        grey levels in effective use).
    grey_colour_spread : float
        Grey stored as colour: a colour image whose mean max−min channel difference is below
        this (default 1 grey level).
    border_share : float
        Large uniform borders: uniform edge bands cover at least this share of the area
        (default 0.2).
    robust_z : float
        z of the relative rules (default 3.5).
    blur_factor, size_factor, aspect_factor : float
        Minimum factors f of the relative rules: sharpness at least ``blur_factor`` (4) times
        below the release's median; area ``size_factor`` (2) times off its median; aspect
        ``aspect_factor`` (1.25) times off its median.
    association_v : float
        Cramér's V of a flag with the label from which the flag is called a shortcut hint
        (default 0.3, a medium association for a 2 × k table).
    """

    group: ClassVar[str] = "quality"

    dark_mean: float = 40.0
    light_mean: float = 215.0
    low_contrast_range: float = 40.0
    low_information_bits: float = 4.0
    grey_colour_spread: float = 1.0
    border_share: float = 0.2
    robust_z: float = 3.5
    blur_factor: float = 4.0
    size_factor: float = 2.0
    aspect_factor: float = 1.25
    association_v: float = 0.3

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise InputError(f"quality parameter {f.name} must be a finite number, got {v!r}")
        for name in ("blur_factor", "size_factor", "aspect_factor"):
            if getattr(self, name) < 1:
                raise InputError(f"quality parameter {name} must be ≥ 1")
        if self.dark_mean >= self.light_mean:
            raise InputError("dark_mean must lie below light_mean")

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)
