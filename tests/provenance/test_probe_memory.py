"""What the probes hold while their folds run: the columns their row tables keep, the storage
of the within-pool matrix, and what a fold call receives; the results are those of the plain
float64 matrix of every column."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from splitscope.provenance import header_probe
from splitscope.provenance.header_probe import PoolMatrix


def _release(n=300, seed=0):
    """Rows with header fields (one carries the label), image statistics, and columns no
    probe reads (a thumbnail position, a hash, a wide text)."""
    rng = np.random.default_rng(seed)
    label = np.where(rng.random(n) < 0.5, "a", "b")
    fmt = np.where(rng.random(n) < 0.85, np.where(label == "a", "JPEG", "PNG"), "PNG")
    return pd.DataFrame({
        "row": np.arange(n), "path": [f"x/{i}.img" for i in range(n)],
        "label": pd.array(label, dtype="string"),
        "split": pd.array(np.where(np.arange(n) < n * 3 // 4, "train", "test"), dtype="string"),
        "group": pd.array([f"p{i // 3}" for i in range(n)], dtype="string"),
        "format": pd.array(fmt, dtype="string"),
        "width": pd.array(rng.integers(100, 300, n), dtype="Int64"),
        "aspect": rng.random(n) + 0.5,  # not exact in float32
        "file_size": pd.array(rng.integers(1_000, 90_000, n), dtype="Int64"),
        "sha256": [f"{i:064x}" for i in range(n)],
        "thumb_index": np.arange(n),
        "phash": [f"{i:016x}" for i in range(n)],
        "note": ["x" * 200] * n,
    })


def test_pool_matrix_gives_the_float64_rows_bit_for_bit():
    rng = np.random.default_rng(1)
    X = pd.DataFrame({
        "codes": rng.integers(0, 250, 40).astype(float),
        "ratio": rng.random(40),
        "gaps": np.where(rng.random(40) < 0.3, np.nan, rng.integers(0, 9, 40)),
        "big": np.full(40, 2.0 ** 25 + 1),  # an integer float32 cannot hold
        "minus": np.where(rng.random(40) < 0.5, -0.0, 3.5),
    })
    m = PoolMatrix(X)
    assert m.narrow[0].tolist() == [0, 2, 4] and m.narrow[1].dtype == np.float32
    assert m.wide[0].tolist() == [1, 3] and m.wide[1].dtype == np.float64
    full = X.to_numpy(np.float64)
    index = rng.permutation(40)[:25]
    got = m.rows(index)
    assert got.dtype == np.float64
    assert np.array_equal(got, full[index], equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(full[index]))
    for cols in ([3, 1], [4], [2, 0]):
        assert np.array_equal(m.rows(index, cols), full[np.ix_(index, cols)], equal_nan=True)
    assert m.narrow[1].nbytes + m.wide[1].nbytes < full.nbytes


@pytest.mark.parametrize("probe", ["header", "image statistics"])
def test_within_pool_is_that_of_the_float64_matrix(probe, monkeypatch):
    """The compact matrix changes no prediction, importance or interval."""
    from splitscope.features.stats import STATS_COLUMNS
    from splitscope.provenance.image_stats_probe import image_stats_within_pool_steps
    from splitscope.provenance.stats import run_steps

    table = _release()
    rng = np.random.default_rng(2)
    for c in STATS_COLUMNS:
        table[c] = rng.random(len(table)) * (table["label"] == "a").to_numpy(float) \
            + rng.random(len(table))

    def run():
        if probe == "header":
            gen = header_probe.within_pool_steps(table, n_resamples=100, importance_repeats=2)
        else:
            gen = image_stats_within_pool_steps(table, n_resamples=100, importance_repeats=2)
        return run_steps([gen])[0]

    compact = run()
    monkeypatch.setattr(header_probe, "PoolMatrix", lambda X: X.to_numpy(np.float64))
    plain = run()
    assert compact.balanced_accuracy == plain.balanced_accuracy
    pd.testing.assert_frame_equal(compact.predictions, plain.predictions)
    pd.testing.assert_frame_equal(compact.importances, plain.importances)
    pd.testing.assert_frame_equal(compact.single_field, plain.single_field)


def test_fold_calls_receive_the_compact_matrix(monkeypatch):
    """Every within-pool fold call gets the one compact matrix (float32 where exact), not a
    float64 matrix of every row and column."""
    from splitscope.provenance import stats

    sent = []
    real = stats.map_folds

    def record(func, tasks, jobs=1):
        sent.extend(args[0] for fn, args in tasks)
        return real(func, tasks, jobs)

    monkeypatch.setattr(stats, "map_folds", record)
    header_probe.header_probe_within_pool(_release(), n_resamples=50, importance_repeats=1)
    assert len(sent) == 6  # five folds and the single-field trees
    assert all(isinstance(x, PoolMatrix) for x in sent) and len({id(x) for x in sent}) == 1
    m = sent[0]
    assert m.narrow[1].dtype == np.float32 and m.narrow[1].shape[1] >= 2  # format, width, …
    assert m.wide[1].shape[1] == 1  # aspect


def _seen_columns(monkeypatch):
    """Columns of the tables the header probe's step generators are given."""
    seen: dict[str, list] = {"within": [], "cross": []}
    real_within, real_cross = header_probe.within_pool_steps, header_probe.cross_split_steps

    def within(table, **kw):
        seen["within"].append(list(table.columns))
        return (yield from real_within(table, **kw))

    def cross(train, test, **kw):
        seen["cross"].append(list(train.columns) + list(test.columns))
        return (yield from real_cross(train, test, **kw))

    monkeypatch.setattr(header_probe, "within_pool_steps", within)
    monkeypatch.setattr(header_probe, "cross_split_steps", cross)
    return seen


