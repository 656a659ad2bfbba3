"""CLI verbs of the audit: ``audit`` (every layer, one command) and ``demo`` (make the demo
benchmark and audit it). Registered by :mod:`splitscope.cli`."""

from __future__ import annotations

import contextlib
import json
import shlex
from pathlib import Path

import click

from splitscope.audit.options import SCORE_KINDS, EvaluationOptions
from splitscope.cli_options import (
    EXECUTOR_OPTIONS,
    IMAGE_COLUMN_OPTION,
    LABEL_MAP_OPTION,
    LIST_FILE_OPTIONS,
    MODE_OPTION,
    RUN_OPTIONS,
    SAFETY_OPTIONS,
    SEARCH_OPTIONS,
    list_options,
    resamples_option,
    safety_options,
    with_image_column,
    with_options,
)
from splitscope.errors import InputError
from splitscope.features.extract import FeatureParams
from splitscope.options import RunOptions, SearchOptions


def _fail_on_help() -> str:
    from splitscope.audit.conditions import METRICS

    return (
        "Exit with code 1 when METRIC OP VALUE holds (repeatable), e.g. "
        "'byte_identical_rate>0', 'ncc_rate>0.01', 'header_probe_ba>0.7'; ops > >= < <= == !=; "
        "a value may end in %. The metric is its largest value over the audited boundaries; a "
        "metric no layer measured does not hold (gate on 'layers_not_assessed>0' too). "
        "Metrics: " + "; ".join(m.help_line() for m in METRICS.values()) + "; and those a "
        "registered layer declares."
    )


_FAIL_ON_HELP = _fail_on_help()


def _size(path: Path) -> str:
    n = path.stat().st_size
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def summary_payload(result) -> dict:
    """The CLI's result (also the ``--json`` output): stable keys."""
    doc = result.document
    return {
        "exit_code": result.exit_code,
        "out_dir": str(result.out_dir),
        "audit_json": str(result.audit_json),
        "report_html": str(result.report),
        "report_bytes": result.report.stat().st_size,
        "duration_s": doc["run"]["duration_s"],
        "verdicts": doc["summary"]["verdicts"],
        "meaning": doc["summary"].get("meaning", []),
        "notes": doc["summary"]["lines"],
        "layers": doc["layers"],
        "fail_on": doc["fail_on"],
        "scorecard": [{"key": s["key"], "status": s["status"]} for s in doc["scorecard"]],
        "records": {"total": len(doc["records"]),
                    "by_status": _by_status(doc["records"])},
    }


def _by_status(records) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return dict(sorted(out.items()))


def print_summary(result, extra_lines: list[str] | None = None) -> None:
    """Verdicts first (one line per boundary and finding), then layers, conditions, files."""
    from rich.markup import escape
    from rich.table import Table

    from splitscope.cli_common import rich_console

    console = rich_console()
    doc = result.document
    for line in doc["summary"]["verdicts"] + doc["summary"].get("meaning", []):
        console.print(escape(line))
    for line in extra_lines or []:
        console.print(escape(line))
    for line in doc["summary"].get("lines", []):  # notes not shown in the tables below
        if not line.startswith(("Layer ", "--fail-on ")):
            console.print(escape(line))
    table = Table(title=None, show_edge=False, pad_edge=False, box=None)
    for col in ("layer", "status", "records", "seconds", "reason"):
        table.add_column(col)
    for layer in doc["layers"]:
        reason = str(layer.get("reason") or "")
        table.add_row(escape(layer["layer"]), escape(layer["status"]), str(layer["records"]),
                      f"{layer['duration_s']:.1f}",
                      escape(reason if len(reason) < 100 else reason[:99] + "…"))
    console.print(table)
    for cond in doc["fail_on"]:
        value = "not measured" if cond["value"] is None else f"{cond['value']:.4g}"
        state = "HELD" if cond["held"] else "not held"
        console.print(escape(f"--fail-on {cond['condition']}: {value} → {state}"))
    lists = result.out_dir / "lists"
    n_lists = sum(1 for a in doc.get("artifacts", []) if a["path"].startswith("lists/"))
    console.print(escape(
        f"Wrote {result.audit_json} ({_size(result.audit_json)}), {result.report} "
        f"({_size(result.report)}), {n_lists} files in {lists}/, artifacts.json "
        f"[{doc['run']['duration_s']:.1f} s]"))
    if result.exit_code == 3:
        console.print("A layer failed: see the layers table and audit.json (exit code 3).")


def _layer_names(text: str | None) -> list[str] | None:
    from splitscope.audit.protocol import layer_names

    known = layer_names()
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"--layers: unknown layer(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(known)}")
    return names


