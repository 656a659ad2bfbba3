"""Manifests of releases whose images are files of their own: a folder layout, or a list file
(CSV, TSV, Parquet, XLSX) naming them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from splitscope.errors import InputError
from splitscope.manifest.rows import (
    _SPLIT_ALIASES,
    INVALID_UTF8,
    OUTSIDE_ROOT,
    _finish,
    _inside,
    list_rows,
    os_name,
    read_table,
    refuse_undecodable,
)

__all__ = ["EXCLUDED_DIR_LINK", "EXCLUDED_HIDDEN_DIR", "EXCLUDED_HIDDEN_FILE",
           "EXCLUDED_LINK_LOOP", "EXCLUDED_LINK_OUTSIDE", "EXCLUDED_ROOT_FILE",
           "EXCLUDED_UNLISTABLE", "is_list_file", "read_folder", "read_list"]

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
