"""Shard commits: the Arrow table built from a raw batch without pandas is the pandas table;
the bytes written are the bytes recorded; the commit thread keeps every received batch."""

from __future__ import annotations

import io
import threading

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from PIL import Image

from splitscope.features import extract
from splitscope.features.options import FeatureParams
from splitscope.features.scanning import _batch_table, _shard_schema, _shard_table
from splitscope.features.workspace import (
    FeatureStore,
    ShardCommitter,
    file_record,
    read_json,
    shard_positions,
)

PARAMS = FeatureParams(thumb_size=16)


def _pandas_shard(batch: dict, files: list[str], size: np.ndarray, mtime: np.ndarray):
    """The shard table as the scan built it before: pandas, then Arrow."""
    table, thumbs = extract.table_from_batch(batch)
    table = _batch_table(table, thumbs, files, "x")
    table["_size"] = size
    table["_mtime_ns"] = mtime
    return table


def _check_same(batch: dict, files: list[str]) -> None:
    size = np.arange(len(files), dtype=np.int64) + 10
    mtime = np.full(len(files), 1_700_000_000_123_456_789, dtype=np.int64)
    expected = _pandas_shard(batch, files, size, mtime)
    built, _ = _shard_table(batch, files, size, mtime, "x", _shard_schema(PARAMS))
    assert isinstance(built, pa.Table)
    assert built.equals(pa.Table.from_pandas(expected, preserve_index=False))
    back = built.to_pandas()  # the pandas metadata restores every dtype
    pd.testing.assert_frame_equal(back, expected)
    assert list(back.dtypes) == list(expected.dtypes)


def test_arrow_shard_of_a_real_batch_equals_the_pandas_table(tmp_path):
    files = []
    for i, mode in enumerate(["L", "RGB", "I;16", "P"]):
        path = tmp_path / f"img_{i}.png"
        Image.fromarray((np.arange(400).reshape(20, 20) * (i + 1) % 251).astype(np.uint8)) \
            .convert(mode).save(path)
        files.append(str(path))
    (tmp_path / "bad.jpg").write_bytes(b"not an image")
    (tmp_path / "empty.png").write_bytes(b"")
    files += [str(tmp_path / "bad.jpg"), str(tmp_path / "empty.png"), str(tmp_path / "gone.png")]
    batch = extract.extract_batch(files, PARAMS)
    assert {r["status"] for r in batch["rows"]} >= {"ok", "zero_byte", "missing"}
    _check_same(batch, files)


def test_arrow_shard_of_an_empty_and_an_all_failed_batch():
    _check_same(extract.extract_batch([], PARAMS), [])
    files = ["/nowhere/a.png", "/nowhere/b.png"]
    _check_same(extract.failure_batch(files, PARAMS, "worker_crashed", "died"), files)


def _first(dtype: str) -> str:
    """A column of ``dtype`` filled from the rows (``phash`` is, in a batch without thumbnails:
    the only UInt64 columns are the hashes)."""
    return next(c for c, d in extract._DTYPES.items() if d == dtype and c not in
                {"file", "status", "has_thumb"})


# values of other Python types than a column's plain one go through pandas, as before
ODD_VALUES = {
    "Float64": [np.float64(1.5), float("nan"), None, 2],
    "Int64": [np.int64(3), 4.0, None, True],
    "string": [5, "x", None, np.str_("y")],
    "boolean": [np.bool_(True), None, False, np.bool_(False)],
    "UInt64": [np.uint64(2**63 + 5), None, 7, 0],
}


@pytest.mark.parametrize("dtype", sorted(ODD_VALUES))
def test_columns_of_other_types_are_converted_as_pandas_converts_them(dtype):
    column = _first(dtype)
    values = ODD_VALUES[dtype]
    files = [f"/d/{i}.png" for i in range(len(values))]
    batch = extract.failure_batch(files, PARAMS, "unsupported", "x")
    for row, value in zip(batch["rows"], values):
        row[column] = value
    _check_same(batch, files)
    plain = {"Float64": [1.5, float("nan"), None, 2.0], "Int64": [3, -4, None, 2**62],
             "string": ["a", None, "é", ""], "boolean": [True, None, False, True],
             "UInt64": [2**64 - 1, None, 0, 5]}[dtype]
    for row, value in zip(batch["rows"], plain):
        row[column] = value
    _check_same(batch, files)


def _arrow_batch(files, n_ok):
    batch = extract.failure_batch(files, PARAMS, "unsupported", "x")
    batch["has_thumb"][:n_ok] = True
    batch["thumbs"][:n_ok] = np.arange(n_ok, dtype=np.uint8)[:, None, None] + 1
    batch["phash"][:n_ok] = 2**64 - 1
    for row in batch["rows"][:n_ok]:
        row["status"] = "ok"
    size = np.zeros(len(files), dtype=np.int64)
    return _shard_table(batch, files, size, size, "x", _shard_schema(PARAMS))


