"""Percentile bootstrap intervals over cases for balanced accuracy and AUC (METHODS §5.5),
vectorized so that 2,000 resamples cost milliseconds.

Both use the fact that a case bootstrap only changes how often each case is counted: a resample
is a vector of multiplicities ``w ~ Multinomial(n, 1/n)``. Balanced accuracy depends on the
cases only through the counts in the cells (true class, correct?), so resampling those cell
counts from ``Multinomial(n, cell shares)`` has exactly the case-bootstrap distribution. AUC
resamples are the evaluation layer's case bootstrap
(:func:`splitscope.evaluation.uncertainty.bootstrap_weights`: the same resamples for the same
seed) scored by its weighted AUROC (ties count one half).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from splitscope.errors import InputError
from splitscope.options import RunOptions

__all__ = [
    "FoldTasks",
    "Together",
    "balanced_accuracy_rows",
    "bootstrap_auc",
    "bootstrap_aucs",
    "bootstrap_balanced_accuracy",
    "fit_sample",
    "fold_jobs",
    "interval_kind",
    "map_folds",
    "run_steps",
    "shared_arrays",
    "shared_empty",
    "single_threaded",
    "stable_order",
    "weighted_auc",
]


def single_threaded(threads: int | None = 1):
    """Context limiting BLAS/OpenMP pools (scikit-learn's gradient boosting, NumPy) to
    ``threads``: on a shared or small machine, oversubscribed OpenMP makes small fits tens of
    times slower. ``None`` leaves the pools as they are."""
    import sklearn.ensemble
    import sklearn.linear_model  # noqa: F401
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=threads)


#: Rows × features from which cross-validation folds of gradient-boosted trees run in worker
#: processes by default: below it, starting the workers costs more than the fits.
PARALLEL_CELLS = 200_000
#: The same for the (much cheaper) logistic-regression fits of the partition classifier.
PARALLEL_CELLS_LINEAR = 10_000_000


def fold_jobs(cells: int, folds: int, jobs: int | None = None,
              min_cells: int | None = None, limit: int | None = None) -> int:
    """Worker processes for the folds of one cross-validation: ``jobs`` when given, else one
    per available core (at most one per fold) once ``cells`` (rows × features) reaches
    ``min_cells`` (default :data:`PARALLEL_CELLS`), else 1; never more than ``limit`` (the
    run's ``workers``; ``None``: no bound)."""
    if jobs is not None:
        n = max(1, int(jobs))
    elif cells < (PARALLEL_CELLS if min_cells is None else min_cells):
        n = 1
    else:
        cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count())
        n = max(1, min(int(cores or 1), int(folds)))
    return n if limit is None else max(1, min(n, int(limit)))


def fit_sample(y: np.ndarray, groups: np.ndarray | None, max_rows: int | None,
               seed: int) -> np.ndarray:
    """Positions (sorted) of at most ``max_rows`` of the rows labelled ``y`` that a model is
    fitted on: all of them when there are no more, else a seeded sample stratified by class
    and spread over groups.

    Each class keeps its share of the rows (largest remainder, at least one row per class).
    Within a class, rows are taken round-robin over the groups (``groups``: integer codes, or
    ``None`` for one row per group): every group's first row (in a seeded random order) before
    any group's second, so the sample holds as many patients as it can rather than many images
    of a few. The same ``y``, ``groups``, ``max_rows`` and ``seed`` give the same rows.
    """
    y = np.asarray(y)
    n = len(y)
    if max_rows is None or n <= int(max_rows):
        return np.arange(n)
    max_rows = int(max_rows)
    if max_rows < 1:
        raise InputError(f"the fit row cap must be at least 1; got {max_rows}")
    rng = np.random.default_rng(seed)
    _, yc = np.unique(y, return_inverse=True)
    counts = np.bincount(yc)
    exact = max_rows * counts / n
    quota = np.minimum(np.maximum(np.floor(exact).astype(np.int64), 1), counts)
    short = max_rows - int(quota.sum())
    for c in np.argsort(-(exact - np.floor(exact)), kind="stable"):
        if short <= 0:
            break
        if quota[c] < counts[c]:
            quota[c] += 1
            short -= 1
    g = np.arange(n) if groups is None else _group_codes(groups)
    perm = rng.permutation(n)
    gp = g[perm]
    by_group = np.argsort(gp, kind="stable")
    sorted_g = gp[by_group]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_g)) + 1]
    first = np.repeat(starts, np.diff(np.r_[starts, n]))
    rank = np.empty(n, dtype=np.int64)
    rank[by_group] = np.arange(n) - first  # the row's turn within its group
    order = perm[np.lexsort((np.arange(n), rank, yc[perm]))]  # by class, turn, random order
    ends = np.cumsum(counts)
    take = [order[e - k:e - k + q] for e, k, q in zip(ends, counts, quota)]
    return np.sort(np.concatenate(take))


