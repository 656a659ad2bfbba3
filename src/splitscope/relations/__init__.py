"""Relations layer: identity (bytes, names, decoded pixels) and near duplicates (hash rules,
NCC, SSIM, dihedral variants), with controls, containment and exports (METHODS §1–2).

The entry point is :func:`splitscope.relations.duplicates.audit_duplicates`; the rules are plain
functions over arrays and tables in :mod:`~splitscope.relations.identity`,
:mod:`~splitscope.relations.hashes`, :mod:`~splitscope.relations.ncc`,
:mod:`~splitscope.relations.ssim`, :mod:`~splitscope.relations.dihedral`,
:mod:`~splitscope.relations.controls`, :mod:`~splitscope.relations.transforms` and
:mod:`~splitscope.relations.containment`.
"""

from splitscope.relations.boundary_relations import boundary_relations, resolve_boundaries
from splitscope.relations.controls import comparison_pairs, control_rate, median_difference
from splitscope.relations.duplicates import audit_duplicates
from splitscope.relations.hashes import (
    hamming_distance,
    hamming_search,
    hash_search,
    pack_hashes,
)
from splitscope.relations.identity import (
    basename_matches,
    identity_census,
    pixel_identity,
    within_copies,
)
from splitscope.relations.ncc import (
    any_candidate,
    embedding_search,
    first_candidate,
    ncc_search,
    ncc_sweep,
    pair_rho,
)
from splitscope.relations.ncc_core import centred_unit_vectors
from splitscope.relations.ssim import ssim_pairs
from splitscope.relations.transforms import transform_sensitivity

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
