"""The one workbook (XLSX) reader: a list file, a truth list and a prediction workbook are
all read here, with the same limits checked before any XML is parsed and the same refusal.

A workbook is a zip of XML; a few megabytes can declare gigabytes of XML (a zip bomb) or a
cell at ``XFD1048576`` that a parser turns into a dense 17-billion-cell range (the parser
aborts the process when that allocation fails). So, before parsing:

1. the zip directory's declared sizes: at most :data:`MAX_WORKBOOK_BYTES` in all, and no
   member above 64 MiB that expands more than :data:`MAX_WORKBOOK_RATIO`-fold (the zip reader
   never inflates a member past its declared size, so these bound the work below);
2. each worksheet's cells, counted from its XML in a streaming pass (1 MiB at a time): at
   most :data:`MAX_WORKBOOK_CELLS` cells, and the range their references span (last row ×
   last column, which is what a parser allocates) at most that many too. Every writer we know
   of (Excel, openpyxl, pandas) gives each cell its reference; a sheet whose cells carry none
   is bounded by their count alone.

A workbook over a limit is an :class:`InputError` naming the file, what it declares and the
limit, ending "export it as CSV or Parquet". Parsing is python-calamine's, with openpyxl as the
fallback; both give the same rows (:func:`rows_to_frame`).
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.errors import InputError

__all__ = ["MAX_WORKBOOK_BYTES", "MAX_WORKBOOK_CELLS", "MAX_WORKBOOK_RATIO", "check_workbook",
           "read_sheet", "read_workbook_frame", "rows_to_frame", "sheet_rows", "unique_names"]

MAX_WORKBOOK_BYTES = 1 << 30
"""Largest total uncompressed size (1 GiB) that a workbook's zip directory may declare."""

MAX_WORKBOOK_RATIO = 200
"""Largest uncompressed/compressed ratio of a workbook member above 64 MiB uncompressed:
spreadsheet XML compresses about 5-30 times; a zip bomb by thousands."""

MAX_WORKBOOK_CELLS = 1 << 24
"""Most cells (16,777,216) a worksheet may hold, or span from A1 to its last row and column:
a parser holds the whole range in memory (tens of bytes a cell, then a Python object each)."""

_CHUNK = 1 << 20
_OVERLAP = 64  # longer than a cell tag's start and its reference
_CELL_TAGS = (b"<c ", b"<c>", b"<c/>", b":c ", b":c>", b":c/>")  # with a namespace prefix too
# a cell reference past column Z or row 99,999 (a row's own r="N" has no letters): below both,
# a sheet spans at most 26 × 99,999 cells, well under the limit, so only these are decoded
_FAR_REF = re.compile(rb' r="([A-Z]{2,3}[0-9]{1,7}|[A-Z][0-9]{6,7})"')
_NEAR_ROWS, _NEAR_COLS = 99_999, 26


def _refuse(what: str, path: Path, problem: str) -> InputError:
    return InputError(f"{what} {path} {problem}; not parsed, as a zip bomb would not be: "
                      f"export it as CSV or Parquet")


def _column_number(letters: bytes) -> int:
    n = 0
    for b in letters:
        n = n * 26 + (b - 64)
    return n


