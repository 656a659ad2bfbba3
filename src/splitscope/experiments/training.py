"""One training run under the fixed protocol: resumable, deterministic on the CPU.

A run trains a classifier (backbone → linear head) on pool rows, selects the epoch of maximum
validation balanced accuracy and stores logits for every evaluated row. Images are read from
the scan's memory-mapped S×S uint8 array (decoded once per size; never decoded again here).

Resuming: after every epoch the whole state is written to two files, each staged under a
temporary name and renamed: ``checkpoint.pt`` holds tensors only (the weights, the optimizer's
per-parameter tensors, the best weights so far) and ``checkpoint.json`` everything else (which
run it belongs to, epoch, curve, best epoch, the optimizer's parameter groups, the schedule)
with the SHA-256 of ``checkpoint.pt``. The selected model goes the same way to
``selected.pt`` and ``selected.json``. No random-generator state is kept: each epoch seeds its
own generators from ``(seed, epoch)``, so a run killed mid-epoch and resumed from its last
checkpoint repeats the interrupted epoch exactly: the result equals an uninterrupted run on
the CPU.

Reading a run's weights never unpickles an object: the JSON is read first and must name this
run, the tensor file must have the SHA-256 the JSON names, and it is then loaded with
``weights_only=True`` and must hold named tensors alone. Anything else is an
:class:`~splitscope.errors.InputError` saying which file to remove.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from splitscope.errors import InputError
from splitscope.evaluation.metrics import balanced_accuracy
from splitscope.experiments.backbones import BackboneSpec, build_backbone, require_torch
from splitscope.experiments.protocol import Protocol

MEAN, SD = 0.5, 0.25  # normalisation of x / 255 (recorded in the protocol)
_EVAL_BATCH = 256


@dataclass
class RunData:
    """Inputs of one run, as indices into ``images`` (the scan's thumbnail array)."""

    images: np.ndarray  # (n, S, S) uint8, memory-mapped
    train: np.ndarray  # image indices trained on
    val: np.ndarray  # image indices of the validation holdout
    y_train: np.ndarray
    y_val: np.ndarray
    evaluate: np.ndarray  # image indices whose logits are stored
    n_classes: int


def classifier(spec: BackboneSpec, n_classes: int, seed: int, feature_dim_hint=None):
    """Backbone with start weights, plus a linear head initialised from ``seed``; the module
    takes ``(n, 1, S, S)`` normalised images. ``shift``/``scale`` buffers standardise the
    features before the head (identity for ``finetune``, the pool's feature mean/SD for
    ``frozen``)."""
    torch = require_torch()
    nn = torch.nn
    backbone, dim, target = build_backbone(spec)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = backbone
            self.register_buffer("shift", torch.zeros(dim))
            self.register_buffer("scale", torch.ones(dim))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self.head = nn.Linear(dim, n_classes)

        def features(self, x):
            return self.backbone(x)

        def forward(self, x):
            return self.head((self.backbone(x) - self.shift) / self.scale)

    return Classifier(), target


def to_input(torch, batch_u8: np.ndarray):
    """uint8 ``(n, S, S)`` → normalised float ``(n, 1, S, S)``."""
    x = torch.from_numpy(np.ascontiguousarray(batch_u8)).float().unsqueeze(1)
    return (x / 255.0 - MEAN) / SD


def augment(torch, x, gen, flip: bool = True, crop: bool = True):
    """Random horizontal flip (p 0.5) and a random shift of up to S/16 pixels per image
    (reflect padding), drawn from ``gen``; either can be turned off."""
    n, _, s, _ = x.shape
    if flip:
        flipped = torch.rand(n, generator=gen) < 0.5
        x = torch.where(flipped[:, None, None, None], x.flip(-1), x)
    if not crop:
        return x
    pad = max(1, s // 16)
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad), mode="reflect")
    oy = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    ox = torch.randint(0, 2 * pad + 1, (n,), generator=gen)
    ar = torch.arange(s)
    rows = (oy[:, None] + ar)[:, :, None]
    cols = (ox[:, None] + ar)[:, None, :]
    return padded[torch.arange(n)[:, None, None], 0, rows, cols].unsqueeze(1)


