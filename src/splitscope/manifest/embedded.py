"""Manifests of releases whose images live inside tables: the Hugging Face ``datasets`` layouts.

Read with pyarrow alone (``datasets`` is needed only to pass a ``Dataset`` object):

- a Parquet or Arrow file, or a folder of them (the Hub's ``data/train-00000-of-00001.parquet``;
  the folder holds tables and nothing else but a card or info files),
  whose image column holds ``Image`` structs ``{bytes, path}`` (or plain binary, when named);
- a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
  (``dataset_dict.json``, per split ``state.json`` naming its ``data-*.arrow`` files);
- a ``datasets.Dataset`` / ``DatasetDict`` object, through the Arrow files it is memory-mapped
  from (its ``cache_files``); nothing is written;
- the Hub's local ``imagefolder`` layout: image files plus ``metadata.csv`` / ``metadata.jsonl``
  with a ``file_name`` column, read as list files (the images are files).

One manifest row per table row, in table order (files in code-point order of their relative
path, or in the order ``state.json`` lists them). ``file`` is the key
``<absolute table path>::<image column>/<row>`` (:mod:`splitscope.features.sources`), ``path``
is ``<table path relative to the input>::<row>``, ``basename`` the file name of the stored
``path`` when the struct has one. ``table``, ``table_row`` and ``stored_path`` record where
the row came from; ``content`` is ``embedded``.

Split: a split column (named, or found by its usual names), else the file name as the Hub names
shards (``train-00000-of-00003.parquet``, ``validation.parquet``), else a folder on the path
(``train/``), else the split recorded in ``state.json``. Label: a label column, given its
``ClassLabel`` names when the features in the schema's ``huggingface`` metadata (or
``dataset_info.json``) declare them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.manifest.containers import TABLE_SUFFIXES

__all__ = ["embedded_kind", "image_columns", "is_imagefolder", "read_dataset_object",
           "read_embedded", "read_imagefolder", "table_layout"]

METADATA_NAMES = ("metadata.csv", "metadata.jsonl")
_SHARD = re.compile(r"^(?P<split>[A-Za-z]+)(?:[-_.]\d.*)?$")


# ----------------------------------------------------------------------------- schemas


def _is_image_type(kind) -> bool:
    import pyarrow as pa

    if not pa.types.is_struct(kind):
        return False
    names = {kind.field(i).name: kind.field(i).type for i in range(kind.num_fields)}
    return "bytes" in names and (pa.types.is_binary(names["bytes"])
                                 or pa.types.is_large_binary(names["bytes"]))


def _hf_features(schema, folder: Path | None = None) -> dict:
    """The ``features`` the ``datasets`` library stored with a table: the schema's
    ``huggingface`` metadata, else a ``dataset_info.json`` beside it; ``{}`` when none."""
    meta = schema.metadata or {}
    raw = meta.get(b"huggingface")
    if raw:
        try:
            info = json.loads(raw)
            feats = (info.get("info") or {}).get("features") or info.get("features")
            if isinstance(feats, dict):
                return feats
        except (ValueError, AttributeError):
            pass
    if folder is not None and (folder / "dataset_info.json").is_file():
        try:
            feats = json.loads((folder / "dataset_info.json").read_text()).get("features")
            if isinstance(feats, dict):
                return feats
        except (ValueError, OSError, AttributeError):
            pass
    return {}


def image_columns(schema, features: Mapping | None = None) -> list[str]:
    """Columns holding ``Image`` structs ``{bytes, path}``, in schema order."""
    features = features or {}
    out = [f.name for f in schema if _is_image_type(f.type)]
    declared = [n for n in out if isinstance(features.get(n), dict)
                and features[n].get("_type") == "Image"]
    return declared or out


def _arrow_reader(path: Path):
    """A reader of an Arrow IPC file (``ARROW1`` magic) or stream, memory-mapped."""
    import pyarrow as pa

    with open(path, "rb") as fh:
        head = fh.read(6)
    source = pa.memory_map(str(path), "r")
    return pa.ipc.open_file(source) if head == b"ARROW1" else pa.ipc.open_stream(source)


def _schema(path: Path):
    """The Arrow schema of a Parquet file or an Arrow IPC file/stream (InputError when the
    file is not one)."""
    import pyarrow.parquet as pq

    try:
        if path.suffix.lower() == ".arrow":
            return _arrow_reader(path).schema
        return pq.read_schema(path)
    except Exception as exc:
        raise InputError(f"cannot read table {path}: {type(exc).__name__}: {exc}") from exc


def _read_columns(path: Path, columns: list[str], image: str | None, nested_path: bool):
    """The named columns of a table as pandas, plus the image structs' stored ``path``
    (``None`` per row when the struct has none), every text as valid UTF-8
    (:func:`_as_text`)."""
    import pyarrow.parquet as pq

    try:
        if path.suffix.lower() == ".arrow":
            table = _arrow_reader(path).read_all()
            n = table.num_rows
            stored = (table.column(image).combine_chunks().field("path")
                      if image and nested_path else None)
            table = table.select(columns)
        else:
            pf = pq.ParquetFile(path)
            n = pf.metadata.num_rows
            stored = (pq.read_table(path, columns=[f"{image}.path"]).column(0)
                      if image and nested_path else None)
            table = pf.read(columns=columns)
        stored = [None] * n if stored is None else _stored_names(stored)
        frame = pd.DataFrame({c: _as_text(table.column(c)) for c in columns}) if columns \
            else pd.DataFrame(index=range(n))
    except Exception as exc:
        raise InputError(f"cannot read table {path}: {type(exc).__name__}: {exc}") from exc
    return frame.reset_index(drop=True), stored, n


def _stored_names(column) -> list[tuple[str, str] | None]:
    """Each image struct's stored path and its last component (split on ``/`` and ``\\``
    before bytes that are not UTF-8 are escaped, so that an escape's backslash never splits
    it), or None where there is none."""
    import pyarrow as pa

    paths = _as_text(column).tolist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            column = column.cast(pa.large_binary())
    raw = column.to_pylist()
    out: list[tuple[str, str] | None] = []
    for shown, value in zip(paths, raw):
        if not isinstance(shown, str):
            out.append(None)
        elif isinstance(value, bytes):
            last = value.replace(b"\\", b"/").rsplit(b"/", 1)[-1]
            out.append((shown, last.decode("utf-8", "backslashreplace")))
        else:
            out.append((shown, shown.replace("\\", "/").rsplit("/", 1)[-1]))
    return out


def _as_text(column) -> pd.Series:
    """An Arrow column as pandas; text (a string field, or the binary ``path`` a struct may
    hold) as valid UTF-8, bytes that are not written as ``\\xNN`` escapes, as a list file's
    invalid names are: a table whose stored names hold such bytes is read, every name listed,
    rather than refused."""
    import pyarrow as pa

    from splitscope.manifest.rows import _valid_text

    kind = column.type
    textual = pa.types.is_string(kind) or pa.types.is_large_string(kind)
    binary = pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
    if textual:
        try:
            column.validate(full=True)  # a string field's bytes are not checked when read
        except pa.ArrowInvalid:  # not UTF-8: escape the bytes
            column = column.cast(pa.large_binary() if pa.types.is_large_string(kind)
                                 else pa.binary())
            binary = True
    if binary:
        values = pd.Series(column.to_pylist(), dtype=object)
        return _valid_text(values)[0].where(values.notna(), None)
    return column.to_pandas()


def _rows_with_bytes(path: Path, image: str, n: int) -> int:
    """How many rows of the table hold image bytes in ``image`` (a struct ``{bytes, path}``
    or plain binary): from the Parquet statistics where every row group has them, else by
    reading the column's validity one row group (or record batch) at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def present(column) -> int:
        chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
        total = 0
        for chunk in chunks:
            valid = chunk.is_valid()
            if pa.types.is_struct(chunk.type):
                valid = pa.compute.and_(valid, chunk.field("bytes").is_valid())
            total += int(pa.compute.sum(valid).as_py() or 0)
        return total

    if path.suffix.lower() == ".arrow":
        return present(_arrow_reader(path).read_all().column(image))
    pf = pq.ParquetFile(path)
    md = pf.metadata
    leaf = f"{image}.bytes" if _is_image_type(pf.schema_arrow.field(image).type) else image
    nulls = 0
    for g in range(md.num_row_groups):
        group = md.row_group(g)
        stats = next((group.column(c).statistics for c in range(group.num_columns)
                      if group.column(c).path_in_schema == leaf), None)
        if stats is None or not stats.has_null_count:
            nulls = None
            break
        nulls += stats.null_count
    if nulls is not None:
        return n - nulls
    return sum(present(pf.read_row_group(g, columns=[image]).column(0))
               for g in range(md.num_row_groups))