#: what a probe orders its rows by before folds, samples and fits: the file's bytes, its decoded
#: pixels (arrays have no bytes), then the released path
STABLE_KEYS = ("sha256", "pixel_xxh128", "path")


def stable_order(table) -> np.ndarray:
    """Positions of ``table``'s rows sorted by :data:`STABLE_KEYS` (those it has; a missing
    value sorts last), ties in the given order.

    Folds, fit samples, bootstrap resamples and permutations are drawn by position, so a probe
    that fits its rows in the order they were listed gives another estimate when the same
    release is listed in another order (a folder against its ``save_to_disk`` copy, a shuffled
    manifest). Sorted by content first, the same files give the same positions however they
    were listed."""
    import pandas as pd

    keys = [c for c in STABLE_KEYS if c in table.columns]
    frame = pd.DataFrame({c: table[c].astype("string").to_numpy() for c in keys})
    frame["_at"] = np.arange(len(table))
    return frame.sort_values([*keys, "_at"], na_position="last")["_at"].to_numpy(np.int64)


def _group_codes(values: np.ndarray) -> np.ndarray:
    """Integer codes of group keys; a row without a key (NA) is a group of its own."""
    import pandas as pd

    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    codes = pd.factorize(pd.Series(values, dtype=object))[0].astype(np.int64)
    missing = codes < 0
    codes[missing] = codes.max(initial=-1) + 1 + np.arange(int(missing.sum()))
    return codes


#: how the folders of :func:`shared_arrays` begin (then the pid of the process that made one)
SHARED_PREFIX = "splitscope-folds-"
#: the folder of :func:`shared_arrays` while it is active (None: arrays are plain)
_SHARED_FOLDER: ContextVar[str | None] = ContextVar("splitscope_shared_folder", default=None)
#: bytes from which :func:`shared_empty` maps an array from a file (joblib's own threshold
#: for writing an argument to a file for its workers)
SHARED_MIN_BYTES = 1 << 20
#: free bytes from which ``/dev/shm`` holds the shared arrays (joblib's own rule, 2 GB: a
#: container's 64 MB ``/dev/shm`` would fill, and a write to a full one kills the process)
SHARED_MEMORY_MIN_FREE = 2_000_000_000


@contextmanager
def shared_arrays(enabled: bool = True) -> Iterator[str | None]:
    """While active, :func:`shared_empty` gives arrays mapped from files of one temporary
    folder (in ``JOBLIB_TEMP_FOLDER``, else ``/dev/shm`` where it has
    :data:`SHARED_MEMORY_MIN_FREE` bytes free, as joblib chooses, else the temporary
    directory), removed at the end.

    A fold worker receives such an array as a reference to its file and maps the same pages
    (joblib reduces a memory-mapped argument to its file name), so this process and its
    workers hold one copy of a probe's matrix. A plain array above joblib's 1 MB is written
    to a file of its own for the workers instead, beside this process's copy: two copies of
    every row while the folds run. ``enabled=False`` (no workers) leaves arrays plain."""
    if not enabled:
        yield None
        return
    base = os.environ.get("JOBLIB_TEMP_FOLDER") or (
        "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
        and shutil.disk_usage("/dev/shm").free >= SHARED_MEMORY_MIN_FREE else None)
    _remove_orphans(base or tempfile.gettempdir())
    folder = tempfile.mkdtemp(prefix=f"{SHARED_PREFIX}{os.getpid()}-", dir=base)
    token = _SHARED_FOLDER.set(folder)
    try:
        yield folder
    finally:
        _SHARED_FOLDER.reset(token)
        shutil.rmtree(folder, ignore_errors=True)  # mapped pages go when the last map does


