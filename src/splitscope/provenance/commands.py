"""CLI verbs of the provenance layer (registered by :mod:`splitscope.cli`): ``probe``
(header-only probe and source–label association) and ``shift`` (partition classifier)."""

from __future__ import annotations

import click
import pandas as pd

from splitscope.cli_common import (
    COMMON_OPTIONS,
    emit,
    fmt,
    load_manifest,
    resolve_boundaries,
    rich_console,
)
from splitscope.cli_options import (
    LABEL_MAP_OPTION,
    LIST_FILE_OPTIONS,
    list_options,
    with_options,
)
from splitscope.provenance.header_probe import FIT_MAX_ROWS
from splitscope.provenance.predicates import (
    HEADER_PROBE_WITHIN,
    HEADER_PROBES,
    IMAGE_STATS_PROBES,
    PARTITION,
    SOURCE_LABEL,
)
from splitscope.records.format import percent


def _scan_for(inputs, workspace, group_regex, split_per_list, list_options, label_map=None):
    from splitscope.features.scanning import scan

    if split_per_list:
        manifest = load_manifest(inputs, split_per_list=True, group_regex=group_regex,
                                 **list_options)
        return scan(manifest, workspace, progress=False, label_map=label_map)
    return scan(list(inputs), workspace, group_regex=group_regex, progress=False,
                label_map=label_map, **list_options)


def _print_probe(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    console = rich_console()
    t = Table(title="Probes of the label (balanced accuracy, 95% percentile bootstrap)",
              title_justify="left", box=None, pad_edge=False)
    for c in ("probe", "evaluation", "rows", "BA", "95% CI", "chance", "top fields"):
        t.add_column(c, justify="right" if c in ("rows", "BA", "95% CI", "chance") else "left",
                     no_wrap=c == "probe")
    probes = ((HEADER_PROBES, "Header-only probe: ", "header"),
              (IMAGE_STATS_PROBES, "Image-statistics probe: ", "image stats"))
    for predicates, title, name in probes:
        for r in result.records:
            if r.predicate.get("name") in predicates and r.status == "completed":
                u = r.uncertainty
                t.add_row(name, escape(r.title.replace(title, "")), f"{r.denominator:,}",
                          fmt(r.estimate), f"{fmt(u.low)}–{fmt(u.high)}",
                          fmt(r.details["chance"]),
                          escape(", ".join(r.details["top_fields"][:4])))
    if t.row_count:
        console.print(t)
    for r in result.records:
        if r.predicate.get("name") == HEADER_PROBE_WITHIN and r.status == "completed" \
                and r.details.get("single_field"):
            console.print("header fields alone (held-out BA, 8-leaf tree): " + ", ".join(
                f"{escape(str(x['feature']))} {x['balanced_accuracy']:.3f}"
                for x in r.details["single_field"][:5]))
    for r in result.records:
        if r.predicate.get("name") == SOURCE_LABEL and r.status == "completed":
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
                           f"{escape(str(d['dominant_source']))} {percent(d['dominant_share'])}")
            console.print(st)


def _print_shift(result) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="Partition classifier (out-of-fold AUC, 95% percentile bootstrap)",
              title_justify="left", box=None, pad_edge=False)
    for c in ("comparison", "test/train rows", "AUC", "95% CI", "shuffled AUC", "d_A"):
        t.add_column(c, justify="left" if c == "comparison" else "right")
    for r in result.records:
        if r.predicate.get("name") == PARTITION and r.status in ("completed", "partial"):
            u = r.uncertainty
            ctl = (r.details.get("shuffled_control") or {}).get("auc", {})
            t.add_row(escape(r.title.replace("Partition classifier ", "")),
                      f"{r.numerator:,}/{r.denominator - r.numerator:,}", fmt(r.estimate),
                      f"{fmt(u.low)}–{fmt(u.high)}", fmt(ctl.get("estimate")),
                      fmt(r.details.get("d_a")))
    if t.row_count:
        console = rich_console()
        console.print(t)
        for r in result.records:
            if r.predicate.get("name") == PARTITION and r.status in ("completed", "partial"):
                per = r.details.get("auc_by_class") or []
                console.print(escape(r.title.replace("Partition classifier ", "")) + ", per class: "
                              + "; ".join(f"{escape(str(x['label']))} {fmt(x['auc'])} "
                                          f"({fmt(x['low'])}–{fmt(x['high'])})" for x in per))


