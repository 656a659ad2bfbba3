"""Near-duplicate relations of one boundary (METHODS §2.1–2.3, §2.8): hash rules, NCC with its
counterpart rules, SSIM on the selected pairs, optionally the dihedral variants.

:func:`near_duplicates` runs every predicate of the table
(:mod:`splitscope.relations.near_predicates`) on one boundary and returns per-query-row flags
(keyed by the manifest ``row``) and one pair table with every measurement. The searches the
predicates share run once per boundary
(:class:`~splitscope.relations.near_context.BoundaryContext`). Query rows without the features
a predicate needs (hashes, a thumbnail: unreadable files) are *not assessed* for it and stay in
the denominator; reference rows without them cannot be counterparts.

On a boundary of a population with itself (``Boundary.within``) a row is never its own
counterpart; two *different* rows that name the same file (a list entry repeated) are
counterparts of each other, since a repeated entry is a copy inside the split.

In the pair table, ``d_p`` and ``d_d`` are the distances between the plain (untransformed)
images, also for dihedral pairs; ``rho`` and ``ssim`` of a dihedral pair are measured after
applying its variant to the reference thumbnail. The table lists at most
``max_pairs_per_query`` pairs per query row besides those that decide a rule
(:func:`cap_pairs`), so that homogeneous data (many unrelated pairs above τ) cannot make the
measurements explode; flags, counterparts and the counts in ``notes["pairs"]`` are exact.
Thumbnails are read through the scan's store a block at a time
(:class:`splitscope.relations.ncc_core.ThumbnailRows`), never for the whole population at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, Population
from splitscope.errors import InputError
from splitscope.relations import dihedral as dih
from splitscope.relations.hashes import hamming_distance, hash_search
from splitscope.relations.identity import side
from splitscope.relations.ncc import SWEEP, ncc_search, ncc_sweep, pair_rho
from splitscope.relations.near_context import (
    HASHES,
    THUMBNAIL,
    BoundaryContext,
    unassessed,
    valid_rows,
)
from splitscope.relations.near_predicates import PairMeasures, Settings, registered
from splitscope.relations.options import SearchOptions
from splitscope.relations.ssim import ssim_pairs

#: Default bound on the pairs listed and measured per query row (see :func:`cap_pairs`).
MAX_PAIRS_PER_QUERY = SearchOptions.max_pairs_per_query


@dataclass
class NearDuplicates:
    """Per-boundary near-duplicate results.

    ``flags``: one row per query row (``row``, ``path``, then one bool column per predicate,
    ``<NA>`` where not assessed) plus the deciding counterpart and measurement per predicate.
    ``pairs``: pair table (``query_row, reference_row, d_p, d_d, rho, ssim, rules, variant``).
    ``sweep``: NCC nearest-rule sweep. ``assessed``: per predicate, query rows assessed.
    """

    boundary: Boundary
    params: dict
    flags: pd.DataFrame
    pairs: pd.DataFrame
    sweep: pd.DataFrame
    assessed: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)

    def predicates(self) -> list[str]:
        """The predicates measured, in the order of their flag columns."""
        return [c for c in self.flags.columns if c in self.assessed]

    def affected_rows(self, predicate: str) -> np.ndarray:
        col = self.flags[predicate]
        return self.flags.loc[col.fillna(False).astype(bool), "row"].to_numpy(np.int64)


def representatives(side_rows: pd.DataFrame) -> np.ndarray:
    """Per row of one side (in ``row`` order), the first row of that side naming the same file
    under the same released path (the row itself when no other does, or without a ``file``).

    Such rows have the same features, so every predicate gives them the same answer; a
    boundary is measured on one row per file and side, and expanded to all rows after."""
    row_ids = side_rows["row"].to_numpy(np.int64)
    if "file" not in side_rows or not len(side_rows):
        return row_ids
    key = side_rows["file"].astype("string") + "\0" + side_rows["path"].astype("string")
    codes = pd.factorize(key)[0]
    seen = codes >= 0
    # rows are in row order: the first position of each code holds its lowest row
    _, first = np.unique(codes[seen], return_index=True)
    lowest = row_ids[seen][first]
    return np.where(seen, lowest[np.maximum(codes, 0)], row_ids)


#: what makes two rows measure alike: equal bytes and equal features decoded from them
_CONTENT = ("sha256", "pixel_xxh128", "phash", "dhash")


def content_representatives(side_rows: pd.DataFrame) -> np.ndarray:
    """Per row of one side (in ``row`` order), the first row of that side with the same
    content: equal bytes (SHA-256) and equal features (decoded-pixel digest, pHash, dHash,
    a thumbnail or none). Rows without a digest fall back to :func:`representatives`.

    Equal bytes decode to equal pixels, so every predicate gives such rows the same answer
    against another population: a copy repeated n times is measured once, not n times."""
    base = representatives(side_rows)
    if "sha256" not in side_rows or not len(side_rows):
        return base
    has = side_rows["sha256"].notna().to_numpy(bool)
    if not has.any():
        return base
    key = pd.Series(np.where(valid_rows(side_rows, (THUMBNAIL,)), "t", "-"),
                    index=side_rows.index)
    for col in _CONTENT:
        if col in side_rows:
            key = key + "\0" + side_rows[col].astype("string").fillna("")
    codes = pd.factorize(key[has])[0]
    rows = side_rows["row"].to_numpy(np.int64)[has]
    _, first = np.unique(codes, return_index=True)  # rows ascending: each code's lowest row
    out = base.copy()
    out[has] = rows[first][codes]
    return out


def _members(rep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(distinct representatives, their member counts, start of each in ``order``, ``order``:
    the side's rows grouped by representative, ascending within a group); ``rep`` is aligned
    with the side's rows (ascending)."""
    order = np.argsort(rep, kind="stable")
    reps, counts = np.unique(rep, return_counts=True)
    starts = np.r_[0, np.cumsum(counts)[:-1]].astype(np.int64)
    return reps, counts, starts, order