def _remove_orphans(base: str) -> None:
    """Remove the folders of :func:`shared_arrays` left by processes that no longer run (a
    killed audit cannot remove its own; in ``/dev/shm`` they would hold memory until a
    reboot). A folder names its process: ``splitscope-folds-<pid>-…``."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        if not name.startswith(SHARED_PREFIX):
            continue
        pid = name[len(SHARED_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: running
        return True
    return True


def shared_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised array of ``shape`` and ``dtype``: inside :func:`shared_arrays` and
    from :data:`SHARED_MIN_BYTES` on, mapped from a file of its folder (see there), else a
    plain ``np.empty`` (also when the folder has not twice its bytes free). The values
    written into it are the same either way."""
    folder = _SHARED_FOLDER.get()
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if folder is None or nbytes < SHARED_MIN_BYTES or \
            shutil.disk_usage(folder).free < 2 * nbytes:
        return np.empty(shape, dtype=dtype)
    fd, path = tempfile.mkstemp(suffix=".dat", dir=folder)
    os.close(fd)
    return np.memmap(path, dtype=dtype, mode="w+", shape=shape)


def map_folds(func, tasks: list[tuple], jobs: int = 1) -> list:
    """``[func(*t) for t in tasks]``, in order; with ``jobs`` > 1 in that many worker processes
    (joblib's loky backend, one BLAS/OpenMP thread per worker). Each fold is seeded on its
    own, so the results do not depend on ``jobs``. The workers end when this process dies
    (:func:`splitscope.features.worker_exit.exit_with_owner`), not at loky's idle timeout."""
    if jobs <= 1 or len(tasks) <= 1:
        return [func(*t) for t in tasks]
    from joblib import Parallel, delayed

    from splitscope.features.worker_exit import exit_with_owner, main_thread

    return Parallel(n_jobs=min(jobs, len(tasks)), backend="loky", inner_max_num_threads=1,
                    initializer=exit_with_owner,
                    initargs=(os.getpid(), 0.5, main_thread()))(
        delayed(func)(*t) for t in tasks)


@dataclass
class FoldTasks:
    """What a step generator (see :func:`run_steps`) asks to have run: independent calls
    ``fn(*args)`` (module-level functions, each seeded on its own) whose results come back in
    order. ``jobs``: worker processes asked for explicitly (None: by cost); ``weight``: the
    calls' cost as a share of what pays for starting workers (``cells / min_cells`` of
    :func:`fold_jobs`)."""

    calls: list[tuple[Callable[..., Any], tuple]]
    jobs: int | None = None
    weight: float = 0.0


@dataclass
class Together:
    """What a step generator asks to have run side by side: other step generators; their
    return values come back in order."""

    steps: list[Generator]


@dataclass
class _Node:
    gen: Generator
    parent: _Node | None = None
    request: Any = None
    children: list[_Node] = field(default_factory=list)
    done: bool = False
    value: Any = None


def _call(fn: Callable[..., Any], args: tuple) -> Any:
    return fn(*args)


def run_steps(steps: list[Generator], jobs: int | None = None,
              limit: int | None = None) -> list:
    """Run step generators together and return their return values, in order.

    A step generator is a probe written as plain code that yields a :class:`FoldTasks` (and
    receives the calls' results) or a :class:`Together` (and receives the generators' return
    values) wherever it needs work done. Every generator is advanced as far as it can go; then
    the calls that all of them wait for run in *one* :func:`map_folds`, so the folds of several
    probes share the worker processes and none waits for another's last fold; then each
    generator is resumed, in order (one waiting on a :class:`Together` as soon as the last of
    its generators has returned), and so on until all have returned. The work a generator does
    between its requests runs in this process, in that fixed order, and every call is seeded
    on its own, so the results do not depend on which calls share a map. ``jobs``: worker
    processes (default: decided from the requests, see :class:`FoldTasks`); ``limit``: at
    most that many in any map (the run's ``workers``; ``None``: no bound)."""
    roots = [_Node(g) for g in steps]
    for node in roots:
        _resume(node, None)
    while not all(node.done for node in roots):
        leaves: list[_Node] = []
        for node in roots:
            _waiting(node, leaves)
        calls = [c for leaf in leaves for c in leaf.request.calls]
        n = _round_jobs([leaf.request for leaf in leaves], len(calls), jobs)
        results = map_folds(_call, calls, n if limit is None else max(1, min(n, int(limit))))
        at = 0
        for leaf in leaves:
            k = len(leaf.request.calls)
            _resume(leaf, results[at:at + k])
            at += k
    return [node.value for node in roots]