def extract_features(model, images: np.ndarray, index: np.ndarray, device="cpu") -> np.ndarray:
    """Backbone features of ``images[index]`` in eval mode, ``(len(index), d)`` float32."""
    torch = require_torch()
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(index), _EVAL_BATCH):
            x = to_input(torch, _ordered(images, index[i:i + _EVAL_BATCH])).to(device)
            out.append(model.features(x).cpu().numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, 0), np.float32)


def _logits(model, inputs, device, head_only: bool) -> np.ndarray:
    torch = require_torch()
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(inputs), _EVAL_BATCH):
            chunk = inputs[i:i + _EVAL_BATCH]
            if head_only:
                x = torch.from_numpy(chunk).to(device)
                out.append(model.head((x - model.shift) / model.scale).cpu().numpy())
            else:
                out.append(model(to_input(torch, chunk).to(device)).cpu().numpy())
    return np.concatenate(out).astype(np.float64) if out else np.zeros((0, 0))


CHECKPOINT_FORMAT = "splitscope training checkpoint"
SELECTED_FORMAT = "splitscope selected model"
_VERSION = 1


def _plain(value):
    """``value`` as it reads back from JSON (tuples become lists), for comparisons."""
    return json.loads(json.dumps(value, sort_keys=True))


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def write_weights(torch, parts: dict, meta: dict, path: Path) -> None:
    """Write ``parts`` (``{part: {name: tensor}}``) to ``path`` and ``meta``, plus the tensor
    file's SHA-256 and part names, to ``path`` with suffix ``.json``. Both are staged under
    temporary names and renamed, the tensors first."""
    from splitscope.records.model import sha256_file

    tag = f".tmp{os.getpid()}"
    tmp = path.with_name(path.name + tag)
    torch.save({part: dict(tensors) for part, tensors in parts.items()}, tmp)
    _fsync(tmp)
    meta_path = path.with_suffix(".json")
    meta_tmp = meta_path.with_name(meta_path.name + tag)
    meta = {**meta, "version": _VERSION,
            "tensors": {"file": path.name, "sha256": sha256_file(tmp), "parts": sorted(parts)}}
    meta_tmp.write_text(json.dumps(meta, indent=1, sort_keys=True))
    _fsync(meta_tmp)
    os.replace(tmp, path)
    os.replace(meta_tmp, meta_path)


def read_metadata(path: Path, kind: str, remedy: str) -> dict:
    """The JSON beside the tensor file ``path``, read before any tensor: it must exist,
    parse and be of ``kind`` (:data:`CHECKPOINT_FORMAT`, :data:`SELECTED_FORMAT`).
    ``remedy`` ends every refusal: what the user does instead."""
    meta_path = path.with_suffix(".json")
    if not meta_path.is_file():
        raise InputError(f"{path} has no {meta_path.name} beside it (a file of an older "
                         f"splitscope, or from elsewhere), and a run's weights are read only "
                         f"with the metadata naming their run; {remedy}")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{meta_path} is not readable JSON ({type(exc).__name__}); "
                         f"{remedy}") from exc
    if not (isinstance(meta, dict) and meta.get("format") == kind
            and meta.get("version") == _VERSION and isinstance(meta.get("tensors"), dict)):
        raise InputError(f"{meta_path} is not the metadata of a {kind} (version {_VERSION}); "
                         f"{remedy}")
    return meta