def _sheet_extent(archive: zipfile.ZipFile, member: str) -> tuple[int, int, int]:
    """``(cells, last row, last column)`` of one worksheet's XML, read in a streaming pass.
    Cell tags and references are counted by byte search; each is an upper bound (a tag split
    across two chunks may count twice), as a limit check wants."""
    cells = rows = cols = 0
    tail = b""
    with archive.open(member) as fh:
        while True:
            chunk = fh.read(_CHUNK)
            if not chunk:
                break
            data = tail + chunk
            cells += sum(data.count(tag) for tag in _CELL_TAGS)
            for ref in set(_FAR_REF.findall(data)):
                digits = ref.lstrip(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
                cols = max(cols, _column_number(ref[:len(ref) - len(digits)]))
                rows = max(rows, int(digits))
            tail = data[-_OVERLAP:]
    if rows or cols:  # a far reference: the span with the near ones' bounds
        rows, cols = max(rows, _NEAR_ROWS), max(cols, _NEAR_COLS)
    return cells, rows, cols


def check_workbook(path: str | Path, what: str = "workbook") -> None:
    """Refuse a workbook over the limits of the module docstring before it is parsed
    (:class:`InputError`, naming ``what``)."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            total = sum(m.file_size for m in members)
            if total > MAX_WORKBOOK_BYTES:
                raise _refuse(what, path, f"declares {total:,} bytes of uncompressed content, "
                                          f"more than the limit of {MAX_WORKBOOK_BYTES:,}")
            for m in members:
                ratio = m.file_size / max(m.compress_size, 1)
                if m.file_size > (64 << 20) and ratio > MAX_WORKBOOK_RATIO:
                    raise _refuse(what, path, f"member {m.filename} expands {ratio:,.0f}-fold "
                                              f"to {m.file_size:,} bytes (limit: "
                                              f"{MAX_WORKBOOK_RATIO}-fold above 64 MiB)")
            for m in members:
                if not (m.filename.startswith("xl/worksheets/") and
                        m.filename.endswith(".xml")):
                    continue
                cells, rows, cols = _sheet_extent(archive, m.filename)
                if max(cells, rows * cols) > MAX_WORKBOOK_CELLS:
                    raise _refuse(what, path, f"sheet {m.filename} holds {cells:,} cells "
                                              f"spanning {rows:,} rows × {cols:,} columns, more "
                                              f"than the limit of {MAX_WORKBOOK_CELLS:,} cells")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise InputError(f"cannot read {what} {path}: not a valid XLSX (zip) file: "
                         f"{exc}") from exc


# --------------------------------------------------------------------------------------------
# parsing


def sheet_names(path: Path, engine: str) -> list[str]:
    if engine == "calamine":
        from python_calamine import CalamineWorkbook

        return list(CalamineWorkbook.from_path(str(path)).sheet_names)
    with pd.ExcelFile(path, engine=engine) as book:
        return [str(n) for n in book.sheet_names]


def sheet_rows(path: Path, engine: str, index: int) -> list[list]:
    """Every cell of sheet ``index`` as rows of Python values (calamine read directly: the
    per-cell conversion of pandas' reader costs as much as the parse). Call
    :func:`check_workbook` first."""
    if engine == "calamine":
        from python_calamine import CalamineWorkbook

        return CalamineWorkbook.from_path(str(path)).get_sheet_by_index(index).to_python()
    raw = pd.read_excel(path, sheet_name=index, header=None, engine=engine)
    return raw.astype(object).where(raw.notna(), None).to_numpy().tolist()


def read_sheet(path: str | Path, sheet: str | int | None = None, engine: str = "auto", *,
               what: str = "workbook") -> tuple[list[list], list[str], str, list[str]]:
    """Check ``path`` (:func:`check_workbook`), then parse one sheet (a name, a 0-based index,
    or the first): ``(rows, sheet names, engine used, errors of the engines tried before)``.
    ``engine`` ``auto`` is calamine, then openpyxl for a workbook calamine cannot read."""
    path = Path(path)
    check_workbook(path, what)
    engines = ("calamine", "openpyxl") if engine == "auto" else (engine,)
    errors: list[str] = []
    for name in engines:
        try:
            names = sheet_names(path, name)
            if sheet is not None and not (
                    (0 <= sheet < len(names)) if isinstance(sheet, int) else sheet in names):
                raise InputError(f"sheet {sheet!r} not in {path}; sheets: "
                                 f"{', '.join(map(repr, names))}")
            index = names.index(sheet) if isinstance(sheet, str) else sheet or 0
            return sheet_rows(path, name, index), names, name, errors
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - what one parser cannot read, the next may
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    raise InputError(f"cannot read {what} {path}: {'; '.join(errors)}")


def read_workbook_frame(path: str | Path, sheet: str | int | None = None, *,
                        what: str = "workbook") -> pd.DataFrame:
    """One sheet as a table whose first row is the header (:func:`read_sheet`,
    :func:`rows_to_frame`)."""
    rows = read_sheet(path, sheet, what=what)[0]
    return rows_to_frame(rows, 0)


def filled(c) -> bool:
    """True for a cell that holds something (not None, NaN or blank text)."""
    return c is not None and not (isinstance(c, float) and np.isnan(c)) and str(c).strip() != ""


def unique_names(names) -> list[str]:
    """Column names made unique the way pandas does (``x``, ``x.1``, ``x.2``)."""
    seen: dict[str, int] = {}
    out = []
    for n in (str(x) for x in names):
        if n in seen:
            seen[n] += 1
            out.append(f"{n}.{seen[n]}")
        else:
            seen[n] = 0
            out.append(n)
    return out


def _cell_name(c) -> str:
    if isinstance(c, float) and c.is_integer():
        return str(int(c))
    return str(c)


def rows_to_frame(rows: list[list], h: int) -> pd.DataFrame:
    """The table below header row ``h`` of a sheet's cell rows, typed as pandas types a sheet:
    empty cells missing, a numeric column whose values are all whole numbers as integers, other
    columns by :meth:`DataFrame.infer_objects`. Both engines go through here, so they give the
    same table."""
    if h >= len(rows):
        return pd.DataFrame()
    names = unique_names(_cell_name(c) if filled(c) else f"Unnamed: {i}"
                         for i, c in enumerate(rows[h]))
    body = pd.DataFrame(rows[h + 1:], columns=range(len(rows[h])))
    body = body.iloc[:, :len(names)]
    for c in body.columns:
        col = body[c]
        if col.dtype == object or pd.api.types.is_string_dtype(col):
            blank = col.map(lambda v: isinstance(v, str) and v == "").to_numpy(dtype=bool)
            if blank.any():
                body[c] = col.mask(blank)
        elif pd.api.types.is_float_dtype(col):
            v = col.to_numpy()
            if v.size and np.isfinite(v).all() and (v == np.round(v)).all() \
                    and np.abs(v).max() < 2 ** 53:
                body[c] = v.astype(np.int64)
    body.columns = names
    return body.infer_objects()
