"""CLI verbs of the group layer (registered by :mod:`splitscope.cli`): ``groups`` (shared
patients/videos, frame gaps, identity recovery) and ``resplit`` (group-disjoint re-splits)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import click
import pandas as pd

from splitscope.cli_common import (
    COMMON_OPTIONS,
    FORCE_OPTION,
    emit,
    fmt,
    gate,
    load_manifest,
    parse_fail_on,
    resolve_boundaries,
    rich_console,
)
from splitscope.cli_options import (
    EXECUTOR_OPTIONS,
    LIST_FILE_OPTIONS,
    fail_on_option,
    list_options,
    with_options,
)
from splitscope.errors import InputError
from splitscope.groups.predicates import GROUP_OVERLAP, PROPOSED_GROUP_KEY, RESPLIT
from splitscope.groups.predicates import METRICS as GROUP_METRICS
from splitscope.records.format import percent


def _print_groups(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = rich_console()
    for r in result.records:
        if not (r.predicate.get("name") == GROUP_OVERLAP and r.boundary is not None
                and r.status in ("completed", "partial")):
            continue
        s = r.details["summary"]
        u = r.uncertainty
        t = Table(title=escape(r.boundary["name"]), title_justify="left", box=None,
                  pad_edge=False, show_header=False)
        t.add_column("measure")
        t.add_column("value", justify="right")
        t.add_column("note")
        t.add_row("groups query / reference / both",
                  f"{s['query_groups']:,} / {s['reference_groups']:,} / {s['shared_groups']:,}", "")
        t.add_row("affected query rows", f"{r.numerator:,} / {r.denominator:,}",
                  f"{fmt(r.estimate, pct=True)} of traceable rows (conditional on traceability)")
        t.add_row("coverage", f"{r.coverage['traceable']:,} / {r.coverage['total']:,}",
                  f"{fmt(r.coverage['share'], pct=True)} of query rows have a group")
        t.add_row("group-resampling 95%", f"{fmt(u.low, pct=True)}–{fmt(u.high, pct=True)}",
                  "sensitivity of a census rate, not a sampling interval")
        t.add_row("reference rows sharing a group",
                  f"{s['affected_reference_rows']:,} / {s['traceable_reference_rows']:,}",
                  fmt(s["reference_rate"], pct=True))
        q = s["rows_per_group_query"]
        if q["groups"]:
            t.add_row("rows per query group", f"median {q['median']:g}",
                      f"range {q['min']}–{q['max']}")
        for g in result.records:
            if g.id == r.id.replace("group.overlap[", "group.frame_gap[") and \
                    g.status == "completed":
                gs = g.details["summary"]
                t.add_row("frame gap to nearest same-group reference",
                          f"median {gs['median']:g}",
                          f"IQR {gs['q1']:g}–{gs['q3']:g}, min {gs['min']}, max {gs['max']}, "
                          f"{gs['rows_with_gap']:,} rows")
        if r.unresolved and r.unresolved != "none":
            t.add_row("unresolved", "", escape(r.unresolved))
        t.add_row("status", r.status, "")
        console.print(t)
    for r in result.records:
        if r.predicate.get("name") == RESPLIT and r.status == "completed":
            console.print(f"re-split: {escape(r.conclusion)}")
        if r.predicate.get("name") == PROPOSED_GROUP_KEY and r.status == "proposed":
            console.print(escape(r.conclusion or ""))


@click.command("groups")
@click.argument("inputs", nargs=-1, required=True, metavar="ROOT|LIST...")
@with_options(COMMON_OPTIONS)
@click.option("--unresolved", default=None,
              help="A caveat about the group key to carry into the records (e.g. 'ids may be "
                   "numbered per split').")
@click.option("--resplit/--no-resplit", default=False, show_default=True,
              help="Also make group-disjoint re-splits.")
@fail_on_option(GROUP_METRICS)
@click.option("--upstream", default=None, type=click.Path(exists=True),
              help="Identity recovery: an upstream release carrying group ids (folder or list); "
                   "rows without a group inherit the id of their byte / NCC counterpart there "
                   "(scans both releases).")
@click.option("--upstream-group-regex", default=None,
              help="Group regex for the upstream release.")
@click.option("--tau", type=float, default=0.98, show_default=True,
              help="NCC threshold of identity recovery.")
@click.option("--workspace", "-w", type=click.Path(file_okay=False), default=None,
              help="Workspace of the feature cache (identity recovery only).")
@click.option("--workers", default=None, type=int,
              help="Worker processes of the scans (identity recovery only; default: all cores).")
@with_options(EXECUTOR_OPTIONS)
@with_options(LIST_FILE_OPTIONS)
def groups_command(inputs, group_regex, query, reference, both_directions, split_per_list, seed,
                   resamples, out_dir, as_json, unresolved, resplit, fail_on, upstream,
                   upstream_group_regex, tau, workspace, workers, engine, scheduler, path_column,
                   label_column, split_column, source_column, group_column, list_root,
                   constant_split) -> None:
    """Shared patients/videos across boundaries and frame-index gaps (METHODS §3.2–3.3), from
    the manifest alone: list files without images work. With --upstream, identity recovery
    (METHODS §3.4) first; under --executor dask its scans and its NCC search run on the
    cluster."""
    from splitscope.groups.layer import audit_groups

    conditions = parse_fail_on(fail_on, GROUP_METRICS)
    opts = list_options(path_column, label_column, split_column, source_column, group_column,
                         list_root, constant_split)
    manifest = load_manifest(inputs, split_per_list=split_per_list, group_regex=group_regex,
                             **opts)
    recovery = None
    if upstream is not None:
        from splitscope.features.executor import executor_for
        from splitscope.features.scanning import scan
        from splitscope.groups.recovery import recover_from_scans

        ws = Path(workspace) if workspace else Path("splitscope-workspace")
        executor = executor_for(engine, workers, scheduler)
        with contextlib.closing(executor) if executor is not None else contextlib.nullcontext():
            audited = scan(manifest, ws, workers=workers, executor=executor, progress=False)
            up = scan(upstream, ws.parent / f"{ws.name}-upstream",
                      group_regex=upstream_group_regex, workers=workers, executor=executor,
                      progress=False)
            if up.manifest["group"].isna().all():
                raise InputError(f"the upstream release {upstream} carries no group ids; pass "
                                 "--upstream-group-regex")
            recovery = recover_from_scans(audited, up, tau=tau,
                                          client=getattr(executor, "search_client", None))
        manifest = audited.manifest
    bounds = resolve_boundaries(manifest, query, reference, both_directions)
    result = audit_groups(manifest, bounds, n_resamples=resamples, seed=seed, resplit=resplit,
                          unresolved=unresolved, recovery=recovery)
    emit(result, as_json, out_dir, _print_groups)
    gate(conditions, result.records, GROUP_METRICS, quiet=as_json)


# ------------------------------------------------------------------------------ resplit


def _print_resplit(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    for r in result.records:
        if r.predicate.get("name") != RESPLIT or r.status != "completed":
            continue
        bal = pd.DataFrame(r.details["class_balance"])
        t = Table(title="Group-disjoint re-split: rows per class (share of class)",
                  title_justify="left", box=None, pad_edge=False)
        parts = list(dict.fromkeys(bal["part"]))
        t.add_column("label")
        for p in parts:
            t.add_column(str(p), justify="right")
        for lab, sub in bal.groupby("label", sort=True):
            cells = []
            for p in parts:
                x = sub[sub["part"] == p]
                cells.append("0" if x.empty else
                             f"{int(x['rows'].iloc[0]):,} ({percent(x['share_of_class'].iloc[0])})")
            t.add_row(escape(str(lab)), *cells)
        rich_console().print(t)
        rich_console().print(escape(r.conclusion))


@click.command("resplit")
@click.argument("inputs", nargs=-1, required=True, metavar="ROOT|LIST...")
@click.option("--group-regex", default=None, help="Regex with a named group 'group'.")
@click.option("--split-per-list", is_flag=True, help="Each list file is one split.")
@click.option("--fractions", default="0.7,0.15,0.15", show_default=True,
              help="Shares of train,val,test.")
@click.option("--folds", type=int, default=5, show_default=True, help="Number of folds.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write resplit.csv/.parquet and resplit_folds.csv/.parquet here.")
@FORCE_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@with_options(LIST_FILE_OPTIONS)
def resplit_command(inputs, group_regex, split_per_list, fractions, folds, seed, out_dir,
                    as_json, path_column, label_column, split_column, source_column,
                    group_column, list_root, constant_split) -> None:
    """Stratified group-disjoint train/val/test parts and k folds (METHODS §3.5)."""
    from splitscope.groups.layer import _resplit

    try:
        fr = tuple(float(x) for x in fractions.split(","))
    except ValueError as exc:
        raise InputError(f"--fractions must be comma-separated numbers; got {fractions!r}") from exc
    if len(fr) != 3:
        raise InputError(f"--fractions needs three shares (train,val,test); got {fractions!r}")
    manifest = load_manifest(inputs, split_per_list=split_per_list, group_regex=group_regex,
                             **list_options(path_column, label_column, split_column,
                                             source_column, group_column, list_root,
                                             constant_split))
    if manifest["group"].isna().all():
        raise InputError("no group keys: pass --group-regex or --group-column")
    result = _resplit(manifest, [], fr, folds, seed, [])
    emit(result, as_json, out_dir, _print_resplit)


COMMANDS: list = [groups_command, resplit_command]
