"""Building the manifest from folder layouts and list files (CSV, Parquet, XLSX)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from splitscope.errors import InputError

MANIFEST_COLUMNS = [
    "row",  # 0..n-1, release order; the row identity every export is keyed by
    "corpus",  # which release the row belongs to (several corpora may share one manifest)
    "path",  # the path as released (relative, posix separators), verbatim
    "split",  # normalized split: train / val / test, or the released name lower-cased
    "split_released",  # the split name as released (folder name or list value)
    "label",
    "source",
    "group",
    "frame",
    "file",  # where the bytes are on this machine (absolute), <NA> when unknown
    "basename",
]

_SPLIT_ALIASES = {
    "train": "train",
    "training": "train",
    "trn": "train",
    "val": "val",
    "valid": "val",
    "validation": "val",
    "dev": "val",
    "test": "test",
    "testing": "test",
    "tst": "test",
}

# Column names recognised in list files, in order of preference; explicit names override.
_COLUMN_ALIASES = {
    "path": ["path", "image_path", "filepath", "file_path", "file", "filename", "image", "img",
             "image_id", "name"],
    "split": ["split", "subset", "partition", "set", "fold"],
    "label": ["label", "class", "target", "diagnosis", "category", "y"],
    "source": ["source", "dataset", "site", "center", "centre", "origin"],
    "group": ["group", "patient", "patient_id", "patientid", "subject", "subject_id", "video",
              "video_id", "study", "lesion_id"],
    "frame": ["frame", "frame_index", "frame_idx", "slice", "slice_index"],
}

_LIST_SUFFIXES = {".csv", ".tsv", ".txt", ".parquet", ".pq", ".xlsx", ".xlsm"}


def normalize_split(name: object) -> object:
    """Map a released split name to ``train``/``val``/``test`` (case-insensitive); other names
    are lower-cased and kept; missing stays missing."""
    if name is None or (isinstance(name, float) and pd.isna(name)) or name is pd.NA:
        return pd.NA
    key = str(name).strip().lower()
    return _SPLIT_ALIASES.get(key, key)


def is_list_file(path: str | Path) -> bool:
    """True when ``path`` is a file whose suffix names a supported list format."""
    p = Path(path)
    return p.is_file() and p.suffix.lower() in _LIST_SUFFIXES


def read_table(path: Path, sheet: str | int | None = None, *, text: bool = True,
               strip_names: bool = True, what: str = "list file") -> pd.DataFrame:
    """Read a CSV/TSV, Parquet or XLSX table.

    ``text`` keeps CSV values as strings (paths and labels are never re-typed); ``strip_names``
    trims column names (a prediction reader keeps them verbatim, to report a name that differs
    only by whitespace). ``what`` names the file in error messages. A missing, empty,
    unparsable or row-less file is an :class:`InputError`.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{what} not found: {path}")
    suffix = path.suffix.lower()
    csv_options = {"dtype": str} if text else {}
    try:
        if suffix in {".csv", ".txt"}:
            table = pd.read_csv(path, keep_default_na=False, na_values=[""], **csv_options)
        elif suffix == ".tsv":
            table = pd.read_csv(path, sep="\t", keep_default_na=False, na_values=[""],
                                **csv_options)
        elif suffix in {".parquet", ".pq"}:
            table = pd.read_parquet(path)
        elif suffix in {".xlsx", ".xlsm"}:
            table = pd.read_excel(path, sheet_name=sheet if sheet is not None else 0,
                                  engine="openpyxl")
        else:
            raise InputError(
                f"unsupported format {suffix!r} for {what} {path}; use CSV, TSV, Parquet or XLSX"
            )
    except InputError:
        raise
    except pd.errors.EmptyDataError as exc:
        raise InputError(f"{what} {path} is empty") from exc
    except Exception as exc:  # parser errors of every backend end here with the file named
        raise InputError(f"cannot read {what} {path}: {type(exc).__name__}: {exc}") from exc
    table.columns = [str(c).strip() if strip_names else str(c) for c in table.columns]
    if table.shape[1] == 0 or len(table) == 0:
        raise InputError(f"{what} {path} has no rows")
    return table


