"""CLI verbs of the experiments layer (the ``[torch]`` extra): ``train``, ``embed``, ``explain``.

Without torch each exits 2 with the install hint; a backbone that would need a download exits
2 naming the file to supply with ``--weights``.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path

import click
import numpy as np

from splitscope.cli_options import LABEL_MAP_OPTION, resamples_option, with_options
from splitscope.errors import InputError
from splitscope.records.exports import write_artifacts_manifest

backbone_options = [
    click.option("--backbone", default="small-cnn", show_default=True,
                 help="small-cnn, tv:NAME (torchvision) or timm:NAME; NAME:TAG asks for "
                      "pretrained weights, which must come from --weights."),
    click.option("--weights", type=click.Path(exists=False, dir_okay=False), default=None,
                 help="Local start weights: a state dict or a checkpoint holding one (never "
                      "downloaded). Default: random initialisation from --init-seed."),
    click.option("--init-seed", default=0, show_default=True, type=int,
                 help="Seed of the random start weights (the same for every run)."),
    click.option("--image-size", default=64, show_default=True, type=int,
                 help="Side S of the S×S grey input (decoded once per size, cached)."),
    click.option("--workspace", "-w", type=click.Path(file_okay=False), default=None,
                 help="Workspace: scans, decoded images and the frozen-feature cache."),
    click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
                 show_default=True),
    click.option("--group-regex", default=None,
                 help="Named-group regex over the basename giving the group (patient, "
                      "video): the validation holdout is then group-disjoint."),
    click.option("--workers", type=int, default=None, help="Scan worker processes."),
]

training_options = [
    click.option("--policy", "policies", default="frozen,finetune", show_default=True,
                 help="Comma-separated: frozen (head only, cached features), finetune."),
    click.option("--seeds", default="0,1,2", show_default=True, help="Comma-separated seeds."),
    click.option("--pools", default="Full,Removal,Class-matched,Random", show_default=True,
                 help="Comma-separated training pools (Full, Removal, Random, Class-matched, "
                      "Source-only, Within-class replacement); by default Removal beside its "
                      "class-matched and random controls."),
    click.option("--epochs", default=10, show_default=True, type=int),
    click.option("--batch-size", default=64, show_default=True, type=int),
    click.option("--lr", default=1e-3, show_default=True, type=float),
    click.option("--val-share", default=0.15, show_default=True, type=float,
                 help="Validation holdout share of each pool (stratified, seeded)."),
    click.option("--augmentation", default="flip,crop", show_default=True,
                 type=click.Choice(["flip,crop", "flip", "crop", "none"]),
                 help="Fine-tuning augmentation: random horizontal flip, random shift (crop "
                      "of the reflect-padded image), both or none; recorded in the protocol."),
    click.option("--amp", is_flag=True,
                 help="Mixed precision (float16 autocast with gradient scaling); CUDA only."),
    click.option("--channels-last", is_flag=True,
                 help="Channels-last memory format; CUDA only."),
    click.option("--audit", "audit_dir", type=click.Path(exists=True, file_okay=False),
                 default=None, help="A finished audit whose contaminated list gives the "
                                    "flagged rows (default: the duplicates layer runs on the "
                                    "workspace scan)."),
    click.option("--drop-source", default=None, help="Source dropped for Source-only."),
    click.option("--removal-predicate", "removal_predicates", default=None,
                 help="Comma-separated predicates whose flagged training rows Removal drops "
                      "(default: sha256, pixel_xxh128, ncc_nearest, ncc_nearest_dihedral, the "
                      "deduplicated view's; e.g. hash_screen for screen-positive rows)."),
    click.option("--pool-seed", default=0, show_default=True, type=int,
                 help="Seed of the Random and class-matched pools."),
    click.option("--external", type=click.Path(exists=True), default=None,
                 help="Another corpus (folder or list file) every run's selected model is "
                      "evaluated on: views external and external_deduplicated (minus its "
                      "rows contained in train); never trained on."),
    LABEL_MAP_OPTION,
]


def _csv(text: str, cast=str) -> tuple:
    try:
        return tuple(cast(x.strip()) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise InputError(f"cannot read {text!r} as a comma-separated list: {exc}") from exc


@contextmanager
def run_progress(enabled: bool, terminal: bool | None = None):
    """Progress on stderr when ``enabled``: two rich bars (runs, epochs of the current run) on
    a terminal, else one line per epoch (run k/N, epoch, training images/s, ETA of the whole
    experiment from the epochs so far); yields the ``on_epoch`` callback of
    :func:`train_experiment` (or ``None``)."""
    if not enabled:
        yield None
        return
    if not (sys.stderr.isatty() if terminal is None else terminal):
        yield epoch_lines(lambda text: click.echo(text, err=True))
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        tasks = {}

        def on_epoch(k, total, rid, epoch, epochs, entry=None):
            if "all" not in tasks:
                tasks["all"] = bar.add_task("runs", total=total)
            if tasks.get("run_id") != rid:
                if "run" in tasks:
                    bar.remove_task(tasks["run"])
                tasks["run"] = bar.add_task(rid, total=epochs)
                tasks["run_id"] = rid
            bar.update(tasks["run"], completed=epoch)
            bar.update(tasks["all"], completed=k - 1 + epoch / epochs)

        yield on_epoch


def epoch_lines(echo, clock=None):
    """An ``on_epoch`` callback that writes one plain line per epoch trained (for logs and
    pipes): ``run 3/16 NAME epoch 2/10: 812 images/s, ETA 0:14:05``. The ETA is the time per
    trained epoch so far times the epochs left (reused runs count as done)."""
    import time

    clock = clock or time.monotonic
    state = {"start": None, "trained": 0}

    def on_epoch(k, total, rid, epoch, epochs, entry=None):
        if entry is None:  # a run finished earlier
            echo(f"run {k}/{total} {rid}: finished earlier, reused")
            return
        now = clock()
        if state["start"] is None:
            state["start"] = now - entry["data_s"] - entry["compute_s"] - entry["eval_s"]
        state["trained"] += 1
        left = (total - k) * epochs + (epochs - epoch)
        eta = (now - state["start"]) / state["trained"] * left
        h, rest = divmod(round(eta), 3600)
        echo(f"run {k}/{total} {rid} epoch {epoch}/{epochs}: "
             f"{entry['train_images_per_s']:.0f} images/s, ETA {h}:{rest // 60:02d}:"
             f"{rest % 60:02d}")

    return on_epoch


def print_summary(result) -> None:
    from rich.table import Table

    from splitscope.cli_common import rich_console

    con = rich_console(width=160, markup=False, soft_wrap=False)
    s = result.summary
    table = Table(title=f"{len(s)} runs (BA = balanced accuracy of the selected epoch's "
                        f"logits; official and deduplicated test views)")
    for c in s.columns:
        table.add_column(c)
    for row in s.itertuples(index=False):
        table.add_row(*[_cell(v) for v in row])
    con.print(table)
    fc = result.info.get("feature_cache")
    if fc:
        con.print(f"frozen-feature cache: {'reused' if fc['hit'] else 'computed'} ({fc['path']})")
    ev = result.info["evaluated"]
    con.print(f"evaluated test rows: {ev['rows']}; left out: "
              + ", ".join(f"{v} {k}" for k, v in ev["skipped"].items()))
    con.print(f"runs.csv: {result.out_dir / 'runs.csv'} (splitscope effects runs.csv "
              f"--contrast Removal-Full)")


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.4f}" if np.isfinite(v) else "–"
    return "–" if v is None else str(v)


def train_from_options(release, out_dir, backbone, weights, init_seed, image_size, workspace,
                       device, group_regex, workers, policies, seeds, pools, epochs,
                       batch_size, lr, val_share, audit_dir, drop_source, removal_predicates,
                       pool_seed, label_map=None, external=None, quiet: bool = False,
                       augmentation: str = "flip,crop", amp: bool = False,
                       channels_last: bool = False):
    """Parse the option values and run :func:`train_experiment` with progress (bars on a
    terminal, one line per epoch otherwise)."""
    from splitscope.experiments.protocol import Protocol
    from splitscope.experiments.retraining import train_experiment

    protocol = Protocol(image_size=image_size, epochs=epochs, batch_size=batch_size, lr=lr,
                        val_share=val_share, augmentation=augmentation, amp=amp,
                        channels_last=channels_last)
    with run_progress(not quiet) as on_epoch:
        return train_experiment(
            release, out_dir, backbone=backbone, weights=weights, init_seed=init_seed,
            policies=_csv(policies), seeds=_csv(seeds, int), pools=_csv(pools),
            protocol=protocol, workspace=workspace, audit_dir=audit_dir,
            drop_source=drop_source, pool_seed=pool_seed, device=device,
            removal_predicates=_csv(removal_predicates) if removal_predicates else None,
            group_regex=group_regex, label_map=label_map, external=external, workers=workers,
            on_epoch=on_epoch)


@click.command("train")
@click.argument("release", type=click.Path(exists=True))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@with_options(backbone_options)
@with_options(training_options)
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as JSON.")
def train_cmd(release, out_dir, backbone, weights, init_seed, image_size, workspace, device,
              group_regex, workers, policies, seeds, pools, epochs, batch_size, lr, val_share,
              augmentation, amp, channels_last, audit_dir, drop_source, removal_predicates,
              pool_seed, external, label_map, as_json):
    """Controlled re-training: every policy × pool × seed under one recorded protocol
    (METHODS 5.11); per run predictions.parquet (logits), the selected checkpoint and its
    curve; runs.csv for `splitscope effects`. A rerun skips finished runs and resumes an
    unfinished one from its last epoch."""
    res = train_from_options(release, out_dir, backbone, weights, init_seed, image_size,
                             workspace, device, group_regex, workers, policies, seeds, pools,
                             epochs, batch_size, lr, val_share, audit_dir, drop_source,
                             removal_predicates, pool_seed, label_map=label_map,
                             external=external, quiet=as_json, augmentation=augmentation,
                             amp=amp, channels_last=channels_last)
    out = Path(out_dir)
    write_artifacts_manifest(out, [out / "runs.csv", out / "experiment.json",
                                   out / "truth.csv"]
                             + sorted((out / "predictions").glob("*.parquet"))
                             + sorted((out / "runs").glob("*/external_predictions.parquet")))
    if as_json:
        click.echo(json.dumps({"runs": res.summary.to_dict(orient="records"),
                               "experiment": res.info}, indent=2, sort_keys=True,
                              default=str))
        return
    print_summary(res)


@click.command("embed")
@click.argument("release", type=click.Path(exists=True))
@click.option("--out", "out_file", required=True, type=click.Path(dir_okay=False),
              help="Parquet file: path, e0 … e{d-1} (what `duplicates --embeddings` reads).")
@with_options(backbone_options)
@click.option("--raw", is_flag=True, help="Write the raw pooled features (default: each "
                                          "dimension standardised on the training rows).")
@click.option("--json", "as_json", is_flag=True)
def embed_cmd(release, out_file, backbone, weights, init_seed, image_size, workspace, device,
              group_regex, workers, raw, as_json):
    """Backbone embeddings per released path (same loader and cache as training; --weights
    takes a run's selected.pt for a fine-tuned backbone)."""
    from splitscope.experiments.embeddings import embed_release

    res = embed_release(release, out_file, backbone=backbone, weights=weights,
                        init_seed=init_seed, image_size=image_size, workspace=workspace,
                        device=device, group_regex=group_regex, workers=workers,
                        standardize=not raw)
    if as_json:
        click.echo(json.dumps(res, indent=2, sort_keys=True, default=str))
        return
    click.echo(f"{res['paths']} paths × {res['dimension']} dimensions → {res['out']} "
               f"(feature cache {'reused' if res['cache']['hit'] else 'computed'}); "
               f"{len(res['no_decoded_image'])} path(s) without a decoded image left out")


@click.command("explain")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--masks", type=click.Path(exists=True), default=None,
              help="Body/organ masks (.npz or folder, as `attribution --masks`); default: "
                   "Otsu on the S×S input, largest component, holes filled.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Default: RUN_DIR/explain.")
