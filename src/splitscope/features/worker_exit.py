"""Worker processes end when the process that owns their pool dies.

A pool's workers wait for work on a queue whose ends they hold themselves, so a ``kill -9`` of
the owner does not end them: the scan's process pool would wait forever, joblib/loky's (the
provenance fits) until its idle timeout (300 s), each holding its memory and the pipes that
keep the resource trackers alive. Each worker's initializer calls :func:`exit_with_owner`,
which sets two guards:

- on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the worker as soon as its
  parent exits. The kernel sends it when the *thread* that forked the worker ends, so it is set
  only where that thread lives as long as the pool: a fork server (single-threaded, and it
  exits when its owner does) or an owner that starts its workers from its main thread;
- everywhere, a daemon thread that checks every ``interval`` seconds whether the owner still
  exists and ends the worker when it does not (also a zombie owner counts as gone).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

__all__ = ["exit_with_owner", "main_thread", "process_gone"]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def main_thread() -> bool:
    """Whether the calling thread is the main thread (a pool started from it may ask for the
    parent-death signal: that thread lives as long as the process)."""
    return threading.current_thread() is threading.main_thread()


def process_gone(pid: int) -> bool:
    """True when process ``pid`` has ended (also when it is a zombie waiting to be reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # exists, owned by someone else
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def _watch(pid: int, interval: float) -> None:
    while not process_gone(pid):
        time.sleep(interval)
    os._exit(1)


def _parent_death_signal() -> bool:
    """Ask the kernel to SIGKILL this process when its parent exits (Linux); False where the
    call is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def exit_with_owner(owner_pid: int, interval: float = 0.5,
                    owner_main_thread: bool = False) -> None:
    """Make this worker process end when process ``owner_pid`` ends (module docstring).

    ``owner_main_thread``: the owner starts its workers from its main thread, so the
    parent-death signal is safe when the owner is the parent; when the parent is another
    process (a fork server) it is always set.
    """
    owner_pid = int(owner_pid)
    parent = os.getppid()
    if (parent != owner_pid or owner_main_thread) and _parent_death_signal() \
            and os.getppid() != parent:
        os._exit(1)  # the parent died before the signal was asked for
    threading.Thread(target=_watch, args=(owner_pid, interval), daemon=True,
                     name="splitscope-owner-watch").start()