def near_duplicates(rows: pd.DataFrame, thumbs, boundary: Boundary,
                    options: SearchOptions | None = None, **keywords) -> NearDuplicates:
    """Run every registered near-duplicate predicate on one boundary.

    Query rows with the same content (:func:`content_representatives`: byte copies) and
    reference rows that name the same file under the same path (a list entry repeated,
    :func:`representatives`) are measured once: the search runs on one row per content and
    per file, and the flags, counterparts, pair table, sweep and counts are expanded to every
    row, equal to those of measuring each row (every rule breaks ties by the lowest
    reference row, which is each file's first). So n query copies of one image against m
    reference copies cost m, not n·m. Reference copies in distinct files stay apart: the
    *first candidate* rule picks among them by path. ``options`` and ``keywords`` as
    :func:`near_duplicates_rows`.
    """
    if boundary.within:
        return near_duplicates_rows(rows, thumbs, boundary, options, **keywords)
    q, r = side(rows, boundary.query), side(rows, boundary.reference)
    q_rep, r_rep = content_representatives(q), representatives(r)
    q_rows, r_rows = q["row"].to_numpy(np.int64), r["row"].to_numpy(np.int64)
    if (q_rep == q_rows).all() and (r_rep == r_rows).all():
        return near_duplicates_rows(rows, thumbs, boundary, options, **keywords)
    reduced = Boundary(Population(boundary.query.name, np.unique(q_rep)),
                       Population(boundary.reference.name, np.unique(r_rep)))
    q_members, r_members = _members(q_rep), _members(r_rep)
    nd = near_duplicates_rows(rows, thumbs, reduced, options,
                              expand=(q_members, q_rows, r_members, r_rows), **keywords)
    # every query row takes its representative's flags (counterparts are reference rows
    # that are each file's first, as the row-level search chooses them)
    flags = nd.flags.set_index("row").loc[q_rep].reset_index(drop=True)
    flags.insert(0, "row", q_rows)
    flags["path"] = q["path"].to_numpy()
    assessed = {name: int(flags[name].notna().sum()) for name in nd.assessed}
    qt = valid_rows(q, (THUMBNAIL,))
    sweep = ncc_sweep(flags["ncc_best_rho"].to_numpy(np.float32)[qt], SWEEP)
    sweep["rows"] = len(q)
    notes = dict(nd.notes)
    notes["distinct_files"] = {
        "rule": "query rows with the same bytes and features, and reference rows naming the "
                "same file under the same path, are measured once and expanded to every row",
        "query_rows": len(q_rows), "query_files": int(np.unique(representatives(q)).size),
        "query_measured": int(reduced.query.size),
        "reference_rows": len(r_rows), "reference_files": int(reduced.reference.size)}
    return NearDuplicates(boundary, nd.params, flags, nd.pairs, sweep, assessed, notes)