@resamples_option(2000)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--json", "as_json", is_flag=True)
def explain_cmd(run_dir, masks, out_dir, n_boot, seed, as_json):
    """Grad-CAM maps of a finished run's evaluated rows (maps.npz, masks.npz, as `attribution`
    and `audit --attribution-maps` read), and attribution outside the mask: flagged versus
    clean test rows."""
    from splitscope.experiments.explain import explain_run

    res = explain_run(run_dir, out_dir, masks=masks, n_boot=n_boot, seed=seed)
    if as_json:
        click.echo(json.dumps(res, indent=2, sort_keys=True, default=str))
        return
    click.echo(f"{res['rows']} Grad-CAM maps → {res['maps']}; masks → {res['masks']}")
    c = res.get("contrast")
    if c:
        iv = c.get("interval") or {}
        click.echo(f"share of |attribution| outside the mask: flagged {c['exposed']['mean']} "
                   f"({c['exposed']['assessed']} rows), clean {c['clean']['mean']} "
                   f"({c['clean']['assessed']} rows); difference {c['difference']} "
                   f"[{iv.get('low')}, {iv.get('high')}] ({iv.get('kind')})")


COMMANDS: list = [train_cmd, embed_cmd, explain_cmd]

__all__ = ["COMMANDS", "backbone_options", "print_summary", "train_from_options",
           "training_options"]
