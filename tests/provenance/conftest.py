"""Fixtures of the provenance tests: one demo release and its scan per session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def demo_scan(tmp_path_factory):
    """The demo release (seed 0, train and test: the provenance records pinned in these tests
    are those of that release) scanned once, with its planted-relations table."""
    import pandas as pd

    from splitscope.datasets import make_demo
    from splitscope.datasets.demo import DEMO_GROUP_REGEX
    from splitscope.features.scanning import scan

    base = tmp_path_factory.mktemp("demo")
    root = make_demo(base / "demo", seed=0, n_val=0)
    sc = scan(root, base / "ws", group_regex=DEMO_GROUP_REGEX, progress=False, workers=1)
    planted = pd.read_csv(root / "planted.csv", dtype=str, keep_default_na=False)
    return sc, planted, root


@pytest.fixture
def fold_maps(monkeypatch):
    """``(calls, jobs)`` of every :func:`splitscope.provenance.stats.map_folds` the test makes
    through :func:`~splitscope.provenance.stats.run_steps` (the calls still run)."""
    from splitscope.provenance import stats

    maps: list[tuple[int, int]] = []
    real = stats.map_folds

    def counted(func, tasks, jobs=1):
        maps.append((len(tasks), jobs))
        return real(func, tasks, jobs)

    monkeypatch.setattr(stats, "map_folds", counted)
    return maps
