"""Input forms: the kinds of release an input path can be, as one ordered table.

:func:`splitscope.manifest.build.read_input` reads a path with the first form of the table
that detects it. The built-in forms, in their order: ``npz`` (a MedMNIST archive), ``arrow``
(an Arrow table of images), ``table`` (a Parquet file with an image column, a folder of
Parquet/Arrow tables, a ``save_to_disk`` folder), ``imagefolder`` (image files plus
``metadata.csv``/``metadata.jsonl``), ``folder`` (a folder of files) and ``list``, which takes
every other path (a CSV, TSV, Parquet or XLSX list file; any other suffix is refused there).
A form added with :func:`register_input_form` is tried before the built-in ones unless placed
otherwise, so it may claim a path that a built-in form would read.

In-memory inputs (a DataFrame manifest, :class:`~splitscope.manifest.arrays.Arrays`, a
``datasets`` object) and Hub ids (``hf:NAME[:CONFIG]``, :mod:`splitscope.manifest.hub`) are
no path and have no entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from splitscope.errors import InputError
from splitscope.manifest import arrays, embedded, files
from splitscope.manifest.containers import ARRAY_SUFFIXES, TABLE_SUFFIXES

__all__ = ["InputForm", "input_form", "input_forms", "register_input_form",
           "unregister_input_form"]


@dataclass(frozen=True)
class InputForm:
    """One kind of release given as a path: how it is recognised, how it is read, and where
    its release roots are (the places no output may go, :mod:`splitscope.manifest.roots`).

    Parameters
    ----------
    name : str
        The form's name, unique in the table.
    detects : callable
        ``detects(path, options) -> bool``: whether this form reads ``path`` (a ``Path`` that
        exists). Forms are asked in table order, so it should look no further
        than a suffix, a name or a header.
    read : callable
        ``read(path, **options) -> DataFrame``: the manifest of ``path``, its rows built with
        :mod:`splitscope.manifest.rows`; an :class:`~splitscope.errors.InputError` says why it
        cannot be read. ``options`` are those :func:`~splitscope.manifest.build_manifest` was
        given for path inputs: ``follow_links``, ``allow_outside_root``, ``image_column``, and
        the list options passed (``corpus``, ``columns``, ``split``, ``root``, ``sheet``);
        ``read`` takes those it uses and accepts the rest.
    input_is_root : bool
        A file of this form is a release of its own and a release root, found without reading
        it (an archive). Otherwise the roots are found in the manifest it reads: each table
        it names (column ``table``), each folder that holds a listed file. A folder input is
        always a root of its own.
    """

    name: str
    detects: Callable[[Path, Mapping[str, Any]], bool]
    read: Callable[..., pd.DataFrame]
    input_is_root: bool = False


# ----------------------------------------------------------------------------- built-in forms


def _is_npz(path: Path, options: Mapping[str, Any]) -> bool:
    return path.is_file() and path.suffix.lower() in ARRAY_SUFFIXES


def _read_npz(path: Path, *, corpus: str | None = None, **_) -> pd.DataFrame:
    return arrays.read_npz(path, corpus=corpus)


def _is_arrow(path: Path, options: Mapping[str, Any]) -> bool:
    return path.is_file() and path.suffix.lower() == ".arrow"


def _is_table(path: Path, options: Mapping[str, Any]) -> bool:
    if options.get("image_column") is not None and path.is_file() and \
            path.suffix.lower() in TABLE_SUFFIXES:
        return True  # named: checked when read, with what the table holds
    return embedded.table_layout(path) is not None


def _read_table(path: Path, *, corpus: str | None = None, columns: Mapping | None = None,
                split: str | None = None, image_column: str | None = None,
                **_) -> pd.DataFrame:
    return embedded.read_embedded(path, corpus=corpus, columns=columns,
                                  image_column=image_column, split=split)


def _is_imagefolder(path: Path, options: Mapping[str, Any]) -> bool:
    return embedded.is_imagefolder(path)


def _read_imagefolder(path: Path, *, corpus: str | None = None,
                      columns: Mapping | None = None, **_) -> pd.DataFrame:
    return embedded.read_imagefolder(path, corpus=corpus, columns=columns)


def _is_folder(path: Path, options: Mapping[str, Any]) -> bool:
    return path.is_dir()


def _read_folder(path: Path, *, corpus: str | None = None, follow_links: bool = False,
                 allow_outside_root: bool = False, **_) -> pd.DataFrame:
    return files.read_folder(path, corpus=corpus, follow_links=follow_links,
                             allow_outside_root=allow_outside_root)


def _is_list(path: Path, options: Mapping[str, Any]) -> bool:
    return True  # the last form: a path no other form reads is a list file or refused as one


def _read_list(path: Path, *, image_column: str | None = None, follow_links: bool = False,
               allow_outside_root: bool = False, **list_options) -> pd.DataFrame:
    if image_column is not None:
        raise InputError(f"--image-column {image_column!r} given, but {path} is not a Parquet "
                         f"or Arrow table")
    return files.read_list(path, **list_options)


_BUILT_IN = (
    InputForm("npz", _is_npz, _read_npz, input_is_root=True),
    # an Arrow file is a table whatever it holds (never a list); a Parquet file is one when it
    # has an image column (or one is named), and is read to find its root
    InputForm("arrow", _is_arrow, _read_table, input_is_root=True),
    InputForm("table", _is_table, _read_table),
    InputForm("imagefolder", _is_imagefolder, _read_imagefolder),
    InputForm("folder", _is_folder, _read_folder),
    InputForm("list", _is_list, _read_list),
)

_FORMS: list[InputForm] = list(_BUILT_IN)


# ----------------------------------------------------------------------------- the table


def input_forms() -> tuple[InputForm, ...]:
    """The registered input forms, in the order they are tried."""
    return tuple(_FORMS)


def input_form(path: str | Path, options: Mapping[str, Any] | None = None) -> InputForm:
    """The first registered form that detects ``path`` (an existing path).

    Parameters
    ----------
    path : path-like
        The input.
    options : mapping, optional
        The options it is read with (see :class:`InputForm`).

    Returns
    -------
    InputForm

    Raises
    ------
    InputError
        When no registered form detects it.
    """
    path, options = Path(path), options or {}
    for form in _FORMS:
        if form.detects(path, options):
            return form
    raise InputError(f"no input form reads {path}; registered: "
                     f"{', '.join(f.name for f in _FORMS) or 'none'}")


def register_input_form(form: InputForm, *, before: str | None = None) -> InputForm:
    """Add an input form to the table; its name must be new.

    Parameters
    ----------
    form : InputForm
        The form.
    before : str, optional
        The name of the form it is tried before; by default it is tried before every built-in
        form (and after the forms registered earlier).

    Returns
    -------
    InputForm
        ``form``.

    Raises
    ------
    ValueError
        When a form of that name is registered, or ``before`` names none.
    """
    if not isinstance(form, InputForm):
        raise TypeError(f"{form!r} is not an InputForm")
    if any(f.name == form.name for f in _FORMS):
        raise ValueError(f"an input form named {form.name!r} is already registered; "
                         f"unregister_input_form({form.name!r}) first")
    if before is None:
        at = next((i for i, f in enumerate(_FORMS) if any(f is b for b in _BUILT_IN)),
                  len(_FORMS))
    else:
        at = next((i for i, f in enumerate(_FORMS) if f.name == before), None)
        if at is None:
            raise ValueError(f"no input form named {before!r}; registered: "
                             f"{', '.join(f.name for f in _FORMS)}")
    _FORMS.insert(at, form)
    return form


def unregister_input_form(name: str) -> InputForm | None:
    """Remove the input form named ``name`` and return it (``None`` when there is none)."""
    for i, form in enumerate(_FORMS):
        if form.name == name:
            return _FORMS.pop(i)
    return None
