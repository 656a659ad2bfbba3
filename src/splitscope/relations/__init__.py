"""Relations layer: identity (bytes, names, decoded pixels) and near duplicates (hash rules,
NCC, SSIM, dihedral variants), with controls, containment and exports (METHODS §1–2).

The entry point is :func:`splitscope.relations.duplicates.audit_duplicates`; the rules are plain
functions over arrays and tables in :mod:`~splitscope.relations.identity`,
:mod:`~splitscope.relations.hashes`, :mod:`~splitscope.relations.ncc`,
:mod:`~splitscope.relations.ssim`, :mod:`~splitscope.relations.dihedral`,
:mod:`~splitscope.relations.controls`, :mod:`~splitscope.relations.transforms` and
:mod:`~splitscope.relations.containment`.

Every name is imported on first use, so that the command line stays quick to start.
"""

from __future__ import annotations

import importlib
from typing import Any

#: the submodules that define the names of ``__all__``, searched in this order on first use
_SUBMODULES = ("boundary_relations", "controls", "duplicates", "hashes", "identity", "ncc",
               "ncc_core", "ssim", "transforms")

__all__ = [
    "any_candidate",
    "audit_duplicates",
    "basename_matches",
    "boundary_relations",
    "centred_unit_vectors",
    "comparison_pairs",
    "control_rate",
    "embedding_search",
    "first_candidate",
    "hamming_distance",
    "hamming_search",
    "hash_search",
    "identity_census",
    "median_difference",
    "ncc_search",
    "ncc_sweep",
    "pack_hashes",
    "pair_rho",
    "pixel_identity",
    "resolve_boundaries",
    "ssim_pairs",
    "transform_sensitivity",
    "within_copies",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        for sub in _SUBMODULES:
            module = importlib.import_module(f"splitscope.relations.{sub}")
            if hasattr(module, name):
                value = getattr(module, name)
                globals()[name] = value
                return value
    raise AttributeError(f"module 'splitscope.relations' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
