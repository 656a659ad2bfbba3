"""The duplicates and external layers' options (METHODS §2): NCC threshold τ 0.98, Hamming
radius 6 of the hash rules, dihedral matching off, 50 images in the transform-sensitivity
sample, 5 pairs per query row listed in the pair table, a negative-control bound of 1%. The
audit's ``--tau``, ``--radius``, ``--dihedral``, ``--transforms``, ``--max-pairs-per-query``
and ``--control-bound`` are generated from these fields; ``context.options.search`` is one of
these, and :func:`splitscope.relations.duplicates.audit_duplicates` takes one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from splitscope.errors import InputError
from splitscope.options import option

__all__ = ["SEARCH_METHODS", "SearchOptions"]

#: The exact NCC search methods, the same result by each (the first is the default):
#: ``indexed`` (:mod:`splitscope.relations.ncc_index`) and ``brute`` (every pair scored).
SEARCH_METHODS = ("indexed", "brute")


@dataclass(frozen=True)
class SearchOptions:
    """The identity and near-duplicate search: NCC threshold τ, Hamming radius k of the hash
    rules, dihedral matching, the size of the seeded transform-sensitivity sample (0 skips
    it), the pairs listed per query row, the negative control's bound, SSIM on the listed
    pairs, and the NCC search method (one of :data:`SEARCH_METHODS`: the same result)."""

    group: ClassVar[str] = "search"

    tau: float = option(0.98, "NCC threshold τ.")
    radius: int = option(6, "Hamming radius of the hash rules.")
    dihedral: bool = option(False, "Also match rotated and flipped copies.")
    transforms: int = option(50, "Transform-sensitivity sample size (0: skip).")
    max_pairs_per_query: int = option(
        5, "Pairs listed per query row.", minimum=1)
    control_bound: float = option(
        0.01, "Share of --control a reliable predicate flags at most.")
    ssim: bool = True
    search: str = SEARCH_METHODS[0]

    def __post_init__(self) -> None:
        if not 0 < float(self.tau) <= 1:
            raise InputError(f"tau must be in (0, 1]; got {self.tau}")
        object.__setattr__(self, "tau", float(self.tau))
        object.__setattr__(self, "radius", int(self.radius))
        object.__setattr__(self, "dihedral", bool(self.dihedral))
        object.__setattr__(self, "transforms", int(self.transforms))
        if int(self.max_pairs_per_query) < 1:
            raise InputError(f"max_pairs_per_query must be at least 1; got "
                             f"{self.max_pairs_per_query}")
        object.__setattr__(self, "max_pairs_per_query", int(self.max_pairs_per_query))
        if not 0 <= float(self.control_bound) <= 1:
            raise InputError(f"control_bound must be in [0, 1]; got {self.control_bound}")
        object.__setattr__(self, "control_bound", float(self.control_bound))
        if self.search not in SEARCH_METHODS:
            raise InputError(f"search {self.search!r} unknown; use one of "
                             f"{', '.join(map(repr, SEARCH_METHODS))}")
