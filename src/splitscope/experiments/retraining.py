"""Controlled re-training over training pools, policies and seeds (METHODS §5.9, §5.11).

:func:`train_experiment` goes from a release to one folder::

    OUT/
      experiment.json            protocol, backbone, pools, holdouts, caches, versions, device
      runs.csv                   long: model (the backbone), policy, pool, seed, view, device,
                                 metric, value (``splitscope effects`` reads it as it is)
      truth.csv                  the evaluated rows (path, label, split, source, group)
      views/deduplicated_exclude.csv   test rows removed by the deduplicated view
      external/                  with an external corpus: truth.csv (its evaluated rows),
                                 views/deduplicated_exclude.csv (its rows contained in the
                                 training split), the containment search's lists
      pools/                     the pool lists and counts (evaluation.pools)
      predictions/<run_id>.parquet     a copy of each run's predictions (a folder the audit reads)
      runs/<run_id>/             predictions.parquet, curve.csv, run.json,
                                 checkpoint.pt + checkpoint.json (the last epoch's state),
                                 selected.pt + selected.json (the selected epoch's weights):
                                 tensors only in the .pt, read with weights_only=True once
                                 the .json names the run (training module notes),
                                 external_predictions.parquet (with an external corpus)

Rows, labels, splits and groups come from the scan; images from the scan's S×S thumbnail
array (decoded once per size and cached in the workspace). The Removal pool drops the
training rows the duplicates layer flags (train → test; by default the deduplication
predicates, or the named ones, e.g. the hash screen), or
those named by a finished audit's ``lists/contaminated`` table. Test rows are evaluated, never
trained on. Rows whose file could not be decoded are left out and counted.

An external corpus (``external=``) is scanned in ``<workspace>-external`` and evaluated by
every run's selected model on two views: ``external`` (every external row with a decoded
image and a training class) and ``external_deduplicated`` (minus the rows contained in the
training split: those outside the cleaned external set of METHODS §2.9, a byte-identical or
NCC-nearest ≥ τ counterpart on the cross-corpus boundary *external → train*). Its predictions stay in the run folder and out of
``predictions/``, which the experiment's audit aligns to the audited release's rows; its
metrics are in ``runs.csv``, so ``splitscope effects`` reports the external transfer cost.
"""

from __future__ import annotations

import contextlib
import json
import platform
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.experiments.backbones import BackboneSpec, require_torch, resolve_backbone
from splitscope.experiments.protocol import POLICIES, Protocol, validation_holdout
from splitscope.features.executors import default_workers
from splitscope.records.exports import read_csv, write_csv
from splitscope.records.model import _clean
from splitscope.relations.options import SearchOptions
from splitscope.threads import blas_threads, check_workers

VIEWS = ("official", "deduplicated")
EXTERNAL_VIEWS = ("external", "external_deduplicated")
VIEW_METRICS = ("balanced_accuracy", "balanced_accuracy_present", "macro_auc", "accuracy",
                "organizer_score", "ece", "brier", "nll")
#: holdout-transfer figures of a run (:func:`holdout_transfer`) → runs.csv metric names
HOLDOUT_METRICS = {"temperature": "temperature", "ece_before": "ece_before_temperature",
                   "ece_after": "ece_after_temperature", "default_ba": "threshold_default_ba",
                   "youden_ba": "threshold_youden_ba"}

#: Removal beside its controls over the same seeds (METHODS §5.9): Class-matched draws the
#: Removal pool's class counts from Full, Random its size
DEFAULT_POOLS = ("Full", "Removal", "Class-matched", "Random")

RUN_METRICS = ("epochs", "best_epoch", "optimizer_updates", "wall_seconds",
               "train_images_per_s", "inference_images_per_s", "data_share")


@dataclass
class ExperimentResult:
    out_dir: Path
    runs: pd.DataFrame  # runs.csv
    summary: pd.DataFrame  # one row per run
    info: dict = field(default_factory=dict)  # experiment.json


def pick_device(device: str) -> str:
    """``auto`` → ``cuda`` when available, else ``cpu``; ``cuda`` without a GPU is an error."""
    torch = require_torch()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is available")
    if device not in ("cpu", "cuda"):
        raise InputError(f"device {device!r} not one of auto, cpu, cuda")
    return device


def run_id(backbone: str, policy: str, pool: str, seed: int) -> str:
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{backbone}__{policy}__"
                   f"{pool}")
    return f"{slug}__seed{seed}"


# --------------------------------------------------------------------------------------------
# flagged rows


def _hits(table: pd.DataFrame, predicates) -> np.ndarray:
    hit = np.zeros(len(table), dtype=bool)
    for p in predicates:
        if p in table:
            hit |= table[p].fillna(False).to_numpy(bool)
    return hit