def _pick_column(table: pd.DataFrame, role: str, explicit: str | None, where: str,
                 required: bool) -> str | None:
    if explicit is not None:
        if explicit not in table.columns:
            raise InputError(
                f"column {explicit!r} (for {role}) missing in {where}; found: "
                f"{', '.join(map(str, table.columns))}"
            )
        return explicit
    lower = {c.lower(): c for c in table.columns}
    for alias in _COLUMN_ALIASES[role]:
        if alias in lower:
            return lower[alias]
    if required:
        raise InputError(
            f"no {role} column in {where}; found: {', '.join(map(str, table.columns))}; "
            f"name it explicitly (e.g. --path-column)"
        )
    return None


def _finish(frame: pd.DataFrame, corpus: str) -> pd.DataFrame:
    """Give a partial row table every manifest column with stable dtypes."""
    n = len(frame)
    out = pd.DataFrame(index=range(n))
    out["row"] = pd.array(range(n), dtype="int64")
    out["corpus"] = pd.array([corpus] * n, dtype="string")
    for col in ("path", "split_released", "label", "source", "group", "file"):
        values = frame[col] if col in frame else pd.Series([pd.NA] * n)
        out[col] = pd.array(list(values), dtype="string")
    out["split"] = pd.array([normalize_split(v) for v in out["split_released"]], dtype="string")
    if "frame" in frame:
        out["frame"] = pd.to_numeric(pd.Series(list(frame["frame"])), errors="coerce").astype("Int64")
    else:
        out["frame"] = pd.array([pd.NA] * n, dtype="Int64")
    out["basename"] = pd.array(
        [p.rsplit("/", 1)[-1] if isinstance(p, str) else pd.NA for p in out["path"]],
        dtype="string",
    )
    return out[MANIFEST_COLUMNS]


