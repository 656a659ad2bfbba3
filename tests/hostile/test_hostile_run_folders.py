"""A run folder from elsewhere (say, downloaded with a paper's artifacts) and backbone names
that would reach the network.

Weights files of a run are read as tensors only, after the JSON beside them has said which
run they belong to; an object that unpickling would call is never called. A backbone name
that a library would resolve online is refused before anything is built, and every accepted
form trains, embeds and explains with every network connection failing. A refusal is one
sentence and exit 2.
"""

from __future__ import annotations

import errno
import hashlib
import json
import pathlib
import pickle
import shutil
import socket
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
from experiment_helpers import make_external, make_release

from splitscope.cli import main

# torch notes the protocol of a planted bare pickle while refusing it
pytestmark = pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")

RID = "small-cnn__finetune__Full__seed0"
SMALL = ["--image-size", "24", "--workers", "1", "--device", "cpu"]
ONE_RUN = ["--epochs", "1", "--batch-size", "16", "--policy", "finetune", "--seeds", "0",
           "--pools", "Full"]


class _Touch:
    """Unpickled, this object creates ``path``: the trace of code run from a weights file."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __reduce__(self):
        return (pathlib.Path.touch, (self.path,))


def _plant(path: Path, marker: Path, kind: str) -> None:
    """Overwrite ``path`` with a file whose unpickling creates ``marker``: a bare pickle, or
    a ``torch.save`` archive holding the object where the weights were."""
    if kind == "pickle":
        path.write_bytes(pickle.dumps(_Touch(marker)))
    else:
        torch.save({"model": _Touch(marker)}, path)


def _forge_metadata(pt: Path) -> None:
    """What an attacker who also edits the JSON does: make it describe the planted file."""
    meta_path = pt.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["tensors"]["sha256"] = hashlib.sha256(pt.read_bytes()).hexdigest()
    meta_path.write_text(json.dumps(meta))


@pytest.fixture()
def torch_loads(monkeypatch):
    """Every ``torch.load`` call's keyword arguments (the calls still happen)."""
    calls = []
    real = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    return calls


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A release, its workspace and a finished one-run experiment (small CNN, one epoch)."""
    base = tmp_path_factory.mktemp("runfolders")
    release = make_release(base / "release")
    ws, out = base / "ws", base / "out"
    assert main(["train", str(release), "--out", str(out), "-w", str(ws), *SMALL, *ONE_RUN,
                 "--json"]) == 0
    return release, ws, out


def _copy(finished, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(finished[2], out)
    return out


def _train(finished, out: Path, *extra: str) -> int:
    release, ws, _ = finished
    return main(["train", str(release), "--out", str(out), "-w", str(ws), *SMALL, *ONE_RUN,
                 *extra, "--json"])


# --------------------------------------------------------------------------------------------
# pickles planted in a run folder


@pytest.mark.parametrize("forged", [False, True], ids=["metadata-untouched", "metadata-forged"])
@pytest.mark.parametrize("kind", ["pickle", "torch-archive"])
def test_explain_runs_no_code_from_a_planted_selected_pt(finished, tmp_path, capsys,
                                                         torch_loads, kind, forged):
    run = _copy(finished, tmp_path) / "runs" / RID
    marker = tmp_path / "marker"
    _plant(run / "selected.pt", marker, kind)
    if forged:
        _forge_metadata(run / "selected.pt")
    assert main(["explain", str(run), "--resamples", "0"]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "selected.pt" in err and "Traceback" not in err and "weights_only" not in err
    assert all(call.get("weights_only") is True for call in torch_loads)
    assert bool(torch_loads) == forged  # an unforged file fails its checksum, unopened


@pytest.mark.parametrize("forged", [False, True], ids=["metadata-untouched", "metadata-forged"])
@pytest.mark.parametrize("kind", ["pickle", "torch-archive"])
def test_resume_runs_no_code_from_a_planted_checkpoint_pt(finished, tmp_path, capsys,
                                                          torch_loads, kind, forged):
    out = _copy(finished, tmp_path)
    run = out / "runs" / RID
    (run / "run.json").unlink()  # the run is unfinished: train resumes it from checkpoint.pt
    marker = tmp_path / "marker"
    _plant(run / "checkpoint.pt", marker, kind)
    if forged:
        _forge_metadata(run / "checkpoint.pt")
    assert _train(finished, out) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "checkpoint.pt" in err and "remove" in err and "weights_only" not in err
    assert all(call.get("weights_only") is True for call in torch_loads)


@pytest.mark.parametrize("forged", [False, True], ids=["metadata-untouched", "metadata-forged"])
def test_reusing_a_finished_run_runs_no_code_from_a_planted_selected_pt(finished, tmp_path,
                                                                        capsys, forged):
    """A finished run is reused, and its selected.pt read again to score an external
    corpus."""
    out = _copy(finished, tmp_path)
    run = out / "runs" / RID
    marker = tmp_path / "marker"
    _plant(run / "selected.pt", marker, "torch-archive")
    if forged:
        _forge_metadata(run / "selected.pt")
    external = make_external(tmp_path / "external", finished[0])
    assert _train(finished, out, "--external", str(external)) == 2
    assert not marker.exists()
    assert "selected.pt" in capsys.readouterr().err


def _drop(path: Path) -> None:
    path.unlink()


def _garble(path: Path) -> None:
    path.write_text("{not json")


def _other_seed(path: Path) -> None:
    meta = json.loads(path.read_text())
    meta["identity"]["seed"] += 1
    path.write_text(json.dumps(meta))


FOREIGN = {"no metadata (an older or foreign file)": _drop, "garbled metadata": _garble,
           "metadata of another run": _other_seed}


@pytest.mark.parametrize("damage", sorted(FOREIGN))
def test_a_foreign_checkpoint_is_refused_before_any_tensor_is_read(finished, tmp_path, capsys,
                                                                   torch_loads, damage):
    out = _copy(finished, tmp_path)
    run = out / "runs" / RID
    (run / "run.json").unlink()
    FOREIGN[damage](run / "checkpoint.json")
    assert _train(finished, out) == 2
    err = capsys.readouterr().err
    assert "checkpoint" in err and "Traceback" not in err
    assert torch_loads == []


@pytest.mark.parametrize("damage", sorted(FOREIGN))
def test_explain_refuses_a_foreign_selected_pt_before_any_tensor_is_read(finished, tmp_path,
                                                                         capsys, torch_loads,
                                                                         damage):
    run = _copy(finished, tmp_path) / "runs" / RID
    FOREIGN[damage](run / "selected.json")
    assert main(["explain", str(run), "--resamples", "0"]) == 2
    assert "selected" in capsys.readouterr().err
    assert torch_loads == []


def test_explain_reads_a_genuine_run_folder_with_tensors_only(finished, tmp_path, torch_loads):
    run = _copy(finished, tmp_path) / "runs" / RID
    assert main(["explain", str(run), "--resamples", "0"]) == 0
    assert torch_loads and all(call.get("weights_only") is True for call in torch_loads)


def test_weights_that_need_unpickling_are_refused_with_what_to_do(finished, tmp_path, capsys):
    release, ws, _ = finished
    marker, evil = tmp_path / "marker", tmp_path / "evil.pt"
    _plant(evil, marker, "torch-archive")
    assert main(["embed", str(release), "--out", str(tmp_path / "e.parquet"), "-w", str(ws),
                 "--weights", str(evil), *SMALL]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "weights_only" not in err and "evil.pt" in err
    assert "state dict" in err and "safetensors" in err


# --------------------------------------------------------------------------------------------
# no network


@pytest.fixture()
def no_network(monkeypatch):
    """Every attempt to reach another machine fails (and is recorded); local sockets work."""
    attempts = []
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def refuse(address):
        attempts.append(address)
        return OSError(errno.ENETUNREACH, f"network use in an offline test: {address}")

    def blocked_connect(self, address):
        if self.family == getattr(socket, "AF_UNIX", None):
            return connect(self, address)
        raise refuse(address)

    def blocked_connect_ex(self, address):
        if self.family == getattr(socket, "AF_UNIX", None):
            return connect_ex(self, address)
        refuse(address)
        return errno.ENETUNREACH

    def blocked_create_connection(address, *args, **kwargs):
        raise refuse(address)

    def blocked_getaddrinfo(host, *args, **kwargs):
        attempts.append(host)
        raise socket.gaierror(socket.EAI_NONAME, f"name lookup in an offline test: {host}")

    monkeypatch.setattr(socket.socket, "connect", blocked_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", blocked_connect_ex)
    monkeypatch.setattr(socket, "create_connection", blocked_create_connection)
    monkeypatch.setattr(socket, "getaddrinfo", blocked_getaddrinfo)
    return attempts


def _local_weights(name: str, folder: Path) -> Path:
    """Random weights of the architecture behind ``name``, saved as a user would supply them
    (a plain state dict, or .safetensors)."""
    if name == "small-cnn":
        from splitscope.experiments.backbones import small_cnn

        path = folder / "small.pt"
        torch.save(small_cnn()[0].state_dict(), path)
    elif name.startswith("tv:"):
        tv = pytest.importorskip("torchvision")
        path = folder / "resnet18-local.pt"
        torch.save(tv.models.resnet18(weights=None).state_dict(), path)
    else:
        timm = pytest.importorskip("timm")
        from safetensors.torch import save_file

        path = folder / "model.safetensors"
        save_file(timm.create_model("resnet18", pretrained=False).state_dict(), str(path))
    return path


ACCEPTED = [("small-cnn", False), ("small-cnn", True), ("tv:resnet18", False),
            ("tv:resnet18:IMAGENET1K_V1", True), ("timm:resnet18", False),
            ("timm:resnet18.a1_in1k", True)]


@pytest.mark.slow
@pytest.mark.parametrize("name, with_weights", ACCEPTED,
                         ids=[f"{n}{'+weights' if w else ''}" for n, w in ACCEPTED])
def test_every_accepted_backbone_embeds_trains_and_explains_offline(finished, tmp_path, capsys,
                                                                    no_network, name,
                                                                    with_weights):
    if name.startswith("tv:"):
        pytest.importorskip("torchvision")
    if name.startswith("timm:"):
        pytest.importorskip("timm")
    release, ws, _ = finished
    weights = ["--weights", str(_local_weights(name, tmp_path))] if with_weights else []
    common = ["-w", str(ws), "--backbone", name, *weights, *SMALL]
    assert main(["embed", str(release), "--out", str(tmp_path / "e.parquet"), *common]) == 0
    out = tmp_path / "out"
    assert main(["train", str(release), "--out", str(out), *common, "--epochs", "1",
                 "--policy", "frozen", "--seeds", "0", "--pools", "Full", "--json"]) == 0
    run = next((out / "runs").iterdir())
    assert main(["explain", str(run), "--resamples", "0"]) == 0
    assert no_network == []
    assert "Traceback" not in capsys.readouterr().err


ONLINE = ["timm:hf-hub:timm/resnet18", "timm:hf_hub:timm/resnet18", "timm:HF-HUB:timm/resnet18",
          "hf-hub:timm/resnet18", "timm:local-dir:/tmp/resnet18", "timm:timm/resnet18",
          "tv:https://example.org/resnet18.pth", "https://example.org/resnet18.pth",
          "s3://bucket/resnet18.pth", "file:///tmp/resnet18.pth",
          "tv:resnet18:https://example.org/resnet18.pth"]


@pytest.mark.parametrize("verb", ["embed", "train"])
@pytest.mark.parametrize("name", ONLINE)
def test_a_backbone_resolved_online_exits_2_before_anything_runs(finished, tmp_path, capsys,
                                                                 no_network, name, verb):
    release, ws, _ = finished
    out = tmp_path / ("e.parquet" if verb == "embed" else "out")
    assert main([verb, str(release), "--out", str(out), "-w", str(ws), "--backbone", name,
                 *SMALL]) == 2
    err = capsys.readouterr().err
    assert name in err and "--weights" in err and "Traceback" not in err
    assert not out.exists() and no_network == []


def test_a_backbone_resolved_online_with_local_weights_is_still_refused(finished, tmp_path,
                                                                        capsys, no_network):
    pytest.importorskip("timm")
    release, ws, _ = finished
    weights = _local_weights("timm:resnet18", tmp_path)
    assert main(["embed", str(release), "--out", str(tmp_path / "e.parquet"), "-w", str(ws),
                 "--backbone", "timm:hf-hub:timm/resnet18.a1_in1k", "--weights", str(weights),
                 *SMALL]) == 2
    assert "hf-hub" in capsys.readouterr().err and no_network == []


def test_explain_refuses_a_run_record_naming_an_online_backbone(finished, tmp_path, capsys,
                                                                no_network):
    run = _copy(finished, tmp_path) / "runs" / RID
    rec = json.loads((run / "run.json").read_text())
    rec["backbone"]["name"] = "timm:hf-hub:timm/resnet18"
    (run / "run.json").write_text(json.dumps(rec))
    assert main(["explain", str(run), "--resamples", "0"]) == 2
    assert "hf-hub" in capsys.readouterr().err and no_network == []
