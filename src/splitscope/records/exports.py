"""Output folders: tables as CSV and Parquet, JSON documents, and one ``artifacts.json``.

Every command that writes files (``--out DIR`` of each verb, and the audit) writes through these
functions, so every output folder has the same shape: the tables, the command's own JSON, and
``artifacts.json`` listing every file written with its size, format and SHA-256 (a
Croissant-style ``FileObject`` list), so what a later step reads can be checked against what
was written. Such a folder is written through :mod:`splitscope.records.publish`, which keeps
every file splitscope did not list there untouched and moves the new files into place at once.

Every CSV the project writes goes through :func:`write_csv` or :func:`write_table`. CSV cells
that a spreadsheet would run as a formula (text beginning with ``=``, ``+``, ``-``, ``@``, a
tab or a carriage return) are written with a leading ``'``, as OWASP recommends for CSV
injection; a cell that is a plain number (``-0.5``, ``+3``) is left as it is. A cell that
already starts with ``'`` before such text gets one more, so the guard can be undone exactly:
:func:`read_csv` and the project's table readers drop that one ``'`` again
(:func:`restore_formulas`), and a CSV written here reads back as the table it was written
from. Parquet keeps every value raw.

Every file is written under a temporary name beside its place and renamed onto it when
complete (:func:`replacing`), so a full disk or a file-size limit never leaves a half-written
output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from splitscope.records.model import sha256_file

__all__ = [
    "ARTIFACTS_FILE",
    "ARTIFACTS_NAME",
    "artifact",
    "artifacts_document",
    "export_frame",
    "file_object",
    "file_stem",
    "neutralise_formulas",
    "read_csv",
    "replacing",
    "restore_formulas",
    "write_artifacts_manifest",
    "write_csv",
    "write_json",
    "write_table",
    "write_tables",
]

ARTIFACTS_FILE = "artifacts.json"
"""Name of the file listing an output folder's files."""

ARTIFACTS_NAME = "splitscope outputs"
"""The ``name`` of every ``artifacts.json``: how a later run knows the manifest is its own."""

_FORMATS = {".csv": "text/csv", ".parquet": "application/x-parquet", ".json": "application/json",
            ".html": "text/html", ".txt": "text/plain", ".png": "image/png"}


def artifact(path: Path, root: Path, description: str | None = None) -> dict[str, Any]:
    """``{path (relative to root, POSIX), sha256, bytes, encodingFormat, description}``."""
    path, root = Path(path), Path(root)
    return {"path": path.relative_to(root).as_posix(), "sha256": sha256_file(path),
            "bytes": path.stat().st_size,
            "encodingFormat": _FORMATS.get(path.suffix.lower(), "application/octet-stream"),
            "description": description}


def export_frame(table: pd.DataFrame) -> pd.DataFrame:
    """A copy that CSV and Parquet can both store: object columns holding dicts, lists or
    tuples become JSON text, other object columns become strings. The copy carries its rows
    only: pandas would write a frame's ``attrs`` (a manifest's inputs, with the folders of the
    machine that read them) into the Parquet file's metadata."""
    out = table.copy()
    out.attrs = {}
    for col in out.columns:
        if out[col].dtype == object:
            out[col] = out[col].map(lambda v: json.dumps(v, default=str)
                                    if isinstance(v, (dict, list, tuple)) else v)
            try:
                out[col] = out[col].astype("string")
            except (TypeError, ValueError):
                out[col] = out[col].astype(str)
    return out


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?"
_GUARD = "'"


def _is_text(values: pd.Series) -> bool:
    return values.dtype == object or isinstance(values.dtype, pd.StringDtype)