def read_folder(root: str | Path, corpus: str | None = None) -> pd.DataFrame:
    """Manifest of a folder release, layout detected automatically.

    ``ROOT/<split>/<class>/file`` when every top-level folder is a split name (recognised
    case-insensitively: train/training, val/valid/validation, test/testing), else
    ``ROOT/<class>/file``; a folder with no subfolders is a flat list of unlabelled files.
    Files directly under ROOT beside the layout's folders (a README, an answer key) are left
    out and listed in ``attrs['excluded']``. Rows are sorted by released path (code-point order) so the manifest
    is the same on every machine. Hidden files (names starting with ``.``) are left out and
    listed in ``attrs['excluded']``; every other file is a row, image or not, so that the
    feature stage can record what it could not read.
    """
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"not a folder: {root}")
    files: list[str] = []  # plain strings: pathlib per file costs more than the walk itself
    excluded: list[dict] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        prefix = os.path.relpath(dirpath, root).replace(os.sep, "/")
        prefix = "" if prefix == "." else prefix + "/"
        for name in filenames:
            if name.startswith("."):
                excluded.append({"path": prefix + name, "reason": "hidden file"})
            else:
                files.append(prefix + name)
    files.sort()
    if not files:
        raise InputError(f"folder {root} holds no files")
    parts = [f.split("/") for f in files]
    top = {p[0] for p in parts if len(p) > 1}
    split_layout = bool(top) and all(name.lower() in _SPLIT_ALIASES for name in top)
    if top:  # files beside the split/class folders (README, answer keys) are not released rows
        excluded += [{"path": f, "reason": "file at the root, outside the folder layout"}
                     for f, p in zip(files, parts) if len(p) == 1]
        kept = [i for i, p in enumerate(parts) if len(p) > 1]
        files, parts = [files[i] for i in kept], [parts[i] for i in kept]
    base = os.path.abspath(root) + os.sep
    rows = []
    for rel, p in zip(files, parts):
        split = label = pd.NA
        if split_layout:
            split = p[0]
            label = p[1] if len(p) > 2 else pd.NA
        elif len(p) > 1:
            label = p[0]
        rows.append({"path": rel, "split_released": split, "label": label,
                     "file": base + rel.replace("/", os.sep)})
    manifest = _finish(pd.DataFrame(rows), corpus or root.name)
    manifest.attrs = {
        "inputs": [{"kind": "folder", "path": str(root), "layout":
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
        Folder the listed paths are relative to; default: the list file's folder. Absolute
        paths in the list are used as they are.
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
    columns = dict(columns or {})
    unknown = set(columns) - set(_COLUMN_ALIASES)
    if unknown:
        raise InputError(f"unknown column role(s) {sorted(unknown)}; use {sorted(_COLUMN_ALIASES)}")
    table = read_table(path, sheet=sheet)
    where = str(path)
    picked = {
        role: _pick_column(table, role, columns.get(role), where, required=(role == "path"))
        for role in _COLUMN_ALIASES
    }
    if split is not None and picked["split"] is not None and "split" not in columns:
        picked["split"] = None  # a constant split given by the caller wins over a guessed column
    elif split is not None and picked["split"] is not None:
        raise InputError(f"both a split column ({picked['split']!r}) and split={split!r} given")
    raw_paths = table[picked["path"]]
    missing = raw_paths.isna() | (raw_paths.astype("string").str.strip() == "")
    if missing.any():
        first = [int(i) + 2 for i in missing[missing].index[:5]]  # spreadsheet line numbers
        raise InputError(
            f"{int(missing.sum())} row(s) of {where} have no path (first at line(s) {first})"
        )
    base = Path(root) if root is not None else path.parent
    paths = raw_paths.astype(str).str.replace("\\", "/", regex=False)
    frame = pd.DataFrame({"path": paths})
    frame["file"] = [p if os.path.isabs(p) else os.path.abspath(base / p) for p in paths]
    frame["split_released"] = split if split is not None else (
        table[picked["split"]] if picked["split"] else pd.NA)
    for role in ("label", "source", "group", "frame"):
        if picked[role] is not None:
            frame[role] = table[picked[role]].astype("string")
    manifest = _finish(frame, corpus or path.stem)
    manifest.attrs = {
        "inputs": [{"kind": "list", "path": str(path), "columns": picked,
                    "root": str(base), "split": split}],
        "excluded": [],
    }
    return manifest


def build_manifest(
    inputs: str | Path | pd.DataFrame | Iterable[str | Path | pd.DataFrame],
    **list_options,
) -> pd.DataFrame:
    """One manifest from one or more releases (folders, list files or manifests).

    Several inputs are concatenated in the order given (each keeps its own ``corpus`` name
    unless ``corpus=`` is passed for a single input) and ``row`` is renumbered 0..n-1.
    ``list_options`` go to :func:`read_list` for list inputs; ``corpus`` applies to folders too.
    """
    if isinstance(inputs, (str, Path, pd.DataFrame)):
        inputs = [inputs]
    parts: list[pd.DataFrame] = []
    for item in inputs:
        if isinstance(item, pd.DataFrame):
            parts.append(item)
        elif Path(item).is_dir():
            parts.append(read_folder(item, corpus=list_options.get("corpus")))
        elif Path(item).exists():
            parts.append(read_list(item, **list_options))
        else:
            raise InputError(f"input not found: {item}")
    if not parts:
        raise InputError("no inputs given")
    manifest = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].copy()
    manifest["row"] = pd.array(range(len(manifest)), dtype="int64")
    manifest.attrs = {
        "inputs": [i for p in parts for i in p.attrs.get("inputs", [])],
        "excluded": [e for p in parts for e in p.attrs.get("excluded", [])],
    }
    return manifest[MANIFEST_COLUMNS]
