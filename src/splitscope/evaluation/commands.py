"""CLI verbs of the evaluation layer: ``metrics``, ``rescore``, ``effects``, ``pools``,
``attribution``.

Each prints a compact table, ``--json`` prints the same result as JSON on stdout (stable keys),
and ``--out DIR`` writes CSV/JSON exports and ``artifacts.json`` listing them.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import click
import numpy as np
import pandas as pd

from splitscope.cli_common import FORCE_OPTION, out_folder
from splitscope.cli_options import resamples_option, with_options
from splitscope.errors import InputError
from splitscope.records.exports import write_csv

_KINDS = click.Choice(["probability", "logit", "score"])


def _console():
    from splitscope.cli_common import rich_console

    return rich_console(width=160, markup=False, soft_wrap=False)


def _fmt(v, digits: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, (float, np.floating)):
        return "—" if not math.isfinite(float(v)) else f"{float(v):.{digits}f}"
    if v is pd.NA:
        return "—"
    if isinstance(v, (list, tuple)):
        return "; ".join(map(str, v)) if v else "—"
    return str(v)


def _table(title: str, frame: pd.DataFrame, columns: list[str]):
    """A rich table of plain text (cells and title are never read as markup)."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=Text(title), title_justify="left")
    cols = [c for c in columns if c in frame.columns]
    for c in cols:
        t.add_column(Text(str(c)), overflow="fold")
    for _, r in frame[cols].iterrows():
        t.add_row(*[Text(_fmt(r[c])) for c in cols])
    return t


def _dump(obj) -> str:
    from splitscope.evaluation.rescore import _clean

    return json.dumps(_clean(obj), indent=2, sort_keys=True, default=str)


def _truth(path: str, classes: str | None, query: str | None, sheet, read=None):
    from splitscope.evaluation.layer import _truth_from
    from splitscope.evaluation.predictions import read_truth

    cls = [c.strip() for c in classes.split(",")] if classes else None
    if query:
        from splitscope.manifest import build_manifest

        return _truth_from(build_manifest(path), cls, query)
    return read_truth(Path(path), cls, sheet=sheet, read=read)


def _read_options(sheet, header_row, sep, decimal, workspace):
    """Reader options of the prediction files (and, without their sheet, of the truth)."""
    from splitscope.evaluation.options import ReadOptions, sheet_arg

    cache = Path(workspace) / "parsed-tables" if workspace else None
    return ReadOptions(sheet=sheet_arg(sheet), header_row=header_row, sep=_escape(sep),
                       decimal=decimal, cache=cache)


def _own_dialect(read):
    """The truth's reader options: the cache and engine of ``read``; its sheet, header row
    and CSV dialect are its own (detected)."""
    return replace(read, sheet=None, header_row=None, sep=None, decimal=None)


def _escape(sep: str | None) -> str | None:
    return {"\\t": "\t", "tab": "\t"}.get(sep, sep) if sep is not None else None


def _kinds(default: str, per_entry: tuple[str, ...]):
    if not per_entry:
        return default
    mapping = {"*": default}
    for item in per_entry:
        if "=" not in item:
            raise InputError(f"--score-kind-for {item!r}: write ENTRY=KIND")
        name, kind = item.rsplit("=", 1)
        if kind not in ("probability", "logit", "score"):
            raise InputError(f"--score-kind-for {item!r}: kind must be probability, logit or "
                             f"score")
        mapping[name] = kind
    return mapping


