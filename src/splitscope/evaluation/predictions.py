"""Saved predictions and the truth they are scored against (METHODS §5.1, §5.7).

Predictions are read as released: every row, every column name verbatim (no trimming, no case
folding), so that the scoreability check can say exactly what differs. Scores are found by
class name; a column whose name equals a class only after trimming or case folding is *not*
used and is reported as a reason.

Path keys
---------
Rows are aligned on a **path key**. The default mode ``exact`` compares the full path after one
rule only: backslashes become forward slashes, the separator rule every manifest path follows
(``validation\\Normal\\x.jpg`` and ``validation/Normal/x.jpg`` are the same released path).
Nothing else is changed: no case folding, no trimming, no prefix removal. Rows whose verbatim
strings differ only in the separator are counted and reported as a note.

The opt-in mode ``basename`` compares the last path component only. It is a repair, so it is
recorded (``path_mode``) in every verdict and result it touches, and truth basenames shared by
several truth rows are reported because those rows cannot be aligned by name.

The tool's own logits
---------------------
A Parquet file whose ``splitscope`` schema metadata says ``score_kind: logit`` holds logits of a
model the tool trained (``splitscope experiment`` writes them so). They are read as their
softmax probabilities (METHODS §5.13), whatever kind the caller declared, so every metric of
every path (audit, rescore, effects, contrasts) scores probabilities: AUCs are then
scikit-learn's one-vs-rest AUCs, and the argmax, ECE, Brier score and NLL are those of the
logits. The entry says so (``own_logits`` and a read note). Every other file keeps its scores as
supplied (§5.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.evaluation.options import ReadOptions
from splitscope.evaluation.readers import read_any_table

SCORE_KINDS = ("probability", "logit", "score")
PATH_MODES = ("exact", "basename")
PREDICTION_SUFFIXES = (".csv", ".tsv", ".txt", ".parquet", ".pq", ".xlsx", ".xlsm")

_PATH_ALIASES = ("image_path", "path", "filepath", "file_path", "file", "filename", "image",
                 "img", "image_id", "name")
_LABEL_ALIASES = ("label", "class_label", "class", "target", "diagnosis", "category", "y")
_SOURCE_ALIASES = ("source", "dataset", "site", "center", "centre", "origin")
_GROUP_ALIASES = ("group", "patient", "patient_id", "subject", "video", "video_id", "study")
_SPLIT_ALIASES = ("split", "subset", "partition", "set")

_WINDOWS_ABS = re.compile(r"^[A-Za-z]:[\\/]|^\\\\")


# --------------------------------------------------------------------------------------------
# data holders


@dataclass
class Predictions:
    """One prediction file (one run or one challenge entry) in wide form.

    Attributes
    ----------
    name : str
        Entry name (file stem unless given).
    table : DataFrame
        Every released row; column names verbatim. Long files are pivoted to this wide form.
    path_column : str or None
        Column holding the released path (``None`` when none was found; then nothing aligns).
    score_kind : str
        ``probability``, ``logit`` or ``score`` (declared by the caller, never guessed).
    source : str or None
        File the predictions were read from.
    layout : str
        ``wide`` or ``long`` (as read).
    own_logits : bool
        The file holds the tool's own logits (its Parquet metadata says so) and ``table`` holds
        their softmax probabilities (module docstring).
    problems : list of str
        Defects found while reading (e.g. duplicated path/class pairs in a long file); they make
        the entry unscoreable.
    read : dict
        How the file was read (sheet, header row, delimiter, decimal mark, byte-order mark,
        workbook engine, cache) with a note per detected or declared departure from a plain
        read; see :func:`splitscope.evaluation.readers.read_any_table`.
    """

    name: str
    table: pd.DataFrame
    path_column: str | None
    score_kind: str = "score"
    source: str | None = None
    layout: str = "wide"
    sheet: str | int | None = None
    problems: list[str] = field(default_factory=list)
    read: dict = field(default_factory=dict)
    own_logits: bool = False


@dataclass
class Truth:
    """The reference list predictions are scored against, in its released order.

    Attributes
    ----------
    paths : ndarray of str
        Released paths, verbatim.
    labels : ndarray of int
        Class index of every row (into ``classes``).
    classes : list of str
        The task's classes in their stated order; these are the *required* classes of every view.
    rows : ndarray of int
        Row identity (the manifest's ``row`` when read from a manifest, else 0..n-1).
    source, group, split : ndarray of object or None
        Per-row source (e.g. the workbook's ``Dataset``), group and split when known.
    origin : str
        What the truth was read from.
    """

    paths: np.ndarray
    labels: np.ndarray
    classes: list[str]
    rows: np.ndarray
    source: np.ndarray | None = None
    group: np.ndarray | None = None
    split: np.ndarray | None = None
    origin: str = ""

    def __len__(self) -> int:
        return int(self.labels.size)

    @property
    def keys(self) -> np.ndarray:
        return path_keys(self.paths, "exact")

    def frame(self) -> pd.DataFrame:
        """One row per truth row: ``row``, ``path``, ``label``, ``source``, ``group``, ``split``."""
        out = pd.DataFrame({"row": self.rows, "path": self.paths,
                            "label": np.asarray(self.classes, dtype=object)[self.labels]})
        for name in ("source", "group", "split"):
            values = getattr(self, name)
            out[name] = values if values is not None else pd.NA
        return out


# --------------------------------------------------------------------------------------------
# path keys


def path_keys(paths, mode: str = "exact") -> np.ndarray:
    """Alignment keys of released paths under ``mode`` (see module docstring)."""
    if mode not in PATH_MODES:
        raise InputError(f"path mode {mode!r} not one of {PATH_MODES}")
    s = pd.Series(np.asarray(paths, dtype=object)).astype("string").str.replace("\\", "/",
                                                                                regex=False)
    if mode == "basename":
        s = s.str.rsplit("/", n=1).str[-1]
    return s.to_numpy(dtype=object, na_value=None)


def describe_paths(paths) -> dict[str, int]:
    """Counts of path shapes: absolute Windows, absolute POSIX, bare filename, relative."""
    s = pd.Series(np.asarray(paths, dtype=object)).astype("string")
    win = s.str.contains(_WINDOWS_ABS, regex=True).fillna(False)
    posix = s.str.startswith("/").fillna(False) & ~win
    bare = ~s.str.contains(r"[\\/]", regex=True).fillna(False) & ~win & ~posix
    missing = s.isna()
    return {"absolute Windows paths": int(win.sum()), "absolute POSIX paths": int(posix.sum()),
            "bare filenames": int((bare & ~missing).sum()),
            "relative paths": int((~win & ~posix & ~bare & ~missing).sum()),
            "missing paths": int(missing.sum())}


# --------------------------------------------------------------------------------------------
# reading


def _find(columns, aliases, explicit: str | None, where: str, role: str) -> str | None:
    if explicit is not None:
        if explicit not in columns:
            raise InputError(f"column {explicit!r} (for {role}) missing in {where}; found: "
                             f"{', '.join(map(str, columns))}")
        return explicit
    exact = {c: c for c in columns}
    for alias in aliases:  # exact names first, then case/whitespace-insensitive
        if alias in exact:
            return alias
    lower = {str(c).strip().lower(): c for c in columns}
    for alias in aliases:
        if alias in lower:
            return lower[alias]
    return None


def entry_name(stem: str) -> str:
    """Entry (team or run) name from a submission file stem: the trailing
    ``[_predicted]_{val|valid|validation|test|testing}[_dataset|_excel|_predictions]`` part
    is removed (``DS&Chill_predicted_val_dataset`` → ``DS&Chill``)."""
    pattern = (r"[_\s-]*(predicted[_\s-]*)?(val|valid|validation|test|testing)"
               r"([_\s-]*(dataset|excel|predictions))?[_\s-]*$")
    name = re.sub(pattern, "", stem, flags=re.IGNORECASE)
    return name or stem


def entry_key(name: str) -> str:
    """Key for matching one entry across folders: case-folded, runs of spaces, underscores and
    hyphens read as one ``_`` (``DeepScope Innovators`` and ``DeepScope_Innovators`` match)."""
    return re.sub(r"[\s_-]+", "_", name.strip()).casefold()


def read_predictions(
    path: str | Path,
    *,
    score_kind: str = "score",
    layout: str = "wide",
    path_column: str | None = None,
    class_column: str | None = None,
    score_column: str | None = None,
    sheet: str | int | None = None,
    name: str | None = None,
    read: ReadOptions | None = None,
) -> Predictions:
    """Read one prediction file (CSV, TSV, Parquet or XLSX).

    Parameters
    ----------
    path : path-like
        The file.
    score_kind : {"probability", "logit", "score"}
        What the numbers are, as declared by the caller (never guessed). ``score`` means only
        rank- and argmax-based metrics apply; probability metrics (ECE, Brier, NLL) need
        ``probability`` or ``logit`` (softmax applied for those metrics only).
    layout : {"wide", "long"}
        ``wide``: one column per class, named by class. ``long``: one row per (path, class)
        with ``class_column`` and ``score_column``; pivoted to wide here.
    path_column : str, optional
        Column of released paths; default: ``image_path``, ``path``, ... (first found).
    sheet : str or int, optional
        XLSX sheet (default: the first); overrides ``read.sheet``.
    name : str, optional
        Entry name; default: the file stem.
    read : ReadOptions, optional
        Header row, CSV delimiter and decimal mark, workbook engine and cache (default: detect,
        no cache).

    Returns
    -------
    Predictions
    """
    if score_kind not in SCORE_KINDS:
        raise InputError(f"score kind {score_kind!r} not one of {SCORE_KINDS}")
    if layout not in ("wide", "long"):
        raise InputError(f"layout {layout!r} not one of ('wide', 'long')")
    path = Path(path)
    read = read or ReadOptions()
    if sheet is not None:
        read = replace(read, sheet=sheet)
    table, info = read_any_table(path, read, key_names=_PATH_ALIASES, text=False,
                                 strip_names=False, what="prediction file")
    where = str(path)
    pcol = _find(table.columns, _PATH_ALIASES, path_column, where, "path")
    problems: list[str] = []
    if layout == "long":
        if pcol is None:
            raise InputError(f"no path column in long file {where}; found: "
                             f"{', '.join(table.columns)}")
        ccol = _find(table.columns, ("class", "label", "class_name"), class_column, where, "class")
        scol = _find(table.columns, ("score", "probability", "prob", "logit", "value"),
                     score_column, where, "score")
        if ccol is None or scol is None:
            raise InputError(f"long file {where} needs a class and a score column "
                             f"(--class-column, --score-column); found: "
                             f"{', '.join(table.columns)}")
        pairs = table[[pcol, ccol]].astype("string")
        dup = pairs.duplicated(keep="first")
        if dup.any():
            problems.append(f"{int(dup.sum()):,} duplicated (path, class) rows in the long file")
        table = table.loc[~dup]
        wide = table.pivot(index=pcol, columns=ccol, values=scol)
        order = pd.unique(table[pcol])
        wide = wide.loc[order].reset_index()
        wide.columns = [str(c) for c in wide.columns]
        table = wide
    own = layout == "wide" and _own_logits(info.get("splitscope"), table)
    if own:
        table = _softmax_columns(table, info["splitscope"]["classes"])
        if score_kind != "probability":
            info["notes"].append(f"the tool's own logits (splitscope Parquet metadata; declared "
                                 f"{score_kind}): scored as their softmax probabilities")
        score_kind = "probability"
    return Predictions(name=name or path.stem, table=table, path_column=pcol,
                       score_kind=score_kind, source=str(path), layout=layout,
                       sheet=info["sheet"], problems=problems, read=info, own_logits=own)


def _own_logits(meta: dict | None, table: pd.DataFrame) -> bool:
    """The metadata says the file holds the tool's logits and names classes the table has."""
    if not meta or meta.get("score_kind") != "logit":
        return False
    classes = meta.get("classes")
    return (isinstance(classes, list) and bool(classes)
            and all(isinstance(c, str) and c in table.columns for c in classes))


def _softmax_columns(table: pd.DataFrame, classes: list[str]) -> pd.DataFrame:
    """``table`` with the class columns replaced by the row-wise softmax of their values."""
    from splitscope.evaluation.metrics import softmax

    z = table[classes].apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
    out = table.copy()
    out[classes] = softmax(z)
    return out


def list_prediction_files(folder: str | Path) -> list[Path]:
    """Prediction files of a folder (supported suffixes, hidden and Office lock files left out),
    sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"not a folder: {folder}")
    files = sorted(p for p in folder.iterdir() if p.is_file()
                   and p.suffix.lower() in PREDICTION_SUFFIXES
                   and not p.name.startswith((".", "~$")))
    if not files:
        raise InputError(f"folder {folder} holds no prediction files "
                         f"({', '.join(PREDICTION_SUFFIXES)})")
    return files


def read_truth(
    source: str | Path | pd.DataFrame,
    classes: list[str] | None = None,
    *,
    path_column: str | None = None,
    label_column: str | None = None,
    source_column: str | None = None,
    group_column: str | None = None,
    sheet: str | int | None = None,
    read: ReadOptions | None = None,
) -> Truth:
    """The truth list from a manifest (DataFrame with ``path`` and ``label``) or a workbook.

    A workbook gives labels either as one-hot class columns (``validation_data.xlsx``:
    ``image_path, Dataset, Angioectasia, …``; every row must hold exactly one 1) or as one label
    column (``test_data.xlsx``: ``image_path, class_label``).

    Parameters
    ----------
    classes : list of str, optional
        The task's classes in order; they are the required classes of every view. Default: the
        one-hot columns in workbook order, or the sorted distinct labels.
    """
    if isinstance(source, pd.DataFrame):
        table, where = source, "manifest"
        rows = (table["row"].to_numpy(dtype=np.int64) if "row" in table
                else np.arange(len(table), dtype=np.int64))
    else:
        where = str(source)
        p = Path(source)
        if not p.exists():
            raise InputError(f"truth file not found: {p}")
        read = read or ReadOptions()
        if sheet is not None:
            read = replace(read, sheet=sheet)
        table, _ = read_any_table(p, read, key_names=_PATH_ALIASES, text=True,
                                  strip_names=True, what="truth list")
        rows = np.arange(len(table), dtype=np.int64)
    if len(table) == 0:
        raise InputError(f"truth {where} has no rows")
    pcol = _find(table.columns, _PATH_ALIASES, path_column, where, "path")
    if pcol is None:
        raise InputError(f"no path column in truth {where}; found: "
                         f"{', '.join(map(str, table.columns))}")
    paths = table[pcol].astype("string")
    if paths.isna().any():
        raise InputError(f"{int(paths.isna().sum())} truth row(s) of {where} have no path")
    onehot_cols = None
    lcol = None
    if label_column is not None:
        lcol = _find(table.columns, _LABEL_ALIASES, label_column, where, "label")
    elif classes is not None and all(c in table.columns for c in classes):
        onehot_cols = list(classes)
    else:
        lcol = _find(table.columns, _LABEL_ALIASES, None, where, "label")
        if lcol is None:
            onehot_cols = [c for c in table.columns if c != pcol and _is_binary(table[c])] or None
    if onehot_cols:
        hot = table[onehot_cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(hot).all(axis=1) | (hot.sum(axis=1) != 1) | ~np.isin(hot, (0, 1)).all(
            axis=1)
        if bad.any():
            first = np.flatnonzero(bad)[:5].tolist()
            raise InputError(f"{int(bad.sum())} truth row(s) of {where} are not one-hot over "
                             f"{onehot_cols} (first rows {first})")
        labels = hot.argmax(axis=1).astype(np.int64)
        classes = list(onehot_cols)
    elif lcol is not None:
        lab = table[lcol].astype("string")
        if lab.isna().any():
            raise InputError(f"{int(lab.isna().sum())} truth row(s) of {where} have no label")
        if classes is None:
            classes = sorted(lab.unique().tolist())
        lookup = {c: i for i, c in enumerate(classes)}
        unknown = sorted(set(lab) - set(lookup))
        if unknown:
            raise InputError(f"truth {where} has labels outside the classes {classes}: "
                             f"{unknown[:5]}")
        labels = lab.map(lookup).to_numpy(dtype=np.int64)
    else:
        raise InputError(f"no labels in truth {where}: neither a label column nor one-hot class "
                         f"columns; found: {', '.join(map(str, table.columns))}")

    def opt(aliases, explicit, role):
        col = _find(table.columns, aliases, explicit, where, role)
        if col is None or col in (onehot_cols or []):
            return None
        vals = table[col].astype("string").to_numpy(dtype=object, na_value=None)
        return None if all(v is None for v in vals) else vals

    return Truth(paths=paths.to_numpy(dtype=object), labels=labels, classes=list(classes),
                 rows=rows, source=opt(_SOURCE_ALIASES, source_column, "source"),
                 group=opt(_GROUP_ALIASES, group_column, "group"),
                 split=opt(_SPLIT_ALIASES, None, "split"), origin=where)


def _is_binary(col: pd.Series) -> bool:
    values = pd.to_numeric(col, errors="coerce")
    return bool(values.notna().all() and values.isin((0, 1)).all())