def test_probe_tables_keep_only_the_columns_the_probes_read(monkeypatch):
    from splitscope.provenance.checks import audit_provenance

    seen = _seen_columns(monkeypatch)
    table = _release()
    res = audit_provenance(table, image_stats=False, association=False, partition=False,
                           n_resamples=50, importance_repeats=1)
    assert seen["within"] and seen["cross"]
    for cols in seen["within"] + seen["cross"]:
        assert {"format", "width", "aspect", "label", "group", "row", "path"} <= set(cols)
        assert not {"thumb_index", "phash", "note", "split"} & set(cols)
    within = next(r for r in res.records if r.id.endswith("within_pool"))
    assert within.status == "completed" and within.predicate["params"]["features"] >= 3


def test_partition_rows_keep_only_the_columns_it_reads(monkeypatch):
    from splitscope.provenance import partition
    from splitscope.provenance.checks import audit_provenance

    seen = []
    real = partition.partition_steps

    def steps(features, is_test, *, rows=None, **kw):
        seen.append(list(rows.columns))
        return (yield from real(features, is_test, rows=rows, **kw))

    monkeypatch.setattr(partition, "partition_steps", steps)
    table = _release()
    emb = np.random.default_rng(3).random((len(table), 4)).astype(np.float32)
    audit_provenance(table, header=False, image_stats=False, association=False,
                     embeddings=emb, n_resamples=50)
    assert seen
    for cols in seen:
        assert {"row", "path", "label", "group", "sha256"} <= set(cols)
        assert not {"thumb_index", "phash", "note", "format", "width"} & set(cols)


def _memmap_file(x):
    """The file of the memory map under an array as a worker received it (None: a copy)."""
    while x is not None and not isinstance(x, np.memmap):
        x = getattr(x, "base", None)
    return None if x is None else x.filename


def test_shared_arrays_are_mapped_from_one_folder_and_removed():
    import os

    from splitscope.provenance.stats import shared_arrays, shared_empty

    assert type(shared_empty((1000, 300), np.float32)) is np.ndarray  # outside: plain
    with shared_arrays() as folder:
        big = shared_empty((1000, 300), np.float32)
        small = shared_empty((10, 3), np.float32)
        assert isinstance(big, np.memmap) and os.path.dirname(big.filename) == folder
        assert type(small) is np.ndarray
    assert not os.path.exists(folder)
    with shared_arrays(enabled=False) as folder:
        assert folder is None and type(shared_empty((1000, 300), np.float32)) is np.ndarray


def test_shared_arrays_stay_plain_where_the_folder_has_no_room(monkeypatch):
    """A full ``/dev/shm`` would kill the process on a write: the array stays in memory."""
    import collections
    import shutil

    from splitscope.provenance.stats import shared_arrays, shared_empty

    usage = collections.namedtuple("usage", "total used free")
    with shared_arrays():
        monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(0, 0, 1_000_000))
        assert type(shared_empty((1000, 300), np.float32)) is np.ndarray
        monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(0, 0, 10 ** 12))
        assert isinstance(shared_empty((1000, 300), np.float32), np.memmap)


def test_a_fold_worker_maps_a_shared_array_rather_than_a_copy():
    from splitscope.provenance.stats import map_folds, shared_arrays, shared_empty

    with shared_arrays():
        X = shared_empty((2000, 200), np.float64)
        X[:] = np.arange(X.size, dtype=np.float64).reshape(X.shape)
        got = map_folds(_memmap_file, [(X,), (X[:, :100],)], jobs=2)
    assert got == [X.filename] * 2


