"""CLI verbs of the group and provenance layers (registered by splitscope.cli):
``groups``, ``resplit``, ``probe`` (header-only probe and source–label association) and
``shift`` (partition classifier)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np
import pandas as pd

from splitscope.cli_options import LIST_FILE_OPTIONS, list_options, with_options
from splitscope.errors import InputError

# ------------------------------------------------------------------------------ helpers


def load_manifest(inputs, *, split_per_list: bool = False, group_regex: str | None = None,
                  **list_options) -> pd.DataFrame:
    """The manifest of ``inputs`` (folders or list files; no image is read).
    ``split_per_list`` gives every row of a list file the list's stem as its split
    (``split_0.csv`` → ``split_0``), for releases published as one list per fold."""
    from splitscope.manifest import apply_group_regex, build_manifest, read_list
    from splitscope.manifest.build import is_list_file

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


def write_outputs(tables: dict, out_dir: str | Path) -> list[str]:
    """Write each table as ``<name>.csv`` and ``<name>.parquet`` under ``out_dir`` and list them,
    with their SHA-256, in ``artifacts.json``; returns their paths relative to ``out_dir``."""
    from splitscope.records.exports import write_artifacts_manifest, write_tables

    written = write_tables(tables, out_dir)
    write_artifacts_manifest(out_dir, written)
    return sorted(p.relative_to(out_dir).as_posix() for p in written)


def _payload(result, written=None) -> dict:
    from splitscope.records.model import _clean

    return _clean({"records": [r.to_dict() for r in result.records],
                   "outputs": written or []})


def _f(x, pct=False, digits=3) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "—"
    return f"{100 * x:.1f}%" if pct else f"{x:.{digits}f}"


def _console():
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _status_table(records) -> None:
    from rich.markup import escape
    from rich.table import Table

    skipped = [r for r in records if r.status in ("not applicable", "not assessed")]
    if skipped:
        t = Table(title="not run", title_justify="left", box=None, pad_edge=False)
        for c in ("check", "status", "reason"):
            t.add_column(c)
        for r in skipped:
            t.add_row(escape(r.id), r.status, escape(r.reason or ""))
        _console().print(t)


def _emit(result, as_json: bool, out_dir, printer) -> dict:
    written = write_outputs(result.tables, out_dir) if out_dir else []
    payload = _payload(result, written)
    if as_json:
        click.echo(json.dumps(payload, sort_keys=True))
    else:
        printer(result)
        _status_table(result.records)
        if out_dir:
            click.echo(f"{len(written)} files written to {out_dir} (artifacts.json lists them)")
    return payload






_common = [
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
    click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout."),
]


# ------------------------------------------------------------------------------- groups


def _print_groups(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    for r in result.records:
        if not (r.id.startswith("group.overlap[") and r.status in ("completed", "partial")):
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
                  f"{_f(r.estimate, pct=True)} of traceable rows (conditional on traceability)")
        t.add_row("coverage", f"{r.coverage['traceable']:,} / {r.coverage['total']:,}",
                  f"{_f(r.coverage['share'], pct=True)} of query rows have a group")
        t.add_row("group-resampling 95%", f"{_f(u.low, pct=True)}–{_f(u.high, pct=True)}",
                  "sensitivity of a census rate, not a sampling interval")
        t.add_row("reference rows sharing a group",
                  f"{s['affected_reference_rows']:,} / {s['traceable_reference_rows']:,}",
                  _f(s["reference_rate"], pct=True))
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
        if r.id == "group.resplit" and r.status == "completed":
            console.print(f"re-split: {escape(r.conclusion)}")


@click.command("groups")
@click.argument("inputs", nargs=-1, required=True, metavar="ROOT|LIST...")
@with_options(_common)
@click.option("--unresolved", default=None,
              help="A caveat about the group key to carry into the records (e.g. 'ids may be "
                   "numbered per split').")
@click.option("--resplit/--no-resplit", default=False, show_default=True,
              help="Also make group-disjoint re-splits.")
@click.option("--fail-on-overlap", is_flag=True,
              help="Exit 1 when any boundary has an affected query row.")
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
@with_options(LIST_FILE_OPTIONS)
def groups_command(inputs, group_regex, query, reference, both_directions, split_per_list, seed,
                   resamples, out_dir, as_json, unresolved, resplit, fail_on_overlap, upstream,
                   upstream_group_regex, tau, workspace, path_column, label_column,
                   split_column, source_column, group_column, list_root,
                   constant_split) -> None:
    """Shared patients/videos across boundaries and frame-index gaps (METHODS §3.2–3.3), from
    the manifest alone: list files without images work. With --upstream, identity recovery
    (METHODS §3.4) first."""
    from splitscope.probes.audit import audit_groups

    opts = list_options(path_column, label_column, split_column, source_column, group_column,
                         list_root, constant_split)
    manifest = load_manifest(inputs, split_per_list=split_per_list, group_regex=group_regex,
                             **opts)
    recovery = None
    if upstream is not None:
        from splitscope.features.scanning import scan
        from splitscope.relations.recovery import recover_from_scans

        ws = Path(workspace) if workspace else Path("splitscope-workspace")
        audited = scan(manifest, ws, progress=False)
        up = scan(upstream, ws.parent / f"{ws.name}-upstream", group_regex=upstream_group_regex,
                  progress=False)
        if up.manifest["group"].isna().all():
            raise InputError(f"the upstream release {upstream} carries no group ids; pass "
                             "--upstream-group-regex")
        recovery = recover_from_scans(audited, up, tau=tau)
        manifest = audited.manifest
    bounds = resolve_boundaries(manifest, query, reference, both_directions)
    result = audit_groups(manifest, bounds, n_resamples=resamples, seed=seed, resplit=resplit,
                          unresolved=unresolved, recovery=recovery)
    _emit(result, as_json, out_dir, _print_groups)
    if fail_on_overlap and any(r.id.startswith("group.overlap[") and (r.numerator or 0) > 0
                               for r in result.records):
        raise SystemExit(1)


# ------------------------------------------------------------------------------ resplit


def _print_resplit(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    for r in result.records:
        if r.id != "group.resplit" or r.status != "completed":
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
                             f"{int(x['rows'].iloc[0]):,} ({100 * x['share_of_class'].iloc[0]:.0f}%)")
            t.add_row(escape(str(lab)), *cells)
        _console().print(t)
        _console().print(escape(r.conclusion))


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
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@with_options(LIST_FILE_OPTIONS)
def resplit_command(inputs, group_regex, split_per_list, fractions, folds, seed, out_dir,
                    as_json, path_column, label_column, split_column, source_column,
                    group_column, list_root, constant_split) -> None:
    """Stratified group-disjoint train/val/test parts and k folds (METHODS §3.5)."""
    from splitscope.probes.audit import _resplit

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
    _emit(result, as_json, out_dir, _print_resplit)


# ------------------------------------------------------------------------- probe, shift


def _scan_for(inputs, workspace, group_regex, split_per_list, list_options):
    from splitscope.features.scanning import scan

    if split_per_list:
        manifest = load_manifest(inputs, split_per_list=True, group_regex=group_regex,
                                 **list_options)
        return scan(manifest, workspace, progress=False)
    return scan(list(inputs), workspace, group_regex=group_regex, progress=False, **list_options)


def _print_probe(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = _console()
    t = Table(title="Header-only probe (balanced accuracy, 95% percentile bootstrap)",
              title_justify="left", box=None, pad_edge=False)
    for c in ("evaluation", "rows", "BA", "95% CI", "chance", "top header fields"):
        t.add_column(c, justify="left" if c in ("evaluation", "top header fields") else "right")
    for r in result.records:
        if r.id.startswith("provenance.header_probe") and r.status == "completed":
            u = r.uncertainty
            t.add_row(escape(r.title.replace("Header-only probe: ", "")), f"{r.denominator:,}",
                      _f(r.estimate), f"{_f(u.low)}–{_f(u.high)}", _f(r.details["chance"]),
                      escape(", ".join(r.details["top_fields"][:4])))
    if t.row_count:
        console.print(t)
    for r in result.records:
        if r.id == "provenance.header_probe.within_pool" and r.status == "completed" \
                and r.details.get("single_field"):
            console.print("fields alone (held-out BA, 8-leaf tree): " + ", ".join(
                f"{escape(str(x['feature']))} {x['balanced_accuracy']:.3f}"
                for x in r.details["single_field"][:5]))
    for r in result.records:
        if r.id == "provenance.source_label" and r.status == "completed":
            table = pd.DataFrame(r.details["table"]).fillna(0).astype(int)  # label × source
            dom = pd.DataFrame(r.details["dominant"]).set_index("label")
            st = Table(title=f"Label × source (rows); Cramér's V = {r.estimate:.3f}",
                       title_justify="left", box=None, pad_edge=False)
            st.add_column("label")
            for c in table.columns:
                st.add_column(escape(str(c)), justify="right")
            st.add_column("dominant", justify="right")
            for lab, row in table.iterrows():
                d = dom.loc[str(lab)] if str(lab) in dom.index else None
                st.add_row(escape(str(lab)), *[f"{v:,}" for v in row],
                           "" if d is None else
                           f"{escape(str(d['dominant_source']))} {100 * d['dominant_share']:.0f}%")
            console.print(st)


def _print_shift(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="Partition classifier (out-of-fold AUC, 95% percentile bootstrap)",
              title_justify="left", box=None, pad_edge=False)
    for c in ("comparison", "test/train rows", "AUC", "95% CI", "shuffled AUC", "d_A"):
        t.add_column(c, justify="left" if c == "comparison" else "right")
    for r in result.records:
        if r.id.startswith("provenance.partition") and r.status in ("completed", "partial"):
            u = r.uncertainty
            ctl = (r.details.get("shuffled_control") or {}).get("auc", {})
            t.add_row(escape(r.title.replace("Partition classifier ", "")),
                      f"{r.numerator:,}/{r.denominator - r.numerator:,}", _f(r.estimate),
                      f"{_f(u.low)}–{_f(u.high)}", _f(ctl.get("estimate")),
                      _f(r.details.get("d_a")))
    if t.row_count:
        console = _console()
        console.print(t)
        for r in result.records:
            if r.id.startswith("provenance.partition") and r.status in ("completed", "partial"):
                per = r.details.get("auc_by_class") or []
                console.print(escape(r.title.replace("Partition classifier ", "")) + ", per class: "
                              + "; ".join(f"{escape(str(x['label']))} {_f(x['auc'])} "
                                          f"({_f(x['low'])}–{_f(x['high'])})" for x in per))


_scan_opts = [
    click.option("--workspace", "-w", type=click.Path(file_okay=False), default=None,
                 help="Workspace of the feature cache (default ./splitscope-workspace)."),
]


@click.command("probe")
@click.argument("inputs", nargs=-1, required=True, metavar="ROOT|LIST...")
@with_options(_common)
@with_options(_scan_opts)
@click.option("--include-name-fields", is_flag=True,
              help="Also use name-derived fields (extension, extension mismatch).")
@click.option("--fail-above-chance", is_flag=True,
              help="Exit 1 when the within-pool interval lies above chance.")
@click.option("--no-scan", is_flag=True,
              help="Lists without images: skip the scan; only the source–label association "
                   "runs (the header probe is recorded as not assessed).")
@with_options(LIST_FILE_OPTIONS)
def probe_command(inputs, group_regex, query, reference, both_directions, split_per_list, seed,
                  resamples, out_dir, as_json, workspace, include_name_fields, fail_above_chance,
                  no_scan, path_column, label_column, split_column, source_column, group_column,
                  list_root, constant_split) -> None:
    """Header-only probe (within pool and cross split) and source–label association
    (METHODS §4.2–4.3). Scans the release first (cached in the workspace)."""
    from splitscope.probes.audit import audit_provenance

    opts = list_options(path_column, label_column, split_column, source_column, group_column,
                         list_root, constant_split)
    if no_scan:
        sc = load_manifest(inputs, split_per_list=split_per_list, group_regex=group_regex,
                           **opts)
        bounds = resolve_boundaries(sc, query, reference, both_directions)
    else:
        sc = _scan_for(inputs, workspace, group_regex, split_per_list, opts)
        bounds = resolve_boundaries(sc.manifest, query, reference, both_directions)
    result = audit_provenance(sc, bounds, seed=seed, n_resamples=resamples, partition=False,
                              include_name_fields=include_name_fields)
    _emit(result, as_json, out_dir, _print_probe)
    if fail_above_chance:
        for r in result.records:
            if (r.id == "provenance.header_probe.within_pool" and r.status == "completed"
                    and r.uncertainty.low > r.details["chance"]):
                raise SystemExit(1)


@click.command("shift")
@click.argument("inputs", nargs=-1, required=True, metavar="ROOT|LIST...")
@with_options(_common)
@with_options(_scan_opts)
@click.option("--embeddings", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Parquet/CSV of vectors keyed by `path` instead of thumbnail features.")
@click.option("--classifier", type=click.Choice(["logistic", "hgb"]), default="logistic",
              show_default=True)
@click.option("--max-rows", type=int, default=None,
              help="Seeded subsample of each comparison (stratified by side).")
@click.option("--internal-share", type=float, default=0.2, show_default=True,
              help="Share of the reference side held out in the internal-split control.")
@with_options(LIST_FILE_OPTIONS)
def shift_command(inputs, group_regex, query, reference, both_directions, split_per_list, seed,
                  resamples, out_dir, as_json, workspace, embeddings, classifier, max_rows,
                  internal_share, path_column, label_column, split_column, source_column,
                  group_column, list_root, constant_split) -> None:
    """Partition classifier: can image content tell test from the training pool? Out-of-fold
    AUC overall and per class, shuffled-partition and internal-split controls, proxy
    A-distance (METHODS §4.4)."""
    from splitscope.probes.audit import audit_provenance

    sc = _scan_for(inputs, workspace, group_regex, split_per_list,
                   list_options(path_column, label_column, split_column, source_column,
                                 group_column, list_root, constant_split))
    bounds = resolve_boundaries(sc.manifest, query, reference, both_directions)
    result = audit_provenance(sc, bounds, seed=seed, n_resamples=resamples, header=False,
                              association=False, embeddings=embeddings, classifier=classifier,
                              internal_share=internal_share, max_partition_rows=max_rows)
    _emit(result, as_json, out_dir, _print_shift)


COMMANDS: list = [groups_command, resplit_command, probe_command, shift_command]