def flagged_from_audit(manifest: pd.DataFrame, audit_dir: str | Path, removal, view
                       ) -> tuple[np.ndarray, np.ndarray, dict]:
    """Training rows to remove and test rows the deduplicated view drops, from a finished
    audit's ``lists/contaminated`` table (boundary test → train): the training counterparts
    of test rows flagged by the ``removal`` predicates, and the test rows flagged by the
    ``view`` predicates, matched to the manifest by released path."""
    from splitscope.evaluation.pools import flagged_rows

    lists = Path(audit_dir) / "lists"
    src = next((p for p in (lists / "contaminated.parquet", lists / "contaminated.csv")
                if p.exists()), None)
    if src is None:
        raise InputError(f"{audit_dir}: no lists/contaminated.parquet or .csv (an audit folder "
                         f"is expected)")
    table = pd.read_parquet(src) if src.suffix == ".parquet" else read_csv(src)
    table = table[table["boundary"].astype(str).str.startswith("test")]
    vt = table[table["predicate"].isin(view)]
    test, _ = flagged_rows(manifest, pd.DataFrame({"path": vt["path"].astype(str)}))
    cp = table.loc[table["predicate"].isin(removal), "counterpart_path"].dropna()
    train, unmatched = flagged_rows(manifest, pd.DataFrame({"path": cp.astype(str)}))
    train = np.intersect1d(train, manifest.loc[manifest["split"] == "train", "row"])
    return train, test, {"source": str(src), "removal_predicates": list(removal),
                         "view_predicates": list(view),
                         "rule": "training counterparts of test rows flagged on test → train "
                                 "(removal); test rows flagged on test → train (view)",
                         "unmatched_entries": unmatched}


def flagged_from_scan(scan, removal, view, *, workers: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray, dict]:
    """Training rows with a test twin (boundary train → test) by the ``removal`` predicates
    and test rows with a training twin (test → train) by the ``view`` predicates, from the
    duplicates layer run on the workspace scan (no SSIM, no transform sample; its searches
    on at most ``workers`` threads). The layer's per-row flags are kept in the workspace,
    keyed by the scan result, and reused by the next call on the same scan."""
    import splitscope
    from splitscope.relations.duplicates import audit_duplicates

    result = str(scan.meta.get("result", scan.meta.get("generation", "")))
    key = f"{scan.params.key()}-{_slug(result)}-n{len(scan.manifest)}-v{splitscope.__version__}"
    cached = Path(scan.workspace) / "experiments" / "flags" / f"{key}.parquet"
    if cached.exists():
        flags, reused = pd.read_parquet(cached), True
    else:
        res = audit_duplicates(scan, ["train->test", "test->train"],
                               SearchOptions(ssim=False, transforms=0), workers=workers)
        flags, reused = res.tables["query_flags"], False
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        flags.to_parquet(tmp, index=False)
        tmp.replace(cached)
    b = flags["boundary"].astype(str)
    on_train = b.str.startswith("train").to_numpy()
    train = np.unique(flags.loc[_hits(flags, removal) & on_train, "row"].to_numpy(np.int64))
    test = np.unique(flags.loc[_hits(flags, view) & ~on_train, "row"].to_numpy(np.int64))
    return train, test, {"source": "duplicates layer on the workspace scan",
                         "removal_predicates": list(removal), "view_predicates": list(view),
                         "boundaries": sorted(b.unique().tolist()),
                         "cache": {"path": str(cached), "hit": reused},
                         "rule": "train rows flagged on train → test (removal); test rows "
                                 "flagged on test → train (view)"}


# --------------------------------------------------------------------------------------------
# the frozen-feature cache


def feature_cache(model, scan_s, spec: BackboneSpec, protocol: Protocol, device: str
                  ) -> tuple[np.ndarray, dict]:
    """Backbone features of every thumbnail of ``scan_s``, computed once per (backbone,
    weights, image size, preprocessing, scan result) and kept in the workspace as ``.npy``."""
    from splitscope.experiments.training import extract_features
    from splitscope.features.workspace import write_npy

    result = str(scan_s.meta.get("result", scan_s.meta.get("generation", "")))
    key = f"{spec.key()}-{protocol.image_size}-{protocol.interpolation}-" \
          f"{scan_s.params.key()}-{_slug(result)}-n{len(scan_s.thumbnails)}"
    path = Path(scan_s.workspace) / "experiments" / "features" / f"{key}.npy"
    if path.exists():
        return np.load(path, mmap_mode="r"), {"path": str(path), "hit": True, "key": key}
    path.parent.mkdir(parents=True, exist_ok=True)
    feats = extract_features(model.to(device), scan_s.thumbnails,
                             np.arange(len(scan_s.thumbnails)), device)
    write_npy(feats, path)
    return np.load(path, mmap_mode="r"), {"path": str(path), "hit": False, "key": key}


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in s)[:40]


# --------------------------------------------------------------------------------------------
# the experiment


def _versions(torch, device: str) -> dict:
    import splitscope

    out = {"splitscope": splitscope.__version__, "torch": torch.__version__,
           "numpy": np.__version__, "python": platform.python_version(), "device": device,
           "threads": torch.get_num_threads()}
    if device == "cuda":
        out["cuda_device"] = torch.cuda.get_device_name(0)
        out["cuda"] = torch.version.cuda
    else:
        out["cpu"] = platform.processor() or platform.machine()
    return out


def evaluated_rows(rows: pd.DataFrame, classes: list[str], split: str | None = "test"
                   ) -> tuple[pd.DataFrame, dict]:
    """Rows of ``split`` (every row when ``None``) that are evaluated (a thumbnail, a known
    class, first row of each path) and the counts of those left out, by reason."""
    r = rows if split is None else rows[rows["split"] == split]
    skipped = {"no decoded image": int((r["thumb_index"] < 0).sum())}
    r = r[r["thumb_index"] >= 0]
    known = r["label"].astype("string").isin(classes).fillna(False).to_numpy(bool)
    skipped["label outside the training classes"] = int((~known).sum())
    r = r[known]
    dup = r["path"].duplicated().to_numpy()
    skipped["path listed again (first row kept)"] = int(dup.sum())
    return r[~dup], skipped


