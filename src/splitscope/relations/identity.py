"""Identity layer (METHODS §1): byte, name and decoded-pixel identity across a boundary.

The input is a row table: the manifest joined with the features (``Scan.rows()``), with at least
``row, path, basename, split, label, source, file, sha256`` (and ``pixel_xxh128`` for decoded-pixel
identity). Rows whose bytes could not be read have no ``sha256``: they stay in every denominator
and are counted as *not assessed*, never as clean.

Counting units: *identity group* (rows sharing one SHA-256) and *affected query row* (a query row
whose bytes also occur on the reference side). Rate = affected query rows / all query rows of the
boundary. For a boundary of a population with itself (``Boundary.within``), a group crosses when
it holds two or more rows, and a row is never its own counterpart.

Every count is taken per identity group (its query and reference rows), never by pairing rows:
a group of n query and m reference rows costs n + m, not n·m, so one image copied thousands of
times stays cheap. An empty file (0 bytes) is a read failure, never a copy: its digest is
cleared before any identity is measured (:func:`identity_rows`), so it stays in every
denominator as not assessed.
"""

from __future__ import annotations

import filecmp
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, Population
from splitscope.errors import InputError
from splitscope.features.failures import identity_rows
from splitscope.manifest.sources import is_url

REQUIRED = ("row", "path", "basename", "label", "source", "file", "sha256")


