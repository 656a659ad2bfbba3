"""Paths in what an audit publishes: relative to the release they belong to, never to the
machine that audited it.

While an audit runs, a manifest row's ``file`` says where its bytes are on this machine (an
absolute path, or ``<container>::<member>/<index>`` for an image inside a table or an array).
Everything the audit publishes (``audit.json``, the lists, ``croissant.json``, the dataset card,
the REFORMS checklist, the report's lists) names a released file instead by its path relative
to the root of its corpus (:func:`release_relative`), and an input file or folder by its name
(:func:`input_name`). The roots are recorded once, in ``audit.json``'s ``manifest.roots``
(corpus → the absolute folder its rows' ``file`` values are relative to), beside the inputs as
given (``inputs``); a reader of a finished audit joins a published ``file`` to the root of its
row's corpus (:func:`resolve`) to read the file again. A URL stays as it is.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["corpus_roots", "input_name", "input_root", "name_under", "published_command",
           "published_rows", "release_relative", "resolve", "resolve_in", "resolved_rows"]

#: the manifest columns that hold where the bytes are on the auditing machine
LOCATION_COLUMNS = ("file", "table")

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")


def _is_url(text: str) -> bool:
    return bool(_SCHEME.match(text))


def release_relative(path: Any, root: str | None) -> Any:
    """``path`` (a row's ``file`` or ``table`` as the audit read it) relative to ``root``
    (its corpus's folder), with ``/`` separators: the form every published output names it
    by. A key of an image inside a table or an array keeps its ``::member/index``; a path
    that lies outside the root (a list row allowed outside it) keeps the ``..`` that lead
    there. A URL, a missing value, and a path on another drive than ``root`` are returned as
    they are; so is everything when ``root`` is ``None``.

    Examples
    --------
    >>> release_relative("/data/release/train/a.png", "/data/release")
    'train/a.png'
    >>> release_relative("/data/release/t.parquet::image/07", "/data/release")
    't.parquet::image/07'
    """
    if not isinstance(path, str) or root is None or _is_url(path) or not os.path.isabs(path):
        return path
    prefix = root.rstrip(os.sep) + os.sep
    if path.startswith(prefix):
        rel = path[len(prefix):]
    else:
        try:
            rel = os.path.relpath(path, root)
        except ValueError:  # another drive: no relative path exists
            return path
    return rel.replace(os.sep, "/")


def resolve(path: Any, root: str | None) -> Any:
    """Where a published ``path`` (:func:`release_relative`) is on this machine: joined to
    ``root``. An absolute path, a URL, a missing value, or no root: returned as it is."""
    if not isinstance(path, str) or not path or root is None or _is_url(path) \
            or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(root, path.replace("/", os.sep)))


def resolve_in(document: Mapping[str, Any], row: Mapping[str, Any]) -> Any:
    """The ``file`` of a published ``row`` (a gallery side: ``corpus`` and ``file``) on this
    machine, through the root ``document`` (an audit document) records for its corpus."""
    roots = ((document.get("manifest") or {}).get("roots") or {})
    return resolve(row.get("file"), roots.get(str(row.get("corpus"))))


def input_root(item: Any, list_root: str | os.PathLike | None = None) -> str | None:
    """The folder the rows of an input are relative to: a folder input itself; for a file
    (a list, a table, an archive) ``list_root`` when given, else the folder holding it.
    ``None`` for anything else (a Hub id, in-memory arrays or datasets, a URL root), whose
    root :func:`corpus_roots` finds from the rows."""
    if not isinstance(item, (str, os.PathLike)) or str(item).startswith("hf:"):
        return None
    path = Path(item)
    if path.is_dir():
        return os.path.abspath(path)
    if list_root is not None:
        return None if _is_url(str(list_root)) else os.path.abspath(list_root)
    return os.path.abspath(path.parent)


def _container(key: str) -> str:
    return key.split("::", 1)[0]


def corpus_roots(rows: pd.DataFrame, candidates: Iterable[str | None]) -> dict[str, str]:
    """Per corpus of ``rows``, the root its rows' ``file`` values are published relative to:
    of the ``candidates`` (absolute folders, :func:`input_root`), the one holding most of its
    files (the deepest on a tie); when none holds any, the deepest folder holding them all.
    A corpus of URLs only has none."""
    if not {"corpus", "file"} <= set(rows.columns):
        return {}
    folders = sorted({os.path.abspath(c) for c in candidates if c is not None},
                     key=len, reverse=True)
    found: dict[str, str] = {}
    files = rows["file"].astype("string")
    for corpus, part in files.groupby(rows["corpus"].astype("string").fillna(""), sort=True):
        local = part.dropna()
        local = local[~local.str.match(_SCHEME.pattern).fillna(False).to_numpy(bool)]
        if not len(local):
            continue
        containers = local.str.split("::", n=1).str[0]
        held = [(int((containers.str.startswith(f.rstrip(os.sep) + os.sep)
                      | (containers == f)).sum()), len(f), f) for f in folders]
        best = max(held, default=(0, 0, None))
        if best[0]:
            found[str(corpus)] = best[2]
            continue
        try:
            found[str(corpus)] = os.path.commonpath(
                [os.path.dirname(c) for c in containers.unique()])
        except ValueError:  # relative paths, or several drives: no common folder
            continue
    return found


def _root_of(path: Any, roots: list[str]) -> str | None:
    """The deepest of ``roots`` (longest first) holding ``path``."""
    if not isinstance(path, str):
        return None
    container = _container(path)
    return next((r for r in roots if container == r
                 or container.startswith(r.rstrip(os.sep) + os.sep)), None)


def published_rows(frame: pd.DataFrame, roots: Mapping[str, str]) -> pd.DataFrame:
    """``frame`` (rows of a manifest or a table keyed by them) with its ``file`` and ``table``
    values relative to the root of each row's corpus (:func:`release_relative`); a row whose
    corpus ``roots`` does not name (a corpus renamed by a layer) takes the deepest root that
    holds its file. A frame without those columns, or no ``roots``, is returned as it is."""
    columns = [c for c in LOCATION_COLUMNS if c in frame.columns]
    if not roots or not columns:
        return frame
    by_depth = sorted(set(roots.values()), key=len, reverse=True)
    corpus = (frame["corpus"].astype("string").fillna("").to_numpy(dtype=object)
              if "corpus" in frame.columns else np.full(len(frame), "", dtype=object))
    out = frame.copy()
    for column in columns:
        text = frame[column].astype("string").reset_index(drop=True)
        values = text.to_numpy(dtype=object, na_value=None)
        named = values.copy()
        done = np.zeros(len(values), dtype=bool)
        for name, root in roots.items():
            mine = corpus == name
            if not mine.any():
                continue
            prefix = root.rstrip(os.sep) + os.sep  # the common case, at once
            under = mine & text.str.startswith(prefix).fillna(False).to_numpy(bool)
            cut = text[under].str.slice(len(prefix))
            named[under] = (cut.str.replace(os.sep, "/", regex=False) if os.sep != "/"
                            else cut).to_numpy(dtype=object)
            rest = np.flatnonzero(mine & ~under)
            named[rest] = [release_relative(values[i], root) for i in rest]
            done |= mine
        for i in np.flatnonzero(~done):  # a corpus renamed by a layer: the root holding it
            named[i] = release_relative(values[i], _root_of(values[i], by_depth))
        out[column] = pd.array(named, dtype="string")
    return out


def resolved_rows(frame: pd.DataFrame, roots: Mapping[str, str]) -> pd.DataFrame:
    """The inverse of :func:`published_rows`: ``frame`` (rows read from a finished audit's
    lists) with its ``file`` and ``table`` values where they are on this machine, joined to
    the root ``roots`` (``audit.json``'s ``manifest.roots``) gives each row's corpus."""
    columns = [c for c in LOCATION_COLUMNS if c in frame.columns]
    if not roots or not columns or "corpus" not in frame.columns:
        return frame
    corpus = frame["corpus"].astype("string").fillna("").to_numpy(dtype=object)
    out = frame.copy()
    for column in columns:
        text = frame[column].astype("string").reset_index(drop=True)
        plain = (~text.str.startswith("/") & ~text.str.contains("://", regex=False)
                 & ~text.str.contains("..", regex=False)).fillna(False).to_numpy(bool)
        located = text.to_numpy(dtype=object, na_value=None)
        for name, root in roots.items():
            mine = corpus == name
            at = mine & plain  # the common case, at once
            joined = root.rstrip(os.sep) + os.sep + text[at].str.replace("/", os.sep,
                                                                         regex=False)
            located[at] = joined.to_numpy(dtype=object)
            rest = np.flatnonzero(mine & ~plain)
            located[rest] = [resolve(located[i], root) for i in rest]
        out[column] = pd.array(located, dtype="string")
    return out


def input_name(item: Any) -> str:
    """How published outputs name an input (a release folder or list, predictions, maps):
    by its last path component (``kermany-chest-xray-224``, ``index.csv``); a Hub id or a URL
    as it is, anything that is not a path as its text. The input as given is recorded once,
    in ``audit.json``'s ``inputs``."""
    text = os.fspath(item) if isinstance(item, os.PathLike) else str(item)
    if not isinstance(item, (str, os.PathLike)) or text.startswith(("hf:", "in-memory ")) \
            or _is_url(text):
        return text
    name = Path(os.path.abspath(text)).name
    return name or text


def name_under(path: Any, given: Any) -> Any:
    """A file read from an input given as ``given`` (a folder of prediction files, say), as
    published: the input's name, then the file's path inside it (``predictions/run1.csv``);
    the input's name when ``path`` is the input itself, and the file's name when it lies
    elsewhere. Not a path: returned as it is."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        return path
    if not isinstance(given, (str, os.PathLike)):
        return input_name(path)
    root, full = os.path.abspath(given), os.path.abspath(path)
    if full == root:
        return input_name(given)
    rel = release_relative(full, root)
    if rel.startswith("../") or os.path.isabs(rel):
        return input_name(path)
    return f"{input_name(given)}/{rel}"


#: options whose values are patterns, never paths, on a command line
_PATTERN_OPTIONS = ("regex", "pattern")


def published_command(command: str | None) -> str | None:
    """A recorded command line as a published output shows it: every argument that is an
    absolute path, or a relative one leading out of the folder it was run from (``../x``),
    written as its name (:func:`input_name`), so the command runs from the folder holding the
    release, and it names no folder of the auditing machine. Values of pattern options
    (``--group-regex``) are left as they are; so is a line that does not split as a shell
    command."""
    if not command:
        return command
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    out, pattern = [], False
    for word in words:
        flag, eq, value = word.partition("=") if word.startswith("--") else ("", "", word)
        if word.startswith("-") and not eq:
            out.append(word)
            pattern = any(p in word for p in _PATTERN_OPTIONS)
            continue
        if not (pattern or any(p in flag for p in _PATTERN_OPTIONS)) and _leaves(value):
            value = input_name(value)
        out.append(f"{flag}={value}" if eq else value)
        pattern = False
    return shlex.join(out)


def _leaves(value: str) -> bool:
    """Whether a command-line value is a path that names a folder outside the one the
    command runs from."""
    if _is_url(value):
        return False
    parts = value.replace("\\", "/").split("/")
    return os.path.isabs(value) or parts[0] == ".."