def read_tensors(torch, path: Path, meta: dict, remedy: str) -> dict:
    """``{part: {name: tensor}}`` of ``path`` once its bytes have the SHA-256 that ``meta``
    names: loaded with ``weights_only=True`` (no object is unpickled) and checked to hold
    named tensors alone, in the parts ``meta`` lists."""
    from splitscope.records.model import sha256_file

    if not path.is_file():
        raise InputError(f"{path} is missing beside {path.with_suffix('.json').name}; {remedy}")
    if sha256_file(path) != meta["tensors"].get("sha256"):
        raise InputError(f"{path} is not the file {path.with_suffix('.json').name} describes "
                         f"(another SHA-256: replaced, damaged or saved half-way); {remedy}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise InputError(f"{path} holds more than tensors ({type(exc).__name__}), and "
                         f"splitscope never unpickles other objects, which could run code; "
                         f"{remedy}") from exc
    ok = isinstance(data, dict) and sorted(data) == meta["tensors"].get("parts") and all(
        isinstance(d, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                    for k, v in d.items()) for d in data.values())
    if not ok:
        raise InputError(f"{path} does not hold the named tensors its metadata lists; {remedy}")
    return data


def read_selected(torch, run_dir: Path, expected: dict) -> dict:
    """The state dict of a run's selected model (``selected.pt``), read once
    ``selected.json`` names the run ``expected`` describes (``run``, ``n_classes`` and
    fields of the run's identity: ``backbone``, ``policy``, ``seed``, ...)."""
    path = run_dir / "selected.pt"
    remedy = (f"use a run folder from a source you trust, or train the run again (remove "
              f"{run_dir} and rerun train with the same --out)")
    meta = read_metadata(path, SELECTED_FORMAT, remedy)
    identity = meta.get("identity") if isinstance(meta.get("identity"), dict) else {}
    found = {**identity, "run": meta.get("run"), "n_classes": meta.get("n_classes")}
    differ = [k for k, v in expected.items() if _plain(found.get(k)) != _plain(v)]
    if differ:
        raise InputError(f"{path} belongs to another run (its {', '.join(differ)} differ from "
                         f"the run record's); {remedy}")
    return read_tensors(torch, path, meta, remedy)["model"]


def load_state(model, state: dict, path: Path, remedy: str) -> None:
    """``model.load_state_dict(state)``, a mismatch being an :class:`InputError`."""
    try:
        model.load_state_dict(state)
    except (RuntimeError, KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path} does not fit the run's model ({type(exc).__name__}: "
                         f"{str(exc)[:200]}); {remedy}") from exc


def _optimizer_parts(torch, sd: dict) -> tuple[dict, dict]:
    """An optimizer's state dict as tensors (``"<param>.<name>"``) and JSON (parameter
    groups, per-parameter values that are not tensors)."""
    tensors, other = {}, {}
    for pid, entry in sd["state"].items():
        for name, v in entry.items():
            if isinstance(v, torch.Tensor):
                tensors[f"{pid}.{name}"] = v
            else:
                other.setdefault(str(pid), {})[name] = v
    return tensors, {"param_groups": sd["param_groups"], "other": other}


def _optimizer_state(meta: dict, tensors: dict, template: dict) -> dict:
    """The state dict :func:`_optimizer_parts` split, with the tuples of ``template``'s
    parameter groups (JSON turned them into lists) restored."""
    state: dict = {}
    for key, v in tensors.items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = v
    for pid, entry in meta["other"].items():
        state.setdefault(int(pid), {}).update(entry)
    groups = [{k: tuple(v) if isinstance(like.get(k), tuple) else v for k, v in g.items()}
              for g, like in zip(meta["param_groups"], template["param_groups"])]
    return {"state": state, "param_groups": groups}