def train_experiment(
    release,
    out_dir: str | Path,
    *,
    backbone: str = "small-cnn",
    weights: str | Path | None = None,
    init_seed: int = 0,
    policies=POLICIES,
    seeds=(0, 1, 2),
    pools=DEFAULT_POOLS,
    protocol: Protocol | None = None,
    workspace: str | Path | None = None,
    audit_dir: str | Path | None = None,
    drop_source: str | None = None,
    removal_predicates=None,
    pool_seed: int = 0,
    device: str = "auto",
    group_regex: str | None = None,
    label_map=None,
    external=None,
    workers: int | None = None,
    progress: bool | None = None,
    echo=None,
    on_epoch=None,
) -> ExperimentResult:
    """Train every (policy, pool, seed) run under one protocol and score it on every view.

    Parameters
    ----------
    release : folder, list file or DataFrame manifest
        What :func:`splitscope.features.scanning.scan` reads.
    backbone, weights, init_seed
        See :func:`splitscope.experiments.backbones.resolve_backbone`; the backbone's start
        weights are the same for every run (the run seed sets the head, holdout, order and
        augmentation).
    policies : sequence of {"frozen", "finetune"}
    pools : sequence of str
        Names of :func:`splitscope.evaluation.pools.training_pools` (``Full``, ``Removal``,
        ``Random``, ``Class-matched``, ``Source-only``, ``Within-class replacement``).
    removal_predicates : sequence of str, optional
        Predicates whose flagged training rows the Removal pool drops (default: those of the
        deduplicated view, ``relations.predicates.DEDUP_PREDICATES``; e.g. ``hash_screen`` for the
        screen-positive rows of METHODS §5.9). The deduplicated view always uses the default.
    audit_dir : path, optional
        A finished audit: its contaminated list gives the flagged rows (else the duplicates
        layer runs on the workspace scan).
    label_map : str, path or mapping, optional
        Released labels → trained labels, applied once to the manifest of every scan
        (:func:`splitscope.manifest.labels.apply_label_map`) and recorded in experiment.json.
    external : folder or list file, optional
        Another corpus, evaluated by every run's selected model (never trained on) on the
        ``external`` and ``external_deduplicated`` views (module notes).
    workers : int, optional
        Threads or processes busy at a time: the scans' worker processes, the duplicate
        searches' threads, torch's intra-op threads (:func:`torch_threads`) and the BLAS/OpenMP
        pools; default: every core.
    echo : callable, optional
        ``echo(text)`` for progress lines.
    on_epoch : callable, optional
        ``on_epoch(run_number, runs, run_id, epoch, epochs, entry)`` after each epoch
        (progress), ``entry`` the epoch's curve line (train images/s, seconds) or ``None``
        for a reused run, which reports ``epoch == epochs``.

    Returns
    -------
    ExperimentResult
    """
    protocol = protocol or Protocol()
    bad = [p for p in policies if p not in POLICIES]
    if bad or not policies:
        raise InputError(f"policies {bad or '(none)'}: choose from {', '.join(POLICIES)}")
    if not seeds:
        raise InputError("no seeds given")
    spec = resolve_backbone(backbone, weights, init_seed)
    torch = require_torch()
    device = pick_device(device)
    with torch_threads(torch, workers), blas_threads(workers):
        return _train(release, out_dir, spec=spec, torch=torch, device=device,
                      backbone=backbone, policies=policies, seeds=seeds, pools=pools,
                      protocol=protocol, workspace=workspace, audit_dir=audit_dir,
                      drop_source=drop_source, removal_predicates=removal_predicates,
                      pool_seed=pool_seed, group_regex=group_regex, label_map=label_map,
                      external=external, workers=workers, progress=progress, echo=echo,
                      on_epoch=on_epoch)


@contextlib.contextmanager
def torch_threads(torch, workers: int | None) -> Iterator[int]:
    """Torch's intra-op threads set to ``workers`` (every core when None) inside the block,
    the caller's count restored after; yields the count.

    CPU kernels reduce in an order that depends on the thread count, so it is set here
    whatever limits the caller set: one count for every run and every process of an
    experiment with the same ``workers`` (a resumed run included), recorded in
    ``experiment.json`` (``versions.threads``)."""
    n = check_workers(workers) or default_workers()
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


