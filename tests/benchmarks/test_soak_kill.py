"""The soak script compares what it says it compares: a killed and resumed scan matches the
uninterrupted one, a changed output is reported, and no worker outlives the kill; a rerun
killed at the steps of its publish leaves a consistent output folder each time."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from benchmark_module import load_benchmark
from PIL import Image


@pytest.fixture(scope="module")
def soak():
    return load_benchmark("soak_kill")


def _release(root: Path) -> Path:
    rng = np.random.default_rng(3)
    for i in range(120):
        folder = root / ("train" if i % 3 else "test") / "a"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8)).save(folder / f"{i}.png")
    return root


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="counts processes through /proc")
def test_killed_scan_resumes_to_the_reference_outputs(soak, tmp_path):
    data = str(_release(tmp_path / "data"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    reference = tmp_path / "ref"
    soak.run_once(soak._command("scan", data, reference, 2), env)
    expected = soak.outputs("scan", reference)
    assert set(expected) == {"manifest.parquet", "features.parquet", "thumbnails.npy"}
    trial = soak.trial(soak._command("scan", data, tmp_path / "t", 2), env, 1.0, grace=10)
    assert trial["orphans"] == 0
    assert soak.outputs("scan", tmp_path / "t") == expected
    # a changed output is seen
    changed = next((tmp_path / "t" / "ws").glob("features/*/results/*/thumbnails.npy"))
    data_bytes = bytearray(changed.read_bytes())
    data_bytes[-1] ^= 0xFF
    changed.write_bytes(bytes(data_bytes))
    got = soak.outputs("scan", tmp_path / "t")
    assert [k for k in expected if expected[k] != got[k]] == ["thumbnails.npy"]


def test_run_fields_are_set_aside_and_results_kept(soak):
    doc = {"run": {"started": 1}, "manifest": {"rows": 5, "scan": {"reused": 3, "rows": 5}},
           "records": [{"numerator": 2, "seconds": 0.1}]}
    assert soak._strip(doc) == {"manifest": {"rows": 5, "scan": {"rows": 5}},
                                "records": [{"numerator": 2}]}


def test_the_publish_kills_cover_every_kind_of_step(soak):
    points = (["audit.json written", "staged", "committed", "reduced", "removed croissant.json"]
              + [f"moved lists/{i}.csv" for i in range(20)] + ["published", "cleaned"])
    chosen = soak.chosen_points(points, 12)
    assert len(chosen) == 12 and {points[k - 1].split(" ")[0] for k in chosen} == {
        "audit.json", "staged", "committed", "reduced", "removed", "moved", "published",
        "cleaned"}
    few = [points[k - 1] for k in soak.chosen_points(points, 4)]
    assert few[0] == "audit.json written" and few[-1] == "cleaned" and len(few) == 4


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="SIGKILL of a subprocess")
def test_killed_publishes_leave_consistent_folders(soak, tmp_path):
    rng = np.random.default_rng(5)
    root = tmp_path / "data"
    for i in range(16):
        folder = root / ("train" if i % 3 else "test") / ("a" if i % 2 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (24, 24), dtype=np.uint8)).save(folder / f"{i}.png")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # three kills (the first and last checkpoint and one between): one for each state a kill
    # can leave, each checked after the kill and after the rerun
    result = soak.publish_soak(str(root), 3, 1, tmp_path / "work", env)
    assert result["kills"] == 3 and result["kills_survived"] == 3, result["trials"]
    assert result["inconsistent_after_kill"] == 0
    states = result["states_after_kill"]
    assert states["previous run"] >= 1 and states["mid-publish"] >= 1 and states["new run"] >= 1
    # a folder the check would call inconsistent is seen: a listed file changed
    out = tmp_path / "work" / "publish-base" / "out"
    with open(out / "report.html", "a") as fh:
        fh.write("<!-- edited -->")
    assert any("report.html" in p for p in soak.folder_problems(out.parent))