def set_deterministic(torch) -> None:
    """Deterministic kernels (the CPU ones are; CUDA needs the cuBLAS workspace setting)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)


def train_run(data: RunData, spec: BackboneSpec, policy: str, protocol: Protocol, seed: int,
              run_dir: Path, *, device: str = "cpu", features: np.ndarray | None = None,
              on_epoch=None, pool_signature: str | None = None) -> dict:
    """Train, select and evaluate one run; resume from ``run_dir/checkpoint.pt`` if present
    (refused, before any tensor is read, unless ``checkpoint.json`` names this very run).

    Parameters
    ----------
    data : RunData
    policy : {"frozen", "finetune"}
        ``frozen`` needs ``features``: the backbone features of every image index (from the
        frozen-feature cache), ``(len(images), d)``.
    on_epoch : callable, optional
        ``on_epoch(epoch, epochs, entry)`` after each epoch (progress), ``entry`` the epoch's
        line of the curve (``None`` for epochs restored from a checkpoint).
    pool_signature : str, optional
        What the pool is (:func:`splitscope.experiments.retraining.pool_signature`); a
        checkpoint of another pool is refused.

    Returns
    -------
    dict
        ``logits`` (evaluated rows × classes), ``val_logits`` (the selected model's logits of
        the validation holdout), ``curve`` (per epoch: train loss, val BA,
        updates so far, data and compute seconds), ``best_epoch``, ``updates``, ``wall_s``,
        ``resumed_from``.
    """
    torch = require_torch()
    set_deterministic(torch)
    run_dir.mkdir(parents=True, exist_ok=True)
    model, _ = classifier(spec, data.n_classes, seed)
    frozen = policy == "frozen"
    if frozen:
        if features is None:
            raise ValueError("the frozen policy needs the cached backbone features")
        f_train = features[data.train]
        model.shift.copy_(torch.from_numpy(f_train.mean(axis=0)))
        model.scale.copy_(torch.from_numpy(f_train.std(axis=0) + 1e-6))
        for p in model.backbone.parameters():
            p.requires_grad_(False)
        params = list(model.head.parameters())
    else:
        params = list(model.parameters())
    cuda = device == "cuda"
    if (protocol.amp or protocol.channels_last) and not cuda:
        raise InputError("mixed precision and channels-last run on CUDA only: drop --amp and "
                         "--channels-last, or use --device cuda")
    model.to(device)
    if protocol.channels_last:
        model.to(memory_format=torch.channels_last)
    scaler = torch.amp.GradScaler("cuda", enabled=protocol.amp)
    flip, crop = "flip" in protocol.augmentation, "crop" in protocol.augmentation
    n = len(data.train)
    per_epoch = -(-n // protocol.batch_size)
    total = per_epoch * protocol.epochs
    opt = torch.optim.AdamW(params, lr=protocol.lr, weight_decay=protocol.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    y_train = torch.from_numpy(data.y_train.astype(np.int64))
    state = {"epoch": 0, "curve": [], "best_ba": -1.0, "best_epoch": 0, "best": None,
             "updates": 0, "wall_s": 0.0}
    ckpt = run_dir / "checkpoint.pt"
    identity = {"protocol": protocol.to_dict(), "backbone": spec.to_dict(), "policy": policy,
                "seed": seed, "train_rows": int(n), "val_rows": len(data.val),
                "pool_signature": pool_signature}
    resumed_from = 0
    if ckpt.exists():
        remedy = (f"remove {ckpt.name} and {ckpt.with_suffix('.json').name} from {run_dir} to "
                  f"train this run from its first epoch, or use another --out")
        meta = read_metadata(ckpt, CHECKPOINT_FORMAT, remedy)
        if meta.get("identity") != _plain(identity):
            raise InputError(f"{ckpt} belongs to another run (protocol, backbone, policy, "
                             f"seed or training pool differ); {remedy}")
        saved = read_tensors(torch, ckpt, meta, remedy)
        load_state(model, saved["model"], ckpt, remedy)
        try:
            opt.load_state_dict(_optimizer_state(meta["optimizer"], saved["optimizer"],
                                                 opt.state_dict()))
            foreign = set(meta["schedule"]) - set(sched.state_dict())
            missing = set(state) - set(meta["state"]) - {"best"}
            if foreign or missing:
                raise KeyError(sorted(foreign | missing))
            sched.load_state_dict(meta["schedule"])
            state = {**meta["state"], "best": saved.get("best")}
            resumed_from = int(state["epoch"])
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as exc:
            raise InputError(f"{ckpt} does not fit this run's optimizer or schedule "
                             f"({type(exc).__name__}); {remedy}") from exc
    for epoch in range(state["epoch"] + 1, protocol.epochs + 1):
        started = time.perf_counter()
        torch.manual_seed(seed * 100_003 + epoch)
        gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(n, generator=gen).numpy()
        model.train()
        if frozen:
            model.backbone.eval()
        data_s = compute_s = loss_sum = 0.0
        for b in range(per_epoch):
            t0 = time.perf_counter()
            pick = order[b * protocol.batch_size:(b + 1) * protocol.batch_size]
            if frozen:
                x = torch.from_numpy(f_train[pick])
            else:
                idx = data.train[pick]
                sort = np.argsort(idx, kind="stable")
                batch = np.empty((len(idx),) + data.images.shape[1:], np.uint8)
                batch[sort] = data.images[idx[sort]]
                x = augment(torch, to_input(torch, batch), gen, flip, crop)
            x, y = x.to(device, non_blocking=cuda), y_train[pick].to(device, non_blocking=cuda)
            if protocol.channels_last and not frozen:
                x = x.contiguous(memory_format=torch.channels_last)
            t1 = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.float16, enabled=protocol.amp):
                logits = (model.head((x - model.shift) / model.scale) if frozen else model(x))
                loss = torch.nn.functional.cross_entropy(logits.float(), y)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            sched.step()
            if cuda:
                torch.cuda.synchronize()
            compute_s += time.perf_counter() - t1
            data_s += t1 - t0
            loss_sum += float(loss.detach()) * len(pick)
            state["updates"] += 1
        t2 = time.perf_counter()
        val_logits = (_logits(model, features[data.val], device, True) if frozen else
                      _logits(model, _ordered(data.images, data.val), device, False))
        ba = balanced_accuracy(data.y_val, val_logits.argmax(axis=1), data.n_classes)
        eval_s = time.perf_counter() - t2
        state["curve"].append({"epoch": epoch, "train_loss": loss_sum / n,
                               "val_balanced_accuracy": float(ba),
                               "updates": state["updates"], "lr": float(sched.get_last_lr()[0]),
                               "data_s": data_s, "compute_s": compute_s, "eval_s": eval_s,
                               "train_images_per_s": n / max(data_s + compute_s, 1e-9)})
        if np.isfinite(ba) and ba > state["best_ba"]:
            state["best_ba"], state["best_epoch"] = float(ba), epoch
            state["best"] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        state["epoch"] = epoch
        state["wall_s"] += time.perf_counter() - started
        opt_tensors, opt_meta = _optimizer_parts(torch, opt.state_dict())
        parts = {"model": model.state_dict(), "optimizer": opt_tensors}
        if state["best"] is not None:
            parts["best"] = state["best"]
        write_weights(torch, parts, {"format": CHECKPOINT_FORMAT, "identity": identity,
                                     "state": {k: v for k, v in state.items() if k != "best"},
                                     "optimizer": opt_meta, "schedule": sched.state_dict()},
                      ckpt)
        if on_epoch:
            on_epoch(epoch, protocol.epochs, state["curve"][-1])
    if state["best"] is not None:
        model.load_state_dict(state["best"])
    write_weights(torch, {"model": model.state_dict()},
                  {"format": SELECTED_FORMAT, "run": run_dir.name, "identity": identity,
                   "n_classes": data.n_classes, "best_epoch": state["best_epoch"]},
                  run_dir / "selected.pt")
    t3 = time.perf_counter()
    logits = (_logits(model, features[data.evaluate], device, True) if frozen else
              _logits(model, _ordered(data.images, data.evaluate), device, False))
    infer_s = time.perf_counter() - t3
    val_logits = (_logits(model, features[data.val], device, True) if frozen else
                  _logits(model, _ordered(data.images, data.val), device, False))
    return {"logits": logits, "val_logits": val_logits, "curve": state["curve"],
            "best_epoch": state["best_epoch"],
            "best_val_balanced_accuracy": state["best_ba"], "updates": state["updates"],
            "wall_s": state["wall_s"], "resumed_from": resumed_from,
            "inference_images_per_s": len(data.evaluate) / max(infer_s, 1e-9)}


def _ordered(images: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``images[index]`` read from the memory map in ascending order, returned in ``index``
    order."""
    sort = np.argsort(index, kind="stable")
    out = np.empty((len(index),) + images.shape[1:], np.uint8)
    out[sort] = images[index[sort]]
    return out
