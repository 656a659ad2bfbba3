"""The busy-core benchmark's bare pool decodes a large JPEG as the fast scan does (at the
reduced scale) only in fast mode, and its arms take the mode from the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from benchmark_module import load_benchmark
from PIL import Image, JpegImagePlugin


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_scan_busy")


def _files(tmp_path):
    rng = np.random.default_rng(0)
    big = tmp_path / "big.jpg"
    Image.fromarray(rng.integers(0, 255, (512, 512, 3), dtype=np.uint8)).save(big, quality=90)
    small = tmp_path / "small.png"
    Image.fromarray(rng.integers(0, 255, (64, 64), dtype=np.uint8)).save(small)
    return [str(big), str(small)]


def test_fast_pool_drafts_large_jpegs_only(bench, tmp_path, monkeypatch):
    paths = _files(tmp_path)
    drafted = []
    real = JpegImagePlugin.JpegImageFile.draft

    def recording(self, mode, size):
        drafted.append((self.format, self.size, mode, size))
        return real(self, mode, size)

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", recording)
    assert bench._decode_resize(paths) == 2
    assert drafted == []
    assert bench._decode_resize(paths, "fast") == 2
    assert drafted == [("JPEG", (512, 512), "L", (192, 192))]


def test_pool_arm_takes_the_mode(bench, tmp_path, capsys):
    folder = tmp_path / "release"
    folder.mkdir()
    _files(folder)
    assert bench.main(["--child", "pool", "--folder", str(folder), "--workers", "1",
                       "--mode", "fast"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["arm"] == "pool" and out["files"] == 2