def _has_image_column(path: Path) -> bool:
    try:
        schema = _schema(path)
    except InputError:
        return path.suffix.lower() == ".arrow"  # an unreadable .arrow is still reported as one
    return bool(image_columns(schema))


def _shard_split(name: str) -> str | None:
    from splitscope.manifest.rows import _SPLIT_ALIASES

    stem = name.split(".", 1)[0] if name.lower().endswith(TABLE_SUFFIXES) else name
    m = _SHARD.match(stem)
    if m and m["split"].lower() in _SPLIT_ALIASES:
        return m["split"]
    return None


def _split_of(rel: str, state_split: str | None) -> str | None:
    """The split a table's relative path names: its file name (Hub shard names), then a
    folder, then the split recorded by ``save_to_disk``."""
    from splitscope.manifest.rows import _SPLIT_ALIASES

    parts = rel.split("/")
    found = _shard_split(parts[-1])
    if found:
        return found
    for part in reversed(parts[:-1]):
        if part.lower() in _SPLIT_ALIASES:
            return part
    return state_split


# ----------------------------------------------------------------------------- detection


def _save_to_disk_tables(folder: Path) -> list[tuple[Path, str | None]] | None:
    """``(arrow file, split)`` of a ``save_to_disk`` folder in dataset order; ``None`` when
    the folder is not one."""
    def from_state(split_dir: Path, split: str | None) -> list[tuple[Path, str | None]]:
        try:
            state = json.loads((split_dir / "state.json").read_text())
            files = [split_dir / f["filename"] for f in state["_data_files"]]
        except (ValueError, OSError, KeyError, TypeError) as exc:
            raise InputError(f"cannot read {split_dir / 'state.json'}: {exc}") from exc
        return [(f, split or state.get("_split")) for f in files]

    if (folder / "dataset_dict.json").is_file():
        try:
            splits = json.loads((folder / "dataset_dict.json").read_text())["splits"]
        except (ValueError, OSError, KeyError, TypeError) as exc:
            raise InputError(f"cannot read {folder / 'dataset_dict.json'}: {exc}") from exc
        return [t for s in splits for t in from_state(folder / s, s)]
    if (folder / "state.json").is_file():
        return from_state(folder, None)
    return None


