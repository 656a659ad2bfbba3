"""Controls for near-duplicate predicates.

*Negative control* (METHODS §2.5): the same predicate on a boundary known to be clean (another
corpus, or a clean corpus's own train/test). Its flag rate is reported beside the audited rate;
a predicate whose control rate exceeds a stated bound is marked unreliable for that modality
(coarse gradient hashes collide on radiographs that share one global layout).

*Same-modality comparison pairs* (METHODS §2.6): for flagged pairs inside groups (videos,
patients) with frame indices, *adjacent* controls (same group, not flagged, smallest frame gap)
and *distant* controls (same group, gap >= 500); the median similarity of flagged pairs minus
that of the controls, with a 95% percentile interval from resampling groups jointly.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.options import RunOptions
from splitscope.relations.options import SearchOptions

#: a predicate flagging more than 1% of a clean control is unreliable
DEFAULT_CONTROL_BOUND = SearchOptions.control_bound
DISTANT_GAP = 500


def control_rate(flags, *, bound: float = DEFAULT_CONTROL_BOUND) -> dict:
    """Flag rate of a predicate on a control boundary.

    Parameters
    ----------
    flags : array-like of bool or <NA>
        One entry per control query row; <NA> = not assessed (excluded from the rate, counted).
    bound : float
        The predicate is ``unreliable`` when the control rate exceeds it.

    Returns
    -------
    dict ``numerator, denominator, not_assessed, rate, bound, unreliable``
    """
    s = pd.array(flags, dtype="boolean")
    assessed = ~np.asarray(pd.isna(s))
    num = int(np.asarray(s.fillna(False), dtype=bool).sum())
    den = int(assessed.sum())
    rate = num / den if den else float("nan")
    return {"unit": "affected query row", "numerator": num, "denominator": den,
            "not_assessed": int((~assessed).sum()), "rate": rate, "bound": float(bound),
            "unreliable": bool(den and rate > bound)}


def comparison_pairs(rows: pd.DataFrame, flagged: pd.DataFrame, *,
                     distant_gap: int = DISTANT_GAP, reference_rows=None) -> pd.DataFrame:
    """Adjacent and distant control pairs for flagged pairs inside groups.

    Parameters
    ----------
    rows : DataFrame with ``row, group, frame``
    flagged : DataFrame with ``query_row, reference_row`` (the flagged pairs)
    distant_gap : int
        Minimum frame gap of a *distant* control.
    reference_rows : array-like of int, optional
        Rows a control may pair a query with (the boundary's reference side); default: every
        row. Rows that take part in any flagged pair are never controls.

    Returns
    -------
    DataFrame ``query_row, reference_row, group, gap, kind`` with kind ``flagged`` (flagged
    pairs whose two rows share a group), ``adjacent`` (per flagged query: the same group's
    candidate with the smallest frame gap > 0, lowest row on ties) or ``distant`` (the
    smallest gap >= ``distant_gap``). Queries without a group or frame have no controls.
    Per group, candidates are found by binary search over sorted frames (no pair loop).
    """
    for col in ("row", "group", "frame"):
        if col not in rows.columns:
            raise InputError(f"comparison pairs need column {col!r} in the row table")
    meta = rows[["row", "group", "frame"]].dropna().copy()
    meta["frame"] = meta["frame"].astype("int64")
    meta["group"] = meta["group"].astype(str)
    f = flagged[["query_row", "reference_row"]].merge(
        meta.rename(columns={"row": "query_row", "frame": "qf"}), on="query_row")
    f = f.merge(meta.rename(columns={"row": "reference_row", "group": "rgroup", "frame": "rf"}),
                on="reference_row", how="left")
    f = f[f["rgroup"] == f["group"]]
    out = [pd.DataFrame({"query_row": f["query_row"], "reference_row": f["reference_row"],
                         "group": f["group"], "gap": (f["qf"] - f["rf"]).abs(),
                         "kind": "flagged"})]
    involved = set(flagged["reference_row"]) | set(flagged["query_row"])
    cand = meta[~meta["row"].isin(involved)]
    if reference_rows is not None:
        cand = cand[cand["row"].isin(np.asarray(reference_rows))]
    queries = f.drop_duplicates("query_row")[["query_row", "group", "qf"]]
    picks = {"adjacent": [], "distant": []}
    for group, qpart in queries.groupby("group", sort=True):
        c = cand[cand["group"] == group].sort_values(["frame", "row"], kind="stable")
        if c.empty:
            continue
        frames = c["frame"].to_numpy(np.int64)
        crow = c["row"].to_numpy(np.int64)
        qf = qpart["qf"].to_numpy(np.int64)
        qrow = qpart["query_row"].to_numpy(np.int64)
        for kind, low_gap in (("adjacent", 1), ("distant", distant_gap)):
            # nearest candidate at or below qf - low_gap, and at or above qf + low_gap
            lo = np.searchsorted(frames, qf - low_gap, side="right") - 1
            hi = np.searchsorted(frames, qf + low_gap, side="left")
            gap_lo = np.where(lo >= 0, qf - frames[np.maximum(lo, 0)], np.iinfo(np.int64).max)
            gap_hi = np.where(hi < frames.size, frames[np.minimum(hi, frames.size - 1)] - qf,
                              np.iinfo(np.int64).max)
            # several rows may share the chosen frame: take the lowest row of that frame
            first_lo = np.searchsorted(frames, frames[np.maximum(lo, 0)], side="left")
            row_lo = crow[first_lo]
            row_hi = crow[np.minimum(hi, frames.size - 1)]
            use_lo = (gap_lo < gap_hi) | ((gap_lo == gap_hi) & (row_lo < row_hi))
            gap = np.where(use_lo, gap_lo, gap_hi)
            ref = np.where(use_lo, row_lo, row_hi)
            ok = gap < np.iinfo(np.int64).max
            picks[kind].append(pd.DataFrame({"query_row": qrow[ok], "reference_row": ref[ok],
                                             "group": group, "gap": gap[ok], "kind": kind}))
    for kind in ("adjacent", "distant"):
        out.extend(picks[kind])
    return pd.concat(out, ignore_index=True).reset_index(drop=True)


def median_difference(values: pd.DataFrame, *, measure: str, control: str, n_boot: int = RunOptions.resamples,
                      seed: int = RunOptions.seed) -> dict:
    """Median ``measure`` of flagged pairs minus that of ``control`` pairs, with a 95%
    percentile interval from resampling groups jointly (whole groups with replacement, both
    arms from the same resampled groups).

    ``values``: DataFrame ``group, kind, <measure>`` (from :func:`comparison_pairs` plus a
    similarity column).
    """
    sub = values[values["kind"].isin(["flagged", control])].dropna(subset=[measure])
    fl = sub[sub["kind"] == "flagged"]
    co = sub[sub["kind"] == control]
    if fl.empty or co.empty:
        return {"measure": measure, "control": control, "difference": None,
                "n_flagged": len(fl), "n_control": len(co), "interval": None,
                "status": "not assessed",
                "reason": "no flagged pairs" if fl.empty else f"no {control} control pairs"}
    diff = float(np.median(fl[measure]) - np.median(co[measure]))
    groups = np.array(sorted(sub["group"].unique()))
    rng = np.random.default_rng(seed)
    by_group = {g: (part.loc[part["kind"] == "flagged", measure].to_numpy(),
                    part.loc[part["kind"] == control, measure].to_numpy())
                for g, part in sub.groupby("group")}
    boots = []
    for _ in range(n_boot):
        pick = groups[rng.integers(0, groups.size, groups.size)]
        a = np.concatenate([by_group[g][0] for g in pick])
        b = np.concatenate([by_group[g][1] for g in pick])
        if a.size and b.size:
            boots.append(np.median(a) - np.median(b))
    lo, hi = (np.percentile(boots, [2.5, 97.5]).tolist() if boots else (None, None))
    return {"measure": measure, "control": control, "difference": diff,
            "median_flagged": float(np.median(fl[measure])),
            "median_control": float(np.median(co[measure])),
            "n_flagged": len(fl), "n_control": len(co), "groups": int(groups.size),
            "interval": {"kind": f"percentile, {len(boots)} group resamples (seed {seed})",
                         "level": 0.95, "low": lo, "high": hi},
            "status": "completed"}