_truth_options = [
    click.option("--truth", "truth_path", required=True, type=click.Path(exists=True),
                 help="Truth list: one-hot class columns or a label column (CSV/Parquet/XLSX)."),
    click.option("--classes", default=None,
                 help="Comma-separated class list in order (default: from the truth)."),
    click.option("--query", default=None,
                 help="Selector of truth rows when the truth is a manifest list (e.g. 'val')."),
    click.option("--view", "views", multiple=True,
                 help="Extra view NAME=KIND:ARG (where:SELECTOR, exclude:FILE, include:FILE, "
                      "without:SOURCE); repeatable."),
    click.option("--path-mode", type=click.Choice(["exact", "basename"]), default="exact",
                 show_default=True,
                 help="Path alignment; 'basename' is an opt-in repair, recorded in results."),
    click.option("--seed", default=0, show_default=True, type=int),
    click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
    click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
                 help="Folder for CSV/JSON exports."),
    FORCE_OPTION,
    click.option("--sheet", default=None,
                 help="Workbook sheet of the prediction files: NAME or 0-based INDEX "
                      "(default: the first; a note says when another sheet holds the paths)."),
    click.option("--truth-sheet", default=None, help="Workbook sheet of the truth list."),
    click.option("--header-row", type=click.IntRange(min=1), default=None,
                 help="Row number (1 = first) of the prediction files' header (default: "
                      "detected; title rows above it are skipped and counted)."),
    click.option("--sep", default=None,
                 help="CSV delimiter of the prediction files (default: sniffed among , ; tab |)."),
    click.option("--decimal", type=click.Choice([".", ","]), default=None,
                 help="CSV decimal mark (default: '.', or ',' when detected with a non-comma "
                      "delimiter)."),
    click.option("--workspace", "-w", type=click.Path(file_okay=False), default=None,
                 help="Workspace folder: parsed workbooks are cached there by SHA-256 "
                      "(default: no cache)."),
]




def _transfer(truth, aligned, score_kind, fit_sel, eval_sel) -> dict:
    """Threshold transfer (one class vs rest) and temperature scaling between two selectors."""
    from splitscope.boundary import select
    from splitscope.evaluation.calibration import temperature_transfer
    from splitscope.evaluation.thresholds import threshold_transfer_multiclass

    if not (fit_sel and eval_sel):
        raise InputError("--fit and --evaluate go together")
    frame = truth.frame()
    fm = np.isin(frame["row"], select(frame, fit_sel).rows)
    em = np.isin(frame["row"], select(frame, eval_sel).rows)
    if not fm.any() or not em.any():
        raise InputError(f"--fit {fit_sel!r} selects {int(fm.sum())} rows, --evaluate "
                         f"{eval_sel!r} {int(em.sum())}; both need rows")
    y = truth.labels
    table = threshold_transfer_multiclass(y[fm], aligned[fm], y[em], aligned[em], truth.classes)
    ok = table.dropna(subset=["rule"])
    summary = (ok.groupby("rule", sort=False)[["threshold", "eval_balanced_accuracy",
                                                "transfer_gap", "oracle_gap"]].mean()
               .reset_index().rename(columns={"threshold": "mean_threshold"}))
    out = {"fit": fit_sel, "evaluate": eval_sel, "fit_rows": int(fm.sum()),
           "evaluate_rows": int(em.sum()), "thresholds": table.to_dict(orient="records"),
           "threshold_summary": summary.to_dict(orient="records")}
    if score_kind in ("probability", "logit"):
        out["temperature"] = temperature_transfer(y[fm], aligned[fm], y[em], aligned[em],
                                                  score_kind)
    return out


@click.command("metrics")
@click.argument("predictions", type=click.Path(exists=True, dir_okay=False))
@with_options(_truth_options)
@click.option("--score-kind", type=_KINDS, default="score", show_default=True,
              help="What the class columns hold (declared, never guessed).")
@click.option("--layout", type=click.Choice(["wide", "long"]), default="wide", show_default=True)
@resamples_option(2000, help="Percentile bootstrap resamples over cases (0: none).")
@click.option("--fit", "fit_sel", default=None,
              help="Selector of the rows thresholds/temperature are fitted on (e.g. "
                   "'source!=KVASIR'); needs --evaluate.")
@click.option("--evaluate", "eval_sel", default=None,
              help="Selector of the rows they are evaluated on (e.g. 'source=KVASIR').")
