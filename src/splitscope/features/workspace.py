"""The workspace: an embedded, server-less feature cache on disk.

Layout of a workspace folder::

    WORKSPACE/
      .lock                       advisory lock: one scan writes a workspace at a time
      scan.json                   which parameter key the last scan used
      manifest.parquet            the last scan's manifest
      features/<key>/             one store per extraction-parameter key (FeatureParams.key())
        meta.json                 params, software versions, timings, counts; names the result
                                  and records its files' sizes and SHA-256
        shards/<name>.parquet     feature rows of one finished batch
        shards/<name>.npy         that batch's thumbnails (rows with a thumbnail only)
        shards/<name>.json        the batch's commit record: size and SHA-256 of both files
        results/<generation>/     the assembled result of a finished scan:
          features.parquet          one row per unique file, sorted by file, with thumb_index
          thumbnails.npy            (n_thumbs, S, S) uint8, opened as a memory map

Why it is safe to interrupt (Ctrl-C or ``kill -9`` at any point): every artifact is written to a
temporary name in the same folder, flushed and fsynced, then moved into place with
``os.replace`` (atomic on POSIX and Windows) and the folder is fsynced. A batch counts as done
only once its commit record ``.json`` is in place (its ``.npy`` and ``.parquet`` are committed
first); a result generation counts only once ``meta.json`` names it, and ``meta.json`` is
replaced last.

The scanning process commits the batches in one background thread (:class:`ShardCommitter`),
in batch order, while it receives the next ones, so a batch's writes and fsyncs overlap the
extraction of the others (a scan with one worker commits each in its own thread instead,
:func:`helper_thread`); each batch still has its own commit record. A batch whose result
was received but not yet committed when the process is killed is extracted again by the next
run (at most ``2 × workers`` batches wait, and never more than 8); an interruption inside
Python (Ctrl-C, an error) first finishes the commits of every batch received.

Self-healing: before a scan uses the cache, :meth:`FeatureStore.repair` checks every committed
file against the size and SHA-256 in its commit record. A shard that fails is moved aside into
``WORKSPACE/quarantine/`` and its files are extracted again; a result or ``meta.json`` that fails
is moved aside the same way and the result is rebuilt. What was moved is named in the scan's
summary (``repairs``), and the repaired result is the same as a clean run's. Whatever a killed
run leaves behind is either committed (and reused) or a temporary/unreferenced file (and
removed by the next run). Feature extraction is deterministic per file, so a file's entry does
not depend on which batch or run produced it, and the assembled result (sorted by file) is the
same whatever the interruption history or worker count.

Incremental: a cache entry is keyed by ``(file, size, mtime_ns)`` as seen by ``os.stat`` just
before extraction (``-1, -1`` when the file cannot be stat'ed, e.g. ``missing``); a file whose
signature is unchanged is not read again. Entries whose failure may be transient
(:data:`RETRY_STATUSES`) are retried on every scan. Like any mtime-based cache (``make``,
``git``), a rewrite that keeps both the size and the nanosecond mtime is not seen.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import io
import json
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

import numpy as np
import pandas as pd

from splitscope.errors import InputError

__all__ = [
    "RETRY_STATUSES",
    "FeatureStore",
    "InPlace",
    "ShardCommitter",
    "atomic_path",
    "check_record",
    "file_record",
    "file_signatures",
    "helper_thread",
    "output_file_lock",
    "output_lock",
    "output_locks",
    "read_json",
    "shard_positions",
    "workspace_errors",
    "workspace_lock",
    "write_bytes",
    "write_json",
    "write_parquet",
]

# Failure reasons that may go away without the file's size or mtime changing (a chmod changes
# neither, nor does a larger read cap or a worker that no longer crashes): not reused.
RETRY_STATUSES = frozenset({"permission_denied", "unreadable", "too_large", "worker_crashed"})

SIGNATURE_COLUMNS = ("_size", "_mtime_ns")  # stat signature stored beside every cached row
RESULT_FILES = ("features.parquet", "thumbnails.npy")  # a result generation's files
QUARANTINE = "quarantine"  # where damaged files are moved (WORKSPACE/quarantine/)
_TMP_PREFIX = ".tmp-"


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


# ----------------------------------------------------------------------------- atomic writes


def _fsync_dir(folder: Path) -> None:
    if os.name != "posix":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


@contextlib.contextmanager
def atomic_path(path: str | Path, sync_dir: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and ``os.replace`` it onto
    ``path`` (then fsync the folder, unless ``sync_dir`` is False because a later commit in the
    same folder does it). On error the temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX + path.name + ".", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    with contextlib.suppress(OSError):  # mkstemp makes 0600; give the usual umask'ed mode
        os.chmod(tmp_path, 0o666 & ~_UMASK)
    try:
        yield tmp_path
        _fsync_file(tmp_path)
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        raise
    if sync_dir:
        _fsync_dir(path.parent)


def write_parquet(frame: pd.DataFrame, path: str | Path, sync_dir: bool = True) -> None:
    """Write a DataFrame to Parquet atomically (see :func:`atomic_path`)."""
    with atomic_path(path, sync_dir=sync_dir) as tmp:
        frame.to_parquet(tmp, index=False)


def write_npy(array: np.ndarray, path: str | Path, sync_dir: bool = True) -> None:
    """Write an array as ``.npy`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path, sync_dir=sync_dir) as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.ascontiguousarray(array), allow_pickle=False)


def write_bytes(parts: list[Any], path: str | Path, sync_dir: bool = True) -> dict[str, Any]:
    """Write bytes-like ``parts`` one after the other as one file, atomically (see
    :func:`atomic_path`); returns its commit record (``{"bytes", "sha256"}``, as
    :func:`file_record` would read it back), hashed from the bytes written."""
    digest, size = hashlib.sha256(), 0
    with atomic_path(path, sync_dir=sync_dir) as tmp, open(tmp, "wb") as fh:
        for part in parts:
            view = memoryview(part).cast("B")
            fh.write(view)
            digest.update(view)
            size += view.nbytes
    return {"bytes": size, "sha256": digest.hexdigest()}


def write_json(data: Any, path: str | Path) -> None:
    """Write JSON (sorted keys, indented) atomically (see :func:`atomic_path`)."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    with atomic_path(path) as tmp:
        tmp.write_text(text + "\n", encoding="utf-8")


def read_json(path: str | Path) -> Any:
    """Read a JSON file; ``None`` when it does not exist. A file that is not valid JSON
    raises :class:`ValueError`."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def file_record(path: str | Path) -> dict[str, Any]:
    """``{"bytes", "sha256"}`` of a file: what a commit record holds for it."""
    path = Path(path)
    with open(path, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return {"bytes": path.stat().st_size, "sha256": digest}


def check_record(path: str | Path, record: dict | None) -> str | None:
    """Why ``path`` does not match its commit record (``None`` when it does)."""
    path = Path(path)
    if not isinstance(record, dict):
        return f"{path.name} has no commit record"
    try:
        size = path.stat().st_size
    except OSError:
        return f"{path.name} is missing"
    if size != record.get("bytes"):
        return f"{path.name} has {size:,} bytes, its commit record {record.get('bytes')}"
    if file_record(path)["sha256"] != record.get("sha256"):
        return f"{path.name} does not match its SHA-256 (same size, changed bytes)"
    return None


def open_thumbnails(path: str | Path) -> np.ndarray:
    """Open a thumbnail ``.npy`` read-only as a memory map (an empty array is read plainly,
    since an empty file region cannot be mapped)."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError:  # zero-length data cannot be memory-mapped
        return np.load(path, allow_pickle=False)


def release_pages(thumbnails) -> None:
    """Drop the pages of a memory-mapped thumbnail store from this process's resident set.

    The store is read-only, so its pages stay in the page cache and a later read faults them
    back in from there; without this, a search that reads every thumbnail ends holding the
    whole store (9 KiB a row at 96²) in its resident set. A plain array is left alone.
    """
    mm = getattr(thumbnails, "_mmap", None)
    if mm is not None and hasattr(mmap, "MADV_DONTNEED"):  # not on every platform
        mm.madvise(mmap.MADV_DONTNEED)


@contextlib.contextmanager
def workspace_lock(workspace: str | Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``workspace/.lock`` (released by the OS when the
    process dies, so a killed scan never leaves it locked). A second concurrent scan of the
    same workspace gets an :class:`InputError` instead of corrupting the cache."""
    with _folder_lock(Path(workspace), ".lock", f"workspace {workspace} is in use by another "
                                               f"scan; wait for it or pass another --workspace"):
        yield


OUT_LOCK = ".splitscope-out.lock"
"""The lock file a run holds in its ``--out`` folder while it writes there."""


@contextlib.contextmanager
def output_lock(out_dir: str | Path, what: str = "--out") -> Iterator[None]:
    """Hold an exclusive advisory lock on ``out_dir/.splitscope-out.lock`` for a whole run
    (released by the OS when the process dies): a second run writing to the same ``--out`` at
    once gets an :class:`InputError` instead of mixing its files with the first's. Every CLI
    verb that writes an output folder holds it (:func:`output_locks`). An output folder that
    is a symbolic link is refused before the lock is made (nothing is written where it points;
    :func:`splitscope.records.publish.refuse_link`)."""
    from splitscope.records.publish import refuse_link

    refuse_link(out_dir, what)
    with _folder_lock(Path(out_dir), OUT_LOCK, f"{what} {out_dir} is in use by another run "
                                               f"writing there; wait for it or pass another "
                                               f"{what}"):
        yield


@contextlib.contextmanager
def output_file_lock(out_file: str | Path, what: str = "--out") -> Iterator[None]:
    """:func:`output_lock` for a verb whose output is one file: the lock is
    ``.<file name>.splitscope-out.lock`` beside it (the file itself is replaced by a rename,
    so it cannot hold the lock), and runs writing other files of that folder go on."""
    path = Path(out_file)
    with _folder_lock(path.parent, f".{path.name}{OUT_LOCK}",
                      f"{what} {out_file} is being written by another run; wait for it or "
                      f"pass another {what}"):
        yield


_LOCKED_OUTPUTS = (("out_dir", "--out", output_lock), ("out_file", "--out", output_file_lock),
                   ("directory", "DIRECTORY", output_lock))
"""A CLI verb's parameters naming what it writes: its flag, and the lock it takes."""


@contextlib.contextmanager
def output_locks(params: dict) -> Iterator[None]:
    """Hold the lock of every output a CLI verb's parsed ``params`` name (``out_dir``,
    ``out_file``; the demo's ``directory``) while the verb runs."""
    with contextlib.ExitStack() as stack:
        for name, flag, lock in _LOCKED_OUTPUTS:
            if params.get(name):
                stack.enter_context(lock(params[name], flag))
        yield


@contextlib.contextmanager
def _folder_lock(folder: Path, name: str, busy: str) -> Iterator[None]:
    """Hold ``folder/name`` locked; a folder this call created is removed again when the run
    fails with nothing in it but the lock, so that a refused run leaves nothing behind."""
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no advisory locks on this platform
        yield
        return
    failed = True
    try:
        with open(folder / name, "a+") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                raise InputError(busy) from exc
            try:
                yield
                failed = False
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    finally:
        if created and failed:
            with contextlib.suppress(OSError):
                if os.listdir(folder) == [name]:
                    (folder / name).unlink()
                    folder.rmdir()


_WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM,
                 getattr(errno, "EDQUOT", errno.ENOSPC)}


@contextlib.contextmanager
def workspace_errors(workspace: str | Path) -> Iterator[None]:
    """Turn a failure to write the workspace (disk full, read-only, no permission) into one
    :class:`InputError` sentence naming the workspace, the free space and the fix. The
    workspace stays consistent: every write is atomic (see :func:`atomic_path`), so a rerun
    with space to spare reuses what was committed."""
    workspace = Path(workspace)
    try:
        yield
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        try:
            free = f"{shutil.disk_usage(_existing(workspace)).free / 2**20:,.0f} MiB free"
        except OSError:
            free = "free space unknown"
        where = exc.filename or workspace
        raise InputError(
            f"cannot write the workspace {workspace} ({exc.strerror or exc} at {where}; "
            f"{free}); free some space, make it writable, or pass another --workspace"
        ) from exc


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


# ----------------------------------------------------------------------------- signatures


def file_signatures(files: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(size, mtime_ns)`` of each file as int64 arrays; ``-1`` where ``os.stat`` fails. An
    embedded image (a table cell, an array row; :mod:`splitscope.features.sources`) has the
    signature of the table or archive that holds it, stat'ed once. For a URL, its size and
    change marker from ``fs.info`` (:func:`splitscope.manifest.sources.url_signature`)."""
    from splitscope.features.sources import container_of

    size = np.full(len(files), -1, dtype=np.int64)
    mtime = np.full(len(files), -1, dtype=np.int64)
    seen: dict[str, tuple[int, int]] = {}
    for i, name in enumerate(files):
        if "://" in name:
            from splitscope.manifest.sources import is_url, url_signature

            if is_url(name):
                size[i], mtime[i] = url_signature(name)
                continue
        target = container_of(name) if "::" in name else name
        if target in seen:
            size[i], mtime[i] = seen[target]
            continue
        try:
            st = os.stat(target)
        except (OSError, ValueError):  # missing, no permission on a folder, NUL in name
            continue
        size[i] = st.st_size
        mtime[i] = st.st_mtime_ns
        if target is not name:
            seen[target] = (st.st_size, st.st_mtime_ns)
    return size, mtime


# ----------------------------------------------------------------------------- the store


class FeatureStore:
    """The cache and the assembled result for one extraction-parameter key.

    Parameters
    ----------
    workspace : path-like
        The workspace folder.
    key : str
        ``FeatureParams.key()``; another thumbnail size, interpolation or mode is another store.
    """

    def __init__(self, workspace: str | Path, key: str) -> None:
        if not key or any(c in key for c in "/\\") or key in {".", ".."}:
            raise InputError(f"invalid feature-store key {key!r}")
        self.workspace = Path(workspace)
        self.key = key
        self.root = self.workspace / "features" / key
        self.shards = self.root / "shards"
        self.results = self.root / "results"
        self.meta_path = self.root / "meta.json"
        self._written: dict[Path, dict[str, Any]] = {}  # commit records of files written here

    # -- reading ---------------------------------------------------------------------------

    def meta(self) -> dict | None:
        """The committed ``meta.json``, or ``None`` before the first finished scan. A
        ``meta.json`` that is not valid JSON is an :class:`InputError` saying how to repair it
        (a scan does, see :meth:`repair`)."""
        try:
            meta = read_json(self.meta_path)
        except (ValueError, OSError) as exc:
            raise InputError(
                f"workspace {self.workspace} is damaged ({self.meta_path.name} of feature key "
                f"{self.key} cannot be read: {exc}); rerun `splitscope scan` to repair it"
            ) from exc
        return meta if isinstance(meta, dict) else None

    def check_result(self, meta: dict | None) -> str | None:
        """Why the result that ``meta`` names does not match its commit record (``None`` when
        it does, or when there is no result; a result written before commit records existed
        is trusted)."""
        if not meta or not meta.get("result"):
            return None
        folder = self.results / meta["result"]  # a file of it deleted is a problem too
        records = meta.get("checksums")
        if records is None:
            return None
        for name in RESULT_FILES:
            problem = check_record(folder / name, records.get(name))
            if problem:
                return f"result {folder.name}: {problem}"
        return None

    def result_records(self, folder: Path) -> dict[str, dict]:
        """Commit records (size, SHA-256) of a result generation's files, for ``meta.json``:
        hashed from the bytes written when :meth:`write_result` of this store wrote them, else
        read from the files."""
        return {name: self._written.get(folder / name) or file_record(folder / name)
                for name in RESULT_FILES}

    def repair(self) -> list[dict[str, str]]:
        """Check every committed file against its commit record and move what fails aside
        (into ``WORKSPACE/quarantine/``), so its files are extracted again and the result is
        rebuilt; then :meth:`clean`. Returns one ``{"path", "problem", "moved_to"}`` per
        file or folder moved."""
        try:
            return self._repair()
        except OSError as exc:
            raise InputError(
                f"workspace {self.workspace} is damaged and cannot be repaired ({exc}); remove "
                f"the folder {self.root} (its features are extracted again) or pass another "
                f"--workspace"
            ) from exc

    def _repair(self) -> list[dict[str, str]]:
        repairs: list[dict[str, str]] = []
        try:
            meta = read_json(self.meta_path)
            if meta is not None and not isinstance(meta, dict):
                raise ValueError("not a JSON object")
        except (ValueError, UnicodeDecodeError, IsADirectoryError) as exc:
            repairs.append(self._quarantine(self.meta_path, f"not valid JSON ({exc})"))
            meta = None
        problem = self.check_result(meta) if meta else None
        if problem:
            folder = self.results / meta["result"]
            if folder.exists():
                repairs.append(self._quarantine(folder, problem))
            repairs.append(self._quarantine(self.meta_path, f"names a damaged result "
                                                            f"({problem})"))
        for name in self.committed_shards():
            problem = self.check_shard(name)
            if problem:
                for suffix in (".json", ".parquet", ".npy"):
                    path = self.shards / f"{name}{suffix}"
                    if path.exists():
                        repairs.append(self._quarantine(path, f"shard {name}: {problem}"))
        self.clean()
        return repairs

    def check_shard(self, name: str) -> str | None:
        """Why a committed shard does not match its commit record (``None`` when it does)."""
        try:
            record = read_json(self.shards / f"{name}.json")
        except (ValueError, UnicodeDecodeError):
            return "its commit record is not valid JSON"
        record = record if isinstance(record, dict) else {}
        for suffix in ("parquet", "npy"):
            problem = check_record(self.shards / f"{name}.{suffix}", record.get(suffix))
            if problem:
                return problem
        return None

    def _quarantine(self, path: Path, problem: str) -> dict[str, str]:
        folder = self.workspace / QUARANTINE / f"{time.time_ns():020d}-{self.key}"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / path.name
        os.replace(path, target)
        return {"path": str(path), "problem": problem, "moved_to": str(target)}

    def result_dir(self, meta: dict | None = None) -> Path | None:
        """Folder of the committed result generation, or ``None``."""
        meta = self.meta() if meta is None else meta
        if not meta or not meta.get("result"):
            return None
        folder = self.results / meta["result"]
        if not (folder / "features.parquet").is_file() or not (folder / "thumbnails.npy").is_file():
            return None
        return folder

    def committed_shards(self) -> list[str]:
        """Names of committed shards (commit record and both files present), in commit
        order."""
        if not self.shards.is_dir():
            return []
        names = sorted(p.stem for p in self.shards.glob("*.json")
                       if not p.name.startswith(_TMP_PREFIX))
        return [n for n in names if (self.shards / f"{n}.parquet").is_file()
                and (self.shards / f"{n}.npy").is_file()]

    def clean(self) -> None:
        """Remove what an interrupted run left behind: temporary files, a shard's files
        without its commit record, result generations that ``meta.json`` does not name."""
        for folder in (self.root, self.shards):
            if folder.is_dir():
                for p in folder.glob(_TMP_PREFIX + "*"):
                    with contextlib.suppress(OSError):
                        p.unlink()
        if self.shards.is_dir():
            committed = set(self.committed_shards())
            for part in [*self.shards.glob("*.npy"), *self.shards.glob("*.parquet"),
                         *self.shards.glob("*.json")]:
                if part.stem not in committed:
                    with contextlib.suppress(OSError):
                        part.unlink()
        self.prune_results(keep=self.result_dir())

    def prune_results(self, keep: Path | None) -> None:
        """Delete every result generation except ``keep``."""
        if not self.results.is_dir():
            return
        for folder in self.results.iterdir():
            if keep is None or folder.resolve() != keep.resolve():
                shutil.rmtree(folder, ignore_errors=True)

    def prune_shards(self, names: list[str]) -> None:
        """Delete shards whose entries a committed result now holds (commit record first, so
        a shard is never half-present as committed)."""
        for name in names:
            for suffix in (".json", ".parquet", ".npy"):
                with contextlib.suppress(OSError):
                    (self.shards / f"{name}{suffix}").unlink()

    def index(self) -> pd.DataFrame:
        """Every cached entry: ``file``, ``_size``, ``_mtime_ns``, ``status``, ``source`` (the
        result generation or shard it lives in), ``row_pos`` (row in that source's table) and
        ``thumb_pos`` (row in its thumbnail array, -1 when none). The current result comes
        first, then shards in commit order."""
        parts = []
        result = self.result_dir()
        if result is not None:
            table = _read_columns(result / "features.parquet",
                                  ["file", *SIGNATURE_COLUMNS, "status", "thumb_index"])
            parts.append(_index_part(table, f"result:{result.name}",
                                     table["thumb_index"].astype(np.int64)))
        for name in self.committed_shards():
            table = _read_columns(self.shards / f"{name}.parquet",
                                  ["file", *SIGNATURE_COLUMNS, "status", "has_thumb"])
            has = table["has_thumb"].astype(bool)
            parts.append(_index_part(table, f"shard:{name}", _thumb_positions(has)))
        if not parts:
            return pd.DataFrame({
                "file": pd.array([], dtype="string"), "_size": np.array([], dtype=np.int64),
                "_mtime_ns": np.array([], dtype=np.int64), "status": pd.array([], dtype="string"),
                "source": pd.array([], dtype="object"),
                "row_pos": np.array([], dtype=np.int64), "thumb_pos": np.array([], dtype=np.int64),
            })
        return pd.concat(parts, ignore_index=True)

    def lookup(self, files: list[str], size: np.ndarray, mtime: np.ndarray) -> pd.DataFrame:
        """Cache entries for ``files`` with their current signatures: a frame aligned with
        ``files`` holding ``source``, ``row_pos``, ``thumb_pos`` (``source`` missing where the
        file must be extracted)."""
        wanted = pd.DataFrame({
            "file": pd.array(files, dtype="string"),
            "_size": np.asarray(size, dtype=np.int64),
            "_mtime_ns": np.asarray(mtime, dtype=np.int64),
            "_order": np.arange(len(files), dtype=np.int64),
        })
        index = self.index()
        index = index[~index["status"].isin(list(RETRY_STATUSES)).to_numpy(dtype=bool)]
        index = index.drop_duplicates(["file", "_size", "_mtime_ns"], keep="first")
        merged = wanted.merge(index.drop(columns="status"), on=["file", "_size", "_mtime_ns"],
                              how="left", sort=False)
        merged = merged.sort_values("_order", kind="stable").reset_index(drop=True)
        merged["source"] = merged["source"].astype(object).where(merged["source"].notna(), None)
        for column in ("row_pos", "thumb_pos"):
            merged[column] = merged[column].fillna(-1).astype(np.int64)
        return merged.drop(columns="_order")

    # -- writing ---------------------------------------------------------------------------

    def commit_shard(self, name: str, table: Any, thumbs: np.ndarray) -> pd.DataFrame:
        """Commit one finished batch: ``table`` (one row per file, with ``has_thumb`` and the
        signature columns; a ``pyarrow.Table`` as the scan builds it, or a DataFrame) and
        ``thumbs`` (one slice per row; only rows with a thumbnail are kept). The thumbnails and
        the table are committed first; the commit record (size and SHA-256 of both, hashed from
        the bytes written), committed last, marks the batch as done. Returns the batch's index
        entries (``source``, ``row_pos``, ``thumb_pos`` per row of ``table``), as :meth:`index`
        would read them back."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if isinstance(table, pd.DataFrame):
            table = pa.Table.from_pandas(table, preserve_index=False)
        has = shard_has_thumb(table)
        if len(thumbs) != table.num_rows:
            raise ValueError(f"batch {name}: {table.num_rows} rows but {len(thumbs)} thumbnails")
        kept = np.ascontiguousarray(np.asarray(thumbs, dtype=np.uint8)[has])
        header = io.BytesIO()  # the bytes np.save writes: header, then the array's buffer
        np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(kept))
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        # the record's commit syncs the folder
        record = {"npy": write_bytes([header.getbuffer(), kept.reshape(-1)],
                                     self.shards / f"{name}.npy", sync_dir=False),
                  "parquet": write_bytes([sink.getvalue()], self.shards / f"{name}.parquet",
                                         sync_dir=False)}
        write_json(record, self.shards / f"{name}.json")
        return pd.DataFrame({
            "source": [f"shard:{name}"] * table.num_rows,
            "row_pos": np.arange(table.num_rows, dtype=np.int64),
            "thumb_pos": _thumb_positions(has),
        })

    def write_result(
        self,
        entries: pd.DataFrame,
        thumb_shape: tuple[int, int],
        schema: dict[str, Any] | None = None,
        block: int = 4096,
        loaded: dict[str, Any] | None = None,
        beside: bool = True,
    ) -> tuple[str, pd.DataFrame]:
        """Assemble a new result generation from cache entries.

        ``entries`` is aligned with the result's rows (sorted by file) and holds ``source``,
        ``row_pos``, ``thumb_pos`` for each. The feature rows are gathered from their sources
        and conformed to ``schema`` (column → dtype) so every history yields the same dtypes;
        thumbnails are copied in result order from their sources' memory maps, ``block`` rows
        at a time, into a fresh ``.npy`` written sequentially (never all in RAM) and hashed as
        it is written (:meth:`result_records`), in a thread while the table is gathered and
        written. ``loaded`` maps a source to its table when
        the caller still holds it (the shards this scan just committed, as DataFrames or
        ``pyarrow`` tables), so it is not read back; each is removed from ``loaded`` once used,
        so the tables are not held twice. Arrow tables of one schema become one DataFrame in
        a single conversion. With ``beside`` false (a scan with one worker) the thumbnails
        are written first, in this thread.
        Returns the generation name and the table as written. The generation is not current
        until :meth:`commit_meta` names it.
        """
        generation = f"{time.time_ns():020d}-{os.getpid()}"
        folder = self.results / generation
        folder.mkdir(parents=True, exist_ok=False)
        sources = entries["source"].to_numpy(dtype=object)
        row_pos = entries["row_pos"].to_numpy(dtype=np.int64)
        thumb_pos = entries["thumb_pos"].to_numpy(dtype=np.int64)
        thumb_index = _thumb_positions(thumb_pos >= 0)

        # the thumbnails are written in a thread while the table is gathered and written
        threads = helper_thread("splitscope-result", beside)
        thumbs_written = threads.submit(self._write_thumbnails, folder, sources, thumb_pos,
                                        thumb_shape, block)
        try:
            table = self._result_table(entries, sources, row_pos, thumb_index, schema, loaded)
            buffer = io.BytesIO()
            table.to_parquet(buffer, index=False)
            self._written[folder / "features.parquet"] = write_bytes(
                [buffer.getbuffer()], folder / "features.parquet")
        finally:
            threads.shutdown(wait=True)
        thumbs_written.result()
        return generation, table

    def _result_table(self, entries: pd.DataFrame, sources: np.ndarray, row_pos: np.ndarray,
                      thumb_index: np.ndarray, schema: dict[str, Any] | None,
                      loaded: dict[str, Any] | None) -> pd.DataFrame:
        """The result's feature table: rows gathered from their sources, conformed."""
        pieces = []  # (first result row, rows of the result in order) per source
        arrow: dict[Any, list] = {}  # this run's Arrow shards, by schema: converted together
        for source in pd.unique(sources):
            take = np.flatnonzero(sources == source)
            table = loaded.pop(source, None) if loaded else None  # released once sliced
            if table is not None and not isinstance(table, pd.DataFrame):
                arrow.setdefault(table.schema, []).append((take, row_pos[take], table))
                continue
            if table is None:
                table = pd.read_parquet(self._source_table(source))
            piece = table.iloc[row_pos[take]].reset_index(drop=True)
            piece.index = take
            pieces.append((int(take[0]), piece))
        for group in arrow.values():
            pieces.append(_arrow_piece(group))
        if pieces:
            pieces.sort(key=lambda item: item[0])  # columns in the order of the first source
            table = pd.concat([piece for _, piece in pieces]).sort_index()
        else:  # no files at all: an empty table with the declared columns
            table = pd.DataFrame({c: pd.Series(dtype=d) for c, d in (schema or {}).items()})
            if "file" not in table.columns:
                table["file"] = pd.Series(dtype="string")
        table = table.drop(columns=["has_thumb", "thumb_index"], errors="ignore")
        table = _conform(table, schema)
        table.insert(1, "thumb_index", thumb_index)
        return table.reset_index(drop=True)

    def _write_thumbnails(self, folder: Path, sources: np.ndarray, thumb_pos: np.ndarray,
                          thumb_shape: tuple[int, int], block: int) -> None:
        """The result's ``thumbnails.npy``: the thumbnails of the rows with one (``thumb_pos``
        >= 0), in result order, each run of rows from one source copied ``block`` rows at a
        time from its memory map, written sequentially and hashed as they are written."""
        rows = np.flatnonzero(thumb_pos >= 0)
        n_thumbs = len(rows)
        runs = np.split(rows, np.flatnonzero(sources[rows][1:] != sources[rows][:-1]) + 1)
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {
            "descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)), "fortran_order": False,
            "shape": (n_thumbs, *thumb_shape)})
        digest, written = hashlib.sha256(header.getvalue()), len(header.getvalue())
        opened: dict[str, np.ndarray] = {}
        with atomic_path(folder / "thumbnails.npy") as tmp, open(tmp, "wb") as fh:
            fh.write(header.getvalue())
            for run in runs:
                if not len(run):
                    continue
                source = sources[run[0]]
                if source not in opened:
                    opened[source] = open_thumbnails(self._source_thumbs(source))
                for start in range(0, len(run), block):
                    rows_part = thumb_pos[run[start:start + block]]
                    part = np.ascontiguousarray(opened[source][rows_part], dtype=np.uint8)
                    if part.shape[1:] != tuple(thumb_shape):
                        raise ValueError(f"thumbnails of {source} are {part.shape[1:]}, "
                                         f"not {tuple(thumb_shape)}")
                    view = memoryview(part.reshape(-1))
                    fh.write(view)
                    digest.update(view)
                    written += view.nbytes
                release_pages(opened[source])  # else every shard's pages end resident
        opened.clear()
        self._written[folder / "thumbnails.npy"] = {"bytes": written, "sha256": digest.hexdigest()}

    def commit_meta(self, meta: dict) -> None:
        """Make ``meta['result']`` the current result (the last write of a scan)."""
        write_json(meta, self.meta_path)

    def _source_table(self, source: str) -> Path:
        kind, name = source.split(":", 1)
        if kind == "result":
            return self.results / name / "features.parquet"
        return self.shards / f"{name}.parquet"

    def _source_thumbs(self, source: str) -> Path:
        kind, name = source.split(":", 1)
        if kind == "result":
            return self.results / name / "thumbnails.npy"
        return self.shards / f"{name}.npy"


def shard_has_thumb(table: Any) -> np.ndarray:
    """The ``has_thumb`` column of a shard table (``pyarrow.Table`` or DataFrame) as bools."""
    if isinstance(table, pd.DataFrame):
        return table["has_thumb"].astype(bool).to_numpy()
    return table.column("has_thumb").to_numpy(zero_copy_only=False).astype(bool)


def shard_positions(table: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(row_pos, thumb_pos)`` of a shard table's rows, as :meth:`FeatureStore.commit_shard`
    returns them."""
    has = shard_has_thumb(table)
    return np.arange(len(has), dtype=np.int64), _thumb_positions(has)


class InPlace:
    """What a one-thread pool offers (``submit``, ``shutdown``, ``with``), with each call run
    at once in the caller's thread and its outcome kept in the future returned: where a scan
    has one worker, the work meant to overlap it runs in its turn instead, so that one thread
    is busy at a time."""

    def submit(self, fn, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - raised again by future.result(), as a pool does
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True) -> None:
        """Nothing to wait for: every call has run."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        return None


def helper_thread(name: str, beside: bool = True) -> ThreadPoolExecutor | InPlace:
    """A one-thread pool (threads named ``name``) for work that overlaps the caller's, or,
    when not ``beside`` (a scan with one worker), :class:`InPlace`."""
    if beside:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    return InPlace()


class ShardCommitter:
    """Commits finished batches (:meth:`FeatureStore.commit_shard`) in one background thread,
    in the order given, while the scan takes the next results: a batch's writes, hashes and
    fsyncs overlap the work on the next ones (Arrow, hashlib and file I/O release the GIL).
    With ``beside`` false (a scan with one worker) each batch is committed when submitted,
    in the caller's thread. A batch still counts as done only once its own commit record is
    in place.

    At most ``depth`` batches wait (each holds its thumbnails); :meth:`submit` blocks beyond
    that. The first failed commit raises from the next :meth:`submit` or from leaving the
    ``with`` block, which waits for every submitted batch, also when the scan is interrupted,
    so a batch received is committed unless the process itself dies."""

    def __init__(self, store: FeatureStore, depth: int = 4, beside: bool = True) -> None:
        self.store = store
        self.depth = max(1, int(depth))
        self._pending: collections.deque = collections.deque()
        self._threads = helper_thread("splitscope-commit", beside)

    def submit(self, name: str, table: Any, thumbs: np.ndarray) -> None:
        """Queue one batch's commit (after those queued before it)."""
        while self._pending and (self._pending[0].done() or len(self._pending) >= self.depth):
            self._pending.popleft().result()
        self._pending.append(self._threads.submit(self.store.commit_shard, name, table, thumbs))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            while self._pending:
                future = self._pending.popleft()
                if exc_type is None:
                    future.result()
                else:  # already failing: finish the commits, keep the first error
                    future.exception()
        finally:
            self._threads.shutdown(wait=True)


def _arrow_piece(group: list[tuple[np.ndarray, np.ndarray, Any]]) -> tuple[int, pd.DataFrame]:
    """The rows that Arrow tables of one schema give to the result, as one DataFrame made by
    one conversion (each table's pandas metadata restores the dtypes): ``group`` holds
    ``(result rows, rows of the table, table)`` per source."""
    import pyarrow as pa

    offsets = np.cumsum([0] + [table.num_rows for _, _, table in group[:-1]])
    take = np.concatenate([t for t, _, _ in group])
    rows = np.concatenate([offset + r for offset, (_, r, _) in zip(offsets, group)])
    table = pa.concat_tables([table for _, _, table in group])
    if not np.array_equal(rows, np.arange(table.num_rows)):  # a cold scan's shards are in order
        table = table.take(pa.array(rows, type=pa.int64()))
    piece = table.to_pandas()
    piece.index = take
    return int(take.min()), piece


def _thumb_positions(has: np.ndarray) -> np.ndarray:
    """Row in the packed thumbnail array of each row with a thumbnail (-1 for the others):
    only rows with a thumbnail are stored, in row order."""
    return np.where(has, np.cumsum(has) - 1, -1).astype(np.int64)


def _read_columns(path: Path, columns: list[str]) -> dict[str, np.ndarray]:
    """Columns of a Parquet file as numpy arrays (object arrays for strings), without the
    cost of building a DataFrame; the index reads one such table per shard."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=columns)
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in columns}


def _index_part(table: dict[str, np.ndarray], source: str, thumb_pos: np.ndarray) -> pd.DataFrame:
    n = len(table["file"])
    return pd.DataFrame({
        "file": pd.array(table["file"], dtype="string"),
        "_size": table["_size"].astype(np.int64),
        "_mtime_ns": table["_mtime_ns"].astype(np.int64),
        "status": pd.array(table["status"], dtype="string"),
        "source": np.full(n, source, dtype=object),
        "row_pos": np.arange(n, dtype=np.int64),
        "thumb_pos": np.asarray(thumb_pos, dtype=np.int64),
    })


def _conform(table: pd.DataFrame, schema: dict[str, Any] | None) -> pd.DataFrame:
    """Cast columns to the extractor's declared dtypes, so that the dtypes of the assembled
    table never depend on how the rows were batched (an all-missing column in one batch must
    not change the dtype of the whole)."""
    if not schema:
        return table
    out = table.copy()
    for column, dtype in schema.items():
        if column in out.columns and out[column].dtype != dtype:
            try:
                out[column] = out[column].astype(dtype)
            except (TypeError, ValueError):
                pass  # keep the stored dtype rather than fail a finished scan
    return out
