"""CLI verbs of this layer (registered by splitscope.cli): ``duplicates``."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import click

from splitscope.cli_common import FORCE_OPTION, gate, out_folder, parse_fail_on
from splitscope.cli_options import (
    IMAGE_COLUMN_OPTION,
    LABEL_MAP_OPTION,
    LIST_FILE_OPTIONS,
    fail_on_option,
    group_flags,
    list_options,
    safety_options,
    with_image_column,
    with_options,
)
from splitscope.errors import InputError
from splitscope.features.flags import MODE_OPTION, SAFETY_OPTIONS
from splitscope.records.roles import is_transform_sensitivity
from splitscope.relations import predicates
from splitscope.relations.ann import INDEXES
from splitscope.relations.ncc import DEFAULT_EMBEDDING_TAU
from splitscope.relations.options import SearchOptions

#: The identity and near-duplicate search (METHODS §2), from :class:`SearchOptions`.
SEARCH_OPTIONS = group_flags(SearchOptions, ("control_bound", "tau", "radius", "dihedral",
                                             "max_pairs_per_query"))
from splitscope.relations.predicates import EMBEDDING_PREDICATE, NCC_NEAREST

#: predicates whose records carry a threshold sweep, and the sweep's printed title
_SWEEP_TITLES = {NCC_NEAREST: "NCC sweep (nearest rule)",
                 EMBEDDING_PREDICATE: "Embedding cosine sweep (nearest rule; τ is model-dependent)"}


def summary_payload(result) -> dict:
    """The verb's result as a JSON-ready dict with stable keys (also what ``--json`` prints)."""
    predicates = []
    sweeps = []
    transforms = {}
    for rec in result.records:
        d = rec.details or {}
        if is_transform_sensitivity({"details": d}):
            transforms[rec.predicate.get("name")] = d.get("pass_rates", {})
            continue
        control = d.get("control") or {}
        predicates.append({
            "id": rec.id, "layer": rec.layer, "boundary": (rec.boundary or {}).get("name"),
            "predicate": rec.predicate.get("name"), "params": rec.predicate.get("params", {}),
            "unit": rec.unit, "numerator": rec.numerator, "denominator": rec.denominator,
            "rate": rec.estimate, "not_assessed": d.get("not_assessed"), "status": rec.status,
            "control_rate": control.get("rate"), "unreliable": control.get("unreliable"),
        })
        if rec.predicate.get("name") in _SWEEP_TITLES:
            sweeps.append({"boundary": (rec.boundary or {}).get("name"),
                           "predicate": rec.predicate.get("name"),
                           "sweep": d.get("sweep", [])})
    payload = {"predicates": predicates, "sweeps": sweeps, "transforms": transforms,
               "records": [r.to_dict() for r in result.records]}
    from splitscope.records.model import _clean
    return _clean(payload)


def _fmt_rate(x) -> str:
    from splitscope.records.format import percent

    return "—" if x is None else percent(x)


