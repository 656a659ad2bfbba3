"""What the near-duplicate predicates of one boundary share (METHODS §2.1–2.2).

:class:`BoundaryContext` holds the boundary's two sides, which of their rows have the features a
predicate needs, and the searches several predicates read: one hash search, one NCC search and
the exact-pHash candidates with their ρ. Each search runs on first use and is kept, so however
many predicates read it, it runs once per boundary. The pairs a search finds and its notes are
collected on the context for the pair table and the records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary
from splitscope.relations.hashes import HashSearch, hash_search
from splitscope.relations.identity import side
from splitscope.relations.ncc import ncc_search, pair_rho
from splitscope.relations.ncc_core import ThumbnailRows

#: the feature a predicate needs when it reads thumbnails (the scan's ``thumb_index``)
THUMBNAIL = "thumbnail"
#: the features of the hash rules
HASHES = ("phash", "dhash")
#: what the NCC search reports about its own work (kept in the notes)
_SEARCH_NOTES = ("search", "index", "cell_side", "rank", "coordinates", "margin", "clusters",
                 "visited_share", "scored_pairs", "flops", "brute_flops", "partitions")


def valid_rows(df: pd.DataFrame, needs: Sequence[str]) -> np.ndarray:
    """Per row of ``df``, whether it has every feature in ``needs``: a non-missing value of
    each named column, or a thumbnail for :data:`THUMBNAIL`; False where a column is absent."""
    ok = np.ones(len(df), bool)
    for need in needs:
        if need == THUMBNAIL:
            if "thumb_index" not in df:
                return np.zeros(len(df), bool)
            ok &= (pd.to_numeric(df["thumb_index"], errors="coerce").fillna(-1) >= 0
                   ).to_numpy(bool)
        elif need not in df:
            return np.zeros(len(df), bool)
        else:
            ok &= df[need].notna().to_numpy(bool)
    return ok


def positions(sorted_rows: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions of ``rows`` in the ascending array ``sorted_rows`` (-1 when absent)."""
    if sorted_rows.size == 0:
        return np.full(np.asarray(rows).size, -1, np.int64)
    pos = np.searchsorted(sorted_rows, rows)
    pos_c = np.minimum(pos, sorted_rows.size - 1)
    return np.where(sorted_rows[pos_c] == rows, pos_c, -1).astype(np.int64)


def exclude_positions(q_rows: np.ndarray, r_rows: np.ndarray) -> np.ndarray:
    """Per query, the reference position holding the same manifest row (-1 when none): on a
    boundary of a population with itself a row is never its own counterpart."""
    return positions(r_rows, q_rows)


def recorded_flat(df: pd.DataFrame, has_thumb: np.ndarray) -> np.ndarray | None:
    """The scan's ``flat`` of the rows with a thumbnail (computed from that thumbnail), or
    None when the table lacks it for any of them (the search then finds it itself)."""
    if "flat" not in df:
        return None
    flat = df["flat"].to_numpy()[has_thumb]
    if pd.isna(flat).any():
        return None
    return flat.astype(bool)


def unassessed(n: int):
    """A flag column of ``n`` rows, every one not assessed (``<NA>``)."""
    return pd.array([pd.NA] * n, dtype="boolean")


def to_rows(ids: np.ndarray, found: np.ndarray) -> np.ndarray:
    """Positions ``found`` in ``ids`` as those manifest rows (-1 stays -1)."""
    return np.where(found >= 0, ids[np.maximum(found, 0)] if ids.size else -1, -1)


@dataclass(frozen=True)
class Settings:
    """The audit's search parameters that rules, pair tests and record parameters read."""

    tau: float
    radius: int
    geometry: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NCCFound:
    """The NCC search over the rows with thumbnails: per query with a thumbnail its best ρ,
    best reference (position among the reference rows with thumbnails, -1 when none) and
    flatness."""

    best_rho: np.ndarray
    best_index: np.ndarray
    flat: np.ndarray


@dataclass(frozen=True)
class Candidates:
    """Exact-pHash candidate pairs (d_p = 0) whose two rows have thumbnails, with their ρ."""

    query: np.ndarray
    reference: np.ndarray
    rho: np.ndarray


