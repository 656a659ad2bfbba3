"""One backbone loader for training, embeddings and Grad-CAM.

A backbone is a feature extractor (images ``(n, 1, S, S)`` float → features ``(n, d)``) plus
the name of its last convolutional block (the Grad-CAM target). Names:

- ``small-cnn``: defined here, four conv–BN–ReLU blocks with max pooling and global average
  pooling (32, 64, 128, 128 channels), trained from scratch;
- ``tv:NAME`` (torchvision) or ``timm:NAME`` architectures, built by name with random weights
  when those packages import;
- ``NAME:TAG`` or ``timm:NAME.TAG`` asks for published pretrained weights. splitscope never
  downloads: without ``--weights PATH`` such a name is an input error naming the file to
  supply.

A name the libraries would resolve online (``hf-hub:``/``hf_hub:`` repositories, ``local-dir:``
folders, URLs of any scheme, repository paths) is refused, weights or not: only names of the
libraries' own registries are built, and they are built with the Hugging Face Hub switched to
offline mode and with no pretrained weights requested, so building a model opens no connection.

Weights come only from a local file (a state dict, or a checkpoint holding one under
``state_dict``/``model``) read as tensors alone (``.safetensors``, or ``torch.load`` with
``weights_only=True``), or from random initialisation with a recorded seed.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from splitscope.errors import InputError

TORCH_HINT = ("this verb needs PyTorch: install a torch build first (a CPU build is enough: "
              "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu; "
              "a bare 'pip install torch' may fetch several GB of CUDA wheels), then "
              "pip install \".[torch]\" from the splitscope folder")

# published checkpoints of common pretrained names: the file a user supplies with --weights
KNOWN_CHECKPOINTS = {
    "resnet18:IMAGENET1K_V1": "resnet18-f37072fd.pth",
    "resnet50:IMAGENET1K_V1": "resnet50-0676ba61.pth",
    "resnet50:IMAGENET1K_V2": "resnet50-11ad3fa6.pth",
    "densenet121:IMAGENET1K_V1": "densenet121-a639ec97.pth",
    "efficientnet_b0:IMAGENET1K_V1": "efficientnet_b0_rwightman-7f5810bc.pth",
    "timm:resnet18.a1_in1k": "resnet18.a1_in1k/model.safetensors",
}


def require_torch():
    """The ``torch`` module, or an :class:`InputError` with the install hint."""
    try:
        import torch
    except ImportError as exc:
        raise InputError(TORCH_HINT) from exc
    if torch is None:  # hidden on purpose (sys.modules['torch'] = None)
        raise InputError(TORCH_HINT)
    return torch


@dataclass(frozen=True)
class BackboneSpec:
    """What a backbone is: its name, where its start weights come from, and the channels it
    takes (1 for ``small-cnn``; 3 for the library architectures, grey replicated)."""

    name: str
    weights: str | None  # local file, or None for random init
    weights_sha256: str | None
    init_seed: int
    in_channels: int

    def key(self) -> str:
        """Cache key part: name and weights identity."""
        w = self.weights_sha256[:16] if self.weights_sha256 else f"init{self.init_seed}"
        return f"{_slug(self.name)}-{w}"

    def to_dict(self) -> dict:
        return {"name": self.name, "weights": self.weights, "weights_sha256":
                self.weights_sha256, "init_seed": self.init_seed,
                "in_channels": self.in_channels,
                "init": "local file" if self.weights else f"random, seed {self.init_seed}"}


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def needs_download(name: str) -> bool:
    """True when ``name`` asks for published pretrained weights (a ``:TAG`` or a timm
    ``.tag``)."""
    if name.startswith("timm:"):
        return "." in name[5:]
    name = name.removeprefix("tv:")
    return ":" in name


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_HUB = re.compile(r"(?i)^(?:timm:)?hf[-_]hub:")


def online_source(name: str) -> str | None:
    """What ``name`` would be fetched from or resolved against outside the libraries' own
    registries (a URL, the Hugging Face Hub, a repository or folder path), or ``None`` for a
    plain registry name. timm resolves ``hf-hub:``/``hf_hub:``/``local-dir:`` prefixes and
    names with ``/``; a ``://`` names a URL whatever comes before it."""
    if _URL.search(name):
        return "a URL"
    if _HUB.match(name):
        return "a Hugging Face Hub repository"
    if name.startswith("timm:"):
        rest = name[5:]
        if any(c in rest for c in ":/\\"):
            return "a model source outside timm's registry (a Hub repository or a folder)"
    elif name.startswith("tv:"):
        rest = name[3:]
        if rest.count(":") > 1 or any(c in rest for c in "/\\"):
            return "a model source outside torchvision's registry"
    return None


