"""``workers=1`` means one busy thread through a whole audit: the scan, every layer's searches,
fits, bootstraps and matrix products, with no layer running beside another.

A sampler thread reads, every :data:`INTERVAL` seconds, the CPU time of each thread of this
process and of each child process; between two readings (a window) a thread or process that
gained more than :data:`BUSY_MS` milliseconds, and more than :data:`BUSY_SHARE` of the window,
was burning CPU. The sampler leaves itself out; the interpreter's idle helper threads gain
nothing. Windows with two of them busy, beyond the odd hand-over (:data:`HAND_OVER`), are a
run that used more than its one worker."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Self

import numpy as np
import pandas as pd
import pytest

from splitscope.records import LayerResult

psutil = pytest.importorskip("psutil")

#: seconds between two readings
INTERVAL = 0.02
#: share of windows in which a hand-over may show two busy (a caller and the worker it starts)
HAND_OVER = 0.02
#: CPU milliseconds a thread or process must gain in a window to count as busy ...
BUSY_MS = 5.0
#: ... and the share of the window they must make up (a long window, when the sampler waited
#: for the interpreter, is not filled by a helper's few milliseconds)
BUSY_SHARE = 0.25


def _thread_seconds(tid: int, fallback: float) -> float:
    """CPU seconds of thread ``tid`` of this process: from ``schedstat`` (nanoseconds) where
    the kernel keeps it, else ``fallback`` (psutil's user + system time, in clock ticks)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return fallback


def _native_name(tid: int) -> str:
    """The kernel's name of thread ``tid`` (what a library named its pool thread), marked as
    native: not a Python thread."""
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f"native:{f.read().strip()}"
    except OSError:
        return "native"


class CpuSampler:
    """The busy threads and child processes of this process, window by window, while the
    ``with`` block runs: ``windows`` holds ``(seconds, {label: CPU milliseconds})`` for each
    window, the labels of what was busy only."""

    def __init__(self, interval: float = INTERVAL):
        self.interval = interval
        self.windows: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _reading(self, me: int, process) -> dict[str, float]:
        names = {t.native_id: t.name for t in threading.enumerate()}
        out = {}
        for t in process.threads():
            if t.id != me:
                label = f"thread {names.get(t.id) or _native_name(t.id)} {t.id}"
                out[label] = _thread_seconds(t.id, t.user_time + t.system_time)
        for child in process.children(recursive=True):
            try:
                times = child.cpu_times()
            except psutil.Error:  # ended since it was listed
                continue
            out[f"process {child.pid}"] = times.user + times.system
        return out

    def _run(self) -> None:
        me = threading.get_native_id()
        process = psutil.Process()
        before, then = self._reading(me, process), time.perf_counter()
        while not self._stop.wait(self.interval):
            now, now_t = self._reading(me, process), time.perf_counter()
            length = now_t - then
            gained = {k: 1000 * (v - before.get(k, v)) for k, v in now.items()}
            floor = max(BUSY_MS, 1000 * BUSY_SHARE * length)
            self.windows.append((length, {k: round(ms, 1) for k, ms in gained.items()
                                          if ms > floor}))
            before, then = now, now_t

    def crowded(self, most: int) -> list[tuple[float, dict[str, float]]]:
        """Windows with more than ``most`` busy threads and processes."""
        return [w for w in self.windows if len(w[1]) > most]

    def busy(self) -> int:
        """Windows in which something was busy."""
        return sum(1 for _, busy in self.windows if busy)


def _spin(seconds: float) -> None:
    """Burn CPU in C with the GIL released (sorting), so that two of these run at once."""
    rng = np.random.default_rng(0)
    data = rng.random(200_000)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        np.sort(data, kind="stable")


@pytest.mark.slow
def test_the_sampler_sees_two_threads_busy_at_once():
    """The check below can fail: two threads sorting side by side fill common windows."""
    with CpuSampler() as sampler:
        threads = [threading.Thread(target=_spin, args=(1.0,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(sampler.crowded(1)) > HAND_OVER * len(sampler.windows), sampler.windows


@pytest.mark.slow
def test_one_worker_keeps_one_thread_busy_through_the_audit(tmp_path: Path, monkeypatch):
    from splitscope.core.options import AuditOptions
    from splitscope.core.run import audit
    from splitscope.datasets import DEMO_GROUP_REGEX, make_demo
    from splitscope.datasets.simulated_model import simulate_model_outputs
    from splitscope.relations import ncc_index, pruned

    # the NCC searches take the indexed path (its query-chunk threads, its saved index), which
    # the demo is too small for
    monkeypatch.setattr(pruned, "MIN_PAIRS", 0)
    monkeypatch.setattr(ncc_index, "INDEX_MIN_PAIRS", 0)

    root = make_demo(tmp_path / "data", seed=0, n_train=70, n_test=45)
    model = simulate_model_outputs(root, tmp_path / "model", seed=0)
    with CpuSampler() as sampler:  # every layer that applies: predictions, maps, dihedral
        options = AuditOptions.from_flags(workers=1, group_regex=DEMO_GROUP_REGEX,
                                          dihedral=True, score_kind="probability",
                                          progress=False)
        result = audit(root, options, out_dir=tmp_path / "audit",
                       predictions=model["predictions"],
                       attribution_maps=model["attribution_maps"],
                       attribution_masks=model["attribution_masks"])
    failed = [layer["layer"] for layer in result.document["layers"]
              if str(layer.get("reason") or "").startswith("layer error")]
    assert not failed
    said = [r.get("details", {}).get("notes", {}).get("ncc_search", {}).get("index")
            for r in result.document["records"]]
    assert "built and saved" in said
    crowded = sampler.crowded(1)
    # a hand-over (the caller pickling work while its one worker process starts) may overlap
    # for a window; a second pool would fill many (the sampler's own test: every window)
    assert len(crowded) <= HAND_OVER * len(sampler.windows), (
        f"{len(crowded)} of {len(sampler.windows)} windows had more than one thread or process "
        f"busy: {crowded[:10]}")
    assert sampler.busy() >= 20  # the sampler watched the audit's work


def _context(tmp_path: Path, workers: int | None) -> SimpleNamespace:
    """What the layers read of an audit's context, with the run's ``workers``."""
    from splitscope.boundary import Boundary, Population
    from splitscope.core.options import AuditOptions

    experiment = tmp_path / "experiment"
    (experiment / "predictions").mkdir(parents=True)
    for name in ("experiment.json", "runs.csv"):
        (experiment / name).write_text("")
    boundary = Boundary(Population("test", np.arange(2)), Population("train", np.arange(2, 4)))
    contaminated = pd.DataFrame({"boundary": [boundary.name], "predicate": ["sha256"],
                                 "row": [0]})
    duplicates = SimpleNamespace(status="completed",
                                 result=LayerResult([], {"contaminated": contaminated}))
    return SimpleNamespace(
        options=AuditOptions.from_flags(workers=workers), scan=object(), scans={}, executor=None,
        manifest=pd.DataFrame({"row": np.arange(4), "path": list("abcd")}),
        boundaries=[boundary], split_boundaries=[boundary], lists_dir=tmp_path / "lists",
        paths={"predictions": experiment / "predictions", "attribution_maps": "maps",
               "attribution_masks": "masks"},
        outcomes={"duplicates": duplicates}, record_inputs=[])


#: each layer, and the function (module, name) that it hands the run's ``workers`` to
HANDED_TO = [
    ("splitscope.groups.layer", "GroupsLayer", "splitscope.groups.layer", "audit_groups"),
    ("splitscope.provenance.layer", "ProvenanceLayer", "splitscope.provenance.layer",
     "audit_provenance"),
    ("splitscope.provenance.layer", "QualityLayer", "splitscope.provenance.layer",
     "audit_quality"),
    ("splitscope.evaluation.layer", "EvaluationLayer", "splitscope.evaluation.layer",
     "audit_predictions"),
    ("splitscope.evaluation.layer", "AttributionLayer", "splitscope.evaluation.attribution",
     "audit_attribution"),
    ("splitscope.experiments.layer", "ExperimentsLayer", "splitscope.experiments.layer",
     "audit_experiment"),
]


@pytest.mark.parametrize("workers", [1, 3, None])
@pytest.mark.parametrize(("layer_module", "layer", "module", "function"), HANDED_TO,
                         ids=[h[1] for h in HANDED_TO])
def test_every_layer_hands_the_runs_workers_down(tmp_path, monkeypatch, workers, layer_module,
                                                 layer, module, function):
    import importlib

    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs.get("workers", "not given"))
        result = LayerResult()
        return (result, {}) if function == "audit_attribution" else result

    monkeypatch.setattr(importlib.import_module(module), function, spy)
    getattr(importlib.import_module(layer_module), layer)().run(_context(tmp_path, workers))
    assert seen == [workers]


@pytest.mark.parametrize("workers", [1, None])
def test_the_duplicate_layers_hand_the_runs_workers_to_their_searches(tmp_path, workers):
    from splitscope.relations.layer import _duplicates_options

    assert _duplicates_options(_context(tmp_path, workers))["workers"] == workers


@pytest.mark.parametrize(("module", "function"), [
    *[(h[2], h[3]) for h in HANDED_TO],
    ("splitscope.relations.duplicates", "audit_duplicates")])
def test_each_layers_entry_bounds_its_blas_pools_by_its_workers(module, function):
    """The entry functions take ``workers`` (default: every core) and run inside
    :func:`splitscope.threads.blas_threads` of it."""
    import importlib
    import inspect

    entry = getattr(importlib.import_module(module), function)
    assert inspect.signature(entry).parameters["workers"].default is None
    assert hasattr(entry, "__wrapped__")  # splitscope.threads.blas_within_workers
