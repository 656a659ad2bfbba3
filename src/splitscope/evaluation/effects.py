"""Protocol effects from run records (METHODS §5.8).

A run-records table has one row per (run, view): identity columns (``model``, training
``policy``, ``seed``, ``threshold`` rule, ``calibration``, ``view``, or any the caller names)
and metric columns (``balanced_accuracy``, ``macro_auc``, …), wide or long
(:mod:`splitscope.evaluation.runs`). Runs given as per-run prediction files are scored first
(:func:`runs_from_predictions`).

- **Δarch**: per protocol (every identity column except model and seed), the range over models
  of the seed-mean metric.
- **Component effect**: rows matched on every other identity column (seed included) that differ
  only in one component (frozen vs fine-tuned, threshold rule, calibration); Δ = level −
  baseline; mean and max |Δ| over matched pairs.
- **Deduplication sensitivity**: metric(official) − metric(deduplicated) per matched run.
- **External transfer cost**: metric(internal view) − metric(external view) per matched run.
- **Paired contrasts** of any two levels of a named condition (``Removal-Full``), per view and
  metric, with paired-t and seed-bootstrap intervals: :mod:`splitscope.evaluation.contrasts`.
- **Difference-in-differences** of true-class probability: per seed,
  (E_control − E_treated) − (U_control − U_treated), E/U the mean true-class probability over
  exposed / unflagged rows in each arm (e.g. treated = local removal of training twins, control
  = distant removal); mean with a paired-t 95% interval over the paired seeds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.evaluation.contrasts import paired_contrast
from splitscope.evaluation.runs import RunTable, read_run_table
from splitscope.evaluation.uncertainty import paired_t_interval, seed_summary
from splitscope.options import RunOptions
from splitscope.records.exports import write_csv

IDENTITY_COLUMNS = ("model", "policy", "seed", "threshold", "calibration", "view")
METRIC_COLUMNS = ("balanced_accuracy", "macro_auc", "organizer_score", "accuracy", "ece",
                  "brier", "nll", "macro_f1", "balanced_accuracy_present")


def read_runs(path_or_table, **columns) -> pd.DataFrame:
    """A run-records table in wide form with numeric metric columns (a non-numeric metric
    value is an error naming the column); ``columns`` as in
    :func:`splitscope.evaluation.runs.read_run_table`."""
    return read_run_table(path_or_table, **columns).table


def identity_columns(runs: pd.DataFrame, identity=None) -> list[str]:
    """Identity columns: ``identity`` when given, else those of :data:`IDENTITY_COLUMNS`
    present in ``runs`` (in that order)."""
    if identity is not None:
        return list(identity)
    return [c for c in IDENTITY_COLUMNS if c in runs.columns]


def _need(runs: pd.DataFrame, cols) -> None:
    missing = [c for c in cols if c not in runs.columns]
    if missing:
        raise InputError(f"run records lack column(s) {missing}; found: "
                         f"{', '.join(map(str, runs.columns))}")


def delta_arch(runs: pd.DataFrame, metric: str = "balanced_accuracy", identity=None
               ) -> pd.DataFrame:
    """Per protocol: the range over models of the seed-mean metric (Δarch), with the best and
    worst model and the number of models and seeds."""
    _need(runs, ["model", metric])
    proto = [c for c in identity_columns(runs, identity) if c not in ("model", "seed")]
    mean = runs.groupby(proto + ["model"], dropna=False, sort=True)[metric].agg(["mean", "count"])
    mean = mean.reset_index()
    rows = []
    groups = mean.groupby(proto, dropna=False, sort=True) if proto else [((), mean)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        g = g.dropna(subset=["mean"])
        if g.empty:
            continue
        best, worst = g.loc[g["mean"].idxmax()], g.loc[g["mean"].idxmin()]
        rows.append({**dict(zip(proto, key)), "metric": metric, "models": len(g),
                     "delta_arch": float(best["mean"] - worst["mean"]),
                     "best_model": best["model"], "worst_model": worst["model"],
                     "seeds_per_model_min": int(g["count"].min())})
    return pd.DataFrame(rows)


def paired_differences(runs: pd.DataFrame, component: str, level, baseline, metric: str,
                       identity=None) -> pd.DataFrame:
    """Rows with ``component == level`` matched to rows with ``component == baseline`` on every
    other identity column; Δ = metric(level) − metric(baseline)."""
    _need(runs, [component, metric])
    keys = [c for c in identity_columns(runs, identity) if c != component]
    a = runs[runs[component].astype(str) == str(level)]
    b = runs[runs[component].astype(str) == str(baseline)]
    if keys:
        dup_a, dup_b = a.duplicated(keys).sum(), b.duplicated(keys).sum()
        if dup_a or dup_b:
            raise InputError(f"run records are not unique on {keys} within {component}="
                             f"{level!r}/{baseline!r}; add the distinguishing column")
        merged = a.merge(b, on=keys, suffixes=("", "_baseline"))
    else:
        merged = pd.DataFrame({metric: a[metric].to_numpy()[:1],
                               f"{metric}_baseline": b[metric].to_numpy()[:1]})
    merged["delta"] = merged[metric] - merged[f"{metric}_baseline"]
    return merged[keys + [metric, f"{metric}_baseline", "delta"]]


def component_effect(runs: pd.DataFrame, component: str, metric: str = "balanced_accuracy",
                     baseline=None, identity=None) -> pd.DataFrame:
    """Mean and max |Δ| when one protocol component changes, per level against ``baseline``
    (default: the first level in sorted order), over matched pairs, with the paired-t 95%
    interval of the mean Δ over those pairs (two pairs or more)."""
    _need(runs, [component, metric])
    levels = sorted(runs[component].dropna().astype(str).unique())
    if len(levels) < 2:
        return pd.DataFrame([{"component": component, "metric": metric, "pairs": 0,
                              "reason": f"only one level of {component!r}"}])
    baseline = str(baseline) if baseline is not None else levels[0]
    if baseline not in levels:
        raise InputError(f"baseline {baseline!r} not a level of {component!r}: {levels}")
    rows = []
    for level in levels:
        if level == baseline:
            continue
        d = paired_differences(runs, component, level, baseline, metric,
                               identity)["delta"].dropna()
        keys = [c for c in identity_columns(runs, identity) if c != component]
        iv = (paired_t_interval(d.to_numpy(), unit=f"pairs matched on {', '.join(keys)}")
              if d.size >= 2 else None)
        rows.append({"component": component, "level": level, "baseline": baseline,
                     "metric": metric, "pairs": int(d.size),
                     "mean_delta": float(d.mean()) if d.size else np.nan,
                     "mean_delta_low": iv["low"] if iv else np.nan,
                     "mean_delta_high": iv["high"] if iv else np.nan,
                     "interval": iv["kind"] if iv else f"not assessed: {d.size} pair(s)",
                     "mean_abs_delta": float(d.abs().mean()) if d.size else np.nan,
                     "max_abs_delta": float(d.abs().max()) if d.size else np.nan})
    return pd.DataFrame(rows)


def view_contrast(runs: pd.DataFrame, first: str, second: str, metric: str = "balanced_accuracy",
                  name: str = "contrast", identity=None) -> dict:
    """metric(view ``first``) − metric(view ``second``) per matched run (runs matched on every
    other identity column), with mean ± SD over runs and a paired-t 95% interval over them."""
    _need(runs, ["view", metric])
    d = paired_differences(runs, "view", first, second, metric, identity)
    deltas = d["delta"].dropna().to_numpy()
    out = {"contrast": name, "metric": metric, "first": first, "second": second,
           "runs": int(deltas.size), **{f"summary_{k}": v for k, v in
                                        seed_summary(deltas).items()}}
    if deltas.size >= 2:
        paired_by = [c for c in identity_columns(runs, identity) if c != "view"]
        out["interval"] = paired_t_interval(
            deltas, unit=f"runs matched on {', '.join(paired_by) or 'row order'}")
    out["per_run"] = d.to_dict(orient="records")
    return out


def dedup_sensitivity(runs: pd.DataFrame, metric: str = "balanced_accuracy",
                      official: str = "official", deduplicated: str = "deduplicated",
                      identity=None) -> dict:
    """BA(official) − BA(deduplicated) per matched run (METHODS §5.8)."""
    return view_contrast(runs, official, deduplicated, metric, "deduplication sensitivity",
                         identity)


def transfer_cost(runs: pd.DataFrame, metric: str = "balanced_accuracy",
                  internal: str = "official", external: str = "external",
                  identity=None) -> dict:
    """metric(internal view) − metric(external view) per matched run."""
    return view_contrast(runs, internal, external, metric, "external transfer cost", identity)


def did_true_class_probability(
    table: pd.DataFrame,
    *,
    treated: str = "local",
    control: str = "distant",
    arm: str = "arm",
    seed: str = "seed",
    exposed: str = "exposed",
    p_true: str = "p_true",
) -> dict:
    """Difference-in-differences of true-class probability (see module docstring).

    ``table`` has one row per (arm, seed, evaluation row): the arm, the seed, whether the row is
    exposed (has a training twin) or unflagged, and its true-class probability.
    """
    _need(table, [arm, seed, exposed, p_true])
    t = table.copy()
    t[exposed] = t[exposed].astype(str).str.lower().isin(("true", "1", "yes", "exposed"))
    arms = set(t[arm].astype(str))
    for a in (treated, control):
        if a not in arms:
            raise InputError(f"arm {a!r} not in the table; arms: {sorted(arms)}")
    means = t.groupby([arm, seed, exposed])[p_true].mean().unstack(exposed)
    if True not in means.columns or False not in means.columns:
        raise InputError("the DiD needs both exposed and unflagged rows")
    tr = means.xs(treated, level=arm)
    co = means.xs(control, level=arm)
    seeds = sorted(set(tr.index) & set(co.index), key=str)
    if not seeds:
        raise InputError("no seed occurs in both arms; the DiD needs paired seeds")
    did = ((co.loc[seeds, True] - tr.loc[seeds, True])
           - (co.loc[seeds, False] - tr.loc[seeds, False]))
    per_seed = pd.DataFrame({"seed": seeds, "exposed_control": co.loc[seeds, True].to_numpy(),
                             "exposed_treated": tr.loc[seeds, True].to_numpy(),
                             "unflagged_control": co.loc[seeds, False].to_numpy(),
                             "unflagged_treated": tr.loc[seeds, False].to_numpy(),
                             "did": did.to_numpy()})
    out = {"contrast": "difference-in-differences of true-class probability",
           "definition": f"(E[{control}] − E[{treated}]) − (U[{control}] − U[{treated}]), "
                         f"E exposed rows, U unflagged rows, per seed",
           "treated": treated, "control": control, "seeds": len(seeds),
           "did": float(did.mean()), **{f"summary_{k}": v for k, v in
                                        seed_summary(did.to_numpy()).items()},
           "per_seed": per_seed.to_dict(orient="records")}
    if len(seeds) >= 2:
        out["interval"] = paired_t_interval(did.to_numpy())
    return out


def runs_from_predictions(runs: pd.DataFrame, truth, views, *, score_kind="probability",
                          path_mode: str = "exact", prediction_column: str = "predictions",
                          base: Path | None = None) -> pd.DataFrame:
    """Expand run records that name a prediction file per run into one row per (run, view)
    with the metrics computed here. Unscoreable runs keep their row with the reasons."""
    from splitscope.evaluation.predictions import read_predictions
    from splitscope.evaluation.scoreability import check_scoreability
    from splitscope.evaluation.views import score_view

    _need(runs, [prediction_column])
    out = []
    for _, r in runs.iterrows():
        p = Path(str(r[prediction_column]))
        if base is not None and not p.is_absolute():
            p = base / p
        kind = r["score_kind"] if "score_kind" in runs.columns and pd.notna(
            r.get("score_kind")) else score_kind
        pred = read_predictions(p, score_kind=kind)
        verdict, aligned = check_scoreability(pred, truth, path_mode)
        ident = {c: r[c] for c in runs.columns if c not in (prediction_column, "view")}
        if aligned is None:
            out.append({**ident, "view": None, "scoreable": False,
                        "reasons": "; ".join(verdict.reasons)})
            continue
        for view in views:
            res = score_view(truth, aligned, view, pred.score_kind, equal_source=False)
            out.append({**ident, "view": view.name, "scoreable": True,
                        **{m: res.get(m, np.nan) for m in METRIC_COLUMNS}})
    return pd.DataFrame(out)


def true_class_table(runs: pd.DataFrame, truth, exposed, *, score_kind="probability",
                     path_mode: str = "exact", prediction_column: str = "predictions",
                     arm: str = "arm", seed: str = "seed", base: Path | None = None
                     ) -> pd.DataFrame:
    """Per-row true-class probabilities of per-run prediction files, for
    :func:`did_true_class_probability`: one row per (run, truth row) with the run's arm and
    seed, the truth ``row``, ``exposed`` (row id in ``exposed``) and ``p_true`` (softmax for
    logits). Unscoreable runs are an error naming the run and its reasons."""
    from splitscope.evaluation.metrics import to_probabilities
    from splitscope.evaluation.predictions import read_predictions
    from splitscope.evaluation.scoreability import check_scoreability

    _need(runs, [prediction_column, arm, seed])
    exposed_mask = np.isin(truth.rows, np.asarray(list(exposed), dtype=np.int64))
    parts = []
    for _, r in runs.iterrows():
        p = Path(str(r[prediction_column]))
        if base is not None and not p.is_absolute():
            p = base / p
        pred = read_predictions(p, score_kind=score_kind)
        verdict, aligned = check_scoreability(pred, truth, path_mode)
        if aligned is None:
            raise InputError(f"run {p.name} is not scoreable: {'; '.join(verdict.reasons)}")
        probs, reason = to_probabilities(aligned, pred.score_kind)
        if probs is None:
            raise InputError(f"run {p.name}: {reason}")
        parts.append(pd.DataFrame({arm: r[arm], seed: r[seed], "row": truth.rows,
                                   "exposed": exposed_mask,
                                   "p_true": probs[np.arange(len(truth)), truth.labels]}))
    return pd.concat(parts, ignore_index=True)


@dataclass
class EffectsResult:
    delta_arch: pd.DataFrame
    components: pd.DataFrame
    contrasts: list[dict] = field(default_factory=list)
    params: dict = field(default_factory=dict)
    #: one row per (contrast, group, metric) of the ``--contrast`` paired contrasts
    paired: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: every matched pair behind ``paired``
    pairs: pd.DataFrame = field(default_factory=pd.DataFrame)

    def to_json(self) -> dict:
        from splitscope.evaluation.rescore import _clean, _records
        return _clean({"params": self.params, "delta_arch": _records(self.delta_arch),
                       "components": _records(self.components), "contrasts": self.contrasts,
                       "paired_contrasts": _records(self.paired)})

    def write(self, out_dir: str | Path) -> list[Path]:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, table in (("delta_arch", self.delta_arch),
                            ("component_effects", self.components),
                            ("contrasts", self.paired), ("contrast_pairs", self.pairs)):
            written.append(write_csv(table, out / f"{name}.csv"))
        (out / "effects.json").write_text(json.dumps(self.to_json(), indent=2, sort_keys=True,
                                                     default=str))
        return written + [out / "effects.json"]


def protocol_effects(runs, metric: str | None = None, *,
                     components=("policy", "threshold", "calibration"), baselines=None,
                     official: str = "official", deduplicated: str = "deduplicated",
                     external: str = "external", contrasts=(), condition: str | None = None,
                     by=None, identity=None, metrics=None, value_column: str | None = None,
                     metric_column: str | None = None, n_boot: int = RunOptions.resamples, seed: int = RunOptions.seed
                     ) -> EffectsResult:
    """Every effect the run records allow, for every metric (``metric``/``metrics``, default:
    all of the table's); a missing column or view is skipped and said so in
    ``params['skipped']``. ``contrasts`` (``"A-B"`` strings) are the paired contrasts of
    :func:`splitscope.evaluation.contrasts.paired_contrast`."""
    wanted = list(metrics or []) or ([metric] if metric else None)
    run = runs if isinstance(runs, RunTable) else read_run_table(
        runs, identity=identity, metrics=wanted, value_column=value_column,
        metric_column=metric_column)
    table, ident = run.table, run.identity
    baselines = dict(baselines or {})
    skipped: list[str] = []
    if "model" not in ident:
        skipped.append("delta_arch: no model column")
    skipped += [f"component {c}: no column" for c in components if c not in ident]
    views = set(table["view"].astype(str)) if "view" in ident else set()
    pairs = {"dedup": deduplicated, "transfer": external}
    for name, second in pairs.items():
        if not (official in views and second in views):
            skipped.append(f"{name}: views {official!r} and {second!r} not both present")
    da, comps, view_contrasts = [], [], []
    for m in run.metrics:
        if "model" in ident:
            da.append(delta_arch(table, m, ident))
        comps += [component_effect(table, c, m, baselines.get(c), ident)
                  for c in components if c in ident]
        if official in views and deduplicated in views:
            view_contrasts.append(dedup_sensitivity(table, m, official, deduplicated, ident))
        if official in views and external in views:
            view_contrasts.append(transfer_cost(table, m, official, external, ident))
    summaries, pair_tables, infos = [], [], []
    for spec in contrasts:
        summary, pair_rows, info = paired_contrast(run, spec, condition=condition, by=by,
                                                   n_boot=n_boot, seed=seed)
        summaries.append(summary)
        pair_tables.append(pair_rows.assign(contrast=info["contrast"]))
        infos.append(info)
    params = {"metric": run.metrics[0] if len(run.metrics) == 1 else None,
              "metrics": run.metrics, "runs": len(table), "skipped": skipped,
              "identity_columns": ident, "run_table": run.describe(),
              "contrasts": infos, "n_boot": n_boot, "seed": seed}
    return EffectsResult(_concat(da), _concat(comps), view_contrasts, params,
                         _concat(summaries), _concat(pair_tables))


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
