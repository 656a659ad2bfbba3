"""Group layer (METHODS §3.2, §3.3): shared patients, videos or lesions across a boundary, and
how far, in frames, a query row is from the nearest reference row of its own group.

Group keys come from the manifest's ``group`` column (filled from a list column, a filename
regex via :func:`splitscope.manifest.apply_group_regex`, or a mapping file). Rows without a
group key are *untraceable*: they are counted in the coverage and never in the overlap rate,
which is therefore **conditional on traceability** and says so.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary
from splitscope.errors import InputError
from splitscope.groups.predicates import GROUP_OVERLAP
from splitscope.options import RunOptions

__all__ = [
    "GroupOverlap",
    "frame_gap_summary",
    "frame_gaps",
    "group_overlap",
    "group_resampling_interval",
    "rows_per_group",
]


def _require(manifest: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in manifest.columns]
    if missing:
        raise InputError(
            f"{what} needs column(s) {', '.join(missing)} in the manifest; found: "
            f"{', '.join(map(str, manifest.columns))}"
        )


def _side(manifest: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """The manifest rows with ``row`` ids ``rows`` (manifest ``row`` must be 0..n-1 or unique)."""
    index = pd.Index(manifest["row"].to_numpy(dtype=np.int64))
    if not index.is_unique:
        raise InputError("manifest `row` ids are not unique; rebuild it with build_manifest")
    pos = index.get_indexer(np.asarray(rows, dtype=np.int64))
    if (pos < 0).any():
        raise InputError(f"{int((pos < 0).sum())} boundary row id(s) are not in the manifest")
    return manifest.iloc[pos]


def _describe_counts(counts: np.ndarray) -> dict[str, Any]:
    """Distribution of rows per group: groups, rows, min, quartiles, max, mean."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.size == 0:
        return {"groups": 0, "rows": 0, "min": None, "q1": None, "median": None, "q3": None,
                "max": None, "mean": None}
    q1, med, q3 = np.percentile(counts, [25, 50, 75])
    return {"groups": int(counts.size), "rows": int(counts.sum()), "min": int(counts.min()),
            "q1": float(q1), "median": float(med), "q3": float(q3), "max": int(counts.max()),
            "mean": float(counts.mean())}


def rows_per_group(manifest: pd.DataFrame, boundary: Boundary) -> pd.DataFrame:
    """One line per group seen on either side of ``boundary``: query rows, reference rows and
    whether the group is on both sides (``shared``). Ordered by group key."""
    _require(manifest, ("row", "group"), "rows_per_group")
    q = _side(manifest, boundary.query.rows)["group"].dropna().astype(str)
    r = _side(manifest, boundary.reference.rows)["group"].dropna().astype(str)
    table = pd.DataFrame({
        "query_rows": q.value_counts(),
        "reference_rows": r.value_counts(),
    }).fillna(0).astype("int64")
    table.index.name = "group"
    table = table.sort_index().reset_index()
    table["group"] = table["group"].astype("string")
    table["shared"] = (table["query_rows"] > 0) & (table["reference_rows"] > 0)
    return table


@dataclass
class GroupOverlap:
    """Group overlap across one boundary (METHODS §3.2).

    Attributes
    ----------
    boundary : Boundary
    summary : dict
        ``query_rows`` (all), ``traceable_query_rows`` (a known group), ``affected_query_rows``
        (group also on the reference side), ``rate`` = affected / traceable (conditional on
        traceability), ``coverage`` = traceable / all; the same counts for the reference side
        (``affected_reference_rows`` are reference rows whose group occurs in the query);
        ``query_groups``, ``reference_groups``, ``shared_groups``; rows-per-group distributions.
    rows : DataFrame
        One line per query row: ``row``, ``path``, ``group``, ``label``, ``traceable``,
        ``affected``, ``reference_rows_same_group`` (reference rows sharing its group, the row
        itself not counted when it is on both sides).
    groups : DataFrame
        :func:`rows_per_group`.
    by_label, by_source : DataFrame
        Query rows, traceable, affected and rate per label / per source.
    """

    boundary: Boundary
    summary: dict[str, Any]
    rows: pd.DataFrame
    groups: pd.DataFrame
    by_label: pd.DataFrame
    by_source: pd.DataFrame
    shared: list[str] = field(default_factory=list)


