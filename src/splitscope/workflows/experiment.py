"""The whole experiment in one command (``splitscope experiment``): pools → train → metrics on
every view → effects → explain → one audit with its report.

It sits above the layers (it calls the experiments layer's training, the evaluation layer's
effects and the audit) so that the layer packages stay independent of the audit::

    OUT/
      experiment.json, runs.csv, truth.csv, views/, pools/, predictions/, runs/   (train)
      effects/        protocol effects and paired contrasts of runs.csv
      explain/        Grad-CAM maps and masks of the explained run
      audit/          audit.json, report.html, lists/ (every layer, with the predictions,
                      the attribution maps and the experiment's records)
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from splitscope.cli_options import resamples_option, with_options
from splitscope.core.options import AuditOptions
from splitscope.experiments.commands import (
    backbone_options,
    print_summary,
    train_from_options,
    training_options,
)
from splitscope.options import RunOptions


def explained_run(summary) -> str:
    """The run whose maps go into the audit: Full pool, first seed, fine-tuned when trained
    (its attribution follows the leaked images most directly), else the first run."""
    for policy in ("finetune", "frozen"):
        hit = summary[(summary["pool"] == "Full") & (summary["policy"] == policy)]
        if len(hit):
            return str(hit.sort_values("seed")["run"].iloc[0])
    return str(summary["run"].iloc[0])


def run_experiment(result, release, out_dir: Path, *, workspace, group_regex, workers,
                   n_boot: int = RunOptions.resamples, seed: int = RunOptions.seed, command: str | None = None,
                   label_map=None, external=None):
    """After training (``result`` of :func:`train_experiment`): effects, explain and the
    audit. Returns ``(AuditResult, effects result, explain result)``."""
    from splitscope.core.run import audit
    from splitscope.evaluation.effects import protocol_effects
    from splitscope.experiments.explain import explain_run
    from splitscope.experiments.layer import contrasts_for
    from splitscope.records.exports import read_csv, write_artifacts_manifest

    runs = read_csv(out_dir / "runs.csv")
    effects = protocol_effects(out_dir / "runs.csv", contrasts=contrasts_for(runs),
                               n_boot=n_boot, seed=seed)
    write_artifacts_manifest(out_dir / "effects", effects.write(out_dir / "effects"))
    chosen = explained_run(result.summary)
    explained = explain_run(out_dir / "runs" / chosen, out_dir / "explain", n_boot=n_boot,
                            seed=seed)
    options = AuditOptions.from_flags(workspace=workspace or out_dir / "workspace",
                                      group_regex=group_regex, workers=workers,
                                      score_kind="logit", label_map=label_map)
    audited = audit(release, options, out_dir=out_dir / "audit",
                    predictions=out_dir / "predictions", attribution_maps=explained["maps"],
                    attribution_masks=explained["masks"], command=command, external=external)
    return audited, effects, explained


def trained_model_outputs(root, out_dir: Path, *, group_regex: str | None = None,
                          workers: int | None = None, seed: int = RunOptions.seed, epochs: int = 6,
                          image_size: int = 64) -> dict:
    """A real small-cnn for the demo, in place of the simulated outputs: fine-tuned on the
    Full pool (one seed), its logits and Grad-CAM maps (Otsu masks). Returns what
    :func:`splitscope.datasets.simulated_model.simulate_model_outputs` returns (paths) plus
    ``score_kind``."""
    from splitscope.experiments.explain import explain_run
    from splitscope.experiments.protocol import Protocol
    from splitscope.experiments.retraining import run_id, train_experiment

    train_experiment(root, out_dir, policies=("finetune",), seeds=(seed,), pools=("Full",),
                     protocol=Protocol(image_size=image_size, epochs=epochs, batch_size=32),
                     group_regex=group_regex, workers=workers, device="cpu")
    explained = explain_run(out_dir / "runs" / run_id("small-cnn", "finetune", "Full", seed),
                            out_dir / "explain", seed=seed)
    return {"predictions": out_dir / "predictions", "attribution_maps": explained["maps"],
            "attribution_masks": explained["masks"], "score_kind": "logit"}


@click.command("experiment")
@click.argument("release", type=click.Path(exists=True))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False))
@with_options(backbone_options)
@with_options(training_options)
@resamples_option(2000, help="Bootstrap resamples of the effects and the attribution contrast.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def experiment_cmd(release, out_dir, backbone, weights, init_seed, image_size, workspace,
                   device, group_regex, workers, policies, seeds, pools, epochs, batch_size,
                   lr, val_share, augmentation, amp, channels_last, audit_dir, drop_source,
                   removal_predicates, pool_seed, external, label_map, n_boot, as_json):
    """Train, score every view, compute the effects, explain and audit: one report
    (OUT/audit/report.html) with the experiment's records."""
    out = Path(out_dir)
    res = train_from_options(release, out, backbone, weights, init_seed, image_size,
                             workspace, device, group_regex, workers, policies, seeds, pools,
                             epochs, batch_size, lr, val_share, audit_dir, drop_source,
                             removal_predicates, pool_seed, label_map=label_map,
                             external=external, quiet=as_json, augmentation=augmentation,
                             amp=amp, channels_last=channels_last)
    command = "splitscope " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    audited, effects, explained = run_experiment(
        res, release, out, workspace=workspace, group_regex=group_regex, workers=workers,
        n_boot=n_boot, command=command, label_map=label_map, external=external)
    summary = {"exit_code": audited.exit_code, "report": str(audited.out_dir / "report.html"),
               "runs": res.summary.to_dict(orient="records"),
               "contrasts": effects.paired.to_dict(orient="records"),
               "explained_run": explained["run"], "attribution": explained.get("contrast")}
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True, default=str))
    else:
        print_summary(res)
        click.echo(f"effects: {out / 'effects'}; maps: {explained['maps']}; report: "
                   f"{summary['report']}")
    if audited.exit_code:
        raise SystemExit(audited.exit_code)


COMMANDS: list = [experiment_cmd]
