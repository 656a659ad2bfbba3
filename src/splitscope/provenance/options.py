"""The provenance layer's options (METHODS §4): the cross-validation folds of the header-only
probe, the image-statistics probe and the partition classifier (default 5). The audit's
``--folds`` is generated from this field; ``context.options.provenance`` is one of these. The
quality layer's thresholds are :class:`splitscope.provenance.quality.QualityParams`
(``context.options.quality``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from splitscope.errors import InputError
from splitscope.options import option

__all__ = ["ProvenanceOptions"]


@dataclass(frozen=True)
class ProvenanceOptions:
    """The provenance probes: cross-validation folds."""

    group: ClassVar[str] = "provenance"

    folds: int = option(5, "Cross-validation folds of the provenance probes and the partition "
                           "classifier.", minimum=2)

    def __post_init__(self) -> None:
        if int(self.folds) < 2:
            raise InputError(f"folds must be at least 2; got {self.folds}")
        object.__setattr__(self, "folds", int(self.folds))