#: files a folder of tables may hold beside them (a dataset card, attributes, info files)
_SIDECAR_SUFFIXES = (".md", ".json", ".txt", ".yaml", ".yml", ".gitattributes", ".lock")


def _folder_tables(folder: Path) -> list[Path]:
    """Parquet/Arrow files under ``folder`` (hidden entries skipped), code-point order of the
    relative path; empty as soon as the folder holds any other kind of file (an image, a
    list), so a folder of files is never mistaken for tables and is not walked twice."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in filenames:
            if f.startswith("."):
                continue
            if f.lower().endswith(TABLE_SUFFIXES):
                found.append(Path(dirpath) / f)
            elif not f.lower().endswith(_SIDECAR_SUFFIXES):
                return []
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def _metadata_files(folder: Path) -> list[Path]:
    """``metadata.csv``/``metadata.jsonl`` files (imagefolder layout) whose table has a
    ``file_name`` column, at the root or one level below."""
    out = []
    for d in [folder, *sorted(p for p in folder.iterdir()
                              if p.is_dir() and not p.name.startswith("."))]:
        for name in METADATA_NAMES:
            f = d / name
            if f.is_file() and _has_file_name(f):
                out.append(f)
    return out


def _has_file_name(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
    except OSError:
        return False
    if path.suffix == ".jsonl":
        try:
            return "file_name" in json.loads(first)
        except (ValueError, TypeError):
            return False
    return "file_name" in [c.strip().strip('"') for c in first.strip().split(",")]


def table_layout(item: str | Path) -> str | None:
    """Which table layout an input is: ``table`` (a Parquet/Arrow file with an image column),
    ``save_to_disk``, ``table_folder`` (a folder of such tables); ``None`` otherwise."""
    path = Path(item)
    if path.is_file():
        if path.suffix.lower() == ".arrow":
            return "table"
        if path.suffix.lower() in (".parquet", ".pq") and _has_image_column(path):
            return "table"
        return None
    if not path.is_dir():
        return None
    if (path / "dataset_dict.json").is_file() or ((path / "state.json").is_file() and (
            (path / "dataset_info.json").is_file() or any(path.glob("data-*.arrow")))):
        return "save_to_disk"
    tables = _folder_tables(path)
    if tables and any(_has_image_column(t) for t in tables):
        return "table_folder"
    return None


def is_imagefolder(item: str | Path) -> bool:
    """Whether a folder holds ``metadata.csv`` / ``metadata.jsonl`` with a ``file_name``
    column, at its root or one level below (the Hub's imagefolder layout; a folder of tables
    with such a file is a :func:`table_layout` first)."""
    path = Path(item)
    return path.is_dir() and bool(_metadata_files(path))


def embedded_kind(item: str | Path) -> str | None:
    """What an input is, when it is one of this module's layouts: a :func:`table_layout`, else
    ``imagefolder`` (files plus metadata with ``file_name``); ``None`` otherwise."""
    kind = table_layout(item)
    if kind is None and is_imagefolder(item):
        return "imagefolder"
    return kind


# ----------------------------------------------------------------------------- reading


def _pick(columns: list[str], role: str, explicit: str | None, where: str) -> str | None:
    from splitscope.manifest.rows import _COLUMN_ALIASES

    if explicit is not None:
        if explicit not in columns:
            raise InputError(f"column {explicit!r} (for {role}) missing in {where}; found: "
                             f"{', '.join(columns)}")
        return explicit
    lower = {c.lower(): c for c in columns}
    return next((lower[a] for a in _COLUMN_ALIASES[role] if a in lower), None)


def _label_values(values: pd.Series, feature: Mapping | None, where: str) -> list:
    names = feature.get("names") if isinstance(feature, Mapping) and \
        feature.get("_type") == "ClassLabel" else None
    out = []
    for v in values.tolist():
        if v is None or (isinstance(v, float) and np.isnan(v)):
            out.append(pd.NA)
        elif names is not None and isinstance(v, (int, np.integer)):
            if v == -1:  # ClassLabel's "no label"
                out.append(pd.NA)
            elif 0 <= v < len(names):
                out.append(str(names[v]))
            else:
                raise InputError(f"label {v} in {where} is outside its ClassLabel names "
                                 f"(0..{len(names) - 1})")
        else:
            out.append(str(v))
    return out


def _table_rows(path: Path, rel: str, state_split: str | None, columns: Mapping[str, str],
                image_column: str | None, split: str | None,
                features: Mapping | None = None) -> pd.DataFrame:
    """The partial manifest rows of one table."""
    import pyarrow as pa

    from splitscope.manifest.rows import embedded_key

    schema = _schema(path)
    feats = features if features is not None else _hf_features(schema, path.parent)
    names = list(schema.names)
    where = str(path)
    if image_column is not None:
        if image_column not in names:
            raise InputError(f"image column {image_column!r} missing in {where}; found: "
                             f"{', '.join(names)}")
        kind = schema.field(image_column).type
        if not (_is_image_type(kind) or pa.types.is_binary(kind)
                or pa.types.is_large_binary(kind)):
            raise InputError(f"column {image_column!r} of {where} holds {kind}, not images "
                             f"(a struct {{bytes, path}} or binary)")
        image = image_column
    else:
        found = image_columns(schema, feats)
        if not found:
            raise InputError(f"no image column in {where} (a struct {{bytes, path}}, the "
                             f"datasets Image feature); found: {', '.join(names)}; name one "
                             f"with --image-column")
        if len(found) > 1:
            raise InputError(f"several image columns in {where}: {', '.join(found)}; choose "
                             f"one with --image-column")
        image = found[0]
    others = [c for c in names if c != image]
    picked = {role: _pick(others, role, columns.get(role), where)
              for role in ("split", "label", "source", "group", "frame")}
    if split is not None and picked["split"] is not None and "split" not in columns:
        picked["split"] = None
    wanted = sorted({c for c in picked.values() if c is not None})
    nested = _is_image_type(schema.field(image).type) and \
        "path" in [f.name for f in schema.field(image).type]
    frame, stored, n = _read_columns(path, wanted, image, nested)
    if n and not _rows_with_bytes(path, image, n):  # e.g. Dataset.to_parquet() of local files
        named = next((s[0] for s in stored if s is not None), None)
        raise InputError(
            f"column {image!r} of {where} holds no image bytes in any of its {n:,} rows"
            + (f" (paths only, e.g. {named!r})" if named else "")
            + ": embed the bytes (with datasets, `Dataset.save_to_disk` embeds local image "
              "files; audit that folder) or audit the image files themselves as a list file "
              "naming their paths")
    container = os.path.abspath(path)
    width = len(str(max(n - 1, 0)))
    rows = pd.DataFrame({
        "path": [f"{rel}::{i}" for i in range(n)],
        "file": [embedded_key(container, image, i, width) for i in range(n)],
        "table": container,
        "table_row": np.arange(n, dtype=np.int64),
        "stored_path": [pd.NA if s is None else s[0] for s in stored],
        "stored_name": [pd.NA if s is None else s[1] for s in stored],
    })
    if split is not None:
        rows["split_released"] = split
    elif picked["split"] is not None:
        rows["split_released"] = [pd.NA if v is None else str(v) for v in frame[picked["split"]]]
    else:
        rows["split_released"] = _split_of(rel, state_split) or pd.NA
    if picked["label"] is not None:
        rows["label"] = _label_values(frame[picked["label"]], feats.get(picked["label"]), where)
    for role in ("source", "group", "frame"):
        if picked[role] is not None:
            rows[role] = [pd.NA if v is None else str(v) for v in frame[picked[role]]]
    rows.attrs["input"] = {"kind": "table", "path": str(path), "image_column": image,
                           "columns": picked, "rows": n,
                           "class_names": (feats.get(picked["label"]) or {}).get("names")
                           if picked["label"] else None}
    return rows


def _finish_embedded(parts: list[pd.DataFrame], corpus: str, inputs: list[dict],
                     content: str = "embedded") -> pd.DataFrame:
    from splitscope.manifest.rows import finish_rows

    rows = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    manifest = finish_rows(rows, corpus, content=content)
    manifest.attrs = {"inputs": inputs, "excluded": []}
    return manifest


def read_embedded(item: str | Path, *, corpus: str | None = None,
                  columns: Mapping[str, str] | None = None, image_column: str | None = None,
                  split: str | None = None) -> pd.DataFrame:
    """Manifest of a table, a folder of tables or a ``save_to_disk`` folder (module notes).

    Parameters
    ----------
    item : path-like
        The table file or folder.
    corpus : str, optional
        Corpus name; default the file's stem or the folder's name.
    columns : mapping, optional
        Column names by role (``split``, ``label``, ``source``, ``group``, ``frame``); roles
        not given are found by their usual names.
    image_column : str, optional
        The image column, when a table has several (or holds plain binary).
    split : str, optional
        One split for every row.
    """
    path = Path(item)
    columns = dict(columns or {})
    columns.pop("path", None)
    if path.is_file():
        tables = [(path, path.name, None)]
        name = path.stem
    elif path.is_dir():
        listed = _save_to_disk_tables(path)
        if listed is None:
            listed = [(t, None) for t in _folder_tables(path)]
            if not listed:
                raise InputError(f"folder {path} holds no Parquet or Arrow tables")
        tables = [(t, t.relative_to(path).as_posix(), s) for t, s in listed]
        name = path.name
        missing = [str(t) for t, _, _ in tables if not t.is_file()]
        if missing:
            raise InputError(f"{len(missing)} table file(s) named by {path} are missing, e.g. "
                             f"{missing[0]}")
    else:
        raise InputError(f"input not found: {path}")
    parts = [_table_rows(t, rel, s, columns, image_column, split) for t, rel, s in tables]
    inputs = [{**p.attrs["input"], "root": str(path.resolve())} for p in parts]
    return _finish_embedded(parts, corpus or name, inputs)


def read_dataset_object(ds, *, corpus: str | None = None,
                        columns: Mapping[str, str] | None = None,
                        image_column: str | None = None) -> pd.DataFrame:
    """Manifest of a ``datasets.Dataset`` or ``DatasetDict``, read from the Arrow files it is
    memory-mapped from (``cache_files``); nothing is written. A dataset held only in memory
    (``Dataset.from_dict``), or one with an indices mapping (after ``select``, ``shuffle``,
    ``filter``), is refused with what to do (``save_to_disk`` / ``flatten_indices``)."""
    columns = dict(columns or {})
    columns.pop("path", None)
    if type(ds).__name__ in ("DatasetDict", "IterableDatasetDict"):
        items = [(str(k), ds[k]) for k in ds]
    else:
        items = [(None, ds)]
    parts = []
    for split_name, one in items:
        if type(one).__name__ != "Dataset":
            raise InputError(f"cannot read a {type(one).__name__}: pass a datasets.Dataset or "
                             f"DatasetDict (an IterableDataset has no files to read)")
        files = [c["filename"] for c in (one.cache_files or [])]
        if not files:
            raise InputError("this datasets.Dataset is held in memory and has no Arrow files "
                             "to read; save it with ds.save_to_disk(FOLDER) and audit FOLDER")
        if getattr(one, "_indices", None) is not None:
            raise InputError("this datasets.Dataset has an indices mapping (select, shuffle or "
                             "filter); call ds = ds.flatten_indices() first")
        split = split_name or (str(one.split) if getattr(one, "split", None) else None)
        feats = one.features.to_dict() if hasattr(one.features, "to_dict") else {}
        n_total = 0
        for f in files:
            path = Path(f)
            rel = f"{split}/{path.name}" if split else path.name  # as in its save_to_disk
            part = _table_rows(path, rel, split, columns, image_column, None, features=feats)
            n_total += len(part)
            parts.append(part)
        if n_total != len(one):
            raise InputError(f"the Arrow files of this dataset hold {n_total} rows, the dataset "
                             f"{len(one)}; call ds.flatten_indices() or save_to_disk first")
    if not parts:
        raise InputError("the dataset has no splits")
    inputs = [{**p.attrs["input"], "kind": "dataset"} for p in parts]
    return _finish_embedded(parts, corpus or "dataset", inputs)


def read_imagefolder(folder: str | Path, *, corpus: str | None = None,
                     columns: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Manifest of a Hub ``imagefolder``: the rows of each ``metadata.csv`` /
    ``metadata.jsonl`` (at the root or in a split folder), ``file_name`` relative to the
    metadata's folder, read as a list file (the images are files). Split: a split column, else
    the first folder of the path below ROOT when it is a split name."""
    from splitscope.manifest.rows import _SPLIT_ALIASES, list_rows, read_table

    folder = Path(folder)
    columns = {"path": "file_name", **dict(columns or {})}
    parts = []
    for meta in _metadata_files(folder):
        if meta.suffix == ".jsonl":
            try:
                table = pd.read_json(meta, lines=True, dtype=False)
            except ValueError as exc:
                raise InputError(f"cannot read {meta}: {exc}") from exc
            table.columns = [str(c).strip() for c in table.columns]
            for c in table.columns:
                if c != columns["path"]:
                    table[c] = [pd.NA if v is None else str(v) for v in table[c]]
        else:
            table = read_table(meta, what="metadata file")
        part = list_rows(table, meta, root=folder, corpus=corpus or folder.name,
                         columns=columns, base=meta.parent)
        rel_dir = meta.parent.relative_to(folder).as_posix()
        if part["split_released"].isna().all():
            first = [(p if rel_dir == "." else f"{rel_dir}/{p}").split("/", 1)[0]
                     for p in part["path"].astype(str)]
            part["split_released"] = pd.array(
                [f if f.lower() in _SPLIT_ALIASES else pd.NA for f in first], dtype="string")
            from splitscope.manifest.rows import normalize_split

            part["split"] = pd.array([normalize_split(v) for v in part["split_released"]],
                                     dtype="string")
        if rel_dir != ".":
            part["path"] = pd.array([f"{rel_dir}/{p}" for p in part["path"]], dtype="string")
            part["basename"] = pd.array([p.rsplit("/", 1)[-1] for p in part["path"]],
                                        dtype="string")
        part.attrs["inputs"] = [{**part.attrs["inputs"][0], "kind": "imagefolder",
                                 "folder": str(folder)}]
        parts.append(part)
    if not parts:
        raise InputError(f"no metadata.csv / metadata.jsonl with a file_name column in {folder}")
    manifest = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    manifest["row"] = pd.array(range(len(manifest)), dtype="int64")
    manifest.attrs = {"inputs": [i for p in parts for i in p.attrs["inputs"]], "excluded": []}
    return manifest
