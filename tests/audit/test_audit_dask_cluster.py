"""An audit against a cluster of separate ``dask scheduler`` and ``dask worker`` processes (the
``dask`` command line of ``distributed``, as on a batch system or Kubernetes) writes the same
duplicates records and pair lists as one on the process pool, and its NCC search runs as tasks
on that cluster."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import splitscope
from splitscope.cli import main
from splitscope.features.executors import BLAS_THREAD_VARIABLES

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

# the scheduler unpickles this module's functions by value (it cannot import a test module)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: what may differ between two runs of one audit: when and how long, the command, the executor
#: the options name (options.run.engine), and how the search ran (its note, checked apart)
VARYING_KEYS = {"started", "finished", "duration_s", "scan_seconds", "seconds", "command",
                "engine", "ncc_search"}


def _dask_cli() -> list[str]:
    """The ``dask`` command of the interpreter running the tests."""
    return [sys.executable, "-c", "import sys; from dask.__main__ import main; sys.exit(main())"]


def _stop(proc: subprocess.Popen) -> None:
    """End ``proc`` and its session (it was started in its own), SIGKILL after 10 s."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def scheduler_address(tmp_path_factory):
    """A scheduler and two one-thread workers as separate OS processes, on free localhost ports
    (port 0; the address is read from the scheduler file), ended at teardown."""
    folder = tmp_path_factory.mktemp("dask-cluster")
    scheduler_file = folder / "scheduler.json"
    env = {**os.environ, **{name: "1" for name in BLAS_THREAD_VARIABLES}}
    src = str(Path(splitscope.__file__).resolve().parents[1])  # this tree's splitscope
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    procs: list[subprocess.Popen] = []
    logs = []

    def start(*args: str, name: str) -> None:
        log = open(folder / f"{name}.log", "wb")  # noqa: SIM115 - closed at teardown
        logs.append(log)
        procs.append(subprocess.Popen([*_dask_cli(), *args], env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))

    try:
        start("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
              "--scheduler-file", str(scheduler_file), name="scheduler")
        deadline = time.monotonic() + 60
        while not scheduler_file.is_file() or not scheduler_file.stat().st_size:
            if procs[0].poll() is not None or time.monotonic() > deadline:
                pytest.fail("dask scheduler did not start: "
                            + (folder / "scheduler.log").read_text(errors="replace")[-2000:])
            time.sleep(0.1)
        for k in range(2):
            start("worker", "--scheduler-file", str(scheduler_file), "--nthreads", "1",
                  "--no-nanny", "--host", "127.0.0.1", "--no-dashboard", "--local-directory",
                  str(folder / f"worker{k}"), "--name", f"w{k}", name=f"worker{k}")
        with distributed.Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
            address = client.scheduler.address
        yield address
    finally:
        for proc in reversed(procs):
            _stop(proc)
        for log in logs:
            log.close()


def _strip(doc, out_dir):
    if isinstance(doc, dict):
        return {k: _strip(v, out_dir) for k, v in doc.items() if k not in VARYING_KEYS}
    if isinstance(doc, list):
        return [_strip(v, out_dir) for v in doc]
    if isinstance(doc, str):
        return doc.replace(str(out_dir), "OUT")
    return doc


def _search_notes(doc) -> dict[str, dict]:
    """The NCC search note of each record that has one, by record id."""
    return {r["id"]: r["details"]["notes"]["ncc_search"] for r in doc["records"]
            if "ncc_search" in ((r.get("details") or {}).get("notes") or {})}


def _search_tasks(dask_scheduler) -> int:
    """Tasks of the partitioned search whose result the scheduler has seen (run on the
    scheduler)."""
    prefix = dask_scheduler.task_prefixes.get("search_part")
    return 0 if prefix is None else int(prefix.state_counts["memory"])


@pytest.mark.slow
def test_audit_on_separate_dask_processes_equals_process_pool(scheduler_address, tmp_path,
                                                               monkeypatch):
    from splitscope.datasets import make_demo
    from splitscope.relations import partitioned

    # small task blocks: every boundary's search is cut into several tasks, merged in order
    monkeypatch.setattr(partitioned, "QUERY_BLOCK", 32)
    monkeypatch.setattr(partitioned, "REFERENCE_BLOCK", 100)
    root = make_demo(tmp_path / "demo", seed=3)
    with distributed.Client(scheduler_address, timeout=30) as client:
        tasks_before = client.run_on_scheduler(_search_tasks)
    docs, notes, runs = {}, {}, {}
    for name, engine in (("process", ["--executor", "process", "--workers", "2"]),
                         ("dask", ["--executor", "dask", "--scheduler", scheduler_address])):
        out = tmp_path / name
        code = main(["audit", str(root), "--layers", "duplicates", "--out", str(out),
                     "--workspace", str(tmp_path / f"ws-{name}"), "--json", *engine])
        assert code in (0, 1), name  # 1: a planted finding met a --fail-on default
        doc = json.loads((out / "audit.json").read_text())
        notes[name] = _search_notes(doc)
        runs[name] = doc["options"].pop("run")  # engine, scheduler, workers, workspace
        docs[name] = _strip(doc, out)
    with distributed.Client(scheduler_address, timeout=30) as client:
        tasks_run = client.run_on_scheduler(_search_tasks) - tasks_before
        assert len(client.scheduler_info()["workers"]) == 2

    assert runs["dask"]["scheduler"] == scheduler_address
    assert runs["process"]["engine"] == "process"
    # the duplicates layer's records (planted copies found by NCC among them), and the rest
    nearest = [r for r in docs["dask"]["records"]
               if r["id"] == "near_duplicate.ncc_nearest.test--train"]
    assert nearest and nearest[0]["numerator"] > 0
    assert docs["dask"]["records"] == docs["process"]["records"]
    assert docs["dask"] == docs["process"]
    # the search ran as tasks on the cluster, cut into more than one task per boundary
    assert notes["process"] and notes["dask"].keys() == notes["process"].keys()
    assert {n["search"] for n in notes["process"].values()} != {"partitioned"}
    assert {n["search"] for n in notes["dask"].values()} == {"partitioned"}
    assert all(n["partitions"]["tasks"] > 1 for n in notes["dask"].values())
    # one search per boundary (its records share the note), each of its tasks on the cluster
    per_boundary = {record.rsplit(".", 1)[-1]: n["partitions"]["tasks"]
                    for record, n in notes["dask"].items()}
    assert tasks_run == sum(per_boundary.values()) > 0
    # the pair and flag tables, byte for byte
    lists = sorted(p.relative_to(tmp_path / "process") for p in
                   (tmp_path / "process" / "lists").rglob("*") if p.is_file())
    assert any(p.name.startswith("pairs") for p in lists)
    for rel in lists:
        assert (tmp_path / "dask" / rel).read_bytes() == \
            (tmp_path / "process" / rel).read_bytes(), rel
