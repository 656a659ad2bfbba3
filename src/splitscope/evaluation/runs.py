"""Run tables: one row per run (or per run and metric), read long or wide (METHODS §5.8, §5.12).

A **wide** table has identity columns (who the run is: condition, seed, model, view, …) and one
numeric column per metric. A **long** table has identity columns, one column naming the metric
and one holding its value; it is pivoted to wide here. Every column can be named by the caller;
what is not named is detected, and every detection is recorded in ``RunTable.notes``:

- *metric columns* (wide): the named ones, else the columns of known metric names, else every
  column whose values are all numbers and whose name is not a replicate name (``seed``, …);
- *long layout*: a metric-name column (named, or ``metric``/``metric_name``/``measure``) and a
  value column (named, or ``value``/``score``/``estimate``, or the one numeric column that is
  neither a replicate nor a metric-name column); several candidates are an input error that
  lists them;
- *identity columns*: the named ones, else (long) every column but the metric name and the
  value, or (wide) every column that is not a metric, not of a known metric name and not
  numeric (replicate names such as ``seed`` excepted); the others are listed as ignored.

Metric values are made numeric; a value that is not a number is an input error naming the
column, the count and an example (never a silent NaN).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from splitscope.errors import InputError

KNOWN_METRICS = ("balanced_accuracy", "macro_auc", "organizer_score", "accuracy", "ece",
                 "brier", "nll", "macro_f1", "balanced_accuracy_present", "auroc", "auc", "f1")
REPLICATE_NAMES = ("seed", "fold", "run", "repeat", "replicate", "split_seed")
METRIC_NAME_ALIASES = ("metric", "metric_name", "measure")
VALUE_ALIASES = ("value", "score", "estimate")


@dataclass
class RunTable:
    """A run table in wide form.

    Attributes
    ----------
    table : DataFrame
        Identity columns (as text, verbatim) and numeric metric columns.
    identity, metrics : list of str
    layout : {"long", "wide"}
        As read (a long table is pivoted).
    notes : list of str
        What was detected rather than named.
    """

    table: pd.DataFrame
    identity: list[str]
    metrics: list[str]
    layout: str = "wide"
    notes: list[str] = field(default_factory=list)
    value_column: str | None = None
    metric_column: str | None = None

    def describe(self) -> dict:
        return {"layout": self.layout, "identity_columns": self.identity,
                "metric_columns": self.metrics, "value_column": self.value_column,
                "metric_name_column": self.metric_column, "rows": len(self.table),
                "notes": self.notes}


def _fold(name: str) -> str:
    return str(name).strip().casefold()


def _named(columns, aliases) -> list[str]:
    return [c for c in columns if _fold(c) in aliases]


def _is_numeric(col: pd.Series, decimal: str = ".") -> bool:
    s = col.dropna().astype(str).str.strip()
    s = s[s != ""]
    if decimal == ",":
        s = s.str.replace(",", ".", regex=False)
    return bool(len(s)) and bool(pd.to_numeric(s, errors="coerce").notna().all())


def to_numeric(col: pd.Series, name: str, decimal: str = ".") -> pd.Series:
    """``col`` as float; a value that is not a number (or empty) is an :class:`InputError`."""
    text = col.astype("string").str.strip()
    if decimal == ",":
        text = text.str.replace(",", ".", regex=False)
    conv = pd.to_numeric(text, errors="coerce")
    bad = conv.isna() & text.notna() & (text != "")
    if bad.any():
        raise InputError(f"run table: {int(bad.sum())} non-numeric value(s) in metric column "
                         f"{name!r} (e.g. {col[bad].iloc[0]!r}); metric values must be numbers")
    return conv.astype("float64")


def _need(columns, names, role: str) -> None:
    missing = [c for c in names if c not in columns]
    if missing:
        raise InputError(f"run table: {role} column(s) {missing} missing; found: "
                         f"{', '.join(map(str, columns))}")


def read_run_table(source, *, identity=None, metrics=None, value_column: str | None = None,
                   metric_column: str | None = None, layout: str = "auto",
                   read=None) -> RunTable:
    """Read a run table (file or DataFrame) under the rules of the module docstring.

    Parameters
    ----------
    identity : list of str, optional
        Identity columns; default: every column that is not a metric or the value.
    metrics : list of str, optional
        Metric columns of a wide table, or metric names to keep from a long one.
    value_column, metric_column : str, optional
        The value and metric-name columns of a long table.
    layout : {"auto", "long", "wide"}
    read : ReadOptions, optional
        How a file is read (sheet, header row, CSV dialect).
    """
    if layout not in ("auto", "long", "wide"):
        raise InputError(f"layout {layout!r} not one of ('auto', 'long', 'wide')")
    decimal = "."
    if isinstance(source, pd.DataFrame):
        table = source.copy()
        table.columns = [str(c).strip() for c in table.columns]
    else:
        from splitscope.evaluation.readers import read_any_table

        table, info = read_any_table(Path(source), read, text=True, strip_names=True,
                                     what="run table")
        decimal = info.get("decimal") or "."
    cols = list(table.columns)
    if len(set(cols)) != len(cols):
        raise InputError(f"run table: duplicated column names: {cols}")
    identity = list(identity) if identity else None
    metrics = list(metrics) if metrics else None
    if identity:
        _need(cols, identity, "identity")
    notes: list[str] = []
    explicit_wide = metrics is not None and all(m in cols for m in metrics)
    if layout == "long" or (layout == "auto" and not explicit_wide):
        mcol, vcol = _long_columns(table, cols, identity, value_column, metric_column, decimal,
                                   notes, required=layout == "long")
        if mcol is not None:
            return _from_long(table, cols, identity, metrics, mcol, vcol, decimal, notes)
    return _from_wide(table, cols, identity, metrics, decimal, notes)


def _long_columns(table, cols, identity, value_column, metric_column, decimal, notes,
                  required: bool):
    if metric_column is not None:
        _need(cols, [metric_column], "metric-name")
        mcol = metric_column
    else:
        found = [c for c in _named(cols, METRIC_NAME_ALIASES) if c not in (identity or [])]
        if len(found) > 1:
            raise InputError(f"run table: several metric-name columns {found}; name one with "
                             f"--metric-column")
        if not found:
            if required or value_column is not None:
                raise InputError(f"run table: no metric-name column (looked for "
                                 f"{', '.join(METRIC_NAME_ALIASES)}); name it with "
                                 f"--metric-column; found: {', '.join(cols)}")
            return None, None
        mcol = found[0]
        notes.append(f"long table: metric names in column {mcol!r} (detected)")
    if value_column is not None:
        _need(cols, [value_column], "value")
        return mcol, value_column
    rest = [c for c in cols if c != mcol and c not in (identity or [])]
    found = _named(rest, VALUE_ALIASES)
    if len(found) != 1:
        found = [c for c in rest if _fold(c) not in REPLICATE_NAMES
                 and _is_numeric(table[c], decimal)]
    if len(found) != 1:
        raise InputError(f"run table: long layout (metric names in {mcol!r}), but "
                         f"{'no' if not found else 'several'} value column candidate(s)"
                         f"{': ' + ', '.join(found) if found else ''}; name it with "
                         f"--value-column")
    notes.append(f"long table: values in column {found[0]!r} (detected)")
    return mcol, found[0]


def _from_long(table, cols, identity, metrics, mcol, vcol, decimal, notes) -> RunTable:
    ident = identity or [c for c in cols if c not in (mcol, vcol)]
    t = table[ident + [mcol, vcol]].copy()
    t[vcol] = to_numeric(t[vcol], vcol, decimal)
    t[mcol] = t[mcol].astype("string").str.strip()
    if metrics:
        unknown = sorted(set(metrics) - set(t[mcol].dropna()))
        if unknown:
            raise InputError(f"run table: metric(s) {unknown} not in column {mcol!r}; metrics: "
                             f"{sorted(t[mcol].dropna().unique())}")
        t = t[t[mcol].isin(metrics)]
    dup = t.duplicated(ident + [mcol], keep=False)
    if dup.any():
        example = t.loc[dup, ident + [mcol]].iloc[0].to_dict()
        raise InputError(f"run table: {int(dup.sum())} rows share their identity "
                         f"({', '.join(ident)}) and metric, e.g. {example}; add the column "
                         f"that tells them apart (--identity)")
    for c in ident:
        t[c] = t[c].astype("string").fillna("")
    names = list(pd.unique(t[mcol].dropna()))
    wide = t.pivot(index=ident, columns=mcol, values=vcol).reset_index()
    wide.columns = [str(c) for c in wide.columns]
    wide = wide[ident + names]
    return RunTable(wide, ident, names, "long", notes, vcol, mcol)


def _from_wide(table, cols, identity, metrics, decimal, notes) -> RunTable:
    if metrics is not None:
        _need(cols, metrics, "metric")
    elif identity is not None:
        metrics = [c for c in cols if c not in identity]
    else:
        metrics = [c for c in cols if c in KNOWN_METRICS]
        if not metrics:
            metrics = [c for c in cols if _fold(c) not in REPLICATE_NAMES
                       and _is_numeric(table[c], decimal)]
        if not metrics:
            raise InputError(f"run table: no metric column found (known names "
                             f"{', '.join(KNOWN_METRICS[:4])}, … or numeric columns); name them "
                             f"with --metric; found: {', '.join(cols)}")
        notes.append(f"wide table: metric column(s) {metrics} (detected)")
    ident = identity or [c for c in cols if c not in metrics and c not in KNOWN_METRICS
                         and (_fold(c) in REPLICATE_NAMES or not _is_numeric(table[c], decimal))]
    ignored = [c for c in cols if c not in ident and c not in metrics]
    if ignored:
        notes.append(f"column(s) neither identity nor metric, ignored: {ignored}")
    t = table[ident + metrics].copy()
    for m in metrics:
        t[m] = to_numeric(t[m], m, decimal)
    for c in ident:
        t[c] = t[c].astype("string").fillna("")
    return RunTable(t.reset_index(drop=True), ident, metrics, "wide", notes)


def replicate_columns(identity) -> list[str]:
    """Identity columns that number replicates (seed, fold, …): paired on, pooled over."""
    return [c for c in identity if _fold(c) in REPLICATE_NAMES]


__all__ = ["KNOWN_METRICS", "REPLICATE_NAMES", "RunTable", "read_run_table",
           "replicate_columns", "to_numeric"]