def _train(release, out_dir, *, spec, torch, device, backbone, policies, seeds, pools, protocol,
           workspace, audit_dir, drop_source, removal_predicates, pool_seed, group_regex,
           label_map, external, workers, progress, echo, on_epoch) -> ExperimentResult:
    """The body of :func:`train_experiment`, under its thread count."""
    from splitscope.evaluation.pools import training_pools
    from splitscope.experiments.training import RunData, classifier, train_run
    from splitscope.features.scanning import scan
    from splitscope.relations.predicates import DEDUP_PREDICATES

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ws = Path(workspace) if workspace is not None else out / "workspace"
    say = echo or (lambda text: None)

    scan_kw = {"workers": workers, "progress": progress, "group_regex": group_regex,
               "label_map": label_map}
    base = scan(release, ws, **scan_kw)
    manifest = base.manifest
    removal = tuple(removal_predicates or DEDUP_PREDICATES)
    if audit_dir is not None:
        train_flag, test_flag, flag_info = flagged_from_audit(manifest, audit_dir, removal,
                                                              DEDUP_PREDICATES)
    else:
        train_flag, test_flag, flag_info = flagged_from_scan(base, removal, DEDUP_PREDICATES,
                                                             workers=workers)
    scan_s = base if protocol.image_size == base.params.thumb_size else scan(
        release, ws, thumb_size=protocol.image_size, interpolation=protocol.interpolation,
        **scan_kw)
    rows = scan_s.rows()
    thumb = dict(zip(rows["row"].to_numpy(), rows["thumb_index"].to_numpy()))

    res_pools = training_pools(manifest, drop_source=drop_source, flagged=train_flag,
                               seed=pool_seed, batch_size=protocol.batch_size, drop_last=False)
    by_name = {p.name: p for p in res_pools.pools}
    unknown = [p for p in pools if p not in by_name]
    if unknown:
        raise InputError(f"pools {unknown} not available; these are: {', '.join(by_name)}")
    res_pools.write(out / "pools", manifest)

    m = manifest.set_index("row")
    classes = sorted(m.loc[by_name["Full"].rows, "label"].dropna().astype(str).unique())
    if len(classes) < 2:
        raise InputError(f"the training rows hold {len(classes)} class(es); two are needed")
    ev, eval_skipped = evaluated_rows(rows, classes)
    if len(ev) == 0:
        raise InputError("no test row to evaluate (split 'test' with a decoded image)")
    truth = ev[["path", "label", "split", "source", "group"]].reset_index(drop=True)
    write_csv(truth, out / "truth.csv")
    (out / "views").mkdir(exist_ok=True)
    dedup_list = m.loc[np.intersect1d(test_flag, ev["row"]), ["path"]].reset_index()
    write_csv(dedup_list, out / "views" / "deduplicated_exclude.csv")
    kept = ev.loc[~ev["row"].isin(dedup_list["row"]), "label"].astype(str)
    view_classes = {v: _missing_classes(labels, classes) for v, labels in
                    (("official", ev["label"].astype(str)), ("deduplicated", kept))}

    info = {"release": str(release), "workspace": str(ws), "backbone": spec.to_dict(),
            "protocol": protocol.to_dict(), "policies": list(policies), "seeds": list(seeds),
            "pools": list(pools), "pool_seed": pool_seed, "classes": classes,
            "label_map": manifest.attrs.get("label_map"),
            "flagged": {**flag_info, "train_rows": int(train_flag.size),
                        "test_rows": int(test_flag.size)},
            "evaluated": {"rows": len(ev), "skipped": eval_skipped},
            "views": {"official": "every evaluated test row",
                      "deduplicated": "official minus views/deduplicated_exclude.csv "
                                      f"({len(dedup_list)} rows)"},
            "view_classes": view_classes,
            "start_weights": start_weights(spec),
            "pool_signatures": {}, "metrics_on": "softmax of the tool's own logits (METHODS "
                                                 "§5.13)",
            "versions": _versions(torch, device), "score_kind": "logit",
            "image_scan": scan_s.params.key(), "runs": {}}
    lookup = {c: i for i, c in enumerate(classes)}
    features, cache_info = None, None
    if "frozen" in policies:
        model, _ = classifier(spec, len(classes), 0)
        features, cache_info = feature_cache(model, scan_s, spec, protocol, device)
        info["feature_cache"] = cache_info
    ext = None
    if external is not None:
        ext = prepare_external(external, base, classes, ws, out, protocol, label_map,
                               workers=workers, progress=progress)
        if "frozen" in policies:  # the same start backbone as the audited rows' features
            cached, info["external_feature_cache"] = feature_cache(
                model, ext["scan"], spec, protocol, device)
            ext["features"] = np.asarray(cached)[ext["rows"]["thumb_index"].to_numpy(np.int64)]
        info["external"] = ext["info"]
        info["views"].update({
            "external": f"every evaluated row of the external corpus ({ext['info']['rows']})",
            "external_deduplicated": "external minus external/views/deduplicated_exclude.csv "
                                     f"({ext['info']['contained']} rows contained in train)"})
    pred_dir = out / "predictions"
    pred_dir.mkdir(exist_ok=True)
    eval_index = ev["thumb_index"].to_numpy(np.int64)

    signatures = {name: pool_signature(by_name[name], m, pool_definition(
        name, removal, flag_info, audit_dir, drop_source, pool_seed,
        manifest.attrs.get("label_map"), classes)) for name in pools}
    info["pool_signatures"] = signatures
    records, summary = [], []
    plan = [(pol, pool, s) for pol in policies for pool in pools for s in seeds]
    # every finished run is checked before anything trains: a stale one is refused up front
    for policy, pool_name, seed in plan:
        rdir = out / "runs" / run_id(backbone, policy, pool_name, seed)
        if (rdir / "run.json").exists():
            same_protocol(json.loads((rdir / "run.json").read_text()), protocol, spec, rdir,
                          signatures[pool_name])
    for k, (policy, pool_name, seed) in enumerate(plan, 1):
        rid = run_id(backbone, policy, pool_name, seed)
        rdir = out / "runs" / rid
        done = rdir / "run.json"
        if done.exists():
            rec = json.loads(done.read_text())
            say(f"[{k}/{len(plan)}] {rid}: finished earlier, reused")
            if on_epoch:
                on_epoch(k, len(plan), rid, protocol.epochs, protocol.epochs, None)
        else:
            rec = _one_run(rid, rdir, spec, policy, pool_name, seed, by_name[pool_name], m,
                           thumb, lookup, classes, protocol, scan_s.thumbnails, eval_index, ev,
                           features, device, out, train_run, RunData, say, k, len(plan),
                           on_epoch, signatures[pool_name])
        if ext is not None:
            rec = evaluate_external(rec, rdir, spec, classes, ext, device)
        else:  # an earlier run's external metrics belong to an external corpus not given now
            rec = {**rec, "metrics": {k: v for k, v in rec["metrics"].items()
                                      if k not in EXTERNAL_VIEWS}}
        shutil.copyfile(rdir / "predictions.parquet", pred_dir / f"{rid}.parquet")
        info["runs"][rid] = {key: rec[key] for key in ("policy", "pool", "seed", "best_epoch",
                                                       "updates", "wall_s", "resumed_from")}
        records += _run_rows(rec, backbone, device)
        summary.append({"run": rid, "policy": policy, "features": features_label(policy, spec),
                        "pool": pool_name, "seed": seed, "train_rows": rec["train_rows"],
                        "best_epoch": rec["best_epoch"], "updates": rec["updates"],
                        "wall_s": rec["wall_s"],
                        **summary_ba(rec["metrics"], VIEWS + (EXTERNAL_VIEWS if ext is not None
                                                              else ()))})
    runs = pd.DataFrame(records, columns=["model", "policy", "pool", "seed", "view",
                                          "device", "metric", "value"])
    write_csv(runs, out / "runs.csv")
    (out / "experiment.json").write_text(json.dumps(_clean(info), indent=2, sort_keys=True))
    return ExperimentResult(out, runs, pd.DataFrame(summary), info)


