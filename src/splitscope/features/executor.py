"""Executors: where the per-file stage runs.

The feature stage cuts its work into *chunks* (a batch of files each) and hands them to an
executor. An executor runs one function over every chunk and yields ``(chunk_id, result)``
pairs in whatever order they finish; the caller commits each result as it arrives, so the
order of completion never reaches the output.

The interface is deliberately small so that another engine can be plugged in without touching
the callers:

``Executor.map(fn, chunks)``
    ``fn`` is a picklable module-level function of one argument; ``chunks`` is an iterable of
    ``(chunk_id, payload)`` pairs, consumed lazily; the call yields ``(chunk_id, fn(payload))``
    as chunks finish. An exception raised by ``fn`` propagates out of the iteration (the
    feature stage's own functions never raise for a bad file, they return a status). A chunk
    whose worker process died (killed, out of memory, a crash inside a decoder) is run once
    more, alone, in a fresh pool; when that worker dies too, the chunk yields a
    :class:`ChunkFailed` in place of its result and the run goes on.

:class:`splitscope.features.dask_executor.DaskExecutor` implements the same method over
``dask.distributed`` (``client.submit`` per chunk, a bounded number in flight,
``as_completed``, the same retry of a chunk whose worker died); nothing else changes.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
from collections.abc import Callable, Hashable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from splitscope.errors import InputError
from splitscope.features.executors import (
    BLAS_THREAD_VARIABLES,
    ChunkFailed,
    Executor,
    default_workers,
)
from splitscope.features.worker_exit import exit_with_owner

__all__ = [
    "ENGINES",
    "ProcessExecutor",
    "SerialExecutor",
    "executor_for",
    "init_worker",
    "make_executor",
    "pin_blas_threads",
    "start_fork_server",
]


def pin_blas_threads() -> None:
    """Limit BLAS/OpenMP thread pools to one thread in this process.

    Worker processes run one chunk each at a time; a multi-threaded BLAS inside every worker
    would oversubscribe the cores. The environment variables govern libraries loaded after
    this call; ``threadpoolctl`` (when installed) also limits pools already loaded.
    """
    for name in BLAS_THREAD_VARIABLES:
        os.environ[name] = "1"
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: the environment variables still apply to later loads
        return
    global _LIMITS  # keep the limiter alive for the life of the worker
    _LIMITS = threadpool_limits(limits=1)


_LIMITS: Any = None


def init_worker(parent_pid: int | None = None, interval: float = 0.5) -> None:
    """Start a pool worker: pin BLAS threads to 1 and, given ``parent_pid``, leave as soon as
    that process has ended.

    A process pool's workers wait for work on a pipe the workers themselves hold open, so
    when the process that owns the pool is killed (``kill -9``) they would wait forever, each
    holding its memory (and keeping the forkserver alive). A daemon thread checks every
    ``interval`` seconds whether the owner still exists and ends the worker when it does not;
    on Linux the kernel also kills it when the fork server it came from exits
    (:mod:`splitscope.features.worker_exit`).
    """
    pin_blas_threads()
    if parent_pid is not None:
        exit_with_owner(parent_pid, interval)


FORK_SERVER_PRELOAD = ["__main__", "splitscope.features.worker_start"]
"""Modules the fork server imports before forking workers (``__main__`` is multiprocessing's
own default)."""


def _default_start_method() -> str:
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def start_fork_server() -> bool:
    """Start the process pools' fork server now, in the background, with the extraction code
    preloaded (:mod:`splitscope.features.worker_start`), so that a pool created later forks
    ready workers at once. The scan calls it before building the manifest of a cold scan,
    which overlaps the server's start and imports. Returns False where pools do not use a
    fork server (then nothing is started). A server already running is kept as it is."""
    if _default_start_method() != "forkserver":
        return False
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(FORK_SERVER_PRELOAD)
    from multiprocessing import forkserver

    forkserver.ensure_running()
    return True


class SerialExecutor:
    """Runs every chunk in this process, in order. For small inputs, debugging and tests.
    Like a pool's worker (:data:`BLAS_THREAD_VARIABLES`), a chunk runs on one BLAS/OpenMP
    thread: one worker is one busy thread, and the chunk's numbers do not depend on the
    executor."""

    workers = 1

    def map(
        self, fn: Callable[[Any], Any], chunks: Iterable[tuple[Hashable, Any]]
    ) -> Iterator[tuple[Hashable, Any]]:
        from threadpoolctl import ThreadpoolController

        pools = None  # the pools loaded when the first chunk comes
        for chunk_id, payload in chunks:
            if pools is None:
                pools = ThreadpoolController()
            with pools.limit(limits=1):
                result = fn(payload)
            yield chunk_id, result

    def __repr__(self) -> str:
        return "SerialExecutor()"


class ProcessExecutor:
    """Runs chunks in a pool of worker processes on this machine.

    Parameters
    ----------
    workers : int, optional
        Number of worker processes; default: every core (:func:`default_workers`).
    max_in_flight : int, optional
        Chunks submitted but not yet consumed by the caller; bounds memory (each finished chunk
        waits in the parent until the caller takes it). Default: ``2 * workers``.
    start_method : str, optional
        ``multiprocessing`` start method; default ``forkserver`` where available (workers do
        not inherit the parent's threads, e.g. a progress bar's), else ``spawn``. The fork
        server preloads the extraction code, so its workers start without importing it
        (:func:`start_fork_server`).

    Notes
    -----
    Every worker starts with :func:`init_worker`: BLAS threads pinned to 1, and a watch that
    ends the worker if this process is killed. When a worker dies, the chunks in flight that
    did not finish run again one at a time in a fresh pool; one whose worker dies again
    yields :class:`ChunkFailed`. A worker may die while the caller holds a result, so that the
    next submission is refused: that chunk never ran and goes to the fresh pool like any other.
    The pool lives for one ``map`` call and is shut down when the iteration ends, is closed
    early, or raises (pending chunks are cancelled), so an interrupted caller leaves no workers
    behind.
    """

    def __init__(
        self,
        workers: int | None = None,
        *,
        max_in_flight: int | None = None,
        start_method: str | None = None,
    ) -> None:
        workers = default_workers() if workers is None else int(workers)
        if workers < 1:
            raise InputError(f"workers must be at least 1; got {workers}")
        self.workers = workers
        self.max_in_flight = max(workers, int(max_in_flight or 2 * workers))
        if start_method is None:
            start_method = _default_start_method()
        self.start_method = start_method

    def _pool(self) -> ProcessPoolExecutor:
        if self.start_method == "forkserver":  # a server started now preloads the workers' code
            multiprocessing.get_context("forkserver").set_forkserver_preload(FORK_SERVER_PRELOAD)
        return ProcessPoolExecutor(
            max_workers=self.workers, mp_context=multiprocessing.get_context(self.start_method),
            initializer=init_worker, initargs=(os.getpid(),)
        )

    def map(
        self, fn: Callable[[Any], Any], chunks: Iterable[tuple[Hashable, Any]]
    ) -> Iterator[tuple[Hashable, Any]]:
        pool = self._pool()
        pending: dict[Future, tuple[Hashable, Any]] = {}
        source = iter(chunks)
        exhausted = False
        try:
            while True:
                broken = False
                while not exhausted and len(pending) < self.max_in_flight:
                    try:
                        item = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    try:
                        pending[pool.submit(fn, item[1])] = item
                    except BrokenProcessPool:  # a worker died since the last wait: the chunk
                        source = itertools.chain([item], source)  # goes to the fresh pool
                        broken = True
                        break
                if not pending and not broken:
                    break
                if not broken:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    broken = any(isinstance(f.exception(), BrokenProcessPool) for f in done)
                if broken:
                    # a worker died: every chunk in flight fails with the pool; each one that
                    # did not finish is run again, alone, in a fresh pool (a chunk the broken
                    # pool refused never ran, and goes to the fresh pool as usual)
                    wait(pending)
                    lost = []
                    for future in sorted(pending, key=lambda f: str(pending[f][0])):
                        chunk_id, payload = pending[future]
                        if isinstance(future.exception(), BrokenProcessPool):
                            lost.append((chunk_id, payload))
                        else:
                            yield chunk_id, future.result()
                    pending.clear()
                    _discard(pool)
                    pool = self._pool()
                    for chunk_id, payload in lost:
                        try:
                            result = pool.submit(fn, payload).result()
                        except BrokenProcessPool as exc:
                            _discard(pool)
                            pool = self._pool()
                            result = ChunkFailed(str(chunk_id), f"{type(exc).__name__}: {exc}")
                        yield chunk_id, result
                    continue
                for future in sorted(done, key=lambda f: str(pending[f][0])):
                    chunk_id, _ = pending.pop(future)
                    yield chunk_id, future.result()
        finally:
            for future in pending:
                future.cancel()
            pool.shutdown(wait=True, cancel_futures=True)

    def __repr__(self) -> str:
        return f"ProcessExecutor(workers={self.workers}, max_in_flight={self.max_in_flight})"


def _discard(pool: ProcessPoolExecutor) -> None:
    """Shut down a pool one of whose workers died. The pool's manager thread sends the other
    workers SIGTERM and then joins each; a listed worker still alive after it (seen about once
    in six runs of a crashing scan on a busy 2-core host, Python 3.11: the join waited on a
    worker that had not ended) holds that join, and ``shutdown`` with it, forever. Every
    worker still listed is killed first, so each join returns."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(Exception):  # already gone or never started
            process.kill()
    pool.shutdown(wait=True, cancel_futures=True)


