"""``kill -9`` of the process that owns a worker pool leaves no worker behind: the scan's
process pool (forked from the fork server) and joblib/loky's pool of the provenance fits, whose
workers would otherwise wait for loky's idle timeout (300 s)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_corpus import image

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads the process tree from /proc")

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def _soak_helpers():
    """The process-tree helpers of ``benchmarks/soak_kill.py`` (descendants and liveness from
    /proc), which counts orphans the same way."""
    from benchmark_module import load_benchmark

    module = load_benchmark("soak_kill")
    return module._children, module._alive


_descendants, _alive = _soak_helpers()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return ""


def _kill_when(proc: subprocess.Popen, ready, limit: float = 90.0) -> set[int]:
    """Watch ``proc``'s descendants until ``ready(seen)``; SIGKILL ``proc``; every descendant
    seen. Fails when ``proc`` ends first."""
    seen: set[int] = set()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        seen |= _descendants(proc.pid)
        if ready(seen):
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"the run ended before its workers were seen: {proc.returncode}"
    seen |= _descendants(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return seen


def _survivors(seen: set[int], grace: float = 5.0) -> list[str]:
    until = time.monotonic() + grace
    while time.monotonic() < until and any(_alive(p) for p in seen):
        time.sleep(0.1)
    left = [p for p in seen if _alive(p)]
    found = [f"{p}: {_cmdline(p)[:120]}" for p in left]
    for p in left:  # never leave them to the rest of the suite
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return found


def _loky_workers(seen: set[int]) -> list[int]:
    return [p for p in seen if "loky" in _cmdline(p)]


_FOLDS_SCRIPT = r"""
import sys, time
from splitscope.provenance.stats import map_folds

def slow(i):
    time.sleep(60)
    return i

map_folds(slow, [(i,) for i in range(4)], jobs=2)
"""


@pytest.mark.slow
def test_loky_fold_workers_end_with_a_killed_owner():
    proc = subprocess.Popen([sys.executable, "-c", _FOLDS_SCRIPT], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = _kill_when(proc, lambda seen: len(_loky_workers(seen)) >= 2)
    assert len(_loky_workers(seen)) >= 2
    assert _survivors(seen) == []


_AUDIT_SCRIPT = r"""
import sys
import splitscope.provenance.stats as stats
stats.PARALLEL_CELLS = stats.PARALLEL_CELLS_LINEAR = 1  # every fit in the loky pool
from splitscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_kill_9_of_an_audit_leaves_no_worker(tmp_path):
    """The audit's scan runs in the process pool and its provenance fits in loky's pool (made
    to start on a small release); the audit is killed once loky workers run."""
    root = tmp_path / "release"
    for i in range(48):
        folder = root / ("train" if i % 3 else "test") / ("a" if i % 2 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        image(i, w=48, h=40).save(folder / f"x_{i:02d}.png")
    proc = subprocess.Popen(
        [sys.executable, "-c", _AUDIT_SCRIPT, "audit", str(root), "--out", str(tmp_path / "out"),
         "--workers", "2", "--layers", "provenance"],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = _kill_when(proc, lambda seen: len(_loky_workers(seen)) >= 2)
    assert len(seen) >= 4  # the scan's fork server and workers, loky's workers
    assert _survivors(seen) == []
