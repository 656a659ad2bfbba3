"""The run's ``workers`` (``--workers N``) as a bound on the cores a run keeps busy: at most N
threads or processes compute at a time, in the scan and in every layer; ``None`` leaves every
core to the run.

Pools that splitscope starts itself (worker processes, search threads, fold workers) take N
from their caller. :func:`blas_threads` bounds the pools that numerical libraries start on
their own (BLAS, OpenMP), which no caller sees: a matrix product would otherwise use every
core whatever N says. This module depends on no layer, so every package can use it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

from splitscope.errors import InputError

__all__ = ["blas_threads", "blas_within_workers", "check_workers"]

T = TypeVar("T")


def check_workers(workers: int | None) -> int | None:
    """``workers`` as an int of at least 1, or ``None`` (every core)."""
    if workers is None:
        return None
    n = int(workers)
    if n < 1:
        raise InputError(f"workers must be at least 1; got {workers}")
    return n


#: modules whose import loads a BLAS or OpenMP pool that the layers use: loaded before a limit
#: is set, since a limit reaches only the pools loaded when it is set (scipy's own OpenBLAS,
#: scikit-learn's OpenMP)
POOL_MODULES = ("scipy.linalg", "sklearn.utils._openmp_helpers")


def blas_threads(workers: int | None) -> AbstractContextManager:
    """Context in which the BLAS and OpenMP pools (threadpoolctl) run at most ``workers``
    threads; ``None`` leaves them as they are. The pools of :data:`POOL_MODULES` are loaded
    first, so that a layer that loads them later in the run is bounded too. The limits are
    process-wide and restored on exit, so two contexts open at once in different threads undo
    each other: a bounded run does one thing at a time (see :func:`splitscope.core.run.audit`)."""
    n = check_workers(workers)
    if n is None:
        return nullcontext()
    import importlib

    from threadpoolctl import threadpool_limits

    for name in POOL_MODULES:
        importlib.import_module(name)
    return threadpool_limits(limits=n)


def blas_within_workers(func: Callable[..., T]) -> Callable[..., T]:
    """Decorator: ``func`` runs inside :func:`blas_threads` of its own ``workers`` argument
    (for a function whose ``workers`` keyword bounds its whole work)."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def bounded(*args: Any, **kwargs: Any) -> T:
        workers = signature.bind_partial(*args, **kwargs).arguments.get("workers")
        with blas_threads(workers):
            return func(*args, **kwargs)

    return bounded
