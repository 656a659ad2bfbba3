"""The Dask executor: the executor contract on a real LocalCluster (two worker processes),
the same scan as the process pool, a dying worker counted as worker_crashed, and the missing
extra as a clear input error."""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from splitscope.cli import main
from splitscope.errors import InputError
from splitscope.features.executor import ProcessExecutor, SerialExecutor
from splitscope.features.executors import Executor
from splitscope.features.extract import extract_batch
from splitscope.features.scanning import scan
from splitscope.records.model import sha256_file

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

from splitscope.features.dask_executor import INSTALL_HINT, DaskExecutor

# the workers unpickle this module's functions by value (they cannot import a test module)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def executor():
    with DaskExecutor(workers=2) as ex:
        ex.client.wait_for_workers(2, timeout=60)
        yield ex


def _release(root, n=12):
    rng = np.random.default_rng(5)
    for split in ("train", "test"):
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                arr = rng.integers(0, 256, (24, 20), dtype=np.uint8)
                if i % 3:
                    Image.fromarray(arr).save(folder / f"{label}{i}.png")
                else:
                    Image.fromarray(np.stack([arr] * 3, -1)).save(folder / f"{label}{i}.jpg",
                                                                  quality=80)
    (root / "test" / "a" / "garbage.png").write_bytes(b"not an image")
    (root / "test" / "b" / "empty.png").write_bytes(b"")
    return root


def _fail(payload):
    raise ValueError(f"bad chunk {payload}")


def crashing_extractor(files, params):
    """Extracts as usual, but the worker process dies on a file marked ``crash``."""
    if any("crash" in os.path.basename(f) for f in files):
        os._exit(7)
    return extract_batch(files, params)


@pytest.mark.slow
def test_map_matches_serial_and_propagates_errors(executor):
    assert isinstance(executor, Executor) and executor.workers == 2
    chunks = [(f"c{i:02d}", i) for i in range(15)]
    assert dict(executor.map(math.factorial, iter(chunks))) == \
        dict(SerialExecutor().map(math.factorial, chunks))
    with pytest.raises(ValueError, match="bad chunk"):
        list(executor.map(_fail, [("x", 1)]))
    # a client given by the caller is used as is and left open
    given = DaskExecutor(client=executor.client, max_in_flight=3)
    assert dict(given.map(abs, [("a", -1), ("b", -2)])) == {"a": 1, "b": 2}
    given.close()
    assert executor.client.status == "running"


def test_scan_equals_process_pool(executor, tmp_path):
    root = _release(tmp_path / "data")
    local = scan(root, tmp_path / "ws-process", executor=ProcessExecutor(2), batch_size=5,
                 thumb_size=16)
    dask = scan(root, tmp_path / "ws-dask", executor=executor, batch_size=5, thumb_size=16)
    pd.testing.assert_frame_equal(dask.features, local.features)
    np.testing.assert_array_equal(np.asarray(dask.thumbnails), np.asarray(local.thumbnails))
    assert dask.summary()["failures"] == local.summary()["failures"]
    assert dask.summary()["failures"]["files"]["by_reason"] == {"not_an_image": 1,
                                                                "zero_byte": 1}
    for name in ("features.parquet", "thumbnails.npy"):
        files = [s.workspace / "features" / s.meta["key"] / "results" / s.meta["result"] / name
                 for s in (local, dask)]
        assert sha256_file(files[0]) == sha256_file(files[1])
    assert dask.meta["executor"].startswith("DaskExecutor(")


@pytest.mark.slow
def test_dying_worker_is_a_counted_worker_crashed_batch(executor, tmp_path):
    root = _release(tmp_path / "data", n=6)
    Image.fromarray(np.zeros((8, 8), np.uint8) + 9).save(root / "train" / "a" / "crash.png")
    result = scan(root, tmp_path / "ws", executor=executor, extractor=crashing_extractor,
                  batch_size=4, thumb_size=16)
    summary = result.summary()
    rows = result.rows()
    crashed = rows[rows["status"] == "worker_crashed"]
    # the dead worker's batch (4 files, the marked one among them) failed twice; every other
    # batch, including any that shared the dead worker, finished
    assert summary["failures"]["files"]["by_reason"] == {"not_an_image": 1, "worker_crashed": 4,
                                                         "zero_byte": 1}
    assert crashed["path"].str.endswith("crash.png").any()
    assert crashed["error"].str.contains("died twice").all()
    assert summary["features_ok"] == summary["unique_files"] - 6
    executor.client.wait_for_workers(2, timeout=60)  # the nanny restarts the dead worker


@pytest.mark.slow
def test_cli_scan_with_dask_executor(tmp_path, capsys):
    root = _release(tmp_path / "data", n=3)
    code = main(["scan", str(root), "--workspace", str(tmp_path / "ws"), "--thumb-size", "16",
                 "--executor", "dask", "--workers", "2", "--json"])
    out = capsys.readouterr().out
    assert code == 0 and '"features_ok": 12' in out


def test_missing_extra_gives_install_hint(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(InputError, match=r"splitscope\[distributed\]"):
        DaskExecutor(workers=2)
    root = _release(tmp_path / "data", n=1)
    code = main(["scan", str(root), "--workspace", str(tmp_path / "ws"), "--executor", "dask"])
    assert code == 2
    assert INSTALL_HINT in capsys.readouterr().err


def test_scheduler_needs_the_dask_executor(tmp_path, capsys):
    root = _release(tmp_path / "data", n=1)
    code = main(["scan", str(root), "--workspace", str(tmp_path / "ws"), "--scheduler",
                 "tcp://127.0.0.1:1"])
    assert code == 2 and "(--scheduler) needs the dask executor" in capsys.readouterr().err
    code = main(["scan", str(root), "--workspace", str(tmp_path / "ws"), "--executor", "dask",
                 "--workers", "0"])
    assert code == 2


@pytest.mark.slow
def test_unreachable_scheduler_is_an_input_error():
    ex = DaskExecutor(scheduler="tcp://127.0.0.1:9", connect_timeout="1s")
    with pytest.raises(InputError, match="cannot reach the Dask scheduler"):
        ex.client  # noqa: B018 - connecting is the point