def test_probe_matrices_are_shared_with_the_fold_workers(monkeypatch):
    """Inside :func:`shared_arrays`, the within-pool matrix and the partition classifier's
    reordered matrix are what the fold calls get, mapped from the shared folder."""
    from splitscope.provenance import stats
    from splitscope.provenance.checks import audit_provenance

    sent = []
    real = stats.map_folds

    def record(func, tasks, jobs=1):
        sent.extend((fn.__name__, args[0]) for fn, args in tasks)
        return real(func, tasks, 1)

    monkeypatch.setattr(stats, "map_folds", record)
    monkeypatch.setattr(stats, "SHARED_MIN_BYTES", 1)
    table = _release(600)
    emb = np.random.default_rng(3).random((len(table), 8)).astype(np.float32)
    shared = audit_provenance(table, image_stats=False, association=False, embeddings=emb,
                              n_resamples=50, importance_repeats=1, workers=2)
    pools = [x for name, x in sent if name == "_fit_fold"]
    parts = [x for name, x in sent if name == "_fold_prob"]
    assert pools and parts
    assert all(isinstance(p.narrow[1], np.memmap) for p in pools)
    assert all(isinstance(x, np.memmap) for x in parts)
    sent.clear()
    plain = audit_provenance(table, image_stats=False, association=False, embeddings=emb,
                             n_resamples=50, importance_repeats=1, workers=1)
    assert not any(isinstance(x, np.memmap) for name, x in sent if name == "_fold_prob")
    assert [r.to_dict() for r in shared.records] == [r.to_dict() for r in plain.records]


def test_a_killed_runs_shared_folder_is_removed_by_the_next(tmp_path, monkeypatch):
    """A folder of a process that no longer runs is removed when the next one opens its own;
    a running process's folder is kept."""
    import subprocess
    import sys

    from splitscope.provenance import stats

    monkeypatch.setenv("JOBLIB_TEMP_FOLDER", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dead = tmp_path / f"{stats.SHARED_PREFIX}{gone}-abc"
    dead.mkdir()
    (dead / "x.dat").write_bytes(b"0" * 10)
    alive = tmp_path / f"{stats.SHARED_PREFIX}{os.getppid()}-def"
    alive.mkdir()
    with stats.shared_arrays() as folder:
        assert folder.startswith(str(tmp_path / f"{stats.SHARED_PREFIX}{os.getpid()}-"))
    assert not dead.exists() and alive.exists()


def test_partition_comparisons_share_one_bank_built_at_the_first_step(monkeypatch):
    """The partition classifier computes nothing when its records are asked for, only at its
    first step (inside the layer's shared folder, after the probes before it); then one bank
    holds each row some comparison uses once, and every fold call of the boundary and of the
    internal split reads that bank."""
    from splitscope.boundary import boundaries_or_default
    from splitscope.provenance import partition_records as pr
    from splitscope.provenance import stats

    table = _release(400)
    emb = np.random.default_rng(5).random((len(table), 6)).astype(np.float32)
    banks = []
    real_bank = pr._feature_bank
    monkeypatch.setattr(pr, "_feature_bank", lambda *a: banks.append(real_bank(*a)) or banks[-1])
    sent = []
    real_map = stats.map_folds

    def record(func, tasks, jobs=1):
        sent.extend((fn.__name__, args) for fn, args in tasks)
        return real_map(func, tasks, 1)

    monkeypatch.setattr(stats, "map_folds", record)
    monkeypatch.setattr(stats, "SHARED_MIN_BYTES", 1)
    bounds = boundaries_or_default(table, None)
    steps = pr.partition_records(table, None, bounds, emb, seed=0, n_resamples=50, folds=3,
                                 classifier="logistic", internal_share=0.2, max_rows=None,
                                 inputs=[])
    assert banks == []  # nothing computed yet
    with stats.shared_arrays():
        out, = stats.run_steps([steps])
    assert len(banks) == 1
    bank, at = banks[0]
    assert isinstance(bank, np.memmap) and len(bank) == len(table)  # each row once
    assert np.array_equal(bank, emb)
    assert [len(a) for a in at] == [400, 300]  # test → train; the internal split of train
    assert sorted(at[1]) == sorted(at[0][100:])  # the split indexes the bank's train rows
    folds = [args for name, args in sent if name == "_fold_prob"]
    assert len(folds) == 2 * 2 * 3  # two comparisons, each with its control, three folds
    assert {args[0].filename for args in folds} == {bank.filename}
    assert [r.status for r in out.records] == ["completed", "completed"]