def refuse_online(name: str) -> None:
    """:class:`InputError` when ``name`` would be resolved online (:func:`online_source`),
    saying what to use instead: the architecture's registry name with local weights."""
    where = online_source(name)
    if where is None:
        return
    repo = re.sub(r"(?i)^(?:timm:)?(?:hf[-_]hub|local-dir):", "", name)
    arch = repo.rstrip("/").rsplit("/", 1)[-1] if _HUB.match(name) else ""
    use = f"timm:{arch}" if arch and not _URL.search(name) else "tv:NAME or timm:NAME"
    raise InputError(f"backbone {name!r} names {where}; splitscope builds registry "
                     f"architectures only and never downloads: name the architecture ({use}) "
                     f"and pass its weights, fetched beforehand, as a local file with "
                     f"--weights PATH")


def resolve_backbone(name: str, weights: str | Path | None = None, init_seed: int = 0
                     ) -> BackboneSpec:
    """Check a backbone name and its weights source before anything is built.

    Raises
    ------
    InputError
        A name resolved online (:func:`refuse_online`); unknown name; a name that needs
        pretrained weights without ``weights`` (naming the file to supply); a weights file
        that does not exist; torchvision/timm not importable.
    """
    refuse_online(name)
    if needs_download(name) and weights is None:
        file = KNOWN_CHECKPOINTS.get(name.removeprefix("tv:"))
        what = f"the file {file}" if file else f"the checkpoint file of {name}"
        raise InputError(f"backbone {name!r} needs pretrained weights, and splitscope never "
                         f"downloads: supply {what} with --weights PATH (or drop the tag for "
                         f"random initialisation)")
    if weights is not None:
        p = Path(weights)
        if not p.is_file():
            raise InputError(f"weights file not found: {p}")
        sha = _sha256(p)
    else:
        sha = None
    if name == "small-cnn":
        channels = 1
    elif name.startswith(("tv:", "timm:")):
        _library(name)
        channels = 3
    else:
        raise InputError(f"unknown backbone {name!r}: use small-cnn, tv:NAME (torchvision) or "
                         f"timm:NAME")
    return BackboneSpec(name, str(weights) if weights is not None else None, sha,
                        int(init_seed), channels)


def _library(name: str):
    lib = "torchvision" if name.startswith("tv:") else "timm"
    try:
        return __import__(lib)
    except Exception as exc:  # torchvision from PyPI may fail beside a local torch build
        raise InputError(f"backbone {name!r} needs {lib}, which does not import here "
                         f"({type(exc).__name__}: {exc}); pip install {lib}") from exc


def small_cnn(in_channels: int = 1, widths=(32, 64, 128, 128)):
    """The package's own small CNN: ``len(widths)`` blocks conv3×3–BN–ReLU–maxpool2 (the last
    without pooling), then global average pooling; ``features`` names the blocks."""
    torch = require_torch()
    nn = torch.nn
    layers, c = [], in_channels
    for i, w in enumerate(widths):
        layers += [nn.Conv2d(c, w, 3, padding=1, bias=False), nn.BatchNorm2d(w),
                   nn.ReLU(inplace=False)]
        if i < len(widths) - 1:
            layers.append(nn.MaxPool2d(2))
        c = w
    return nn.Sequential(nn.Sequential(*layers), nn.AdaptiveAvgPool2d(1), nn.Flatten()), c


_OFFLINE_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


@contextmanager
def offline():
    """The Hugging Face Hub in offline mode for the duration: its environment switches set,
    and ``huggingface_hub``'s own flag (read once at its import) set where it is already
    imported; all restored afterwards."""
    before = {k: os.environ.get(k) for k in _OFFLINE_ENV}
    os.environ.update({k: "1" for k in _OFFLINE_ENV})
    hub = sys.modules.get("huggingface_hub.constants")
    flag = getattr(hub, "HF_HUB_OFFLINE", None)
    if hub is not None:
        hub.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if hub is not None:
            hub.HF_HUB_OFFLINE = flag