def metrics_cmd(predictions, truth_path, classes, query, views, path_mode, seed, as_json,
                out_dir, sheet, truth_sheet, header_row, sep, decimal, workspace, score_kind,
                layout, n_boot, fit_sel, eval_sel):
    """Metrics of one prediction file on every view, with bootstrap intervals."""
    from splitscope.evaluation.predictions import read_predictions
    from splitscope.evaluation.scoreability import check_scoreability
    from splitscope.evaluation.uncertainty import bootstrap_metrics
    from splitscope.evaluation.views import official_view, parse_view, score_view

    read = _read_options(sheet, header_row, sep, decimal, workspace)
    truth = _truth(truth_path, classes, query, truth_sheet, _own_dialect(read))
    pred = read_predictions(predictions, score_kind=score_kind, layout=layout, read=read)
    verdict, aligned = check_scoreability(pred, truth, path_mode)
    result = {"entry": pred.name, "verdict": verdict.to_dict(), "views": []}
    if aligned is not None:
        vlist = [official_view(truth)] + [parse_view(truth, v, path_mode=path_mode)
                                          for v in views]
        for view in vlist:
            m = score_view(truth, aligned, view, pred.score_kind, per_class=True)
            m["definition"] = view.to_dict()
            if n_boot and view.n:
                m["bootstrap"] = bootstrap_metrics(truth.labels[view.rows], aligned[view.rows],
                                                   n_boot=n_boot, seed=seed)
            result["views"].append(m)
        if fit_sel or eval_sel:
            result["transfer"] = _transfer(truth, aligned, pred.score_kind, fit_sel, eval_sel)
    if out_dir:
        with out_folder(out_dir) as folder:
            (folder.path / "metrics.json").write_text(_dump(result))
            write_csv(pd.DataFrame([_metrics_row(m) for m in result["views"]]),
                      folder.path / "metrics.csv")
    if as_json:
        click.echo(_dump(result))
        return
    con = _console()
    con.print(f"{pred.name}: {'scoreable' if verdict.scoreable else 'NOT scoreable'}"
              f" (path mode {path_mode}, scores declared {score_kind}"
              + ("; the tool's own logits, scored as their softmax)" if pred.own_logits else ")"))
    for r in verdict.reasons:
        con.print(f"  reason: {r}")
    for r in verdict.notes:
        con.print(f"  note: {r}")
    if result["views"]:
        rows = []
        for m in result["views"]:
            b = m.get("bootstrap", {})
            row = {"view": m["view"], "rows": m["rows"]}
            for k in ("balanced_accuracy", "macro_auc", "organizer_score"):
                iv = b.get(k)
                row[k] = (f"{_fmt(m[k])} [{_fmt(iv['low'])}, {_fmt(iv['high'])}]" if iv
                          else _fmt(m[k]))
            row.update(accuracy=m["accuracy"], ece=m["ece"], brier=m["brier"], nll=m["nll"])
            rows.append(row)
        con.print(_table("metrics per view ([low, high] = 95% percentile bootstrap over "
                         "cases)", pd.DataFrame(rows), list(rows[0])))
        tr = result.get("transfer")
        if tr:
            gaps = pd.DataFrame(tr["threshold_summary"])
            con.print(_table(f"thresholds fitted on {tr['fit']} ({tr['fit_rows']} rows), "
                             f"evaluated on {tr['evaluate']} ({tr['evaluate_rows']} rows); "
                             f"mean over classes", gaps, list(gaps.columns)))
            t = tr.get("temperature")
            if t:
                con.print(f"temperature T* = {_fmt(t['temperature'])}: evaluation ECE "
                          f"{_fmt(t['eval_ece_before'])} → {_fmt(t['eval_ece_after'])} "
                          f"({'worse' if t['worse'] else 'not worse'})")
        for m in result["views"]:
            for key in ("balanced_accuracy_reason", "macro_auc_skipped", "probability_reason"):
                if m.get(key):
                    label = "AUC classes skipped" if key == "macro_auc_skipped" else key
                    con.print(f"  {m['view']}: {label}: {m[key]}")


