"""What the verbs of the group and provenance layers share: the manifest of the inputs,
boundaries from ``--query``/``--reference``, row-keyed tables written with ``artifacts.json``
into an ``--out`` folder published as a whole (:func:`out_folder`, ``--force``), and the
printing of records."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import click

from splitscope.errors import InputError

if TYPE_CHECKING:  # pandas is imported where a verb reads tables, not with the command line
    import pandas as pd

__all__ = ["COMMON_OPTIONS", "FORCE_OPTION", "ReleaseInput", "emit", "fmt", "forced", "load_manifest",
           "out_folder", "records_payload", "resolve_boundaries", "rich_console",
           "status_table", "write_outputs"]


class ReleaseInput(click.Path):
    """A release given on the command line: an existing path, or a Hub id (``hf:NAME`` or
    ``hf:NAME:CONFIG``, no path, read from the local ``datasets`` cache)."""

    def __init__(self) -> None:
        super().__init__(exists=True)

    def convert(self, value, param, ctx):
        from splitscope.manifest.hub import is_hub_id

        if is_hub_id(value):
            return value
        return super().convert(value, param, ctx)


def load_manifest(inputs, *, split_per_list: bool = False, group_regex: str | None = None,
                  **list_options) -> pd.DataFrame:
    """The manifest of ``inputs`` (folders or list files; no image is read).
    ``split_per_list`` gives every row of a list file the list's stem as its split
    (``split_0.csv`` → ``split_0``), for releases published as one list per fold."""
    from splitscope.manifest import apply_group_regex, build_manifest, read_list
    from splitscope.manifest.files import is_list_file

    if split_per_list:
        parts = []
        for item in inputs:
            if not is_list_file(item):
                raise InputError(f"--split-per-list needs list files; {item} is not one")
            opts = dict(list_options)
            opts["split"] = Path(item).stem
            parts.append(read_list(item, **opts))
        manifest = build_manifest(parts)
    else:
        manifest = build_manifest(list(inputs), **list_options)
    if group_regex:
        manifest = apply_group_regex(manifest, group_regex)
    return manifest


def resolve_boundaries(manifest: pd.DataFrame, query: str | None, reference: str | None,
                       both_directions: bool = False) -> list:
    """``--query/--reference`` when given; else the release's test → train and val → train;
    else (no train split, e.g. two folds) every ordered pair of splits."""
    from splitscope.boundary import boundary, default_boundaries

    if (query is None) != (reference is None):
        raise InputError("give both --query and --reference (or neither)")
    if query is not None:
        out = [boundary(manifest, query, reference)]
        if both_directions:
            out.append(boundary(manifest, reference, query))
        return out
    out = default_boundaries(manifest)
    if out:
        if both_directions:
            out += [boundary(manifest, b.reference.name, b.query.name) for b in list(out)]
        return out
    splits = sorted(manifest["split"].dropna().unique().tolist())
    return [boundary(manifest, q, r) for q in splits for r in splits if q != r]


def write_outputs(tables: dict, out_dir: str | Path, *, force: bool | None = None) -> list[str]:
    """Write each table as ``<name>.csv`` and ``<name>.parquet`` into ``out_dir``, published with
    ``artifacts.json`` listing them (:func:`out_folder`); returns their paths relative to
    ``out_dir``. ``force``: as the command line's ``--force`` when not given."""
    from splitscope.records.exports import write_tables

    with out_folder(out_dir, force=force) as folder:
        written = write_tables(tables, folder.path)
        names = sorted(p.relative_to(folder.path).as_posix() for p in written)
    return names


def out_folder(out_dir: str | Path, *, force: bool | None = None, keep=()):
    """:func:`splitscope.records.publish.publishing` for a verb's ``--out``: write under the
    yielded folder's ``path``; the files appear in ``out_dir``, listed in ``artifacts.json``,
    when the block ends. ``force``: as the command line's ``--force`` when not given;
    ``keep``: folders (a workspace) the verb uses that may lie inside ``out_dir``, left alone."""
    from splitscope.records.publish import inside, publishing

    return publishing(out_dir, force=forced() if force is None else force,
                      keep=inside(out_dir, [k for k in keep if k]))


_FORCE = "splitscope.force"


def _remember_force(ctx: click.Context, param, value: bool) -> bool:
    ctx.meta[_FORCE] = bool(value)
    return value