def _waiting(node: _Node, leaves: list[_Node]) -> None:
    if node.done:
        return
    if isinstance(node.request, FoldTasks):
        leaves.append(node)
    for child in node.children:
        _waiting(child, leaves)


def _resume(node: _Node, value: Any) -> None:
    """Send ``value`` into ``node``'s generator and follow it to its next request for calls
    (or to its end, resuming its parent when that was the last of a :class:`Together`)."""
    while True:
        try:
            request = node.gen.send(value)
        except StopIteration as stop:
            node.done, node.value, node.request = True, stop.value, None
            parent = node.parent
            if parent is not None and all(c.done for c in parent.children):
                values = [c.value for c in parent.children]
                parent.children = []
                _resume(parent, values)
            return
        if isinstance(request, FoldTasks):
            if request.calls:
                node.request = request
                return
            value = []
        elif isinstance(request, Together):
            node.request = request
            node.children = [_Node(g, parent=node) for g in request.steps]
            if not node.children:
                value = []
                continue
            for child in list(node.children):
                _resume(child, None)
            return  # the last child to finish resumes this node
        else:
            raise TypeError(f"a step yields FoldTasks or Together, not {type(request).__name__}")


def _round_jobs(requests: list[FoldTasks], n_calls: int, jobs: int | None) -> int:
    if jobs is not None:
        return max(1, int(jobs))
    asked = [r.jobs for r in requests if r.jobs is not None]
    weight = sum(r.weight for r in requests if r.jobs is None)
    n = fold_jobs(1, n_calls, None, 1) if weight >= 1 else 1
    return max([n, *asked])


def balanced_accuracy_rows(y_true: np.ndarray, y_pred: np.ndarray) -> np.ndarray:
    """Balanced accuracy of each row of ``y_pred`` (B, n) against ``y_true`` (n,): mean recall
    over the classes present in ``y_true``."""
    y_true = np.asarray(y_true)
    y_pred = np.atleast_2d(np.asarray(y_pred))
    classes, t = np.unique(y_true, return_inverse=True)
    correct = (y_pred == y_true[None, :]).astype(np.float64)  # (B, n)
    onehot = np.zeros((y_true.size, classes.size))
    onehot[np.arange(y_true.size), t] = 1.0
    recall = (correct @ onehot) / onehot.sum(axis=0)[None, :]
    return recall.mean(axis=1)


def interval_kind(n_resamples: int) -> str:
    return f"percentile bootstrap over cases, {n_resamples} resamples"


