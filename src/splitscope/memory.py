"""Memory a finished stage no longer uses, given back to the operating system.

A stage's arrays and tables are freed when it ends, but the C allocator keeps freed heap pages
(in the main heap and in each thread's arena) for reuse, so every later stage of an audit
started from the earlier stages' high-water mark. :func:`trim_heap` asks the allocator to return
them (glibc's ``malloc_trim``; nothing elsewhere). This module depends on no layer, so every
package can use it."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Iterator

__all__ = ["frozen_heap", "trim_heap"]


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Leave the objects alive when a run starts (imported modules, the caller's data) out of
    the garbage collections of :func:`trim_heap` while it runs (``gc.freeze``): each pass then
    walks only what the run created. With about 317,000 objects alive before an audit, a pass
    took 0.14 s and 2 ms frozen; an audit makes nine. They are collectable again afterwards
    (``gc.unfreeze``); nothing the run created is left out, so as much memory is released."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's ``malloc_trim``, or ``None`` where the C library has none (musl, macOS,
    Windows)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Collect garbage cycles, then return the allocator's free pages to the operating system.

    Returns whether the allocator could be asked (glibc). Nothing that is still referenced is
    touched, so no result changes; it costs a pass over the heap (milliseconds to a second).
    """
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
