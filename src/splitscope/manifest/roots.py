"""Release roots: the folders a release's bytes live in, which splitscope never writes into
(METHODS §7)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from splitscope.errors import InputError

__all__ = ["refuse_inside_release", "release_roots"]


def release_roots(inputs: Iterable[str | Path | pd.DataFrame], **list_options) -> list[Path]:
    """The folders of a release, resolved: each folder input itself; for a list, every folder
    that holds a listed file inside the list's root (a list's root may be a shared working
    folder, so it is not claimed whole); a table or an array archive given as a file is a
    root of its own (nothing is written in its place; in-memory inputs have none). Reads list files, never walks a folder.

    ``list_options`` are those of :func:`splitscope.manifest.read_list`.
    """
    from splitscope.manifest.build import read_input
    from splitscope.manifest.sources import is_url

    roots: set[str] = set()
    for item in inputs:
        if isinstance(item, pd.DataFrame):
            manifest = item
        elif not isinstance(item, (str, os.PathLike)):  # arrays, a datasets object
            continue
        elif Path(item).is_dir():
            roots.add(os.path.realpath(item))
            continue
        elif Path(item).is_file():
            if Path(item).suffix.lower() in (".npz", ".arrow"):  # a one-file release
                roots.add(os.path.realpath(item))
                continue
            manifest = read_input(item, **list_options)
        else:
            continue
        if "table" in manifest.columns:  # a table file is a release of its own
            roots |= {os.path.realpath(t) for t in manifest["table"].dropna().unique()}
            manifest = manifest[manifest["table"].isna()]
        files = manifest["file"]
        if "path_issue" in manifest.columns:
            files = files[manifest["path_issue"].isna()]
        roots |= {os.path.realpath(os.path.dirname(f)) for f in files.dropna().unique()
                  if not is_url(f)}  # a URL's folder is no local folder to refuse
    return sorted(Path(r) for r in roots)


def refuse_inside_release(path: str | Path, roots: Iterable[str | Path],
                          what: str = "--out") -> None:
    """Raise :class:`InputError` when ``path`` (resolved, whether or not it exists yet) is a
    release root or lies inside one. Call it before anything is created, so a refused run
    leaves nothing behind."""
    target = os.path.realpath(path)
    for root in roots:
        root = os.path.realpath(root)
        if target == root or target.startswith(root.rstrip(os.sep) + os.sep):
            raise InputError(
                f"{what} {path} lies inside the release folder {root}; splitscope never writes "
                f"into a dataset: pass a folder outside it"
            )