def _formula_like(text: pd.Series, starts: tuple[str, ...]) -> np.ndarray:
    """Cells starting with one of ``starts`` that, past any leading ``'``, begin like a
    formula and are not a plain number."""
    hit = text.str.startswith(starts).fillna(False).to_numpy(dtype=bool)
    at = np.flatnonzero(hit)  # the tests below only where a cell starts like one
    body = text.iloc[at].str.lstrip(_GUARD)
    hit[at] = (body.str.startswith(_FORMULA_START) & ~body.str.fullmatch(_NUMBER)).fillna(
        False).to_numpy(dtype=bool)
    return hit


def neutralise_formulas(table: pd.DataFrame) -> pd.DataFrame:
    """A copy whose text cells that begin like a formula (``=``, ``+``, ``-``, ``@``, tab, CR)
    start with ``'`` (OWASP CSV-injection advice), so a spreadsheet shows them as text; plain
    numbers stay as they are. A cell that is ``'`` before such text gets one more ``'``, so
    :func:`restore_formulas` undoes this exactly. Only text columns are touched."""
    out = table.copy()
    for col in out.columns:
        values = out[col]
        if not _is_text(values):
            continue
        text = values.astype("string")
        risky = _formula_like(text, _FORMULA_START + (_GUARD,))
        if risky.any():
            text = text.copy()
            text[risky] = _GUARD + text[risky]
            out[col] = text
    return out


def restore_formulas(table: pd.DataFrame) -> pd.DataFrame:
    """The inverse of :func:`neutralise_formulas`: a copy whose text cells marked by it lose
    their first ``'``; other cells and column types are kept."""
    out = table.copy()
    for col in out.columns:
        values = out[col]
        if not _is_text(values):
            continue
        # Python strings: a read may keep undecodable bytes as lone surrogates
        text = values.astype(pd.StringDtype("python"))
        marked = np.flatnonzero(_formula_like(text, (_GUARD,)))
        if len(marked):
            values = values.copy()
            values.iloc[marked] = text.iloc[marked].str.slice(1).to_numpy(dtype=object)
            out[col] = values
    return out


def read_csv(path: str | Path, **kwargs) -> pd.DataFrame:
    """``pandas.read_csv(path, **kwargs)`` of a CSV written by :func:`write_csv` or
    :func:`write_table`, with the formula guard undone (:func:`restore_formulas`)."""
    return restore_formulas(pd.read_csv(path, **kwargs))


@contextlib.contextmanager
def replacing(path: str | Path):
    """Yield a temporary path beside ``path`` (its folder created) and rename it onto
    ``path`` once the block completes; on an error the temporary file is removed and ``path``
    is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_csv(table: pd.DataFrame, path: str | Path) -> Path:
    """Write ``table`` as CSV (no index) with formula-leading cells neutralised
    (:func:`neutralise_formulas`); returns the path."""
    path = Path(path)
    with replacing(path) as tmp:
        _to_csv(neutralise_formulas(export_frame(table)), tmp)
    return path


def _to_csv(frame: pd.DataFrame, path: Path) -> None:
    """``frame.to_csv`` without the index. A text cell holding a carriage return (a name
    stored in a table may) makes the file end its lines with CRLF (RFC 4180): Python's CSV
    writer quotes a cell only for the characters of its line end, and an unquoted CR splits
    the row for every reader."""
    carriage_return = any(
        frame[c].astype("string").str.contains("\r", regex=False).fillna(False).any()
        for c in frame.columns
        if frame[c].dtype == object or isinstance(frame[c].dtype, pd.StringDtype))
    frame.to_csv(path, index=False, **({"lineterminator": "\r\n"} if carriage_return else {}))


def file_stem(name: str, *, subfolders: bool = True) -> str:
    """A name made file-safe. With ``subfolders`` a ``/`` is kept and makes a subfolder;
    without, it is replaced like any other unsafe character."""
    parts = str(name).split("/") if subfolders else [str(name)]
    return "/".join(re.sub(r"[^A-Za-z0-9._=-]+", "_", part).strip("._") or "table"
                    for part in parts)


def write_table(table: pd.DataFrame, stem: Path, *, parquet: bool = True,
                problems: list[str] | None = None) -> list[Path]:
    """Write ``<stem>.csv`` (formula-leading cells neutralised) and, when ``parquet``,
    ``<stem>.parquet`` (raw values); returns the paths.

    A table Parquet cannot store is written as CSV only and ``problems`` gets a line saying so
    (without ``problems`` the error propagates)."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    frame = export_frame(table)
    csv = stem.with_name(stem.name + ".csv")
    with replacing(csv) as tmp:
        _to_csv(neutralise_formulas(frame), tmp)
    written = [csv]
    if parquet:
        pq = stem.with_name(stem.name + ".parquet")
        try:
            with replacing(pq) as tmp:
                frame.to_parquet(tmp, index=False)
        except OSError:
            raise  # a full disk is no table problem
        except Exception as exc:  # a column pyarrow cannot store: CSV only
            if problems is None:
                raise
            problems.append(f"{pq} not written ({type(exc).__name__}: {exc}); "
                            f"{csv} holds the table")
        else:
            written.append(pq)
    return written


