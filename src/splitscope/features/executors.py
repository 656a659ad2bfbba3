"""What every executor shares (:mod:`splitscope.features.executor` on this machine,
:mod:`splitscope.features.dask_executor` on a cluster): the :class:`Executor` contract, the
:class:`ChunkFailed` marker, the BLAS thread variables a worker pins, and the default worker
count."""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

BLAS_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


@dataclass(frozen=True)
class ChunkFailed:
    """Yielded in place of a chunk's result when its worker process died twice."""

    chunk_id: str
    detail: str


@runtime_checkable
class Executor(Protocol):
    """Runs a function over chunks; see the module docstring for the contract."""

    workers: int

    def map(
        self, fn: Callable[[Any], Any], chunks: Iterable[tuple[Hashable, Any]]
    ) -> Iterator[tuple[Hashable, Any]]:
        """Yield ``(chunk_id, fn(payload))`` for every ``(chunk_id, payload)``, in any order."""
        ...


def default_workers() -> int:
    """All cores this process may use (the CPU affinity mask where the OS exposes it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
