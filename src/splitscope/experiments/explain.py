"""Grad-CAM maps of a finished run for its evaluated rows, in the format the attribution layer
reads (METHODS §5.10): ``maps.npz`` and ``masks.npz`` keyed by released path, S×S each.

Masks come from a supplied source (what :func:`splitscope.evaluation.attribution.load_maps`
reads) or from the Otsu rule of :data:`splitscope.experiments.gradcam.OTSU_RULE` applied to
the run's S×S grey input. With the experiment's deduplicated-view list, the share of
attribution mass outside the mask is compared between flagged (leaked) and clean test rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from splitscope.errors import InputError
from splitscope.experiments.backbones import BackboneSpec, require_torch
from splitscope.options import RunOptions

_BATCH = 64


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path} is not readable JSON ({type(exc).__name__}); use the run "
                         f"folder as train wrote it") from exc
    if not isinstance(doc, dict):
        raise InputError(f"{path} holds no JSON object; use the run folder as train wrote it")
    return doc


def _experiment_of(run_dir: Path) -> tuple[dict, dict, Path]:
    rec_path = run_dir / "run.json"
    if not rec_path.exists():
        raise InputError(f"{run_dir}: no run.json (not a finished run folder)")
    exp_dir = run_dir.parent.parent
    exp_path = exp_dir / "experiment.json"
    if not exp_path.exists():
        raise InputError(f"{exp_dir}: no experiment.json above the run folder")
    return _read_json(rec_path), _read_json(exp_path), exp_dir


def load_run_model(run_dir: Path):
    """The selected model of a run and its Grad-CAM target layer.

    The architecture comes from ``run.json``, built without its start weights (``selected.pt``
    sets every tensor, so no other file named there is read); ``selected.pt`` is read only
    once ``selected.json`` names this run (:func:`~splitscope.experiments.training.read_selected`).
    """
    from splitscope.experiments.backbones import refuse_online
    from splitscope.experiments.training import classifier, load_state, read_selected

    torch = require_torch()
    rec, exp, _ = _experiment_of(run_dir)
    try:
        b = rec["backbone"]
        refuse_online(str(b["name"]))
        spec = BackboneSpec(str(b["name"]), None, None, int(b["init_seed"]),
                            int(b["in_channels"]))
        n_classes = len(exp["classes"])
        expected = {"run": rec["run"], "backbone": b, "policy": rec["policy"],
                    "seed": rec["seed"], "n_classes": n_classes}
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{run_dir}: run.json or experiment.json lacks what train writes "
                         f"({type(exc).__name__}: {exc}); use the run folder as train wrote "
                         f"it") from exc
    state = read_selected(torch, run_dir, expected)
    model, target = classifier(spec, n_classes, int(rec["seed"]))
    load_state(model, state, run_dir / "selected.pt",
               "use the run folder as train wrote it")
    return model, target, rec, exp


def explain_run(run_dir: str | Path, out_dir: str | Path | None = None, *, masks=None,
                n_boot: int = RunOptions.resamples, seed: int = RunOptions.seed) -> dict:
    """Write Grad-CAM maps (explained class: the predicted one) and masks for a run's
    evaluated rows; compare flagged with clean rows when the experiment lists flagged rows.

    Returns
    -------
    dict
        ``maps``, ``masks`` (paths), ``rows``, ``mask_rule`` and, when compared, ``contrast``
        (the attribution layer's summary) and ``record``.
    """
    from splitscope.evaluation.attribution import audit_attribution
    from splitscope.experiments.gradcam import OTSU_RULE, body_mask, grad_cam
    from splitscope.experiments.training import _ordered, to_input
    from splitscope.features.scanning import load_scan
    from splitscope.records.exports import read_csv

    torch = require_torch()
    run_dir = Path(run_dir)
    model, target, rec, exp = load_run_model(run_dir)
    exp_dir = run_dir.parent.parent
    out = Path(out_dir) if out_dir is not None else run_dir / "explain"
    out.mkdir(parents=True, exist_ok=True)
    scan_s = load_scan(exp["workspace"], exp["image_scan"])
    rows = scan_s.rows()
    truth = read_csv(exp_dir / "truth.csv", dtype=str, keep_default_na=False)
    first = rows.drop_duplicates("path").set_index("path")
    missing = [p for p in truth["path"] if p not in first.index]
    if missing:
        raise InputError(f"{len(missing)} evaluated path(s) are not in the workspace scan, "
                         f"e.g. {missing[:2]}")
    index = first.loc[truth["path"], "thumb_index"].to_numpy(np.int64)
    maps = []
    for i in range(0, len(index), _BATCH):
        x = to_input(torch, _ordered(scan_s.thumbnails, index[i:i + _BATCH]))
        maps.append(grad_cam(model, target, x))
    maps = np.concatenate(maps)
    paths = truth["path"].tolist()
    np.savez_compressed(out / "maps.npz", **dict(zip(paths, maps)))
    if masks is None:
        mask_src = out / "masks.npz"
        np.savez_compressed(mask_src, **{p: body_mask(scan_s.thumbnails[j])
                                         for p, j in zip(paths, index)})
        rule = {**OTSU_RULE, "image_size": int(scan_s.thumbnails.shape[-1])}
    else:
        mask_src, rule = Path(masks), {"rule": "supplied", "source": str(masks)}
    result = {"run": rec["run"], "maps": str(out / "maps.npz"), "masks": str(mask_src),
              "rows": len(paths), "explained_class": "predicted (first maximum)",
              "target_layer": type(target).__name__, "mask_rule": rule}
    flagged = exp_dir / "views" / "deduplicated_exclude.csv"
    if flagged.exists():
        from splitscope.evaluation.pools import flagged_rows

        m = scan_s.manifest
        ev_rows = m.loc[m["path"].isin(paths)].drop_duplicates("path")["row"].to_numpy()
        exposed, _ = flagged_rows(m, flagged)
        layer, summary = audit_attribution(m, out / "maps.npz", mask_src, exposed,
                                           rows=ev_rows, exposed_name="flagged (leaked)",
                                           n_boot=n_boot, seed=seed,
                                           params={"mask_rule": rule, "run": rec["run"]})
        result["contrast"] = summary["contrast"]
        result["record"] = layer.records[0].to_dict()
    (out / "explain.json").write_text(json.dumps(result, indent=2, sort_keys=True,
                                                 default=str))
    return result
