"""Re-scoring of challenge entries on evaluation views (METHODS §5.7).

For a folder of submissions: a scoreability verdict per entry (with every reason), and for every
scoreable entry that is not excluded, its metrics on every view; per view the delta against the
official view, ranks (1 = best by the ranking metric, ties share the lowest rank) and rank
changes (official rank − view rank: positive means the entry moved up); the Spearman correlation
of every view's ranking with a final ranking (e.g. the test-set scores); and, when reported
scores are given, the absolute error between reported and recomputed scores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from splitscope.errors import InputError
from splitscope.evaluation.aggregates import view_aggregates
from splitscope.evaluation.options import ReadOptions
from splitscope.evaluation.predictions import (
    Predictions,
    Truth,
    entry_key,
    entry_name,
    list_prediction_files,
    read_predictions,
)
from splitscope.evaluation.scoreability import Verdict, check_scoreability
from splitscope.evaluation.uncertainty import bootstrap_metrics
from splitscope.evaluation.views import View, official_view, score_view
from splitscope.options import RunOptions
from splitscope.records.exports import write_csv

RANK_METRICS = ("organizer_score", "balanced_accuracy", "macro_auc")
SCORE_COLUMNS = ("balanced_accuracy", "macro_auc", "organizer_score", "accuracy",
                 "balanced_accuracy_present", "macro_f1", "macro_auprc", "ece", "brier", "nll",
                 "equal_source_balanced_accuracy_present", "equal_source_macro_auc",
                 "equal_source_organizer_score_present", "equal_source_accuracy")
_REPORTED_SYNONYMS = {"mean_auc": "macro_auc", "macro_auc": "macro_auc", "auc": "macro_auc",
                      "balanced_accuracy": "balanced_accuracy", "ba": "balanced_accuracy",
                      "organizer_score": "organizer_score", "score": "organizer_score",
                      "final_score": "organizer_score"}


@dataclass
class RescoreResult:
    """Everything :func:`rescore` measured; tables keyed by ``entry`` (and ``view``)."""

    verdicts: pd.DataFrame
    scores: pd.DataFrame  # one row per (entry, view)
    ranks: pd.DataFrame  # one row per (entry, view): score, delta, rank, rank_change
    spearman: pd.DataFrame  # one row per view (vs final and vs official ranking)
    reported: pd.DataFrame | None = None  # reported vs recomputed
    views: list[dict] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    per_source: pd.DataFrame | None = None
    #: scores of each scored entry aligned to the truth order (entry → array), for callers
    #: that go on with them (calibration, thresholds) without aligning again
    aligned: dict = field(default_factory=dict, repr=False)
    #: per view: Δ, rank changes, Spearman, equal-source Δ over the cohort (see
    #: :mod:`splitscope.evaluation.aggregates`)
    aggregates: list = field(default_factory=list)
    #: verdicts of the final ranking's entries, when it was scored from a folder
    final_verdicts: pd.DataFrame | None = None

    def summary(self) -> dict:
        """Small JSON-ready summary with stable keys."""
        v = self.verdicts
        out = {
            "entries": len(v), "scoreable": int(v["scoreable"].sum()),
            "excluded": self.params.get("exclude", []),
            "not_scoreable": [
                {"entry": r.entry, "reasons": list(r.reasons)} for r in v.itertuples()
                if not r.scoreable
            ],
            "views": self.views,
            "params": self.params,
            "ranges": {},
            "spearman": _records(self.spearman),
            "aggregates": self.aggregates,
        }
        for view, g in self.scores.groupby("view", sort=False):
            out["ranges"][view] = {
                m: {"min": _f(g[m].min()), "max": _f(g[m].max()), "entries": int(g[m].notna().sum())}
                for m in ("balanced_accuracy", "macro_auc", "organizer_score") if m in g}
        if self.reported is not None and len(self.reported):
            out["reported_abs_error_max"] = _f(self.reported["abs_error"].max())
        return out

    def to_json(self) -> dict:
        """Every table as records, plus the summary."""
        out = {"summary": self.summary(), "verdicts": _records(self.verdicts),
               "scores": _records(self.scores), "ranks": _records(self.ranks),
               "spearman": _records(self.spearman)}
        if self.reported is not None:
            out["reported"] = _records(self.reported)
        if self.final_verdicts is not None:
            out["final_verdicts"] = _records(self.final_verdicts)
        return out

    def json_text(self) -> str:
        """:meth:`to_json` as the text printed by ``--json`` and written to ``rescore.json``."""
        return json.dumps(_clean(self.to_json()), indent=2, sort_keys=True, default=str)

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write ``verdicts.csv``, ``scores.csv``, ``ranks.csv``, ``spearman.csv``,
        ``reported.csv`` (when any), ``per_source.csv`` and ``rescore.json``."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in ("verdicts", "scores", "ranks", "spearman", "reported", "per_source"):
            table = getattr(self, name)
            if table is None:
                continue
            p = out_dir / f"{name}.csv"
            write_csv(table, p)  # list cells as JSON text, formula-leading cells neutralised
            written.append(p)
        p = out_dir / "rescore.json"
        p.write_text(self.json_text())
        written.append(p)
        return written


def _f(x) -> float | None:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if np.isfinite(x) else None


def _clean(v):
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, (np.generic,)):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return None
    if v is pd.NA or v is pd.NaT:
        return None
    return v


def _records(table: pd.DataFrame | None) -> list[dict]:
    if table is None:
        return []
    return [_clean(r) for r in table.to_dict(orient="records")]


# --------------------------------------------------------------------------------------------


def load_entries(entries, *, score_kind="score", sheet=None, read: ReadOptions | None = None,
                 unreadable: list | None = None) -> list[Predictions]:
    """Prediction files of a folder (or a list of files / :class:`Predictions`) read with
    their declared score kind; ``score_kind`` is one kind for all or a mapping entry → kind
    (keys matched with :func:`entry_key`; unmatched entries get ``mapping.get('*', 'score')``).

    A file that cannot be read raises :class:`InputError`, unless ``unreadable`` is a list:
    then the file is left out and an unscoreable :class:`Verdict` with the reason is appended
    to it, so one broken submission never stops the others from being scored."""
    if isinstance(entries, (str, Path)):
        entries = list_prediction_files(entries) if Path(entries).is_dir() else [Path(entries)]
    out = []
    for item in entries:
        if isinstance(item, Predictions):
            out.append(item)
            continue
        name = entry_name(Path(item).stem)
        kind = _kind_for(score_kind, name)
        try:
            out.append(read_predictions(item, score_kind=kind, sheet=sheet, name=name,
                                        read=read))
        except InputError as exc:
            if unreadable is None:
                raise
            unreadable.append(Verdict(entry=name, file=str(item), scoreable=False,
                                      reasons=[f"file cannot be read: {exc}"],
                                      score_kind=kind))
    names = [p.name for p in out] + [v.entry for v in unreadable or []]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"several files give the same entry name: {dup}; rename the files")
    return out


def _kind_for(score_kind, name: str) -> str:
    if isinstance(score_kind, str):
        return score_kind
    lookup = {entry_key(k): v for k, v in score_kind.items()}
    return lookup.get(entry_key(name), lookup.get("*", "score"))


def read_reported(path_or_table) -> pd.DataFrame:
    """Reported scores: a table with an ``entry`` (or ``team``) column, optionally ``view``,
    and metric columns (``balanced_accuracy``/``ba``, ``macro_auc``/``mean_auc``,
    ``organizer_score``/``score``). Returned long: entry, view, metric, reported."""
    if isinstance(path_or_table, pd.DataFrame):
        table = path_or_table.copy()
    else:
        from splitscope.manifest import read_table

        table = read_table(Path(path_or_table))
    cols = {str(c).strip().lower(): c for c in table.columns}
    ecol = next((cols[c] for c in ("entry", "team", "name", "submission") if c in cols), None)
    if ecol is None:
        raise InputError(f"reported scores need an entry (or team) column; found: "
                         f"{', '.join(map(str, table.columns))}")
    mcols = {cols[c]: _REPORTED_SYNONYMS[c] for c in cols if c in _REPORTED_SYNONYMS}
    if not mcols:
        raise InputError(f"reported scores have no metric column (balanced_accuracy, macro_auc "
                         f"or mean_auc, organizer_score); found: "
                         f"{', '.join(map(str, table.columns))}")
    vcol = cols.get("view")
    rows = []
    for _, r in table.iterrows():
        for col, metric in mcols.items():
            value = pd.to_numeric(pd.Series([r[col]]), errors="coerce").iloc[0]
            if pd.isna(value):
                continue
            rows.append({"entry": str(r[ecol]), "view": str(r[vcol]) if vcol else "official",
                         "metric": metric, "reported": float(value)})
    return pd.DataFrame(rows, columns=["entry", "view", "metric", "reported"])


def rescore(
    entries,
    truth: Truth,
    views: list[View] | None = None,
    *,
    score_kind="score",
    path_mode: str = "exact",
    reported=None,
    final: pd.DataFrame | RescoreResult | None = None,
    exclude=(),
    rank_metric: str = "organizer_score",
    bootstrap: int = 0,
    seed: int = RunOptions.seed,
    equal_source: bool = True,
    sheet=None,
    read: ReadOptions | None = None,
    unreadable=(),
    entry_bootstrap: int = 2000,
) -> RescoreResult:
    """Score a folder of submissions on every view.

    A submission file that cannot be read is an unscoreable entry with its reason (it never
    stops the others); ``unreadable`` adds such verdicts from an earlier
    :func:`load_entries` call.

    Parameters
    ----------
    entries : folder, list of files, or list of :class:`Predictions`
    truth : Truth
    views : list of View, optional
        The official view is always first (added when absent).
    score_kind : str or mapping
        Declared score kind for all entries, or per entry (see :func:`load_entries`).
    path_mode : {"exact", "basename"}
        Alignment rule; ``basename`` is an explicit repair and is recorded in every row.
    reported : path or DataFrame, optional
        Reported scores (see :func:`read_reported`).
    final : DataFrame or RescoreResult, optional
        Final ranking: a table with ``entry`` and ``final_score`` (or a :class:`RescoreResult`
        whose official-view ``rank_metric`` is used), matched by :func:`entry_key`.
    exclude : iterable of str
        Entry names left out of scores and ranks (cohort filter), matched by
        :func:`entry_key`; listed in the result.
    bootstrap : int
        Resamples of a percentile case bootstrap per (entry, view); 0 for none.
    read : ReadOptions, optional
        How prediction files are read (header row, CSV dialect, workbook engine and cache).
    entry_bootstrap : int
        Resamples of the bootstrap over entries behind the per-view aggregates' intervals.
    """
    if rank_metric not in RANK_METRICS:
        raise InputError(f"rank metric {rank_metric!r} not one of {RANK_METRICS}")
    unreadable = list(unreadable)
    preds = load_entries(entries, score_kind=score_kind, sheet=sheet, read=read,
                         unreadable=unreadable)
    views = list(views or [])
    if not views or views[0].name != "official":
        views = [official_view(truth)] + [v for v in views if v.name != "official"]
    names = [v.name for v in views]
    if len(set(names)) != len(names):
        raise InputError(f"view names must be distinct; got {names}")
    excl_keys = {entry_key(e) for e in exclude}
    entry_names = [p.name for p in preds] + [v.entry for v in unreadable]
    unknown_excl = sorted(excl_keys - {entry_key(n) for n in entry_names})
    if unknown_excl:
        raise InputError(f"--exclude names no entry: {unknown_excl}; entries: "
                         f"{', '.join(entry_names)}")

    verdict_rows, score_rows, source_rows = [], [], []
    aligned_by_entry: dict = {}
    for verdict in unreadable:
        verdict_rows.append({**verdict.row(), "excluded": entry_key(verdict.entry) in excl_keys})
    for pred in preds:
        verdict, aligned = check_scoreability(pred, truth, path_mode)
        excluded = entry_key(pred.name) in excl_keys
        row = verdict.row()
        row["excluded"] = excluded
        verdict_rows.append(row)
        if aligned is None or excluded:
            continue
        aligned_by_entry[pred.name] = aligned
        for view in views:
            res = score_view(truth, aligned, view, pred.score_kind, equal_source=equal_source)
            rec = {"entry": pred.name, "view": view.name, "rows": res.get("rows", 0),
                   "path_mode": path_mode, "score_kind": pred.score_kind}
            for col in SCORE_COLUMNS:
                rec[col] = res.get(col, np.nan)
            rec["balanced_accuracy_reason"] = res.get("balanced_accuracy_reason")
            rec["macro_auc_skipped"] = res.get("macro_auc_skipped")
            rec["probability_reason"] = res.get("probability_reason")
            if bootstrap and view.n:
                b = bootstrap_metrics(truth.labels[view.rows], aligned[view.rows],
                                      n_boot=bootstrap, seed=seed)
                for m in ("balanced_accuracy", "macro_auc", "organizer_score"):
                    rec[f"{m}_low"], rec[f"{m}_high"] = b[m]["low"], b[m]["high"]
                rec["interval"] = b["kind"]
            score_rows.append(rec)
            for ps in res.get("per_source", []):
                source_rows.append({"entry": pred.name, "view": view.name, **ps})
    verdicts = pd.DataFrame(verdict_rows)
    scores = pd.DataFrame(score_rows)
    if scores.empty:
        scores = pd.DataFrame(columns=["entry", "view", "rows", *SCORE_COLUMNS])
    ranks = rank_table(scores, rank_metric)
    final_table = _final_table(final, rank_metric)
    spearman = spearman_table(ranks, final_table, rank_metric)
    rep = None
    if reported is not None:
        rep = compare_reported(read_reported(reported), scores)
    aggregates = view_aggregates(scores, ranks, spearman, verdicts, names, rank_metric,
                                 entry_bootstrap, seed)
    params = {"path_mode": path_mode, "rank_metric": rank_metric,
              "exclude": sorted(e for e in exclude), "bootstrap": bootstrap, "seed": seed,
              "entry_bootstrap": entry_bootstrap,
              "truth": truth.origin, "truth_rows": len(truth), "classes": truth.classes,
              "score_kind": score_kind if isinstance(score_kind, str) else dict(score_kind),
              "rank_rule": "1 = best; ties share the lowest rank (min); rank_change = "
                           "official rank − view rank",
              "final": None if final_table is None else final_table.attrs.get("origin", "table")}
    return RescoreResult(verdicts=verdicts, scores=scores, ranks=ranks, spearman=spearman,
                         reported=rep, views=[v.to_dict() for v in views], params=params,
                         per_source=pd.DataFrame(source_rows) if source_rows else None,
                         aligned=aligned_by_entry, aggregates=aggregates,
                         final_verdicts=final.verdicts if isinstance(final, RescoreResult)
                         else None)


def rank_table(scores: pd.DataFrame, metric: str = "organizer_score") -> pd.DataFrame:
    """Per (entry, view): the ranking metric, its official-view value and delta against it
    (columns ``official_<metric>``, ``delta_<metric>``), the rank
    within the view (1 = best, ties share the lowest rank) and the rank change."""
    cols = ["entry", "view", metric, f"official_{metric}", f"delta_{metric}", "rank",
            "official_rank", "rank_change"]
    if scores.empty:
        return pd.DataFrame(columns=cols)
    t = scores[["entry", "view", metric]].copy()
    t["rank"] = t.groupby("view", sort=False)[metric].rank(ascending=False, method="min")
    off = t[t["view"] == "official"].set_index("entry")
    t[f"official_{metric}"] = t["entry"].map(off[metric])
    t["official_rank"] = t["entry"].map(off["rank"])
    t[f"delta_{metric}"] = t[metric] - t[f"official_{metric}"]
    t["rank_change"] = t["official_rank"] - t["rank"]
    for c in ("rank", "official_rank", "rank_change"):
        t[c] = t[c].astype("Int64")
    return t[cols]


def _final_table(final, metric: str) -> pd.DataFrame | None:
    if final is None:
        return None
    if isinstance(final, RescoreResult):
        off = final.scores[final.scores["view"] == "official"]
        table = pd.DataFrame({"entry": off["entry"].to_numpy(),
                              "final_score": off[metric].to_numpy(dtype=float)})
        table.attrs["origin"] = (f"{final.params.get('truth')} official view, {metric}, path "
                                 f"mode {final.params.get('path_mode')}")
        return table
    if not {"entry", "final_score"} <= set(final.columns):
        raise InputError(f"final ranking needs columns entry, final_score; found "
                         f"{', '.join(map(str, final.columns))}")
    return final


def spearman_table(ranks: pd.DataFrame, final: pd.DataFrame | None,
                   metric: str = "organizer_score") -> pd.DataFrame:
    """Per view: Spearman ρ of the view's scores with the official view's and with the final
    ranking's scores, over the entries present in both (counted; missing entries listed)."""
    rows = []
    fin = None
    if final is not None:
        fin = pd.Series(final["final_score"].to_numpy(dtype=float),
                        index=[entry_key(e) for e in final["entry"]])
    for view, g in ranks.groupby("view", sort=False):
        keys = [entry_key(e) for e in g["entry"]]
        vals = pd.Series(g[metric].to_numpy(dtype=float), index=keys)
        rec = {"view": view, "metric": metric, "entries": int(vals.notna().sum())}
        off = pd.Series(g[f"official_{metric}"].to_numpy(dtype=float), index=keys)
        rec["rho_official"], rec["p_official"], _ = _spearman(vals, off)
        if fin is not None:
            rho, p, n = _spearman(vals, fin)
            rec.update(rho_final=rho, p_final=p, entries_with_final=n,
                       missing_final=[e for e, k in zip(g["entry"], keys)
                                      if k not in fin.index or pd.isna(fin.get(k))])
        rows.append(rec)
    return pd.DataFrame(rows)


