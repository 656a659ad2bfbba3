"""Scanning a release: manifest, then per-file features through the workspace cache.

:func:`scan` builds the manifest, extracts the features of every unique file that the
workspace does not already hold for the same parameters (in batches, over an executor), and
assembles the result: one feature row per unique file, sorted by file path, and a memory-mapped
thumbnail array. :func:`load_scan` reopens a finished scan without recomputing anything.

The result never depends on the worker count, on how the work was batched, or on how often the
scan was interrupted and resumed: extraction is deterministic per file and the result is
ordered by file path, not by completion.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.features import extract
from splitscope.features.batch import run_batch
from splitscope.features.executor import SerialExecutor, make_executor, start_fork_server
from splitscope.features.executors import ChunkFailed, Executor, default_workers
from splitscope.features.options import FeatureParams
from splitscope.features.workspace import (
    SIGNATURE_COLUMNS,
    FeatureStore,
    ShardCommitter,
    file_signatures,
    helper_thread,
    open_thumbnails,
    read_json,
    shard_positions,
    workspace_errors,
    workspace_lock,
    write_json,
    write_parquet,
)
from splitscope.manifest.rows import INVALID_UTF8, OUTSIDE_ROOT, URL_ROW, with_manifest_columns
from splitscope.records.model import sha256_file

__all__ = ["DEFAULT_WORKSPACE", "Scan", "load_scan", "scan"]

DEFAULT_WORKSPACE = "splitscope-workspace"
NA_KEY = "<NA>"  # how a missing split/label/reason is spelled in summaries (JSON keys)
NO_FILE = "no_file"  # row-level reason for a manifest row that names no file at all

Extractor = Callable[[list, Any], tuple[pd.DataFrame, np.ndarray]]


# ----------------------------------------------------------------------------- the result


@dataclass
class Scan:
    """A finished scan: the manifest, one feature row per unique file, and the thumbnails.

    Attributes
    ----------
    manifest : DataFrame
        The manifest (one row per released row, see ``docs/data-model.md``).
    features : DataFrame
        One row per unique ``file`` of the manifest, sorted by ``file``, with ``thumb_index``
        (row of :attr:`thumbnails`, -1 when the file gave no thumbnail) and the feature
        columns of ``docs/data-model.md``.
    thumbnails : numpy.memmap
        ``(n_thumbnails, S, S)`` uint8, read-only, memory-mapped from the workspace (a plain
        empty array when no file gave a thumbnail).
    params : FeatureParams
        The extraction parameters.
    workspace : Path
        The workspace folder.
    meta : dict
        The store's ``meta.json``: parameters, software versions, timings, counts.
    """

    manifest: pd.DataFrame
    features: pd.DataFrame
    thumbnails: np.ndarray
    params: Any
    workspace: Path
    meta: dict = field(default_factory=dict)

    def rows(self) -> pd.DataFrame:
        """The manifest left-joined with the features on ``file``: manifest order and row
        count kept; rows whose file has no feature row (no ``file``) get ``<NA>`` features and
        ``thumb_index`` -1. A row whose file was not read because of its path (outside the
        release root, not valid UTF-8) has that ``path_issue`` as its ``status``."""
        features = self.features
        clash = [c for c in features.columns if c in self.manifest.columns and c != "file"]
        if clash:
            features = features.rename(columns={c: f"{c}_feature" for c in clash})
        out = self.manifest.merge(features, on="file", how="left", sort=False,
                                  validate="many_to_one")
        out["thumb_index"] = out["thumb_index"].fillna(-1).astype("int64")
        if "path_issue" in out.columns:  # not read because of its path: that is its status
            out["status"] = out["status"].astype("string").fillna(out["path_issue"])
        out.index = self.manifest.index
        out.attrs = dict(self.manifest.attrs)
        return out

    def thumb_index(self, rows: Iterable[int] | np.ndarray) -> np.ndarray:
        """Thumbnail index (-1 when none) for each manifest ``row`` id in ``rows``."""
        rows = _row_ids(rows)
        by_row = self._row_thumb_index()
        bad = (rows < 0) | (rows >= len(by_row))
        if bad.any():
            raise InputError(
                f"{int(bad.sum())} row id(s) not in the manifest (0..{len(by_row) - 1}), "
                f"e.g. {int(rows[bad][0])}"
            )
        return by_row[rows]

    def thumbs(self, rows: Iterable[int] | np.ndarray, missing: str = "raise") -> np.ndarray:
        """Thumbnails ``(len(rows), S, S)`` uint8 for manifest ``row`` ids, in the given order.

        Parameters
        ----------
        rows : array-like of int
            Manifest ``row`` values.
        missing : {"raise", "zeros"}
            A row whose file gave no thumbnail (a failure) raises :class:`InputError` naming
            it (``"raise"``, default), or gets an all-zero slice (``"zeros"``; use
            :meth:`thumb_index` ``>= 0`` as the mask, since a zero slice is also flat).
        """
        if missing not in {"raise", "zeros"}:
            raise InputError(f"missing must be 'raise' or 'zeros'; got {missing!r}")
        rows = _row_ids(rows)
        index = self.thumb_index(rows)
        absent = index < 0
        if absent.any() and missing == "raise":
            first = int(rows[np.flatnonzero(absent)[0]])
            raise InputError(
                f"{int(absent.sum())} row(s) have no thumbnail (failed files), e.g. row {first}; "
                f"select rows with thumb_index >= 0 or pass missing='zeros'"
            )
        size = int(self.meta.get("thumb_size", self.thumbnails.shape[-1]))
        out = np.zeros((len(index), size, size), dtype=np.uint8)
        if (~absent).any():
            out[~absent] = self.read_thumbnails(index[~absent])
        return out

    def read_thumbnails(self, index: np.ndarray) -> np.ndarray:
        """The thumbnails at store positions ``index`` (all ≥ 0), in that order. From the
        workspace's store they are read with positional reads, one per run of consecutive
        positions, never through the memory map: a read of scattered rows through the map
        faults in a whole page-cache folio or fault-around window per row (a read of 8,192
        rows of a million-row store held 2.6 GiB of it resident), all of it counted in the
        process's memory; a positional read copies the bytes asked for and maps nothing."""
        index = np.asarray(index, dtype=np.int64)
        store = self.thumbnails
        path = getattr(store, "filename", None)
        if path is None or not hasattr(os, "preadv") or index.size == 0:
            return np.asarray(store[index])
        if index.min() < 0 or index.max() >= len(store):
            raise IndexError(f"thumbnail positions must lie in 0..{len(store) - 1}")
        out = np.empty((index.size, *store.shape[1:]), dtype=store.dtype)
        row = out[0].nbytes
        flat = out.reshape(index.size, row)
        # runs of consecutive positions: one read each
        cuts = np.flatnonzero(np.diff(index) != 1) + 1
        starts = np.r_[0, cuts]
        stops = np.r_[cuts, index.size]
        with open(path, "rb", buffering=0) as fh:
            fd = fh.fileno()
            for a, b in zip(starts.tolist(), stops.tolist()):
                view = memoryview(flat[a:b]).cast("B")
                done = os.preadv(fd, [view], int(store.offset) + int(index[a]) * row)
                if done != view.nbytes:
                    raise InputError(f"the thumbnail store {path} ended early: it is "
                                     f"truncated; delete the workspace's feature cache")
        return out

    def _row_thumb_index(self) -> np.ndarray:
        """Thumbnail index per manifest row, computed once per manifest and feature table
        (a search reads thumbnails block by block: recomputing it per block made a search
        quadratic in the rows); read-only."""
        key = (self.manifest, self.features, len(self.manifest), len(self.features))
        cached = self.__dict__.get("_thumb_index_cache")
        if cached is not None and all(a is b for a, b in zip(cached[0][:2], key[:2])) \
                and cached[0][2:] == key[2:]:
            return cached[1]
        lookup = pd.Series(self.features["thumb_index"].to_numpy(dtype=np.int64),
                           index=self.features["file"].astype(object).to_numpy())
        files = self.manifest["file"].astype(object)
        index = files.map(lookup).fillna(-1).to_numpy(dtype=np.int64)
        index.flags.writeable = False
        self.__dict__["_thumb_index_cache"] = (key, index)
        return index

    def summary(self) -> dict[str, Any]:
        """Counts a user checks first, as a JSON-ready dict with stable keys.

        Failures are counted in two units: ``failures.files`` counts unique files (each file
        once), ``failures.rows`` counts manifest rows (a file listed twice fails twice). Both
        give ``by_reason`` overall and ``by_split``; a file not read because of its path counts
        with that reason (``outside_root``, ``url``). ``counts`` is manifest rows per split ×
        label (``<NA>`` for unknown). ``excluded`` counts entries of a folder release that are
        not rows (``excluded_by_reason``); ``outside_root`` counts rows that resolve outside
        their release root, ``urls`` rows naming a URL, each saying whether they were read.
        """
        rows = self.rows()
        status = rows["status"].astype("string").fillna(NO_FILE)
        failed_rows = status != "ok"
        # one status per unique file: its features' status, or why it was not read
        per_file = pd.DataFrame({"file": rows["file"], "status": status})
        per_file = per_file[per_file["file"].notna()].drop_duplicates("file")
        features_status = per_file["status"]
        failed_files = features_status != "ok"
        split = rows["split"].astype("string").fillna(NA_KEY)

        # files per split: a file in two splits counts once in each
        file_split = pd.DataFrame({"file": rows["file"], "split": split, "status": status})
        file_split = file_split[file_split["file"].notna()].drop_duplicates(["file", "split"])
        bad_file_split = file_split[file_split["status"] != "ok"]
        bad_rows = pd.DataFrame({"split": split[failed_rows], "status": status[failed_rows]})

        counts: dict[str, dict[str, int]] = {}
        label = rows["label"].astype("string").fillna(NA_KEY)
        for (s, lab), n in pd.DataFrame({"s": split, "l": label}).value_counts(sort=False) \
                .sort_index().items():
            counts.setdefault(str(s), {})[str(lab)] = int(n)

        group = rows["group"]
        meta = self.meta
        excluded = self.manifest.attrs.get("excluded", []) or []
        issue = rows["path_issue"].astype("string") if "path_issue" in rows.columns else \
            pd.Series(pd.NA, index=rows.index, dtype="string")
        out = {
            "workspace": str(self.workspace),
            "params": meta.get("params", {}),
            "key": meta.get("key"),
            "rows": len(rows),
            "unique_files": int(self.manifest["file"].dropna().nunique()),
            "rows_without_file": int(self.manifest["file"].isna().sum()),
            "features_ok": int((~failed_files).sum()),
            "thumbnails": len(self.thumbnails),
            "flat_thumbnails": int(self.features.get("flat", pd.Series(dtype=bool))
                                   .fillna(False).astype(bool).sum()),
            "failures": {
                "files": {
                    "unit": "unique file",
                    "total": int(failed_files.sum()),
                    "denominator": len(per_file),
                    "by_reason": _count(features_status[failed_files]),
                    "by_split": {str(s): _count(g["status"]) for s, g in
                                 bad_file_split.groupby("split", sort=True)},
                },
                "rows": {
                    "unit": "manifest row",
                    "total": int(failed_rows.sum()),
                    "denominator": len(rows),
                    "by_reason": _count(status[failed_rows]),
                    "by_split": {str(s): _count(g["status"]) for s, g in
                                 bad_rows.groupby("split", sort=True)},
                },
            },
            "counts": counts,
            "groups": {
                "rows_with_group": int(group.notna().sum()),
                "unique_groups": int(group.dropna().nunique()),
                "group_key": self.manifest.attrs.get("group_key"),
            },
            "excluded": len(excluded),
            "excluded_by_reason": _count(pd.Series([e.get("reason") for e in excluded],
                                                   dtype="string")),
            "outside_root": {
                "unit": "manifest row",
                "rows": int((issue == OUTSIDE_ROOT).sum()),
                "denominator": len(rows),
                "read": bool(meta.get("allow_outside_root", False)),
            },
            "urls": {
                "unit": "manifest row",
                "rows": int((issue == URL_ROW).sum()),
                "denominator": len(rows),
                "read": bool(meta.get("allow_urls", False)),
            },
            "invalid_paths": int((issue == INVALID_UTF8).sum()),
            "repairs": list(meta.get("repairs", [])),
            "extracted": int(meta.get("extracted", 0)),
            "reused": int(meta.get("reused", 0)),
            "seconds": float(meta.get("seconds", float("nan"))),
            "timings": meta.get("timings", {}),
        }
        return out


