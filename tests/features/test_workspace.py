"""The on-disk store: atomic commits, cleaning after interruption, lookups by signature."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from splitscope.errors import InputError
from splitscope.features.workspace import (
    FeatureStore,
    atomic_path,
    file_signatures,
    open_thumbnails,
    read_json,
    workspace_lock,
    write_json,
)


def _batch(files, status=None, thumb=None, size=3):
    n = len(files)
    status = status or ["ok"] * n
    has = np.array([s == "ok" for s in status])
    table = pd.DataFrame({
        "file": pd.array(files, dtype="string"),
        "status": pd.array(status, dtype="string"),
        "value": np.arange(n, dtype=np.int64) + 100,
        "has_thumb": has,
        "_size": np.arange(n, dtype=np.int64),
        "_mtime_ns": np.full(n, 7, dtype=np.int64),
    })
    thumbs = np.zeros((n, size, size), dtype=np.uint8)
    for i in range(n):
        thumbs[i] = (thumb if thumb is not None else 10) + i
    thumbs[~has] = 0
    return table, thumbs


def test_atomic_path_replaces_only_on_success(tmp_path):
    target = tmp_path / "x.json"
    write_json({"a": 1}, target)
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert read_json(target) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temporary left
    assert read_json(tmp_path / "absent.json") is None


def test_lock_refuses_a_second_writer(tmp_path):
    with workspace_lock(tmp_path):
        import subprocess
        import sys

        code = ("import sys; from splitscope.features.workspace import workspace_lock\n"
                "try:\n    with workspace_lock(sys.argv[1]): print('got')\n"
                "except Exception as e: print(type(e).__name__)")
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                             text=True, timeout=60, check=False)
        assert out.stdout.strip() == "InputError"
    with workspace_lock(tmp_path):  # released after the block
        pass


def test_file_signatures_mark_unstatable(tmp_path):
    a = tmp_path / "a.bin"
    a.write_bytes(b"12345")
    os.utime(a, ns=(1_000_000_123, 2_000_000_456))
    size, mtime = file_signatures([str(a), str(tmp_path / "gone.bin")])
    assert size.tolist() == [5, -1]
    assert mtime.tolist() == [2_000_000_456, -1]


def test_store_commit_lookup_and_result(tmp_path):
    store = FeatureStore(tmp_path, "k1")
    t1, th1 = _batch(["/d/a", "/d/b"], status=["ok", "not_an_image"], thumb=10)
    t2, th2 = _batch(["/d/c"], thumb=50)
    store.commit_shard("0001", t1, th1)
    store.commit_shard("0002", t2, th2)
    assert store.committed_shards() == ["0001", "0002"]

    files = ["/d/a", "/d/b", "/d/c", "/d/new"]
    entries = store.lookup(files, np.array([0, 1, 0, 9]), np.array([7, 7, 7, 7]))
    assert entries["file"].tolist() == files
    assert entries["source"].tolist()[:3] == ["shard:0001", "shard:0001", "shard:0002"]
    assert pd.isna(entries["source"].iloc[3])
    assert entries["thumb_pos"].tolist()[:3] == [0, -1, 0]
    # a changed signature is a miss
    changed = store.lookup(["/d/a"], np.array([0]), np.array([8]))
    assert changed["source"].isna().all()

    hit = entries.iloc[:3]
    name, table = store.write_result(hit, (3, 3))
    assert table["file"].tolist() == ["/d/a", "/d/b", "/d/c"]
    assert table["thumb_index"].tolist() == [0, -1, 1]
    assert table["value"].tolist() == [100, 101, 100]
    thumbs = open_thumbnails(tmp_path / "features" / "k1" / "results" / name / "thumbnails.npy")
    assert isinstance(thumbs, np.memmap)
    assert thumbs.shape == (2, 3, 3)
    assert thumbs[0].max() == 10 and thumbs[1].max() == 50
    store.commit_meta({"result": name})
    store.prune_shards(store.committed_shards())
    # the committed result is now the cache
    again = store.lookup(files[:3], np.array([0, 1, 0]), np.array([7, 7, 7]))
    assert again["source"].eq(f"result:{name}").all()
    assert again["thumb_pos"].tolist() == [0, -1, 1]


def test_clean_removes_partial_work(tmp_path):
    store = FeatureStore(tmp_path, "k1")
    t1, th1 = _batch(["/d/a"])
    store.commit_shard("0001", t1, th1)
    # interrupted batches: thumbnails committed, table not; both committed, commit record
    # not; a stray temporary; an unreferenced result generation
    np.save(store.shards / "0002.npy", th1)
    np.save(store.shards / "0004.npy", th1)
    t1.to_parquet(store.shards / "0004.parquet")
    (store.shards / ".tmp-0003.parquet.xyz").write_bytes(b"partial")
    (store.results / "orphan").mkdir(parents=True)
    store.clean()
    assert sorted(p.name for p in store.shards.iterdir()) == ["0001.json", "0001.npy",
                                                              "0001.parquet"]
    assert list(store.results.iterdir()) == []


def test_store_key_validated(tmp_path):
    with pytest.raises(InputError):
        FeatureStore(tmp_path, "../x")


def test_empty_result_has_no_thumbnails(tmp_path):
    store = FeatureStore(tmp_path, "k1")
    t1, th1 = _batch(["/d/a"], status=["missing"])
    store.commit_shard("0001", t1, th1)
    entries = store.lookup(["/d/a"], np.array([0]), np.array([7]))
    name, table = store.write_result(entries, (3, 3))
    assert table["thumb_index"].tolist() == [-1]
    arr = open_thumbnails(store.results / name / "thumbnails.npy")
    assert arr.shape == (0, 3, 3)


def test_committed_files_get_the_usual_mode(tmp_path):
    write_json({"a": 1}, tmp_path / "m.json")
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o666 & ~mask