def test_commit_writes_what_it_records_and_reads_back(tmp_path):
    store = FeatureStore(tmp_path, "k")
    table, thumbs = _arrow_batch(["/d/a", "/d/b", "/d/c"], n_ok=2)
    placed = store.commit_shard("0001", table, thumbs)
    record = read_json(store.shards / "0001.json")
    for suffix in ("npy", "parquet"):
        assert record[suffix] == file_record(store.shards / f"0001.{suffix}")
    expected = io.BytesIO()
    np.save(expected, thumbs[:2], allow_pickle=False)
    assert (store.shards / "0001.npy").read_bytes() == expected.getvalue()
    assert store.check_shard("0001") is None
    row_pos, thumb_pos = shard_positions(table)
    assert placed["row_pos"].tolist() == row_pos.tolist() == [0, 1, 2]
    assert placed["thumb_pos"].tolist() == thumb_pos.tolist() == [0, 1, -1]
    back = pd.read_parquet(store.shards / "0001.parquet")
    assert back["phash"].dtype == "UInt64" and back["phash"].iloc[0] == 2**64 - 1
    index = store.index()
    assert index["source"].tolist() == ["shard:0001"] * 3


def _failing_commits(monkeypatch) -> set[str]:
    """Make the commit of shard 0002 fail with a full disk; returns the names of the threads
    that committed."""
    original = FeatureStore.commit_shard
    threads: set[str] = set()

    def failing(self, name, table, thumbs):
        threads.add(threading.current_thread().name)
        if name == "0002":
            raise OSError(28, "No space left on device")
        return original(self, name, table, thumbs)

    monkeypatch.setattr(FeatureStore, "commit_shard", failing)
    return threads


def test_commit_thread_commits_in_order_and_raises_a_failure(tmp_path, monkeypatch):
    store = FeatureStore(tmp_path, "k")
    threads = _failing_commits(monkeypatch)
    table, thumbs = _arrow_batch(["/d/a"], n_ok=1)
    with pytest.raises(OSError, match="No space"), ShardCommitter(store, depth=2) as committer:
        for name in ("0001", "0002", "0003", "0004"):
            committer.submit(name, table, thumbs)
    assert threads and all(t.startswith("splitscope-commit") for t in threads)
    assert "0001" in store.committed_shards() and "0002" not in store.committed_shards()


def test_commit_thread_finishes_received_batches_when_interrupted(tmp_path):
    store = FeatureStore(tmp_path, "k")
    table, thumbs = _arrow_batch(["/d/a", "/d/b"], n_ok=1)
    names = [f"{i:04d}" for i in range(6)]
    with pytest.raises(KeyboardInterrupt), ShardCommitter(store, depth=3) as committer:
        for name in names:
            committer.submit(name, table, thumbs)
        raise KeyboardInterrupt
    assert store.committed_shards() == names
    assert all(store.check_shard(n) is None for n in names)


def test_result_from_mixed_sources_is_written_and_recorded_as_a_fresh_scan(tmp_path):
    """A rerun after changes assembles its result from the previous result and new shards
    (runs of rows from each, interleaved); its bytes and commit records are a fresh scan's."""
    import os

    from splitscope.features.scanning import scan

    root = tmp_path / "data"
    rng = np.random.default_rng(3)
    for i in range(30):
        (root / f"c{i % 3}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (20, 20), dtype=np.uint8)) \
            .save(root / f"c{i % 3}" / f"{i:02d}.png")
    (root / "c0" / "broken.png").write_bytes(b"\x89PNG broken")
    ws = tmp_path / "ws"
    scan(root, ws, thumb_size=16, workers=1, batch_size=7, progress=False)
    for name in ("c0/03.png", "c1/10.png", "c2/29.png"):  # spread over the sorted rows
        Image.fromarray(np.full((20, 20), 77, np.uint8)).save(root / name)
        os.utime(root / name, ns=(10**18, 10**18))
    again = scan(root, ws, thumb_size=16, workers=1, batch_size=7, progress=False)
    assert again.meta["extracted"] == 3  # the changed files; the broken one is reused
    fresh = scan(root, tmp_path / "fresh", thumb_size=16, workers=1, progress=False)
    pd.testing.assert_frame_equal(again.features, fresh.features)
    for scanned in (again, fresh):
        folder = scanned.workspace / "features" / scanned.params.key() / "results" / \
            scanned.meta["result"]
        for name in ("features.parquet", "thumbnails.npy"):
            assert scanned.meta["checksums"][name] == file_record(folder / name)
    assert again.meta["checksums"] == fresh.meta["checksums"]


def test_one_worker_commits_each_batch_in_its_own_thread_when_submitted(tmp_path, monkeypatch):
    """A scan with one worker keeps one thread busy: no commit thread, and a failed commit
    still raises from the next submit."""
    store = FeatureStore(tmp_path, "k")
    threads = _failing_commits(monkeypatch)
    table, thumbs = _arrow_batch(["/d/a"], n_ok=1)
    with pytest.raises(OSError, match="No space"), \
            ShardCommitter(store, depth=2, beside=False) as committer:
        committer.submit("0001", table, thumbs)
        assert store.committed_shards() == ["0001"]  # committed before submit returned
        for name in ("0002", "0003"):
            committer.submit(name, table, thumbs)
    assert threads == {threading.current_thread().name}
    assert store.committed_shards() == ["0001"]


def test_in_place_runs_each_call_at_once_and_keeps_its_error():
    from splitscope.features.workspace import InPlace, helper_thread

    pool = helper_thread("unused", beside=False)
    assert isinstance(pool, InPlace)
    with pool:
        here = pool.submit(threading.current_thread)
        failed = pool.submit(int, "not a number")
    assert here.done() and here.result() is threading.current_thread()
    with pytest.raises(ValueError):
        failed.result()
