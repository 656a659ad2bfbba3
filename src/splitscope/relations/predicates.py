"""The predicates of the identity and near-duplicate layers (METHODS §1–2) by name, and the
``--fail-on`` metrics that read their records: the one table other code names them from.
What each near-duplicate predicate is and does (rule, title, parameters, measures) is in
:mod:`splitscope.relations.near_predicates`, which takes its built-in names from here."""

from __future__ import annotations

from splitscope.records import roles
from splitscope.records.metrics import Metric

#: the layers whose records these predicates name (record ``layer``)
LAYER, EXTERNAL_LAYER = "duplicates", "external"
#: the two sections of the duplicates layer's method (record ``section``, and the first part
#: of a record id)
IDENTITY, NEAR_DUPLICATE = "identity", "near_duplicate"

# identity (METHODS §1)
SHA256 = "sha256"
PIXEL_XXH128 = "pixel_xxh128"
BASENAME = "basename"
PIXEL_IDENTICAL_UNION = "pixel_identical_union"
#: copies inside one population: byte-identical, or (pixel arrays) equal decoded pixels
SHA256_WITHIN = "sha256_within"
PIXEL_WITHIN = "pixel_xxh128_within"

# near duplicates (METHODS §2)
#: hash-rule records are named ``hash_<rule>``
HASH_PREFIX = "hash_"
HASH_RULES = ("screen", "joint", "sum", "exact_phash")
HASH_SCREEN, HASH_JOINT, HASH_SUM, HASH_EXACT_PHASH = (f"{HASH_PREFIX}{r}" for r in HASH_RULES)
HASH_PREDICATES = (HASH_SCREEN, HASH_JOINT, HASH_SUM, HASH_EXACT_PHASH)
NCC_NEAREST = "ncc_nearest"
NCC_FIRST_CANDIDATE = "ncc_first_candidate"
NCC_ANY_CANDIDATE = "ncc_any_candidate"
NCC_PREDICATES = (NCC_NEAREST, NCC_FIRST_CANDIDATE, NCC_ANY_CANDIDATE)
#: a dihedral variant of a predicate (METHODS §2.8) is named ``<predicate>_dihedral``
DIHEDRAL_SUFFIX = "_dihedral"
NCC_NEAREST_DIHEDRAL = f"{NCC_NEAREST}{DIHEDRAL_SUFFIX}"
DIHEDRAL_PREDICATES = tuple(f"{p}{DIHEDRAL_SUFFIX}" for p in (*HASH_PREDICATES, NCC_NEAREST))
#: every hash rule, with its dihedral variant
HASH_RULE_PREDICATES = (*HASH_PREDICATES, *(f"{p}{DIHEDRAL_SUFFIX}" for p in HASH_PREDICATES))
#: measured only when embeddings are supplied (METHODS §2.4)
EMBEDDING_PREDICATE = "embedding_cosine"
DEDUP_SPLIT = "dedup_split"
COMPARISON_PAIRS = "comparison_pairs"

# label conflicts (METHODS §2.10): ``label_conflict_<predicate>``
LABEL_CONFLICT_PREFIX = "label_conflict_"
#: the pixel predicates a label conflict is counted under (``ncc``: every pair with ρ ≥ τ)
CONFLICT_PREDICATES = (SHA256, PIXEL_XXH128, "ncc", HASH_JOINT, HASH_SUM, HASH_EXACT_PHASH)
LABEL_CONFLICT_SHA256, LABEL_CONFLICT_PIXEL, LABEL_CONFLICT_NCC = (
    f"{LABEL_CONFLICT_PREFIX}{p}" for p in CONFLICT_PREDICATES[:3])
#: identical images under two labels inside one population
LABEL_CONFLICT_WITHIN = f"{LABEL_CONFLICT_PREFIX}within"
LABEL_CONFLICT_PREDICATES = (*(f"{LABEL_CONFLICT_PREFIX}{p}" for p in CONFLICT_PREDICATES),
                             LABEL_CONFLICT_WITHIN)

# cross-corpus containment (METHODS §2.9): ``containment_<what>``
CONTAINMENT_BYTE, CONTAINMENT_NCC, CONTAINMENT = (
    f"containment_{w}" for w in ("byte", "ncc", "byte_or_ncc"))

#: the identity census' predicates (METHODS §1)
IDENTITY_PREDICATES = (SHA256, BASENAME, PIXEL_XXH128)
#: predicates that need file bytes or a file name: not applicable to rows given as pixel arrays
NEEDS_BYTES = (SHA256, BASENAME)
#: predicates whose query rows a deduplicated split removes by default
DEDUP_PREDICATES = (SHA256, PIXEL_XXH128, NCC_NEAREST, NCC_NEAREST_DIHEDRAL)
#: screens that are no evidence alone: hash rules (uncalibrated until a negative control shows
#: them reliable on the modality) and equal file names; their hits are listed apart
SCREENS = (*HASH_RULE_PREDICATES, BASENAME)

METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("byte_identical_rate", "share of query rows with a byte-identical (SHA-256) "
           "counterpart on the reference side", (LAYER,), (SHA256,)),
    Metric("byte_identical_rows", "query rows with a byte-identical counterpart",
           (LAYER,), (SHA256,), field="numerator"),
    Metric("pixel_identical_rate", "share of query rows whose decoded pixels equal a reference "
           "row's, byte copies and re-encodes together (the summary's pixel-identical line)",
           (LAYER,), (PIXEL_IDENTICAL_UNION,)),
    Metric("reencode_rate", "share of query rows whose decoded pixels equal a reference row's "
           "with different bytes (re-encodes alone)", (LAYER,), (PIXEL_XXH128,)),
    Metric("within_split_copy_rate", "share of an evaluated split's rows that are byte copies "
           "(pixel arrays: pixel-identical copies) of another row of the same split",
           (LAYER,), (SHA256_WITHIN, PIXEL_WITHIN), unit="affected row", within=True),
    Metric("label_conflict_rate", "share of query rows with a twin under another label "
           "(byte or decoded-pixel twins, or NCC and hash-rule twins of a predicate not shown "
           "unreliable, across the boundary; or identical images inside the split; the "
           "summary's LABEL CONFLICT lines)",
           (LAYER,), LABEL_CONFLICT_PREDICATES, unit=None, within=True, trusted_only=True),
    Metric("basename_rate", "share of query rows whose basename occurs on the reference side",
           (LAYER,), (BASENAME,)),
    Metric("ncc_rate", "share of query rows with a near-twin (best NCC ρ ≥ τ, nearest rule)",
           (LAYER,), (NCC_NEAREST,), control=True),
    Metric("ncc_rows", "query rows with a near-twin (best NCC ρ ≥ τ, nearest rule)",
           (LAYER,), (NCC_NEAREST,), field="numerator", control=True),
    Metric("phash_rate", "share of query rows passing the pHash/dHash screen rule (radius k)",
           (LAYER,), (HASH_SCREEN,), control=True),
    Metric("hash_joint_rate", "share of query rows with one reference within radius k in both "
           "pHash and dHash (joint rule)", (LAYER,), (HASH_JOINT,), control=True),
    Metric("hash_sum_rate", "share of query rows with one reference whose pHash plus dHash "
           "distance is at most k (sum rule)", (LAYER,), (HASH_SUM,), control=True),
    Metric("exact_phash_rate", "share of query rows with a reference of identical pHash "
           "(distance 0)", (LAYER,), (HASH_EXACT_PHASH,), control=True),
    Metric("phash_dihedral_rate", "share of query rows passing the pHash/dHash screen rule "
           "against a reference rotated or flipped (the seven non-trivial symmetries; "
           "--dihedral)", (LAYER,), (f"{HASH_SCREEN}{DIHEDRAL_SUFFIX}",), control=True),
    Metric("hash_joint_dihedral_rate", "share of query rows passing the joint hash rule against "
           "a reference rotated or flipped (the seven non-trivial symmetries; --dihedral)",
           (LAYER,), (f"{HASH_JOINT}{DIHEDRAL_SUFFIX}",), control=True),
    Metric("hash_sum_dihedral_rate", "share of query rows passing the sum hash rule against a "
           "reference rotated or flipped (the seven non-trivial symmetries; --dihedral)",
           (LAYER,), (f"{HASH_SUM}{DIHEDRAL_SUFFIX}",), control=True),
    Metric("exact_phash_dihedral_rate", "share of query rows with the pHash of a reference "
           "rotated or flipped (the seven non-trivial symmetries; --dihedral)",
           (LAYER,), (f"{HASH_EXACT_PHASH}{DIHEDRAL_SUFFIX}",), control=True),
    Metric("embedding_rate", "share of query rows whose nearest reference embedding has "
           "cosine similarity at least the embedding threshold (user-supplied embeddings; "
           "duplicates --embeddings)", (LAYER,), (EMBEDDING_PREDICATE,), control=True),
)}

#: the cross-corpus layer's metric
EXTERNAL_METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("containment_rate", "share of external-corpus rows with a byte-identical or "
           "NCC ≥ τ counterpart in the audited training rows",
           (LAYER, EXTERNAL_LAYER), (CONTAINMENT,)),
)}

#: the score-card details (``splitscope.records.scorecard``) these layers' records measure:
#: the evaluation split (official, deduplicated, external)
SCORECARD: dict[str, tuple[str, ...]] = {
    "evaluation_split": (SHA256, PIXEL_XXH128, *NCC_PREDICATES,
                         *(f"{p}{DIHEDRAL_SUFFIX}" for p in NCC_PREDICATES),
                         PIXEL_IDENTICAL_UNION, LABEL_CONFLICT_SHA256, LABEL_CONFLICT_NCC,
                         SHA256_WITHIN, DEDUP_SPLIT, CONTAINMENT_BYTE, CONTAINMENT_NCC,
                         CONTAINMENT),
}
#: every predicate of the cross-corpus layer measures the external split
EXTERNAL_SCORECARD: dict[str, tuple[str, ...]] = {
    "evaluation_split": (*IDENTITY_PREDICATES, PIXEL_IDENTICAL_UNION, *HASH_RULE_PREDICATES,
                         *NCC_PREDICATES, *DIHEDRAL_PREDICATES, EMBEDDING_PREDICATE,
                         *LABEL_CONFLICT_PREDICATES, SHA256_WITHIN, PIXEL_WITHIN, DEDUP_SPLIT,
                         COMPARISON_PAIRS, CONTAINMENT_BYTE, CONTAINMENT_NCC, CONTAINMENT),
}

#: what these layers' records are to the report and the Croissant record
#: (``splitscope.records.roles``): role → predicate names
ROLES: dict[str, tuple[str, ...]] = {
    roles.LABEL_CONFLICT: LABEL_CONFLICT_PREDICATES,
    roles.DEDUPLICATED_SPLIT: (DEDUP_SPLIT,),
    roles.NOT_FINDING: (DEDUP_SPLIT,),
}