def same_protocol(rec: dict, protocol: Protocol, spec: BackboneSpec, rdir: Path,
                  signature: dict | None = None) -> None:
    """A finished run is reused only under the same protocol, backbone and training pool
    (:func:`pool_signature`: the pool's rows and labels and the rule that drew them)."""
    if rec.get("protocol") != _clean(protocol.to_dict()) or rec.get("backbone") != _clean(
            spec.to_dict()):
        raise InputError(f"{rdir} was trained under another protocol or backbone; use another "
                         f"--out (or remove that run folder)")
    if signature is not None and (rec.get("pool_signature") or {}).get(
            "sha256") != signature["sha256"]:
        raise InputError(f"{rdir} was trained on another {rec.get('pool')} pool (its removal "
                         f"predicates, pool seed, audit, label map or rows differ); use "
                         f"another --out (or remove that run folder)")


def pool_definition(name, removal, flag_info, audit_dir, drop_source, pool_seed, label_map,
                    classes) -> dict:
    """What a pool's rows depend on: every pool on the label map and the classes; Source-only
    and the pools after it on the dropped source; Removal and its controls on the flagged
    rows (removal predicates, their source, the audit); the seeded controls on the pool
    seed."""
    out = {"label_map": label_map, "classes": list(classes)}
    if name == "Full":
        return out
    out["drop_source"] = drop_source
    if name == "Source-only":
        return out
    out.update({"removal_predicates": list(removal), "flagged_source": flag_info["source"],
                "audit": str(audit_dir) if audit_dir is not None else None})
    if name != "Removal":
        out["pool_seed"] = pool_seed
    return out


def pool_signature(pool, m: pd.DataFrame, definition: dict) -> dict:
    """What a training pool is, as one SHA-256: its rows (path, label, group, in order) and
    the rule that drew them (``definition``: the pool's own parameters, the removal
    predicates and source of the flagged rows, the pool seed, the label map)."""
    import hashlib

    rows = m.loc[np.asarray(pool.rows, dtype=np.int64)]
    cols = [c for c in ("path", "label", "group") if c in rows]
    h = hashlib.sha256(json.dumps(_clean({"pool": pool.name, "definition": pool.definition,
                                          "params": pool.params, **definition}),
                                  sort_keys=True, default=str).encode())
    h.update(pd.util.hash_pandas_object(rows[cols].astype("string").fillna("<NA>"),
                                        index=False).to_numpy().tobytes())
    return {"sha256": h.hexdigest(), "rows": len(rows), "covers":
            "pool rows (path, label, group), pool rule and parameters, removal predicates, "
            "flagged-row source, pool seed, label map"}


def _missing_classes(labels: pd.Series, classes: list[str]) -> dict:
    """Rows of a view and the training classes it has no row of."""
    present = set(labels)
    return {"rows": len(labels), "missing_classes": [c for c in classes
                                                          if c not in present]}


def start_weights(spec: BackboneSpec) -> str:
    """What the backbone starts from, in the words every record uses: a frozen backbone
    without a weights file gives random features."""
    if spec.weights:
        return f"pretrained: {Path(spec.weights).name} (SHA-256 {spec.weights_sha256[:16]}…)"
    return f"random features (no pretrained weights; random initialisation, seed " \
           f"{spec.init_seed})"


