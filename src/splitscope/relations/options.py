"""The duplicates and external layers' options (METHODS §2): NCC threshold τ 0.98, Hamming
radius 6 of the hash rules, dihedral matching off, 50 images in the transform-sensitivity
sample. The audit's ``--tau``, ``--radius``, ``--dihedral`` and ``--transforms`` are generated
from these fields; ``context.options.search`` is one of these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from splitscope.errors import InputError
from splitscope.options import option

__all__ = ["SearchOptions"]


@dataclass(frozen=True)
class SearchOptions:
    """The identity and near-duplicate search: NCC threshold τ, Hamming radius k of the hash
    rules, dihedral matching, and the size of the seeded transform-sensitivity sample (0
    skips it)."""

    group: ClassVar[str] = "search"

    tau: float = option(0.98, "NCC threshold τ.")
    radius: int = option(6, "Hamming radius k of the hash rules.")
    dihedral: bool = option(False, "Also match rotated and flipped copies.")
    transforms: int = option(50, "Reference images in the seeded transform-sensitivity sample "
                                 "(0: skip).")

    def __post_init__(self) -> None:
        if not 0 < float(self.tau) <= 1:
            raise InputError(f"tau must be in (0, 1]; got {self.tau}")
        object.__setattr__(self, "tau", float(self.tau))
        object.__setattr__(self, "radius", int(self.radius))
        object.__setattr__(self, "dihedral", bool(self.dihedral))
        object.__setattr__(self, "transforms", int(self.transforms))