def _metrics_row(m: dict) -> dict:
    """One CSV row per view: the scalar metrics, then each bootstrapped metric's interval
    (``<metric>_low``, ``<metric>_high``) and the interval's kind (its level included)."""
    row = {k: v for k, v in m.items() if not isinstance(v, (dict, list))}
    b = m.get("bootstrap") or {}
    for k in ("balanced_accuracy", "macro_auc", "organizer_score"):
        iv = b.get(k) or {}
        row[f"{k}_low"], row[f"{k}_high"] = iv.get("low"), iv.get("high")
    row["interval"] = b.get("kind", "not computed (--resamples 0)")
    return row


@click.command("rescore")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@with_options(_truth_options)
@click.option("--score-kind", type=_KINDS, default="score", show_default=True,
              help="Declared score kind for every entry.")
@click.option("--score-kind-for", "kind_for", multiple=True,
              help="Per-entry score kind ENTRY=KIND (repeatable).")
@click.option("--reported", type=click.Path(exists=True, dir_okay=False), default=None,
              help="CSV of reported scores (entry, balanced_accuracy/mean_auc/...).")
@click.option("--final-folder", type=click.Path(exists=True, file_okay=False), default=None,
              help="Folder of the final (e.g. test) submissions for the final ranking.")
@click.option("--final-truth", type=click.Path(exists=True, dir_okay=False), default=None)
@click.option("--final-path-mode", type=click.Choice(["exact", "basename"]), default="exact",
              show_default=True)
@click.option("--final-scores", type=click.Path(exists=True, dir_okay=False), default=None,
              help="CSV with entry, final_score (instead of --final-folder).")
@click.option("--exclude", multiple=True, help="Entry left out of scores and ranks (repeatable).")
@click.option("--rank-metric", type=click.Choice(["organizer_score", "balanced_accuracy",
                                                   "macro_auc"]), default="organizer_score",
              show_default=True)
@resamples_option(0, help="Bootstrap resamples per entry and view (0: none).")
@click.option("--entry-bootstrap", "entry_boot", default=2000, show_default=True, type=int,
              help="Resamples of the bootstrap over entries behind the per-view mean and "
                   "median Δ intervals (0: none).")
def rescore_cmd(folder, truth_path, classes, query, views, path_mode, seed, as_json, out_dir,
                sheet, truth_sheet, header_row, sep, decimal, workspace, score_kind, kind_for,
                reported, final_folder, final_truth, final_path_mode, final_scores, exclude,
                rank_metric, n_boot, entry_boot):
    """Re-score a folder of submissions on evaluation views: verdicts, scores, ranks, Spearman."""
    from splitscope.evaluation.predictions import read_truth
    from splitscope.evaluation.rescore import final_ranking, rescore
    from splitscope.evaluation.views import parse_view

    read = _read_options(sheet, header_row, sep, decimal, workspace)
    truth_read = _own_dialect(read)
    truth = _truth(truth_path, classes, query, truth_sheet, truth_read)
    vlist = [parse_view(truth, v, path_mode=path_mode) for v in views]
    kinds = _kinds(score_kind, kind_for)
    final = None
    if final_folder:
        if not final_truth:
            raise InputError("--final-folder needs --final-truth")
        ftruth = read_truth(Path(final_truth), truth.classes, sheet=truth_sheet, read=truth_read)
        final = final_ranking(final_folder, ftruth, score_kind=kinds, path_mode=final_path_mode,
                              metric=rank_metric, read=read)
    elif final_scores:
        from splitscope.manifest import read_table

        final = read_table(Path(final_scores))
        if "final_score" in final.columns:
            final["final_score"] = pd.to_numeric(final["final_score"], errors="coerce")
    res = rescore(folder, truth, vlist, score_kind=kinds, path_mode=path_mode,
                  reported=reported, final=final, exclude=exclude, rank_metric=rank_metric,
                  bootstrap=n_boot, seed=seed, read=read, entry_bootstrap=entry_boot)
    if out_dir:
        with out_folder(out_dir) as staged:
            res.write(staged.path)
            if final_folder:
                final.write(staged.path / "final")
    if as_json:
        click.echo(res.json_text())
        return
    con = _console()
    v = res.verdicts
    con.print(_table(f"scoreability ({int(v['scoreable'].sum())} of {len(v)} scoreable; path "
                     f"mode {path_mode})", v, ["entry", "scoreable", "excluded", "reasons",
                                               "notes"]))
    wide = res.ranks.pivot(index="entry", columns="view", values=[rank_metric, "rank",
                                                                  "rank_change"])
    rows = []
    for entry in wide.index:
        r = {"entry": entry}
        for view in [x["name"] for x in res.views]:
            r[f"{view}"] = (f"{_fmt(wide.loc[entry, (rank_metric, view)])} "
                            f"#{_fmt(wide.loc[entry, ('rank', view)])}"
                            f" ({_fmt(wide.loc[entry, ('rank_change', view)])})")
        rows.append(r)
    if rows:
        con.print(_table(f"{rank_metric} #rank (rank change vs official) per view",
                         pd.DataFrame(rows), list(rows[0])))
    con.print(_table("Spearman ρ per view", res.spearman, list(res.spearman.columns)))
    _print_aggregates(con, res.aggregates, rank_metric)
    if res.reported is not None:
        con.print(_table("reported vs recomputed", res.reported, list(res.reported.columns)))