def _spearman(a: pd.Series, b: pd.Series) -> tuple[float, float, int]:
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    n = len(both)
    if n < 3 or both["a"].nunique() < 2 or both["b"].nunique() < 2:
        return float("nan"), float("nan"), n
    res = spearmanr(both["a"], both["b"])
    return float(res.statistic), float(res.pvalue), n


def compare_reported(reported: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """Reported vs recomputed per (entry, view, metric), with the absolute error; reported
    entries without a recomputed score are kept with ``recomputed`` NaN and a reason."""
    rows = []
    lookup = {(entry_key(r.entry), r.view): r for r in scores.itertuples()}
    for r in reported.itertuples():
        s = lookup.get((entry_key(r.entry), r.view))
        rec = {"entry": r.entry, "view": r.view, "metric": r.metric, "reported": r.reported}
        if s is None:
            rec.update(recomputed=np.nan, abs_error=np.nan,
                       reason="no recomputed score (entry not scoreable, excluded or unknown)")
        else:
            value = float(getattr(s, r.metric))
            rec.update(recomputed=value, abs_error=abs(value - r.reported), reason=None)
        rows.append(rec)
    return pd.DataFrame(rows, columns=["entry", "view", "metric", "reported", "recomputed",
                                       "abs_error", "reason"])


def final_ranking(entries, truth: Truth, *, score_kind="score", path_mode: str = "exact",
                  metric: str = "organizer_score", exclude=(),
                  read: ReadOptions | None = None) -> RescoreResult:
    """Score a second folder (e.g. the test submissions) on its official view only, to serve
    as the final ranking of :func:`rescore`."""
    return rescore(entries, truth, None, score_kind=score_kind, path_mode=path_mode,
                   rank_metric=metric, exclude=exclude, equal_source=False, read=read)


__all__ = ["RescoreResult", "compare_reported", "final_ranking", "load_entries",
           "rank_table", "read_reported", "rescore", "spearman_table"]