def features_label(policy: str, spec: BackboneSpec) -> str:
    """What a run's head is trained on, as the summary prints it: ``random features`` for a
    frozen backbone without pretrained weights."""
    if policy != "frozen":
        return "fine-tuned"
    return "pretrained features" if spec.weights else "random features"


def summary_ba(metrics: dict, views) -> dict:
    """Per view, balanced accuracy, or — where the view lacks a class — ``undefined (no
    CLASS row)`` and the named ``BA over present classes`` beside it; never a bare NaN."""
    out = {}
    for v in views:
        mv = metrics.get(v, {})
        missing = mv.get("missing_classes") or []
        if missing:
            out[f"{v}_ba"] = f"undefined (no {', '.join(missing)} row)"
            out[f"{v}_ba_over_present_classes"] = mv.get("balanced_accuracy_present")
        else:
            out[f"{v}_ba"] = mv.get("balanced_accuracy")
    return out


def _one_run(rid, rdir, spec, policy, pool_name, seed, pool, m, thumb, lookup, classes,
             protocol, images, eval_index, ev, features, device, out, train_run, RunData, say,
             k, total, on_epoch, signature) -> dict:
    rows = np.asarray(pool.rows, dtype=np.int64)
    tix = np.array([thumb.get(r, -1) for r in rows], dtype=np.int64)
    labels = m.loc[rows, "label"].astype("string")
    keep = (tix >= 0) & labels.isin(classes).fillna(False).to_numpy(bool)
    rows, tix, labels = rows[keep], tix[keep], labels[keep]
    y = labels.map(lookup).to_numpy(np.int64)
    groups = m.loc[rows, "group"].to_numpy(dtype=object) if "group" in m else None
    if groups is not None and pd.isna(pd.Series(groups, dtype=object)).all():
        groups = None  # no group known at all
    val, holdout = validation_holdout(y, groups, protocol.val_share, seed)
    data = RunData(images=images, train=tix[~val], val=tix[val], y_train=y[~val],
                   y_val=y[val], evaluate=eval_index, n_classes=len(classes))
    say(f"[{k}/{total}] {rid}: {len(rows)} pool rows ({int((~keep).sum())} left out), "
        f"{int(val.sum())} validation; " + holdout.get("groups", "no groups known"))
    res = train_run(data, spec, policy, protocol, seed, rdir, device=device, features=features,
                    on_epoch=lambda e, n, entry: on_epoch and on_epoch(k, total, rid, e, n,
                                                                       entry),
                    pool_signature=signature["sha256"])
    pred = pd.DataFrame({"path": ev["path"].to_numpy(), "split": ev["split"].to_numpy(),
                         "view": "official"})
    for j, c in enumerate(classes):
        pred[c] = res["logits"][:, j]
    write_predictions(pred, rdir / "predictions.parquet", classes)
    write_csv(pd.DataFrame(res["curve"]), rdir / "curve.csv")
    metrics = score_run(rdir / "predictions.parquet", out, classes)
    y_eval = ev["label"].astype(str).map(lookup).to_numpy(np.int64)
    val_table = pd.DataFrame({"path": m.loc[rows[val], "path"].to_numpy(),
                              "label": labels[val].to_numpy()})
    for j, c in enumerate(classes):
        val_table[c] = res["val_logits"][:, j]
    val_table.to_parquet(rdir / "validation.parquet", index=False)
    transfer = holdout_transfer(y[val], res["val_logits"], y_eval, res["logits"], classes)
    curve = res["curve"]
    later = curve[1:] or curve
    data_share = float(np.mean([c["data_s"] / max(c["data_s"] + c["compute_s"], 1e-12)
                                for c in later]))
    rec = {"run": rid, "backbone": spec.to_dict(), "policy": policy, "pool": pool_name,
           "seed": seed, "pool_rows": int(pool.rows.size), "left_out_rows": int((~keep).sum()),
           "train_rows": int((~val).sum()), "holdout": holdout, "protocol": protocol.to_dict(),
           "best_epoch": res["best_epoch"],
           "best_val_balanced_accuracy": res["best_val_balanced_accuracy"],
           "updates": res["updates"], "wall_s": res["wall_s"],
           "resumed_from": res["resumed_from"], "epochs": len(curve),
           "train_images_per_s": float(np.median([c["train_images_per_s"] for c in later])),
           "inference_images_per_s": res["inference_images_per_s"],
           "data_share": data_share, "device": device, "metrics": metrics,
           "holdout_transfer": transfer, "pool_signature": signature,
           "start_weights": start_weights(spec),
           "selection": "epoch of maximum validation balanced accuracy (earliest on ties)"}
    (rdir / "run.json").write_text(json.dumps(_clean(rec), indent=2, sort_keys=True))
    return rec