FORCE_OPTION = click.option(
    "--force", is_flag=True, expose_value=False, callback=_remember_force,
    help="Write into an --out folder holding files splitscope did not write there (they are "
         "kept; one standing where the verb writes is still refused).")
"""``--force`` of a verb writing an ``--out`` folder; its value is read by :func:`forced`, so
the verb's function takes no parameter for it."""


def forced() -> bool:
    """Whether the running command was given ``--force`` (:data:`FORCE_OPTION`)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_FORCE))


def records_payload(result, written=None) -> dict:
    from splitscope.records.model import _clean

    return _clean({"records": [r.to_dict() for r in result.records],
                   "outputs": written or []})


def fmt(x, pct=False, digits=3) -> str:
    """A value for a verb's table: ``—`` when not measured; a share as
    :func:`splitscope.records.format.percent` (the one spelling of a percentage) with ``pct``,
    else fixed ``digits``."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if pct:
        from splitscope.records.format import percent

        return percent(x)
    return f"{x:.{digits}f}"


def parse_fail_on(fail_on, metrics) -> list:
    """The ``--fail-on`` conditions of a verb over its ``metrics`` (before any work, so a bad
    condition is an input error, exit 2)."""
    from splitscope.records.metrics import parse

    return [parse(text, metrics) for text in fail_on if text.strip()]


def gate(conditions, records, metrics, *, quiet: bool = False) -> list[dict]:
    """Evaluate a verb's ``--fail-on`` conditions on its records (dicts or records) and exit
    with code 1 when one holds; returns the outcomes (as ``audit.json``'s ``fail_on``)."""
    from splitscope.records.metrics import evaluate

    docs = [r if isinstance(r, dict) else r.to_dict() for r in records]
    outcomes = evaluate(conditions, docs, metrics)
    held = [o for o in outcomes if o["held"]]
    if not quiet:
        for o in outcomes:
            value = "not measured" if o["value"] is None else f"{o['value']:.4g}"
            click.echo(f"--fail-on {o['condition']}: {value} → "
                       f"{'HELD' if o['held'] else 'not held'}", err=True)
    if held:
        raise SystemExit(1)
    return outcomes


def rich_console(**options):
    """A rich console for a verb's output (``highlight=False, soft_wrap=True`` unless given).
    A closed pipe (``splitscope … | head``) raises :class:`BrokenPipeError`, which the entry
    point turns into a quiet exit 141; rich's own handler would exit with code 1, the code of
    a held ``--fail-on`` condition."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            raise BrokenPipeError

    return _Console(**{"highlight": False, "soft_wrap": True, **options})


def status_table(records) -> None:
    from rich.markup import escape
    from rich.table import Table

    skipped = [r for r in records if r.status in ("not applicable", "not assessed")]
    if skipped:
        t = Table(title="not run", title_justify="left", box=None, pad_edge=False)
        for c in ("check", "status", "reason"):
            t.add_column(c)
        for r in skipped:
            t.add_row(escape(r.id), r.status, escape(r.reason or ""))
        rich_console().print(t)


def emit(result, as_json: bool, out_dir, printer) -> dict:
    written = write_outputs(result.tables, out_dir) if out_dir else []
    payload = records_payload(result, written)
    if as_json:
        click.echo(json.dumps(payload, sort_keys=True))
    else:
        printer(result)
        status_table(result.records)
        if out_dir:
            click.echo(f"{len(written)} files written to {out_dir} (artifacts.json lists them)")
    return payload


COMMON_OPTIONS = [
    click.option("--group-regex", default=None,
                 help="Regex with a named group 'group' (and optionally 'frame') over the file "
                      "name, e.g. '^(?P<group>[0-9a-f]{16})_(?P<frame>\\d+)'."),
    click.option("--query", "-q", default=None, help="Query population selector (e.g. test)."),
    click.option("--reference", "-r", default=None,
                 help="Reference population selector (e.g. train)."),
    click.option("--both-directions", is_flag=True,
                 help="Also audit reference → query for every boundary."),
    click.option("--split-per-list", is_flag=True,
                 help="Each list file is one split named by its stem (e.g. split_0.csv)."),
    click.option("--seed", type=int, default=0, show_default=True, help="Seed of every draw."),
    click.option("--resamples", type=int, default=2000, show_default=True,
                 help="Bootstrap / group resamples."),
    click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
                 help="Write the row-keyed tables here (CSV and Parquet)."),
    FORCE_OPTION,
    click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout."),
]