def _command_line(verb: str, args: list[str], ctx: click.Context) -> str:
    """The command as it would be typed again: arguments, then the options given."""
    parts = ["splitscope", verb, *map(str, args)]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name not in ctx.params:
            continue
        value = ctx.params[param.name]
        if value in (None, False, ()) or value == param.default:
            continue
        flag = param.opts[0]
        if param.is_flag:
            parts.append(flag)
        else:
            for v in value if isinstance(value, tuple) else (value,):
                parts.extend([flag, str(v)])
    return shlex.join(parts)


def _finish(result, as_json: bool, extra: dict | None = None, extra_lines=None) -> None:
    if as_json:
        payload = summary_payload(result)
        if extra:
            payload.update(extra)
        click.echo(json.dumps(payload, indent=1, ensure_ascii=False, default=str))
    else:
        print_summary(result, extra_lines)
    if result.exit_code:
        raise SystemExit(result.exit_code)


@click.command("audit")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--control", type=click.Path(exists=True), default=None,
              help="A release known to be clean (negative control): the same predicates on its "
                   "own test → train boundary, reported beside the audited rates.")
@click.option("--external", type=click.Path(exists=True), default=None,
              help="Another corpus: audit external → audited training rows (containment).")
@click.option("--predictions", type=click.Path(exists=True), default=None,
              help="Saved predictions (file or folder) for the evaluation layer.")
@click.option("--sheet", default=None,
              help="Workbook sheet of the prediction files: NAME or 0-based INDEX (default: "
                   "the first; a note says when another sheet holds the paths).")
@click.option("--header-row", type=click.IntRange(min=1), default=None,
              help="Row number (1 = first) of the prediction files' header (default: "
                   "detected).")
@click.option("--sep", default=None,
              help="CSV delimiter of the prediction files (default: sniffed).")
@click.option("--decimal", type=click.Choice([".", ","]), default=None,
              help="CSV decimal mark of the prediction files (default: detected).")
@click.option("--score-kind", type=click.Choice(SCORE_KINDS),
              default=EvaluationOptions.score_kind, show_default=True,
              help="What the saved prediction scores are (declared, never guessed); "
                   "calibration metrics and reliability diagrams need probability or logit.")
@click.option("--attribution-maps", type=click.Path(exists=True), default=None,
              help="Supplied attribution maps (.npz keyed by released path, or a folder of "
                   "<path>.npy): the attribution layer compares leaked and clean test rows.")
@click.option("--attribution-masks", type=click.Path(exists=True), default=None,
              help="Body/organ masks (1 inside anatomy), same layout as --attribution-maps.")
@click.option("--group-regex", default=None,
              help="Named-group regex over the file name giving the group (and frame), "
                   "e.g. 'person(?P<group>\\d+)_'.")
@click.option("--out", "out_dir", default="splitscope-audit", show_default=True,
              type=click.Path(file_okay=False),
              help="Output folder: absent, empty, or one an earlier run wrote (its files, as "
                   "its artifacts.json lists them, are replaced).")
@click.option("--force", is_flag=True,
              help="Write into an --out folder holding files splitscope did not write there "
                   "(they are kept; one where the audit writes is still refused).")
@click.option("--workspace", default=None, type=click.Path(file_okay=False),
              help="Feature cache (default OUT/workspace); reused across runs.")
@with_options(SEARCH_OPTIONS)
@click.option("--thumb-size", default=FeatureParams.thumb_size, show_default=True, type=int,
              help="Thumbnail side S (part of every pixel predicate).")
@MODE_OPTION
@click.option("--transforms", default=SearchOptions.transforms, show_default=True, type=int,
              help="Reference images in the seeded transform-sensitivity sample (0: skip).")
@with_options(RUN_OPTIONS)
@resamples_option(dest="resamples", help="Bootstrap and group resamples of every layer.")
@click.option("--workers", default=None, type=int, help="Worker processes (default: all cores).")
@with_options(EXECUTOR_OPTIONS)
@click.option("--max-pairs", default=RunOptions.max_pairs, show_default=True, type=int,
              help="Flagged pairs per boundary shown in the report's gallery.")
@click.option("--layers", default=None, metavar="NAMES",
              help="Run only these layers (comma-separated: duplicates, groups, provenance, "
                   "evaluation, attribution, external); the others are recorded "
                   "'not assessed'.")
@click.option("--fail-on", "fail_on", multiple=True, metavar="CONDITION", help=_FAIL_ON_HELP)
@LABEL_MAP_OPTION
@click.option("--external-label-map", default=None, metavar="MAP",
              help="The external corpus's own label map, applied before --label-map (its "
                   "labels spelled differently: 'glioma_tumor=glioma,…' or a CSV file).")
@click.option("--control-label-map", default=None, metavar="MAP",
              help="The control corpus's own label map, applied before --label-map.")