def _interval(block: dict, stat: str) -> str:
    iv = block.get("interval")
    if not iv:
        return _fmt(block.get(stat))
    return f"{_fmt(block.get(stat))} [{_fmt(iv[stat]['low'])}, {_fmt(iv[stat]['high'])}]"


def _print_aggregates(con, aggregates: list[dict], metric: str) -> None:
    """One row per view: the cohort-level figures, then who is out of the cohort and why."""
    rows = []
    kind = None
    for a in aggregates:
        d, rc, es = a["delta"], a["rank_changes"], a["equal_source"]
        kind = kind or (d.get("interval") or {}).get("kind")
        fin = a.get("spearman_final") or {}
        rows.append({
            "view": a["view"], "n": a["cohort"]["n"], "mean Δ": _interval(d, "mean"),
            "median Δ": _interval(d, "median"),
            "rank changed": f"{rc['entries_changed']} of {rc['n']}",
            "largest |rank change|": (f"{rc['largest_abs']}: {', '.join(rc['largest_entries'])}"
                                      if rc["largest_abs"] else "0"),
            "ρ official": _fmt(a["spearman_official"]["rho"], 3),
            "ρ final (n)": (f"{_fmt(fin.get('rho'), 3)} ({fin.get('n')})" if fin else "—"),
            "equal-source mean Δ": (_interval(es["delta"], "mean")
                                    if es["status"] == "completed" else "not assessed"),
            "equal-source − pooled": (_interval(es["minus_pooled"], "mean")
                                      if es["status"] == "completed" else "not assessed")})
    if not rows:
        return
    con.print(_table(f"per view, {metric} against the official view (Δ = view − official, per "
                     f"entry; [low, high] = {kind or 'no interval'})", pd.DataFrame(rows),
                     list(rows[0])))
    for o in aggregates[0]["cohort"]["out"]:
        con.print(f"  out of the cohort: {o['entry']}: {o['why']}")
    first = {o["entry"] for o in aggregates[0]["cohort"]["out"]}
    for a in aggregates[1:]:
        for o in a["cohort"]["out"]:
            if o["entry"] not in first:
                con.print(f"  out of the {a['view']} cohort: {o['entry']}: {o['why']}")


@click.command("effects")
@click.argument("runs", type=click.Path(exists=True, dir_okay=False))
@click.option("--metric", "metrics", multiple=True,
              help="Metric column (wide table) or metric name (long table); repeatable "
                   "(default: every metric of the table).")
@click.option("--identity", "identity", multiple=True,
              help="Identity column (repeatable; default: every column that is not a metric).")
