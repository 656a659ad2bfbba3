"""The per-file stage on a Dask cluster (``[distributed]`` extra).

:class:`DaskExecutor` implements the :class:`~splitscope.features.executors.Executor` contract
over ``dask.distributed``: one task per chunk (``Client.submit``), a bounded number in flight,
results taken with ``as_completed``. The scanning process still commits every result to the
workspace itself, so a scan on a cluster writes the same shards and the same result as one on
a process pool.

A worker that dies while it runs a chunk (killed, out of memory, a crash in a decoder) makes
the scheduler give up that chunk's task (``KilledWorker``). The executor then does what the
process pool does: when the chunks in flight have finished, each lost chunk runs once more,
alone; one whose worker dies again yields :class:`~splitscope.features.executors.ChunkFailed`
and the scan records its files as ``worker_crashed``. On a cluster this executor starts
itself (a ``LocalCluster``) the scheduler gives a task up at the first death
(``distributed.scheduler.allowed-failures`` = 0), so the retry here is the only one; a
cluster it connects to keeps its own setting and retries that often first.

The files are read by the workers: every worker must see them under the paths of the
manifest (a shared filesystem). An exception raised by the chunk function itself propagates,
as with the process pool.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, Self

from splitscope.errors import InputError
from splitscope.features.executors import BLAS_THREAD_VARIABLES, ChunkFailed, default_workers

__all__ = ["INSTALL_HINT", "DaskExecutor", "import_distributed"]

INSTALL_HINT = ("the Dask executor needs the [distributed] extra: "
                "pip install 'splitscope[distributed]'")


def import_distributed():
    """The ``distributed`` module, or :class:`InputError` with the install hint."""
    try:
        import distributed
    except ImportError as exc:
        raise InputError(f"{INSTALL_HINT} ({exc})") from None
    return distributed


class DaskExecutor:
    """Runs chunks as tasks on a Dask cluster.

    Parameters
    ----------
    client : distributed.Client, optional
        A client of a running cluster (e.g. of ``dask_jobqueue.SLURMCluster`` or a
        Kubernetes cluster); it stays open after the executor is closed.
    scheduler : str, optional
        Address of a running scheduler (``tcp://host:8786``); the executor connects to it and
        closes the connection when closed. Ignored with ``client``.
    workers : int, optional
        With neither ``client`` nor ``scheduler``: a ``distributed.LocalCluster`` of this many
        worker processes with one thread each (default: every core), started on first use and
        shut down when the executor is closed.
    max_in_flight : int, optional
        Chunks submitted and not yet taken by the caller (default ``2 × workers``).
    connect_timeout : str
        How long to try reaching ``scheduler`` before :class:`InputError` (default 30 s).

    Notes
    -----
    Use it as a context manager, or call :meth:`close`. Every worker of a cluster it starts
    has its BLAS/OpenMP pools pinned to one thread (:data:`~splitscope.features.executors.
    BLAS_THREAD_VARIABLES`); on a cluster it connects to, that is the cluster's setting.
    """

    def __init__(self, client: Any = None, *, scheduler: str | None = None,
                 workers: int | None = None, max_in_flight: int | None = None,
                 connect_timeout: str = "30s") -> None:
        import_distributed()
        if workers is not None and int(workers) < 1:
            raise InputError(f"workers must be at least 1; got {workers}")
        self._client = client
        self._owns_client = client is None
        self._cluster = None
        self.scheduler = None if client is not None else scheduler
        self._requested_workers = None if workers is None else int(workers)
        self._max_in_flight = None if max_in_flight is None else int(max_in_flight)
        self.connect_timeout = connect_timeout

    # -- the cluster --------------------------------------------------------------------------

    @property
    def client(self):
        """The ``distributed.Client`` (connecting, or starting the local cluster, on first
        use)."""
        if self._client is None:
            distributed = import_distributed()
            if self.scheduler is not None:
                try:
                    self._client = distributed.Client(self.scheduler, timeout=self.connect_timeout)
                except (OSError, TimeoutError) as exc:
                    raise InputError(f"cannot reach the Dask scheduler at {self.scheduler}: "
                                     f"{exc}") from None
            else:
                import dask

                n = self._requested_workers or default_workers()
                with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
                    self._cluster = distributed.LocalCluster(
                        n_workers=n, threads_per_worker=1, processes=True,
                        dashboard_address=":0", silence_logs=50,
                        env={name: "1" for name in BLAS_THREAD_VARIABLES})
                self._client = distributed.Client(self._cluster)
        return self._client

    @property
    def search_client(self):
        """The client the audit's NCC search is partitioned over (the same cluster)."""
        return self.client

    @property
    def workers(self) -> int:
        """Worker threads of the cluster (the requested count before a local one starts)."""
        if self._client is None and self.scheduler is None:
            return self._requested_workers or default_workers()
        info = self.client.scheduler_info()
        threads = sum(int(w.get("nthreads", 1)) for w in info.get("workers", {}).values())
        return max(1, threads)

    @property
    def max_in_flight(self) -> int:
        return max(1, self._max_in_flight or 2 * self.workers)

    def close(self) -> None:
        """Close the connection and shut down a cluster this executor started."""
        if self._client is not None and self._owns_client:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                self._cluster.close()
            self._cluster = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the executor contract ----------------------------------------------------------------

    def map(
        self, fn: Callable[[Any], Any], chunks: Iterable[tuple[Hashable, Any]]
    ) -> Iterator[tuple[Hashable, Any]]:
        distributed = import_distributed()
        client = self.client
        limit = self.max_in_flight
        pending: dict[Any, tuple[Hashable, Any]] = {}
        done = distributed.as_completed()
        lost: deque[tuple[Hashable, Any]] = deque()
        source = iter(chunks)
        exhausted = False
        try:
            while True:
                # lost chunks wait until nothing else runs, then go one at a time, alone
                while not lost and not exhausted and len(pending) < limit:
                    try:
                        chunk_id, payload = next(source)
                    except StopIteration:
                        exhausted = True
                        break
                    future = client.submit(fn, payload, pure=False)
                    pending[future] = (chunk_id, payload)
                    done.add(future)
                if not pending:
                    if not lost:
                        break
                    chunk_id, payload = lost.popleft()
                    yield chunk_id, self._run_alone(client, fn, chunk_id, payload, distributed)
                    continue
                future = next(done)
                chunk_id, payload = pending.pop(future)
                if future.status == "finished":
                    result = future.result()
                    future.release()
                    yield chunk_id, result
                    continue
                exc = future.exception()
                future.release()
                if isinstance(exc, distributed.KilledWorker):
                    lost.append((chunk_id, payload))
                    continue
                raise exc
        finally:
            for future in pending:
                future.cancel()

    @staticmethod
    def _run_alone(client, fn, chunk_id, payload, distributed) -> Any:
        future = client.submit(fn, payload, pure=False)
        try:
            distributed.wait(future)
            if future.status == "finished":
                return future.result()
            exc = future.exception()
            if isinstance(exc, distributed.KilledWorker):
                return ChunkFailed(str(chunk_id), f"{type(exc).__name__}: {exc}")
            raise exc
        finally:
            future.release()

    def __repr__(self) -> str:
        where = self.scheduler or ("client" if not self._owns_client else "LocalCluster")
        return f"DaskExecutor({where}, workers={self.workers})"