def near_duplicates_rows(rows: pd.DataFrame, thumbs, boundary: Boundary,
                         options: SearchOptions | None = None, *,
                         geometry: dict | None = None, workers: int | None = None,
                         block: int = 2048, max_ssim_pairs: int = 200_000, searcher=None,
                         expand=None) -> NearDuplicates:
    """Run every registered near-duplicate predicate
    (:func:`splitscope.relations.near_predicates.registered`) on every row of one boundary.

    Parameters
    ----------
    rows : DataFrame
        ``Scan.rows()``: manifest joined with features (``phash``, ``dhash``, ``thumb_index``).
    thumbs : callable
        ``thumbs(row_ids) -> ndarray (n, S, S) uint8`` for manifest rows that have thumbnails
        (``Scan.thumbs``).
    boundary : Boundary
    options : SearchOptions, optional
        τ, the hash radius k, dihedral matching (each query against the eight dihedral
        variants of the references, for the predicates that have one; needs the image
        files), SSIM on the listed pairs (at most ``max_ssim_pairs``), the pairs listed and
        measured per query row (:func:`cap_pairs`; the pair and row counts stay exact, in
        ``notes["pairs"]``) and the NCC search method (default: the method's).
    geometry : dict
        Thumbnail geometry (``thumb_size``, ``interpolation``, ``mode``), recorded with every
        NCC/SSIM predicate and in the pair table.
    workers : int, optional
        Threads of the hash searches and BLAS threads of the local NCC searches (default:
        every core); the results do not depend on it.
    searcher : callable, optional
        Runs the NCC search in place of :func:`~splitscope.relations.ncc.ncc_search` (same
        signature and result), e.g. partitioned over a cluster
        (:func:`splitscope.relations.partitioned.scan_searcher`).
    expand : tuple, optional
        Set by :func:`near_duplicates` when ``boundary`` holds one row per file and side:
        the members of each (:func:`_members`) and the full sides' rows, so that the pair
        table is that of every row.
    """
    o = options or SearchOptions()
    geometry = dict(geometry or {})
    ctx = BoundaryContext(rows, thumbs, boundary, tau=o.tau, radius=o.radius,
                          geometry=geometry, workers=workers, block=block, search=o.search,
                          searcher=searcher)
    predicates = registered()
    flags, parts = predicate_flags(ctx, predicates)
    sweep = ncc_sweep(np.asarray(ctx.ncc.best_rho, np.float32), SWEEP)
    sweep["rows"] = len(ctx)
    if o.dihedral:
        parts += dihedral_flags(ctx, predicates, flags)
    assessed = {p: int(flags[p].notna().sum()) for p in _ran(predicates, flags)}
    pairs = _pair_table(ctx, [*ctx.pair_parts, *parts], flags, predicates, ssim=o.ssim,
                        max_ssim_pairs=max_ssim_pairs, max_per_query=o.max_pairs_per_query,
                        expand=expand)
    params = {"tau": o.tau, "radius": o.radius, **geometry, "dihedral": o.dihedral,
              "max_pairs_per_query": o.max_pairs_per_query, "search": o.search}
    return NearDuplicates(boundary, params, flags, pairs, sweep, assessed, ctx.notes)


def _ran(predicates, flags: pd.DataFrame) -> list[str]:
    """The predicates with a flag column (dihedral variants after the plain ones)."""
    plain = [p.name for p in predicates]
    variants = [p.dihedral_name for p in predicates if p.dihedral is not None]
    return [n for n in (*plain, *variants) if n in flags]


