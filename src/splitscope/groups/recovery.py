"""Identity recovery (METHODS §3.4): give rows without a group key the group of their
counterpart in an upstream corpus that carries group ids.

Matching goes bytes first (equal SHA-256), then, for rows still unmatched, pixels (NCC ≥ τ on
the scan's thumbnails, through :func:`splitscope.relations.ncc.ncc_search`). A row inherits the
group (and frame) of its counterpart. Per-class match counts are the matcher check: a class
that cannot occur upstream must match zero rows, and a non-zero count there means the matcher
is too loose for this modality.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from splitscope.errors import InputError

__all__ = ["Recovery", "recover_from_scans", "recover_identity"]


@dataclass
class Recovery:
    """Result of :func:`recover_identity`.

    Attributes
    ----------
    mapping : DataFrame
        One line per query row: ``row``, ``path``, ``label``, ``method`` (``bytes``, ``ncc`` or
        ``none``), ``upstream_row``, ``upstream_path``, ``recovered_group``,
        ``recovered_frame``, ``rho`` (NCC of the match; 1.0 is not assumed for byte matches, it
        is ``<NA>`` there), ``candidates`` (upstream rows passing the rule), ``ambiguous`` (the
        passing upstream rows carry more than one group).
    by_class : DataFrame
        Per query label: rows, matched by bytes, matched by NCC, unmatched, and whether the
        class occurs upstream; ``check`` is ``fail`` for a class absent upstream with matches.
    summary : dict
    """

    mapping: pd.DataFrame
    by_class: pd.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)


def _need(table: pd.DataFrame, cols: Iterable[str], what: str) -> None:
    missing = [c for c in cols if c not in table.columns]
    if missing:
        raise InputError(f"{what} lacks column(s) {', '.join(missing)}; found: "
                         f"{', '.join(map(str, table.columns))}")


def recover_identity(
    query: pd.DataFrame,
    upstream: pd.DataFrame,
    *,
    query_thumbs: np.ndarray | None = None,
    upstream_thumbs: np.ndarray | None = None,
    tau: float = 0.98,
    impossible_classes: Iterable[str] | None = None,
    searcher=None,
) -> Recovery:
    """Match ``query`` rows to ``upstream`` rows and inherit the upstream group id.

    Parameters
    ----------
    query, upstream : DataFrame
        Rows with ``row``, ``path`` and ``sha256`` (the scan's ``rows()``); ``upstream`` also
        needs ``group`` (``frame`` and ``label`` are used when present). ``query.label`` feeds
        the per-class matcher check.
    query_thumbs, upstream_thumbs : ndarray, optional
        Thumbnails (n, S, S) uint8 aligned with the rows of ``query`` / ``upstream``. Without
        them only byte matching runs (recorded in ``summary["rules"]``).
    tau : float
        NCC threshold for a pixel match.
    impossible_classes : iterable of str, optional
        Query classes that cannot occur upstream. Default: the query labels absent from the
        upstream labels (when upstream has labels).
    searcher : callable, optional
        ``searcher(query_positions, upstream_positions)`` → the
        :class:`~splitscope.relations.ncc.NCCResult` of those rows' thumbnails (positions
        into ``query`` / ``upstream``), in place of the local
        :func:`~splitscope.relations.ncc.ncc_search` of the arrays (e.g. partitioned over a
        cluster, :func:`recover_from_scans`); same result.

    Returns
    -------
    Recovery
    """
    _need(query, ("row", "path", "sha256"), "query table")
    _need(upstream, ("row", "path", "sha256", "group"), "upstream table")
    if not 0 < tau <= 1:
        raise InputError(f"tau must be in (0, 1]; got {tau}")
    n = len(query)
    up = upstream.reset_index(drop=True)
    up_group = up["group"].astype("string")
    up_frame = up["frame"].astype("Int64") if "frame" in up.columns else \
        pd.Series(pd.NA, index=up.index, dtype="Int64")
    method = np.full(n, "none", dtype=object)
    match = np.full(n, -1, dtype=np.int64)  # upstream position
    rho = np.full(n, np.nan, dtype=np.float64)
    candidates = np.zeros(n, dtype=np.int64)
    ambiguous = np.zeros(n, dtype=bool)

    # 1. bytes: equal SHA-256 with an upstream row that has a group
    usable = up_group.notna().to_numpy(bool) & up["sha256"].notna().to_numpy(bool)
    up_sha = up.loc[usable, "sha256"].astype(str)
    by_sha = pd.DataFrame({"sha": up_sha.to_numpy(), "pos": np.flatnonzero(usable),
                           "group": up_group[usable].astype(str).to_numpy()})
    stats = by_sha.groupby("sha").agg(pos=("pos", "min"), n=("pos", "size"),
                                      groups=("group", "nunique"))
    q_sha = query["sha256"].astype("string")
    hit = q_sha.isin(stats.index).fillna(False).to_numpy(bool)
    if hit.any():
        s = stats.loc[q_sha[hit].astype(str).to_numpy()]
        match[hit] = s["pos"].to_numpy()
        candidates[hit] = s["n"].to_numpy()
        ambiguous[hit] = s["groups"].to_numpy() > 1
        method[hit] = "bytes"

    # 2. pixels: NCC ≥ tau, for rows still unmatched, against upstream rows with a group
    rules = ["bytes (sha256)"]
    if query_thumbs is not None and upstream_thumbs is not None:
        if len(query_thumbs) != n or len(upstream_thumbs) != len(up):
            raise InputError("thumbnail arrays must align with the query and upstream rows "
                             f"({len(query_thumbs)} vs {n}, {len(upstream_thumbs)} vs {len(up)})")
        from splitscope.relations.ncc import ncc_search

        rules.append(f"NCC ≥ {tau}")
        todo = np.flatnonzero(~hit)
        ref_pos = np.flatnonzero(up_group.notna().to_numpy(bool))
        if todo.size and ref_pos.size:
            res = (searcher(todo, ref_pos) if searcher is not None else
                   ncc_search(np.asarray(query_thumbs)[todo],
                              np.asarray(upstream_thumbs)[ref_pos], tau=tau))
            best = np.asarray(res.best_index, dtype=np.int64)
            best_rho = np.asarray(res.best_rho, dtype=np.float64)
            ok = (best >= 0) & np.isfinite(best_rho) & (best_rho >= tau)
            rows_ok = todo[ok]
            match[rows_ok] = ref_pos[best[ok]]
            rho[rows_ok] = best_rho[ok]
            method[rows_ok] = "ncc"
            pairs = res.pairs
            if len(pairs):
                pg = pd.DataFrame({"q": np.asarray(pairs["query"], dtype=np.int64),
                                   "g": up_group.to_numpy()[ref_pos[np.asarray(
                                       pairs["reference"], dtype=np.int64)]]})
                agg = pg.groupby("q").agg(n=("g", "size"), groups=("g", "nunique"))
                candidates[todo[agg.index.to_numpy()]] = agg["n"].to_numpy()
                ambiguous[todo[agg.index.to_numpy()]] = agg["groups"].to_numpy() > 1

    matched = match >= 0
    safe = np.where(matched, match, 0)
    mapping = pd.DataFrame({
        "row": query["row"].to_numpy(dtype=np.int64),
        "path": query["path"].astype("string").to_numpy(),
        "label": (query["label"] if "label" in query.columns
                  else pd.Series(pd.NA, index=query.index)).astype("string").to_numpy(),
        "method": method.astype(str),
        "upstream_row": pd.array(np.where(matched, up["row"].to_numpy(np.int64)[safe], 0),
                                 dtype="Int64"),
        "upstream_path": up["path"].astype("string").to_numpy()[safe],
        "recovered_group": up_group.to_numpy()[safe],
        "recovered_frame": up_frame.to_numpy()[safe],
        "rho": rho,
        "candidates": candidates,
        "ambiguous": ambiguous,
    })
    for col in ("path", "label", "method", "upstream_path", "recovered_group"):
        mapping[col] = mapping[col].astype("string")
    mapping["recovered_frame"] = mapping["recovered_frame"].astype("Int64")
    for col in ("upstream_row", "upstream_path", "recovered_group", "recovered_frame"):
        mapping.loc[~matched, col] = pd.NA

    up_labels = set(up["label"].dropna().astype(str)) if "label" in up.columns else None
    labels = mapping["label"].fillna("<NA>")
    if impossible_classes is not None:
        impossible = set(map(str, impossible_classes))
    elif up_labels:
        impossible = {lab for lab in labels.unique() if lab not in up_labels}
    else:
        impossible = set()
    by_class = pd.crosstab(labels, mapping["method"]).reindex(
        columns=["bytes", "ncc", "none"], fill_value=0)
    by_class.columns = ["matched_bytes", "matched_ncc", "unmatched"]
    by_class.insert(0, "rows", by_class.sum(axis=1))
    by_class.index.name = "label"
    by_class = by_class.reset_index()
    by_class["matched"] = by_class["matched_bytes"] + by_class["matched_ncc"]
    by_class["can_occur_upstream"] = ~by_class["label"].isin(impossible)
    by_class["check"] = np.where(by_class["can_occur_upstream"], "n/a",
                                 np.where(by_class["matched"] == 0, "pass", "fail"))
    summary = {
        "query_rows": n,
        "upstream_rows": len(up),
        "upstream_rows_with_group": int(up_group.notna().sum()),
        "matched_bytes": int((method == "bytes").sum()),
        "matched_ncc": int((method == "ncc").sum()),
        "matched": int(matched.sum()),
        "unmatched": int((~matched).sum()),
        "ambiguous": int(ambiguous.sum()),
        "rules": rules,
        "tau": tau,
        "impossible_classes": sorted(impossible),
        "matcher_check": ("not assessed" if not impossible else
                          "fail" if (by_class["check"] == "fail").any() else "pass"),
    }
    return Recovery(mapping=mapping, by_class=by_class, summary=summary)


def recover_from_scans(scan: Any, upstream_scan: Any, *, query_rows: np.ndarray | None = None,
                       upstream_rows: np.ndarray | None = None, tau: float = 0.98,
                       pixels: bool = True,
                       impossible_classes: Iterable[str] | None = None,
                       client=None) -> Recovery:
    """:func:`recover_identity` between two :class:`splitscope.features.scanning.Scan` objects
    (``upstream_scan`` must carry groups; the two may be the same scan with disjoint
    ``query_rows`` / ``upstream_rows``). Rows without a thumbnail take part in byte matching
    only; they are never an NCC counterpart (an all-zero thumbnail is flat, and NCC is
    undefined for flat images). With a Dask ``client`` the NCC search is partitioned over
    its cluster (:func:`splitscope.relations.partitioned.partitioned_ncc_search`), the tasks
    reading the thumbnails from the two workspaces; same result."""
    q = scan.rows()
    u = upstream_scan.rows()
    if query_rows is not None:
        q = q[q["row"].isin(np.asarray(query_rows))]
    if upstream_rows is not None:
        u = u[u["row"].isin(np.asarray(upstream_rows))]
    qt = ut = None
    if pixels:
        qt, q_has = _thumbs(scan, q)
        ut, u_has = _thumbs(upstream_scan, u)
        # rows without a thumbnail get a flat image: NCC is undefined for flat images
        qt[~q_has] = 0
        ut[~u_has] = 0
    searcher = _partitioned(client, scan, q, upstream_scan, u, tau) \
        if pixels and client is not None else None
    return recover_identity(q, u, query_thumbs=qt, upstream_thumbs=ut, tau=tau,
                            impossible_classes=impossible_classes, searcher=searcher)


def _partitioned(client, scan, q: pd.DataFrame, upstream_scan, u: pd.DataFrame, tau: float):
    """The searcher of :func:`recover_identity` over ``client``'s cluster, or None when a
    scan holds its thumbnails in memory only. Rows without a thumbnail (flat in the local
    search, so never matched) are left out of the search."""
    from splitscope.relations.ncc import NCCResult
    from splitscope.relations.partitioned import (
        partitioned_ncc_search,
        stored_rows,
        thumbnail_sources,
    )

    src_q, src_u = thumbnail_sources(scan), thumbnail_sources(upstream_scan)
    if not src_q or not src_u:
        return None
    size = int(np.asarray(scan.thumbnails[:0]).shape[-1])
    q_idx = q["thumb_index"].fillna(-1).to_numpy(np.int64)
    u_idx = u["thumb_index"].fillna(-1).to_numpy(np.int64)

    def search(todo: np.ndarray, ref_pos: np.ndarray) -> NCCResult:
        qi, ui = q_idx[todo], u_idx[ref_pos]
        qk, uk = np.flatnonzero(qi >= 0), np.flatnonzero(ui >= 0)
        qs, us = stored_rows(src_q, qi[qk], size), stored_rows(src_u, ui[uk], size)
        if qs is None or us is None:  # thumbnails spread over files: the local arrays
            qs = np.asarray(scan.thumbnails)[qi[qk]] if qs is None else qs
            us = np.asarray(upstream_scan.thumbnails)[ui[uk]] if us is None else us
        res = partitioned_ncc_search(client, qs, us, tau=tau)
        best = np.full(len(todo), -1, np.int64)
        rho = np.full(len(todo), np.nan, np.float32)
        found = res.best_index >= 0
        best[qk[found]] = uk[res.best_index[found]]
        rho[qk] = res.best_rho
        pairs = res.pairs.assign(query=qk[res.pairs["query"].to_numpy(np.int64)],
                                 reference=uk[res.pairs["reference"].to_numpy(np.int64)])
        return NCCResult(tau, best, rho, pairs, np.zeros(len(todo), bool),
                         np.zeros(len(ref_pos), bool), params=res.params)

    return search


def _thumbs(scan: Any, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    idx = rows["thumb_index"].fillna(-1).to_numpy(dtype=np.int64) if "thumb_index" in rows \
        else np.full(len(rows), -1, dtype=np.int64)
    has = idx >= 0
    thumbs = np.asarray(scan.thumbnails)
    out = np.zeros((len(rows),) + thumbs.shape[1:], dtype=np.uint8)
    out[has] = thumbs[idx[has]]
    return out, has
