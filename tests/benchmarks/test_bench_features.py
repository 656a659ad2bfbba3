"""The feature benchmark compares like with like: its per-file baseline computes the same
hashes and thumbnails as exact mode, and its decode floor decodes every file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from benchmark_module import load_benchmark

from splitscope.features.scanning import scan

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_features.py"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_features")


@pytest.fixture(scope="module")
def mri_set(bench, tmp_path_factory):
    return bench.make_mri_set(tmp_path_factory.mktemp("cache"), 6, workers=1)


def test_generated_set_is_seeded_512_jpegs(bench, mri_set, tmp_path):
    from PIL import Image

    files = sorted(mri_set.rglob("*.jpg"))
    assert len(files) == 6
    with Image.open(files[0]) as img:
        assert (img.format, img.size, img.mode) == ("JPEG", (512, 512), "RGB")
    again = bench.make_mri_set(tmp_path, 6, workers=1)
    assert [f.read_bytes() for f in files] == [
        f.read_bytes() for f in sorted(again.rglob("*.jpg"))]


def test_baseline_equals_exact_mode(bench, mri_set, tmp_path):
    exact = scan(mri_set, tmp_path / "a", workers=1, progress=False)
    base = scan(mri_set, tmp_path / "b", workers=1, progress=False,
                extractor=bench.baseline_extract)
    assert (base.features["status"] == "ok").all()
    for column in ("file", "phash", "dhash"):
        assert exact.features[column].tolist() == base.features[column].tolist()
    assert np.array_equal(np.asarray(exact.thumbnails), np.asarray(base.thumbnails))


def test_decode_floor_decodes_every_file(bench, mri_set, tmp_path):
    res = scan(mri_set, tmp_path / "d", workers=1, progress=False,
               extractor=bench.decode_only_extract)
    assert (res.features["status"] == "ok").sum() == 6
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "cut.jpg").write_bytes(next(mri_set.rglob("*.jpg")).read_bytes()[:3000])
    res = scan(broken, tmp_path / "e", workers=1, progress=False,
               extractor=bench.decode_only_extract)
    assert res.features["status"].tolist() != ["ok"]  # a truncated file is not counted as done


def test_decode_pool_child_reports_json(mri_set):
    out = subprocess.run([sys.executable, str(BENCH), "_scan", str(mri_set), "decode_pool", "1"],
                         capture_output=True, text=True, check=True, timeout=120)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["method"] == "decode_pool" and result["files"] == 6
    assert result["images_per_s"] > 0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="samples /proc")
def test_tree_sampler_counts_the_cpu_of_grandchildren(bench):
    """A process started by a child (as a fork server's or loky's workers are) is counted: the
    CPU of the whole tree, not only of the children the caller waits for."""
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {busy!r}])"
    proc = subprocess.Popen([sys.executable, "-c", child])
    sampler = bench.TreeSampler(proc.pid)
    proc.wait()
    got = sampler.stop()
    assert got["cpu_seconds_tree"] >= 0.45
    assert got["peak_rss_tree_mib"] > 0