def write_tables(tables: Mapping[str, Any], out_dir: str | Path, *, parquet: bool = True,
                 problems: list[str] | None = None, keep_existing: bool = False) -> list[Path]:
    """Write every DataFrame of ``tables`` as ``out_dir/<name>.csv`` (and ``.parquet``), in name
    order; other values are skipped. With ``keep_existing`` a table whose CSV is already
    there is left alone (a layer's own export of that table wins)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name in sorted(tables):
        table = tables[name]
        if not isinstance(table, pd.DataFrame):
            continue
        stem = out / file_stem(name)
        if keep_existing and stem.with_name(stem.name + ".csv").exists():
            continue
        written += write_table(table, stem, parquet=parquet, problems=problems)
    return written


def write_json(data: Any, path: str | Path) -> Path:
    """UTF-8 JSON, one-space indent, non-JSON values as strings; returns the path.

    ``</`` is written ``<\\/`` and ``<!--`` as ``\\u003c!--`` (the same strings to a JSON
    reader), so a document embedded in an HTML ``<script>`` (Croissant's JSON-LD) cannot end
    it, whatever text a release put in its names and labels."""
    path = Path(path)
    text = json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n"
    text = text.replace("</", "<\\/").replace("<!--", "\\u003c!--")  # "<" only in strings
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def file_object(path: str | Path, root: str | Path) -> dict[str, Any]:
    """The ``artifacts.json`` entry of ``path`` (a Croissant ``cr:FileObject``): its path
    relative to ``root``, size, format and SHA-256."""
    a = artifact(path, root)
    return {"@type": "cr:FileObject", "@id": a["path"], "name": a["path"],
            "contentUrl": a["path"], "contentSize": f"{a['bytes']} B",
            "encodingFormat": a["encodingFormat"], "sha256": a["sha256"]}


def artifacts_document(objects: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``artifacts.json`` document listing ``objects`` (:func:`file_object` entries),
    sorted by path."""
    entries = sorted((dict(o) for o in objects), key=lambda o: o["contentUrl"])
    return {"@context": {"@vocab": "https://schema.org/", "cr": "http://mlcommons.org/croissant/",
                         "sc": "https://schema.org/"},
            "@type": "sc:Dataset", "name": ARTIFACTS_NAME,
            "distribution": entries}


def write_artifacts_manifest(out_dir: str | Path, files: Iterable[str | Path]) -> Path:
    """Write ``out_dir/artifacts.json``: every file of ``files`` (under ``out_dir``) with its
    size, format and SHA-256, sorted by path. Returns its path.

    A verb writing through :func:`splitscope.records.publish.publishing` need not call it:
    publishing lists every file written."""
    out = Path(out_dir)
    doc = artifacts_document(file_object(f, out) for f in sorted({Path(f) for f in files}))
    return write_json(doc, out / ARTIFACTS_FILE)