def holdout_transfer(y_val, val_logits, y_test, test_logits, classes) -> dict:
    """What the run's validation holdout says about the test view (METHODS §5.3–5.4): the
    temperature fitted on the holdout's NLL and the test ECE before and after it, and the
    Youden threshold fitted on the holdout (one class vs rest, softmax scores) against the
    default 0.5, as test balanced accuracy averaged over the classes assessed."""
    from splitscope.evaluation.calibration import temperature_transfer
    from splitscope.evaluation.metrics import softmax
    from splitscope.evaluation.thresholds import threshold_transfer_multiclass

    out: dict = {"validation_rows": len(y_val), "test_rows": len(y_test)}
    if len(y_val) == 0 or len(np.unique(y_val)) < 2:
        return {**out, "reason": "the validation holdout holds fewer than two classes"}
    t = temperature_transfer(y_val, val_logits, y_test, test_logits, "logit")
    out.update({"temperature": t["temperature"], "ece_before": t["eval_ece_before"],
                "ece_after": t["eval_ece_after"], "ece_worse": t["worse"]})
    table = threshold_transfer_multiclass(y_val, softmax(val_logits), y_test,
                                          softmax(test_logits), classes,
                                          rules=("default", "youden"))
    table = table[table["rule"].notna()]
    if len(table):
        ba = table.pivot(index="class", columns="rule", values="eval_balanced_accuracy")
        out.update({"default_ba": float(ba["default"].mean()),
                    "youden_ba": float(ba["youden"].mean()), "classes_assessed": len(ba)})
    return out


