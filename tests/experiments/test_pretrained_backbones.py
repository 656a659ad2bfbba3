"""Library backbones from local weights only: torchvision and timm models built here, their
weights saved (.pt, .safetensors) and loaded back; a run's selected.pt as start weights and
for embeddings; a ResNet-18 run from a local file on the CPU."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision")

from experiment_helpers import LEAKS

from splitscope.cli import main
from splitscope.errors import InputError
from splitscope.experiments.backbones import build_backbone, resolve_backbone
from splitscope.experiments.protocol import Protocol
from splitscope.experiments.retraining import train_experiment


def _same(module, state: dict) -> bool:
    return all(torch.equal(v, state[k]) for k, v in module.state_dict().items())


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["resnet18", "densenet121"])
@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_a_torchvision_model_saved_here_loads_back(arch, suffix, tmp_path):
    torch.manual_seed(11)
    model = tv.models.get_model(arch, weights=None)
    state = model.state_dict()
    path = tmp_path / f"{arch}{suffix}"
    if suffix == ".pt":
        torch.save(state, path)
    else:
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    spec = resolve_backbone(f"tv:{arch}", path)
    assert spec.weights_sha256 and len(spec.weights_sha256) == 64
    module, dim, _ = build_backbone(spec)
    assert _same(module[1], state)  # behind the grey-to-RGB step; the head is left out
    assert dim == {"resnet18": 512, "densenet121": 1024}[arch]
    assert not _same(build_backbone(resolve_backbone(f"tv:{arch}"))[0][1], state)


@pytest.mark.slow
def test_densenet_checkpoints_with_the_older_layer_names_load(tmp_path):
    torch.manual_seed(2)
    state = tv.models.densenet121(weights=None).state_dict()
    old = {k.replace("norm1", "norm.1").replace("conv1", "conv.1").replace("norm2", "norm.2")
           .replace("conv2", "conv.2") if "denselayer" in k else k: v for k, v in state.items()}
    assert old != state
    torch.save(old, tmp_path / "old.pth")
    module, _, _ = build_backbone(resolve_backbone("tv:densenet121", tmp_path / "old.pth"))
    assert _same(module[1], state)


def test_weights_of_another_architecture_are_refused(tmp_path):
    torch.save(tv.models.resnet18(weights=None).state_dict(), tmp_path / "r18.pt")
    with pytest.raises(InputError, match="tensors are missing or of another shape"):
        build_backbone(resolve_backbone("tv:resnet34", tmp_path / "r18.pt"))


@pytest.mark.slow
def test_a_timm_model_saved_here_loads_back(tmp_path):
    timm = pytest.importorskip("timm")
    torch.manual_seed(5)
    model = timm.create_model("resnet10t", pretrained=False)
    from safetensors.torch import save_file
    save_file(model.state_dict(), str(tmp_path / "model.safetensors"))
    module, dim, _ = build_backbone(resolve_backbone("timm:resnet10t",
                                                     tmp_path / "model.safetensors"))
    assert _same(module[1], {k: v for k, v in model.state_dict().items()})
    assert module(torch.zeros(2, 1, 32, 32)).shape == (2, dim)


@pytest.mark.slow
def test_a_resnet18_run_from_a_local_weights_file_on_the_cpu(tiny_release, tmp_path):
    torch.manual_seed(0)
    torch.save(tv.models.resnet18(weights=None).state_dict(), tmp_path / "resnet18.pt")
    res = train_experiment(tiny_release, tmp_path / "out", backbone="tv:resnet18",
                           weights=tmp_path / "resnet18.pt", policies=("frozen",),
                           seeds=(0,), pools=("Full",), workers=1, device="cpu",
                           protocol=Protocol(image_size=16, epochs=1, batch_size=16))
    assert res.summary["features"].tolist() == ["pretrained features"]
    backbone = res.info["backbone"]
    assert backbone["name"] == "tv:resnet18" and backbone["weights_sha256"]
    assert res.info["start_weights"].startswith("pretrained: resnet18.pt")
    run = json.loads((tmp_path / "out" / "runs" / "tv_resnet18__frozen__Full__seed0" /
                      "run.json").read_text())
    assert run["backbone"]["weights_sha256"] == backbone["weights_sha256"]
    assert run["epochs"] == 1 and run["protocol"]["image_size"] == 16
    runs = pd.read_csv(tmp_path / "out" / "runs.csv")
    assert set(runs["model"]) == {"tv:resnet18"} and np.isfinite(runs["value"]).all()


@pytest.mark.slow
def test_fine_tuned_embeddings_from_selected_pt_find_the_planted_copies(tiny_release,
                                                                        tmp_path, capsys):
    from splitscope.experiments.training import classifier
    from splitscope.features.embeddings import load_embeddings
    from splitscope.manifest import build_manifest

    ws = tmp_path / "ws"
    train_experiment(tiny_release, tmp_path / "exp", policies=("finetune",), seeds=(0,),
                     pools=("Full",), workers=1, device="cpu", workspace=ws,
                     protocol=Protocol(image_size=24, epochs=2, batch_size=16))
    selected = tmp_path / "exp" / "runs" / "small-cnn__finetune__Full__seed0" / "selected.pt"
    # the backbone of selected.pt is what embed loads
    spec = resolve_backbone("small-cnn", selected)
    module, _, _ = build_backbone(spec)
    trained, _ = classifier(resolve_backbone("small-cnn"), 2, 0)
    trained.load_state_dict(torch.load(selected, weights_only=False)["model"])
    for k, v in module.state_dict().items():
        assert torch.equal(v, trained.backbone.state_dict()[k]), k
    emb = tmp_path / "emb.parquet"
    assert main(["embed", str(tiny_release), "--out", str(emb), "--weights", str(selected),
                 "--image-size", "24", "-w", str(ws), "--workers", "1", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["standardised"].startswith("per dimension")
    m = build_manifest(tiny_release)
    vec = load_embeddings(emb, m["path"])
    assert np.isfinite(vec).all()
    out = tmp_path / "dup"
    main(["duplicates", str(tiny_release), "--embeddings", str(emb), "--workers", "1",
          "-w", str(ws), "--out", str(out), "--json"])
    capsys.readouterr()
    flags = pd.read_parquet(out / "query_flags.parquet")
    test = flags[flags["boundary"].astype(str).str.startswith("test")]
    paths = m.set_index("row").loc[test["row"], "path"].to_numpy()
    hit = test["embedding_cosine"].fillna(False).to_numpy(bool)
    leaks = np.array(["/leak_" in p for p in paths])
    assert leaks.sum() == LEAKS and hit[leaks].all()  # every planted copy found
    assert not hit[~leaks].all()  # and clean rows are not all flagged


@pytest.mark.parametrize("name", ["tv:resnet_nonexistent", "timm:resnet_nonexistent"])
def test_an_architecture_the_library_lacks_is_an_input_error(name):
    with pytest.raises(InputError, match="no architecture 'resnet_nonexistent'"):
        build_backbone(resolve_backbone(name))


def test_an_unknown_architecture_exits_2_on_the_cli(tiny_release, tmp_path, capsys):
    code = main(["embed", str(tiny_release), "--out", str(tmp_path / "e.parquet"),
                 "--backbone", "tv:resnet_nonexistent", "--workers", "1"])
    assert code == 2
    assert "no architecture 'resnet_nonexistent'" in capsys.readouterr().err
