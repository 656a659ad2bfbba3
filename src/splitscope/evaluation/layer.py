"""The evaluation layer's audit entry point: saved predictions → audit records (METHODS §5, §6).

:func:`audit_predictions` scores one or many prediction files against a truth list on the
evaluation views and returns a :class:`splitscope.records.LayerResult` whose records say, per
entry, whether it is scoreable (and why not), its metrics per view with bootstrap intervals, the
threshold transfer gap and temperature-scaling effect where two populations are available, and,
for several entries, a re-scoring summary (ranks, Spearman correlations).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from splitscope.boundary import select
from splitscope.errors import InputError
from splitscope.evaluation import metrics as M
from splitscope.evaluation import reading
from splitscope.evaluation.calibration import summarize_temperature, temperature_transfer
from splitscope.evaluation.options import EvaluationOptions
from splitscope.evaluation.predicates import (
    ATTRIBUTION_METRICS,
    BALANCED_ACCURACY,
    LAYER,
    RESCORING,
    ROLES,
    SCOREABILITY,
    SCORECARD,
    TEMPERATURE_SCALING,
    THRESHOLD_TRANSFER,
)
from splitscope.evaluation.predictions import Predictions, Truth, read_truth
from splitscope.evaluation.rescore import RescoreResult, load_entries, rescore
from splitscope.evaluation.thresholds import threshold_transfer_multiclass
from splitscope.evaluation.uncertainty import bootstrap_metrics
from splitscope.evaluation.views import (
    View,
    official_view,
    parse_view,
    score_view,
    view_from_list,
)
from splitscope.options import RunOptions
from splitscope.records import AuditRecord, LayerResult, Uncertainty, file_fingerprint
from splitscope.records.paths import input_name, name_under
from splitscope.threads import blas_within_workers


def _truth_from(manifest_or_truth, classes=None, query: str | None = None) -> Truth:
    if isinstance(manifest_or_truth, Truth):
        return manifest_or_truth
    if isinstance(manifest_or_truth, pd.DataFrame):
        m = manifest_or_truth
        if "label" not in m.columns:
            raise InputError("the manifest has no label column; evaluation needs labels")
        all_classes = classes or sorted(m["label"].dropna().astype(str).unique().tolist())
        if isinstance(query, list):  # splits chosen by _auto_query
            m = m[m["split"].astype("string").isin(query).fillna(False)]
        elif query:
            pop = select(m, query)
            m = m[m["row"].isin(pop.rows)]
        m = m[m["label"].notna()]
        if m.empty:
            raise InputError(f"no labelled manifest rows for evaluation (query {query!r})")
        return read_truth(m, all_classes)
    return read_truth(Path(manifest_or_truth), classes)


def _auto_query(manifest_or_truth, preds, path_mode: str) -> tuple[list | None, str | None]:
    """The splits of a manifest that hold the entries' paths (see
    :func:`audit_predictions`), with a note saying so; ``(None, None)`` otherwise."""
    from splitscope.evaluation.predictions import path_keys

    m = manifest_or_truth
    if not isinstance(m, pd.DataFrame) or "split" not in m.columns or not preds:
        return None, None
    keys: set = set()
    for pred in preds:
        if pred.path_column is not None:
            keys |= set(path_keys(pred.table[pred.path_column].astype("string").to_numpy(
                dtype=object, na_value=None), path_mode))
    if not keys:
        return None, None
    hits = pd.Series(path_keys(m["path"].to_numpy(dtype=object), path_mode),
                     dtype="object").isin(keys).to_numpy()
    counts = m.loc[hits, "split"].astype("string").value_counts().sort_index()
    if counts.empty:
        return None, "no manifest path matches the predictions; every labelled row is the truth"
    splits = [str(x) for x in counts.index]
    held = ", ".join(f"{k!r} {int(v):,}" for k, v in counts.items())
    return splits, (f"truth rows chosen automatically: the split(s) holding the predicted "
                    f"paths ({held} of {len(keys):,} distinct path keys)")


def _boundary(view: View, truth: Truth) -> dict:
    return {"name": f"{view.name} (evaluation view)",
            "query": {"name": view.name, "rows": view.n},
            "reference": {"name": "truth list", "rows": len(truth)}}


def _u(b: dict, metric: str) -> Uncertainty:
    return Uncertainty(kind=b["kind"], level=b["level"], low=b[metric]["low"],
                       high=b[metric]["high"],
                       detail={"undefined_resamples": b[metric]["undefined_resamples"]})


@blas_within_workers
def audit_predictions(
    manifest_or_truth,
    predictions,
    *,
    views=None,
    classes: list[str] | None = None,
    query: str | None = "auto",
    score_kind="score",
    path_mode: str = "exact",
    n_boot: int = RunOptions.resamples,
    seed: int = RunOptions.seed,
    cluster: bool = False,
    fit: str | None = None,
    evaluate: str | None = None,
    reported=None,
    final=None,
    exclude=(),
    read=None,
    workers: int | None = None,
) -> LayerResult:
    """Audit saved predictions against a truth list.

    Parameters
    ----------
    manifest_or_truth : DataFrame, Truth or path
        A manifest (labels from ``label``; rows chosen by ``query``), a :class:`Truth`, or a
        truth file (CSV/Parquet/XLSX; one-hot class columns or a label column).
    query : str or None
        Selector of the manifest rows the predictions are scored against. ``"auto"`` (default)
        takes the split(s) holding the entries' paths (path keys of ``path_mode``) and
        records that choice in the scoreability record; ``None`` takes every labelled row.
        The task's classes are always every label of the manifest.
    predictions : path, Predictions or list
        One prediction file, a folder of them (one entry each), or :class:`Predictions`.
    views : list of View, of spec strings or of functions of the truth, optional
        Evaluation views besides the official one (specs as in
        :func:`splitscope.evaluation.views.parse_view`; a function gets the
        :class:`~splitscope.evaluation.predictions.Truth` and returns a View).
    score_kind : str or mapping
        Declared score kind (``probability``, ``logit``, ``score``), for all or per entry.
    path_mode : {"exact", "basename"}
        Alignment rule; ``basename`` is an explicit, recorded repair.
    n_boot, seed : int
        Percentile bootstrap over cases (cluster bootstrap over the truth's groups when
        ``cluster``); 0 resamples for none.
    fit, evaluate : str, optional
        Selectors (over the truth's ``split``/``source``/... columns) of the populations
        thresholds and temperature are fitted on and evaluated on; default ``val`` → ``test``
        when the truth holds both splits, else these records are "not assessed". With two
        populations every view (the official one too) is restricted to the evaluated one:
        the scores are those of the population the fitted thresholds are tested on, never of
        the one they were fitted on (METHODS §5.3–5.4).
    reported, final, exclude
        Passed to :func:`splitscope.evaluation.rescore.rescore`.
    read : ReadOptions, optional
        How the prediction files are read (sheet, header row, CSV dialect, parsed-workbook
        cache; :class:`splitscope.evaluation.options.ReadOptions`); default: detected.
    workers : int, optional
        BLAS/OpenMP threads at most for the bootstrap's matrix products (the run's
        ``workers``; default: the pools as they are).

    Returns
    -------
    LayerResult
        Records (layer ``evaluation``) and tables ``evaluation_views`` (row-keyed view
        membership), ``evaluation_verdicts``, ``evaluation_scores``, ``evaluation_ranks``.
    """
    preds, unreadable = _read_entries(predictions, score_kind, read)
    truth, query_note = _read_truth(manifest_or_truth, preds, classes, query, path_mode)
    pop = _populations(truth, fit, evaluate)
    view_list = _views(truth, views, path_mode, pop)
    res = rescore(preds, truth, view_list, score_kind=score_kind, path_mode=path_mode,
                  reported=reported, final=final, exclude=exclude, unreadable=unreadable)
    inputs = _fingerprints(manifest_or_truth, preds, predictions)
    res.verdicts = _named(res.verdicts, predictions)
    records = [_scoreability_record(res.verdicts, truth, path_mode, query_note, inputs)]
    aligned = {pred.name: (pred, res.aligned[pred.name])
               for pred in preds if pred.name in res.aligned}
    records += _metric_records(truth, aligned, view_list, path_mode, n_boot=n_boot, seed=seed,
                               cluster=cluster)
    records += _rescoring_records(res)
    records += _transfer_records(truth, aligned, pop)
    return LayerResult(records, _tables(truth, view_list, res))


# ------------------------------------------------------------------ the truth and the entries


def _read_entries(predictions, score_kind, read) -> tuple[list[Predictions], list]:
    """The entries to score, and the verdicts of the files that could not be read (each an
    unscoreable entry with its reason, never a stop)."""
    if isinstance(predictions, Predictions):
        return [predictions], []
    unreadable: list = []
    preds = load_entries(predictions, score_kind=score_kind, unreadable=unreadable, read=read)
    return preds, unreadable


def _read_truth(manifest_or_truth, preds, classes, query, path_mode) -> tuple[Truth, str | None]:
    """The truth the entries are scored against, with a note when its rows were chosen
    automatically (``query="auto"``: the splits holding the entries' paths)."""
    note = None
    if query == "auto":
        query, note = _auto_query(manifest_or_truth, preds, path_mode)
    return _truth_from(manifest_or_truth, classes, query), note


def _views(truth: Truth, views, path_mode: str, pop: _Populations | None = None) -> list[View]:
    """The official view first, then those asked for: views, functions of the truth or specs;
    each restricted to the evaluated population when there are two (``pop``)."""
    out = [official_view(truth)]
    for v in views or []:
        out.append(v if isinstance(v, View) else v(truth) if callable(v)
                   else parse_view(truth, v, path_mode=path_mode))
    if pop is None:
        return out
    return [View(v.name, v.mask & pop.evaluated,
                 f"{v.definition}, {pop.evaluate} rows only ({pop.fit} rows fit the thresholds "
                 f"and the temperature)", {**v.params, "population": pop.evaluate})
            for v in out]


def _fingerprints(manifest_or_truth, preds: list[Predictions], given=None) -> list[dict]:
    """The input files behind the records: a truth file, and every entry's file on disk, each
    named as published (:func:`splitscope.records.paths.name_under` the predictions
    ``given``)."""
    inputs = []
    if isinstance(manifest_or_truth, (str, Path)):
        inputs.append({**file_fingerprint(manifest_or_truth),
                       "path": input_name(manifest_or_truth)})
    inputs += [{**file_fingerprint(p.source), "path": name_under(p.source, given)}
               for p in preds if p.source and Path(p.source).exists()]
    return inputs


def _named(verdicts: pd.DataFrame, given) -> pd.DataFrame:
    """The verdicts with each entry's ``file`` named as published (:func:`_fingerprints`)."""
    if "file" not in verdicts.columns or not isinstance(given, (str, os.PathLike)):
        return verdicts
    out = verdicts.copy()
    out["file"] = [name_under(f, given) for f in verdicts["file"]]
    return out


# ----------------------------------------------------------------------------- scoreability


def _alignment_rules(path_mode: str) -> list[str]:
    """The rules an entry must meet to be scored, the alignment rule first."""
    return ["full-path alignment (backslash → slash only)" if path_mode == "exact"
            else f"alignment by {path_mode} (opt-in repair)",
            "every class column by exact name",
            "no missing or non-numeric values",
            "no duplicate paths"]


def _scoreability_record(v: pd.DataFrame, truth: Truth, path_mode: str,
                         query_note: str | None, inputs: list[dict]) -> AuditRecord:
    """How many entries can be scored; the others are listed with every reason and are not
    repaired."""
    n_ok = int(v["scoreable"].sum())
    return AuditRecord(
        id="evaluation.scoreability", layer=LAYER,
        title="Scoreability of prediction files against the truth list",
        predicate={"name": SCOREABILITY, "params": {
            "path_mode": path_mode, "rules": _alignment_rules(path_mode)}},
        unit="prediction file (entry)", numerator=n_ok, denominator=len(v),
        scope=(f"{len(v)} entries against {truth.origin} ({len(truth):,} rows"
               + (f"; {query_note}" if query_note else "") + ")"),
        conclusion=(f"{n_ok} of {len(v)} entries are scoreable"
                    + ("" if v["scoreable"].all() else "; the others are reported with every "
                       "reason and not repaired")),
        inputs=inputs,
        details={"verdicts": [{"entry": r.entry, "scoreable": bool(r.scoreable),
                               "reasons": r.reasons, "notes": r.notes}
                              for r in v.itertuples()]})


# ---------------------------------------------------------------- metrics per view, intervals

#: the metrics of a view that its record lists in ``details`` besides balanced accuracy
_DETAIL_METRICS = (
    "accuracy", "balanced_accuracy_present", "macro_auc", "macro_auc_skipped",
    "organizer_score", "macro_f1", "macro_sensitivity", "macro_specificity",
    "macro_auprc", "ece", "brier", "brier_reliability", "brier_resolution",
    "brier_uncertainty", "nll", "probability_reason",
    "equal_source_accuracy", "equal_source_balanced_accuracy_present",
    "equal_source_macro_auc", "equal_source_organizer_score_present")


def _metric_records(truth: Truth, aligned: dict, view_list: list[View], path_mode: str, *,
                    n_boot: int, seed: int, cluster: bool) -> list[AuditRecord]:
    """One record per scoreable entry and non-empty view, entry by entry."""
    groups = truth.group if cluster else None
    if cluster and groups is None:
        raise InputError("cluster bootstrap asked for, but the truth has no group column")
    return [_view_metrics(truth, name, pred, scores, view, path_mode, n_boot=n_boot,
                          seed=seed, groups=groups)
            for name, (pred, scores) in aligned.items() for view in view_list if view.n]


def _bootstrap(truth: Truth, scores: np.ndarray, view: View, *, n_boot: int, seed: int,
               groups) -> dict:
    """Bootstrap intervals of the view's metrics (over cases, or over ``groups``), resampled
    in the order of the released paths so that they do not depend on the order the rows
    were listed in."""
    at = view.rows[np.argsort(truth.paths[view.rows], kind="stable")]
    return bootstrap_metrics(truth.labels[at], scores[at], n_boot=n_boot, seed=seed,
                             groups=None if groups is None else groups[at])


def _metric_details(m: dict, truth: Truth, scores: np.ndarray, view: View, score_kind: str,
                    b: dict | None) -> dict:
    """The view's other metrics, the reliability diagram's data (on the ECE's bins) where the
    scores are probabilities, and the intervals of macro AUC and the organizer score."""
    detail = {k: m.get(k) for k in _DETAIL_METRICS}
    probs, _ = M.to_probabilities(scores[view.rows], score_kind)
    if probs is not None:
        detail["reliability"] = M.reliability_bins(truth.labels[view.rows], probs)
    if b is not None:
        detail["intervals"] = {k: b[k] for k in ("macro_auc", "organizer_score")}
        detail["interval_kind"] = b["kind"]
    return detail


def _view_metrics(truth: Truth, name: str, pred: Predictions, scores: np.ndarray, view: View,
                  path_mode: str, *, n_boot: int, seed: int, groups) -> AuditRecord:
    """An entry's balanced accuracy on one view with its interval (``partial`` when it is
    undefined there, with the reason)."""
    m = score_view(truth, scores, view, pred.score_kind)
    b = _bootstrap(truth, scores, view, n_boot=n_boot, seed=seed, groups=groups) \
        if n_boot else None
    ba = m["balanced_accuracy"]
    defined = np.isfinite(ba)
    return AuditRecord(
        id=f"evaluation.metrics.{name}.{view.name}", layer=LAYER,
        title=f"{name}: balanced accuracy on the {view.name} view",
        boundary=_boundary(view, truth),
        predicate={"name": BALANCED_ACCURACY, "params": {
            "required_classes": truth.classes, "argmax": "first maximum",
            "score_kind": pred.score_kind, "path_mode": path_mode,
            "scores": ("softmax of the tool's own logits" if pred.own_logits
                       else "as supplied"),
            "view": view.to_dict()}},
        unit="evaluation row", denominator=view.n, class_support=m["class_support"],
        estimate=ba if defined else None,
        uncertainty=None if b is None else _u(b, "balanced_accuracy"),
        scope=f"{view.n} rows of view {view.name}",
        conclusion=(f"BA {ba:.4f}, macro AUC {m['macro_auc']:.4f}, organizer score "
                    f"{m['organizer_score']:.4f}" if defined else None),
        status="completed" if defined else "partial",
        reason=None if defined else m["balanced_accuracy_reason"],
        details=_metric_details(m, truth, scores, view, pred.score_kind, b))


# -------------------------------------------------------------------- the re-scoring summary


def _rescoring_records(res: RescoreResult) -> list[AuditRecord]:
    """With several entries: how their ranks move between views (Spearman ρ of each view's
    ranking with the official one, and with the final ranking when one was given)."""
    if len(res.scores["entry"].unique()) <= 1:
        return []
    sp = res.spearman
    off_rho = sp.set_index("view")["rho_official"].to_dict()
    est = float(sp["rho_final"].iloc[0]) if "rho_final" in sp.columns and len(sp) else None
    return [AuditRecord(
        id="evaluation.rescoring", layer=LAYER,
        title="Re-scoring of entries on evaluation views: ranks and rank correlations",
        predicate={"name": RESCORING, "params": res.params},
        unit="entry", denominator=int(res.scores["entry"].nunique()),
        estimate=est if est is not None and np.isfinite(est) else None,
        scope="scoreable, not excluded entries",
        conclusion=("Spearman ρ of each view's ranking with the official view: "
                    + ", ".join(f"{k} {val:.3f}" for k, val in off_rho.items()
                                if np.isfinite(val))
                    if any(np.isfinite(val) for val in off_rho.values()) else
                    "fewer than 3 scored entries: ranks only, no rank correlation"),
        details={"spearman": sp.to_dict(orient="records"),
                 "max_abs_rank_change": int(res.ranks["rank_change"].abs().max())
                 if len(res.ranks) else 0})]


# ------------------------------------------------------- threshold transfer and calibration


@dataclass(frozen=True)
class _Populations:
    """The population thresholds and temperature are fitted on and the one they are
    evaluated on: their selectors and their masks over the truth's rows."""

    fit: str
    evaluate: str
    fitted: np.ndarray
    evaluated: np.ndarray

    def boundary(self) -> dict:
        return {"name": f"{self.evaluate} ← {self.fit}",
                "query": {"name": self.evaluate, "rows": int(self.evaluated.sum())},
                "reference": {"name": self.fit, "rows": int(self.fitted.sum())}}


def _populations(truth: Truth, fit: str | None, evaluate: str | None) -> _Populations | None:
    """The fit and evaluation populations: those selected, else val → test when the truth
    holds both splits; ``None`` when there are not two."""
    frame = truth.frame()
    if fit is None and evaluate is None:
        splits = set(frame["split"].dropna().astype(str)) if truth.split is not None else set()
        if {"val", "test"} <= splits:
            fit, evaluate = "val", "test"
    if fit is None or evaluate is None:
        return None
    fm = np.isin(frame["row"], select(frame, fit).rows)
    em = np.isin(frame["row"], select(frame, evaluate).rows)
    if not fm.any() or not em.any():
        raise InputError(f"fit population {fit!r} or evaluation population {evaluate!r} is "
                         f"empty in the truth list")
    return _Populations(fit, evaluate, fm, em)


def _transfer_records(truth: Truth, aligned: dict,
                      pop: _Populations | None) -> list[AuditRecord]:
    """Per entry, the threshold transfer gap; then the temperature-scaling summary over the
    entries with probabilities or logits. Both "not assessed" without two populations."""
    if pop is None:
        reason = ("needs two populations (fit and evaluate selectors, or a truth holding both "
                  "val and test rows)")
        return [AuditRecord(id=f"evaluation.{k}", layer=LAYER, title=t,
                            status="not assessed", reason=reason)
                for k, t in (("threshold_transfer", "Threshold transfer gap"),
                             ("temperature_scaling", "Temperature scaling transfer"))]
    out, temps = [], []
    for name, (pred, scores) in aligned.items():
        out.append(_threshold_record(truth, name, scores, pop))
        t = _temperature_run(truth, pred, scores, pop)
        if t is not None:
            temps.append({"entry": name, **t})
    out.append(_temperature_record(temps, pop))
    return out


def _threshold_record(truth: Truth, name: str, scores: np.ndarray,
                      pop: _Populations) -> AuditRecord:
    """What balanced accuracy Youden's per-class thresholds, fitted on one population, lose on
    the other against the (invalid) oracle, mean over classes."""
    y, fm, em = truth.labels, pop.fitted, pop.evaluated
    table = threshold_transfer_multiclass(y[fm], scores[fm], y[em], scores[em], truth.classes)
    you = table[table["rule"] == "youden"]
    gap = float(you["oracle_gap"].mean()) if len(you) else float("nan")
    return AuditRecord(
        id=f"evaluation.threshold_transfer.{name}", layer=LAYER,
        title=f"{name}: threshold fitted on {pop.fit}, evaluated on {pop.evaluate}",
        boundary=pop.boundary(), predicate={"name": THRESHOLD_TRANSFER, "params": {
            "rules": ["default", "youden", "prevalence", "oracle"],
            "per_class": "one versus rest"}},
        unit="class", denominator=len(you),
        estimate=gap if np.isfinite(gap) else None,
        scope="mean over classes of the oracle gap of Youden's threshold (balanced accuracy)",
        conclusion=None if not np.isfinite(gap) else
        f"Youden thresholds fitted on {pop.fit} lose {gap:.4f} balanced accuracy on "
        f"{pop.evaluate} against the (invalid) oracle, mean over classes",
        status="completed" if np.isfinite(gap) else "not assessed",
        reason=None if np.isfinite(gap) else "no class with positives and negatives in both",
        details={"table": table.to_dict(orient="records")})


def _temperature_run(truth: Truth, pred: Predictions, scores: np.ndarray,
                     pop: _Populations) -> dict | None:
    """A temperature fitted on one population and its calibration effect on the other;
    ``None`` where the scores are neither probabilities nor logits, or the fit fails."""
    if pred.score_kind not in ("probability", "logit"):
        return None
    y, fm, em = truth.labels, pop.fitted, pop.evaluated
    try:
        t = temperature_transfer(y[fm], scores[fm], y[em], scores[em], pred.score_kind)
    except InputError:
        return None
    return None if "error" in t else t


def _temperature_record(temps: list[dict], pop: _Populations) -> AuditRecord:
    """In how many runs temperature scaling made the ECE worse on the evaluated population."""
    if not temps:
        return AuditRecord(id="evaluation.temperature_scaling", layer=LAYER,
                           title="Temperature scaling transfer", status="not assessed",
                           reason="no entry declared probabilities or logits")
    tt = pd.DataFrame(temps)
    summ = summarize_temperature(tt)
    return AuditRecord(
        id="evaluation.temperature_scaling", layer=LAYER,
        title=f"Temperature scaling fitted on {pop.fit}, evaluated on {pop.evaluate}",
        boundary=pop.boundary(), predicate={"name": TEMPERATURE_SCALING, "params": {
            "objective": "NLL", "ece_bins": 15, "ece": "top-label"}},
        unit="run", numerator=summ["ece_worse"], denominator=summ["runs"],
        scope="entries with probabilities or logits",
        conclusion=f"ECE got worse after temperature scaling in {summ['ece_worse']} of "
                   f"{summ['runs']} runs",
        details={"runs": tt.to_dict(orient="records"), **summ})


# ------------------------------------------------------------------------------- the tables


def _tables(truth: Truth, view_list: list[View],
            res: RescoreResult) -> dict[str, pd.DataFrame]:
    """The layer's tables: each truth row's view membership, the verdicts, scores and ranks."""
    membership = truth.frame()
    for view in view_list:
        membership[f"in_{view.name}"] = view.mask
    return {"evaluation_views": membership, "evaluation_verdicts": res.verdicts,
            "evaluation_scores": res.scores, "evaluation_ranks": res.ranks}


__all__ = ["AttributionLayer", "EvaluationLayer", "audit_predictions"]


# ------------------------------------------------------------------------- audit layers


def _dedup_removed(context, split: str) -> pd.DataFrame | None:
    """The rows of ``split`` the duplicates layer's deduplicated splits remove (its outcome's
    ``dedup_splits`` table), or None when that layer did not complete or left no such split."""
    done = context.outcomes.get("duplicates")
    if done is None or done.status not in ("completed", "partial"):
        return None
    table = done.result.tables.get("dedup_splits")
    if table is None or not len(table):
        return None
    in_split = (table["split"].astype("string") == split).fillna(False).to_numpy(bool)
    if not in_split.any():
        return None
    return table[in_split & ~table["kept"].astype(bool).to_numpy()]


class EvaluationLayer:
    """Metrics with intervals on the official view and, when the duplicates layer wrote one,
    the deduplicated test split; thresholds and calibration (METHODS §5)."""

    name = LAYER
    order = 40
    options = EvaluationOptions  # --score-kind, --sheet, … (context.options.evaluation)
    verdicts = reading.VERDICTS  # verdict lines (splitscope.core.verdicts)
    scorecard = SCORECARD  # score-card details (splitscope.records.scorecard)
    roles = ROLES  # its records in the report (splitscope.records.roles)
    needs: ClassVar[dict[str, str]] = {"predictions": "no saved predictions given (--predictions DIR)"}
    uses: ClassVar[dict[str, str]] = {"duplicates": "its deduplicated test split (the view is "
                                      "left out when that layer did not complete)"}

    def run(self, context) -> LayerResult:
        views = []
        removed = _dedup_removed(context, "test")
        if removed is not None:  # the duplicates layer's deduplicated test split
            # where it lists them, named relative to the audit folder (the lists are written
            # in a staging folder and moved into place when the audit is published)
            listed = Path(context.lists_dir.name) / "dedup" / "test_removed.csv"
            views.append(lambda truth: view_from_list(truth, removed, "exclude", "deduplicated",
                                                      where=str(listed)))
        options = context.options
        return audit_predictions(context.manifest, context.paths["predictions"], views=views,
                                 score_kind=options.evaluation.score_kind,
                                 read=options.evaluation.reading(options.run.workspace),
                                 n_boot=options.run.resamples, seed=options.run.seed,
                                 workers=options.run.workers)


class AttributionLayer:
    """Attribution outside anatomy (METHODS §5.10): on the query rows of the first split
    boundary, rows the duplicates layer flags across it (the predicates of the deduplicated
    view) versus the others, with a cluster bootstrap over groups when the manifest has them."""

    name = "attribution"
    order = 50
    metrics = tuple(ATTRIBUTION_METRICS.values())  # --fail-on (splitscope.core.conditions)
    verdicts = reading.ATTRIBUTION_VERDICTS
    needs: ClassVar[dict[str, str]] = {"attribution_maps": "no attribution maps and masks given "
                                 "(--attribution-maps, --attribution-masks)"}
    after: ClassVar[dict[str, str]] = {"duplicates": "needs the duplicates layer's flagged rows, and that layer did not "
                           "run"}

    def applies(self, context) -> str | None:
        if not context.split_boundaries:
            return "no split boundary (train/test) whose rows to compare"
        return None

    def run(self, context) -> LayerResult:
        from splitscope.evaluation.attribution import audit_attribution
        from splitscope.records import not_run_record
        from splitscope.relations.predicates import DEDUP_PREDICATES

        cont = context.outcomes["duplicates"].result.tables.get("contaminated")
        if cont is None:
            return LayerResult([not_run_record(
                self.name, "not assessed", self.after["duplicates"],
                inputs=context.record_inputs)])
        manifest = context.manifest
        b = context.split_boundaries[0]
        on_b = cont[cont["boundary"].astype(str) == b.name]
        hit = on_b["predicate"].isin(DEDUP_PREDICATES).to_numpy(bool)
        exposed = np.unique(on_b.loc[hit, "row"].to_numpy(np.int64))
        preds = [p for p in DEDUP_PREDICATES if p in set(on_b["predicate"].astype(str))]
        groups = "group" if "group" in manifest.columns and manifest["group"].notna().any() \
            else None
        return audit_attribution(
            manifest, context.paths["attribution_maps"], context.paths["attribution_masks"],
            exposed, rows=b.query.rows, group_column=groups,
            exposed_name=f"leaked ({b.name}; {', '.join(preds) or 'no predicate flagged a row'})",
            inputs=context.record_inputs,
            params={"boundary": b.name, "exposed_by": list(DEDUP_PREDICATES)},
            n_boot=context.options.run.resamples, seed=context.options.run.seed,
            workers=context.options.run.workers)[0]


#: the layers of this package, in the method's order (see :mod:`splitscope.core.protocol`)
LAYERS = [EvaluationLayer(), AttributionLayer()]