def write_predictions(pred: pd.DataFrame, path: Path, classes: list[str]) -> None:
    """Predictions as Parquet with ``score_kind = logit`` and the class order in the file's
    metadata, by which every reader of the evaluation layer scores them as their softmax
    probabilities (METHODS §5.13)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(pred, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"splitscope"] = json.dumps({"score_kind": "logit", "classes": classes}).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)


def score_run(pred_path: Path, out: Path, classes: list[str], names=VIEWS) -> dict:
    """Metrics of one run's predictions on two views (``names``: every row of
    ``out/truth.csv``, and those minus ``out/views/deduplicated_exclude.csv``), read back as
    ``splitscope metrics`` reads them (the same reader, scoreability check and view
    functions). The logits are the tool's own, so the reader hands over their softmax
    (METHODS §5.13): AUCs are scikit-learn's one-vs-rest AUCs on probabilities; the argmax,
    ECE, Brier score and NLL are those of the logits."""
    from splitscope.evaluation.predictions import read_predictions, read_truth
    from splitscope.evaluation.scoreability import check_scoreability
    from splitscope.evaluation.views import official_view, score_view, view_from_list

    truth = read_truth(out / "truth.csv", classes)
    pred = read_predictions(pred_path, score_kind="logit")
    if not pred.own_logits:
        raise InputError(f"{pred_path}: no splitscope metadata naming its logits and classes; "
                         f"rerun the experiment to rewrite it")
    verdict, aligned = check_scoreability(pred, truth)
    if aligned is None:
        raise InputError(f"{pred_path}: not scoreable: {'; '.join(verdict.reasons)}")
    excluded = read_csv(out / "views" / "deduplicated_exclude.csv")
    whole, dedup = names
    views = [official_view(truth, whole),
             view_from_list(truth, excluded, "exclude", name=dedup) if len(excluded)
             else official_view(truth, dedup)]
    return {v.name: _named_undefined(score_view(truth, aligned, v, pred.score_kind,
                                                equal_source=False)) for v in views}


def _named_undefined(metrics: dict) -> dict:
    """A view's metrics with the classes it lacks named (``missing_classes``): balanced
    accuracy is then undefined (``None`` and its reason, never a bare NaN) and
    ``balanced_accuracy_present``, the mean recall over the classes present, is the named
    target beside it (METHODS §5.13)."""
    support = metrics.get("class_support") or {}
    missing = [c for c, v in support.items() if v == 0]
    out = dict(metrics)
    out["missing_classes"] = missing
    if missing:
        out["balanced_accuracy"] = None
        out["organizer_score"] = None
        out["balanced_accuracy_reason"] = (
            f"balanced accuracy over the {len(support)} classes is undefined: no row of "
            f"{', '.join(missing)} in the view; 'balanced_accuracy_present' is the mean recall "
            f"over the {len(support) - len(missing)} classes present")
    return out


# --------------------------------------------------------------------------------------------
# the external corpus


def prepare_external(external, base, classes: list[str], ws: Path, out: Path,
                     protocol: Protocol, label_map=None, *, workers=None, progress=None
                     ) -> dict:
    """Scan the external corpus (``<workspace>-external``), find its rows contained in the
    audited training split (byte or NCC-nearest counterparts on *external → train*, searched
    on the base-size scans as the audit's external layer does: METHODS §2.9) and write ``out/external``:
    ``truth.csv`` and ``views/deduplicated_exclude.csv``. Returns the scan at the training
    image size, the evaluated rows with their S×S images in row order (read once for every
    run) and what experiment.json records."""
    from splitscope.features.scanning import scan
    from splitscope.manifest.labels import apply_label_map
    from splitscope.relations.duplicates import audit_external

    ext_ws = Path(f"{ws}-external")
    opts = {"workers": workers, "progress": progress}
    ext_base = scan(external, ext_ws, **opts)
    ext_s = ext_base if protocol.image_size == base.params.thumb_size else scan(
        external, ext_ws, thumb_size=protocol.image_size,
        interpolation=protocol.interpolation, **opts)
    for sc in {id(ext_base): ext_base, id(ext_s): ext_s}.values():
        if label_map is not None:  # labels compared with the training classes
            sc.manifest = apply_label_map(sc.manifest, label_map, strict=False)
    folder = out / "external"
    found, _, boundary = audit_external(base, ext_base, external, folder / "containment",
                                        SearchOptions(ssim=False, transforms=0), workers=workers)
    table = found.tables["external/containment"]
    table = table[table["boundary"].astype(str) == boundary.name]
    offset = len(base.manifest)  # the combined scan numbers the external rows after these
    contained = np.unique(table.loc[~table["kept"].to_numpy(bool), "row"]
                          .to_numpy(np.int64)) - offset
    ev, skipped = evaluated_rows(ext_s.rows(), classes, split=None)
    if len(ev) == 0:
        raise InputError(f"external corpus {external}: no row to evaluate (a decoded image "
                         f"and a label among the training classes {classes})")
    (folder / "views").mkdir(parents=True, exist_ok=True)
    write_csv(ev[["path", "label", "split", "source", "group"]].reset_index(drop=True),
              folder / "truth.csv")
    exclude = ev.loc[ev["row"].isin(contained), ["row", "path"]]
    write_csv(exclude, folder / "views" / "deduplicated_exclude.csv")
    fp = pd.util.hash_pandas_object(ev[["path", "label"]].astype(str), index=False)
    signature = f"{int(fp.sum()) & (2**63 - 1):x}-{len(ev)}-{len(exclude)}"
    info = {"release": str(external), "workspace": str(ext_ws), "rows": len(ev),
            "contained": len(exclude), "skipped": skipped, "signature": signature,
            "containment": {"boundary": boundary.name,
                            "rule": "the cleaned external set of METHODS §2.9: external rows "
                                    "without a byte-identical or NCC-nearest ≥ τ counterpart "
                                    "in train",
                            "rows_contained": int(contained.size),
                            "lists": str(folder / "containment")}}
    from splitscope.experiments.training import _ordered

    images = _ordered(ext_s.thumbnails, ev["thumb_index"].to_numpy(np.int64))
    return {"scan": ext_s, "rows": ev, "images": images, "features": None, "folder": folder,
            "info": info}


def selected_logits(rdir: Path, spec: BackboneSpec, n_classes: int, policy: str, *, images,
                    features, device: str) -> np.ndarray:
    """Logits of the run's selected model (``selected.pt``) on new rows: uint8 images in
    order (``finetune``) or their cached backbone features (``frozen``). The weights are read
    only once ``selected.json`` names this run, backbone, policy and class count."""
    from splitscope.experiments.training import _logits, classifier, load_state, read_selected

    torch = require_torch()
    state = read_selected(torch, rdir, {"run": rdir.name, "backbone": spec.to_dict(),
                                        "policy": policy, "n_classes": n_classes})
    model, _ = classifier(spec, n_classes, 0)
    load_state(model, state, rdir / "selected.pt",
               f"train the run again (remove {rdir} and rerun train with the same --out)")
    model.to(device)
    if policy == "frozen":
        return _logits(model, np.asarray(features), device, True)
    return _logits(model, images, device, False)


def evaluate_external(rec: dict, rdir: Path, spec: BackboneSpec, classes: list[str],
                      ext: dict, device: str) -> dict:
    """The run's selected model on the external views, written to
    ``rdir/external_predictions.parquet`` and added to the run record; reused when the run
    record already holds them for the same external rows."""
    path = rdir / "external_predictions.parquet"
    sig = ext["info"]["signature"]
    if (rec.get("external") or {}).get("signature") == sig and path.exists() and all(
            v in rec["metrics"] for v in EXTERNAL_VIEWS):
        return rec
    ev = ext["rows"]
    logits = selected_logits(rdir, spec, len(classes), rec["policy"], images=ext["images"],
                             features=ext["features"], device=device)
    pred = pd.DataFrame({"path": ev["path"].to_numpy(), "split": ev["split"].to_numpy(),
                         "view": "external"})
    for j, c in enumerate(classes):
        pred[c] = logits[:, j]
    write_predictions(pred, path, classes)
    rec = {**rec, "metrics": {**rec["metrics"], **score_run(path, ext["folder"], classes,
                                                             EXTERNAL_VIEWS)},
           "external": {"signature": sig, "rows": len(ev), "release": ext["info"]["release"]}}
    (rdir / "run.json").write_text(json.dumps(_clean(rec), indent=2, sort_keys=True))
    return rec


def _run_rows(rec: dict, backbone: str, device: str) -> list[dict]:
    ident = {"model": backbone, "policy": rec["policy"], "pool": rec["pool"],
             "seed": rec["seed"], "device": device}
    out = []
    for view in VIEWS + EXTERNAL_VIEWS:
        if view not in rec["metrics"]:
            continue
        m = rec["metrics"][view]
        for k in VIEW_METRICS:
            v = m.get(k)  # an undefined metric is None, its reason in run.json
            if v is not None and np.isfinite(v):
                out.append({**ident, "view": view, "metric": k, "value": float(v)})
    values = {"epochs": rec["epochs"], "best_epoch": rec["best_epoch"],
              "optimizer_updates": rec["updates"], "wall_seconds": rec["wall_s"],
              "train_images_per_s": rec["train_images_per_s"],
              "inference_images_per_s": rec["inference_images_per_s"],
              "data_share": rec["data_share"]}
    out += [{**ident, "view": "training", "metric": k, "value": float(values[k])}
            for k in RUN_METRICS]
    transfer = rec.get("holdout_transfer") or {}
    for key, metric in HOLDOUT_METRICS.items():
        if transfer.get(key) is not None:
            out.append({**ident, "view": "official", "metric": metric,
                        "value": float(transfer[key])})
    return out


