"""One manifest from one or more inputs: each read by its form (:mod:`splitscope.manifest.forms`
for paths; DataFrames, arrays and ``datasets`` objects by their type), then concatenated."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from splitscope.errors import InputError
from splitscope.manifest.arrays import Arrays, read_arrays
from splitscope.manifest.embedded import read_dataset_object
from splitscope.manifest.forms import input_form
from splitscope.manifest.hub import is_hub_id, read_hub
from splitscope.manifest.rows import (
    CONTENT_FILE,
    EMBEDDED_COLUMNS,
    MANIFEST_COLUMNS,
    refuse_undecodable,
    with_manifest_columns,
)

__all__ = ["build_manifest", "input_list", "read_input"]


def _is_dataset_object(item: object) -> bool:
    return type(item).__module__.split(".")[0] == "datasets"


def input_list(inputs) -> list:
    """``inputs`` as a list of inputs: one input (a path, a DataFrame, arrays, a ``datasets``
    object, which iterate over something else) becomes a list of one."""
    if isinstance(inputs, (str, os.PathLike, pd.DataFrame, Arrays)) or \
            _is_dataset_object(inputs) or not isinstance(inputs, Iterable):
        return [inputs]
    return list(inputs)


def read_input(item, *, follow_links: bool = False, allow_outside_root: bool = False,
               image_column: str | None = None, array_store: str | Path | None = None,
               **list_options) -> pd.DataFrame:
    """The manifest of one input: a manifest (DataFrame), in-memory arrays
    (:class:`splitscope.manifest.arrays.Arrays`), a ``datasets`` object, a Hub id
    (``hf:NAME[:CONFIG]``, read from the local ``datasets`` cache,
    :mod:`splitscope.manifest.hub`), or a path, read by the first input form that detects it (:mod:`splitscope.manifest.forms`: an ``.npz``, a table
    with an image column, a ``save_to_disk`` folder, a folder of such tables, an imagefolder
    with metadata, a folder of files, a list file, or a registered form)."""
    if isinstance(item, pd.DataFrame):
        return with_manifest_columns(item)
    if isinstance(item, Arrays):
        return read_arrays(item, array_store)
    if _is_dataset_object(item):
        return read_dataset_object(item, corpus=list_options.get("corpus"),
                                   columns=list_options.get("columns"),
                                   image_column=image_column)
    if is_hub_id(item):
        return read_hub(item, image_column=image_column, **list_options)
    if not isinstance(item, (str, os.PathLike)):
        raise InputError(f"cannot read an input of type {type(item).__name__}: give a folder, "
                         f"a list or table file, an .npz, a DataFrame manifest, "
                         f"splitscope.Arrays or a datasets.Dataset")
    path = Path(item)
    refuse_undecodable(path, "input")
    if not path.exists():
        raise InputError(f"input not found: {item}")
    options = {"follow_links": follow_links, "allow_outside_root": allow_outside_root,
               "image_column": image_column, **list_options}
    if not path.is_file():
        return input_form(path, options).read(path, **options)
    # a file input (a list, a table) is read once per run although the output checks, the
    # audit's own check and the scan each need it: kept while the file is unchanged
    st = path.stat()
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
           repr(sorted(options.items())))
    if _LAST_READ.get("key") != key:
        _LAST_READ.clear()
        _LAST_READ.update(key=key, frame=input_form(path, options).read(path, **options))
    frame = _LAST_READ["frame"]
    out = frame.copy(deep=True)
    out.attrs = copy.deepcopy(frame.attrs)
    return out


#: The last file input read (:func:`read_input`) and its key (path, size, times, inode,
#: options); dropped once :func:`build_manifest` has built its manifest.
_LAST_READ: dict = {}


def build_manifest(
    inputs,
    *,
    follow_links: bool = False,
    allow_outside_root: bool = False,
    image_column: str | None = None,
    array_store: str | Path | None = None,
    **list_options,
) -> pd.DataFrame:
    """One manifest from one or more releases (see :func:`read_input` for what an input is).

    Several inputs are concatenated in the order given (each keeps its own ``corpus`` name
    unless ``corpus=`` is passed for a single input) and ``row`` is renumbered 0..n-1.
    ``list_options`` go to :func:`read_list` for list inputs; ``corpus`` applies to folders too;
    ``follow_links`` and ``allow_outside_root`` go to :func:`read_folder`; ``image_column``
    names a table's image column; ``array_store`` is where in-memory arrays are kept (the
    scan's workspace).
    When an input is a table or an array, the manifest has :data:`EMBEDDED_COLUMNS` too.
    """
    inputs = input_list(inputs)
    parts: list[pd.DataFrame] = [
        read_input(item, follow_links=follow_links, allow_outside_root=allow_outside_root,
                   image_column=image_column, array_store=array_store, **list_options)
        for item in inputs]
    _LAST_READ.clear()  # the manifest is built: nothing reads the input again
    if not parts:
        raise InputError("no inputs given")
    columns = MANIFEST_COLUMNS
    if any("content" in p.columns for p in parts):
        columns = MANIFEST_COLUMNS + EMBEDDED_COLUMNS
        for i, p in enumerate(parts):
            if "content" not in p.columns:
                p = p.copy()
                for col in ("table", "stored_path"):
                    p[col] = pd.array([pd.NA] * len(p), dtype="string")
                p["table_row"] = pd.array([pd.NA] * len(p), dtype="Int64")
                p["content"] = pd.array([CONTENT_FILE] * len(p), dtype="string")
                parts[i] = p
    manifest = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].copy()
    manifest["row"] = pd.array(range(len(manifest)), dtype="int64")
    manifest.attrs = {
        "inputs": [i for p in parts for i in p.attrs.get("inputs", [])],
        "excluded": [e for p in parts for e in p.attrs.get("excluded", [])],
    }
    return manifest[columns]
