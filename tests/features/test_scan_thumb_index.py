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


@pytest.mark.slow
def test_reading_thumbnails_keeps_the_mapped_store_bounded(tmp_path, monkeypatch):
    import pytest

    from splitscope.features import scanning
    from splitscope.features.workspace import open_thumbnails, release_pages

    if not Path("/proc/self/smaps").is_file():
        pytest.skip("needs /proc/self/smaps (Linux) to read a mapping's resident size")
    n, size = 4096, 64  # 4 KiB a thumbnail, 16 MiB in all
    path = tmp_path / "thumbnails.npy"
    np.save(path, (np.arange(n * size * size) % 251).astype(np.uint8).reshape(n, size, size))
    store = open_thumbnails(path)
    manifest = pd.DataFrame({"row": np.arange(n), "file": pd.array(
        [f"f{i:04d}" for i in range(n)], dtype="string")})
    features = pd.DataFrame({"file": manifest["file"], "thumb_index": np.arange(n)})
    s = Scan(manifest=manifest, features=features, thumbnails=store, params=None,
             workspace=tmp_path, meta={"thumb_size": size})
    expected = np.load(path)
    # without a release, a pass over every thumbnail leaves the whole store resident
    monkeypatch.setattr(scanning, "RESIDENT_THUMB_BYTES", 1 << 40)
    np.testing.assert_array_equal(s.thumbs(np.arange(n)), expected)
    assert _mapped_rss_kib(path) >= 16000
    release_pages(store)
    assert _mapped_rss_kib(path) == 0
    # released after every 256 KiB read: what stays resident is that and one 128 KiB block,
    # rounded out to the kernel's fault-around and folio sizes (up to 2 MiB each), well
    # below the store; every block read back is the stored one
    monkeypatch.setattr(scanning, "RESIDENT_THUMB_BYTES", 256 << 10)
    peak = 0
    for b in range(0, n, 32):
        np.testing.assert_array_equal(s.thumbs(np.arange(b, b + 32)), expected[b:b + 32])
        peak = max(peak, _mapped_rss_kib(path))
    assert peak <= 8 << 10
    release_pages(expected)  # a plain array is left alone


def test_scattered_reads_keep_the_mapped_store_bounded(tmp_path, monkeypatch):
    """A read of scattered rows makes whole windows around each row resident (fault-around,
    large page-cache folios), far more than the bytes it returns; each such read is charged
    per window touched, so a search's random reads cannot leave the store resident."""
    from splitscope.features import scanning
    from splitscope.features.workspace import open_thumbnails

    if not Path("/proc/self/smaps").is_file():
        pytest.skip("needs /proc/self/smaps (Linux) to read a mapping's resident size")
    n, size = 2048, 128  # 16 KiB a thumbnail, 32 MiB in all
    path = tmp_path / "thumbnails.npy"
    np.save(path, (np.arange(n * size * size) % 251).astype(np.uint8).reshape(n, size, size))
    expected = np.load(path)
    manifest = pd.DataFrame({"row": np.arange(n), "file": pd.array(
        [f"f{i:04d}" for i in range(n)], dtype="string")})
    features = pd.DataFrame({"file": manifest["file"], "thumb_index": np.arange(n)})
    s = Scan(manifest=manifest, features=features, thumbnails=open_thumbnails(path),
             params=None, workspace=tmp_path, meta={"thumb_size": size})
    monkeypatch.setattr(scanning, "RESIDENT_THUMB_BYTES", 1 << 20)
    rng = np.random.default_rng(0)
    peak = 0
    for _ in range(64):  # 8 scattered rows (128 KiB) a read
        rows = rng.choice(n, 8, replace=False)
        np.testing.assert_array_equal(s.thumbs(rows), expected[rows])
        peak = max(peak, _mapped_rss_kib(path))
    assert peak <= 4 << 10


def test_resident_cost_counts_windows_touched():
    from splitscope.features.scanning import RESIDENT_WINDOW, _resident_cost

    rows = np.zeros((4, 96, 96), np.uint8)
    per = RESIDENT_WINDOW // rows[0].nbytes  # rows in one window
    assert _resident_cost(np.arange(4), rows) == RESIDENT_WINDOW  # one window
    assert _resident_cost(np.arange(4) * per * 3, rows) == 4 * RESIDENT_WINDOW
    big = np.zeros((3 * per, 96, 96), np.uint8)
    assert _resident_cost(np.arange(len(big)), big) == 3 * RESIDENT_WINDOW  # rows in 3 windows
    assert _resident_cost(np.arange(0), rows[:0]) == 0