class BoundaryContext:
    """The near-duplicate predicates' view of one boundary, and the work they share.

    Parameters
    ----------
    rows : DataFrame
        ``Scan.rows()``: manifest joined with features.
    thumbs : callable
        ``thumbs(row_ids) -> ndarray (n, S, S) uint8`` (``Scan.thumbs``).
    boundary : Boundary
    tau, radius, geometry, workers, block, search, searcher
        As :func:`splitscope.relations.near_duplicate.near_duplicates_rows`.
    """

    def __init__(self, rows: pd.DataFrame, thumbs, boundary: Boundary, *, tau: float,
                 radius: int, geometry: dict, workers: int | None = None, block: int = 2048,
                 search: str = "indexed", searcher=None):
        self.rows, self.read, self.boundary = rows, thumbs, boundary
        self.tau, self.radius, self.geometry = tau, radius, geometry
        self.workers, self.block, self.search, self.searcher = workers, block, search, searcher
        self.q = side(rows, boundary.query)
        self.r = self.q if boundary.within else side(rows, boundary.reference)
        self.q_rows = self.q["row"].to_numpy(np.int64)
        self.r_rows = self.r["row"].to_numpy(np.int64)
        #: pairs the searches found, for the pair table (``query_row, reference_row, variant``)
        self.pair_parts: list[pd.DataFrame] = []
        #: what the searches report (kept in the records' notes)
        self.notes: dict = {}
        self._has: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self.q)

    @property
    def settings(self) -> Settings:
        return Settings(self.tau, self.radius, self.geometry)

    def has(self, needs: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(query rows, reference rows) that have every feature in ``needs`` (masks)."""
        key = tuple(needs)
        if key not in self._has:
            q = valid_rows(self.q, key)
            self._has[key] = (q, q if self.boundary.within else valid_rows(self.r, key))
        return self._has[key]

    def exclude(self, q_rows: np.ndarray, r_rows: np.ndarray) -> np.ndarray | None:
        """The search's ``exclude`` for these query and reference rows (within a population
        only)."""
        return exclude_positions(q_rows, r_rows) if self.boundary.within else None

    def pairs(self, query_rows, reference_rows, **columns) -> None:
        """Add pairs of manifest rows (plain orientation) to the pair table's candidates."""
        self.pair_parts.append(pd.DataFrame({"query_row": query_rows,
                                             "reference_row": reference_rows,
                                             "variant": "identity", **columns}))

    # ---- hashes -----------------------------------------------------------------------------
    @cached_property
    def hash_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(query rows, reference rows) with both hashes, as manifest rows."""
        qh, rh = self.has(HASHES)
        return self.q_rows[qh], self.r_rows[rh]

    @cached_property
    def hashes(self) -> HashSearch:
        """One pHash/dHash search of the query rows with hashes against the reference rows
        with hashes (positions are among those rows); its pairs join the pair table."""
        qh, rh = self.has(HASHES)
        qh_rows, rh_rows = self.hash_rows
        hs = hash_search(self.q.loc[qh, "phash"], self.q.loc[qh, "dhash"],
                         self.r.loc[rh, "phash"], self.r.loc[rh, "dhash"], radius=self.radius,
                         exclude=self.exclude(qh_rows, rh_rows), workers=self.workers)
        if hs.pairs_truncated:
            self.notes["hash_pairs"] = (f"{hs.n_pairs_total} hash pairs met the pair condition;"
                                        f" only {len(hs.pairs)} were stored (candidate rules "
                                        "partial)")
        if len(hs.pairs):
            self.pairs(qh_rows[hs.pairs["query"].to_numpy()],
                       rh_rows[hs.pairs["reference"].to_numpy()])
        return hs

    @cached_property
    def hash_columns(self) -> dict:
        """The hash search's per-row columns: the dHash minimum's reference row and the four
        minima (``<NA>`` without hashes)."""
        hs, n = self.hashes, len(self)
        qpos = np.flatnonzero(self.has(HASHES)[0])
        cpd = np.full(n, -1, np.int64)
        cpd[qpos] = to_rows(self.hash_rows[1], hs.ref_d)
        out = {"hash_screen_dhash_counterpart": cpd}
        for key, vals in (("d_p_min", hs.d_p), ("d_d_min", hs.d_d), ("d_joint_min", hs.d_joint),
                          ("d_sum_min", hs.d_sum)):
            full = pd.array([pd.NA] * n, dtype="Int16")
            ok = vals <= 128
            full[qpos[ok]] = vals[ok]
            out[key] = full
        return out

    # ---- thumbnails and NCC -----------------------------------------------------------------
    @cached_property
    def thumb_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(query rows, reference rows) with thumbnails, as manifest rows."""
        qt, rt = self.has((THUMBNAIL,))
        return self.q_rows[qt], self.r_rows[rt]

    @cached_property
    def thumbnails(self) -> tuple[ThumbnailRows | None, ThumbnailRows | None]:
        """The two sides' thumbnails (rows with one), read block by block from the scan's
        store, never the whole population at once; None for a side without any."""
        qt, rt = self.has((THUMBNAIL,))
        qt_rows, rt_rows = self.thumb_rows
        size = int(self.geometry.get("thumb_size") or 96)
        q = ThumbnailRows(self.read, qt_rows, size, recorded_flat(self.q, qt)) \
            if qt_rows.size else None
        if self.boundary.within:
            return q, q if rt_rows.size else None
        r = ThumbnailRows(self.read, rt_rows, size, recorded_flat(self.r, rt)) \
            if rt_rows.size else None
        return q, r

    @cached_property
    def ncc(self) -> NCCFound:
        """One NCC search of the query rows with thumbnails against the reference rows with
        thumbnails; its pairs with ρ ≥ τ join the pair table."""
        qthumbs, rthumbs = self.thumbnails
        qt_rows, rt_rows = self.thumb_rows
        if qthumbs is None or rthumbs is None:
            n = qt_rows.size
            if rt_rows.size == 0:
                self.notes["ncc"] = "no reference row has a thumbnail"
            return NCCFound(np.full(n, np.nan, np.float32), np.full(n, -1, np.int64),
                            np.zeros(n, bool))
        res = (self.searcher or ncc_search)(qthumbs, rthumbs, tau=self.tau,
                                            exclude=self.exclude(qt_rows, rt_rows),
                                            block=self.block, method=self.search,
                                            workers=self.workers)
        self.notes["ncc_search"] = {k: res.params[k] for k in _SEARCH_NOTES if k in res.params}
        if res.params.get("pairs_truncated"):
            self.notes["ncc_pairs"] = (f"{res.params['pairs_total']} pairs reached tau; only "
                                       f"{len(res.pairs)} were stored in the pair table")
        if len(res.pairs):
            self.pairs(qt_rows[res.pairs["query"].to_numpy(np.int64)],
                       rt_rows[res.pairs["reference"].to_numpy(np.int64)],
                       search_rho=res.pairs["rho"].to_numpy(np.float32))
        return NCCFound(res.best_rho, res.best_index, res.query_flat)

    @cached_property
    def candidates(self) -> Candidates:
        """The exact-pHash pairs of the hash search whose two rows have thumbnails, with ρ
        measured on those thumbnails; they join the pair table."""
        hs = self.hashes
        qh_rows, rh_rows = self.hash_rows
        qt_rows, rt_rows = self.thumb_rows
        cand = hs.pairs[hs.pairs["d_p"] == 0]
        cand_q = qh_rows[cand["query"].to_numpy(np.int64)]
        cand_r = rh_rows[cand["reference"].to_numpy(np.int64)]
        t_q, t_r = positions(qt_rows, cand_q), positions(rt_rows, cand_r)
        keep = (t_q >= 0) & (t_r >= 0)
        qthumbs, rthumbs = self.thumbnails
        rho = pair_rho(qthumbs, rthumbs, t_q[keep], t_r[keep]) \
            if keep.any() and qthumbs is not None else np.empty(0, np.float32)
        found = Candidates(cand_q[keep], cand_r[keep], rho)
        if found.query.size:
            self.pairs(found.query, found.reference)
        return found
