"""Output folders: tables as CSV and Parquet, JSON documents, and one ``artifacts.json``.

Every command that writes files (``--out DIR`` of each verb, and the audit) writes through these
functions, so every output folder has the same shape: the tables, the command's own JSON, and
``artifacts.json`` listing every file written with its size, format and SHA-256 (a
Croissant-style ``FileObject`` list), so what a later step reads can be checked against what
was written.

CSV cells that a spreadsheet would run as a formula (text beginning with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return) are written with a leading ``'``, as OWASP recommends for
CSV injection; a cell that is a plain number (``-0.5``, ``+3``) is left as it is. Parquet keeps
every value raw, so a program reading the lists gets the released text unchanged.

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
    "artifact",
    "export_frame",
    "file_stem",
    "neutralise_formulas",
    "replacing",
    "write_artifacts_manifest",
    "write_csv",
    "write_json",
    "write_table",
    "write_tables",
]

ARTIFACTS_FILE = "artifacts.json"
"""Name of the file listing an output folder's files."""

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
    tuples become JSON text, other object columns become strings."""
    out = table.copy()
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


def neutralise_formulas(table: pd.DataFrame) -> pd.DataFrame:
    """A copy whose text cells that begin like a formula (``=``, ``+``, ``-``, ``@``, tab, CR)
    start with ``'`` (OWASP CSV-injection advice), so a spreadsheet shows them as text; plain
    numbers stay as they are. Only text columns are touched."""
    out = table.copy()
    for col in out.columns:
        values = out[col]
        if not (values.dtype == object or isinstance(values.dtype, pd.StringDtype)):
            continue
        text = values.astype("string")
        risky = text.str.startswith(_FORMULA_START).fillna(False).to_numpy(dtype=bool)
        at = np.flatnonzero(risky)  # the number test only where a cell starts like a formula
        risky[at] = ~text.iloc[at].str.fullmatch(_NUMBER).fillna(False).to_numpy(bool)
        if risky.any():
            text = text.copy()
            text[risky] = "'" + text[risky]
            out[col] = text
    return out


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
    """UTF-8 JSON, one-space indent, non-JSON values as strings; returns the path."""
    path = Path(path)
    text = json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n"
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def write_artifacts_manifest(out_dir: str | Path, files: Iterable[str | Path]) -> Path:
    """Write ``out_dir/artifacts.json``: every file of ``files`` (under ``out_dir``) with its
    size, format and SHA-256, sorted by path. Returns its path."""
    out = Path(out_dir)
    entries = []
    for f in sorted({Path(f) for f in files}):
        a = artifact(f, out)
        entries.append({"@type": "cr:FileObject", "@id": a["path"], "name": a["path"],
                        "contentUrl": a["path"], "contentSize": f"{a['bytes']} B",
                        "encodingFormat": a["encodingFormat"], "sha256": a["sha256"]})
    doc = {"@context": {"@vocab": "https://schema.org/", "cr": "http://mlcommons.org/croissant/",
                        "sc": "https://schema.org/"},
           "@type": "sc:Dataset", "name": "splitscope outputs",
           "distribution": entries}
    return write_json(doc, out / ARTIFACTS_FILE)
