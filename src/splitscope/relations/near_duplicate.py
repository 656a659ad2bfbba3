"""Near-duplicate relations of one boundary (METHODS §2.1–2.3, §2.8): hash rules, NCC with its
counterpart rules, SSIM on the selected pairs, optionally the dihedral variants.

:func:`near_duplicates` runs every predicate on one boundary and returns per-query-row flags
(keyed by the manifest ``row``) and one pair table with every measurement. Query rows without
hashes or without a thumbnail (unreadable files) are *not assessed* for the predicates that
need them and stay in the denominator; reference rows without them cannot be counterparts.

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
from splitscope.relations.hashes import DEFAULT_RADIUS, RULES, hamming_distance, hash_search
from splitscope.relations.identity import side
from splitscope.relations.ncc import (
    DEFAULT_TAU,
    SWEEP,
    any_candidate,
    first_candidate,
    ncc_search,
    ncc_sweep,
    pair_rho,
)
from splitscope.relations.ncc_core import ThumbnailRows
from splitscope.relations.predicates import (
    NCC_ANY_CANDIDATE,
    NCC_FIRST_CANDIDATE,
    NCC_NEAREST,
    NCC_NEAREST_DIHEDRAL,
)
from splitscope.relations.ssim import ssim_pairs

HASH_PREDICATES = tuple(f"hash_{r}" for r in RULES)
NCC_PREDICATES = (NCC_NEAREST, NCC_FIRST_CANDIDATE, NCC_ANY_CANDIDATE)
DIHEDRAL_PREDICATES = tuple(f"{p}_dihedral" for p in (*HASH_PREDICATES, NCC_NEAREST))
#: Default bound on the pairs listed and measured per query row (see :func:`cap_pairs`).
MAX_PAIRS_PER_QUERY = 5


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
        return [c for c in self.flags.columns if c in (*HASH_PREDICATES, *NCC_PREDICATES,
                                                      *DIHEDRAL_PREDICATES)]

    def affected_rows(self, predicate: str) -> np.ndarray:
        col = self.flags[predicate]
        return self.flags.loc[col.fillna(False).astype(bool), "row"].to_numpy(np.int64)


def _valid_hash(df: pd.DataFrame) -> np.ndarray:
    if "phash" not in df or "dhash" not in df:
        return np.zeros(len(df), bool)
    return (df["phash"].notna() & df["dhash"].notna()).to_numpy(bool)


def _valid_thumb(df: pd.DataFrame) -> np.ndarray:
    if "thumb_index" not in df:
        return np.zeros(len(df), bool)
    return (pd.to_numeric(df["thumb_index"], errors="coerce").fillna(-1) >= 0).to_numpy(bool)


def _recorded_flat(df: pd.DataFrame, has_thumb: np.ndarray) -> np.ndarray | None:
    """The scan's ``flat`` of the rows with a thumbnail (computed from that thumbnail), or
    None when the table lacks it for any of them (the search then finds it itself)."""
    if "flat" not in df:
        return None
    flat = df["flat"].to_numpy()[has_thumb]
    if pd.isna(flat).any():
        return None
    return flat.astype(bool)


def _exclude_positions(q_rows: np.ndarray, r_rows: np.ndarray) -> np.ndarray:
    """Per query, the reference position holding the same manifest row (-1 when none)."""
    return _positions(r_rows, q_rows)


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
    key = pd.Series(np.where(_valid_thumb(side_rows), "t", "-"), index=side_rows.index)
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


def near_duplicates(rows: pd.DataFrame, thumbs, boundary: Boundary, **options) -> NearDuplicates:
    """Run the hash rules and NCC (with counterpart rules) on one boundary.

    Query rows with the same content (:func:`content_representatives`: byte copies) and
    reference rows that name the same file under the same path (a list entry repeated,
    :func:`representatives`) are measured once: the search runs on one row per content and
    per file, and the flags, counterparts, pair table, sweep and counts are expanded to every
    row, equal to those of measuring each row (every rule breaks ties by the lowest
    reference row, which is each file's first). So n query copies of one image against m
    reference copies cost m, not n·m. Reference copies in distinct files stay apart: the
    *first candidate* rule picks among them by path. Options as
    :func:`near_duplicates_rows`.
    """
    if boundary.within:
        return near_duplicates_rows(rows, thumbs, boundary, **options)
    q, r = side(rows, boundary.query), side(rows, boundary.reference)
    q_rep, r_rep = content_representatives(q), representatives(r)
    q_rows, r_rows = q["row"].to_numpy(np.int64), r["row"].to_numpy(np.int64)
    if (q_rep == q_rows).all() and (r_rep == r_rows).all():
        return near_duplicates_rows(rows, thumbs, boundary, **options)
    reduced = Boundary(Population(boundary.query.name, np.unique(q_rep)),
                       Population(boundary.reference.name, np.unique(r_rep)))
    q_members, r_members = _members(q_rep), _members(r_rep)
    nd = near_duplicates_rows(rows, thumbs, reduced,
                              expand=(q_members, q_rows, r_members, r_rows), **options)
    # every query row takes its representative's flags (counterparts are reference rows
    # that are each file's first, as the row-level search chooses them)
    flags = nd.flags.set_index("row").loc[q_rep].reset_index(drop=True)
    flags.insert(0, "row", q_rows)
    flags["path"] = q["path"].to_numpy()
    assessed = {name: int(flags[name].notna().sum()) for name in nd.assessed}
    qt = _valid_thumb(q)
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


def near_duplicates_rows(rows: pd.DataFrame, thumbs, boundary: Boundary, *,
                         tau: float = DEFAULT_TAU, radius: int = DEFAULT_RADIUS,
                         geometry: dict | None = None, dihedral: bool = False,
                         ssim: bool = True, max_ssim_pairs: int = 200_000,
                         workers: int | None = None, block: int = 2048,
                         max_pairs_per_query: int = MAX_PAIRS_PER_QUERY,
                         search: str = "pruned", searcher=None,
                         expand=None) -> NearDuplicates:
    """Run the hash rules and NCC (with counterpart rules) on every row of one boundary.

    Parameters
    ----------
    rows : DataFrame
        ``Scan.rows()``: manifest joined with features (``phash``, ``dhash``, ``thumb_index``).
    thumbs : callable
        ``thumbs(row_ids) -> ndarray (n, S, S) uint8`` for manifest rows that have thumbnails
        (``Scan.thumbs``).
    boundary : Boundary
    tau, radius : float, int
        NCC threshold and hash radius k.
    geometry : dict
        Thumbnail geometry (``thumb_size``, ``interpolation``, ``mode``), recorded with every
        NCC/SSIM predicate and in the pair table.
    dihedral : bool
        Also match each query against the eight dihedral variants of the references
        (needs the image files; see :mod:`splitscope.relations.dihedral`).
    ssim : bool
        SSIM on the selected pairs (the pair table), up to ``max_ssim_pairs``.
    max_pairs_per_query : int
        Pairs listed in the pair table, and measured there (ρ, SSIM, hash distances), per query
        row (see :func:`cap_pairs`); the pair and row counts stay exact and are recorded in
        ``notes["pairs"]``.
    search : {"pruned", "brute"}
        NCC search method (:func:`splitscope.relations.ncc.ncc_search`); both give the same
        result.
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
    geometry = dict(geometry or {})
    q = side(rows, boundary.query)
    r = q if boundary.within else side(rows, boundary.reference)
    q_rows = q["row"].to_numpy(np.int64)
    flags = pd.DataFrame({"row": q_rows, "path": q["path"].to_numpy()})
    pair_parts: list[pd.DataFrame] = []
    assessed: dict[str, int] = {}
    notes: dict[str, str] = {}

    # ---- hash rules -------------------------------------------------------------------------
    qh, rh = _valid_hash(q), _valid_hash(r)
    qh_rows, rh_rows = q_rows[qh], r["row"].to_numpy(np.int64)[rh]
    exclude = _exclude_positions(qh_rows, rh_rows) if boundary.within else None
    hs = hash_search(q.loc[qh, "phash"], q.loc[qh, "dhash"], r.loc[rh, "phash"],
                     r.loc[rh, "dhash"], radius=radius, exclude=exclude, workers=workers)
    qpos = np.flatnonzero(qh)
    for rule in RULES:
        name = f"hash_{rule}"
        col = pd.array([pd.NA] * len(q), dtype="boolean")
        col[qpos] = hs.flags(rule)
        flags[name] = col
        assessed[name] = int(qh.sum())
        cp = np.full(len(q), -1, np.int64)
        ref = hs.counterpart(rule)
        cp[qpos] = np.where(ref >= 0, rh_rows[np.maximum(ref, 0)], -1)
        flags[f"{name}_counterpart"] = cp
    cpd = np.full(len(q), -1, np.int64)
    cpd[qpos] = np.where(hs.ref_d >= 0, rh_rows[np.maximum(hs.ref_d, 0)] if rh_rows.size else -1,
                         -1)
    flags["hash_screen_dhash_counterpart"] = cpd  # the dHash minimum's reference
    if hs.pairs_truncated:
        notes["hash_pairs"] = (f"{hs.n_pairs_total} hash pairs met the pair condition; only "
                               f"{len(hs.pairs)} were stored (candidate rules partial)")
    d = {"d_p_min": hs.d_p, "d_d_min": hs.d_d, "d_joint_min": hs.d_joint, "d_sum_min": hs.d_sum}
    for key, vals in d.items():
        full = pd.array([pd.NA] * len(q), dtype="Int16")
        ok = vals <= 128
        full[qpos[ok]] = vals[ok]
        flags[key] = full
    if len(hs.pairs):
        pair_parts.append(pd.DataFrame({
            "query_row": qh_rows[hs.pairs["query"].to_numpy()],
            "reference_row": rh_rows[hs.pairs["reference"].to_numpy()],
            "variant": "identity"}))

    # ---- NCC ----------------------------------------------------------------------------------
    qt, rt = _valid_thumb(q), _valid_thumb(r)
    qt_rows, rt_rows = q_rows[qt], r["row"].to_numpy(np.int64)[rt]
    # read block by block from the thumbnail store, never the whole population at once
    size = int(geometry.get("thumb_size") or 96)
    qthumbs = ThumbnailRows(thumbs, qt_rows, size, _recorded_flat(q, qt)) \
        if qt_rows.size else None
    rthumbs = (qthumbs if boundary.within else
               ThumbnailRows(thumbs, rt_rows, size, _recorded_flat(r, rt))) \
        if rt_rows.size else None
    tpos = np.flatnonzero(qt)
    if qthumbs is not None and rthumbs is not None:
        exclude = _exclude_positions(qt_rows, rt_rows) if boundary.within else None
        # the local search takes this run's workers; a cluster's searcher has its own
        local = {} if searcher is not None else {"workers": workers}
        nres = (searcher or ncc_search)(qthumbs, rthumbs, tau=tau, exclude=exclude,
                                        block=block, method=search, **local)
        best_rho, best_idx, q_flat = nres.best_rho, nres.best_index, nres.query_flat
        ncc_pairs = nres.pairs
        notes["ncc_search"] = {k: nres.params[k] for k in (
            "search", "cell_side", "rank", "coordinates", "margin", "scored_pairs", "flops", "brute_flops", "partitions")
            if k in nres.params}
        if nres.params.get("pairs_truncated"):
            notes["ncc_pairs"] = (f"{nres.params['pairs_total']} pairs reached tau; only "
                                  f"{len(ncc_pairs)} were stored in the pair table")
    else:
        n_qt = int(qt.sum())
        best_rho = np.full(n_qt, np.nan, np.float32)
        best_idx = np.full(n_qt, -1, np.int64)
        q_flat = np.zeros(n_qt, bool)
        ncc_pairs = pd.DataFrame({"query": [], "reference": [], "rho": []})
        if rt_rows.size == 0:
            notes["ncc"] = "no reference row has a thumbnail"
    flat_col = pd.array([pd.NA] * len(q), dtype="boolean")
    flat_col[tpos] = q_flat
    flags["flat"] = flat_col
    rho_col = np.full(len(q), np.nan, np.float32)
    rho_col[tpos] = best_rho
    flags["ncc_best_rho"] = rho_col
    cp = np.full(len(q), -1, np.int64)
    cp[tpos] = np.where(best_idx >= 0, rt_rows[np.maximum(best_idx, 0)] if rt_rows.size else -1,
                        -1)
    flags["ncc_nearest_counterpart"] = cp
    # flat queries have no defined rho: not assessed for NCC (counted apart), never flagged
    ncc_assessed = np.zeros(len(q), bool)
    ncc_assessed[tpos] = np.isfinite(best_rho)
    col = pd.array([pd.NA] * len(q), dtype="boolean")
    col[ncc_assessed] = rho_col[ncc_assessed] >= tau
    flags[NCC_NEAREST] = col
    assessed[NCC_NEAREST] = int(ncc_assessed.sum())
    sweep = ncc_sweep(rho_col[tpos], SWEEP)
    sweep["rows"] = len(q)
    if len(ncc_pairs):
        pair_parts.append(pd.DataFrame({
            "query_row": qt_rows[ncc_pairs["query"].to_numpy(np.int64)],
            "reference_row": rt_rows[ncc_pairs["reference"].to_numpy(np.int64)],
            "variant": "identity", "search_rho": ncc_pairs["rho"].to_numpy(np.float32)}))

    # ---- counterpart rules over the exact-pHash screen -----------------------------------
    cand = hs.pairs[hs.pairs["d_p"] == 0]
    cand_q = qh_rows[cand["query"].to_numpy(np.int64)]
    cand_r = rh_rows[cand["reference"].to_numpy(np.int64)]
    # keep candidates whose both sides have thumbnails
    t_q_pos = _positions(qt_rows, cand_q)
    t_r_pos = _positions(rt_rows, cand_r)
    keep = (t_q_pos >= 0) & (t_r_pos >= 0)
    cand_df = pd.DataFrame({"query": cand_q[keep], "reference": cand_r[keep]})
    if keep.any() and qthumbs is not None:
        rho = pair_rho(qthumbs, rthumbs, t_q_pos[keep], t_r_pos[keep])
    else:
        rho = np.empty(0, np.float32)
    ref_path = r.set_index("row")["path"]
    first = anyc = None
    if len(cand_df):
        # first_candidate takes paths by reference position: number the candidates
        cpos = pd.DataFrame({"query": cand_df["query"], "reference": np.arange(len(cand_df))})
        paths = ref_path.reindex(cand_df["reference"]).astype(str).to_numpy()
        first = first_candidate(cpos, paths, rho, tau)
        first["reference"] = cand_df["reference"].to_numpy()[first["reference"].to_numpy()]
        anyc = any_candidate(cand_df, rho, tau)
    for name, table in ((NCC_FIRST_CANDIDATE, first), (NCC_ANY_CANDIDATE, anyc)):
        # assessed: query rows with a hash and a thumbnail; no candidate = not flagged
        ok = qh & qt
        col = pd.array([pd.NA] * len(q), dtype="boolean")
        col[ok] = False
        cpc = np.full(len(q), -1, np.int64)
        rhoc = np.full(len(q), np.nan, np.float32)
        if table is not None and len(table):
            pos = _positions(q_rows, table["query"].to_numpy(np.int64))
            col[pos] = table["flagged"].to_numpy(bool)
            cpc[pos] = table["reference"].to_numpy(np.int64)
            rhoc[pos] = table["rho"].to_numpy(np.float32)
        flags[name] = col
        flags[f"{name}_counterpart"] = cpc
        flags[f"{name}_rho"] = rhoc
        assessed[name] = int(ok.sum())
    if len(cand_df):
        pair_parts.append(pd.DataFrame({"query_row": cand_df["query"],
                                        "reference_row": cand_df["reference"],
                                        "variant": "identity"}))
    # the pair deciding each counterpart rule, and the nearest reference of every flagged
    # query under any rule, are selected pairs (always listed and measured)
    for name in (NCC_NEAREST, *HASH_PREDICATES, NCC_FIRST_CANDIDATE, NCC_ANY_CANDIDATE):
        cpn = flags[f"{name}_counterpart"].to_numpy()
        hit = cpn >= 0  # a candidate rule's deciding pair is one of the screened candidates
        if not name.endswith("_candidate"):
            hit &= flags[name].fillna(False).to_numpy(bool)
        if hit.any():
            pair_parts.append(pd.DataFrame({"query_row": q_rows[hit], "reference_row": cpn[hit],
                                            "variant": "identity", "decides": True}))

    # ---- dihedral variants (optional) -------------------------------------------------------
    if dihedral:
        _dihedral(q, r, q_rows, qh, rh, rh_rows, qt, rt_rows, rthumbs, boundary, tau, radius,
                  geometry, flags, assessed, notes, pair_parts, workers, block)

    # ---- pair table with every measurement --------------------------------------------------
    pairs = _pair_table(pair_parts, rows, thumbs, boundary, geometry, tau, radius, flags,
                        ssim, max_ssim_pairs, notes, max_pairs_per_query, expand=expand)
    params = {"tau": tau, "radius": radius, **geometry, "dihedral": dihedral,
              "max_pairs_per_query": max_pairs_per_query, "search": search}
    return NearDuplicates(boundary, params, flags, pairs, sweep, assessed, notes)


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


def _positions(sorted_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions of ``rows`` in the ascending array ``sorted_rows`` (-1 when absent)."""
    if sorted_rows.size == 0:
        return np.full(np.asarray(rows).size, -1, np.int64)
    pos = np.searchsorted(sorted_rows, rows)
    pos_c = np.minimum(pos, sorted_rows.size - 1)
    return np.where(sorted_rows[pos_c] == rows, pos_c, -1).astype(np.int64)


def _dihedral(q, r, q_rows, qh, rh, rh_rows, qt, rt_rows, rthumbs, boundary, tau, radius,
              geometry, flags, assessed, notes, pair_parts, workers, block) -> None:
    """Match g⁻¹(query) against plain references for every non-identity variant g."""
    try:
        import splitscope.features.imaging  # noqa: F401
        have_imaging = True
    except ImportError:
        have_imaging = False
    files = q["file"].astype(str).to_numpy()
    size = int(geometry.get("thumb_size", 96))
    interp = str(geometry.get("interpolation", "bicubic"))
    n = len(q)
    best_var = {p: np.full(n, "", object) for p in DIHEDRAL_PREDICATES}
    hit = {p: np.zeros(n, bool) for p in DIHEDRAL_PREDICATES}
    best_rho = np.full(n, -np.inf, np.float32)
    best_cp = np.full(n, -1, np.int64)
    hash_cp = {p: np.full(n, -1, np.int64) for p in DIHEDRAL_PREDICATES}
    ok_any = np.zeros(n, bool)
    if not have_imaging:
        notes["dihedral"] = "splitscope.features.imaging unavailable: not assessed"
        return
    for variant in dih.NON_IDENTITY:
        feats = dih.query_side_features(files, variant, thumb_size=size, interpolation=interp)
        ok = feats["ok"]
        ok_any |= ok
        # hashes
        qsel = np.flatnonzero(ok)
        if qsel.size and rh.any():
            exclude = _exclude_positions(q_rows[qsel], rh_rows) if boundary.within else None
            hs = hash_search(feats["phash"][qsel], feats["dhash"][qsel], r.loc[rh, "phash"],
                             r.loc[rh, "dhash"], radius=radius, exclude=exclude,
                             workers=workers, collect_pairs=False)
            for rule in RULES:
                name = f"hash_{rule}_dihedral"
                f = hs.flags(rule)
                new = qsel[f & ~hit[name][qsel]]
                ref = hs.counterpart(rule)[f & ~hit[name][qsel]]
                hit[name][new] = True
                best_var[name][new] = variant
                hash_cp[name][new] = rh_rows[ref]
        # NCC
        if qsel.size and rthumbs is not None:
            exclude = _exclude_positions(q_rows[qsel], rt_rows) if boundary.within else None
            res = ncc_search(feats["thumb"][qsel], rthumbs, tau=tau, exclude=exclude,
                             block=block, collect_pairs=False, workers=workers)
            v = np.nan_to_num(res.best_rho, nan=-np.inf)
            better = v > best_rho[qsel]
            idx = qsel[better]
            best_rho[idx] = v[better]
            best_cp[idx] = rt_rows[res.best_index[better]]
            best_var[NCC_NEAREST_DIHEDRAL][idx] = variant
    name = NCC_NEAREST_DIHEDRAL
    hit[name] = best_rho >= tau
    hash_cp[name] = best_cp
    for p in DIHEDRAL_PREDICATES:
        base = p[: -len("_dihedral")]
        ok = ok_any & (qt if p.startswith("ncc") else qh)
        col = pd.array([pd.NA] * n, dtype="boolean")
        col[ok] = hit[p][ok]
        flags[p] = col
        flags[f"{p}_variant"] = np.where(hit[p], best_var[p], "")
        flags[f"{p}_counterpart"] = np.where(hit[p], hash_cp[p], -1)
        plain = flags[base].fillna(False).to_numpy(bool)
        flags[f"{p}_only"] = hit[p] & ~plain
        assessed[p] = int(ok.sum())
    rho_col = np.where(np.isfinite(best_rho), best_rho, np.nan).astype(np.float32)
    flags["ncc_best_rho_dihedral"] = rho_col
    for p in DIHEDRAL_PREDICATES:
        sel = hit[p] & (flags[f"{p}_counterpart"].to_numpy() >= 0)
        if sel.any():
            pair_parts.append(pd.DataFrame({
                "query_row": q_rows[sel],
                "reference_row": flags[f"{p}_counterpart"].to_numpy()[sel],
                "variant": flags[f"{p}_variant"].to_numpy()[sel], "decides": True}))


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


def _pair_table(parts, rows, thumbs, boundary, geometry, tau, radius, flags, ssim,
                max_ssim_pairs, notes, max_per_query, chunk: int = 2048,
                expand=None) -> pd.DataFrame:
    cols = ["query_row", "query_path", "reference_row", "reference_path", "variant", "d_p", "d_d",
            "rho", "ssim", "rules", "counterpart_rules", "boundary", "thumb_size",
            "interpolation", "mode", "tau", "radius"]
    if not parts:
        notes["pairs"] = {"pairs_total": 0, "pairs_listed": 0,
                          "max_pairs_per_query": int(max_per_query), "query_rows_capped": 0}
        return pd.DataFrame(columns=cols)
    allp = pd.concat(parts, ignore_index=True)
    allp["decides"] = allp["decides"].fillna(False).astype(bool) if "decides" in allp \
        else False
    if "search_rho" not in allp:
        allp["search_rho"] = np.nan
    allp = (allp.groupby(["query_row", "reference_row", "variant"], sort=True)
            .agg(decides=("decides", "max"), search_rho=("search_rho", "max")).reset_index())
    by_row = rows.set_index("row")
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
    dp, dd = _hash_distances(by_row, pairs["query_row"].to_numpy(np.int64),
                             pairs["reference_row"].to_numpy(np.int64))
    pairs = pairs.drop(columns=["decides", "search_rho", "d_sum"])
    qr = pairs["query_row"].to_numpy(np.int64)
    rr = pairs["reference_row"].to_numpy(np.int64)
    pairs["query_path"] = by_row["path"].reindex(qr).to_numpy()
    pairs["reference_path"] = by_row["path"].reindex(rr).to_numpy()
    ident = (pairs["variant"] == "identity").to_numpy()
    pairs["d_p"] = pd.array(np.where(dp >= 0, dp, 0), dtype="Int16")
    pairs.loc[dp < 0, "d_p"] = pd.NA
    pairs["d_d"] = pd.array(np.where(dd >= 0, dd, 0), dtype="Int16")
    pairs.loc[dd < 0, "d_d"] = pd.NA
    # rho and SSIM on the plain thumbnails (dihedral pairs: reference transformed by variant),
    # read and measured a chunk of pairs at a time
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
    pairs["rho"] = rho
    pairs["ssim"] = ss
    # rules each pair satisfies
    p_ok = pairs["d_p"].notna().to_numpy()
    dpv = pairs["d_p"].fillna(99).to_numpy(int)
    ddv = pairs["d_d"].fillna(99).to_numpy(int)
    tags = [
        ("joint", ident & p_ok & (np.maximum(dpv, ddv) <= radius)),
        ("sum", ident & p_ok & (dpv + ddv <= radius)),
        ("exact_phash", ident & p_ok & (dpv == 0)),
        ("ncc", ident & (np.nan_to_num(rho, nan=-1) >= tau)),
        ("dihedral_ncc", ~ident & (np.nan_to_num(rho, nan=-1) >= tau)),
    ]
    text = np.full(len(pairs), "", object)
    for tag, mask in tags:
        text = np.where(mask, np.where(text == "", tag, text + ";" + tag), text)
    pairs["rules"] = text
    # counterpart rules: the pair that decides each named rule for its query
    fl = flags.set_index("row")
    crules = np.full(len(pairs), "", object)
    for rule, col in (("nearest", "ncc_nearest_counterpart"),
                      ("first_candidate", "ncc_first_candidate_counterpart"),
                      ("any_candidate", "ncc_any_candidate_counterpart")):
        if col not in fl:
            continue
        decided = fl[col].reindex(qr).to_numpy() == rr
        mask = decided & ident
        crules = np.where(mask, np.where(crules == "", rule, crules + ";" + rule), crules)
    pairs["counterpart_rules"] = crules
    pairs["boundary"] = boundary.name
    pairs["thumb_size"] = geometry.get("thumb_size")
    pairs["interpolation"] = geometry.get("interpolation")
    pairs["mode"] = geometry.get("mode")
    pairs["tau"] = tau
    pairs["radius"] = radius
    if expand is not None:
        pairs = _expand_queries(pairs, q_members, q_all, by_row["path"])
    return pairs[cols]
