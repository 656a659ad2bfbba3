"""Failures by name: the rows whose file gave no features, and the entries left out of a
folder release, as tables to act on (``lists/failures.csv``, ``lists/excluded.csv``)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["FAILURE_COLUMNS", "excluded_table", "failures_table", "identity_rows",
           "write_failure_lists", "zero_byte"]

FAILURE_COLUMNS = ["row", "path", "split", "label", "reason", "detail"]

_PATH_DETAIL = {
    "outside_root": "the resolved path lies outside the release root; not read "
                    "(allow_outside_root / --allow-outside-root reads it; a URL also needs "
                    "--allow-urls)",
    "url": "the row names a URL (s3://, https://, …); not read (allow_urls / --allow-urls "
           "reads it through fsspec)",
    "invalid_utf8": "the released path is not valid UTF-8 (shown with \\xNN escapes); not read",
    "no_file": "the row names no file",
}


def zero_byte(rows: pd.DataFrame) -> np.ndarray:
    """Rows whose file is empty (``size_bytes`` 0, or status ``zero_byte``)."""
    empty = np.zeros(len(rows), bool)
    if "size_bytes" in rows.columns:
        size = pd.to_numeric(rows["size_bytes"], errors="coerce")
        empty |= size.eq(0).fillna(False).to_numpy(bool)
    if "status" in rows.columns:
        empty |= rows["status"].astype("string").eq("zero_byte").fillna(False).to_numpy(bool)
    return empty


def identity_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the digests (``sha256``, ``pixel_xxh128``) of empty files cleared.

    An empty file failed to read; the SHA-256 of no bytes would make every empty file a byte
    copy of every other. Cleared, it is *not assessed* by every identity predicate, listed as
    a failure and kept in the denominators. The table is copied only when there is something
    to clear."""
    cols = [c for c in ("sha256", "pixel_xxh128") if c in rows.columns]
    if not cols:
        return rows
    clear = zero_byte(rows) & rows[cols].notna().any(axis=1).to_numpy(bool)
    if not clear.any():
        return rows
    out = rows.copy()
    for c in cols:
        out.loc[clear, c] = pd.NA
    return out


def failures_table(scan, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per manifest row that is not ``ok``, in manifest order: ``row``, ``path``,
    ``split``, ``label``, ``reason`` (the reason code) and ``detail`` (what went wrong). A
    file listed twice fails twice, as in the row counts of the scan summary. ``rows`` is
    ``scan.rows()`` when the caller already has it."""
    rows = scan.rows() if rows is None else rows
    status = rows["status"].astype("string").fillna("no_file")
    failed = rows[(status != "ok").to_numpy()]
    reason = status[failed.index]
    detail = failed["error"].astype("string") if "error" in failed.columns else \
        pd.Series(pd.NA, index=failed.index, dtype="string")
    detail = _by_released_path(detail.fillna(reason.map(_PATH_DETAIL).astype("string")),
                               failed)
    out = pd.DataFrame({
        "row": failed["row"].astype("int64").to_numpy(),
        "path": failed["path"].astype("string").to_numpy(),
        "split": failed["split"].astype("string").to_numpy(),
        "label": failed["label"].astype("string").to_numpy(),
        "reason": reason.to_numpy(),
        "detail": detail.to_numpy(),
    })
    for column in FAILURE_COLUMNS[1:]:
        out[column] = out[column].astype("string")
    return out[FAILURE_COLUMNS]


def _by_released_path(detail: pd.Series, failed: pd.DataFrame) -> pd.Series:
    """``detail`` naming each row's file by its released ``path`` (a table or an archive by
    its file name) where a reader's message named where it lay on this machine: the lists
    are published (:mod:`splitscope.records.paths`)."""
    if "file" not in failed.columns or not len(failed):
        return detail
    named = []
    for text, file, path in zip(detail.to_numpy(dtype=object, na_value=None),
                                failed["file"].astype("string").to_numpy(dtype=object,
                                                                         na_value=None),
                                failed["path"].astype("string").to_numpy(dtype=object,
                                                                         na_value=None)):
        if text is not None and file:
            container = file.split("::", 1)[0]
            text = text.replace(file, path or os.path.basename(container))
            if container != file:  # an image in a table or an archive
                text = text.replace(container, os.path.basename(container))
        named.append(text)
    return pd.Series(named, index=detail.index, dtype="string")


def excluded_table(manifest: pd.DataFrame) -> pd.DataFrame:
    """The entries of a folder release that are not rows: ``path`` (relative to its root),
    ``reason`` and ``detail``, in walk order."""
    entries = manifest.attrs.get("excluded", []) or []
    return pd.DataFrame({
        "path": pd.array([e.get("path") for e in entries], dtype="string"),
        "reason": pd.array([e.get("reason") for e in entries], dtype="string"),
        "detail": pd.array([e.get("detail") for e in entries], dtype="string"),
    })


def write_failure_lists(scan, lists_dir: str | Path,
                        failures: pd.DataFrame | None = None) -> list[Path]:
    """Write ``failures.csv``/``.parquet`` and ``excluded.csv``/``.parquet`` into
    ``lists_dir`` (CSV cells neutralised, see :mod:`splitscope.records.exports`); returns the
    paths written. ``failures`` is :func:`failures_table` when the caller already has it."""
    from splitscope.records.exports import write_table

    lists_dir = Path(lists_dir)
    failures = failures_table(scan) if failures is None else failures
    return (write_table(failures, lists_dir / "failures")
            + write_table(excluded_table(scan.manifest), lists_dir / "excluded"))
