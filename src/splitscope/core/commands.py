"""The ``audit`` verb: every layer, one command. Registered by :mod:`splitscope.cli`.

Its option flags are generated from the audit's options groups — the core's
(:class:`~splitscope.options.InputOptions`, :class:`~splitscope.features.options.FeatureParams`,
:class:`~splitscope.options.RunOptions`) and each layer's (:func:`splitscope.core.protocol.
flag_groups`) — and passed through unchanged to
:meth:`~splitscope.core.options.AuditOptions.from_flags`, so a layer's new option field is a
flag, an option and a line of ``audit.json`` at once. Its ``--help`` lists them by section
(:data:`splitscope.options.SECTIONS`). Building the command imports no numerical library:
``splitscope audit --help`` is quick.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import click

from splitscope.cli_common import ReleaseInput
from splitscope.cli_options import SectionedCommand, SectionOption, click_option
from splitscope.core.options import core_groups
from splitscope.core.protocol import flag_groups, option_groups
from splitscope.errors import InputError
from splitscope.exit_codes import EXIT_LAYER_FAILED, EXIT_NOT_MEASURED, exit_codes_help
from splitscope.options import field_section, flag_fields

#: ``--fail-on``'s help; ``splitscope help fail-on`` is the grammar and every metric
FAIL_ON_HELP = ("Exit 1 if METRIC OP VALUE holds, e.g. 'ncc_rate>0.01' (repeatable; "
                "`splitscope help fail-on`).")

#: ``--quiet``'s help (``audit`` and ``demo``)
QUIET_HELP = "No progress lines on stderr."


def option_flags() -> list:
    """The ``click`` options of every options group's flag fields, each in its ``--help``
    section: the core's inputs and features, each layer's group (:func:`~splitscope.core.
    protocol.flag_groups`), then the run."""
    groups = core_groups()
    ordered = [groups["inputs"], groups["features"], *flag_groups().values(), groups["run"]]
    return [click_option(f, field_section(group, f))
            for group in ordered for f in flag_fields(group)]


def _registered(flags: dict) -> dict:
    """The flag values of the option groups the audit has (:func:`~splitscope.core.protocol.
    option_groups`): a flag of a layer whose module did not import (its layer is recorded
    ``not assessed``) is left out at its default, and refused when given."""

    known = {f.name: f for group in [*core_groups().values(), *option_groups().values()]
             for f in dataclasses.fields(group)}
    declared = {f.name: (name, f) for name, group in flag_groups().items()
                for f in dataclasses.fields(group)}
    out = {}
    for key, value in flags.items():
        if key in known or key not in declared:
            out[key] = value
        elif value != declared[key][1].default:
            raise InputError(f"option {key} belongs to the options group "
                             f"{declared[key][0]!r}, whose layer is not available here "
                             f"(`splitscope help layers` says why)")
    return out


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
        "verdict": doc["summary"]["verdict"],
        "findings": doc["summary"]["findings"],
        "actions": doc["summary"]["actions"],
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
    """The verdict first (a line per boundary), the findings (at most five) and actions (at
    most three), the notes on uncalibrated predicates, then layers, conditions, files; the
    detailed lines are in the report and audit.json."""
    from rich.markup import escape
    from rich.table import Table

    from splitscope.cli_common import rich_console
    from splitscope.core.conditions import fail_on_lines

    console = rich_console()
    doc = result.document
    s = doc["summary"]
    for line in s["verdict"]:
        console.print(f"[bold]{escape(line)}[/bold]")
    for head, lines in (("Findings, largest first", s["findings"]),
                        ("What to do", s["actions"])):
        if lines:
            console.print(f"{head}:")
            for i, line in enumerate(lines, 1):
                console.print(f"  {i}. {escape(line)}")
    for line in s["notes"]:
        console.print(f"[dim]Note: {escape(line)}[/dim]")
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
    for line in fail_on_lines(doc):
        console.print(escape(line))
    lists = result.out_dir / "lists"
    n_lists = sum(1 for a in doc.get("artifacts", []) if a["path"].startswith("lists/"))
    console.print(escape(
        f"Wrote {result.audit_json} ({_size(result.audit_json)}), {result.report} "
        f"({_size(result.report)}), {n_lists} files in {lists}/, artifacts.json "
        f"[{doc['run']['duration_s']:.1f} s]"))
    if result.exit_code == EXIT_LAYER_FAILED:
        console.print("A layer failed: see the layers table and audit.json (exit code 3).")
    elif result.exit_code == EXIT_NOT_MEASURED:
        console.print("A --fail-on metric was not measured, so its gate fails (exit code 5): "
                      "run the layer it reads, or pass --allow-unmeasured to let it pass.")


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


def finish(result, as_json: bool, extra: dict | None = None, extra_lines=None) -> None:
    if as_json:
        payload = summary_payload(result)
        if extra:
            payload.update(extra)
        click.echo(json.dumps(payload, indent=1, ensure_ascii=False, default=str))
    else:
        print_summary(result, extra_lines)
    if result.exit_code:
        raise SystemExit(result.exit_code)


def _audit_command(inputs, control, external, predictions, attribution_maps,
                   attribution_masks, out_dir, fail_on, as_json, quiet, **flags) -> None:
    """Audit a release (folder ROOT/<split>/<class>/…, a list file, a table of embedded
    images, a save_to_disk folder or a MedMNIST .npz) with every layer.

    Writes OUT/audit.json, OUT/report.html, OUT/lists/ and OUT/artifacts.json (a rerun
    replaces what the last one listed there). More: splitscope help.
    """
    from splitscope.core.conditions import parse_condition
    from splitscope.core.options import AuditOptions
    from splitscope.core.run import audit

    conditions = [parse_condition(c) for c in fail_on]  # bad conditions fail before any work
    command = _command_line("audit", list(inputs), click.get_current_context())
    options = AuditOptions.from_flags(**_registered(flags))
    if quiet:
        options = options.replace(run=dataclasses.replace(options.run, progress=False))
    result = audit(list(inputs), options, control=control, external=external,
                   predictions=predictions, attribution_maps=attribution_maps,
                   attribution_masks=attribution_masks, out_dir=out_dir, fail_on=conditions,
                   command=command)
    finish(result, as_json)


def _path_option(flag: str, help: str, param_type: click.ParamType | None = None):
    return click.option(flag, type=param_type or click.Path(exists=True), default=None,
                        help=help, cls=SectionOption, section="inputs")


def audit_command() -> click.Command:
    """The ``audit`` verb with one flag per option field of the groups declared now."""
    params = [
        click.argument("inputs", nargs=-1, required=True, type=ReleaseInput()),
        _path_option("--control", "A release known to be clean (negative control).",
                     ReleaseInput()),
        _path_option("--external", "Another corpus, checked against training rows.",
                     ReleaseInput()),
        _path_option("--predictions", "Saved predictions to evaluate (file or folder)."),
        _path_option("--attribution-maps", "Attribution maps (.npz, or <path>.npy files)."),
        _path_option("--attribution-masks", "Anatomy masks (1 inside), laid out as the maps."),
        click.option("--out", "out_dir", default="splitscope-audit", show_default=True,
                     type=click.Path(file_okay=False), cls=SectionOption, section="outputs",
                     help="Output folder."),
        *option_flags(),
        click.option("--fail-on", "fail_on", multiple=True, metavar="CONDITION",
                     help=FAIL_ON_HELP, cls=SectionOption, section="gates"),
        click.option("--json", "as_json", is_flag=True, cls=SectionOption, section="outputs",
                     help="Print the summary as JSON on stdout."),
        click.option("--quiet", "-q", "quiet", is_flag=True, cls=SectionOption,
                     section="outputs", help=QUIET_HELP),
    ]
    def command(**kwargs) -> None:
        _audit_command(**kwargs)

    command.__doc__ = _audit_command.__doc__
    for param in reversed(params):
        command = param(command)
    return click.command("audit", cls=SectionedCommand, epilog=exit_codes_help())(command)


def __getattr__(name: str):
    if name == "COMMANDS":  # built on each use, from the layers registered then
        return [audit_command()]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["FAIL_ON_HELP", "QUIET_HELP", "audit_command", "option_flags", "print_summary",
           "summary_payload"]