def _row_ids(rows: Iterable[int] | np.ndarray) -> np.ndarray:
    """Row ids as an int64 array (an iterator is read once)."""
    return np.asarray(rows if isinstance(rows, np.ndarray) else list(rows), dtype=np.int64)


def _count(values: pd.Series) -> dict[str, int]:
    counts = values.astype("string").fillna(NA_KEY).value_counts()
    return {str(k): int(v) for k, v in sorted(counts.items())}


# ----------------------------------------------------------------------------- scanning


def make_params(thumb_size: int = 96, mode: str = "exact", interpolation: str = "bicubic",
                **extra: Any):
    """``FeatureParams`` from the scan options (validated there, with InputError)."""
    return FeatureParams(thumb_size=thumb_size, interpolation=interpolation, mode=mode,
                                 **extra)


def _batch_size(n: int, workers: int) -> int:
    """Files per batch: enough batches to balance the workers and show progress (about eight
    per worker), each between 8 and 256 files, so a killed scan loses little work and the
    number of batches in flight bounds memory."""
    if n == 0:
        return 1
    return int(min(256, max(8, math.ceil(n / (8 * max(1, workers))))))


def _batch_bounds(n: int, step: int, workers: int, taper: bool) -> list[tuple[int, int]]:
    """``(start, stop)`` of each batch of ``n`` files. With ``taper``, batches are ``step``
    files until the files left are few, then each is a ``2 * workers``-th of those left (at
    least ``max(8, step // 8)``): the workers take batches in order as they free up, so they
    run out of work within a small batch of each other instead of one idling for most of a
    full one at the end (guided self-scheduling)."""
    bounds: list[tuple[int, int]] = []
    smallest = max(8, step // 8)
    start = 0
    while start < n:
        size = step
        if taper:
            size = min(step, max(smallest, math.ceil((n - start) / (2 * max(1, workers)))))
        bounds.append((start, min(n, start + size)))
        start += size
    return bounds


def _check_not_inside_dataset(workspace: Path, manifest: pd.DataFrame, inputs: list) -> None:
    """The dataset is never written to: the workspace is refused where an output may not go
    (:mod:`splitscope.manifest.roots`; in-memory arrays are kept in it by design)."""
    from splitscope.manifest.roots import manifest_roots, refuse_inside_release

    roots = manifest_roots(manifest, inputs, keep=workspace / "arrays")
    refuse_inside_release(workspace, roots, "workspace")


def _progress_enabled(progress: bool | None) -> bool:
    if progress is None:
        return bool(getattr(sys.stderr, "isatty", lambda: False)())
    return bool(progress)


@contextlib.contextmanager
def _progress_bar(enabled: bool, total: int) -> Iterator[Callable[[int], None]]:
    if not enabled or total == 0:
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(TextColumn("extracting"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True)
    with bar:
        task = bar.add_task("extract", total=total)
        yield lambda n: bar.advance(task, n)


def scan(
    inputs: str | Path | pd.DataFrame | Iterable[str | Path | pd.DataFrame],
    workspace: str | Path | None = None,
    *,
    thumb_size: int = 96,
    mode: str = "exact",
    interpolation: str = "bicubic",
    workers: int | None = None,
    group_regex: str | None = None,
    progress: bool | None = None,
    executor: Executor | None = None,
    params: Any = None,
    extractor: Extractor | None = None,
    batch_size: int | None = None,
    label_map: Any = None,
    allow_outside_root: bool = False,
    follow_links: bool = False,
    max_file_bytes: int | None = None,
    image_column: str | None = None,
    allow_urls: bool = False,
    **list_options,
) -> Scan:
    """Scan a release: build its manifest and the features of every unique file, cached.

    Parameters
    ----------
    inputs : folder, list or table file, .npz, DataFrame manifest, arrays, dataset, or a list
        What :func:`splitscope.manifest.build_manifest` accepts: also Parquet/Arrow tables of
        embedded images, ``save_to_disk`` folders, imagefolders with metadata, MedMNIST
        ``.npz`` archives, :class:`splitscope.Arrays` (kept in ``<workspace>/arrays``) and
        ``datasets.Dataset`` / ``DatasetDict`` objects (read from their Arrow files).
    workspace : path-like, optional
        Workspace folder (default ``./splitscope-workspace``); never inside the dataset. It
        holds one scan's manifest and, per parameter key, the feature cache.
    thumb_size, mode, interpolation : optional
        Extraction parameters (``FeatureParams``); another value is another cache entry.
    workers : int, optional
        Worker processes (default: all cores; 1 runs in this process, on one BLAS thread,
        with the writes that other scans overlap run in their turn). The pool is ignored when
        ``executor`` is given.
    group_regex : str, optional
        Named-group regex for ``group`` (and ``frame``) over the basename,
        :func:`splitscope.manifest.apply_group_regex`.
    progress : bool, optional
        Progress bar on stderr: ``None`` (default) shows it when stderr is a terminal.
    executor : Executor, optional
        Where batches run (see :mod:`splitscope.features.executor`).
    params : FeatureParams, optional
        Extraction parameters given whole (then ``thumb_size``/``mode``/``interpolation`` are
        ignored).
    extractor : callable, optional
        ``extractor(files, params) -> (table, thumbs)``, or a raw batch dict as returned by
        :func:`splitscope.features.extract.extract_batch` (then the table is built in this
        process, so workers need no pandas); default :func:`~splitscope.features.extract.
        extract_files`, run in workers as ``extract_batch``. Must be a module-level function
        when run in worker processes.
    batch_size : int, optional
        Files per batch, every batch but the last (default: chosen from the number of files
        and workers, the last batches smaller so the workers finish together).
    label_map : str, path or mapping, optional
        Released labels → audited labels (``glioma=tumor,meningioma=tumor`` or a two-column
        CSV), applied once to the manifest (:func:`splitscope.manifest.labels.apply_label_map`).
    allow_outside_root : bool
        Read rows whose resolved path lies outside their release root (``path_issue``
        ``outside_root``; they stay marked). Default False: such rows are not read and have
        the status ``outside_root``.
    follow_links : bool
        Follow symbolic links to directories in a folder release (loops, and links to a
        directory outside the root unless ``allow_outside_root``, are excluded).
    max_file_bytes : int, optional
        Read cap (default 2 GiB): a larger file (or table cell) is ``too_large`` and never
        read (a cell is measured before it is copied out of the table).
    image_column : str, optional
        The image column of a table input (detected when there is one).
    allow_urls : bool
        Read rows naming a URL (``s3://``, ``https://``, …; ``path_issue`` ``url``) through
        fsspec; they stay marked. Default False: such rows are not read and have the status
        ``url``. A URL escaping a URL root needs ``allow_outside_root`` too.
    **list_options
        Passed to :func:`splitscope.manifest.read_list` (``columns``, ``root``, ``split``,
        ``corpus``, ``sheet``).

    Returns
    -------
    Scan

    Notes
    -----
    Safe to interrupt at any point: rerunning reuses every committed batch and gives the same
    result as an uninterrupted run (see :mod:`splitscope.features.workspace`).
    """
    started = time.perf_counter()
    timings: dict[str, float] = {}
    from splitscope.manifest.build import input_list as as_input_list

    input_list = as_input_list(inputs)
    workspace = Path(workspace if workspace is not None else DEFAULT_WORKSPACE).resolve()
    params = _scan_params(params, thumb_size, mode, interpolation, max_file_bytes)
    if _cold_pool_scan(workspace, params, executor, workers):
        start_fork_server()  # its start and imports overlap the manifest
    manifest = _build_manifest(input_list, workspace, follow_links=follow_links,
                               allow_outside_root=allow_outside_root, image_column=image_column,
                               group_regex=group_regex, label_map=label_map,
                               list_options=list_options)
    timings["manifest"] = time.perf_counter() - started

    extractor = extractor or extract.extract_files
    _check_scan_target(workspace, manifest, input_list, batch_size)
    # a scan with one worker keeps one thread busy: the writes meant to overlap the
    # extraction and the assembly (commits, result, manifest, pruning) run in their turn
    beside = workers is None or int(workers) > 1
    with workspace_errors(workspace), workspace_lock(workspace):
        store = FeatureStore(workspace, params.key())
        repairs = store.repair()

        t = time.perf_counter()
        found = _look_up(store, manifest, allow_outside_root, allow_urls)
        timings["lookup"] = time.perf_counter() - t

        t = time.perf_counter()
        executor, committed, extract_seconds = _extract_missing(
            store, found, params, extractor, executor, workers=workers, batch_size=batch_size,
            progress=progress, beside=beside)
        timings["extract"] = time.perf_counter() - t
        timings["extract_cpu_in_batches"] = extract_seconds

        t = time.perf_counter()
        result_name, written, checksums, manifest_written = _assemble(
            store, found, manifest, workspace, params, extractor, committed, beside)
        timings["assemble"] = time.perf_counter() - t
        # seconds of its own thread, which ran alongside the assembly
        manifest_sha, timings["write_manifest"] = manifest_written.result()
        timings["total"] = time.perf_counter() - started

        meta = _scan_meta(params, found, manifest, executor, result_name=result_name,
                          checksums=checksums, manifest_sha=manifest_sha, timings=timings,
                          repairs=repairs, allow_outside_root=allow_outside_root,
                          allow_urls=allow_urls)
        return _commit_scan(workspace, store, params, meta, written, beside)


def _scan_params(params: Any, thumb_size: int, mode: str, interpolation: str,
                 max_file_bytes: int | None) -> Any:
    """The extraction parameters: ``params`` when given whole, else built (and validated) from
    the scan's keywords, the read cap only when one is set (else ``FeatureParams``'s own)."""
    if params is not None:
        return params
    extra = {} if max_file_bytes is None else {"max_file_bytes": max_file_bytes}
    return make_params(thumb_size=thumb_size, mode=mode, interpolation=interpolation, **extra)


def _build_manifest(input_list: list, workspace: Path, *, follow_links: bool,
                    allow_outside_root: bool, image_column: str | None,
                    group_regex: str | None, label_map: Any,
                    list_options: dict[str, Any]) -> pd.DataFrame:
    """The scan's manifest: the inputs' rows (in-memory arrays kept in the workspace), with
    the URLs of a given table marked as listed ones are, the groups of ``group_regex`` and
    the labels of ``label_map``."""
    from splitscope.manifest import apply_group_regex, build_manifest

    manifest = build_manifest(input_list, follow_links=follow_links,
                              allow_outside_root=allow_outside_root, image_column=image_column,
                              array_store=workspace / "arrays", **list_options)
    unmarked = manifest["path_issue"].isna() & _url_files(manifest)
    if unmarked.any():  # a manifest given as a DataFrame: its URLs are marked as listed ones
        manifest.loc[unmarked, "path_issue"] = URL_ROW
    if group_regex:
        manifest = apply_group_regex(manifest, group_regex)
    if label_map is not None:
        from splitscope.manifest.labels import apply_label_map

        manifest = apply_label_map(manifest, label_map)
    return manifest


def _check_scan_target(workspace: Path, manifest: pd.DataFrame, input_list: list,
                       batch_size: int | None) -> None:
    """Refuse, before anything is written, a workspace that is not a folder or lies inside
    the dataset, and a batch size below one."""
    if workspace.exists() and not workspace.is_dir():
        raise InputError(f"workspace {workspace} exists and is not a folder")
    _check_not_inside_dataset(workspace, manifest, input_list)
    if batch_size is not None and int(batch_size) < 1:
        raise InputError(f"batch size must be at least 1; got {batch_size}")


@dataclass
class _Lookup:
    """The files a scan reads, against what the workspace holds for its parameters."""

    files: list[str]  # unique, sorted
    size: np.ndarray  # stat signature; negative where the file cannot be stat'ed
    mtime: np.ndarray
    entries: pd.DataFrame  # per file, where its features are: source, row_pos, thumb_pos
    todo: np.ndarray  # positions (in files) of the files with no features yet


def _look_up(store: FeatureStore, manifest: pd.DataFrame, allow_outside_root: bool,
             allow_urls: bool) -> _Lookup:
    """Plan the extraction against the workspace: the unique files the manifest reads, their
    stat signatures, and which of them the store does not hold with the same signature."""
    read = _read_mask(manifest, allow_outside_root, allow_urls)
    files = sorted(set(manifest.loc[read, "file"].dropna().astype(str)))
    size, mtime = file_signatures(files)
    entries = store.lookup(files, size, mtime)
    todo = np.flatnonzero(entries["source"].isna().to_numpy())
    return _Lookup(files=files, size=size, mtime=mtime, entries=entries, todo=todo)


def _extract_missing(store: FeatureStore, found: _Lookup, params: Any, extractor: Extractor,
                     executor: Executor | None, *, workers: int | None,
                     batch_size: int | None, progress: bool | None,
                     beside: bool) -> tuple[Executor | None, dict[str, Any], float]:
    """Extract the files of ``found.todo``, committing each batch as a shard as it finishes,
    and point ``found.entries`` at the shards. Returns the executor (the local one when none
    was given and a file can be read), this run's shard tables by source (so they are not
    read back) and the extraction seconds summed over the batches."""
    todo, size = found.todo, found.size
    if not len(todo):
        return executor, {}, 0.0
    # Files that cannot even be stat'ed (missing, ...) are cheap: they run here, in large
    # batches; the others go to the executor in batches sized for balance.
    unstatable = todo[size[todo] < 0]
    readable = todo[size[todo] >= 0]
    if len(readable) and executor is None:
        executor = _local_executor(workers, len(readable))
    n_workers = executor.workers if executor is not None else 1
    stages = _extraction_stages(executor, unstatable, readable, batch_size, n_workers)
    layout = _shard_schema(params)
    # the default extractor's table is built here, so workers never import pandas
    worker_extractor = None if extractor is extract.extract_files else extractor
    source = found.entries["source"].to_numpy(dtype=object).copy()
    row_pos = found.entries["row_pos"].to_numpy(dtype=np.int64).copy()
    thumb_pos = found.entries["thumb_pos"].to_numpy(dtype=np.int64).copy()
    committed: dict[str, Any] = {}  # this run's shards, not read back
    seconds = 0.0
    with _progress_bar(_progress_enabled(progress), len(todo)) as advance, \
            ShardCommitter(store, depth=min(8, 2 * max(1, n_workers)),
                           beside=beside) as committer:
        for runner, batches in stages:
            done = _finished_batches(runner, batches, found, params, worker_extractor, layout)
            with contextlib.closing(done):
                for name, take, table, thumbs, spent in done:
                    committer.submit(name, table, thumbs)
                    committed[f"shard:{name}"] = table
                    source[take] = f"shard:{name}"
                    row_pos[take], thumb_pos[take] = shard_positions(table)
                    seconds += spent
                    advance(len(take))
    found.entries["source"] = source
    found.entries["row_pos"] = row_pos
    found.entries["thumb_pos"] = thumb_pos
    if found.entries["source"].isna().any():  # cannot happen: every batch was committed
        raise RuntimeError("feature cache incomplete after extraction")
    return executor, committed, seconds


def _local_executor(workers: int | None, n_files: int) -> Executor:
    """The executor of a scan given none: the local pool of ``workers`` (default all cores),
    or this process for a handful of files (no pool start-up for them)."""
    n_workers = default_workers() if workers is None else int(workers)
    if n_workers < 1:
        raise InputError(f"workers must be at least 1; got {workers}")
    return make_executor(1 if n_files <= 16 else n_workers)


def _extraction_stages(executor: Executor | None, unstatable: np.ndarray,
                       readable: np.ndarray, batch_size: int | None,
                       n_workers: int) -> list[tuple[Executor, dict[str, np.ndarray]]]:
    """The extraction's stages, each a runner and its batches (file positions) by shard
    name: the files that cannot be stat'ed, in this process in large batches, then the
    others on ``executor``, tapered unless ``batch_size`` is given (then kept as it is).
    A stage with no files is left out; the names tell this run, stage and batch apart."""
    size_b = int(batch_size) if batch_size else _batch_size(len(readable), n_workers)
    run = f"{time.time_ns():020d}-{os.getpid()}"
    # (runner, files, batch size, tapered)
    plan = [(SerialExecutor(), unstatable, int(batch_size) if batch_size else 4096, False),
            (executor, readable, size_b, not batch_size)]
    stages = []
    for stage, (runner, subset, step, taper) in enumerate(plan):
        if not len(subset):
            continue
        bounds = _batch_bounds(len(subset), step, n_workers, taper)
        stages.append((runner, {f"{run}-{stage}-{i:06d}": subset[a:b]
                                for i, (a, b) in enumerate(bounds)}))
    return stages


def _finished_batches(runner: Executor, batches: dict[str, np.ndarray], found: _Lookup,
                      params: Any, worker_extractor: Extractor | None, layout: Any,
                      ) -> Iterator[tuple[str, np.ndarray, Any, np.ndarray, float]]:
    """Run ``batches`` on ``runner``; yield each one's name, file positions, shard table,
    thumbnails and extraction seconds as it finishes. A batch whose worker died twice
    becomes failed rows (``worker_crashed``), retried on the next scan."""
    files = found.files
    payloads = ((name, (worker_extractor, [files[i] for i in take], params))
                for name, take in batches.items())
    with contextlib.closing(runner.map(run_batch, payloads)) as results:
        for name, result in results:
            take = batches[name]
            batch_files = [files[i] for i in take]
            if isinstance(result, ChunkFailed):  # its worker died twice
                result = (extract.failure_batch(
                    batch_files, params, "worker_crashed",
                    "the worker process extracting this file's batch died "
                    f"twice ({result.detail}); retried on the next scan"), 0.0)
            output, seconds = result
            table, thumbs = _shard_table(output, batch_files, found.size[take],
                                         found.mtime[take], name, layout)
            yield name, take, table, thumbs, seconds


def _assemble(store: FeatureStore, found: _Lookup, manifest: pd.DataFrame, workspace: Path,
              params: Any, extractor: Extractor, committed: dict[str, Any],
              beside: bool) -> tuple[str, pd.DataFrame | None, Any, Future]:
    """Write the result generation, unless the current one already is this scan's, while the
    manifest is written (and hashed) in a thread. Returns the result's name, its feature
    table when written now, its checksums, and the manifest's write (SHA-256, seconds),
    finished."""
    threads = helper_thread("splitscope-manifest", beside)
    manifest_written = threads.submit(_write_manifest, manifest, workspace / "manifest.parquet")
    try:
        meta = store.meta()
        current = store.result_dir(meta)
        if current is not None and _result_is_current(meta, current.name, found):
            # checked against these records by the repair before the lookup
            checksums = meta["checksums"] if meta.get("checksums") else \
                store.result_records(current)
            return current.name, None, checksums, manifest_written
        result_name, written = store.write_result(
            found.entries, (params.thumb_size, params.thumb_size),
            schema=_schema(extractor, params), loaded=committed, beside=beside,
        )
        checksums = store.result_records(store.results / result_name)
        return result_name, written, checksums, manifest_written
    finally:
        threads.shutdown(wait=True)


def _result_is_current(meta: dict[str, Any], result_name: str, found: _Lookup) -> bool:
    """Whether the store's current result already is this scan's: nothing was extracted and
    it holds exactly the files looked up, each in its own row, in order."""
    entries = found.entries
    return bool(
        len(found.todo) == 0
        and (entries["source"] == f"result:{result_name}").all()
        and (entries["row_pos"].to_numpy() == np.arange(len(entries))).all()
        and meta.get("n_files") == len(found.files)
    )


def _scan_meta(params: Any, found: _Lookup, manifest: pd.DataFrame, executor: Executor | None,
               *, result_name: str, checksums: Any, manifest_sha: str,
               timings: dict[str, float], repairs: Any, allow_outside_root: bool,
               allow_urls: bool) -> dict[str, Any]:
    """The store's record of a finished scan (its ``meta.json``): parameters, result and
    checksums, the manifest's hash, counts, timings, executor, software, inputs, options."""
    from splitscope.records import software_versions

    extracted = len(found.todo)
    has_thumb = found.entries["thumb_pos"].to_numpy() >= 0
    return {
        "key": params.key(),
        "params": params.to_dict(),
        "thumb_size": int(params.thumb_size),
        "result": result_name,
        "checksums": checksums,
        "manifest_sha256": manifest_sha,
        "n_files": len(found.files),
        "n_thumbnails": int(has_thumb.sum()),
        "extracted": extracted,
        "reused": int(len(found.files) - extracted),
        "seconds": timings["total"],
        "timings": timings,
        "workers": getattr(executor, "workers", None) if extracted else 0,
        "executor": repr(executor) if extracted else None,
        "software": dict(software_versions()),
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "inputs": manifest.attrs.get("inputs", []),
        "allow_outside_root": bool(allow_outside_root),
        "allow_urls": bool(allow_urls),
        "repairs": repairs,
    }


def _commit_scan(workspace: Path, store: FeatureStore, params: Any, meta: dict[str, Any],
                 written: pd.DataFrame | None, beside: bool) -> Scan:
    """Commit the scan's record (the store's meta, then ``scan.json``, the last scan's
    parameters) and open its result. Everything that result holds is then committed twice,
    so the older shards and results are deleted while it is opened, under the caller's lock."""
    store.commit_meta(meta)
    write_json({"key": params.key(), "params": params.to_dict()}, workspace / "scan.json")
    with helper_thread("splitscope-prune", beside) as bg:
        pruned = bg.submit(_prune, store, store.result_dir(meta))
        # checked or written just now; a table written now is not read back
        result = _load_scan(workspace, params, verify=False, written=written)
        pruned.result()
    return result


def _write_manifest(manifest: pd.DataFrame, path: Path) -> tuple[str, float]:
    """Write the manifest (atomically); its SHA-256 and the seconds it took."""
    start = time.perf_counter()
    write_parquet(manifest, path)
    return sha256_file(path), time.perf_counter() - start


def _prune(store: FeatureStore, keep: Path | None) -> None:
    """Delete the shards and the result generations other than ``keep``."""
    store.prune_shards(store.committed_shards())
    store.prune_results(keep=keep)


def _cold_pool_scan(workspace: Path, params: Any, executor: Executor | None,
                    workers: int | None) -> bool:
    """Whether this scan will most likely extract with the local process pool: no executor
    given, more than one worker, and no finished scan with these parameters in the workspace
    (a rerun reuses its cache and often needs no pool; a handful of files runs serially)."""
    if executor is not None:
        return False
    n = default_workers() if workers is None else workers
    if not isinstance(n, int) or n < 2:
        return False
    return not FeatureStore(workspace, params.key()).meta_path.exists()


def _read_mask(manifest: pd.DataFrame, allow_outside_root: bool,
               allow_urls: bool = False) -> np.ndarray:
    """Rows whose file is read: no ``path_issue``, or ``outside_root`` or ``url`` when
    allowed; a URL never without ``allow_urls``."""
    issue = manifest["path_issue"].astype("string")
    ok = issue.isna()
    if allow_outside_root:
        ok |= issue == OUTSIDE_ROOT
    if allow_urls:
        ok |= issue == URL_ROW
    else:
        ok &= ~_url_files(manifest)
    return ok.to_numpy(dtype=bool)


def _url_files(manifest: pd.DataFrame) -> pd.Series:
    """Rows whose ``file`` is a URL (``scheme://``; a ``file://`` one is a local path by
    now)."""
    from splitscope.manifest.sources import URL_PATTERN

    return manifest["file"].astype("string").str.match(URL_PATTERN).fillna(False).astype(bool)


def _shard_schema(params: Any) -> Any:
    """Arrow schema (with its pandas metadata) of a shard built from a raw batch: the columns
    of :func:`~splitscope.features.extract.table_from_batch`, then the stat signature."""
    import pyarrow as pa

    table, thumbs = extract.table_from_batch(extract.failure_batch([], params, "ok", ""))
    table = _batch_table(table, thumbs, [], "schema")
    for column in SIGNATURE_COLUMNS:
        table[column] = np.array([], dtype=np.int64)
    return pa.Schema.from_pandas(table, preserve_index=False)


def _shard_table(output: Any, files: list[str], size: np.ndarray, mtime: np.ndarray, name: str,
                 layout: Any) -> tuple[Any, np.ndarray]:
    """One batch's shard table and thumbnails. A raw batch (the default extractor's) becomes
    an Arrow table of ``layout`` without pandas; an extractor's ``(table, thumbs)`` is checked
    and keyed as a DataFrame."""
    if isinstance(output, dict):
        thumbs = output["thumbs"]
        if len(output["rows"]) != len(files) or len(thumbs) != len(files):
            raise RuntimeError(
                f"extractor returned {len(output['rows'])} rows and {len(thumbs)} thumbnails "
                f"for {len(files)} files (batch {name})"
            )
        fixed = {"file": files, SIGNATURE_COLUMNS[0]: size, SIGNATURE_COLUMNS[1]: mtime}
        return extract.arrow_from_batch(output, layout, fixed), thumbs
    table, thumbs = output
    table = _batch_table(table, thumbs, files, name)
    table[SIGNATURE_COLUMNS[0]] = size
    table[SIGNATURE_COLUMNS[1]] = mtime
    return table, thumbs


def _batch_table(table: pd.DataFrame, thumbs: np.ndarray, files: list[str],
                 name: str) -> pd.DataFrame:
    """Check an extractor's output for one batch and key it by ``file``."""
    if len(table) != len(files) or len(thumbs) != len(files):
        raise RuntimeError(
            f"extractor returned {len(table)} rows and {len(thumbs)} thumbnails for "
            f"{len(files)} files (batch {name})"
        )
    table = table.reset_index(drop=True).copy()
    table["file"] = pd.array(files, dtype="string")
    if "has_thumb" not in table.columns:
        raise RuntimeError("extractor output lacks the has_thumb column")
    return table


def _schema(extractor: Extractor, params: Any) -> dict[str, Any] | None:
    """The extractor's declared column dtypes (from its output for no files)."""
    try:
        output = extractor([], params)
        table, _ = extract.table_from_batch(output) if isinstance(output, dict) else output
    except Exception:  # noqa: BLE001 - an extractor that cannot take [] declares nothing
        return None
    return {str(c): dtype for c, dtype in table.dtypes.items()}


# ----------------------------------------------------------------------------- reopening


def load_scan(workspace: str | Path | None = None, params: Any = None, *,
              verify: bool = True) -> Scan:
    """Reopen a finished scan without recomputing anything.

    Parameters
    ----------
    workspace : path-like, optional
        The workspace folder (default ``./splitscope-workspace``).
    params : FeatureParams or str, optional
        Which feature store: parameters or a key; default the last scan's.
    verify : bool
        Check the result's files against their commit records (size and SHA-256) first.

    Raises
    ------
    InputError
        When the workspace holds no finished scan for these parameters, when its manifest
        changed since those features were assembled, or when a file is damaged (rerun
        ``scan``, which repairs it).
    """
    return _load_scan(workspace, params, verify=verify)


def _load_scan(workspace: str | Path | None, params: Any, *, verify: bool,
               written: pd.DataFrame | None = None) -> Scan:
    """:func:`load_scan`; ``written`` is the result's feature table when the caller has just
    written it (the scan), equal to what reading it back gives, so it is not read again."""
    workspace = Path(workspace if workspace is not None else DEFAULT_WORKSPACE).resolve()
    if params is None:
        try:
            last = read_json(workspace / "scan.json")
        except (ValueError, OSError) as exc:
            raise InputError(f"workspace {workspace} is damaged (scan.json cannot be read: "
                             f"{exc}); rerun `splitscope scan` to repair it") from exc
        if not isinstance(last, dict) or "key" not in last:
            raise InputError(f"no finished scan in {workspace}; run `splitscope scan` first")
        key = last["key"]
    else:
        key = params if isinstance(params, str) else params.key()
    store = FeatureStore(workspace, key)
    meta = store.meta()
    folder = store.result_dir(meta)
    if folder is None:
        known = sorted(p.name for p in (workspace / "features").glob("*")
                       if (p / "meta.json").is_file())
        raise InputError(
            f"no finished scan with feature key {key!r} in {workspace}; found: "
            f"{', '.join(known) or 'none'}; run `splitscope scan` with these parameters"
        )
    manifest_path = workspace / "manifest.parquet"
    if not manifest_path.is_file() or sha256_file(manifest_path) != meta.get("manifest_sha256"):
        raise InputError(
            f"the manifest in {workspace} changed since the features with key {key!r} were "
            f"assembled (or a scan was interrupted); rerun `splitscope scan`"
        )
    problem = store.check_result(meta) if verify else None
    if problem:
        raise InputError(f"workspace {workspace} is damaged ({problem}); rerun `splitscope "
                         f"scan` on the same inputs to repair it")
    manifest = with_manifest_columns(pd.read_parquet(manifest_path))
    features = pd.read_parquet(folder / "features.parquet") if written is None else written
    features = features.drop(columns=list(SIGNATURE_COLUMNS), errors="ignore")
    thumbnails = open_thumbnails(folder / "thumbnails.npy")
    if params is None or isinstance(params, str):
        params = _params_from_dict(meta.get("params", {}))
    return Scan(manifest=manifest, features=features, thumbnails=thumbnails, params=params,
                workspace=workspace, meta=meta)


def _params_from_dict(values: dict) -> Any:
    names = {f.name for f in fields(FeatureParams)}
    return FeatureParams(**{k: v for k, v in values.items() if k in names})
