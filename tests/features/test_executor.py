"""The executor interface: serial and process pools give the same results, in any order."""

from __future__ import annotations

import math
import os

import pytest

from splitscope.errors import InputError
from splitscope.features.executor import (
    ProcessExecutor,
    SerialExecutor,
    make_executor,
    pin_blas_threads,
)
from splitscope.features.executors import BLAS_THREAD_VARIABLES, Executor, default_workers


def _chunks(n):
    return ((f"c{i:03d}", i) for i in range(n))


def test_serial_yields_every_chunk_in_order():
    out = list(SerialExecutor().map(math.factorial, _chunks(6)))
    assert out == [(f"c{i:03d}", math.factorial(i)) for i in range(6)]


@pytest.mark.slow
def test_process_pool_matches_serial_and_pins_blas():
    ex = ProcessExecutor(2, max_in_flight=2)
    got = dict(ex.map(math.factorial, _chunks(20)))
    assert got == dict(SerialExecutor().map(math.factorial, _chunks(20)))
    # every worker starts with BLAS/OpenMP pools pinned to one thread
    envs = dict(ex.map(os.getenv, ((name, name) for name in BLAS_THREAD_VARIABLES)))
    assert envs == {name: "1" for name in BLAS_THREAD_VARIABLES}
    # the source is read only as far as the in-flight bound allows
    consumed = []

    def source():
        for i in range(50):
            consumed.append(i)
            yield i, i

    it = ex.map(math.factorial, source())
    next(it)
    assert len(consumed) <= ex.max_in_flight + 1
    it.close()


def test_chunks_are_consumed_lazily_with_bounded_in_flight():
    consumed = []

    def source():
        for i in range(10):
            consumed.append(i)
            yield i, i

    it = SerialExecutor().map(abs, source())
    next(it)
    assert consumed == [0]  # nothing is read ahead by the serial executor


def test_worker_count_validated_and_defaults():
    assert default_workers() >= 1
    assert isinstance(make_executor(1), SerialExecutor)
    assert isinstance(make_executor(3), ProcessExecutor)
    assert make_executor(3).workers == 3
    assert isinstance(SerialExecutor(), Executor)
    assert isinstance(ProcessExecutor(2), Executor)
    with pytest.raises(InputError):
        make_executor(0)
    with pytest.raises(InputError):
        ProcessExecutor(0)


def test_pin_blas_threads_sets_variables(monkeypatch):
    for name in BLAS_THREAD_VARIABLES:
        monkeypatch.setenv(name, "8")
    pin_blas_threads()
    try:
        assert all(os.environ[name] == "1" for name in BLAS_THREAD_VARIABLES)
    finally:
        from splitscope.features import executor

        if executor._LIMITS is not None:  # give this test process its thread pools back
            executor._LIMITS.restore_original_limits()
            executor._LIMITS = None


def test_owner_watch_tells_a_live_process_from_an_ended_one():
    import subprocess
    import sys

    from splitscope.features.worker_exit import process_gone as _process_gone

    assert not _process_gone(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert _process_gone(child.pid)


_FORK_SERVER_SCRIPT = r"""
import json, os, sys
from splitscope.features.executor import ProcessExecutor, start_fork_server

def probe(_):
    return {"extract": "splitscope.features.extract" in sys.modules,
            "pandas": "pandas" in sys.modules, "omp": os.environ.get("OMP_NUM_THREADS")}

if __name__ == "__main__":
    started = start_fork_server()
    loaded_here = "splitscope.features.extract" in sys.modules
    out = [r for _, r in ProcessExecutor(2).map(probe, [(i, i) for i in range(2)])]
    print(json.dumps({"started": started, "loaded_here": loaded_here, "workers": out,
                      "omp_here": os.environ.get("OMP_NUM_THREADS")}))
"""


@pytest.mark.skipif("forkserver" not in __import__("multiprocessing").get_all_start_methods(),
                    reason="no fork server on this platform")
def test_fork_server_preloads_the_extraction_code_for_its_workers(tmp_path):
    """Workers forked from the server start with the extraction code loaded (imported once,
    in the server, before the manifest of a cold scan is built), pandas not, BLAS pinned; the
    scanning process itself imports nothing for it."""
    import json
    import subprocess
    import sys

    script = tmp_path / "fork_server.py"
    script.write_text(_FORK_SERVER_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, check=True, env=env)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["started"] is True and result["loaded_here"] is False
    assert result["omp_here"] is None  # the scanning process keeps its own BLAS threads
    assert result["workers"] == [{"extract": True, "pandas": False, "omp": "1"}] * 2


def test_fork_server_is_started_only_for_a_cold_pool_scan(tmp_path):
    from splitscope.features.options import FeatureParams
    from splitscope.features.scanning import _cold_pool_scan
    from splitscope.features.workspace import FeatureStore, write_json

    params = FeatureParams()
    assert _cold_pool_scan(tmp_path, params, None, 2)
    assert not _cold_pool_scan(tmp_path, params, None, 1)
    assert not _cold_pool_scan(tmp_path, params, SerialExecutor(), 4)
    write_json({"result": None}, FeatureStore(tmp_path, params.key()).meta_path)
    assert not _cold_pool_scan(tmp_path, params, None, 2)  # a rerun: its cache, maybe no pool


def test_a_serial_chunk_runs_on_one_blas_thread():
    """One worker is one busy thread, as each worker of a pool is (BLAS pinned to one)."""
    import numpy  # noqa: F401 - its BLAS pool is one of those read
    from threadpoolctl import threadpool_info

    def pools(_):
        return {p["num_threads"] for p in threadpool_info()}

    before = [p["num_threads"] for p in threadpool_info()]
    assert [threads for _, threads in SerialExecutor().map(pools, _chunks(2))] == [{1}, {1}]
    assert [p["num_threads"] for p in threadpool_info()] == before


def _stubborn(ready: str) -> None:
    """A pool task that ignores SIGTERM, writes its process id, and waits."""
    import pathlib
    import signal
    import time

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pathlib.Path(ready).write_text(str(os.getpid()))
    time.sleep(120)


def _pid(_) -> int:
    import time

    time.sleep(0.5)  # both workers busy at once: both started
    return os.getpid()


def test_a_broken_pool_is_shut_down_even_with_a_worker_that_outlives_sigterm(tmp_path):
    """When one worker dies, the pool terminates the others and joins each; a listed worker
    that does not end on SIGTERM would hold that join (and ``shutdown``) forever. ``_discard``
    kills every listed worker first, so it returns."""
    import multiprocessing
    import signal
    import time
    from concurrent.futures import ProcessPoolExecutor

    from splitscope.features.executor import _discard

    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    workers = set(pool.map(_pid, range(2)))
    assert len(workers) == 2
    ready = tmp_path / "ready"
    stubborn = pool.submit(_stubborn, str(ready))
    deadline = time.monotonic() + 60
    while not (ready.exists() and ready.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    other = (workers - {int(ready.read_text())}).pop()
    os.kill(other, signal.SIGKILL)  # the pool breaks; the stubborn worker ignores SIGTERM
    assert stubborn.exception(timeout=60) is not None
    listed = list(pool._processes.values())
    start = time.monotonic()
    _discard(pool)
    assert time.monotonic() - start < 30
    assert listed and not any(p.is_alive() for p in listed)