def predicate_flags(ctx: BoundaryContext, predicates) -> tuple[pd.DataFrame, list]:
    """Each predicate's rule on the boundary: the per-query columns (``row``, ``path``, then
    each predicate's columns in table order) and the pairs the rules list.

    Columns a search shares among a run of predicates (:attr:`Outcome.shared`) are written
    once, after that run."""
    flags = pd.DataFrame({"row": ctx.q_rows, "path": ctx.q["path"].to_numpy()})
    parts: list[pd.DataFrame] = []
    pending: dict = {}
    for p in predicates:
        out = p.rule(ctx, p.name)
        if p.name not in out.columns:
            raise InputError(f"the rule of predicate {p.name!r} gives no column {p.name!r}")
        if pending and set(out.shared) != set(pending):
            flags = _put(flags, pending)
            pending = {}
        flag = pd.array(out.columns[p.name], dtype="boolean")
        flag[~ctx.has(p.needs)[0]] = pd.NA  # a row without the features is not assessed
        flags = _put(flags, {**out.columns, p.name: flag})
        pending.update({k: v for k, v in out.shared.items() if k not in flags})
        parts.extend(out.pairs)
    return _put(flags, pending), parts


def _put(flags: pd.DataFrame, columns) -> pd.DataFrame:
    for key, values in columns.items():
        flags[key] = values
    return flags


# ---- dihedral variants (METHODS §2.8) ---------------------------------------------------------
@dataclass
class _Kept:
    """Per query row, the variant a dihedral predicate keeps so far."""

    hit: np.ndarray
    variant: np.ndarray
    counterpart: np.ndarray
    score: np.ndarray

    @classmethod
    def empty(cls, n: int) -> _Kept:
        return cls(np.zeros(n, bool), np.full(n, "", object), np.full(n, -1, np.int64),
                   np.full(n, -np.inf, np.float32))

    def keep(self, rule, found, qsel: np.ndarray, variant: str, settings: Settings) -> None:
        """Take ``variant`` where it flags a query not flagged before (``first``) or beats
        the kept score (``best``)."""
        result, ref_rows = found
        flag, ref, score = rule.pick(result, settings)
        if rule.keep == "first":
            take = flag & ~self.hit[qsel]
        elif rule.keep == "best":
            take = score > self.score[qsel]
            self.score[qsel[take]] = score[take]
        else:
            raise InputError(f"unknown dihedral keep {rule.keep!r}; use 'first' or 'best'")
        idx = qsel[take]
        self.hit[idx] = flag[take]
        self.variant[idx] = variant
        self.counterpart[idx] = ref_rows[ref[take]]


def _variant_search(ctx: BoundaryContext, kind: str, feats: dict, qsel: np.ndarray):
    """One search of the transformed query rows ``qsel`` against the plain references:
    (result, reference rows), or None when either side is empty."""
    if kind == "hash":
        rh = ctx.has(HASHES)[1]
        if not (qsel.size and rh.any()):
            return None
        rh_rows = ctx.hash_rows[1]
        hs = hash_search(feats["phash"][qsel], feats["dhash"][qsel], ctx.r.loc[rh, "phash"],
                         ctx.r.loc[rh, "dhash"], radius=ctx.radius,
                         exclude=ctx.exclude(ctx.q_rows[qsel], rh_rows), workers=ctx.workers,
                         collect_pairs=False)
        return hs, rh_rows
    if kind == "ncc":
        rthumbs, rt_rows = ctx.thumbnails[1], ctx.thumb_rows[1]
        if not (qsel.size and rthumbs is not None):
            return None
        res = ncc_search(feats["thumb"][qsel], rthumbs, tau=ctx.tau,
                         exclude=ctx.exclude(ctx.q_rows[qsel], rt_rows), block=ctx.block,
                         collect_pairs=False, workers=ctx.workers)
        return res, rt_rows
    raise InputError(f"unknown dihedral search {kind!r}; use 'hash' or 'ncc'")


def _have_imaging() -> bool:
    try:
        import splitscope.features.imaging  # noqa: F401
    except ImportError:
        return False
    return True


