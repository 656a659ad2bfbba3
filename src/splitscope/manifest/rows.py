"""The row table every input form shares: the manifest's columns, split names, the list-file
column roles, reading a list table and turning it into rows. Input forms (folders and lists in
:mod:`splitscope.manifest.files`, tables of images in :mod:`~splitscope.manifest.embedded`,
pixel arrays in :mod:`~splitscope.manifest.arrays`, the table of forms in
:mod:`~splitscope.manifest.forms`) build on this module and not on each other."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.manifest.sources import is_url, join_url, local_path, normalize_url, url_inside

MANIFEST_COLUMNS = [
    "row",  # 0..n-1, release order; the row identity every export is keyed by
    "corpus",  # which release the row belongs to (several corpora may share one manifest)
    "path",  # the path as released (relative, posix separators), verbatim
    "split",  # normalized split: train / val / test, or the released name lower-cased
    "split_released",  # the split name as released (folder name or list value)
    "label",
    "source",
    "group",
    "frame",
    "file",  # where the bytes are on this machine (absolute), <NA> when unknown
    "basename",
    "path_issue",  # <NA>, or why the path is not read as given: outside_root, url, invalid_utf8
]


EMBEDDED_COLUMNS = [
    "table",  # the table or array archive holding the row's image (absolute), <NA> for a file
    "table_row",  # the row's index in it
    "stored_path",  # the path stored with an embedded image (Hugging Face Image struct)
    "content",  # file (a file's bytes), embedded (bytes in a table cell), array (pixels only)
]
"""Columns a manifest has when one of its inputs is a table or an array (else absent, so a
manifest of files is unchanged); rows from files then have ``content`` ``file``."""


CONTENT_FILE, CONTENT_EMBEDDED, CONTENT_ARRAY = "file", "embedded", "array"


OUTSIDE_ROOT = "outside_root"
"""``path_issue`` of a row whose resolved path (``..``, an absolute path, a symbolic link) lies
outside its release root (the folder, or the list's root). Such a row is not read unless the
scan allows it, and stays marked either way."""


URL_ROW = "url"
"""``path_issue`` of a row naming a URL other than ``file://`` (``s3://``, ``https://``, …):
read through fsspec only when the scan allows URLs (``allow_urls``, ``--allow-urls``), and
marked either way. A URL that escapes a URL root (``--list-root s3://…``) is
``outside_root`` instead, and needs both permissions."""


INVALID_UTF8 = "invalid_utf8"
"""``path_issue`` of a row whose released path is not valid UTF-8: ``path`` holds it with the
invalid bytes written as ``\\xNN`` escapes (distinct from every valid path) and ``file`` is
``<NA>``, so it is listed, never read and never a crash."""


_SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "trn": "train",
    "val": "val",
    "valid": "val",
    "validation": "val",
    "dev": "val",
    "test": "test",
    "testing": "test",
    "tst": "test",
}


# Column names recognised in list files, in order of preference; explicit names override.
_COLUMN_ALIASES = {
    "path": ["path", "image_path", "filepath", "file_path", "file", "filename", "image", "img",
             "image_id", "name"],
    "split": ["split", "subset", "partition", "set", "fold"],
    "label": ["label", "class", "target", "diagnosis", "category", "y"],
    "source": ["source", "dataset", "site", "center", "centre", "origin"],
    "group": ["group", "patient", "patient_id", "patientid", "subject", "subject_id", "video",
              "video_id", "study", "lesion_id"],
    "frame": ["frame", "frame_index", "frame_idx", "slice", "slice_index"],
}


def normalize_split(name: object) -> object:
    """Map a released split name to ``train``/``val``/``test`` (case-insensitive); other names
    are lower-cased and kept; missing stays missing."""
    if name is None or (isinstance(name, float) and pd.isna(name)) or name is pd.NA:
        return pd.NA
    key = str(name).strip().lower()
    return _SPLIT_ALIASES.get(key, key)


def _read_csv(path: Path, sep: str, text: bool) -> pd.DataFrame:
    """CSV/TSV as strings (``text``) or typed; bytes that are not UTF-8 are kept as lone
    surrogates (``surrogateescape``), for :func:`_valid_text` to escape and mark. Cells the
    project's CSV writer guarded against formulas read as they were written from
    (:func:`splitscope.records.exports.restore_formulas`)."""
    from splitscope.records.exports import restore_formulas

    options = {"sep": sep, "keep_default_na": False, "na_values": [""]}
    try:
        return restore_formulas(pd.read_csv(path, dtype=str if text else None, **options))
    except UnicodeDecodeError:
        return restore_formulas(pd.read_csv(path, dtype=object if text else None,
                                            encoding_errors="surrogateescape", **options))


def read_table(path: Path, sheet: str | int | None = None, *, text: bool = True,
               strip_names: bool = True, what: str = "list file") -> pd.DataFrame:
    """Read a CSV/TSV, Parquet or XLSX table.

    ``text`` keeps CSV values as strings (paths and labels are never re-typed); ``strip_names``
    trims column names (a prediction reader keeps them verbatim, to report a name that differs
    only by whitespace). ``what`` names the file in error messages. A missing, empty,
    unparsable or row-less file is an :class:`InputError`.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{what} not found: {path}")
    suffix = path.suffix.lower()
    try:
        if suffix in {".csv", ".txt", ".tsv"}:
            table = _read_csv(path, "\t" if suffix == ".tsv" else ",", text)
        elif suffix in {".parquet", ".pq"}:
            table = pd.read_parquet(path)
        elif suffix in {".xlsx", ".xlsm"}:
            from splitscope.manifest.workbook import read_workbook_frame

            table = read_workbook_frame(path, sheet, what=what)
        else:
            raise InputError(
                f"unsupported format {suffix!r} for {what} {path}; use CSV, TSV, Parquet or XLSX"
            )
    except InputError:
        raise
    except pd.errors.EmptyDataError as exc:
        raise InputError(f"{what} {path} is empty") from exc
    except Exception as exc:  # parser errors of every backend end here with the file named
        raise InputError(f"cannot read {what} {path}: {type(exc).__name__}: {exc}") from exc
    table.columns = [str(c).strip() if strip_names else str(c) for c in table.columns]
    if table.shape[1] == 0 or len(table) == 0:
        raise InputError(f"{what} {path} has no rows")
    return table


def _escape_bytes(raw: bytes) -> tuple[str, bool]:
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace"), True


def os_name(name: str) -> tuple[str, bool]:
    """A name as the operating system returned it, as valid text: a name that is not valid
    UTF-8 (Python holds its bytes as lone surrogates) is written with ``\\xNN`` escapes, as
    an invalid list path is; and whether it had to be."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return _escape_bytes(os.fsencode(name))[0], True
    return name, False


def refuse_undecodable(path: str | Path, what: str) -> None:
    """Raise :class:`InputError` when ``path`` itself is not valid UTF-8: its rows' ``file``
    could not be stored or shown. Names below it are rows marked ``invalid_utf8``."""
    shown, bad = os_name(str(path))
    if bad:
        raise InputError(f"the {what} path {shown} is not valid UTF-8; rename it (or link it "
                         f"under a UTF-8 name) and rerun")


def _valid_text(values: pd.Series) -> tuple[pd.Series, np.ndarray]:
    """Text cells as valid UTF-8 strings and a mask of those that were not: bytes (a Parquet
    binary column) are decoded, and undecodable bytes (or the lone surrogates a CSV read with
    ``surrogateescape`` holds for them) are written as ``\\xNN`` escapes, so every value can
    be stored and shown and no two distinct values become equal."""
    invalid = np.zeros(len(values), dtype=bool)
    if values.dtype != object:
        return values, invalid
    out = values.to_numpy(dtype=object, copy=True)
    for i, v in enumerate(out):
        if isinstance(v, (bytes, bytearray)):
            out[i], invalid[i] = _escape_bytes(bytes(v))
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: undecodable bytes of a CSV
                out[i] = _escape_bytes(v.encode("utf-8", "surrogateescape"))[0]
                invalid[i] = True
    return pd.Series(out, index=values.index, dtype=object), invalid


def _pick_column(table: pd.DataFrame, role: str, explicit: str | None, where: str,
                 required: bool) -> str | None:
    if explicit is not None:
        if explicit not in table.columns:
            raise InputError(
                f"column {explicit!r} (for {role}) missing in {where}; found: "
                f"{', '.join(map(str, table.columns))}"
            )
        return explicit
    lower = {c.lower(): c for c in table.columns}
    for alias in _COLUMN_ALIASES[role]:
        if alias in lower:
            return lower[alias]
    if required:
        raise InputError(
            f"no {role} column in {where}; found: {', '.join(map(str, table.columns))}; "
            f"name it explicitly (e.g. --path-column)"
        )
    return None


def _finish(frame: pd.DataFrame, corpus: str) -> pd.DataFrame:
    """Give a partial row table every manifest column with stable dtypes."""
    n = len(frame)
    out = pd.DataFrame(index=range(n))
    out["row"] = pd.array(range(n), dtype="int64")
    out["corpus"] = pd.array([corpus] * n, dtype="string")
    for col in ("path", "split_released", "label", "source", "group", "file"):
        values = frame[col] if col in frame else pd.Series([pd.NA] * n)
        out[col] = pd.array(list(values), dtype="string")
    out["split"] = pd.array([normalize_split(v) for v in out["split_released"]], dtype="string")
    if "frame" in frame:
        out["frame"] = pd.to_numeric(pd.Series(list(frame["frame"])), errors="coerce").astype("Int64")
    else:
        out["frame"] = pd.array([pd.NA] * n, dtype="Int64")
    out["basename"] = pd.array(
        [p.rsplit("/", 1)[-1] if isinstance(p, str) else pd.NA for p in out["path"]],
        dtype="string",
    )
    issue = frame["path_issue"] if "path_issue" in frame else pd.Series([pd.NA] * n)
    out["path_issue"] = pd.array(list(issue), dtype="string")
    return out[MANIFEST_COLUMNS]


def embedded_key(container: str, member: str, index: int, width: int) -> str:
    """The ``file`` key of item ``index`` of ``member`` (an image column, an ``.npz`` array) in
    ``container`` (an absolute path): ``<container>::<member>/<index>``, the index zero-padded
    to ``width`` digits so that one container's keys sort in row order. The feature stage reads
    it back with :func:`splitscope.features.sources.parse_key`."""
    return f"{container}::{member}/{index:0{max(1, width)}d}"


def finish_rows(frame: pd.DataFrame, corpus: str, *, content: str) -> pd.DataFrame:
    """:func:`_finish` for rows of tables or arrays: the manifest columns plus
    :data:`EMBEDDED_COLUMNS`; ``basename`` is the stored path's file name when there is one,
    else ``<NA>`` for arrays (no name to match) and the path's last component for tables."""
    out = _finish(frame, corpus)
    n = len(out)
    stored = frame["stored_path"] if "stored_path" in frame else pd.Series([pd.NA] * n)
    out["table"] = pd.array(list(frame["table"]), dtype="string")
    out["table_row"] = pd.array(list(frame["table_row"]), dtype="Int64")
    out["stored_path"] = pd.array(list(stored), dtype="string")
    out["content"] = pd.array([content] * n, dtype="string")
    named = out["stored_path"].notna()
    base = out["basename"].to_numpy(dtype=object, copy=True)
    if "stored_name" in frame:  # the reader split the stored path before escaping it
        base[named.to_numpy()] = list(frame["stored_name"][named.to_numpy()])
    else:
        base[named.to_numpy()] = [str(p).replace("\\", "/").rsplit("/", 1)[-1]
                                  for p in out["stored_path"][named]]
    if content == CONTENT_ARRAY:
        base[~named.to_numpy()] = None
    out["basename"] = pd.array([pd.NA if v is None else v for v in base], dtype="string")
    return out[MANIFEST_COLUMNS + EMBEDDED_COLUMNS]


def manifest_columns(manifest: pd.DataFrame) -> list[str]:
    """:data:`MANIFEST_COLUMNS`, plus :data:`EMBEDDED_COLUMNS` when the manifest has them."""
    extra = EMBEDDED_COLUMNS if "content" in manifest.columns else []
    return MANIFEST_COLUMNS + extra


def content_of(rows: pd.DataFrame) -> pd.Series:
    """``content`` of each row: ``file`` where the manifest has no such column."""
    if "content" in rows.columns:
        return rows["content"].astype("string").fillna(CONTENT_FILE)
    return pd.Series(CONTENT_FILE, index=rows.index, dtype="string")


def with_manifest_columns(manifest: pd.DataFrame) -> pd.DataFrame:
    """``manifest`` with every column of :data:`MANIFEST_COLUMNS` (a manifest built by hand or
    by an earlier version lacks ``path_issue``: added as ``<NA>``), in that order."""
    if "path_issue" not in manifest.columns:
        manifest = manifest.copy()
        manifest["path_issue"] = pd.array([pd.NA] * len(manifest), dtype="string")
    return manifest


def _inside(real: str, root_real: str) -> bool:
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


class _Containment:
    """Whether joined paths resolve inside one release root, resolving each folder once.

    A path is resolved as the kernel would open it: its folder through ``os.path.realpath``
    (``..`` after a symbolic link included), then the file itself when it is a symbolic link."""

    def __init__(self, root: str | Path) -> None:
        self.root = os.path.realpath(root)
        self._dirs: dict[str, bool] = {}

    def inside(self, joined: str) -> bool:
        try:
            return self._inside(joined)
        except ValueError:  # a NUL byte: no such path can be opened; the read lists it
            return True

    def _inside(self, joined: str) -> bool:
        folder, name = os.path.split(joined)
        ok = self._dirs.get(folder)
        if ok is None:
            ok = self._dirs[folder] = _inside(os.path.realpath(folder), self.root)
        if name in ("", ".", ".."):
            return _inside(os.path.realpath(joined), self.root)
        if not ok:
            return False
        try:
            if not os.path.islink(joined):
                return True
        except (OSError, ValueError):
            return True
        return _inside(os.path.realpath(joined), self.root)


def list_rows(table: pd.DataFrame, path: Path, *, root: str | Path | None = None,
              corpus: str | None = None, split: str | None = None,
              columns: Mapping[str, str] | None = None,
              base: str | Path | None = None) -> pd.DataFrame:
    """The manifest of a list already read as ``table`` (:func:`read_list`; ``path`` names it).
    ``base`` is the folder the paths are joined to when it differs from ``root`` (the
    containment root), as for an imagefolder's per-split metadata."""
    columns = dict(columns or {})
    unknown = set(columns) - set(_COLUMN_ALIASES)
    if unknown:
        raise InputError(f"unknown column role(s) {sorted(unknown)}; use {sorted(_COLUMN_ALIASES)}")
    where = str(path)
    picked = {
        role: _pick_column(table, role, columns.get(role), where, required=(role == "path"))
        for role in _COLUMN_ALIASES
    }
    if split is not None and picked["split"] is not None and "split" not in columns:
        picked["split"] = None  # a constant split given by the caller wins over a guessed column
    elif split is not None and picked["split"] is not None:
        raise InputError(f"both a split column ({picked['split']!r}) and split={split!r} given")
    raw_paths, invalid = _valid_text(table[picked["path"]])
    for role in ("split", "label", "source", "group", "frame"):
        if picked[role] is not None and picked[role] != picked["path"]:
            table[picked[role]], _ = _valid_text(table[picked[role]])
    missing = raw_paths.isna() | (raw_paths.astype("string").str.strip() == "")
    if missing.any():
        first = [int(i) + 2 for i in missing[missing].index[:5]]  # spreadsheet line numbers
        raise InputError(
            f"{int(missing.sum())} row(s) of {where} have no path (first at line(s) {first})"
        )
    root_given = root is not None
    root_url = str(root) if root is not None and is_url(str(root)) else None
    if root_url is not None and local_path(root_url) is not None:  # file://: a local folder
        root, root_url = local_path(root_url), None
    root = Path(root) if root is not None and root_url is None else path.parent
    base = Path(base) if base is not None else root
    # Windows separators become "/"; an escaped invalid path keeps its backslashes, which
    # keeps it distinct from every valid path
    paths = pd.Series([p if bad else p.replace("\\", "/")
                       for p, bad in zip(raw_paths.astype(str), invalid)], dtype=object)
    frame = pd.DataFrame({"path": paths})
    located = [_locate(p, base, root_url) for p in paths]
    if root_url is None:
        contained = _Containment(root)
        inside = np.array([contained.inside(j) if not url else False
                           for j, url in located], dtype=bool)
    else:  # a URL root holds only URLs under it
        inside = np.array([url and url_inside(j, root_url) for j, url in located], dtype=bool)
    frame["file"] = [pd.NA if bad else (j if url else os.path.abspath(j))
                     for (j, url), bad in zip(located, invalid)]
    # a URL is marked as one, unless it escapes a URL root: then it is outside it
    url = np.array([u for _, u in located], dtype=bool)
    escapes = ~inside if root_url is not None else np.zeros(len(inside), dtype=bool)
    frame["path_issue"] = np.where(invalid, INVALID_UTF8,
                                   np.where(url & ~escapes, URL_ROW,
                                            np.where(inside, None, OUTSIDE_ROOT)))
    frame["split_released"] = split if split is not None else (
        table[picked["split"]] if picked["split"] else pd.NA)
    for role in ("label", "source", "group", "frame"):
        if picked[role] is not None:
            frame[role] = table[picked[role]].astype("string")
    manifest = _finish(frame, corpus or path.stem)
    relative = sum(1 for p, (_, is_link), bad in zip(paths, located, invalid)
                   if not (is_link or bad or is_url(p) or os.path.isabs(p)))
    manifest.attrs = {
        "inputs": [{"kind": "list", "path": str(path), "columns": picked,
                    "root": root_url or str(root), "split": split,
                    # where relative paths resolve: the list's folder unless a root was given
                    "root_given": root_given, "relative_paths": int(relative)}],
        "excluded": [],
    }
    return manifest


def _locate(path: str, base: Path, root_url: str | None) -> tuple[str, bool]:
    """Where a listed path points: ``(file, is_url)``. A ``file://`` URL is a local path; any
    other URL is kept (normalised); with a URL root, relative paths are joined to it
    (:mod:`splitscope.manifest.sources`)."""
    if is_url(path):
        local = local_path(path)
        if local is None:
            return normalize_url(path), True
        path = local
    if root_url is not None and not os.path.isabs(path):
        return join_url(root_url, path), True
    return (path if os.path.isabs(path) else os.path.join(base, path)), False