def _breakdown(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    if column not in rows.columns:
        return pd.DataFrame(columns=[column, "query_rows", "traceable", "affected", "rate"])
    key = rows[column].astype("string").fillna("<NA>")
    out = pd.DataFrame({
        "query_rows": key.value_counts(),
        "traceable": rows["traceable"].groupby(key).sum(),
        "affected": rows["affected"].groupby(key).sum(),
    }).fillna(0).astype("int64")
    out.index.name = column
    out = out.sort_index().reset_index()
    with np.errstate(invalid="ignore", divide="ignore"):
        out["rate"] = np.where(out["traceable"] > 0,
                               out["affected"] / out["traceable"].where(out["traceable"] > 0, 1),
                               np.nan)
    return out


def group_overlap(manifest: pd.DataFrame, boundary: Boundary) -> GroupOverlap:
    """Shared groups across ``boundary`` and the query rows they affect (METHODS §3.2).

    A query row is *traceable* when its group is known and *affected* when some reference row
    (other than itself, if a row lies on both sides) has the same group. The rate is
    affected / traceable and is conditional on traceability; coverage is traceable / all query
    rows. Both denominators are returned.

    Parameters
    ----------
    manifest : DataFrame
        A manifest with ``row``, ``path`` and ``group`` (``label``, ``source`` used if present).
    boundary : Boundary
        Query → reference, e.g. ``splitscope.boundary.boundary(m, "test", "train")``.

    Returns
    -------
    GroupOverlap

    Examples
    --------
    >>> import pandas as pd
    >>> from splitscope.boundary import boundary
    >>> m = pd.DataFrame({"row": [0, 1, 2, 3], "path": list("abcd"),
    ...                   "split": ["train", "train", "test", "test"],
    ...                   "group": ["p1", "p2", "p1", None]})
    >>> o = group_overlap(m, boundary(m, "test", "train"))
    >>> o.summary["affected_query_rows"], o.summary["traceable_query_rows"]
    (1, 1)
    """
    _require(manifest, ("row", "path", "group"), GROUP_OVERLAP)
    q = _side(manifest, boundary.query.rows)
    r = _side(manifest, boundary.reference.rows)
    q_group = q["group"].astype("string")
    r_group = r["group"].astype("string")
    ref_counts = r_group.dropna().value_counts()
    q_counts = q_group.dropna().value_counts()
    traceable = q_group.notna().to_numpy(dtype=bool)
    same = q_group.map(ref_counts).fillna(0).to_numpy(dtype=np.int64)
    in_reference = np.isin(q["row"].to_numpy(dtype=np.int64), boundary.reference.rows)
    same = same - (in_reference & traceable).astype(np.int64)  # a row is not its own counterpart
    affected = traceable & (same > 0)
    rows = pd.DataFrame({
        "row": q["row"].to_numpy(dtype=np.int64),
        "path": q["path"].astype("string").to_numpy(),
        "group": q_group.to_numpy(),
        "label": q["label"].astype("string").to_numpy() if "label" in q else pd.NA,
        "source": q["source"].astype("string").to_numpy() if "source" in q else pd.NA,
        "traceable": traceable,
        "affected": affected,
        "reference_rows_same_group": same,
    })
    for col in ("path", "group", "label", "source"):
        rows[col] = rows[col].astype("string")

    r_traceable = r_group.notna().to_numpy(dtype=bool)
    r_same = r_group.map(q_counts).fillna(0).to_numpy(dtype=np.int64)
    r_in_query = np.isin(r["row"].to_numpy(dtype=np.int64), boundary.query.rows)
    r_same = r_same - (r_in_query & r_traceable).astype(np.int64)
    r_affected = r_traceable & (r_same > 0)

    groups = rows_per_group(manifest, boundary)
    shared = groups.loc[groups["shared"], "group"].astype(str).tolist()
    n_q, n_t, n_a = len(q), int(traceable.sum()), int(affected.sum())
    n_rq, n_rt, n_ra = len(r), int(r_traceable.sum()), int(r_affected.sum())
    summary = {
        "query_rows": n_q,
        "traceable_query_rows": n_t,
        "affected_query_rows": n_a,
        "rate": n_a / n_t if n_t else None,
        "coverage": n_t / n_q if n_q else None,
        "reference_rows": n_rq,
        "traceable_reference_rows": n_rt,
        "affected_reference_rows": n_ra,
        "reference_rate": n_ra / n_rt if n_rt else None,
        "reference_coverage": n_rt / n_rq if n_rq else None,
        "query_groups": int(q_counts.size),
        "reference_groups": int(ref_counts.size),
        "shared_groups": len(shared),
        "rows_per_group_query": _describe_counts(q_counts.to_numpy()),
        "rows_per_group_reference": _describe_counts(ref_counts.to_numpy()),
        "rows_per_group_shared_query": _describe_counts(
            q_counts[q_counts.index.isin(shared)].to_numpy()),
    }
    return GroupOverlap(boundary=boundary, summary=summary, rows=rows, groups=groups,
                        by_label=_breakdown(rows, "label"), by_source=_breakdown(rows, "source"),
                        shared=shared)


def group_resampling_interval(rows: pd.DataFrame, *, n_resamples: int = RunOptions.resamples, seed: int = RunOptions.seed,
                              level: float = 0.95) -> dict[str, Any]:
    """Sensitivity of a census overlap rate to hypothetical group sampling (METHODS §5.5).

    Resamples the G traceable query groups with replacement (m = G) and takes the pooled
    numerator (affected rows) over the pooled denominator (traceable rows) of each resample;
    returns the percentile interval. This is *not* a sampling interval of the census rate.

    Parameters
    ----------
    rows : DataFrame
        ``GroupOverlap.rows`` (``group``, ``traceable``, ``affected``).
    """
    t = rows[rows["traceable"]]
    if t.empty:
        return {"low": None, "high": None, "groups": 0, "resamples": 0}
    per_group = t.groupby(t["group"].astype(str), sort=True).agg(
        traceable=("traceable", "sum"), affected=("affected", "sum"))
    g = len(per_group)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(g, np.full(g, 1.0 / g), size=n_resamples)
    num = counts @ per_group["affected"].to_numpy(dtype=np.float64)
    den = counts @ per_group["traceable"].to_numpy(dtype=np.float64)
    rates = num / den
    alpha = (1 - level) / 2
    low, high = np.quantile(rates, [alpha, 1 - alpha])
    return {"low": float(low), "high": float(high), "groups": g, "resamples": n_resamples,
            "seed": seed}


def frame_gaps(manifest: pd.DataFrame, boundary: Boundary) -> pd.DataFrame:
    """For each query row, the nearest reference row of the same group by |frame difference|
    (METHODS §3.3).

    Rows without a group or frame, or whose group has no reference row with a frame, get
    ``gap`` = ``<NA>``. A row lying on both sides is never its own nearest row. Ties go to the
    lower frame (then the lower ``row``).

    Returns
    -------
    DataFrame
        ``row``, ``path``, ``group``, ``frame``, ``nearest_reference_row``,
        ``nearest_reference_frame``, ``gap`` (Int64), in query order.
    """
    _require(manifest, ("row", "path", "group", "frame"), "frame gaps")
    q = _side(manifest, boundary.query.rows)
    r = _side(manifest, boundary.reference.rows)
    out = pd.DataFrame({
        "row": q["row"].to_numpy(dtype=np.int64),
        "path": q["path"].astype("string").to_numpy(),
        "group": q["group"].astype("string").to_numpy(),
        "frame": q["frame"].astype("Int64").to_numpy(),
    })
    out["path"] = out["path"].astype("string")
    out["group"] = out["group"].astype("string")
    out["frame"] = out["frame"].astype("Int64")
    n = len(out)
    nearest_row = np.full(n, -1, dtype=np.int64)
    nearest_frame = np.zeros(n, dtype=np.int64)
    gap = np.full(n, -1, dtype=np.int64)

    r_ok = r["group"].notna().to_numpy(bool) & r["frame"].notna().to_numpy(bool)
    q_ok = out["group"].notna().to_numpy(bool) & out["frame"].notna().to_numpy(bool)
    if r_ok.any() and q_ok.any():
        r_group = r["group"].astype(str).to_numpy()[r_ok]
        r_frame = r["frame"].to_numpy(dtype=np.float64, na_value=np.nan)[r_ok].astype(np.int64)
        r_row = r["row"].to_numpy(dtype=np.int64)[r_ok]
        q_group = out["group"].astype(str).to_numpy()[q_ok]
        q_frame = out["frame"].to_numpy(dtype=np.float64, na_value=np.nan)[q_ok].astype(np.int64)
        q_row = out["row"].to_numpy(dtype=np.int64)[q_ok]
        codes, _uniques = pd.factorize(pd.Series(np.concatenate([r_group, q_group])), sort=True)
        rc, qc = codes[: r_group.size].astype(np.int64), codes[r_group.size:].astype(np.int64)
        lo = min(r_frame.min(), q_frame.min())
        span = int(max(r_frame.max(), q_frame.max()) - lo) + 1
        # one sortable key per (group, frame); groups occupy disjoint key ranges
        r_key = rc * span + (r_frame - lo)
        q_key = qc * span + (q_frame - lo)
        order = np.lexsort((r_row, r_key))
        r_key, r_frame, r_row, rc = r_key[order], r_frame[order], r_row[order], rc[order]
        left = np.searchsorted(r_key, q_key, side="left")
        right = np.searchsorted(r_key, q_key, side="right")
        # exact frame match: the first equal reference row that is not the query row itself
        first_eq = np.where(left < r_row.size, r_row[np.minimum(left, r_row.size - 1)], -1)
        self_first = (right > left) & (first_eq == q_row)
        n_equal = right - left - self_first.astype(np.int64)
        alt = np.minimum(left + self_first.astype(np.int64), r_row.size - 1)
        exact = n_equal > 0
        # otherwise the neighbours just below and just above, within the same group
        below = left - 1
        above = right
        b_ok = (below >= 0) & (rc[np.clip(below, 0, r_row.size - 1)] == qc)
        a_ok = (above < r_row.size) & (rc[np.clip(above, 0, r_row.size - 1)] == qc)
        b_gap = np.where(b_ok, q_frame - r_frame[np.clip(below, 0, r_row.size - 1)], np.iinfo(np.int64).max)
        a_gap = np.where(a_ok, r_frame[np.clip(above, 0, r_row.size - 1)] - q_frame, np.iinfo(np.int64).max)
        take_below = b_gap <= a_gap
        pick = np.where(exact, alt, np.where(take_below, below, above))
        found = exact | b_ok | a_ok
        pick = np.clip(pick, 0, r_row.size - 1)
        sub_gap = np.where(exact, 0, np.minimum(b_gap, a_gap))
        idx = np.flatnonzero(q_ok)
        nearest_row[idx] = np.where(found, r_row[pick], -1)
        nearest_frame[idx] = r_frame[pick]
        gap[idx] = np.where(found, sub_gap, -1)
    has = gap >= 0
    out["nearest_reference_row"] = pd.array(np.where(has, nearest_row, 0), dtype="Int64")
    out.loc[~has, "nearest_reference_row"] = pd.NA
    out["nearest_reference_frame"] = pd.array(np.where(has, nearest_frame, 0), dtype="Int64")
    out.loc[~has, "nearest_reference_frame"] = pd.NA
    out["gap"] = pd.array(np.where(has, gap, 0), dtype="Int64")
    out.loc[~has, "gap"] = pd.NA
    return out


def frame_gap_summary(gaps: pd.DataFrame, bins: list[int] | None = None) -> dict[str, Any]:
    """Median, IQR and histogram of the per-row gaps from :func:`frame_gaps`.

    ``bins`` are left-closed edges; the default is 0, 1, 2, 5, 10, 20, 50, 100, 200, 500,
    1000, 5000 and an open last bin. Rows without a gap are counted as ``rows_without_gap``.
    """
    g = gaps["gap"].dropna().to_numpy(dtype=np.int64)
    edges = list(bins) if bins is not None else [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000]
    counts = np.histogram(g, bins=edges + [np.iinfo(np.int64).max])[0] if g.size else \
        np.zeros(len(edges), dtype=np.int64)
    labels = [f"[{a}, {b})" for a, b in itertools.pairwise(edges)] + [f"≥{edges[-1]}"]
    if g.size:
        q1, med, q3 = np.percentile(g, [25, 50, 75])
    else:
        q1 = med = q3 = None
    return {
        "rows_with_gap": int(g.size),
        "rows_without_gap": int(len(gaps) - g.size),
        "median": float(med) if med is not None else None,
        "q1": float(q1) if q1 is not None else None,
        "q3": float(q3) if q3 is not None else None,
        "iqr": float(q3 - q1) if q1 is not None else None,
        "min": int(g.min()) if g.size else None,
        "max": int(g.max()) if g.size else None,
        "histogram": {"edges": edges, "labels": labels, "counts": [int(c) for c in counts]},
    }