def dihedral_flags(ctx: BoundaryContext, predicates, flags: pd.DataFrame) -> list:
    """Each dihedral variant's columns, from matching g⁻¹(query) against the plain references
    for every non-identity variant g (one search of each kind per variant); returns the pairs
    they decide."""
    chosen = [p for p in predicates if p.dihedral is not None]
    if not _have_imaging():
        ctx.notes["dihedral"] = "splitscope.features.imaging unavailable: not assessed"
        return []
    files = ctx.q["file"].astype(str).to_numpy()
    size = int(ctx.geometry.get("thumb_size", 96))
    interp = str(ctx.geometry.get("interpolation", "bicubic"))
    settings = ctx.settings
    kept = {p.name: _Kept.empty(len(ctx)) for p in chosen}
    ok_any = np.zeros(len(ctx), bool)
    for variant in dih.NON_IDENTITY:
        feats = dih.query_side_features(files, variant, thumb_size=size, interpolation=interp)
        ok_any |= feats["ok"]
        qsel = np.flatnonzero(feats["ok"])
        found: dict = {}
        for p in chosen:
            kind = p.dihedral.search
            if kind not in found:
                found[kind] = _variant_search(ctx, kind, feats, qsel)
            if found[kind] is not None:
                kept[p.name].keep(p.dihedral, found[kind], qsel, variant, settings)
    return _dihedral_columns(ctx, chosen, kept, ok_any, flags)


def _dihedral_columns(ctx: BoundaryContext, chosen, kept: dict, ok_any: np.ndarray,
                      flags: pd.DataFrame) -> list:
    """Write the variants' flag, variant, counterpart and ``_only`` columns, then their
    measures; returns their deciding pairs."""
    for p in chosen:
        k, name = kept[p.name], p.dihedral_name
        ok = ok_any & ctx.has(p.needs)[0]
        col = unassessed(len(ctx))
        col[ok] = k.hit[ok]
        flags[name] = col
        flags[f"{name}_variant"] = np.where(k.hit, k.variant, "")
        flags[f"{name}_counterpart"] = np.where(k.hit, k.counterpart, -1)
        flags[f"{name}_only"] = k.hit & ~flags[p.name].fillna(False).to_numpy(bool)
    for p in chosen:
        if p.dihedral.measure:
            score = kept[p.name].score
            flags[p.dihedral.measure] = np.where(np.isfinite(score), score,
                                                 np.nan).astype(np.float32)
    parts = []
    for p in chosen:
        name = p.dihedral_name
        sel = kept[p.name].hit & (flags[f"{name}_counterpart"].to_numpy() >= 0)
        if sel.any():
            parts.append(pd.DataFrame({
                "query_row": ctx.q_rows[sel],
                "reference_row": flags[f"{name}_counterpart"].to_numpy()[sel],
                "variant": flags[f"{name}_variant"].to_numpy()[sel], "decides": True}))
    return parts


def _hash_distances(by_row: pd.DataFrame, qr: np.ndarray, rr: np.ndarray):
    """d_p and d_d of pairs of manifest rows (-1 where a side has no hash)."""
    dp = np.full(qr.size, -1, np.int16)
    dd = np.full(qr.size, -1, np.int16)
    if "phash" in by_row:
        hp_q, hp_r = by_row["phash"].reindex(qr), by_row["phash"].reindex(rr)
        hd_q, hd_r = by_row["dhash"].reindex(qr), by_row["dhash"].reindex(rr)
        okh = (hp_q.notna().to_numpy() & hp_r.notna().to_numpy() & hd_q.notna().to_numpy()
               & hd_r.notna().to_numpy())
        if okh.any():
            dp[okh] = hamming_distance(hp_q.to_numpy()[okh], hp_r.to_numpy()[okh])
            dd[okh] = hamming_distance(hd_q.to_numpy()[okh], hd_r.to_numpy()[okh])
    return dp, dd


