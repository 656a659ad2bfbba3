"""Cohort-level figures of a re-scoring, per view (METHODS §5.7): the numbers a paper reports.

For each view, over the entries scored on it (the **cohort**: scoreable, not excluded, rank
metric defined on the view; every other entry is listed with the reason it is out):

- **Δ**: rank metric on the view − on the official view, per entry; its mean and median, each
  with a percentile bootstrap interval over entries (entries resampled with replacement, seeded);
- **rank changes**: entries whose rank differs from their official rank, and the largest
  |official rank − view rank| with the entries that reach it;
- **Spearman ρ** of the view's scores with the official view's and with the final ranking's;
- **equal-source Δ**: the same Δ with every score averaged over sources with equal weight
  (mean over sources of the per-source value), and the equal-source − pooled difference on the
  view itself.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.evaluation.uncertainty import percentile_interval
from splitscope.options import RunOptions

#: the equal-source counterpart of each rank metric (balanced accuracy over the classes
#: present in each source, since a source need not hold every class)
EQUAL_SOURCE = {"organizer_score": "equal_source_organizer_score_present",
                "balanced_accuracy": "equal_source_balanced_accuracy_present",
                "macro_auc": "equal_source_macro_auc"}


def entry_bootstrap(values, n_boot: int = RunOptions.resamples, seed: int = RunOptions.seed, level: float = 0.95) -> dict:
    """Mean and median of per-entry values with percentile bootstrap intervals over entries."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    out = {"n": int(v.size), "mean": float(v.mean()) if v.size else None,
           "median": float(np.median(v)) if v.size else None, "interval": None}
    if v.size >= 2 and n_boot:
        idx = np.random.default_rng(seed).integers(0, v.size, (n_boot, v.size))
        draws = v[idx]
        mean_lo, mean_hi = percentile_interval(draws.mean(axis=1), level)
        med_lo, med_hi = percentile_interval(np.median(draws, axis=1), level)
        out["interval"] = {
            "mean": {"low": mean_lo, "high": mean_hi}, "median": {"low": med_lo, "high": med_hi},
            "level": level, "n_boot": n_boot, "seed": seed,
            "kind": (f"percentile bootstrap {level:.0%} interval over {v.size} entries "
                     f"(entries resampled with replacement), {n_boot} resamples, seed {seed}")}
    return out


def view_aggregates(scores: pd.DataFrame, ranks: pd.DataFrame, spearman: pd.DataFrame,
                    verdicts: pd.DataFrame, views: list[str], metric: str = "organizer_score",
                    n_boot: int = RunOptions.resamples, seed: int = RunOptions.seed) -> list[dict]:
    """One dict per view (see module docstring), each figure with its n and the cohort."""
    out_of_cohort = []
    for r in verdicts.itertuples():
        if bool(getattr(r, "excluded", False)):
            out_of_cohort.append({"entry": r.entry, "why": "excluded (--exclude)"})
        elif not bool(r.scoreable):
            reasons = list(r.reasons) if isinstance(r.reasons, (list, tuple)) else [r.reasons]
            out_of_cohort.append({"entry": r.entry,
                                  "why": "not scoreable: " + "; ".join(map(str, reasons))})
    es_col = EQUAL_SOURCE.get(metric)
    sp = spearman.set_index("view") if len(spearman) else pd.DataFrame()
    official = scores[scores["view"] == "official"].set_index("entry")
    result = []
    for view in views:
        s = scores[scores["view"] == view].set_index("entry")
        r = ranks[ranks["view"] == view].set_index("entry")
        defined = s[metric].notna() & s.index.map(official[metric]).notna()
        cohort = list(s.index[defined])
        undefined = [{"entry": e, "why": f"{metric} undefined on this view or the official view"}
                     for e in s.index[~defined]]
        r = r.loc[cohort]
        rc = r["rank_change"].astype("float64").to_numpy()
        largest = int(np.nanmax(np.abs(rc))) if rc.size else 0
        rec = {"view": view, "metric": metric,
               "cohort": {"n": len(cohort), "entries": cohort,
                          "out": out_of_cohort + undefined},
               "delta": {"definition": f"{metric}(view) − {metric}(official), per entry",
                         **entry_bootstrap(r[f"delta_{metric}"], n_boot, seed)},
               "rank_changes": {
                   "n": len(cohort), "entries_changed": int((rc != 0).sum()),
                   "largest_abs": largest,
                   "largest_entries": [f"{e} ({int(c):+d})" for e, c in zip(r.index, rc)
                                       if largest and abs(c) == largest],
                   "rule": "rank 1 = best, ties share the lowest rank; change = official rank "
                           "− view rank"}}
        row = sp.loc[view] if view in sp.index else None
        rec["spearman_official"] = {
            "rho": _num(row, "rho_official"), "p": _num(row, "p_official"), "n": len(cohort)}
        if row is not None and "rho_final" in sp.columns:
            rec["spearman_final"] = {"rho": _num(row, "rho_final"), "p": _num(row, "p_final"),
                                     "n": int(row["entries_with_final"]),
                                     "missing_final": list(row["missing_final"])}
        else:
            rec["spearman_final"] = None
        rec["equal_source"] = _equal_source(s.loc[cohort], official, metric, es_col, n_boot,
                                            seed)
        result.append(rec)
    return result


def _equal_source(s: pd.DataFrame, official: pd.DataFrame, metric: str, es_col: str | None,
                  n_boot: int, seed: int) -> dict:
    if es_col is None or es_col not in s.columns or not s[es_col].notna().any():
        return {"status": "not assessed", "reason": "no source column in the truth, or no "
                                                    "entry scored per source"}
    es_view = s[es_col].to_numpy(dtype=float)
    es_off = s.index.map(official[es_col]).to_numpy(dtype=float)
    return {"status": "completed", "column": es_col,
            "delta": {"definition": f"{es_col}(view) − {es_col}(official), per entry",
                      **entry_bootstrap(es_view - es_off, n_boot, seed)},
            "minus_pooled": {"definition": f"{es_col} − {metric} on this view, per entry",
                             **entry_bootstrap(es_view - s[metric].to_numpy(dtype=float),
                                               n_boot, seed)}}


def _num(row, key):
    if row is None or key not in row.index:
        return None
    v = float(row[key])
    return v if np.isfinite(v) else None


__all__ = ["EQUAL_SOURCE", "entry_bootstrap", "view_aggregates"]