_scan_opts = [
    click.option("--workspace", "-w", type=click.Path(file_okay=False), default=None,
                 help="Workspace of the feature cache (default ./splitscope-workspace)."),
    LABEL_MAP_OPTION,
]


@click.command("probe")
@click.argument("inputs", nargs=-1, required=True, metavar="ROOT|LIST...")
@with_options(COMMON_OPTIONS)
@with_options(_scan_opts)
@click.option("--include-name-fields", is_flag=True,
              help="Also use name-derived fields (extension, extension mismatch).")
@click.option("--fit-max-rows", type=click.IntRange(min=1), default=FIT_MAX_ROWS, show_default=True,
              help="Rows each probe model is fit on at most (a seeded sample stratified by "
                   "class, spread over groups); every held-out row is still scored.")
@click.option("--fail-above-chance", is_flag=True,
              help="Exit 1 when the header probe's within-pool interval lies above "
                   "chance.")
@click.option("--no-scan", is_flag=True,
              help="Lists without images: skip the scan; only the source–label association "
                   "runs (both probes are recorded as not assessed).")
@with_options(LIST_FILE_OPTIONS)
def probe_command(inputs, group_regex, query, reference, both_directions, split_per_list, seed,
                  resamples, out_dir, as_json, workspace, label_map, include_name_fields,
                  fit_max_rows, fail_above_chance,
                  no_scan, path_column, label_column, split_column, source_column, group_column,
                  list_root, constant_split) -> None:
    """Header-only probe and image-statistics probe (each within pool and cross split) and
    source–label association (METHODS §4.2, 4.3, 4.5). Scans the release first (cached in the
    workspace)."""
    from splitscope.provenance.checks import audit_provenance

    opts = list_options(path_column, label_column, split_column, source_column, group_column,
                         list_root, constant_split)
    if no_scan:
        sc = load_manifest(inputs, split_per_list=split_per_list, group_regex=group_regex,
                           **opts)
        if label_map is not None:
            from splitscope.manifest.labels import apply_label_map

            sc = apply_label_map(sc, label_map)
        bounds = resolve_boundaries(sc, query, reference, both_directions)
    else:
        sc = _scan_for(inputs, workspace, group_regex, split_per_list, opts, label_map)
        bounds = resolve_boundaries(sc.manifest, query, reference, both_directions)
    result = audit_provenance(sc, bounds, seed=seed, n_resamples=resamples, partition=False,
                              include_name_fields=include_name_fields,
                              fit_max_rows=fit_max_rows)
    emit(result, as_json, out_dir, _print_probe)
    if fail_above_chance:
        for r in result.records:
            if (r.predicate.get("name") == HEADER_PROBE_WITHIN and r.status == "completed"
                    and r.uncertainty.low > r.details["chance"]):
                raise SystemExit(1)


@click.command("shift")
@click.argument("inputs", nargs=-1, required=True, metavar="ROOT|LIST...")
@with_options(COMMON_OPTIONS)
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
                  resamples, out_dir, as_json, workspace, label_map, embeddings, classifier,
                  max_rows,
                  internal_share, path_column, label_column, split_column, source_column,
                  group_column, list_root, constant_split) -> None:
    """Partition classifier: can image content tell test from the training pool? Out-of-fold
    AUC overall and per class, shuffled-partition and internal-split controls, proxy
    A-distance (METHODS §4.4)."""
    from splitscope.provenance.checks import audit_provenance

    sc = _scan_for(inputs, workspace, group_regex, split_per_list,
                   list_options(path_column, label_column, split_column, source_column,
                                 group_column, list_root, constant_split), label_map)
    bounds = resolve_boundaries(sc.manifest, query, reference, both_directions)
    result = audit_provenance(sc, bounds, seed=seed, n_resamples=resamples, header=False,
                              association=False, embeddings=embeddings, classifier=classifier,
                              internal_share=internal_share, max_partition_rows=max_rows)
    emit(result, as_json, out_dir, _print_shift)


COMMANDS: list = [probe_command, shift_command]
