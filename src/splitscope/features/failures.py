"""Failures by name: the rows whose file gave no features, and the entries left out of a
folder release, as tables to act on (``lists/failures.csv``, ``lists/excluded.csv``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

__all__ = ["FAILURE_COLUMNS", "excluded_table", "failures_table", "write_failure_lists"]

FAILURE_COLUMNS = ["row", "path", "split", "label", "reason", "detail"]

_PATH_DETAIL = {
    "outside_root": "the resolved path lies outside the release root; not read "
                    "(allow_outside_root / --allow-outside-root reads it)",
    "invalid_utf8": "the released path is not valid UTF-8 (shown with \\xNN escapes); not read",
    "no_file": "the row names no file",
}


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
    detail = detail.fillna(reason.map(_PATH_DETAIL).astype("string"))
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
