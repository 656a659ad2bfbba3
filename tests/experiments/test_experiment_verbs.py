"""The experiments verbs: torch absent, a backbone that needs a download, local weights,
embeddings and Grad-CAM maps in the formats the other verbs read, the whole experiment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from experiment_helpers import LEAKS

from splitscope.cli import main
from splitscope.experiments.backbones import (
    TORCH_HINT,
    build_backbone,
    resolve_backbone,
)

SRC = str(Path(__file__).resolve().parents[2] / "src")
# a fresh interpreter in which `import torch` fails as it does where torch is not installed
_HIDE_TORCH = (
    "import sys, importlib.abc\n"
    "class Hide(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'torch' or name.startswith('torch.'):\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
    "sys.meta_path.insert(0, Hide())\n")
FAST = ["--image-size", "48", "--epochs", "1", "--batch-size", "16", "--workers", "1",
        "--device", "cpu"]


@pytest.mark.slow
@pytest.mark.parametrize("verb", [["train", "REL", "--out", "OUT"], ["embed", "REL", "--out",
                                                                     "OUT/e.parquet"],
                                  ["experiment", "REL", "--out", "OUT"]])
def test_without_torch_a_verb_exits_2_with_the_install_hint(verb, tiny_release, tmp_path):
    args = [str(tiny_release) if a == "REL" else a.replace("OUT", str(tmp_path / "o"))
            for a in verb]
    code = _HIDE_TORCH + f"from splitscope.cli import main\nsys.exit(main({args!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": SRC}, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert TORCH_HINT in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_the_core_install_imports_no_torch():
    code = ("import sys; import splitscope.cli, splitscope.experiments.layer, "
            "splitscope.experiments.commands, splitscope.core.run\n"
            "from splitscope.core.protocol import layer_names\n"
            "assert 'experiments' in layer_names(), layer_names()\n"
            "assert 'torch' not in sys.modules")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": SRC}, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name, file", [("tv:resnet18:IMAGENET1K_V1", "resnet18-f37072fd.pth"),
                                        ("timm:resnet18.a1_in1k", "resnet18.a1_in1k"),
                                        ("tv:convnext_tiny:IMAGENET1K_V1", "convnext_tiny")])
def test_a_backbone_that_needs_a_download_exits_2_naming_the_file(name, file, tiny_release,
                                                                   tmp_path, capsys):
    code = main(["train", str(tiny_release), "--out", str(tmp_path / "o"), "--backbone", name])
    assert code == 2
    err = capsys.readouterr().err
    assert "never downloads" in err and file in err and "--weights" in err
    assert not (tmp_path / "o").exists()


def test_unknown_backbone_and_missing_weights_are_input_errors(tiny_release, tmp_path, capsys):
    assert main(["train", str(tiny_release), "--out", str(tmp_path / "o"), "--backbone",
                 "vgg-tiny"]) == 2
    assert "unknown backbone" in capsys.readouterr().err
    assert main(["train", str(tiny_release), "--out", str(tmp_path / "o"), "--weights",
                 str(tmp_path / "none.pt")]) == 2
    assert "weights file not found" in capsys.readouterr().err


def test_local_weights_are_loaded_and_fingerprinted(tmp_path):
    spec = resolve_backbone("small-cnn", None, init_seed=5)
    module, dim, _ = build_backbone(spec)
    path = tmp_path / "w.pt"
    torch.save({"state_dict": module.state_dict()}, path)
    loaded = resolve_backbone("small-cnn", path, init_seed=0)
    assert loaded.weights_sha256 and loaded.key() != spec.key()
    other, _, _ = build_backbone(loaded)
    for (k, a), (_, b) in zip(module.state_dict().items(), other.state_dict().items()):
        assert torch.equal(a, b), k
    fresh, _, _ = build_backbone(resolve_backbone("small-cnn", None, init_seed=0))
    assert not torch.equal(fresh[0][0].weight, module[0][0].weight)
    assert dim == 128


def test_torchvision_backbone_by_name():
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - torchvision from PyPI does not import beside a local torch
        pytest.skip(f"torchvision does not import here: {type(exc).__name__}: {exc}")
    spec = resolve_backbone("tv:resnet18")
    module, dim, target = build_backbone(spec)
    assert dim == 512 and isinstance(target, torch.nn.Conv2d)
    assert module(torch.zeros(2, 1, 64, 64)).shape == (2, 512)


@pytest.mark.slow
def test_timm_backbone_by_name():
    try:
        import timm  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - timm needs torchvision
        pytest.skip(f"timm does not import here: {type(exc).__name__}: {exc}")
    module, dim, _ = build_backbone(resolve_backbone("timm:resnet18"))
    assert module(torch.zeros(2, 1, 64, 64)).shape == (2, dim)


@pytest.mark.slow
def test_embed_writes_what_duplicates_embeddings_reads(tiny_release, tmp_path, capsys):
    from splitscope.features.embeddings import load_embeddings
    from splitscope.manifest import build_manifest

    out = tmp_path / "emb.parquet"
    assert main(["embed", str(tiny_release), "--out", str(out), "--image-size", "48",
                 "--workers", "1", "-w", str(tmp_path / "ws"), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    m = build_manifest(tiny_release)
    vec = load_embeddings(out, m["path"])
    assert vec.shape == (len(m), res["dimension"]) and np.isfinite(vec).all()
    paths = m["path"].tolist()
    for i in range(LEAKS):
        c = "ab"[i % 2]
        a = vec[paths.index(f"train/{c}/train_{c}_{i:02d}.png")]
        b = vec[paths.index(f"test/{c}/leak_{c}_{i:02d}.png")]
        np.testing.assert_array_equal(a, b)  # byte copies: one embedding
    code = main(["duplicates", str(tiny_release), "--embeddings", str(out), "--workers", "1",
                 "-w", str(tmp_path / "ws"), "--json"])
    assert code in (0, 1)
    assert "embedding" in capsys.readouterr().out
    # rerun: the feature cache is reused
    assert main(["embed", str(tiny_release), "--out", str(out), "--image-size", "48",
                 "--workers", "1", "-w", str(tmp_path / "ws"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cache"]["hit"] is True


@pytest.mark.slow
def test_experiment_explains_and_audits_in_one_report(tiny_release, tmp_path, capsys):
    from experiment_helpers import EXTERNAL_CONTAINED, make_external

    from splitscope.evaluation.attribution import load_maps

    out = tmp_path / "exp"
    external = make_external(tmp_path / "external", tiny_release)
    code = main(["experiment", str(tiny_release), "--out", str(out), "--seeds", "0,1",
                 "--pools", "Full,Removal", "--resamples", "200", "--external", str(external),
                 "--json", *FAST])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert len(summary["runs"]) == 8
    assert len(list((out / "predictions").iterdir())) == 8
    doc = json.loads((out / "audit" / "audit.json").read_text())
    layers = {layer["layer"]: layer["status"] for layer in doc["layers"]}
    assert layers["experiments"] == "completed" and layers["attribution"] == "completed"
    # the external corpus: its containment in train (the audit's external layer) and the
    # re-trained models' transfer cost, both in the one report
    assert layers["external"] == "completed"
    byte = next(r for r in doc["records"] if r["layer"] == "external"
                and (r.get("boundary") or {}).get("kind") == "cross-corpus"
                and r["predicate"]["name"] == "sha256")
    assert byte["numerator"] == EXTERNAL_CONTAINED
    # one record per condition (backbone, policy, pool), over its two seeds: never pooled
    costs = [r for r in doc["records"]
             if r["id"].startswith("experiments.view_contrast.external.balanced_accuracy.")]
    assert len(costs) == 4
    assert all(r["denominator"] == 2 and r["status"] == "completed" for r in costs)
    assert layers["evaluation"] in ("completed", "partial")
    ids = [r["id"] for r in doc["records"] if r["layer"] == "experiments"
           and r["id"].startswith("experiments.")]
    assert "experiments.protocol" in ids
    assert any(i.startswith("experiments.contrast.removal_full.balanced_accuracy.deduplicated")
               for i in ids)
    assert (out / "audit" / "report.html").stat().st_size > 0
    # threshold and calibration fitted on each run's validation holdout: measured on the card
    card = {item["key"]: item for item in doc["scorecard"]}
    assert card["threshold"]["status"] == "measured"
    assert card["calibration"]["status"] == "measured"
    temp = next(r for r in doc["records"]
                if r["id"] == "experiments.temperature_scaling.small_cnn.frozen.removal")
    assert temp["denominator"] == 2 and temp["uncertainty"]["kind"].startswith("paired-t 95%")
    runs = pd.read_csv(out / "runs.csv")
    ece = runs[runs["metric"].isin(["ece_after_temperature", "ece_before_temperature"])
               & (runs["policy"] == "frozen") & (runs["pool"] == "Removal")]
    wide = ece.pivot_table(index=["seed"], columns="metric", values="value")
    assert temp["estimate"] == pytest.approx(
        (wide["ece_after_temperature"] - wide["ece_before_temperature"]).mean(), abs=1e-12)
    truth = pd.read_csv(out / "truth.csv")
    maps = load_maps(out / "explain" / "maps.npz", truth["path"].tolist())
    assert not maps.missing and all(a.shape == (48, 48) for a in maps.arrays)
    meta = json.loads((out / "explain" / "explain.json").read_text())
    assert meta["mask_rule"]["rule"].startswith("Otsu") and meta["mask_rule"]["image_size"] == 48
    assert meta["contrast"]["exposed"]["rows"] == LEAKS
    # the same maps through the attribution verb
    flagged = out / "views" / "deduplicated_exclude.csv"
    assert main(["attribution", str(tiny_release), "--maps", str(out / "explain" / "maps.npz"),
                 "--masks", str(out / "explain" / "masks.npz"), "--flagged", str(flagged),
                 "--rows", "test", "--resamples", "0", "--json"]) == 0
    att = json.loads(capsys.readouterr().out)
    assert att["contrast"]["exposed"]["assessed"] == LEAKS
    assert att["contrast"]["difference"] == pytest.approx(meta["contrast"]["difference"])


@pytest.mark.slow
def test_demo_with_a_trained_small_cnn(tmp_path):
    from splitscope.workflows.demo import run_demo

    # a smaller demo, every kind of planted leakage still (at 70 and 45 images some rows have
    # no attribution mass and the attribution record would be partial)
    result, check = run_demo(tmp_path / "demo", workers=1, progress=False, trained_model=True,
                             n_train=100, n_test=50)
    doc = result.document
    layers = {layer["layer"]: layer["status"] for layer in doc["layers"]}
    assert layers["experiments"] == "completed" and layers["attribution"] == "completed"
    run = json.loads(next((tmp_path / "demo" / "model-trained" / "runs").glob("*/run.json"))
                     .read_text())
    assert run["policy"] == "finetune" and run["pool"] == "Full"
    official = next(r for r in doc["records"] if r["id"].startswith("evaluation.metrics.")
                    and r["id"].endswith(".official"))
    assert official["estimate"] == pytest.approx(run["metrics"]["official"]["balanced_accuracy"])
    assert check["ok"] and check["lines"][-3].startswith("Trained small-cnn")
    assert not (tmp_path / "demo" / "model").exists()  # no simulated outputs