@click.option("--value-column", default=None,
              help="Value column of a long table (default: detected).")
@click.option("--metric-column", default=None,
              help="Metric-name column of a long table (default: detected).")
@click.option("--contrast", "contrast_specs", multiple=True,
              help="Paired contrast LEVEL_A-LEVEL_B of one condition column, e.g. "
                   "Removal-Full (repeatable).")
@click.option("--condition", default=None,
              help="Condition column of the contrasts (default: the one column holding both "
                   "levels).")
@click.option("--by", "by", multiple=True,
              help="Columns the contrasts are reported by (repeatable; default: every "
                   "identity column except the condition and seed-like columns).")
@resamples_option(2000, help="Seed-bootstrap resamples of each contrast (0: none).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--component", "components", multiple=True,
              default=("policy", "threshold", "calibration"), show_default=True,
              help="Protocol component columns to contrast (repeatable).")
@click.option("--baseline", "baselines", multiple=True,
              help="COMPONENT=LEVEL baseline of a component (default: first level).")
@click.option("--official", default="official", show_default=True)
@click.option("--deduplicated", default="deduplicated", show_default=True)
@click.option("--external", default="external", show_default=True)
@click.option("--did", "did_table", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Per-row true-class probabilities (arm, seed, exposed, p_true) for the DiD.")
@click.option("--treated", default="local", show_default=True)
@click.option("--control", default="distant", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None)
@FORCE_OPTION
def effects_cmd(runs, metrics, identity, value_column, metric_column, contrast_specs, condition,
                by, n_boot, seed, components, baselines, official, deduplicated, external,
                did_table, treated, control, as_json, out_dir):
    """Protocol effects from a run table (long or wide): paired contrasts (--contrast A-B),
    Δarch, component |Δ|, dedup, transfer, DiD."""
    from splitscope.evaluation.effects import did_true_class_probability, protocol_effects

    base = {}
    for b in baselines:
        if "=" not in b:
            raise InputError(f"--baseline {b!r}: write COMPONENT=LEVEL")
        k, v = b.split("=", 1)
        base[k] = v
    res = protocol_effects(runs, metrics=metrics, identity=identity or None,
                           value_column=value_column, metric_column=metric_column,
                           contrasts=contrast_specs, condition=condition, by=by or None,
                           n_boot=n_boot, seed=seed, components=components, baselines=base,
                           official=official, deduplicated=deduplicated, external=external)
    if did_table:
        from splitscope.manifest import read_table

        t = read_table(Path(did_table))
        t["p_true"] = pd.to_numeric(t["p_true"], errors="coerce") if "p_true" in t else t.get(
            "p_true")
        res.contrasts.append(did_true_class_probability(t, treated=treated, control=control))
    if out_dir:
        with out_folder(out_dir) as folder:
            res.write(folder.path)
    if as_json:
        click.echo(_dump(res.to_json()))
        return
    con = _console()
    rt = res.params["run_table"]
    con.print(f"run table: {rt['layout']}, {rt['rows']} rows; identity "
              f"{', '.join(rt['identity_columns'])}; metrics {', '.join(rt['metric_columns'])}")
    for note in rt["notes"]:
        con.print(f"  {note}")
    _print_paired(con, res)
    if len(res.delta_arch):
        con.print(_table("Δarch: range over models of the seed mean", res.delta_arch,
                         list(res.delta_arch.columns)))
    if len(res.components):
        con.print(_table("component effects (Δ = level − baseline over matched pairs; "
                         "[low, high] paired-t 95%)", res.components,
                         list(res.components.columns)))
    rows = []
    for c in res.contrasts:
        iv = c.get("interval", {})
        rows.append({"contrast": c["contrast"], "metric": c.get("metric"),
                     "runs/seeds": c.get("runs", c.get("seeds")),
                     "mean": c.get("summary_mean"), "sd": c.get("summary_sd"),
                     "paired-t 95%": (f"[{_fmt(iv.get('low'))}, {_fmt(iv.get('high'))}]"
                                      if iv else "—")})
    if rows:
        con.print(_table("view contrasts (mean ± SD over runs; paired-t interval)",
                         pd.DataFrame(rows), list(rows[0])))
    for s in res.params["skipped"]:
        con.print(f"skipped: {s}")


def _print_paired(con, res) -> None:
    if not len(res.paired):
        return
    p = res.paired
    by = [c for c in p.columns if c not in _PAIRED_FIELDS]
    rows = []
    for r in p.to_dict(orient="records"):
        rows.append({"contrast": r["contrast"], **{c: r[c] for c in by}, "metric": r["metric"],
                     "pairs": r["pairs"], "mean": r["mean"], "sd": r["sd"],
                     "paired-t 95%": (f"[{_fmt(r['t_low'])}, {_fmt(r['t_high'])}]"
                                      if np.isfinite(r["t_low"]) else r["interval"]),
                     "seed bootstrap 95%": (f"[{_fmt(r['boot_low'])}, {_fmt(r['boot_high'])}]"
                                            if np.isfinite(r["boot_low"]) else r["bootstrap"])})
    con.print(_table("paired contrasts (first − second level; mean ± SD over pairs)",
                     pd.DataFrame(rows), list(rows[0])))
    for info in res.params["contrasts"]:
        con.print(f"  {info['contrast']}: condition {info['condition']!r}, paired on "
                  f"{', '.join(info['paired_on'])}; {info['unpaired']} unpaired row(s)"
                  + (f": {len(info['unpaired_first'])} of {info['first']!r}, "
                     f"{len(info['unpaired_second'])} of {info['second']!r}"
                     if info["unpaired"] else ""))


_PAIRED_FIELDS = {"contrast", "condition", "metric", "pairs", "mean", "sd", "t_low", "t_high",
                  "interval", "boot_low", "boot_high", "bootstrap", "paired_on",
                  "pairs_missing_value"}


@click.command("pools")
@click.argument("manifest", type=click.Path(exists=True))
@click.option("--train", default="train", show_default=True,
              help="Selector of the training population.")
@click.option("--drop-source", default=None, help="Source dropped for the Source-only pool.")
@click.option("--flagged", type=click.Path(exists=True, dir_okay=False), default=None,
              help="List of screen-positive rows (paths or row ids) for the Removal pool.")
@click.option("--batch-size", default=128, show_default=True, type=int)
@click.option("--no-drop-last", is_flag=True, help="Count a final partial minibatch.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--draw-order", type=click.Choice(["class-name", "release", "size-desc"]),
              default="class-name", show_default=True,
              help="Order in which classes are drawn from the seeded generator.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None)
@FORCE_OPTION
def pools_cmd(manifest, train, drop_source, flagged, batch_size, no_drop_last, seed, draw_order,
              as_json, out_dir):
    """Training-pool controls from a manifest, exported as row lists."""
    from splitscope.evaluation.pools import training_pools
    from splitscope.manifest import build_manifest

    m = build_manifest(manifest)
    res = training_pools(m, train=train, drop_source=drop_source, flagged=flagged, seed=seed,
                         batch_size=batch_size, drop_last=not no_drop_last,
                         draw_order=draw_order)
    if out_dir:
        with out_folder(out_dir) as folder:
            res.write(folder.path, m)
    if as_json:
        click.echo(_dump(res.to_json()))
        return
    con = _console()
    con.print(_table(f"training pools (batch {batch_size}, "
                     f"{'drop-last' if not no_drop_last else 'keep last'}; seed {seed}, draw "
                     f"order {draw_order})", res.summary,
                     ["pool", "rows", "unique_rows", "minibatches_per_epoch", "definition"]))
    cc = res.class_counts.reset_index().rename(columns={"index": "pool"})
    con.print(_table("class counts", cc, list(cc.columns)))
    sc = res.source_counts.reset_index().rename(columns={"index": "pool"})
    con.print(_table("source counts", sc, list(sc.columns)))


@click.command("attribution")
@click.argument("manifest", type=click.Path(exists=True))
@click.option("--maps", "maps_src", required=True, type=click.Path(exists=True),
              help="Attribution maps: .npz keyed by released path, or a folder of "
                   "<path>.npy files.")
@click.option("--masks", "masks_src", required=True, type=click.Path(exists=True),
              help="Body/organ masks (1 inside anatomy), same layout as --maps.")
@click.option("--flagged", required=True, type=click.Path(exists=True, dir_okay=False),
              help="List of exposed rows (a path or row column), e.g. leaked/flagged rows.")
@click.option("--rows", "rows_sel", default="*", show_default=True,
              help="Selector of the manifest rows compared (e.g. 'test').")
@click.option("--group-column", default=None,
              help="Manifest column of groups: cluster bootstrap over its values.")
@click.option("--group-regex", default=None,
              help="Regex with a named group 'group' over the basename: cluster bootstrap.")
@click.option("--exposed-name", default="flagged", show_default=True,
              help="What the exposed rows are, in the record's words.")
@resamples_option(2000, help="Bootstrap resamples (0: no interval).")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Folder for attribution_rows.csv and attribution.json.")
@FORCE_OPTION
def attribution_cmd(manifest, maps_src, masks_src, flagged, rows_sel, group_column, group_regex,
                    exposed_name, n_boot, seed, as_json, out_dir):
    """Share of attribution mass outside anatomy: exposed versus clean rows (METHODS 5.10)."""
    from splitscope.evaluation.attribution import audit_attribution
    from splitscope.evaluation.pools import flagged_rows
    from splitscope.manifest import build_manifest
    from splitscope.records import file_fingerprint

    if group_column and group_regex:
        raise InputError("give --group-column or --group-regex, not both")
    m = build_manifest(manifest)
    if group_regex:
        from splitscope.manifest.groups import apply_group_regex

        m = apply_group_regex(m, group_regex)
        group_column = "group"
    flagged_ids, unmatched = flagged_rows(m, flagged)
    inputs = [file_fingerprint(p) for p in (manifest, maps_src, masks_src, flagged)
              if Path(p).is_file()]
    layer, summary = audit_attribution(
        m, maps_src, masks_src, flagged_ids, rows=rows_sel, group_column=group_column,
        exposed_name=exposed_name, n_boot=n_boot, seed=seed, inputs=inputs,
        params={"group_regex": group_regex, "flagged_unmatched_entries": unmatched})
    res = summary["contrast"]
    table = layer.tables["attribution_rows"]
    rec = layer.records[0]
    result = {"contrast": res, "record": rec.to_dict(),
              "flagged_unmatched_entries": unmatched,
              **{k: v for k, v in summary.items() if k != "contrast"}}
    if out_dir:
        with out_folder(out_dir) as folder:
            write_csv(table, folder.path / "attribution_rows.csv")
            (folder.path / "attribution.json").write_text(_dump(result))
    if as_json:
        click.echo(_dump(result))
        return
    con = _console()
    rows = [{"rows": side, "listed": res[side]["rows"], "assessed": res[side]["assessed"],
             "mean share": res[side]["mean"], "median share": res[side]["median"]}
            for side in ("exposed", "clean")]
    con.print(_table(f"share of |attribution| outside the mask ({exposed_name} = exposed)",
                     pd.DataFrame(rows), list(rows[0])))
    iv = res["interval"]
    con.print(f"difference exposed − clean: {_fmt(res['difference'])} "
              f"[{_fmt(iv['low'])}, {_fmt(iv['high'])}] ({iv['kind']})")
    con.print(f"status: {rec.status}" + (f" — {rec.reason}" if rec.reason else ""))
    for k, v in result["not_assessed_by_reason"].items():
        con.print(f"  not assessed: {v} rows, {k}")
    if unmatched:
        con.print(f"  {unmatched} flagged entries match no manifest row")


COMMANDS: list = [metrics_cmd, rescore_cmd, effects_cmd, pools_cmd, attribution_cmd]