def bootstrap_balanced_accuracy(y_true: np.ndarray, y_pred: np.ndarray, *,
                                n_resamples: int = RunOptions.resamples,
                                seed: int = RunOptions.seed,
                                level: float = 0.95) -> dict[str, Any]:
    """Balanced accuracy and its percentile-bootstrap interval over cases.

    Returns
    -------
    dict
        ``estimate``, ``low``, ``high``, ``level``, ``resamples``, ``undefined_resamples``
        (resamples in which a class had no case, where BA is undefined; left out), ``kind``.
    """
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if y_true.shape != y_pred.shape or y_true.ndim != 1 or y_true.size == 0:
        raise InputError("y_true and y_pred must be non-empty 1-D arrays of one length")
    classes, t = np.unique(y_true, return_inverse=True)
    correct = (y_true == y_pred).astype(np.int64)
    k = classes.size
    cells = np.bincount(t * 2 + correct, minlength=2 * k).astype(np.float64)  # (wrong, right)
    est = float(np.mean(cells[1::2] / (cells[0::2] + cells[1::2])))
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(y_true.size, cells / cells.sum(), size=n_resamples).astype(np.float64)
    right, total = draws[:, 1::2], draws[:, 0::2] + draws[:, 1::2]
    defined = (total > 0).all(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ba = np.mean(right / total, axis=1)[defined]
    alpha = (1 - level) / 2
    low, high = (np.quantile(ba, [alpha, 1 - alpha]) if ba.size else (np.nan, np.nan))
    return {"estimate": est, "low": float(low), "high": float(high), "level": level,
            "resamples": int(n_resamples), "undefined_resamples": int((~defined).sum()),
            "seed": seed, "kind": interval_kind(n_resamples)}


def weighted_auc(y: np.ndarray, score: np.ndarray, weights: np.ndarray | None = None,
                 strata: np.ndarray | None = None) -> np.ndarray:
    """AUC (probability that a positive outscores a negative, ties one half) for one or many
    weight vectors. ``weights`` (B, n) gives B AUCs; ``None`` gives the plain AUC as a (1,)
    array. With ``strata`` only positive–negative pairs of the same stratum count (e.g. the
    cross-validation fold, so that fold-to-fold shifts of the scores do not enter: the
    pooled-within-fold AUC). NaN where no pair has weight. The pair counts are those of
    :func:`splitscope.evaluation.uncertainty.weighted_auroc_parts`."""
    from splitscope.evaluation.uncertainty import AurocPlan, weighted_auroc

    y = np.asarray(y).astype(bool)
    score = np.asarray(score, dtype=np.float64)
    w = np.ones((1, y.size)) if weights is None else np.atleast_2d(np.asarray(weights, np.float64))
    return weighted_auroc(w, None, None, AurocPlan(y, score, strata))


#: rows × resamples of one batch of bootstrap weights in :func:`bootstrap_auc` (about 32 MB of
#: integer counts, whatever the row count)
AUC_CHUNK_CELLS = 4_000_000


def bootstrap_auc(y: np.ndarray, score: np.ndarray, *, n_resamples: int = RunOptions.resamples,
                  seed: int = RunOptions.seed, level: float = 0.95, chunk: int = 250,
                  strata: np.ndarray | None = None) -> dict[str, Any]:
    """AUC and its percentile-bootstrap interval over cases (resamples with one side empty are
    undefined and left out, and counted). ``strata``: see :func:`weighted_auc`.

    Resamples are drawn ``chunk`` at a time, fewer when ``chunk`` × rows would exceed
    :data:`AUC_CHUNK_CELLS` (a resample is the same whatever the batch), and each stratum's
    sort is computed once for all of them: memory stays bounded at a million rows and the
    interval is the one of any batch size. Each batch is gathered once into the plan's order
    (:class:`~splitscope.evaluation.uncertainty.AurocPlan`), where every stratum's rows are
    contiguous and sorted by score."""
    return bootstrap_aucs([(y, score, strata)], n_resamples=n_resamples, seed=seed,
                          level=level, chunk=chunk)[0]


def bootstrap_aucs(cases: list[tuple], *, n_resamples: int = RunOptions.resamples,
                   seed: int = RunOptions.seed, level: float = 0.95,
                   chunk: int = 250) -> list[dict[str, Any]]:
    """:func:`bootstrap_auc` of several ``(y, score, strata)`` with one seed (a classifier and
    its shuffled control): cases of one length have the same resamples, so each batch is
    drawn once for all of them; each result is the one :func:`bootstrap_auc` gives alone."""
    from splitscope.evaluation.uncertainty import AurocPlan, bootstrap_weights, weighted_auroc

    out: list[dict[str, Any]] = [{
        "estimate": None, "low": None, "high": None, "level": level, "resamples": 0,
        "undefined_resamples": 0, "seed": seed, "kind": "not defined: one side has no cases"}
        for _ in cases]
    by_length: dict[int, list] = {}  # rows → [(case, estimate, its plan)]
    for i, (y, score, strata) in enumerate(cases):
        y = np.asarray(y).astype(bool)
        if not y.any() or y.all():
            continue
        plan = AurocPlan(y, np.asarray(score, np.float64), strata)
        estimate = float(weighted_auroc(np.ones((1, y.size), np.int64), None, None, plan)[0])
        if np.isfinite(estimate):  # NaN: no pair of a stratum to compare
            by_length.setdefault(y.size, []).append((i, estimate, plan))
    alpha = (1 - level) / 2
    for n, defined in by_length.items():
        vals: list[list[np.ndarray]] = [[] for _ in defined]
        batch = max(1, min(int(chunk), AUC_CHUNK_CELLS // n))
        for w in bootstrap_weights(n, n_resamples, seed=seed, chunk=batch, dtype=np.int64):
            for got, (_, _, plan) in zip(vals, defined):
                got.append(weighted_auroc(w, None, None, plan))
        for got, (i, est, _) in zip(vals, defined):
            aucs = np.concatenate(got)
            ok = np.isfinite(aucs)
            low, high = (np.quantile(aucs[ok], [alpha, 1 - alpha]) if ok.any() else
                         (np.nan, np.nan))
            out[i] = {"estimate": est, "low": float(low), "high": float(high), "level": level,
                      "resamples": int(n_resamples), "undefined_resamples": int((~ok).sum()),
                      "seed": seed, "kind": interval_kind(n_resamples)}
    return out
