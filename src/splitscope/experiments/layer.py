"""Audit entry of the experiments layer: the records of a controlled re-training experiment
(METHODS §5.8, §5.11) in the audit's document.

The layer applies when the audit's predictions folder is an experiment's ``predictions/``
folder (``splitscope train``/``experiment`` write ``experiment.json`` and ``runs.csv`` beside
it). It reads those files only (no torch): one record of the protocol and the runs, one per
paired contrast of training pools (``Removal − Full`` beside its controls ``Class-matched −
Full`` and ``Random − Full``, and ``Removal − Class-matched``: the removal effect net of the
class counts it changes) and of policies (``finetune − frozen``) on each view, per backbone
and policy (runs of different conditions are never pooled as replicates). Each contrast has
two levels of uncertainty: the paired-t interval over seeds of
:func:`splitscope.evaluation.effects.protocol_effects`, and a case bootstrap of the evaluated
rows (cluster bootstrap over groups where the truth has groups) with the same resamples for
both runs of every seed pair (:func:`splitscope.evaluation.uncertainty.case_replicates`).

A view without a row of some class has no balanced accuracy: its records say so, naming the
class, and report "BA over present classes" (``balanced_accuracy_present``) beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from splitscope.experiments.predicates import (
    CONTROLLED_RETRAINING,
    HOLDOUT_TEMPERATURE,
    HOLDOUT_THRESHOLD,
    LAYER,
    PAIRED_CONTRAST,
    SCORECARD,
    VIEW_CONTRAST,
)
from splitscope.options import RunOptions
from splitscope.records import AuditRecord, LayerResult, Uncertainty
from splitscope.records.exports import read_csv
from splitscope.records.ids import slug
from splitscope.threads import blas_within_workers

CONTRAST_METRICS = ("balanced_accuracy", "macro_auc")
PRESENT = "balanced_accuracy_present"
#: the pools Removal is read against (METHODS §5.9)
CONTROLS = ("Class-matched", "Random")


def experiment_folder(predictions: Path | None) -> Path | None:
    """The experiment folder above a predictions folder, or ``None``."""
    if predictions is None or not Path(predictions).is_dir():
        return None
    parent = Path(predictions).parent
    ok = (parent / "experiment.json").is_file() and (parent / "runs.csv").is_file()
    return parent if ok else None


def contrasts_for(runs: pd.DataFrame) -> list[str]:
    """Paired contrasts the run table allows: pools against Full, finetune against frozen."""
    pools = set(runs["pool"].astype(str))
    specs = [f"{p}-Full" for p in ("Removal", "Class-matched", "Random", "Source-only",
                                   "Within-class replacement") if p in pools and "Full" in pools]
    specs += [f"Removal-{c}" for c in CONTROLS if {"Removal", c} <= pools]
    if {"finetune", "frozen"} <= set(runs["policy"].astype(str)):
        specs.append("finetune-frozen")
    return specs


@blas_within_workers
def audit_experiment(folder: Path, inputs=None, n_boot: int = RunOptions.resamples,
                     seed: int = RunOptions.seed, workers: int | None = None) -> LayerResult:
    """Records of the experiment in ``folder`` (see the module docstring); the bootstrap's
    matrix products run on at most ``workers`` BLAS/OpenMP threads (default: the pools as
    they are)."""
    from splitscope.evaluation.effects import protocol_effects

    info = json.loads((folder / "experiment.json").read_text())
    runs = read_csv(folder / "runs.csv")
    planned = len(info["policies"]) * len(info["pools"]) * len(info["seeds"])
    done = len(info.get("runs", {}))
    b = info["backbone"]
    protocol_record = AuditRecord(
        id="experiments.protocol", layer=LAYER,
        title=f"Controlled re-training: {b['name']} "
              f"({info.get('start_weights') or b['init']}), "
              f"{', '.join(info['policies'])} × {', '.join(info['pools'])} × "
              f"{len(info['seeds'])} seeds",
        predicate={"name": CONTROLLED_RETRAINING, "params": {
            "protocol": info["protocol"], "backbone": b, "pools": info["pools"],
            "seeds": info["seeds"], "flagged": info["flagged"]}},
        unit="training run", numerator=done, denominator=planned,
        scope=f"{info['evaluated']['rows']} evaluated test rows; views "
              f"{', '.join(info['views'])}",
        conclusion=f"{done} of {planned} runs finished under one recorded protocol "
                   f"(selection: {info['protocol']['selection']})",
        status="completed" if done == planned else "partial",
        reason=None if done == planned else f"{planned - done} run(s) not finished",
        inputs=inputs or [], details={"runs": info.get("runs", {}),
                                      "versions": info["versions"],
                                      "evaluated": info["evaluated"]})
    records = []
    specs = contrasts_for(runs)
    tables = {}
    scored = runs[runs["view"] != "training"]
    present = set(scored["metric"].astype(str))
    metrics = [m for m in CONTRAST_METRICS + (PRESENT,) if m in present]
    undefined = undefined_views(folder, info, scored)
    if specs and metrics:
        eff = protocol_effects(scored, metrics=metrics, contrasts=specs, n_boot=n_boot,
                               seed=seed)
        paired = eff.paired
        # BA over present classes is reported where BA is undefined, as its named stand-in
        keep = (paired["metric"] != PRESENT) | paired["view"].isin(list(undefined))
        paired = paired[keep].reset_index(drop=True)
        cases = CaseBootstrap(folder, info, n_boot, seed)
        paired = cases.add(paired, eff.pairs)
        tables["experiment_contrasts"] = paired
        # the policy contrast first: the score card's training-policy detail shows it
        rows = sorted(paired.to_dict(orient="records"),
                      key=lambda r: (r["condition"] != "policy", r["contrast"]))
        records += [_contrast_record(row, inputs, undefined, _controls(row, paired), b)
                    for row in rows]
    random = not b.get("weights")
    records += _view_records(scored, metrics, inputs, undefined, random)
    records += _holdout_records(runs, inputs, random)
    return LayerResult(records=records + [protocol_record], tables=tables)


def undefined_views(folder: Path, info: dict, scored: pd.DataFrame) -> dict[str, list[str]]:
    """Views without a row of some training class → those classes (from experiment.json,
    else a run record), for the views where balanced accuracy is undefined."""
    out = {v: c["missing_classes"] for v, c in (info.get("view_classes") or {}).items()
           if c.get("missing_classes")}
    for view in set(scored["view"].astype(str)) - set(info.get("view_classes") or {}):
        for rec in sorted((folder / "runs").glob("*/run.json"))[:1]:
            missing = json.loads(rec.read_text())["metrics"].get(view, {}).get(
                "missing_classes")
            if missing:
                out[view] = missing
    return out


def _controls(row: dict, paired: pd.DataFrame) -> list[dict]:
    """Beside ``Removal − Full``: the controls' contrasts against Full on the same view,
    metric, backbone and policy."""
    if row["contrast"] != "Removal − Full":
        return []
    same = (paired["metric"] == row["metric"]) & (paired["view"] == row["view"])
    for k in ("model", "policy"):
        if k in paired and isinstance(row.get(k), str):
            same &= paired[k] == row[k]
    wanted = [f"{c} − Full" for c in CONTROLS]
    hit = paired[same & paired["contrast"].isin(wanted)]
    return [{"contrast": r["contrast"], "mean": _num(r["mean"]), "t_low": _num(r["t_low"]),
             "t_high": _num(r["t_high"]), "pairs": int(r["pairs"])}
            for r in hit.to_dict(orient="records")]


class CaseBootstrap:
    """The second level of uncertainty of the contrasts: per run and view, the metric on
    every resample of the evaluated rows (the same resamples for every run of a view, so
    differences pair resample by resample), cached per (run, view, metric)."""

    def __init__(self, folder: Path, info: dict, n_boot: int, seed: int):
        self.folder, self.info, self.n_boot, self.seed = folder, info, n_boot, seed
        self.classes = [str(c) for c in info["classes"]]
        self._views: dict = {}
        self._reps: dict = {}

    def _view(self, view: str):
        """(truth labels, groups or None, paths) of a view's evaluated rows."""
        if view not in self._views:
            ext = view.startswith("external")
            base = self.folder / "external" if ext else self.folder
            truth = read_csv(base / "truth.csv", dtype={"path": str, "label": str})
            if view.endswith("deduplicated"):
                drop = read_csv(base / "views" / "deduplicated_exclude.csv")
                truth = truth[~truth["path"].isin(drop["path"].astype(str))]
            lookup = {c: i for i, c in enumerate(self.classes)}
            y = truth["label"].map(lookup).to_numpy(np.int64)
            g = truth["group"] if "group" in truth and truth["group"].notna().any() else None
            self._views[view] = (y, None if g is None else g.to_numpy(dtype=object),
                                 truth["path"].to_numpy(dtype=object))
        return self._views[view]

    def replicates(self, rid: str, view: str, metric: str):
        from splitscope.evaluation.metrics import softmax
        from splitscope.evaluation.uncertainty import case_replicates

        key = (rid, view, metric)
        if key not in self._reps:
            y, groups, paths = self._view(view)
            file = (self.folder / "runs" / rid / "external_predictions.parquet"
                    if view.startswith("external") else
                    self.folder / "predictions" / f"{rid}.parquet")
            pred = pd.read_parquet(file).drop_duplicates("path").set_index("path")
            logits = pred.loc[paths, self.classes].to_numpy(np.float64)
            self._reps[key] = case_replicates(y, softmax(logits), (metric,), groups=groups,
                                              n_boot=self.n_boot, seed=self.seed)
        return self._reps[key]

    def add(self, paired: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
        """``paired`` with ``case_low``/``case_high`` and ``case_interval`` (its kind)."""
        from splitscope.evaluation.uncertainty import mean_difference_interval
        from splitscope.experiments.retraining import run_id

        out = paired.copy()
        out["case_low"], out["case_high"], out["case_interval"] = np.nan, np.nan, None
        if not self.n_boot or not len(paired):
            return out
        for i, row in paired.iterrows():
            hit = pairs[(pairs["contrast"] == row["contrast"]) & (pairs["metric"] == row["metric"])]
            for k in ("model", "policy", "pool", "view"):
                if k in hit and k != row["condition"] and isinstance(row.get(k), str):
                    hit = hit[hit[k] == row[k]]
            hit = hit[np.isfinite(hit["difference"].astype(float))]
            if hit.empty:
                continue
            firsts, seconds, kind = [], [], None
            for pr in hit.to_dict(orient="records"):
                ident = {k: pr.get(k) for k in ("model", "policy", "pool", "seed")}
                a, b = (run_id(*(str(x) for x in (id_["model"], id_["policy"], id_["pool"])),
                               int(id_["seed"]))
                        for id_ in ({**ident, row["condition"]: _level(row, side)}
                                    for side in ("first", "second")))
                try:
                    ra, kind = self.replicates(a, row["view"], row["metric"])
                    rb, _ = self.replicates(b, row["view"], row["metric"])
                except (OSError, KeyError):  # a run's predictions are not there
                    firsts = []
                    break
                firsts.append(ra[row["metric"]])
                seconds.append(rb[row["metric"]])
            if firsts:
                iv = mean_difference_interval(firsts, seconds)
                out.loc[i, ["case_low", "case_high"]] = iv["low"], iv["high"]
                out.loc[i, "case_interval"] = (
                    f"{kind}; the same resamples for both runs of each of the "
                    f"{len(firsts)} seed pair(s), 95% interval of the mean difference")
        return out


def _level(row: dict, side: str) -> str:
    first, second = row["contrast"].split(" − ")
    return first if side == "first" else second


#: (first view, second view, what the difference is) of the view contrasts per matched run
_VIEW_CONTRASTS = (
    ("official", "deduplicated", "deduplication sensitivity"),
    ("official", "external", "external transfer cost"),
    ("official", "external_deduplicated",
     "external transfer cost (external rows contained in train removed)"),
)


def _where(where: dict, random: bool) -> str:
    """``model small-cnn, policy frozen (random features: …)``: a condition in words."""
    label = ", ".join(f"{k} {v}" for k, v in where.items())
    if random and where.get("policy") == "frozen":
        label += " (random features: no pretrained weights)"
    return label


def _view_records(scored: pd.DataFrame, metrics: list[str], inputs, undefined=None,
                  random: bool = False) -> list[AuditRecord]:
    """One record per view contrast, metric and condition (backbone, policy, pool) over the
    re-trained runs: metric(first view) − metric(second view) per seed, its mean and paired-t
    interval over the seeds (:func:`splitscope.evaluation.effects.view_contrast`). Runs of
    different conditions are never pooled. Where balanced accuracy is undefined on a view
    (a class without rows), the record says so, naming the class, beside the record of BA
    over present classes."""
    from splitscope.evaluation.effects import read_runs, view_contrast

    undefined = undefined or {}
    views = set(scored["view"].astype(str))
    out = []
    if not metrics:
        return out
    wide = read_runs(scored, metrics=metrics)
    ident = [c for c in ("model", "policy", "pool", "seed", "view") if c in wide.columns]
    condition = [c for c in ("model", "policy", "pool") if c in wide.columns]
    for first, second, name in _VIEW_CONTRASTS:
        if not {first, second} <= views:
            continue
        lacking = {v: undefined[v] for v in (first, second) if v in undefined}
        for m in metrics:
            if m == PRESENT and not lacking:
                continue
            groups = wide.groupby(condition, sort=True) if condition else [((), wide)]
            for key, g in groups:
                key = key if isinstance(key, tuple) else (key,)
                where = dict(zip(condition, (str(k) for k in key)))
                out.append(_view_record(view_contrast(g, first, second, m, name, ident),
                                        first, second, name, m, where, lacking, inputs,
                                        _where(where, random)))
    return out


def _view_record(c, first, second, name, m, where, lacking, inputs, label) -> AuditRecord:
    iv = c.get("interval")
    mean = c["summary_mean"]
    finite = c["runs"] > 0 and np.isfinite(mean)
    if m == "balanced_accuracy" and lacking:
        reason = "balanced accuracy is undefined on " + "; ".join(
            f"the {v} view (no row of {', '.join(cls)})" for v, cls in lacking.items()) + \
            f"; see 'BA over present classes' ({PRESENT})"
    else:
        reason = "no run scored on both views"
    what = "BA over present classes" if m == PRESENT else m
    return AuditRecord(
        id=f"experiments.view_contrast.{slug(second)}.{slug(m)}."
           + ".".join(slug(v) for v in where.values()), layer=LAYER,
        title=f"{name[0].upper()}{name[1:]} under re-training: {what} on the {first} "
              f"view − on the {second} view ({label})",
        predicate={"name": VIEW_CONTRAST, "params": {
            "contrast": name, "first": first, "second": second, "metric": m, **where,
            "matched_on": "seed (one backbone, policy and pool)"}},
        unit="training run", denominator=int(c["runs"]),
        estimate=float(mean) if finite else None,
        uncertainty=Uncertainty(kind=iv["kind"], low=iv["low"], high=iv["high"])
        if iv else None,
        scope=f"{c['runs']} seeds of {label} scored on both views",
        conclusion=(f"mean Δ {what} {mean:+.4f} over {c['runs']} seeds"
                    + (f"; paired-t 95% [{iv['low']:.4f}, {iv['high']:.4f}]" if iv
                       else "") if finite else None),
        status="completed" if finite else "not assessed",
        reason=None if finite else reason,
        inputs=inputs or [], details={"per_run": c["per_run"]})


#: (record id, title, metric after, metric before, what the difference is)
_HOLDOUT = (
    ("experiments.temperature_scaling", ("Temperature scaling fitted on each run's validation "
     "holdout: change in test ECE (15 bins, top label)"), "ece_after_temperature",
     "ece_before_temperature", "ECE after − before"),
    ("experiments.threshold_youden", ("Youden threshold fitted on each run's validation "
     "holdout vs the default 0.5: change in test balanced accuracy (one class vs rest, mean "
     "over classes)"), "threshold_youden_ba", "threshold_default_ba",
     "balanced accuracy at Youden − at 0.5"),
)


#: each holdout record's predicate
_HOLDOUT_PREDICATES = {"experiments.temperature_scaling": HOLDOUT_TEMPERATURE,
                       "experiments.threshold_youden": HOLDOUT_THRESHOLD}


def _holdout_records(runs: pd.DataFrame, inputs, random: bool = False) -> list[AuditRecord]:
    """Calibration and threshold transfer from the validation holdout to the test view, one
    record per condition (backbone, policy, pool) over its seeds (METHODS §5.3–5.4): the
    mean change with its paired-t interval over seeds, and how many runs it made worse."""
    out = []
    key = ["model", "policy", "pool", "seed"]
    official = runs[runs["view"].astype(str) == "official"]
    condition = [k for k in key[:3] if k in official.columns]
    for rid, title, after, before, what in _HOLDOUT:
        table = official[official["metric"].isin([after, before])]
        if table.empty:
            continue
        for cond_key, part in table.groupby(condition, sort=True):
            cond_key = cond_key if isinstance(cond_key, tuple) else (cond_key,)
            where = dict(zip(condition, (str(k) for k in cond_key)))
            out += _holdout_record(part, key, rid, title, after, before, what, where,
                                   inputs, _where(where, random))
    return out


def _holdout_record(official, key, rid, title, after, before, what, where, inputs, label):
    """One condition's (backbone, policy, pool) holdout-transfer record over its seeds."""
    from splitscope.evaluation.uncertainty import paired_t_interval

    wide = official.pivot_table(index=[k for k in key if k in official.columns],
                                columns="metric", values="value")
    if after not in wide or before not in wide:
        return []
    d = (wide[after] - wide[before]).dropna().to_numpy(np.float64)
    worse = int((d > 0).sum()) if rid.endswith("temperature_scaling") else int((d < 0).sum())
    interval = paired_t_interval(d, unit="seeds") if d.size >= 2 else None
    return [AuditRecord(
        id=f"{rid}." + ".".join(slug(v) for v in where.values()), layer=LAYER,
        title=f"{title} ({label})",
        predicate={"name": _HOLDOUT_PREDICATES[rid],
                   "params": {"fitted_on": "each run's validation holdout",
                              "evaluated_on": "official test view", "difference": what,
                              **where}},
        unit="training run", numerator=worse, denominator=int(d.size),
        estimate=float(d.mean()) if d.size else None,
        uncertainty=Uncertainty(kind=interval["kind"], low=interval["low"],
                                high=interval["high"]) if interval else None,
        scope=f"{d.size} seeds of {label}",
        conclusion=(f"mean {what} {d.mean():+.4f} over {d.size} seeds; {worse} run(s) "
                    "made worse" if d.size else None),
        status="completed" if d.size else "not assessed",
        reason=None if d.size else "no run measured it",
        inputs=inputs or [],
        details={"per_run": wide.reset_index().to_dict(orient="records")})]


def _contrast_record(row: dict, inputs, undefined=None, controls=(), backbone=None
                     ) -> AuditRecord:
    """One paired contrast: seed level (mean, SD, paired-t over the seed pairs) and case level
    (bootstrap of the evaluated rows, ``case_*``); a Removal − Full record carries its
    controls' contrasts beside it; a frozen policy without pretrained weights says "random
    features"; an undefined balanced accuracy names the class the view lacks."""
    rest = {k: row[k] for k in ("model", "policy", "pool") if k in row and isinstance(
        row[k], str)}
    where = _where(rest, backbone is not None and not backbone.get("weights"))
    mean, low, high = (row.get(k) for k in ("mean", "t_low", "t_high"))
    finite = mean is not None and np.isfinite(mean)
    parts = [row["contrast"].replace(" − ", "-"), row["metric"], row["view"],
             *rest.values()]
    metric = "BA over present classes" if row["metric"] == PRESENT else row["metric"]
    missing = (undefined or {}).get(row["view"])
    if row["metric"] == "balanced_accuracy" and missing:
        reason = (f"balanced accuracy is undefined on the {row['view']} view: it has no row of "
                  f"{', '.join(missing)}; see 'BA over present classes' ({PRESENT})")
    else:
        reason = "no finite paired difference"
    case = (row.get("case_low"), row.get("case_high"))
    conclusion = None
    if finite:
        conclusion = (f"mean Δ {mean:+.4f} (SD {row['sd']:.4f}) over {int(row['pairs'])} seed "
                      f"pairs; paired-t 95% over seeds [{_num(low)}, {_num(high)}]")
        if _num(case[0]) is not None:
            conclusion += f"; case bootstrap 95% [{_num(case[0])}, {_num(case[1])}]"
        for c in controls:
            conclusion += (f"; beside {c['contrast']} {c['mean']:+.4f} "
                           f"[{c['t_low']}, {c['t_high']}]" if c["mean"] is not None else "")
    return AuditRecord(
        id="experiments.contrast." + ".".join(slug(p) for p in parts), layer=LAYER,
        title=f"{row['contrast']}: Δ {metric} on the {row['view']} view"
              + (f" ({where})" if where else ""),
        predicate={"name": PAIRED_CONTRAST, "params": {
            "condition": row["condition"], "paired_on": row.get("paired_on"),
            "metric": row["metric"], "view": row["view"], **rest}},
        unit="seed pair", denominator=int(row["pairs"]),
        estimate=float(mean) if finite else None,
        uncertainty=Uncertainty(kind=str(row.get("interval")), low=_num(low), high=_num(high)),
        scope=f"{int(row['pairs'])} pairs matched on {row.get('paired_on')}",
        conclusion=conclusion,
        status="completed" if finite else "not assessed",
        reason=None if finite else reason,
        inputs=inputs or [],
        details={"seed_level": {"interval": row.get("interval"), "low": _num(low),
                                "high": _num(high), "sd": _num(row.get("sd"))},
                 "case_level": {"interval": row.get("case_interval"), "low": _num(case[0]),
                                "high": _num(case[1])},
                 "controls": list(controls)})


def _num(v):
    return round(float(v), 6) if v is not None and np.isfinite(v) else None


class ExperimentsLayer:
    """Controlled re-training records (METHODS §5.11), read from an experiment folder."""

    name = LAYER
    scorecard = SCORECARD  # score-card details (splitscope.records.scorecard)
    order = 38  # before the evaluation layer: its policy contrast leads the score card
    title = "Controlled re-training (training pools × policies × seeds)"
    needs: ClassVar[dict[str, str]] = {"predictions": "no predictions given: run `splitscope experiment` or audit with "
                            "--predictions EXPERIMENT/predictions"}

    def applies(self, context) -> str | None:
        if experiment_folder(context.paths.get("predictions")) is None:
            return ("the predictions folder is not an experiment's (no experiment.json and "
                    "runs.csv beside it)")
        return None

    def run(self, context) -> LayerResult:
        folder = experiment_folder(context.paths.get("predictions"))
        return audit_experiment(folder, context.record_inputs,
                                workers=context.options.run.workers)


LAYERS = [ExperimentsLayer()]
