"""Between the audit's stages the thumbnail store's pages leave the resident set and the
allocator's free pages go back to the system, so a stage starts from what is still held."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from audit_helpers import tiny_release

from splitscope.core import run as run_mod
from splitscope.core.options import AuditOptions
from splitscope.core.protocol import AuditContext, register, unregister
from splitscope.features.scanning import Scan
from splitscope.memory import trim_heap
from splitscope.records import AuditRecord, LayerResult


def _anonymous_kib() -> int:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1])
    raise AssertionError("no Anonymous line in smaps_rollup")


def _mapped_rss_kib(path: Path) -> int:
    total, mine = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line
            mine = line.rstrip().endswith(str(path))
        elif mine and head and head[0] == "Rss:":
            total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").is_file() or not trim_heap(),
                    reason="needs glibc's malloc_trim and /proc/self/smaps_rollup (Linux)")
def test_trim_heap_returns_freed_heap_pages():
    # 96 KiB blocks come from the heap (below the allocator's mmap threshold); the last one,
    # kept, pins the top of the heap, so freeing the others returns nothing by itself
    blocks = [np.ones(96 << 7, dtype=np.float64) for _ in range(800)]  # 75 MiB
    last = blocks.pop()
    del blocks
    before = _anonymous_kib()
    assert trim_heap()
    after = _anonymous_kib()
    assert before - after >= 40 << 10, (before, after)
    assert last.sum() == 96 << 7  # what is still referenced is untouched


class _Sees:
    """Records how many times the stage memory had been released when it ran."""

    def __init__(self, name: str, order: int, calls: list):
        self.name, self.order, self.calls = name, order, calls

    def run(self, context) -> LayerResult:
        junk = [bytes(64 << 10) for _ in range(64)]  # something to free when it ends
        return LayerResult([AuditRecord(id=f"{self.name}.seen", layer=self.name,
                                        title="releases before it", unit="call",
                                        numerator=len(self.calls),
                                        denominator=len(junk))])


def test_memory_is_released_after_the_scan_and_after_every_layer(tmp_path, monkeypatch):
    calls: list = []
    release = run_mod.release_stage_memory
    frozen: list = []
    def counted(context):
        calls.append(context)
        frozen.append(gc.get_freeze_count())
        release(context)

    monkeypatch.setattr(run_mod, "release_stage_memory", counted)
    layers = [_Sees("first_toy", 36, calls), _Sees("second_toy", 37, calls)]
    for layer in layers:
        register(layer)
    try:
        rel = tiny_release(tmp_path / "rel", seed=0, sizes=(("train", 5), ("test", 3)), side=32)
        result = run_mod.audit(rel, AuditOptions.from_flags(
            workers=1, progress=False, layers=[layer.name for layer in layers], transforms=0),
            out_dir=tmp_path / "out")
    finally:
        for layer in layers:
            unregister(layer.name)
    seen = {r["id"]: r["numerator"] for r in result.document["records"]
            if r["id"].endswith(".seen")}
    assert seen == {"first_toy.seen": 1, "second_toy.seen": 2}  # after the scan, the first
    assert len(calls) == 3  # and after the last layer
    assert all(c is calls[0] for c in calls)
    # the collections walk the run's objects: those alive before it are frozen, until it ends
    assert min(frozen) > 0 and gc.get_freeze_count() == 0


def test_a_frozen_heap_still_collects_what_the_run_drops():
    """Inside :func:`frozen_heap` a cycle the run made and dropped is collected, one alive
    before it is not walked; after it, that one is collectable again."""
    import weakref

    from splitscope.memory import frozen_heap

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    gc.collect()
    before = cycle()  # garbage already, but not collected yet
    gc.disable()
    try:
        with frozen_heap():
            assert gc.get_freeze_count() > 0
            made = cycle()
            gc.collect()
            assert made() is None and before() is not None  # frozen: not walked
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert before() is None
    finally:
        gc.enable()


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(),
                    reason="needs /proc/self/smaps (Linux) to read a mapping's resident size")
def test_releasing_stage_memory_drops_the_stores_pages(tmp_path):
    from splitscope.features.workspace import open_thumbnails

    n, size = 1024, 64  # 4 MiB
    path = tmp_path / "thumbnails.npy"
    np.save(path, (np.arange(n * size * size) % 251).astype(np.uint8).reshape(n, size, size))
    store = open_thumbnails(path)
    scan = Scan(manifest=pd.DataFrame({"row": np.arange(n)}), features=pd.DataFrame(),
                thumbnails=store, params=None, workspace=tmp_path, meta={})
    assert int(np.asarray(store).sum(dtype=np.int64)) > 0  # every page read
    assert _mapped_rss_kib(path) >= 4000
    context = AuditContext(scan=scan, boundaries=[], options=None, record_inputs=[],
                           lists_dir=tmp_path)
    run_mod.release_stage_memory(context)
    assert _mapped_rss_kib(path) == 0
    np.testing.assert_array_equal(store[7], np.load(path)[7])  # read back from the cache
