"""Scan.thumb_index: computed once per manifest and feature table, recomputed when either is
replaced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from splitscope.features.scanning import Scan


def _scan() -> Scan:
    manifest = pd.DataFrame({"row": np.arange(4), "file": pd.array(["b", "a", "b", "c"],
                                                                   dtype="string")})
    features = pd.DataFrame({"file": pd.array(["a", "b", "c"], dtype="string"),
                             "thumb_index": np.array([1, 0, -1])})
    thumbs = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4)
    return Scan(manifest=manifest, features=features, thumbnails=thumbs, params=None,
                workspace=Path("."), meta={"thumb_size": 4})


def test_thumb_index_is_computed_once_and_follows_replaced_tables():
    s = _scan()
    assert s.thumb_index([0, 1, 2, 3]).tolist() == [0, 1, 0, -1]
    first = s._row_thumb_index()
    assert s._row_thumb_index() is first and not first.flags.writeable
    np.testing.assert_array_equal(s.thumbs([1, 0]), s.thumbnails[[1, 0]])
    s.manifest = s.manifest.iloc[[3, 1]].reset_index(drop=True)  # a new manifest
    assert s.thumb_index([0, 1]).tolist() == [-1, 1]
    s.features = s.features.assign(thumb_index=np.array([0, 1, -1]))  # new features
    assert s.thumb_index([0, 1]).tolist() == [-1, 0]


def _mapped_rss_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (from /proc/self/smaps)."""
    total, mine = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line
            mine = line.rstrip().endswith(str(path))
        elif mine and head and head[0] == "Rss:":
            total += int(head[1])
    return total


def _scan_of(tmp_path, n, size):
    from splitscope.features.workspace import open_thumbnails

    path = tmp_path / "thumbnails.npy"
    np.save(path, (np.arange(n * size * size) % 251).astype(np.uint8).reshape(n, size, size))
    manifest = pd.DataFrame({"row": np.arange(n), "file": pd.array(
        [f"f{i:04d}" for i in range(n)], dtype="string")})
    features = pd.DataFrame({"file": manifest["file"], "thumb_index": np.arange(n)})
    return Scan(manifest=manifest, features=features, thumbnails=open_thumbnails(path),
                params=None, workspace=tmp_path, meta={"thumb_size": size}), path


def test_reading_thumbnails_maps_none_of_the_store(tmp_path):
    """A pass over every thumbnail, in order or scattered, reads the bytes it returns and
    leaves none of the store resident in this process (scattered reads through the memory map
    faulted in a whole folio per row: the whole store, counted in the process's memory)."""
    if not Path("/proc/self/smaps").is_file():
        pytest.skip("needs /proc/self/smaps (Linux) to read a mapping's resident size")
    s, path = _scan_of(tmp_path, 2048, 128)  # 16 KiB a thumbnail, 32 MiB in all
    expected = np.load(path)
    for b in range(0, 2048, 256):  # in order, a block at a time
        np.testing.assert_array_equal(s.thumbs(np.arange(b, b + 256)), expected[b:b + 256])
    rng = np.random.default_rng(0)
    for _ in range(64):  # scattered rows, with runs and repeats
        rows = np.r_[rng.choice(2048, 8, replace=False), 7, 8, 9, 9, 3]
        np.testing.assert_array_equal(s.thumbs(rows), expected[rows])
    assert _mapped_rss_kib(path) <= 64
    np.testing.assert_array_equal(s.read_thumbnails(np.zeros(0, int)), expected[:0])


def test_a_truncated_store_is_an_error_not_short_thumbnails(tmp_path):
    from splitscope.errors import InputError

    s, path = _scan_of(tmp_path, 64, 16)
    expected = np.load(path)
    with open(path, "r+b") as fh:  # cut after the store was opened (read through the map,
        fh.truncate(path.stat().st_size - 100)  # its last rows would be a bus error)
    np.testing.assert_array_equal(s.thumbs(np.arange(8)), expected[:8])
    with pytest.raises(InputError, match="truncated"):
        s.thumbs(np.arange(60, 64))