ENGINES = ("process", "dask")


def make_executor(workers: int | None = None, *, engine: str = "process",
                  scheduler: str | None = None) -> Executor:
    """The executor for ``workers``: with ``engine="process"`` serial for 1, a process pool
    otherwise (default: all cores); with ``engine="dask"`` a
    :class:`~splitscope.features.dask_executor.DaskExecutor` connected to ``scheduler``, or
    on a local cluster of ``workers`` processes (close it when done)."""
    if engine not in ENGINES:
        raise InputError(f"executor {engine!r} unknown; use one of {', '.join(ENGINES)}")
    if workers is not None and int(workers) < 1:
        raise InputError(f"workers must be at least 1; got {workers}")
    if engine == "dask":
        from splitscope.features.dask_executor import DaskExecutor

        return DaskExecutor(scheduler=scheduler, workers=None if scheduler else workers)
    if scheduler is not None:
        raise InputError("a scheduler address (--scheduler) needs the dask executor "
                         "(--executor dask)")
    workers = default_workers() if workers is None else int(workers)
    return SerialExecutor() if workers == 1 else ProcessExecutor(workers)


def executor_for(engine: str = "process", workers: int | None = None,
                 scheduler: str | None = None) -> Executor | None:
    """The executor of the ``--executor``/``--workers``/``--scheduler`` options: ``None`` for
    the process pool (the scan chooses it from ``workers``), else a
    :class:`~splitscope.features.dask_executor.DaskExecutor` (the caller closes it)."""
    if workers is not None and int(workers) < 1:
        raise InputError(f"--workers must be at least 1; got {workers}")
    if engine == "process" and scheduler is None:
        return None
    return make_executor(workers, engine=engine, scheduler=scheduler)