def cap_pairs(pairs: pd.DataFrame, max_per_query: int) -> tuple[pd.DataFrame, dict]:
    """The pairs listed (and measured) per query row, and the exact counts behind them.

    Rule: every pair that decides a rule for its query (``decides``: a flagged query's
    counterpart under a predicate, a counterpart rule's chosen candidate, a dihedral match)
    is kept; the others follow in order of ρ found by the search (highest first), then
    ``d_p + d_d`` (lowest first), then reference row, until the query has ``max_per_query``
    pairs. Counts of pairs and of affected rows never depend on it: they come from the search.

    Parameters
    ----------
    pairs : DataFrame
        ``query_row, reference_row, variant, decides, search_rho, d_sum`` (one line per pair).
    max_per_query : int

    Returns
    -------
    listed : DataFrame
        The kept pairs, sorted by query row, reference row, variant.
    counts : dict
        ``pairs_total``, ``pairs_listed``, ``max_pairs_per_query``, ``query_rows_capped`` and
        the ``rule``.
    """
    if max_per_query < 1:
        raise InputError(f"max_pairs_per_query must be at least 1; got {max_per_query}")
    order = pairs.assign(_rho=-pairs["search_rho"].fillna(-np.inf),
                         _d=pairs["d_sum"].fillna(999)).sort_values(
        ["query_row", "decides", "_rho", "_d", "reference_row", "variant"],
        ascending=[True, False, True, True, True, True], kind="stable")
    rank = order.groupby("query_row", sort=False).cumcount().to_numpy()
    keep = order["decides"].to_numpy(bool) | (rank < max_per_query)
    listed = (order[keep].drop(columns=["_rho", "_d"])
              .sort_values(["query_row", "reference_row", "variant"], kind="stable")
              .reset_index(drop=True))
    per_query = order.groupby("query_row", sort=False).size()
    kept = listed.groupby("query_row", sort=False).size().reindex(per_query.index)
    counts = {"pairs_total": len(pairs), "pairs_listed": len(listed),
              "max_pairs_per_query": int(max_per_query),
              "query_rows_capped": int((kept < per_query).sum()),
              "rule": ("per query row: every pair deciding a rule, then the others by ρ from "
                       "the search (highest first), d_p + d_d (lowest first), reference row; "
                       "ρ, SSIM and hash distances are measured on the listed pairs only")}
    return listed, counts


