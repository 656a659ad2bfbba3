"""Audit entry of the experiments layer: the records of a controlled re-training experiment
(METHODS §5.8, §5.11) in the audit's document.

The layer applies when the audit's predictions folder is an experiment's ``predictions/``
folder (``splitscope train``/``experiment`` write ``experiment.json`` and ``runs.csv`` beside
it). It reads those files only (no torch): one record of the protocol and the runs, one per
paired contrast of training pools (``Removal − Full``, ``Random − Full``: deduplication
sensitivity under re-training) and of policies (``finetune − frozen``) on each view, with the
paired-t interval over seeds of :func:`splitscope.evaluation.effects.protocol_effects`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from splitscope.records import AuditRecord, LayerResult, Uncertainty
from splitscope.records.ids import slug

CONTRAST_METRICS = ("balanced_accuracy", "macro_auc")


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
    specs = [f"{p}-Full" for p in ("Removal", "Random", "Class-matched", "Source-only",
                                   "Within-class replacement") if p in pools and "Full" in pools]
    if {"finetune", "frozen"} <= set(runs["policy"].astype(str)):
        specs.append("finetune-frozen")
    return specs


def audit_experiment(folder: Path, inputs=None, n_boot: int = 2000, seed: int = 0
                     ) -> LayerResult:
    """Records of the experiment in ``folder`` (see the module docstring)."""
    from splitscope.evaluation.effects import protocol_effects

    info = json.loads((folder / "experiment.json").read_text())
    runs = pd.read_csv(folder / "runs.csv")
    planned = len(info["policies"]) * len(info["pools"]) * len(info["seeds"])
    done = len(info.get("runs", {}))
    b = info["backbone"]
    protocol_record = AuditRecord(
        id="experiments.protocol", layer="protocol",
        title=f"Controlled re-training: {b['name']} ({b['init']}), "
              f"{', '.join(info['policies'])} × {', '.join(info['pools'])} × "
              f"{len(info['seeds'])} seeds",
        predicate={"name": "controlled re-training", "params": {
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
    metrics = [m for m in CONTRAST_METRICS if m in set(scored["metric"].astype(str))]
    if specs and metrics:
        eff = protocol_effects(scored, metrics=metrics, contrasts=specs, n_boot=n_boot,
                               seed=seed)
        paired = eff.paired
        tables["experiment_contrasts"] = paired.reset_index(drop=True)
        # the policy contrast first: the score card's training-policy detail shows it
        rows = sorted(paired.to_dict(orient="records"),
                      key=lambda r: (r["condition"] != "policy", r["contrast"]))
        records += [_contrast_record(row, inputs) for row in rows]
    records += _view_records(scored, metrics, inputs)
    records += _holdout_records(runs, inputs)
    return LayerResult(records=records + [protocol_record], tables=tables)


#: (first view, second view, what the difference is) of the view contrasts per matched run
_VIEW_CONTRASTS = (
    ("official", "deduplicated", "deduplication sensitivity"),
    ("official", "external", "external transfer cost"),
    ("official", "external_deduplicated",
     "external transfer cost (external rows contained in train removed)"),
)


def _view_records(scored: pd.DataFrame, metrics: list[str], inputs) -> list[AuditRecord]:
    """One record per view contrast and metric over the re-trained runs: metric(first view) −
    metric(second view) per run (matched on backbone, policy, pool and seed), its mean and
    paired-t interval over runs (:func:`splitscope.evaluation.effects.view_contrast`)."""
    from splitscope.evaluation.effects import read_runs, view_contrast

    views = set(scored["view"].astype(str))
    out = []
    if not metrics:
        return out
    wide = read_runs(scored, metrics=metrics)
    ident = [c for c in ("model", "policy", "pool", "seed", "view") if c in wide.columns]
    for first, second, name in _VIEW_CONTRASTS:
        if not {first, second} <= views:
            continue
        for m in metrics:
            c = view_contrast(wide, first, second, m, name, ident)
            iv = c.get("interval")
            mean = c["summary_mean"]
            finite = c["runs"] > 0 and np.isfinite(mean)
            out.append(AuditRecord(
                id=f"experiments.view_contrast.{slug(second)}.{slug(m)}", layer="protocol",
                title=f"{name[0].upper()}{name[1:]} under re-training: {m} on the {first} "
                      f"view − on the {second} view",
                predicate={"name": "view contrast", "params": {
                    "contrast": name, "first": first, "second": second, "metric": m,
                    "matched_on": "model, policy, pool, seed"}},
                unit="training run", denominator=int(c["runs"]),
                estimate=float(mean) if finite else None,
                uncertainty=Uncertainty(kind=iv["kind"], low=iv["low"], high=iv["high"])
                if iv else None,
                scope=f"{c['runs']} runs scored on both views",
                conclusion=(f"mean Δ {m} {mean:+.4f} over {c['runs']} runs"
                            + (f"; paired-t 95% [{iv['low']:.4f}, {iv['high']:.4f}]" if iv
                               else "") if finite else None),
                status="completed" if finite else "not assessed",
                reason=None if finite else "no run scored on both views",
                inputs=inputs or [], details={"per_run": c["per_run"]}))
    return out


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


def _holdout_records(runs: pd.DataFrame, inputs) -> list[AuditRecord]:
    """Calibration and threshold transfer from the validation holdout to the test view, one
    record each over every run that measured them (METHODS §5.3–5.4): the mean change with
    its paired-t interval over runs, and how many runs it made worse."""
    from splitscope.evaluation.uncertainty import paired_t_interval

    out = []
    key = ["model", "policy", "pool", "seed"]
    official = runs[runs["view"].astype(str) == "official"]
    for rid, title, after, before, what in _HOLDOUT:
        wide = official[official["metric"].isin([after, before])].pivot_table(
            index=[k for k in key if k in official.columns], columns="metric", values="value")
        if after not in wide or before not in wide:
            continue
        d = (wide[after] - wide[before]).dropna().to_numpy(np.float64)
        worse = int((d > 0).sum()) if rid.endswith("temperature_scaling") else int((d < 0).sum())
        interval = paired_t_interval(d, unit="runs") if d.size >= 2 else None
        out.append(AuditRecord(
            id=rid, layer="protocol", title=title,
            predicate={"name": rid.split(".")[-1].replace("_", " "),
                       "params": {"fitted_on": "each run's validation holdout",
                                  "evaluated_on": "official test view", "difference": what}},
            unit="training run", numerator=worse, denominator=int(d.size),
            estimate=float(d.mean()) if d.size else None,
            uncertainty=Uncertainty(kind=interval["kind"], low=interval["low"],
                                    high=interval["high"]) if interval else None,
            scope=f"{d.size} runs (every policy × pool × seed that finished)",
            conclusion=(f"mean {what} {d.mean():+.4f} over {d.size} runs; {worse} run(s) "
                        "made worse" if d.size else None),
            status="completed" if d.size else "not assessed",
            reason=None if d.size else "no run measured it",
            inputs=inputs or [],
            details={"per_run": wide.reset_index().to_dict(orient="records")}))
    return out


def _contrast_record(row: dict, inputs) -> AuditRecord:
    rest = {k: row[k] for k in ("model", "policy", "pool") if k in row and isinstance(
        row[k], str)}
    where = ", ".join(f"{k} {v}" for k, v in rest.items())
    mean, low, high = (row.get(k) for k in ("mean", "t_low", "t_high"))
    finite = mean is not None and np.isfinite(mean)
    parts = [row["contrast"].replace(" − ", "-"), row["metric"], row["view"],
             *rest.values()]
    return AuditRecord(
        id="experiments.contrast." + ".".join(slug(p) for p in parts), layer="protocol",
        title=f"{row['contrast']}: Δ {row['metric']} on the {row['view']} view"
              + (f" ({where})" if where else ""),
        predicate={"name": "paired contrast", "params": {
            "condition": row["condition"], "paired_on": row.get("paired_on"),
            "metric": row["metric"], "view": row["view"], **rest}},
        unit="seed pair", denominator=int(row["pairs"]),
        estimate=float(mean) if finite else None,
        uncertainty=Uncertainty(kind=str(row.get("interval")), low=_num(low), high=_num(high)),
        scope=f"{int(row['pairs'])} pairs matched on {row.get('paired_on')}",
        conclusion=(f"mean Δ {mean:+.4f} (SD {row['sd']:.4f}) over {int(row['pairs'])} seed "
                    f"pairs; paired-t 95% [{_num(low)}, {_num(high)}]" if finite else None),
        status="completed" if finite else "not assessed",
        reason=None if finite else "no finite paired difference",
        inputs=inputs or [])


def _num(v):
    return round(float(v), 6) if v is not None and np.isfinite(v) else None


class ExperimentsLayer:
    """Controlled re-training records (METHODS §5.11), read from an experiment folder."""

    name = "experiments"
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
        return audit_experiment(folder, context.record_inputs)


LAYERS = [ExperimentsLayer()]