def build_backbone(spec: BackboneSpec):
    """``(module, feature_dim, target_layer)``: the feature extractor with its start weights
    and the module Grad-CAM hooks (the last convolutional block). Library architectures are
    built by registry name with no pretrained weights requested and the Hub offline; a name
    resolved online is refused here too (a spec may come from a run record on disk)."""
    torch = require_torch()
    refuse_online(spec.name)
    with torch.random.fork_rng(devices=[]), offline():
        torch.manual_seed(spec.init_seed)
        if spec.name == "small-cnn":
            module, dim = small_cnn(spec.in_channels)
            target = module[0]
        elif spec.name.startswith("tv:"):
            tv = _library(spec.name)
            arch = spec.name[3:].split(":")[0]
            _known(spec.name, arch, arch in tv.models.list_models(), "torchvision.models."
                   "list_models()")
            model = tv.models.get_model(arch, weights=None)
            module, dim, target = _headless(torch, model)
        else:
            timm = _library(spec.name)
            arch = spec.name[5:].split(".")[0]
            _known(spec.name, arch, timm.is_model(arch), "timm.list_models()")
            model = timm.create_model(arch, pretrained=False, num_classes=0)
            dim = int(model.num_features)
            module, target = model, _last_conv(torch, model)
    if spec.weights:
        _load_weights(torch, module, Path(spec.weights))
    if spec.in_channels == 3:
        module = torch.nn.Sequential(_RepeatGrey(torch), module)
    return module, int(dim), target


def _known(name: str, arch: str, known: bool, listing: str) -> None:
    """Refuse an architecture the library does not register, before anything is built."""
    if not known:
        raise InputError(f"backbone {name!r}: the library has no architecture {arch!r} "
                         f"(its names: {listing})")


def _RepeatGrey(torch):
    class RepeatGrey(torch.nn.Module):
        def forward(self, x):
            return x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x
    return RepeatGrey()


def _headless(torch, model):
    """A torchvision classifier with its last Linear replaced by identity."""
    for attr in ("fc", "classifier", "head", "heads"):
        head = getattr(model, attr, None)
        if head is None:
            continue
        linear = head if isinstance(head, torch.nn.Linear) else next(
            (m for m in reversed(list(head.modules())) if isinstance(m, torch.nn.Linear)), None)
        if linear is not None:
            setattr(model, attr, torch.nn.Identity())
            return model, linear.in_features, _last_conv(torch, model)
    raise InputError(f"cannot find the classification head of {type(model).__name__}")


def _last_conv(torch, model):
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    if not convs:
        raise InputError(f"{type(model).__name__} has no convolution for Grad-CAM")
    return convs[-1]


def _load_weights(torch, module, path: Path) -> None:
    """Load a local state dict into ``module`` (the headless backbone). Accepted: a plain
    state dict (``.pt``/``.pth`` or ``.safetensors``), a checkpoint holding one under
    ``state_dict``/``model``/``model_state``, and a run's ``selected.pt`` (its
    ``backbone.`` tensors). Every tensor of the backbone must be found; tensors it has no
    place for (a classification head) are left out."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        try:
            state = load_file(str(path))
        except Exception as exc:
            raise InputError(f"cannot read weights {path} as a .safetensors file "
                             f"({type(exc).__name__}: {exc}); supply the file again or "
                             f"another copy") from exc
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise InputError(
                f"cannot read weights {path} as tensors alone ({type(exc).__name__}): it "
                f"holds other Python objects, which splitscope never unpickles (they could "
                f"run code), or it is no weights file; save a plain state dict "
                f"(torch.save(model.state_dict(), PATH)) or convert it to .safetensors "
                f"(safetensors.torch.save_file), and pass that file with --weights") from exc
    for key in ("state_dict", "model", "model_state"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict):
        raise InputError(f"weights {path} hold no state dict")
    state = {k.removeprefix("module."): v for k, v in state.items()}
    own = module.state_dict()
    state = _backbone_part(state, own)
    usable = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    needed = [k for k in own if not k.endswith("num_batches_tracked")]
    missing = [k for k in needed if k not in usable]
    if len(missing) == len(needed):
        raise InputError(f"weights {path}: no tensor matches the backbone's parameters "
                         f"(first keys {list(state)[:3]})")
    if missing:
        raise InputError(f"weights {path}: {len(missing)} of the backbone's {len(needed)} "
                         f"tensors are missing or of another shape (first: {missing[:3]}); "
                         f"supply the checkpoint of this architecture")
    module.load_state_dict(usable, strict=False)


# torchvision's DenseNet checkpoints name layers norm.1 / conv.2; the modules are norm1 / conv2
_DENSE_OLD = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|"
                        r"running_mean|running_var))$")


def _backbone_part(state: dict, own: dict) -> dict:
    """The tensors of ``state`` under the backbone's own names: a run's classifier
    (``backbone.`` prefix; ``backbone.1.`` behind the grey-to-RGB step of the library
    architectures) and DenseNet's older layer names are mapped; other keys are kept."""
    if any(k.startswith("backbone.") for k in state):
        inner = {k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")}
        if not any(k in own for k in inner) and all(k.startswith("1.") for k in inner):
            inner = {k[2:]: v for k, v in inner.items()}
        state = inner
    if any(_DENSE_OLD.match(k) for k in state):
        state = {(_DENSE_OLD.sub(r"\1\2", k)): v for k, v in state.items()}
    return state
