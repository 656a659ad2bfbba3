"""The near-duplicate predicates (METHODS §2.1–2.2, §2.8, §2.10) as objects, in one table.

A :class:`NearPredicate` holds what the audit needs to know of one predicate: its name and
title, the features it reads, its rule (per query row of one boundary: a flag, ``<NA>`` where
not assessed, with its counterpart and measurements), the parameters its records carry, and,
where it has them, its per-pair test, its dihedral variant and its label-conflict count.
:func:`splitscope.relations.near_duplicate.near_duplicates_rows` runs every registered
predicate on each boundary; the records, the contaminated list, the query flags, the issue
table and the label conflicts read names, titles, parameters and measurements from here.

Rules read the boundary through a :class:`~splitscope.relations.near_context.BoundaryContext`,
whose searches run once per boundary whichever predicates read them. A new predicate is added
with :func:`register_predicate` (and taken away with :func:`unregister_predicate`), without
touching the modules that run or report it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.relations.hashes import HashSearch
from splitscope.relations.ncc import any_candidate, first_candidate
from splitscope.relations.near_context import (
    HASHES,
    THUMBNAIL,
    BoundaryContext,
    Settings,
    positions,
    to_rows,
    unassessed,
)
from splitscope.relations.predicates import (
    DIHEDRAL_SUFFIX,
    EMBEDDING_PREDICATE,
    HASH_EXACT_PHASH,
    HASH_JOINT,
    HASH_PREFIX,
    HASH_SCREEN,
    HASH_SUM,
    IDENTITY_PREDICATES,
    NCC_ANY_CANDIDATE,
    NCC_FIRST_CANDIDATE,
    NCC_NEAREST,
)

__all__ = ["PREDICATES", "Conflict", "Dihedral", "NearPredicate", "Outcome", "PairMeasures",
           "PairRule", "Settings", "dihedral_base", "near_predicate", "register_predicate",
           "registered", "score_columns", "unregister_predicate"]


@dataclass(frozen=True)
class Outcome:
    """What a rule finds on one boundary.

    ``columns``: per query row (in ``row`` order) the predicate's columns in the order they are
    written, its flag (boolean, ``<NA>`` = not assessed) under the predicate's own name.
    ``shared``: per-row columns of a search that several predicates read, written once, after
    the run of predicates that report them. ``pairs``: pairs to list and measure in the pair
    table (``query_row, reference_row, variant`` and ``decides`` for a pair deciding the rule).
    """

    columns: Mapping[str, Any]
    shared: Mapping[str, Any] = field(default_factory=dict)
    pairs: tuple[pd.DataFrame, ...] = ()


@dataclass(frozen=True)
class PairMeasures:
    """Measurements of the listed pairs: ``d_p``, ``d_d`` (99 where a row has no hash),
    ``has_hash`` (both rows have both hashes) and ``rho`` (NaN where undefined)."""

    d_p: np.ndarray
    d_d: np.ndarray
    has_hash: np.ndarray
    rho: np.ndarray


@dataclass(frozen=True)
class PairRule:
    """A predicate's test of one pair, and the tag it writes in the pair table's ``rules``."""

    tag: str
    test: Callable[[PairMeasures, Settings], np.ndarray]


@dataclass(frozen=True)
class Dihedral:
    """How a predicate's dihedral variant (METHODS §2.8) is found.

    For each non-identity variant the query side is featurized transformed and searched
    (``search``: ``"hash"`` or ``"ncc"``, one search per variant whichever predicates read
    it); ``pick(result, settings)`` gives per searched query its flag, reference position
    and score (or None). ``keep``: a query keeps the first variant that flags it
    (``"first"``) or the one with the highest score (``"best"``). ``measure`` names the
    per-row column of the kept score; ``pair_tag`` the tag of its pairs in ``rules`` (tested
    with the predicate's own pair test on the transformed pairs).
    """

    search: str
    pick: Callable[[Any, Settings], tuple[np.ndarray, np.ndarray, np.ndarray | None]]
    keep: str = "first"
    measure: str | None = None
    pair_tag: str | None = None


@dataclass(frozen=True)
class Conflict:
    """A label-conflict count (METHODS §2.10) over the pairs the predicate's pair test passes:
    its name (record ``label_conflict_<name>``), title, parameters, and whether its conflicts
    count in a verdict when no negative control calibrates it."""

    name: str
    title: str
    params: Callable[[Settings], dict]
    trusted_without_control: bool = False


@dataclass(frozen=True)
class NearPredicate:
    """One near-duplicate predicate.

    Parameters
    ----------
    name : str
        Record and flag-column name.
    title : str
        Title of its records.
    needs : tuple of str
        Features it reads: columns of ``Scan.rows()`` (``phash``, ``dhash``) or
        :data:`~splitscope.relations.near_context.THUMBNAIL`. Query rows without them are not
        assessed.
    rule : callable
        ``rule(context, name) -> Outcome`` on one boundary. Rows with equal features must get
        equal answers, and ties go to the lowest reference row: a boundary is measured on one
        row per content and file (:func:`~splitscope.relations.near_duplicate.near_duplicates`).
        The flag is ``<NA>`` wherever a query row lacks ``needs``.
    params : callable
        ``params(settings) -> dict``: the parameters its records carry.
    measure : str, optional
        Per-row column with the value behind a flag (the contaminated list's ``measure``).
    scores : mapping, optional
        Per-row score columns (its own and its dihedral variant's) and how the issue table
        combines a row's boundaries (``"max"`` for a similarity, ``"min"`` for a distance).
    counterpart_rule : str, optional
        Tag of the pair deciding it in the pair table's ``counterpart_rules``.
    pair_rule : PairRule, optional
        Its test of one pair (the pair table's ``rules``).
    dihedral : Dihedral, optional
        Its variant against rotated and flipped copies, measured with ``dihedral=True``.
    conflict : Conflict, optional
        Its label-conflict count (needs ``pair_rule``).
    details : callable, optional
        ``details(near) -> dict``: more details of its records from the boundary's
        :class:`~splitscope.relations.near_duplicate.NearDuplicates`.
    """

    name: str
    title: str
    needs: tuple[str, ...]
    rule: Callable[[BoundaryContext, str], Outcome]
    params: Callable[[Settings], dict]
    measure: str | None = None
    scores: Mapping[str, str] = field(default_factory=dict)
    counterpart_rule: str | None = None
    pair_rule: PairRule | None = None
    dihedral: Dihedral | None = None
    conflict: Conflict | None = None
    details: Callable[[Any], dict] | None = None

    @property
    def dihedral_name(self) -> str:
        """Name of its dihedral variant."""
        return f"{self.name}{DIHEDRAL_SUFFIX}"


# ---- helpers of the rules ---------------------------------------------------------------------
def deciding_pairs(ctx: BoundaryContext, counterpart: np.ndarray, hit: np.ndarray) -> tuple:
    """The pairs (query row, counterpart row) that decide a rule where ``hit``: always listed
    and measured in the pair table."""
    if not hit.any():
        return ()
    return (pd.DataFrame({"query_row": ctx.q_rows[hit], "reference_row": counterpart[hit],
                          "variant": "identity", "decides": True}),)


def _flagged(flag) -> np.ndarray:
    return pd.array(flag, dtype="boolean").fillna(False).to_numpy(bool)


# ---- hash rules (METHODS §2.1) ---------------------------------------------------------------
@dataclass(frozen=True)
class HashRule:
    """A rule of the shared hash search: flag and counterpart of the rows with both hashes."""

    rule: str

    def __call__(self, ctx: BoundaryContext, name: str) -> Outcome:
        hs = ctx.hashes
        qpos = np.flatnonzero(ctx.has(HASHES)[0])
        flag = unassessed(len(ctx))
        flag[qpos] = hs.flags(self.rule)
        cp = np.full(len(ctx), -1, np.int64)
        ref = hs.counterpart(self.rule)
        cp[qpos] = np.where(ref >= 0, ctx.hash_rows[1][np.maximum(ref, 0)], -1)
        return Outcome({name: flag, f"{name}_counterpart": cp}, shared=ctx.hash_columns,
                       pairs=deciding_pairs(ctx, cp, (cp >= 0) & _flagged(flag)))

    def pick(self, hs: HashSearch, settings: Settings):
        """Flag and counterpart position per query of a search on a transformed query side."""
        return hs.flags(self.rule), hs.counterpart(self.rule), None


def _hash_params(rule: str) -> Callable[[Settings], dict]:
    def params(s: Settings) -> dict:
        return {"rule": rule, "radius": s.radius, "hash_size": 8,
                "hashes": "imagehash phash/dhash", "mode": s.geometry.get("mode")}
    return params


def _hash_conflict_params(rule: str) -> Callable[[Settings], dict]:
    def params(s: Settings) -> dict:
        return {"rule": rule, "radius": s.radius, "hash_size": 8}
    return params


def _joint(m: PairMeasures, s: Settings) -> np.ndarray:
    return m.has_hash & (np.maximum(m.d_p, m.d_d) <= s.radius)


def _sum(m: PairMeasures, s: Settings) -> np.ndarray:
    return m.has_hash & (m.d_p + m.d_d <= s.radius)


def _exact_phash(m: PairMeasures, s: Settings) -> np.ndarray:
    return m.has_hash & (m.d_p == 0)


def _hash_predicate(name: str, title: str, scores: dict, measure: str,
                    pair_test=None, conflict_title: str | None = None) -> NearPredicate:
    rule = name.removeprefix(HASH_PREFIX)
    tag = PairRule(rule, pair_test) if pair_test is not None else None
    conflict = Conflict(name, conflict_title, _hash_conflict_params(rule)) \
        if conflict_title else None
    return NearPredicate(name, title, HASHES, HashRule(rule), _hash_params(rule),
                         measure=measure, scores=scores, pair_rule=tag,
                         dihedral=Dihedral("hash", HashRule(rule).pick), conflict=conflict)


# ---- NCC (METHODS §2.2) ----------------------------------------------------------------------
def nearest(ctx: BoundaryContext, name: str) -> Outcome:
    """*nearest*: the best ρ over all references reaches τ; flat queries (ρ undefined) are
    not assessed, and counted apart in ``flat``."""
    found, n = ctx.ncc, len(ctx)
    tpos = np.flatnonzero(ctx.has((THUMBNAIL,))[0])
    flat = unassessed(n)
    flat[tpos] = found.flat
    rho = np.full(n, np.nan, np.float32)
    rho[tpos] = found.best_rho
    cp = np.full(n, -1, np.int64)
    cp[tpos] = to_rows(ctx.thumb_rows[1], found.best_index)
    assessed = np.zeros(n, bool)
    assessed[tpos] = np.isfinite(found.best_rho)
    flag = unassessed(n)
    flag[assessed] = rho[assessed] >= ctx.tau
    return Outcome({"flat": flat, "ncc_best_rho": rho, f"{name}_counterpart": cp, name: flag},
                   pairs=deciding_pairs(ctx, cp, (cp >= 0) & _flagged(flag)))


def _nearest_pick(res, s: Settings):
    score = np.nan_to_num(res.best_rho, nan=-np.inf)
    # kept scores are float32: the flag compares the value kept
    return score.astype(np.float32) >= s.tau, res.best_index, score


def _candidate_table(ctx: BoundaryContext, first: bool) -> pd.DataFrame | None:
    """The exact-pHash candidate chosen per query: the first by reference path, or the one
    with the highest ρ (``query, reference`` as manifest rows, ``rho``, ``flagged``)."""
    c = ctx.candidates
    if not c.query.size:
        return None
    if not first:
        return any_candidate(pd.DataFrame({"query": c.query, "reference": c.reference}), c.rho,
                             ctx.tau)
    # the first candidate takes paths by reference position: number the candidates
    numbered = pd.DataFrame({"query": c.query, "reference": np.arange(c.query.size)})
    paths = ctx.r.set_index("row")["path"].reindex(c.reference).astype(str).to_numpy()
    table = first_candidate(numbered, paths, c.rho, ctx.tau)
    table["reference"] = c.reference[table["reference"].to_numpy()]
    return table


@dataclass(frozen=True)
class CandidateRule:
    """A counterpart rule over the exact-pHash screen: assessed where the query has hashes and
    a thumbnail; a query without a candidate is not flagged."""

    first: bool

    def __call__(self, ctx: BoundaryContext, name: str) -> Outcome:
        table = _candidate_table(ctx, self.first)
        n = len(ctx)
        flag = unassessed(n)
        flag[ctx.has((*HASHES, THUMBNAIL))[0]] = False
        cp = np.full(n, -1, np.int64)
        rho = np.full(n, np.nan, np.float32)
        if table is not None and len(table):
            pos = positions(ctx.q_rows, table["query"].to_numpy(np.int64))
            flag[pos] = table["flagged"].to_numpy(bool)
            cp[pos] = table["reference"].to_numpy(np.int64)
            rho[pos] = table["rho"].to_numpy(np.float32)
        # the chosen candidate decides the rule whether or not it reaches τ
        return Outcome({name: flag, f"{name}_counterpart": cp, f"{name}_rho": rho},
                       pairs=deciding_pairs(ctx, cp, cp >= 0))


def _ncc_params(rule: str, screen: str | None = None) -> Callable[[Settings], dict]:
    def params(s: Settings) -> dict:
        out = {"tau": s.tau, "counterpart_rule": rule, **s.geometry}
        if screen:
            out["screen"] = screen
        return out
    return params


def _rho_at_tau(m: PairMeasures, s: Settings) -> np.ndarray:
    return np.nan_to_num(m.rho, nan=-1) >= s.tau


def _ncc_conflict_params(s: Settings) -> dict:
    return {"tau": s.tau, "pairs": "every pair with ρ ≥ τ", **s.geometry}


def _nearest_details(near) -> dict:
    return {"sweep": near.sweep.to_dict("records"),
            "flat_query_rows": int(near.flags["flat"].fillna(False).astype(bool).sum())}


#: the built-in predicates, in the order their columns and records are written
PREDICATES: tuple[NearPredicate, ...] = (
    _hash_predicate(HASH_SCREEN, "Hash screen (min d_p ≤ k and min d_d ≤ k)",
                    {"d_p_min": "min", "d_d_min": "min"}, "d_p_min"),
    _hash_predicate(HASH_JOINT, "Hash joint rule (one reference with d_p ≤ k and d_d ≤ k)",
                    {"d_joint_min": "min"}, "d_joint_min", _joint,
                    "Hash joint-rule twins under another label"),
    _hash_predicate(HASH_SUM, "Hash sum rule (one reference with d_p + d_d ≤ k)",
                    {"d_sum_min": "min"}, "d_sum_min", _sum,
                    "Hash sum-rule twins under another label"),
    _hash_predicate(HASH_EXACT_PHASH, "Exact pHash (d_p = 0)", {"d_p_min": "min"}, "d_p_min",
                    _exact_phash, "Exact-pHash twins under another label"),
    NearPredicate(
        NCC_NEAREST, "NCC, nearest counterpart (max ρ ≥ τ)", (THUMBNAIL,), nearest,
        _ncc_params("nearest"), measure="ncc_best_rho",
        scores={"ncc_best_rho": "max", "ncc_best_rho_dihedral": "max"},
        counterpart_rule="nearest", pair_rule=PairRule("ncc", _rho_at_tau),
        dihedral=Dihedral("ncc", _nearest_pick, keep="best", measure="ncc_best_rho_dihedral",
                          pair_tag="dihedral_ncc"),
        # every pair with ρ ≥ τ, not only the nearest: its count is named "ncc"
        conflict=Conflict("ncc", "NCC near-twins (ρ ≥ τ) under another label",
                          _ncc_conflict_params, trusted_without_control=True),
        details=_nearest_details),
    NearPredicate(
        NCC_FIRST_CANDIDATE, "NCC, first exact-pHash candidate by path (ρ ≥ τ)",
        (*HASHES, THUMBNAIL), CandidateRule(first=True),
        _ncc_params("first_candidate", "exact_phash"), measure="ncc_first_candidate_rho",
        counterpart_rule="first_candidate"),
    NearPredicate(
        NCC_ANY_CANDIDATE, "NCC, any exact-pHash candidate (ρ ≥ τ)", (*HASHES, THUMBNAIL),
        CandidateRule(first=False), _ncc_params("any_candidate", "exact_phash"),
        measure="ncc_any_candidate_rho", counterpart_rule="any_candidate"),
)

_REGISTRY: dict[str, NearPredicate] = {p.name: p for p in PREDICATES}
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


def registered() -> tuple[NearPredicate, ...]:
    """Every predicate that runs: the built-in ones, then those registered, in order."""
    return tuple(_REGISTRY.values())


def _taken() -> set[str]:
    """Names a new predicate cannot take: predicates, their columns, the table's keys."""
    names = {EMBEDDING_PREDICATE, *IDENTITY_PREDICATES, "row", "path", "boundary", "flat"}
    for p in _REGISTRY.values():
        names |= {p.name, p.dihedral_name, p.measure or "", *p.scores}
        if p.conflict is not None:
            names.add(p.conflict.name)
    return names - {""}


def register_predicate(predicate: NearPredicate) -> NearPredicate:
    """Add ``predicate`` to the table: every later audit runs it on each boundary and reports
    it like a built-in predicate (its flag column, records, contaminated list, issue table).

    Raises
    ------
    InputError
        When the name is not lower-case ``[a-z][a-z0-9_]*`` or is already a predicate's.
    """
    if not isinstance(predicate, NearPredicate):
        raise InputError(f"expected a NearPredicate; got {type(predicate).__name__}")
    if not _NAME.match(predicate.name):
        raise InputError(f"predicate name {predicate.name!r} must match [a-z][a-z0-9_]*")
    if predicate.name in _taken():
        raise InputError(f"predicate name {predicate.name!r} is already taken")
    if predicate.conflict is not None and predicate.pair_rule is None:
        raise InputError(f"predicate {predicate.name!r}: a label-conflict count needs a "
                         "pair rule")
    _REGISTRY[predicate.name] = predicate
    return predicate


def unregister_predicate(name: str) -> NearPredicate:
    """Take a registered predicate out of the table (built-in ones stay)."""
    if name in {p.name for p in PREDICATES}:
        raise InputError(f"{name!r} is a built-in predicate and cannot be unregistered")
    if name not in _REGISTRY:
        raise InputError(f"no registered predicate is named {name!r}")
    return _REGISTRY.pop(name)


def near_predicate(name: str) -> NearPredicate | None:
    """The registered predicate named ``name`` (None when there is none)."""
    return _REGISTRY.get(name)


def dihedral_base(name: str) -> NearPredicate | None:
    """The registered predicate whose dihedral variant is named ``name`` (None when none)."""
    base = _REGISTRY.get(name.removesuffix(DIHEDRAL_SUFFIX))
    if base is None or base.dihedral is None or base.dihedral_name != name:
        return None
    return base


def score_columns() -> dict[str, str]:
    """Per-row score columns of every registered predicate, with how rows of several
    boundaries combine: similarities (``"max"``) first, then distances."""
    found: dict[str, str] = {}
    for p in registered():
        found.update({c: how for c, how in p.scores.items() if c not in found})
    return dict(sorted(found.items(), key=lambda kv: kv[1] != "max"))
