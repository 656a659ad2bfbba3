"""Simulated model outputs of the demo: what they contain and where they may be written."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from splitscope.datasets import make_demo
from splitscope.datasets.simulated_model import (
    LEAKED_KINDS,
    MEMORISED_P,
    simulate_model_outputs,
)
from splitscope.errors import InputError


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("sim")
    root = make_demo(base / "data", seed=3)
    return root, simulate_model_outputs(root, base / "model", seed=3)


@pytest.mark.slow
def test_predictions_cover_every_test_and_val_file_and_memorise_the_leaked_ones(outputs):
    root, paths = outputs
    with open(paths["predictions"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    test_files, val_files = (sorted(p.relative_to(root).as_posix()
                                    for p in (root / split).rglob("*") if p.is_file())
                             for split in ("test", "val"))
    assert [r["path"] for r in rows] == test_files + val_files  # val: thresholds are fitted there
    for r in rows:
        assert float(r["normal"]) + float(r["lesion"]) == pytest.approx(1.0, abs=2e-6)
    with open(root / "planted.csv", newline="") as fh:
        planted = [p for p in csv.DictReader(fh) if p["kind"] in LEAKED_KINDS
                   and p["query_split"] == "test"]
    by_path = {r["path"]: r for r in rows}
    for p in planted:
        assert float(by_path[p["query_path"]][p["reference_label"]]) == pytest.approx(MEMORISED_P)
    conflict = next(p for p in planted if p["kind"] == "label_conflict")
    assert conflict["query_label"] != conflict["reference_label"]  # memorised: wrong label
    described = json.loads(paths["description"].read_text())
    assert described["memorised_test_files"] == sorted(p["query_path"] for p in planted)


def test_maps_lie_inside_the_head_unless_leaked(outputs):
    _, paths = outputs
    maps, masks = np.load(paths["attribution_maps"]), np.load(paths["attribution_masks"])
    assert sorted(maps.files) == sorted(masks.files)
    memorised = set(json.loads(paths["description"].read_text())["memorised_test_files"])
    for key in maps.files:
        a, m = maps[key], masks[key]
        assert a.shape == m.shape and set(np.unique(m)) <= {0, 1} and m.sum() > 0
        outside = np.abs(a)[m == 0].sum() / np.abs(a).sum()
        assert (outside > 0.5) if key in memorised else (outside < 1e-9), key


def test_refuses_to_write_inside_the_release(outputs):
    root, _ = outputs
    with pytest.raises(InputError, match="inside the demo release"):
        simulate_model_outputs(root, root / "model")