def check_rows(rows: pd.DataFrame, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Validate the row table once, at the edge; returns it as :func:`identity_rows` does."""
    missing = [c for c in (*REQUIRED, *extra) if c not in rows.columns]
    if missing:
        raise InputError(f"row table lacks column(s) {missing}; found: "
                         f"{', '.join(map(str, rows.columns))} (pass Scan.rows())")
    return identity_rows(rows)


def side(rows: pd.DataFrame, population: Population) -> pd.DataFrame:
    """The rows of one population, in ``row`` order."""
    sub = rows[rows["row"].isin(population.rows)]
    # a table already in row order (Scan.rows() is) is not copied a second time by the sort
    return sub if sub["row"].is_monotonic_increasing else sub.sort_values("row", kind="stable")


def _labels(values: pd.Series) -> list[str]:
    return sorted({str(v) for v in values.dropna()})


def label_relation(query_labels: list[str], reference_labels: list[str]) -> str:
    """``intersecting`` when the label sets share a label, ``disjoint`` when both are known and
    share none (the same bytes carry different labels: a release anomaly), else ``unknown``."""
    if not query_labels or not reference_labels:
        return "unknown"
    return "intersecting" if set(query_labels) & set(reference_labels) else "disjoint"


def confirm_bytes(files: list[str]) -> dict:
    """Compare the bytes of every distinct file with the first one.

    Returns ``{"files": n distinct, "mismatched": [...], "unreadable": [...]}``. Two rows naming
    the same file need no comparison.
    """
    from splitscope.features.sources import parse_key, read_content

    distinct = list(dict.fromkeys(str(f) for f in files if isinstance(f, str)))
    mismatched, unreadable = [], []
    # a table cell or a URL has no local file to compare with filecmp: its bytes are read
    embedded = any(parse_key(f) is not None or is_url(f) for f in distinct)
    if len(distinct) > 1:
        first = distinct[0]
        try:
            reference = read_content(first) if embedded else None
        except Exception:  # noqa: BLE001 - missing, refused, a remote error: unreadable
            reference = None
        for other in distinct[1:]:
            try:
                if embedded:
                    if reference is None:
                        raise OSError(f"cannot read {first}")
                    same = read_content(other) == reference
                else:
                    same = filecmp.cmp(first, other, shallow=False)
            except Exception:  # noqa: BLE001 - missing, refused, a remote error: unreadable
                unreadable.append(other)
                continue
            if not same:
                mismatched.append(other)
    return {"files": len(distinct), "mismatched": mismatched, "unreadable": unreadable}


@dataclass
class IdentityCensus:
    """Byte identity across one boundary (METHODS §1.1–1.4).

    ``groups``: one row per crossing SHA-256 group; ``affected``: one row per affected query row
    with its first counterpart; counts and the byte-for-byte confirmation summary.
    """

    boundary: Boundary
    n_query: int
    not_assessed: int  # query rows without a digest (unreadable): in the denominator
    groups: pd.DataFrame
    affected: pd.DataFrame
    confirmation: dict = field(default_factory=dict)

    @property
    def n_affected(self) -> int:
        return len(self.affected)

    @property
    def rate(self) -> float:
        return self.n_affected / self.n_query if self.n_query else float("nan")


def identity_census(rows: pd.DataFrame, boundary: Boundary, *, confirm: bool = True,
                    key: str = "sha256") -> IdentityCensus:
    """Identity groups crossing ``boundary`` and the query rows they affect.

    Parameters
    ----------
    rows : DataFrame
        ``Scan.rows()`` (manifest joined with features).
    boundary : Boundary
    confirm : bool
        Read the files of every crossing group and compare them byte for byte; groups whose
        bytes differ are reported (``confirmed`` False) and left out of the affected rows.
    key : str
        Digest column (``sha256``; ``pixel_xxh128`` gives decoded-pixel groups).

    Returns
    -------
    IdentityCensus
    """
    rows = check_rows(rows, (key,))
    q = side(rows, boundary.query)
    r = q if boundary.within else side(rows, boundary.reference)
    n_query = len(q)
    qd = q[key].astype("string")
    not_assessed = int(qd.isna().sum())
    q = q[qd.notna()]
    r = r[r[key].astype("string").notna()]
    if boundary.within:
        counts = q[key].value_counts()
        digests = set(counts[counts >= 2].index)
    else:
        digests = set(q[key]) & set(r[key])
    gq = q[q[key].isin(digests)]
    gr = r[r[key].isin(digests)]
    group_rows = []
    checked = mismatched_groups = unreadable_groups = files_compared = 0
    bad_digests: set = set()
    r_by_digest = dict(tuple(gr.groupby(key, sort=False)))
    for digest, qpart in gq.groupby(key, sort=True):
        rpart = r_by_digest.get(digest, gr.iloc[:0])
        ql, rl = _labels(qpart["label"]), _labels(rpart["label"])
        qb, rb = set(qpart["basename"].dropna()), set(rpart["basename"].dropna())
        if boundary.within:
            relation = "unknown" if not ql else ("consistent" if len(ql) == 1 else "conflicting")
            renamed = len(qb) > 1
        else:
            relation = label_relation(ql, rl)
            renamed = not (qb & rb)
        conf = {"files": None, "mismatched": [], "unreadable": []}
        if confirm and key == "sha256":
            conf = confirm_bytes(list(qpart["file"]) + list(rpart["file"]))
            checked += 1
            files_compared += conf["files"]
            if conf["mismatched"]:
                mismatched_groups += 1
                bad_digests.add(digest)
            if conf["unreadable"]:
                unreadable_groups += 1
        group_rows.append({
            key: digest,
            "n_query_rows": len(qpart),
            "n_reference_rows": len(rpart),
            "query_rows": " ".join(map(str, qpart["row"])),
            "reference_rows": " ".join(map(str, rpart["row"])),
            "query_paths": " | ".join(qpart["path"].astype(str)),
            "reference_paths": " | ".join(rpart["path"].astype(str)),
            "query_labels": " ".join(ql),
            "reference_labels": " ".join(rl),
            "label_relation": relation,
            "renamed": renamed,
            "confirmed": (not conf["mismatched"]) if (confirm and key == "sha256") else pd.NA,
            "mismatched_files": len(conf["mismatched"]),
        })
    groups = pd.DataFrame(group_rows, columns=[
        key, "n_query_rows", "n_reference_rows", "query_rows", "reference_rows", "query_paths",
        "reference_paths", "query_labels", "reference_labels", "label_relation", "renamed",
        "confirmed", "mismatched_files"])
    affected = _affected_rows(gq[~gq[key].isin(bad_digests)], gr, key, boundary.within)
    confirmation = {"groups_checked": checked, "files_compared": files_compared,
                    "groups_mismatched": mismatched_groups,
                    "groups_with_unreadable_file": unreadable_groups,
                    "method": "byte-for-byte comparison of every distinct file in each group"
                    if confirm and key == "sha256" else "not performed"}
    return IdentityCensus(boundary, n_query, not_assessed, groups, affected, confirmation)


def _affected_rows(gq: pd.DataFrame, gr: pd.DataFrame, key: str, within: bool) -> pd.DataFrame:
    """One row per affected query row with its first counterpart (lowest reference row that is
    not the row itself), the counterpart count, and whether the row was renamed.

    Counted per group: a row's counterparts are its group's reference rows (less itself
    within a population), so a same-name or same-label counterpart exists when the group
    holds another row with that name or label."""
    cols = ["row", "path", "label", "source", key, "counterpart_row", "counterpart_path",
            "counterpart_label", "n_counterparts", "renamed", "label_differs"]
    if gq.empty:
        return pd.DataFrame(columns=cols)
    nq = len(gq)
    group = group_codes(gq[key], gr[key])
    qg, rg = group[:nq], group[nq:]
    q_rows = gq["row"].to_numpy(np.int64)
    r_rows = gr["row"].to_numpy(np.int64)
    n = np.bincount(rg, minlength=int(group.max()) + 1)[qg] - int(within)
    # within a population a row's own line is no counterpart: its row is the value to avoid
    first = lowest_other(rg, r_rows, r_rows, qg, q_rows if within else np.full(nq, -1))
    pos = pd.Index(r_rows).get_indexer(first)
    out = gq[["row", "path", "label", "source", key]].reset_index(drop=True)
    out["counterpart_row"] = first
    out["counterpart_path"] = gr["path"].iloc[pos].reset_index(drop=True)
    out["counterpart_label"] = gr["label"].iloc[pos].reset_index(drop=True)
    out["n_counterparts"] = n.astype(np.int64)
    same_name = _shares_value(qg, gq["basename"], rg, gr["basename"], within)
    same_label = _shares_value(qg, gq["label"], rg, gr["label"], within)
    out["renamed"] = ~same_name
    labelled = out["label"].notna() & out["counterpart_label"].notna()
    out["label_differs"] = (labelled & ~same_label).to_numpy(bool)
    out = out[n > 0].sort_values("row", kind="stable")
    return out.reset_index(drop=True)[cols]


def group_codes(*digests: pd.Series) -> np.ndarray:
    """One integer code per digest value over all the given columns, concatenated (equal
    digests, equal codes); the columns must hold no missing value."""
    codes, _ = pd.factorize(pd.concat([pd.Series(d.to_numpy(), dtype=object) for d in digests],
                                      ignore_index=True))
    return codes.astype(np.int64)


def _shares_value(qg: np.ndarray, q_values: pd.Series, rg: np.ndarray, r_values: pd.Series,
                  within: bool) -> np.ndarray:
    """Per query element: does a reference element of its group (another one, ``within``)
    carry an equal, known value? Missing values never match."""
    codes, uniques = pd.factorize(pd.concat([pd.Series(q_values.to_numpy(), dtype=object),
                                             pd.Series(r_values.to_numpy(), dtype=object)],
                                            ignore_index=True))
    width = len(uniques) + 1
    qv, rv = codes[:qg.size], codes[qg.size:]
    known = rv >= 0
    found = count_of(rg[known].astype(np.int64) * width + rv[known],
                     qg.astype(np.int64) * width + qv)
    return (qv >= 0) & (found >= (2 if within else 1))


def count_of(keys: np.ndarray, at: np.ndarray) -> np.ndarray:
    """How often each value of ``at`` occurs in ``keys`` (integer arrays)."""
    values, counts = np.unique(keys, return_counts=True)
    if values.size == 0:
        return np.zeros(np.asarray(at).size, np.int64)
    pos = np.minimum(np.searchsorted(values, at), values.size - 1)
    return np.where(values[pos] == at, counts[pos], 0).astype(np.int64)


def lowest_other(groups: np.ndarray, values: np.ndarray, rows: np.ndarray,
                 at_groups: np.ndarray, at_values: np.ndarray) -> np.ndarray:
    """For each element (``at_groups[i]``, ``at_values[i]``): the lowest of ``rows`` in its
    group whose value differs from ``at_values[i]`` (-1 when there is none).

    Groups and values are integer codes. Only each group's two lowest rows of distinct values
    are needed (the lowest, and the lowest of another value), so the cost is a sort, never a
    pairing of elements."""
    at_groups = np.asarray(at_groups, np.int64)
    out = np.full(at_groups.size, -1, np.int64)
    if rows.size == 0 or at_groups.size == 0:
        return out
    size = int(max(groups.max(), at_groups.max())) + 1
    order = np.lexsort((rows, values, groups))
    g, v, r = groups[order], values[order], rows[order]
    head = np.r_[True, (g[1:] != g[:-1]) | (v[1:] != v[:-1])]
    g, v, r = g[head], v[head], r[head]  # the lowest row of each (group, value)
    order = np.lexsort((r, g))
    g, v, r = g[order], v[order], r[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    rank = np.arange(g.size) - np.repeat(starts, np.diff(np.r_[starts, g.size]))
    first_row = np.full(size, -1, np.int64)
    first_value = np.full(size, -1, np.int64)
    second_row = np.full(size, -1, np.int64)
    first_row[g[rank == 0]] = r[rank == 0]
    first_value[g[rank == 0]] = v[rank == 0]
    second_row[g[rank == 1]] = r[rank == 1]
    taken = first_value[at_groups] != at_values
    has = first_row[at_groups] >= 0
    return np.where(has & taken, first_row[at_groups], np.where(has, second_row[at_groups], -1))


def rate_breakdown(query_rows: pd.DataFrame, affected_rows, by: str) -> pd.DataFrame:
    """Affected query rows / query rows per value of ``by`` (``source`` or ``label``).

    Columns: ``<by>, affected, rows, rate``; missing values appear as ``<NA>`` (their own line).
    """
    if by not in query_rows.columns:
        raise InputError(f"no column {by!r} to break down by; found: "
                         f"{', '.join(map(str, query_rows.columns))}")
    hit = query_rows["row"].isin(np.asarray(list(affected_rows), dtype=np.int64))
    key = query_rows[by].astype("string").fillna("<NA>")
    table = pd.DataFrame({by: key.to_numpy(), "affected": hit.to_numpy(dtype=int)})
    out = table.groupby(by, sort=True).agg(affected=("affected", "sum"),
                                           rows=("affected", "size")).reset_index()
    out["rate"] = out["affected"] / out["rows"]
    return out


def basename_matches(rows: pd.DataFrame, boundary: Boundary) -> pd.DataFrame:
    """Per query row: does its basename occur on the reference side (METHODS §1.5), beside
    byte identity.

    Returns one row per query row: ``row, path, basename, basename_match, byte_match`` and
    ``relation`` — ``name and bytes``, ``name only`` (same name, different bytes: a
    filename-propagated split would call it a leak), ``bytes only`` (renamed copy a filename
    check misses), ``neither``, or ``not assessed`` (no digest and no name match).
    """
    rows = check_rows(rows)
    q = side(rows, boundary.query)
    r = q if boundary.within else side(rows, boundary.reference)
    if boundary.within:
        name_counts = q["basename"].value_counts()
        name_hit = q["basename"].map(name_counts).fillna(0).to_numpy() >= 2
        dig_counts = q["sha256"].value_counts()
        byte_hit = q["sha256"].map(dig_counts).fillna(0).to_numpy() >= 2
    else:
        name_hit = q["basename"].isin(set(r["basename"].dropna())).to_numpy()
        byte_hit = q["sha256"].isin(set(r["sha256"].dropna())).to_numpy()
    has_digest = q["sha256"].notna().to_numpy()
    relation = np.where(name_hit & byte_hit, "name and bytes",
                        np.where(name_hit, "name only",
                                 np.where(byte_hit, "bytes only", "neither")))
    relation = np.where(~has_digest & (relation == "neither"), "not assessed", relation)
    return pd.DataFrame({"row": q["row"].to_numpy(), "path": q["path"].to_numpy(),
                         "basename": q["basename"].to_numpy(), "basename_match": name_hit,
                         "byte_match": byte_hit & has_digest, "relation": relation})


def within_copies(rows: pd.DataFrame, population: Population, *, key: str = "sha256"
                  ) -> pd.DataFrame:
    """Identity groups with two or more rows inside one population (METHODS §1.6).

    One row per group: digest, ``n_rows``, ``rows``, ``paths``, ``labels`` and
    ``label_relation`` (``consistent`` / ``conflicting`` / ``unknown``), sorted by digest.
    """
    rows = check_rows(rows, (key,))
    sub = side(rows, population)
    sub = sub[sub[key].notna()]
    counts = sub[key].value_counts()
    sub = sub[sub[key].isin(counts[counts >= 2].index)]
    out = []
    for digest, part in sub.groupby(key, sort=True):
        labels = _labels(part["label"])
        out.append({key: digest, "n_rows": len(part),
                    "rows": " ".join(map(str, part["row"])),
                    "paths": " | ".join(part["path"].astype(str)),
                    "labels": " ".join(labels),
                    "label_relation": "unknown" if not labels else
                    ("consistent" if len(labels) == 1 else "conflicting")})
    return pd.DataFrame(out, columns=[key, "n_rows", "rows", "paths", "labels",
                                      "label_relation"])


NO_BYTES_REASON = ("the rows are pixel arrays (an .npz or in-memory arrays) without file bytes "
                   "or file names; decoded-pixel identity, the hashes and NCC measure them")


def no_bytes(rows: pd.DataFrame) -> np.ndarray:
    """Rows given as pixel arrays (manifest ``content`` ``array``): byte identity and
    basename matching do not apply to them (no file bytes, no file name)."""
    if "content" not in rows.columns:
        return np.zeros(len(rows), bool)
    return rows["content"].astype("string").eq("array").fillna(False).to_numpy(bool)


def _bytes_or_array(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with a pixel digest and bytes, or pixel arrays (no bytes, each its own ``sha256``
    stand-in, so two arrays with equal pixels count as pixel-identical with different bytes)."""
    arrays = no_bytes(rows)
    keep = rows["pixel_xxh128"].notna().to_numpy(bool) & \
        (rows["sha256"].notna().to_numpy(bool) | arrays)
    out = rows[keep].copy()
    if arrays.any():
        stand_in = pd.Series("array:" + out["row"].astype(str), index=out.index)
        out["sha256"] = out["sha256"].astype("string").fillna(stand_in.astype("string"))
    return out


def pixel_identity(rows: pd.DataFrame, boundary: Boundary) -> pd.DataFrame:
    """Decoded-pixel identity with different bytes (METHODS §1.7): re-encodes of one image.

    Returns one row per query row that has a reference row with equal ``pixel_xxh128`` (decoded
    pixels, mode and shape) but a different ``sha256``: ``row, path, pixel_xxh128,
    counterpart_row, counterpart_path, n_counterparts, byte_match`` (whether the row also has a
    byte-identical counterpart).
    """
    rows = check_rows(rows, ("pixel_xxh128",))
    q = side(rows, boundary.query)
    r = q if boundary.within else side(rows, boundary.reference)
    q, r = _bytes_or_array(q), _bytes_or_array(r)
    cols = ["row", "path", "pixel_xxh128", "counterpart_row", "counterpart_path",
            "n_counterparts", "byte_match"]
    if q.empty or r.empty:
        return pd.DataFrame(columns=cols)
    # per pixel group: its reference rows, and those of each SHA-256 inside it
    nq = len(q)
    pixel = group_codes(q["pixel_xxh128"], r["pixel_xxh128"])
    digest = group_codes(q["sha256"], r["sha256"])
    width = int(digest.max()) + 1
    qp, rp, qs, rs = pixel[:nq], pixel[nq:], digest[:nq], digest[nq:]
    same_pixels = np.bincount(rp, minlength=int(pixel.max()) + 1)[qp]
    same_bytes = count_of(rp * width + rs, qp * width + qs)
    # a row's own line (within a population) has its bytes: it falls out of the difference
    n = same_pixels - same_bytes
    byte_match = same_bytes >= (2 if boundary.within else 1)
    hit = n > 0
    if not hit.any():
        return pd.DataFrame(columns=cols)
    r_rows = r["row"].to_numpy(np.int64)
    first = lowest_other(rp, rs, r_rows, qp[hit], qs[hit])
    out = q.loc[hit, ["row", "path", "pixel_xxh128"]].reset_index(drop=True)
    out["counterpart_row"] = first
    out["counterpart_path"] = r["path"].iloc[pd.Index(r_rows).get_indexer(first)] \
        .reset_index(drop=True)
    out["n_counterparts"] = n[hit].astype(np.int64)
    out["byte_match"] = byte_match[hit]
    return out.sort_values("row", kind="stable").reset_index(drop=True)[cols]
