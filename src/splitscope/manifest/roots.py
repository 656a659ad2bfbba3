"""Release roots: the folders a release's bytes live in, which splitscope never writes into
(METHODS §7), and the one rule for where outputs may go.

The rule, for every output location (``--out``, ``--workspace``, the report and lists under
``--out``, a verb's output file), whatever the release is (folder, list, table): the location,
resolved, is refused when it is a release root, lies inside one, or holds one (a folder above
the data), or when its path is not valid UTF-8. It is checked before anything is created
(:func:`refuse_inside_release`); the CLI checks every verb's outputs against its inputs
(:func:`refuse_output_locations`) before the verb runs, and :func:`splitscope.scan` checks its
workspace against the manifest it built.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from splitscope.errors import InputError

__all__ = ["manifest_roots", "refuse_inside_release", "refuse_output_locations",
           "release_roots"]


def release_roots(inputs: Iterable[str | Path | pd.DataFrame], **list_options) -> list[Path]:
    """The folders of a release, resolved: each folder input itself; for a list, every folder
    that holds a listed file inside the list's root (a list's root may be a shared working
    folder, so it is not claimed whole); a table or an array archive given as a file is a
    root of its own (nothing is written in its place; in-memory inputs have none): an archive
    without being read, as its input form says (``input_is_root``,
    :mod:`splitscope.manifest.forms`); a Hub id's roots are the Hugging Face caches
    (:func:`splitscope.manifest.hub.hub_roots`, the dataset not opened). A folder of a list
    counts only when one of its listed files exists. Reads list files, never walks a folder.

    ``list_options`` are those of :func:`splitscope.manifest.read_list`.
    """
    from splitscope.manifest.build import read_input
    from splitscope.manifest.forms import input_form
    from splitscope.manifest.hub import hub_roots, is_hub_id
    from splitscope.manifest.sources import is_url

    roots: set[str] = set()
    for item in inputs:
        if isinstance(item, pd.DataFrame):
            manifest = item
        elif not isinstance(item, (str, os.PathLike)):  # arrays, a datasets object
            continue
        elif is_hub_id(item):
            roots |= {str(r) for r in hub_roots(item)}
            continue
        elif Path(item).is_dir():
            roots.add(os.path.realpath(item))
            continue
        elif Path(item).is_file():
            if input_form(item, list_options).input_is_root:  # a one-file release
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
        # a URL's folder is no local folder to refuse; a folder none of whose listed files
        # exists (a labels-only list) holds nothing of the release to overwrite
        present: set[str] = set()
        for f in files.dropna().unique():
            folder = os.path.dirname(f)
            if folder not in present and not is_url(f) and os.path.lexists(f):
                present.add(folder)
        roots |= {os.path.realpath(f) for f in present}
    return sorted(Path(r) for r in roots)


def manifest_roots(manifest: pd.DataFrame, inputs: Iterable = (),
                   keep: str | Path | None = None) -> list[Path]:
    """The release roots of a manifest already built from ``inputs``: each folder input, the
    folder of each listed file, each table holding embedded images, the caches of a Hub id;
    files under ``keep`` (the workspace's own array store) are not the release's."""
    from splitscope.manifest.hub import is_hub_id

    frame = manifest
    if keep is not None and "content" in frame.columns:
        own = os.path.realpath(keep) + os.sep
        kept = frame["content"].astype("string").eq("array").fillna(False) & \
            frame["file"].astype("string").str.startswith(own).fillna(False)
        frame = frame[~kept.to_numpy(dtype=bool)]
    folders = [i for i in inputs if is_hub_id(i) or
               (isinstance(i, (str, os.PathLike)) and Path(i).is_dir())]
    return release_roots(folders) + release_roots([frame])


def refuse_inside_release(path: str | Path, roots: Iterable[str | Path],
                          what: str = "--out") -> None:
    """Raise :class:`InputError` when ``path`` (resolved, whether or not it exists yet) is a
    release root, lies inside one or holds one, or is not valid UTF-8 (the rule of the module
    docstring). Call it before anything is created, so a refused run leaves nothing behind."""
    from splitscope.manifest.rows import refuse_undecodable

    refuse_undecodable(path, what)
    target = os.path.realpath(path)
    for root in roots:
        root = os.path.realpath(root)
        if target == root or target.startswith(root.rstrip(os.sep) + os.sep):
            raise InputError(
                f"{what} {path} lies inside the release folder {root}; splitscope never writes "
                f"into a dataset: pass a folder outside it"
            )
        if root.startswith(target.rstrip(os.sep) + os.sep):
            raise InputError(
                f"{what} {path} holds the release {root}; splitscope never writes "
                f"into a dataset: pass a folder outside it"
            )


_OUTPUTS = (("out_dir", "--out"), ("workspace", "--workspace"), ("out_file", "--out"))
_RELEASES = ("inputs", "control", "external", "control_root", "upstream")
_LIST_COLUMNS = {"path_column": "path", "label_column": "label", "split_column": "split",
                 "source_column": "source", "group_column": "group"}


def refuse_output_locations(params: dict) -> None:
    """Apply the rule to a CLI verb's parsed parameters before it runs: each output it was
    given (``out_dir``, ``workspace``, ``out_file``) against the releases it reads
    (``inputs``, ``control``, ``external``, ``control_root``, ``upstream``; list files with
    ``--root`` and the column options), or, for a verb that reads only a workspace, against
    the manifest stored there."""
    outputs = [(params[name], flag) for name, flag in _OUTPUTS if params.get(name)]
    if not outputs:
        return
    releases: list = []
    for name in _RELEASES:
        value = params.get(name)
        if isinstance(value, (tuple, list)):
            releases += [v for v in value if isinstance(v, (str, os.PathLike))]
        elif isinstance(value, (str, os.PathLike)):
            releases.append(value)
    options: dict = {}
    if params.get("list_root"):
        options["root"] = params["list_root"]
    columns = {role: params[name] for name, role in _LIST_COLUMNS.items() if params.get(name)}
    if columns:
        options["columns"] = columns
    if params.get("image_column"):
        options["image_column"] = params["image_column"]
    roots = _roots_quietly(releases, options)
    if not releases and params.get("workspace"):
        stored = Path(params["workspace"]) / "manifest.parquet"
        if stored.is_file():
            try:
                roots = release_roots([pd.read_parquet(stored)])
            except Exception:  # noqa: BLE001 - a damaged workspace is the verb's to report
                roots = []
    for path, flag in outputs:
        if flag == "--workspace" and not releases:
            continue  # a workspace read, not written, by this verb
        refuse_inside_release(path, roots, flag)


def _roots_quietly(releases: list, options: dict) -> list[Path]:
    """:func:`release_roots`, leaving an unreadable input to the verb, which reports it in
    its own words."""
    roots: list[Path] = []
    for item in releases:
        try:
            roots += release_roots([item], **options)
        except InputError:
            if Path(item).is_dir():
                roots.append(Path(os.path.realpath(item)))
    return roots
