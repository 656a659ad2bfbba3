"""The predicates of the identity and near-duplicate layers (METHODS §1–2) by name, and the
``--fail-on`` metrics that read their records: the one table other code names them from."""

from __future__ import annotations

from splitscope.records.metrics import Metric

SHA256 = "sha256"
PIXEL_XXH128 = "pixel_xxh128"
BASENAME = "basename"
PIXEL_IDENTICAL_UNION = "pixel_identical_union"
NCC_NEAREST = "ncc_nearest"
NCC_NEAREST_DIHEDRAL = "ncc_nearest_dihedral"
HASH_SCREEN = "hash_screen"
DEDUP_SPLIT = "dedup_split"
#: copies inside one population: byte-identical, or (pixel arrays) equal decoded pixels
SHA256_WITHIN = "sha256_within"
PIXEL_WITHIN = "pixel_xxh128_within"
#: identical images under two labels inside one population
LABEL_CONFLICT_WITHIN = "label_conflict_within"
CONTAINMENT = "containment_byte_or_ncc"
#: label-conflict records are named ``label_conflict_<predicate>``
LABEL_CONFLICT_PREFIX = "label_conflict_"
#: hash-rule records are named ``hash_<rule>``
HASH_PREFIX = "hash_"

#: the identity census' predicates (METHODS §1)
IDENTITY_PREDICATES = (SHA256, BASENAME, PIXEL_XXH128)
#: predicates that need file bytes or a file name: not applicable to rows given as pixel arrays
NEEDS_BYTES = (SHA256, BASENAME)
#: measured only when embeddings are supplied (METHODS §2.4)
EMBEDDING_PREDICATE = "embedding_cosine"
#: predicates whose query rows a deduplicated split removes by default
DEDUP_PREDICATES = (SHA256, PIXEL_XXH128, NCC_NEAREST, NCC_NEAREST_DIHEDRAL)

#: record ``layer`` values of the duplicates layer's records
IDENTITY, NEAR_DUPLICATE = "identity", "near_duplicate"

METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("byte_identical_rate", "share of query rows with a byte-identical (SHA-256) "
           "counterpart on the reference side", (IDENTITY,), (SHA256,)),
    Metric("byte_identical_rows", "query rows with a byte-identical counterpart",
           (IDENTITY,), (SHA256,), field="numerator"),
    Metric("pixel_identical_rate", "share of query rows whose decoded pixels equal a reference "
           "row's, byte copies and re-encodes together (the summary's pixel-identical line)",
           (IDENTITY,), (PIXEL_IDENTICAL_UNION,)),
    Metric("reencode_rate", "share of query rows whose decoded pixels equal a reference row's "
           "with different bytes (re-encodes alone)", (IDENTITY,), (PIXEL_XXH128,)),
    Metric("within_split_copy_rate", "share of an evaluated split's rows that are byte copies "
           "(pixel arrays: pixel-identical copies) of another row of the same split",
           (IDENTITY,), (SHA256_WITHIN, PIXEL_WITHIN), unit="affected row", within=True),
    Metric("label_conflict_rate", "share of query rows with a twin under another label "
           "(byte or decoded-pixel twins, or NCC and hash-rule twins of a predicate not shown "
           "unreliable, across the boundary; or identical images inside the split; the "
           "summary's LABEL CONFLICT lines)",
           (IDENTITY, NEAR_DUPLICATE),
           tuple(f"{LABEL_CONFLICT_PREFIX}{p}" for p in (SHA256, PIXEL_XXH128, "ncc", "within",
                                                         "hash_joint", "hash_sum",
                                                         "hash_exact_phash")),
           unit=None, within=True, trusted_only=True),
    Metric("basename_rate", "share of query rows whose basename occurs on the reference side",
           (IDENTITY,), (BASENAME,)),
    Metric("ncc_rate", "share of query rows with a near-twin (best NCC ρ ≥ τ, nearest rule)",
           (NEAR_DUPLICATE,), (NCC_NEAREST,), control=True),
    Metric("ncc_rows", "query rows with a near-twin (best NCC ρ ≥ τ, nearest rule)",
           (NEAR_DUPLICATE,), (NCC_NEAREST,), field="numerator", control=True),
    Metric("phash_rate", "share of query rows passing the pHash/dHash screen rule (radius k)",
           (NEAR_DUPLICATE,), (HASH_SCREEN,), control=True),
)}

#: the cross-corpus layer's metric
EXTERNAL_METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("containment_rate", "share of external-corpus rows with a byte-identical or "
           "NCC ≥ τ counterpart in the audited training rows",
           (IDENTITY, NEAR_DUPLICATE, "containment"), (CONTAINMENT,), (("containment",),)),
)}
