"""CLI verbs of this layer (registered by splitscope.cli): ``scan``."""

from __future__ import annotations

import contextlib
import json

import click

from splitscope.cli_common import FORCE_OPTION
from splitscope.cli_options import (
    EXECUTOR_OPTIONS,
    IMAGE_COLUMN_OPTION,
    LABEL_MAP_OPTION,
    LIST_FILE_OPTIONS,
    list_options,
    safety_options,
    with_image_column,
    with_options,
)
from splitscope.errors import InputError
from splitscope.features.flags import MODE_OPTION, SAFETY_OPTIONS


def _n(count: int, unit: str) -> str:
    return f"{count:,} {unit}{'' if count == 1 else 's'}"


def summary_line(summary: dict) -> str:
    """One line a user reads first, e.g. ``5,840 rows, 5,840 unique files, 0 failures;
    0 extracted, 5,840 reused from cache (0.4 s)``; failures are counted as unique files, with
    the manifest rows they affect in parentheses."""
    files = summary["failures"]["files"]["total"]
    rows = summary["failures"]["rows"]["total"]
    failures = "0 failures" if files == rows == 0 else (
        f"{_n(files, 'failed file')} ({_n(rows, 'row')})")
    return (
        f"{_n(summary['rows'], 'row')}, {_n(summary['unique_files'], 'unique file')}, "
        f"{failures}; "
        f"{summary['extracted']:,} extracted, {summary['reused']:,} reused from cache "
        f"({summary['seconds']:.1f} s)"
    )


def _print_summary(summary: dict) -> None:
    from rich.table import Table

    from splitscope.cli_common import rich_console

    console = rich_console(highlight=True)
    console.print(summary_line(summary), highlight=False)
    params = summary.get("params") or {}
    console.print(
        f"workspace {summary['workspace']} · features {summary.get('key')} "
        f"(thumb {params.get('thumb_size')}, {params.get('interpolation')}, {params.get('mode')})"
    )

    counts = summary["counts"]
    labels = sorted({label for per in counts.values() for label in per})
    table = Table(title="rows per split × label", title_justify="left")
    table.add_column("split")
    for label in labels:
        table.add_column(label, justify="right")
    table.add_column("total", justify="right")
    for split, per in counts.items():
        table.add_row(split, *[f"{per.get(label, 0):,}" for label in labels],
                      f"{sum(per.values()):,}")
    console.print(table)

    files = summary["failures"]["files"]
    rows = summary["failures"]["rows"]
    if files["total"] or rows["total"]:
        fail = Table(title="failures by reason", title_justify="left")
        fail.add_column("reason")
        fail.add_column("unique files", justify="right")
        fail.add_column("manifest rows", justify="right")
        for reason in sorted(set(files["by_reason"]) | set(rows["by_reason"])):
            fail.add_row(reason, f"{files['by_reason'].get(reason, 0):,}",
                         f"{rows['by_reason'].get(reason, 0):,}")
        console.print(fail)
        per_split = ", ".join(
            f"{split}: {_n(sum(v.values()), 'row')}" for split, v in rows["by_split"].items()
        )
        console.print(f"failed rows per split: {per_split}")
    groups = summary.get("groups") or {}
    if groups.get("group_key"):
        console.print(
            f"groups: {groups['rows_with_group']:,} of {summary['rows']:,} rows carry a group "
            f"({groups['unique_groups']:,} distinct)"
        )
    for reason, n in (summary.get("excluded_by_reason") or {}).items():
        console.print(f"left out of the folder scan: {_n(n, 'entry')} — {reason}"
                      .replace("entrys", "entries"))
    outside = summary.get("outside_root") or {}
    if outside.get("rows"):
        state = "read (allowed) and marked" if outside.get("read") else \
            "not read (--allow-outside-root reads them)"
        console.print(f"{_n(outside['rows'], 'row')} of {summary['rows']:,} resolve outside "
                      f"their release root: {state}")
    urls = summary.get("urls") or {}
    if urls.get("rows"):
        state = "read (allowed) and marked" if urls.get("read") else \
            "not read (--allow-urls reads them)"
        console.print(f"{_n(urls['rows'], 'row')} of {summary['rows']:,} name a URL: {state}")
    for repair in summary.get("repairs") or []:
        console.print(f"repaired the workspace: {repair['problem']}; moved to "
                      f"{repair['moved_to']}", highlight=False)


@click.command("scan")
@click.argument("inputs", nargs=-1, required=True, metavar="ROOT|LIST...")
@click.option("--workspace", "-w", type=click.Path(file_okay=False), default=None,
              help="Workspace folder (default ./splitscope-workspace); never inside the data.")
@click.option("--thumb-size", type=int, default=96, show_default=True,
              help="Thumbnail side S for NCC/SSIM.")
@MODE_OPTION
@click.option("--interpolation", default="bicubic", show_default=True,
              help="Thumbnail resize filter.")
@click.option("--workers", type=int, default=None,
              help="Worker processes (default: all cores; 1 runs in-process).")
@with_options(EXECUTOR_OPTIONS)
@click.option("--group-regex", default=None,
              help="Regex with a named group 'group' (and optionally 'frame') over the "
                   "file name, e.g. 'person(?P<group>\\d+)_'.")
@with_options(LIST_FILE_OPTIONS)
@IMAGE_COLUMN_OPTION
@LABEL_MAP_OPTION
@with_options(SAFETY_OPTIONS)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Also write the summary, lists/failures.csv (every failed row by name) and "
                   "lists/excluded.csv here, with artifacts.json.")
@FORCE_OPTION
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: when stderr is a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
def scan_command(inputs, workspace, thumb_size, mode, interpolation, workers, engine,
                 scheduler, group_regex,
                 path_column, label_column, split_column, source_column, group_column,
                 list_root, constant_split, image_column, label_map, allow_outside_root,
                 allow_urls, follow_links, max_file_bytes, out_dir, progress, as_json) -> None:
    """Scan a release (folder, list file, table of embedded images, .npz): write its manifest and per-file features
    (hashes, header fields, thumbnails) to the workspace, reusing what is cached, and print
    a summary."""
    from splitscope.features.executor import executor_for
    from splitscope.features.scanning import scan

    list_opts = with_image_column(list_options(path_column, label_column, split_column,
                                               source_column, group_column, list_root,
                                               constant_split), image_column)
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be at least 1; got {workers}")
    executor = executor_for(engine, workers, scheduler)
    with contextlib.closing(executor) if executor is not None else contextlib.nullcontext():
        result = scan(
            list(inputs), workspace, thumb_size=thumb_size, mode=mode,
            interpolation=interpolation, workers=workers, executor=executor,
            group_regex=group_regex, label_map=label_map,
            progress=False if as_json else progress,
            **safety_options(allow_outside_root, follow_links, max_file_bytes, allow_urls),
            **list_opts,
        )
    summary = result.summary()
    if out_dir is not None:
        _write_outputs(result, summary, out_dir, workspace)
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True, default=str))
    else:
        _print_summary(summary)


def _write_outputs(result, summary: dict, out_dir: str, workspace) -> None:
    from splitscope.cli_common import out_folder
    from splitscope.features.failures import write_failure_lists
    from splitscope.records.exports import write_json

    with out_folder(out_dir, keep=[workspace]) as folder:  # a workspace there is left alone
        write_failure_lists(result, folder.path / "lists")
        write_json(summary, folder.path / "scan.json")


COMMANDS: list = [scan_command]