def _expand_references(allp: pd.DataFrame, members, r_rows: np.ndarray,
                       max_per_query: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Pairs of one row per file expanded to the reference rows of each file: all of a
    file's rows count (returned per pair), but only its first ``max_per_query + 1`` can be
    listed (its later rows rank after them: same ρ and distances, higher row), so only
    those are kept."""
    reps, mult, starts, order = members
    at = np.searchsorted(reps, allp["reference_row"].to_numpy(np.int64))
    m = mult[at]
    k = np.minimum(m, max_per_query + 1)
    idx = np.repeat(np.arange(len(allp)), k)
    offset = np.arange(int(k.sum())) - np.repeat(np.cumsum(k) - k, k)
    out = allp.iloc[idx].reset_index(drop=True)
    out["reference_row"] = r_rows[order[starts[at][idx] + offset]]
    out.loc[offset > 0, "decides"] = False  # a rule's counterpart is the file's first row
    return out, m


def _expand_queries(pairs: pd.DataFrame, members, q_rows: np.ndarray,
                    paths: pd.Series) -> pd.DataFrame:
    """The listed pairs of one query row per file repeated for every query row of the file."""
    reps, mult, starts, order = members
    at = np.searchsorted(reps, pairs["query_row"].to_numpy(np.int64))
    m = mult[at]
    idx = np.repeat(np.arange(len(pairs)), m)
    offset = np.arange(int(m.sum())) - np.repeat(np.cumsum(m) - m, m)
    out = pairs.iloc[idx].reset_index(drop=True)
    qr = q_rows[order[starts[at][idx] + offset]]
    out["query_row"] = qr
    out["query_path"] = paths.reindex(qr).to_numpy()
    return out.sort_values(["query_row", "reference_row", "variant"],
                           kind="stable").reset_index(drop=True)


def _row_counts(allp: pd.DataFrame, per_pair: np.ndarray, listed: pd.DataFrame, members,
                counts: dict) -> dict:
    """:func:`cap_pairs`'s counts of every row from those of one query row per file:
    ``per_pair`` reference rows behind each pair of ``allp``."""
    reps, mult, _, _ = members
    total = pd.Series(per_pair).groupby(allp["query_row"].to_numpy()).sum()
    kept = listed.groupby("query_row").size().reindex(total.index).fillna(0).to_numpy()
    qm = mult[np.searchsorted(reps, total.index.to_numpy(np.int64))]
    return {**counts, "pairs_total": int((total.to_numpy() * qm).sum()),
            "pairs_listed": int((kept * qm).sum()),
            "query_rows_capped": int(((kept < total.to_numpy()) * qm).sum())}


#: columns of the pair table, in order
PAIR_COLUMNS = ["query_row", "query_path", "reference_row", "reference_path", "variant", "d_p",
                "d_d", "rho", "ssim", "rules", "counterpart_rules", "boundary", "thumb_size",
                "interpolation", "mode", "tau", "radius"]


def _pair_table(ctx: BoundaryContext, parts: list, flags: pd.DataFrame, predicates, *,
                ssim: bool, max_ssim_pairs: int, max_per_query: int, chunk: int = 2048,
                expand=None) -> pd.DataFrame:
    """The pair table of one boundary: the pairs found, capped per query row
    (:func:`cap_pairs`), with their distances, ρ, SSIM and the rules they satisfy."""
    notes = ctx.notes
    if not parts:
        notes["pairs"] = {"pairs_total": 0, "pairs_listed": 0,
                          "max_pairs_per_query": int(max_per_query), "query_rows_capped": 0}
        return pd.DataFrame(columns=PAIR_COLUMNS)
    allp = _merge_pairs(parts)
    by_row = ctx.rows.set_index("row")
    if expand is not None:  # one row per file and side: the reference rows of each file
        q_members, q_all, r_members, r_all = expand
        rep_pairs = allp[["query_row"]]
        allp, per_pair = _expand_references(allp, r_members, r_all, max_per_query)
    # hash distances (plain pairs; dihedral pairs keep the plain-image distances too)
    dp, dd = _hash_distances(by_row, allp["query_row"].to_numpy(np.int64),
                             allp["reference_row"].to_numpy(np.int64))
    allp["d_sum"] = np.where((dp >= 0) & (dd >= 0), dp.astype(np.int64) + dd, np.nan)
    pairs, counts = cap_pairs(allp, max_per_query)
    if expand is not None:
        counts = _row_counts(rep_pairs, per_pair, pairs, q_members, counts)
    notes["pairs"] = counts
    del allp
    pairs = _with_distances(pairs.drop(columns=["decides", "search_rho", "d_sum"]), by_row)
    rho, ss = _thumbnail_measures(pairs, by_row, ctx.read, ssim, max_ssim_pairs, notes, chunk)
    pairs["rho"] = rho
    pairs["ssim"] = ss
    pairs["rules"] = _rule_tags(pairs, predicates, ctx.settings)
    pairs["counterpart_rules"] = _counterpart_tags(pairs, flags, predicates)
    pairs["boundary"] = ctx.boundary.name
    for key in ("thumb_size", "interpolation", "mode"):
        pairs[key] = ctx.geometry.get(key)
    pairs["tau"] = ctx.tau
    pairs["radius"] = ctx.radius
    if expand is not None:
        pairs = _expand_queries(pairs, q_members, q_all, by_row["path"])
    return pairs[PAIR_COLUMNS]


def _merge_pairs(parts: list) -> pd.DataFrame:
    """One line per (query row, reference row, variant): whether any part says it decides a
    rule, and the highest ρ a search found for it."""
    allp = pd.concat(parts, ignore_index=True)
    allp["decides"] = allp["decides"].fillna(False).astype(bool) if "decides" in allp \
        else False
    if "search_rho" not in allp:
        allp["search_rho"] = np.nan
    return (allp.groupby(["query_row", "reference_row", "variant"], sort=True)
            .agg(decides=("decides", "max"), search_rho=("search_rho", "max")).reset_index())


def _with_distances(pairs: pd.DataFrame, by_row: pd.DataFrame) -> pd.DataFrame:
    """The pairs with their paths and hash distances (``<NA>`` where a row has no hash)."""
    qr = pairs["query_row"].to_numpy(np.int64)
    rr = pairs["reference_row"].to_numpy(np.int64)
    dp, dd = _hash_distances(by_row, qr, rr)
    pairs["query_path"] = by_row["path"].reindex(qr).to_numpy()
    pairs["reference_path"] = by_row["path"].reindex(rr).to_numpy()
    pairs["d_p"] = pd.array(np.where(dp >= 0, dp, 0), dtype="Int16")
    pairs.loc[dp < 0, "d_p"] = pd.NA
    pairs["d_d"] = pd.array(np.where(dd >= 0, dd, 0), dtype="Int16")
    pairs.loc[dd < 0, "d_d"] = pd.NA
    return pairs


def _thumbnail_measures(pairs: pd.DataFrame, by_row: pd.DataFrame, thumbs, ssim: bool,
                        max_ssim_pairs: int, notes: dict, chunk: int):
    """ρ and SSIM of each pair on the plain thumbnails (a dihedral pair's reference
    transformed by its variant), read and measured a chunk of pairs at a time."""
    qr = pairs["query_row"].to_numpy(np.int64)
    rr = pairs["reference_row"].to_numpy(np.int64)
    thumb_index = (pd.to_numeric(by_row["thumb_index"], errors="coerce")
                   if "thumb_index" in by_row else pd.Series(-1, index=by_row.index))
    okt = (thumb_index.reindex(qr).fillna(-1).to_numpy() >= 0) & \
        (thumb_index.reindex(rr).fillna(-1).to_numpy() >= 0)
    rho = np.full(len(pairs), np.nan, np.float32)
    ss = np.full(len(pairs), np.nan, np.float64)
    sel = np.flatnonzero(okt)
    with_ssim = sel[:max_ssim_pairs] if ssim else sel[:0]
    variants = pairs["variant"].to_numpy()
    for c0 in range(0, sel.size, chunk):
        idx = sel[c0:c0 + chunk]
        qa = np.asarray(thumbs(qr[idx]))
        ra = np.asarray(thumbs(rr[idx]))
        for v in np.unique(variants[idx]):
            m = variants[idx] == v
            rv = ra[m] if v == "identity" else dih.apply_array(ra[m], v)
            pos = np.arange(int(m.sum()))
            rho[idx[m]] = pair_rho(qa[m], rv, pos, pos)
            sm = np.isin(idx[m], with_ssim)
            if sm.any():
                ss[idx[m][sm]] = ssim_pairs(qa[m][sm], rv[sm])
    if ssim and okt.sum() > max_ssim_pairs:
        notes["ssim"] = f"SSIM computed on the first {max_ssim_pairs} pairs only"
    return rho, ss


def _joined(text: np.ndarray, tag: str, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, np.where(text == "", tag, text + ";" + tag), text)


def _rule_tags(pairs: pd.DataFrame, predicates, settings: Settings) -> np.ndarray:
    """Per pair, the tags of the pair rules it satisfies (plain pairs under each predicate's
    pair rule, transformed pairs under its dihedral variant's), ``;``-joined."""
    ident = (pairs["variant"] == "identity").to_numpy()
    m = PairMeasures(d_p=pairs["d_p"].fillna(99).to_numpy(int),
                     d_d=pairs["d_d"].fillna(99).to_numpy(int),
                     has_hash=pairs["d_p"].notna().to_numpy(), rho=pairs["rho"].to_numpy())
    tags = [(p.pair_rule.tag, ident & p.pair_rule.test(m, settings))
            for p in predicates if p.pair_rule is not None]
    tags += [(p.dihedral.pair_tag, ~ident & p.pair_rule.test(m, settings))
             for p in predicates
             if p.pair_rule is not None and p.dihedral is not None and p.dihedral.pair_tag]
    text = np.full(len(pairs), "", object)
    for tag, mask in tags:
        text = _joined(text, tag, mask)
    return text


def _counterpart_tags(pairs: pd.DataFrame, flags: pd.DataFrame, predicates) -> np.ndarray:
    """Per plain pair, the counterpart rules it decides for its query (``;``-joined)."""
    qr = pairs["query_row"].to_numpy(np.int64)
    rr = pairs["reference_row"].to_numpy(np.int64)
    ident = (pairs["variant"] == "identity").to_numpy()
    fl = flags.set_index("row")
    text = np.full(len(pairs), "", object)
    for p in predicates:
        col = f"{p.name}_counterpart"
        if p.counterpart_rule is None or col not in fl:
            continue
        text = _joined(text, p.counterpart_rule, (fl[col].reindex(qr).to_numpy() == rr) & ident)
    return text
