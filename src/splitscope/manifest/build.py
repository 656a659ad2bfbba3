"""Building the manifest from folder layouts and list files (CSV, Parquet, XLSX)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from splitscope.errors import InputError
from splitscope.manifest.rows import (
    _SPLIT_ALIASES,
    CONTENT_FILE,
    EMBEDDED_COLUMNS,
    INVALID_UTF8,
    MANIFEST_COLUMNS,
    OUTSIDE_ROOT,
    _finish,
    _inside,
    list_rows,
    os_name,
    read_table,
    refuse_undecodable,
    with_manifest_columns,
)

# Reasons of the excluded table (``manifest.attrs["excluded"]``): entries found on disk under a
# folder release that are not manifest rows. Every entry is in exactly one of the two.
EXCLUDED_HIDDEN_FILE = "hidden file"
EXCLUDED_HIDDEN_DIR = "inside a hidden directory"
EXCLUDED_ROOT_FILE = "file at the root, outside the folder layout"
EXCLUDED_DIR_LINK = "symbolic link to a directory, not followed (follow_links to follow)"
EXCLUDED_LINK_LOOP = "symbolic link loop (the directory is already on the walked path)"
EXCLUDED_LINK_OUTSIDE = ("symbolic link to a directory outside the release root, not followed "
                         "(allow_outside_root / --allow-outside-root to follow)")
EXCLUDED_UNLISTABLE = "directory cannot be listed"


_LIST_SUFFIXES = {".csv", ".tsv", ".txt", ".parquet", ".pq", ".xlsx", ".xlsm"}


def is_list_file(path: str | Path) -> bool:
    """True when ``path`` is a file whose suffix names a supported list format."""
    p = Path(path)
    return p.is_file() and p.suffix.lower() in _LIST_SUFFIXES


def _walk(root: str, follow_links: bool, allow_outside_root: bool = False
          ) -> tuple[list[tuple[str, bool]], list[dict]]:
    """Every entry under ``root``: ``(relative path, inside root)`` of each candidate row (any
    entry that is not a directory: files, symbolic links to files, dangling links, special
    files) and the excluded table (hidden entries, links to directories, unlistable folders).

    Directories are listed in name order (code-point), so the walk is the same on every
    machine. A symbolic link to a directory is followed only with ``follow_links``, never
    into a directory already on the walked path (a loop), and never to a directory outside
    ``root`` unless ``allow_outside_root`` (its names are not listed either).
    """
    rows: list[tuple[str, bool]] = []
    excluded: list[dict] = []
    root_real = os.path.realpath(root)
    start = os.stat(root)
    # (folder on disk, relative prefix, hidden reason or None, folder lies inside root,
    #  (device, inode) of the folders on the path to it)
    stack = [(root, "", None, True, frozenset({(start.st_dev, start.st_ino)}))]
    while stack:
        folder, prefix, hidden, inside, ancestors = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            if not prefix:
                raise InputError(f"cannot list folder {root}: {exc.strerror or exc}") from exc
            excluded.append({"path": prefix.rstrip("/"), "reason": EXCLUDED_UNLISTABLE,
                             "detail": exc.strerror or str(exc)})
            continue
        below = []
        for entry in entries:
            rel = prefix + entry.name
            is_hidden = entry.name.startswith(".")
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_link = entry.is_symlink()
                link_to_dir = is_link and entry.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = is_link = link_to_dir = False
            if is_dir or link_to_dir:
                reason = hidden or (EXCLUDED_HIDDEN_DIR if is_hidden else None)
                if not is_dir and not follow_links:
                    excluded.append({"path": rel, "reason": reason or EXCLUDED_DIR_LINK})
                    continue
                try:
                    st = os.stat(entry.path) if link_to_dir else entry.stat(follow_symlinks=False)
                except OSError as exc:  # gone or changed since it was listed
                    excluded.append({"path": rel, "reason": EXCLUDED_UNLISTABLE,
                                     "detail": exc.strerror or str(exc)})
                    continue
                ident = (st.st_dev, st.st_ino)
                if ident in ancestors:
                    excluded.append({"path": rel, "reason": reason or EXCLUDED_LINK_LOOP})
                    continue
                here = inside if is_dir else _inside(os.path.realpath(entry.path), root_real)
                if not here and not is_dir and not allow_outside_root:
                    excluded.append({"path": rel, "reason": reason or EXCLUDED_LINK_OUTSIDE})
                    continue
                below.append((entry.path, rel + "/", reason, here, ancestors | {ident}))
            elif hidden:
                excluded.append({"path": rel, "reason": hidden})
            elif is_hidden:
                excluded.append({"path": rel, "reason": EXCLUDED_HIDDEN_FILE})
            else:
                here = inside and (not is_link
                                   or _inside(os.path.realpath(entry.path), root_real))
                rows.append((rel, here))
        stack.extend(reversed(below))
    return rows, excluded


def read_folder(root: str | Path, corpus: str | None = None, *,
                follow_links: bool = False, allow_outside_root: bool = False) -> pd.DataFrame:
    """Manifest of a folder release, layout detected automatically.

    ``ROOT/<split>/<class>/file`` when every top-level folder is a split name (recognised
    case-insensitively: train/training, val/valid/validation, test/testing), else
    ``ROOT/<class>/file``; a folder with no subfolders is a flat list of unlabelled files.
    Rows are sorted by released path (code-point order) so the manifest is the same on every
    machine. Every entry that is not a directory is a row (image or not, a dangling link or a
    FIFO too), so that the feature stage records what it could not read, except those listed
    in ``attrs['excluded']`` with a reason: hidden files (names starting with ``.``), files
    inside hidden directories, files directly under ROOT beside the layout's folders (a README,
    an answer key), symbolic links to directories (followed with ``follow_links``; loops, and
    links to a directory outside ROOT unless ``allow_outside_root``, excluded), and
    directories that cannot be listed. A row whose resolved path (a symbolic
    link) lies outside ROOT has ``path_issue`` ``outside_root``.
    """
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"not a folder: {root}")
    refuse_undecodable(root, "release folder")
    walked, excluded = _walk(str(root), follow_links, allow_outside_root)
    # a name that is not valid UTF-8 is a row shown with \xNN escapes, marked and never read
    found = sorted((shown, inside, bad) for (rel, inside) in walked
                   for shown, bad in [os_name(rel)])
    for entry in excluded:
        entry["path"] = os_name(entry["path"])[0]
    if not found:
        raise InputError(f"folder {root} holds no files")
    parts = [rel.split("/") for rel, _, _ in found]
    top = {p[0] for p in parts if len(p) > 1}
    split_layout = bool(top) and all(name.lower() in _SPLIT_ALIASES for name in top)
    if top:  # files beside the split/class folders (README, answer keys) are not released rows
        excluded += [{"path": rel, "reason": EXCLUDED_ROOT_FILE}
                     for (rel, _, _), p in zip(found, parts) if len(p) == 1]
        kept = [i for i, p in enumerate(parts) if len(p) > 1]
        found, parts = [found[i] for i in kept], [parts[i] for i in kept]
    base = os.path.abspath(root) + os.sep
    rows = []
    for (rel, inside, bad), p in zip(found, parts):
        split = label = pd.NA
        if split_layout:
            split = p[0]
            label = p[1] if len(p) > 2 else pd.NA
        elif len(p) > 1:
            label = p[0]
        rows.append({"path": rel, "split_released": split, "label": label,
                     "file": pd.NA if bad else base + rel.replace("/", os.sep),
                     "path_issue": INVALID_UTF8 if bad else pd.NA if inside else OUTSIDE_ROOT})
    manifest = _finish(pd.DataFrame(rows), corpus or root.name)
    manifest.attrs = {
        "inputs": [{"kind": "folder", "path": str(root), "root": str(root.resolve()),
                    "follow_links": bool(follow_links), "layout":
                    "split/class/file" if split_layout else "class/file" if top else "flat"}],
        "excluded": excluded,
    }
    return manifest


def read_list(
    path: str | Path,
    *,
    root: str | Path | None = None,
    corpus: str | None = None,
    split: str | None = None,
    columns: Mapping[str, str] | None = None,
    sheet: str | int | None = None,
) -> pd.DataFrame:
    """Manifest of a list file (CSV, TSV, Parquet, XLSX).

    Parameters
    ----------
    path : path-like
        The list file.
    root : path-like, optional
        The release root: the folder the listed paths are relative to; default: the list
        file's folder. A path that resolves outside it (``..``, an absolute path elsewhere, a
        symbolic link) gets ``path_issue`` ``outside_root``; a path that is not valid UTF-8
        gets ``invalid_utf8`` and no ``file``. A URL root (``s3://bucket/release``) holds the
        URLs under it, and relative paths are joined to it; listed URLs are read through
        fsspec (the rule is in :mod:`splitscope.manifest.sources`).
    corpus : str, optional
        Corpus name; default: the list file's stem.
    split : str, optional
        Split for every row, for lists that are one split each (e.g. ``split_0.csv``); an error
        when the list has a split column too.
    columns : mapping, optional
        Explicit column names by role: ``path``, ``split``, ``label``, ``source``, ``group``,
        ``frame``. Roles not given are found by common names (``image_path``, ``class``, ...).
    sheet : str or int, optional
        XLSX sheet.
    """
    path = Path(path)
    refuse_undecodable(path, "list file")
    table = read_table(path, sheet=sheet)
    return list_rows(table, path, root=root, corpus=corpus, split=split, columns=columns)


def _is_dataset_object(item: object) -> bool:
    return type(item).__module__.split(".")[0] == "datasets"


def input_list(inputs) -> list:
    """``inputs`` as a list of inputs: one input (a path, a DataFrame, arrays, a ``datasets``
    object, which iterate over something else) becomes a list of one."""
    from splitscope.manifest.arrays import Arrays

    if isinstance(inputs, (str, os.PathLike, pd.DataFrame, Arrays)) or \
            _is_dataset_object(inputs) or not isinstance(inputs, Iterable):
        return [inputs]
    return list(inputs)


def read_input(item, *, follow_links: bool = False, allow_outside_root: bool = False,
               image_column: str | None = None, array_store: str | Path | None = None,
               **list_options) -> pd.DataFrame:
    """The manifest of one input, its kind detected: a manifest (DataFrame), in-memory arrays
    (:class:`splitscope.manifest.arrays.Arrays`), a ``datasets`` object, an ``.npz``, a table
    with an image column, a ``save_to_disk`` folder, a folder of such tables, an imagefolder
    with metadata, a folder of files, or a list file."""
    from splitscope.manifest import arrays as arrays_mod
    from splitscope.manifest import embedded

    if isinstance(item, pd.DataFrame):
        return with_manifest_columns(item)
    table_options = {"corpus": list_options.get("corpus"),
                     "columns": list_options.get("columns"), "image_column": image_column}
    if isinstance(item, arrays_mod.Arrays):
        return arrays_mod.read_arrays(item, array_store)
    if _is_dataset_object(item):
        return embedded.read_dataset_object(item, **table_options)
    if not isinstance(item, (str, os.PathLike)):
        raise InputError(f"cannot read an input of type {type(item).__name__}: give a folder, "
                         f"a list or table file, an .npz, a DataFrame manifest, "
                         f"splitscope.Arrays or a datasets.Dataset")
    path = Path(item)
    refuse_undecodable(path, "input")
    if not path.exists():
        raise InputError(f"input not found: {item}")
    if path.is_file() and path.suffix.lower() == ".npz":
        return arrays_mod.read_npz(path, corpus=list_options.get("corpus"))
    kind = embedded.embedded_kind(path)
    if image_column is not None and path.is_file() and \
            path.suffix.lower() in embedded.TABLE_SUFFIXES:
        kind = "table"  # named: checked there, with what the table holds
    if kind in ("table", "table_folder", "save_to_disk"):
        return embedded.read_embedded(path, split=list_options.get("split"), **table_options)
    if kind == "imagefolder":
        return embedded.read_imagefolder(path, corpus=list_options.get("corpus"),
                                         columns=list_options.get("columns"))
    if path.is_dir():
        return read_folder(path, corpus=list_options.get("corpus"), follow_links=follow_links,
                           allow_outside_root=allow_outside_root)
    if image_column is not None:
        raise InputError(f"--image-column {image_column!r} given, but {path} is not a Parquet "
                         f"or Arrow table")
    return read_list(path, **list_options)


def build_manifest(
    inputs,
    *,
    follow_links: bool = False,
    allow_outside_root: bool = False,
    image_column: str | None = None,
    array_store: str | Path | None = None,
    **list_options,
) -> pd.DataFrame:
    """One manifest from one or more releases (see :func:`read_input` for what an input is).

    Several inputs are concatenated in the order given (each keeps its own ``corpus`` name
    unless ``corpus=`` is passed for a single input) and ``row`` is renumbered 0..n-1.
    ``list_options`` go to :func:`read_list` for list inputs; ``corpus`` applies to folders too;
    ``follow_links`` and ``allow_outside_root`` go to :func:`read_folder`; ``image_column``
    names a table's image column; ``array_store`` is where in-memory arrays are kept (the
    scan's workspace).
    When an input is a table or an array, the manifest has :data:`EMBEDDED_COLUMNS` too.
    """
    inputs = input_list(inputs)
    parts: list[pd.DataFrame] = [
        read_input(item, follow_links=follow_links, allow_outside_root=allow_outside_root,
                   image_column=image_column, array_store=array_store, **list_options)
        for item in inputs]
    if not parts:
        raise InputError("no inputs given")
    columns = MANIFEST_COLUMNS
    if any("content" in p.columns for p in parts):
        columns = MANIFEST_COLUMNS + EMBEDDED_COLUMNS
        for i, p in enumerate(parts):
            if "content" not in p.columns:
                p = p.copy()
                for col in ("table", "stored_path"):
                    p[col] = pd.array([pd.NA] * len(p), dtype="string")
                p["table_row"] = pd.array([pd.NA] * len(p), dtype="Int64")
                p["content"] = pd.array([CONTENT_FILE] * len(p), dtype="string")
                parts[i] = p
    manifest = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].copy()
    manifest["row"] = pd.array(range(len(manifest)), dtype="int64")
    manifest.attrs = {
        "inputs": [i for p in parts for i in p.attrs.get("inputs", [])],
        "excluded": [e for p in parts for e in p.attrs.get("excluded", [])],
    }
    return manifest[columns]