def print_summary(payload: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    from splitscope.cli_common import rich_console

    console = rich_console()
    boundaries = list(dict.fromkeys(str(p["boundary"]) for p in payload["predicates"]))
    unreliable_seen = False
    for name in boundaries:
        table = Table(title=f"{name}: affected query rows", title_justify="left",
                      box=None, pad_edge=False)
        for col in ("predicate", "affected", "rows", "rate", "n/a", "control"):
            table.add_column(col, justify="left" if col == "predicate" else "right",
                             no_wrap=True)
        notes = []
        for p in payload["predicates"]:
            if str(p["boundary"]) != name:
                continue
            control = "—" if p["control_rate"] is None else (
                _fmt_rate(p["control_rate"]) + (" ✗" if p["unreliable"] else ""))
            unreliable_seen |= bool(p["unreliable"])
            table.add_row(escape(str(p["predicate"])), f"{int(p['numerator'] or 0):,}",
                          f"{int(p['denominator'] or 0):,}", _fmt_rate(p["rate"]),
                          str(p["not_assessed"]) if p["not_assessed"] is not None else "—",
                          control)
            if p["status"] != "completed":
                notes.append(f"{p['predicate']}: {p['status']}")
        console.print(table)
        for note in notes:
            console.print(escape(f"  {note}"))
    if unreliable_seen:
        console.print("✗ control rate above the bound: predicate unreliable on this modality")
    if payload.get("transforms"):
        tt = Table(title="transform sensitivity: pass rate per predicate", title_justify="left",
                   box=None, pad_edge=False)
        preds = list(payload["transforms"])
        tt.add_column("transform", no_wrap=True)
        for p in preds:
            tt.add_column(p.replace("hash_", "").replace(NCC_NEAREST, "ncc"), justify="right")
        names = list(next(iter(payload["transforms"].values())))
        for name in names:
            tt.add_row(name, *[_fmt_rate(payload["transforms"][p][name]["pass_rate"])
                               for p in preds])
        console.print(tt)
    for s in payload["sweeps"]:
        title = _SWEEP_TITLES.get(s.get("predicate", NCC_NEAREST), "sweep")
        sweep = Table(title=f"{title}, {s['boundary']}", title_justify="left")
        for col in ("τ", "affected", "assessed", "rate"):
            sweep.add_column(col, justify="right")
        for row in s["sweep"]:
            sweep.add_row(f"{row['tau']:g}", f"{row['affected']:,}", f"{row['assessed']:,}",
                          _fmt_rate(row["rate"]))
        console.print(sweep)


@click.command("duplicates")
@click.argument("inputs", nargs=-1, required=True, metavar="ROOT|LIST...")
@click.option("--query", "-q", default=None, help="Query population selector (e.g. test).")
@click.option("--reference", "-r", default=None,
              help="Reference population selector (e.g. train). Default: test → train and "
                   "val → train, or every row against itself when there are no splits.")
@click.option("--boundary", "boundaries", multiple=True,
              help="Boundary 'QUERY->REFERENCE' (repeatable), e.g. 'corpus=B->corpus=A'.")
@click.option("--control", "control_root", default=None, type=click.Path(exists=True),
              help="A release known to be clean (negative control): its own test → train "
                   "(or the boundary given by --control-boundary).")
@click.option("--control-boundary", default=None,
              help="Boundary on the control release, 'QUERY->REFERENCE'; with no --control, "
                   "a boundary on the audited release used as the control.")
@with_options(SEARCH_OPTIONS)
@click.option("--thumb-size", type=int, default=96, show_default=True,
              help="Thumbnail side S (part of the NCC predicate).")
@MODE_OPTION
@click.option("--interpolation", default="bicubic", show_default=True,
              help="Thumbnail resize filter (part of the NCC predicate).")
@click.option("--workspace", "-w", type=click.Path(file_okay=False), default=None,
              help="Workspace for the feature cache (default ./splitscope-workspace).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write contaminated lists, deduplicated splits and the pair table here.")
@FORCE_OPTION
@click.option("--workers", type=int, default=None, help="Worker processes/threads.")
@click.option("--transforms", "transform_sample", type=int, default=0, show_default=True,
              help="Transform sensitivity on this many reference images (0: skip).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the transform-sensitivity sample.")
@click.option("--embeddings", "embeddings", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="User-supplied embeddings (Parquet/CSV with a `path` column as released and "
                   "the vector, or an .npy (n, d) array in manifest order): adds the "
                   "embedding_cosine predicate.")
@click.option("--embedding-tau", type=float, default=DEFAULT_EMBEDDING_TAU, show_default=True,
              help="Cosine threshold for --embeddings (model-dependent; the sweep is always "
                   "printed).")
@click.option("--index", "embedding_index", type=click.Choice(list(INDEXES)),
              default="exact", show_default=True,
              help="How --embeddings is searched: exact (blocked, every pair) or faiss-ivf (a "
                   "FAISS IVF-Flat index, [scale] extra, for large sets; every candidate "
                   "re-checked exactly, parameters recorded).")
@fail_on_option({**predicates.METRICS, **predicates.EXTERNAL_METRICS})
@click.option("--group-regex", default=None,
              help="Named-group regex over the file name giving the group (and frame).")
@LABEL_MAP_OPTION
@with_options(LIST_FILE_OPTIONS)
@IMAGE_COLUMN_OPTION
@with_options(SAFETY_OPTIONS)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def duplicates_command(inputs, query, reference, boundaries, control_root, control_boundary,
                       control_bound, tau, radius, dihedral, max_pairs_per_query, thumb_size,
                       mode, interpolation,
                       workspace, out_dir, workers, transform_sample, seed, embeddings,
                       embedding_tau, embedding_index, fail_on, group_regex, label_map,
                       path_column, label_column, split_column, source_column, group_column,
                       list_root, constant_split, image_column, allow_outside_root, allow_urls,
                       follow_links, max_file_bytes, as_json) -> None:
    """Byte, name, pixel, hash and NCC relationships across boundaries (METHODS §1–2), and
    embedding cosine similarity with --embeddings: prints each predicate's affected query rows
    / denominator / rate and the sweeps."""
    from splitscope.features.scanning import scan
    from splitscope.relations.duplicates import audit_duplicates

    if (query is None) != (reference is None):
        raise InputError("give both --query and --reference (or neither)")
    metrics = {**predicates.METRICS, **predicates.EXTERNAL_METRICS}
    conditions = parse_fail_on(fail_on, metrics)
    list_opts = with_image_column(list_options(path_column, label_column, split_column,
                                               source_column, group_column, list_root,
                                               constant_split), image_column)
    reading = {"group_regex": group_regex, "label_map": label_map, **list_opts,
               **safety_options(allow_outside_root, follow_links, max_file_bytes, allow_urls)}
    bounds: list = list(boundaries)
    if query is not None:
        bounds.insert(0, (query, reference))
    ws = Path(workspace) if workspace else Path("splitscope-workspace")
    audited = scan(list(inputs), ws, thumb_size=thumb_size, mode=mode, interpolation=interpolation,
                   workers=workers, progress=False, **reading)
    control = None
    if control_root is not None:
        cscan = scan(control_root, ws.parent / f"{ws.name}-control", thumb_size=thumb_size,
                     mode=mode, interpolation=interpolation, workers=workers, progress=False,
                     **safety_options(allow_outside_root, follow_links, max_file_bytes,
                                      allow_urls))
        control = (cscan, control_boundary) if control_boundary else cscan
    elif control_boundary:
        control = (audited, control_boundary)
    # the exports are published into --out as a whole (splitscope.records.publish)
    with out_folder(out_dir, keep=[ws]) if out_dir else contextlib.nullcontext() as folder:
        options = SearchOptions(tau=tau, radius=radius, dihedral=dihedral,
                                transforms=transform_sample, control_bound=control_bound,
                                max_pairs_per_query=max_pairs_per_query)
        result = audit_duplicates(audited, bounds or None, options, control=control,
                                  out_dir=folder.path if folder else None, workers=workers,
                                  seed=seed, embeddings=embeddings,
                                  embedding_tau=embedding_tau, embedding_index=embedding_index)
    payload = summary_payload(result)
    if as_json:
        click.echo(json.dumps(payload, sort_keys=True))
    else:
        print_summary(payload)
        if out_dir:
            click.echo(f"exports written to {out_dir}")
    if conditions:
        gate(conditions, result.records, metrics, quiet=as_json)


COMMANDS: list = [duplicates_command]