@with_options(LIST_FILE_OPTIONS)
@IMAGE_COLUMN_OPTION
@with_options(SAFETY_OPTIONS)
@click.option("--croissant", is_flag=True,
              help="Also write OUT/croissant.json, a Croissant JSON-LD record (with RAI "
                   "fields) of the audited release; `splitscope croissant OUT` adds one later.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
def audit_command(inputs, control, external, predictions, sheet, header_row, sep, decimal,
                  score_kind, attribution_maps,
                  attribution_masks, group_regex, out_dir, workspace, tau, radius, thumb_size,
                  mode, dihedral, transforms, seed, resamples, workers, engine, scheduler, max_pairs,
                  layers, fail_on, label_map, external_label_map, control_label_map,
                  path_column, label_column, split_column, source_column, group_column,
                  list_root, constant_split, image_column, allow_outside_root, allow_urls,
                  follow_links, max_file_size, croissant, force, as_json) -> None:
    """Audit a release (folder ROOT/<split>/<class>/…, a list file, a table of embedded
    images, a save_to_disk folder or a MedMNIST .npz) with every layer.

    Writes OUT/audit.json (the source of truth), OUT/report.html (self-contained),
    OUT/lists/ (contaminated-file lists, pair tables, group mappings, deduplicated splits)
    and OUT/artifacts.json (every output with its SHA-256). A rerun replaces the files the
    previous run listed there; anything else in OUT is refused (exit 2, named) unless --force.
    The outputs appear at once, when the audit is done. Exit codes: 0 ok, 1 a --fail-on
    condition held, 2 input error, 3 a layer failed (recorded in audit.json).
    """
    from splitscope.audit.conditions import parse_condition
    from splitscope.audit.run import audit
    from splitscope.features.executor import executor_for

    conditions = [parse_condition(c) for c in fail_on]  # bad conditions fail before any work
    command = _command_line("audit", list(inputs), click.get_current_context())
    executor = executor_for(engine, workers, scheduler)
    with contextlib.closing(executor) if executor is not None else contextlib.nullcontext():
        result = audit(list(inputs), control=control, external=external, predictions=predictions,
                       group_regex=group_regex, out_dir=out_dir, workspace=workspace, tau=tau,
                       radius=radius, thumb_size=thumb_size, mode=mode, dihedral=dihedral,
                       transforms=transforms, fail_on=conditions, seed=seed,
                       resamples=resamples,
                       workers=workers, executor=executor, max_pairs=max_pairs, command=command,
                       layers=_layer_names(layers), score_kind=score_kind,
                       attribution_maps=attribution_maps, attribution_masks=attribution_masks,
                       label_map=label_map, external_label_map=external_label_map,
                       control_label_map=control_label_map,
                       list_options=with_image_column(list_options(
                           path_column, label_column, split_column, source_column,
                           group_column, list_root, constant_split), image_column),
                       **safety_options(allow_outside_root, follow_links, max_file_size,
                                        allow_urls),
                       prediction_reading={k: v for k, v in (
                           ("sheet", sheet), ("header_row", header_row),
                           ("sep", {"\\t": "\t", "tab": "\t"}.get(sep, sep)),
                           ("decimal", decimal)) if v is not None},
                       progress=None if not as_json else False, croissant=croissant,
                       force=force)
    _finish(result, as_json)


@click.command("demo")
@click.argument("directory", required=False, default="splitscope-demo",
                type=click.Path(file_okay=False))
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the demo data.")
@click.option("--workers", default=None, type=int, help="Worker processes (default: all cores).")
@click.option("--fail-on", "fail_on", multiple=True, metavar="CONDITION", help=_FAIL_ON_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.option("--trained-model", is_flag=True,
              help="Train a real small-cnn on the demo ([torch] extra; a few minutes on a CPU) "
                   "instead of the simulated model outputs.")
def demo_command(directory, seed, workers, fail_on, as_json, trained_model) -> None:
    """Make the demo benchmark in DIRECTORY (planted leaks listed in planted.csv) and audit it.

    Prints what was planted and what the audit found; the report is DIRECTORY/audit/report.html.
    """
    from splitscope.audit.conditions import parse_condition
    from splitscope.audit.demo import run_demo

    conditions = [parse_condition(c) for c in fail_on]
    result, check = run_demo(Path(directory), seed=seed, workers=workers, fail_on=conditions,
                             progress=None if not as_json else False,
                             trained_model=trained_model)
    _finish(result, as_json, extra={"demo": check}, extra_lines=check.get("lines"))


COMMANDS: list = [audit_command, demo_command]

__all__ = ["COMMANDS", "audit_command", "demo_command", "print_summary", "summary_payload"]
