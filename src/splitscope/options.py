"""Options as data: a field declared once carries its default, its help and its command-line
flag, so that the audit's options object, its ``--help`` and ``audit.json`` cannot drift.

An option group is a frozen dataclass whose fields are declared with :func:`option`; a field
with a ``help`` is also a command-line flag (``--field-name``, or the ``flag`` given), whose
destination is the field's name. The core groups live here — how a release is read
(:class:`InputOptions`) and the run (:class:`RunOptions`: seed 0, 2000 resamples, 60 gallery
pairs) — and each layer package declares its own group next to its rules (the duplicates
layer's ``SearchOptions`` in :mod:`splitscope.relations.options`, …). This module imports no
layer, so the layers and the CLI (:mod:`splitscope.cli_options`) read their defaults here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from splitscope.errors import InputError

__all__ = ["DEFAULT_MAX_FILE_BYTES", "InputOptions", "RunOptions", "flag_fields", "option",
           "plain"]

#: files larger than this are listed as too large and never read (2 GiB)
DEFAULT_MAX_FILE_BYTES = 2 << 30


def option(default: Any = None, help: str | None = None, *, flag: str | None = None,
           choices: tuple | None = None, metavar: str | None = None, kind: type | None = None,
           parse: Callable[[Any], Any] | None = None, minimum: int | None = None,
           show_default: bool = True, factory: Callable[[], Any] | None = None):
    """A dataclass field that is an option: its default, and — when ``help`` is given — the
    command-line flag that sets it.

    Parameters
    ----------
    default : any
        The method's default (use ``factory`` for a mutable one).
    help : str, optional
        The flag's help text; without it the field is an option of the Python API only.
    flag : str, optional
        The flag (default ``--`` and the field's name with dashes).
    choices : tuple, optional
        Allowed values (a ``click.Choice``).
    metavar, minimum, show_default : optional
        How the flag reads in ``--help``; ``minimum`` also bounds an integer.
    kind : type, optional
        The flag's value type when the default does not say (a default of ``None``); ``bool``
        makes an on/off switch.
    parse : callable, optional
        Turns the text given on the command line into the field's value (e.g. a comma list
        into a tuple); applied by :meth:`splitscope.core.options.AuditOptions.from_flags` to
        strings only.
    """
    meta = {"help": help, "flag": flag, "choices": choices, "metavar": metavar, "kind": kind,
            "parse": parse, "minimum": minimum, "show_default": show_default}
    meta = {k: v for k, v in meta.items() if v is not None}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def flag_fields(group: type) -> list[dataclasses.Field]:
    """The fields of an option group that are command-line flags (those with a help)."""
    return [f for f in dataclasses.fields(group) if f.metadata.get("help")]


def plain(value: Any) -> Any:
    """A JSON-ready copy: dataclasses and mappings as dicts, tuples as lists, paths as
    strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "__fspath__"):
        return str(value)
    return value


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in str(text).split(",") if n.strip())


@dataclass(frozen=True)
class InputOptions:
    """How the release is read: groups from file names, the label maps (the common one, and
    the external and control corpora's own), the columns of a list file and where its paths
    lie, the image column of a table, and what a scan may read (paths outside the release
    root, linked folders, URLs)."""

    group_regex: str | None = option(
        None, "Named-group regex over the file name giving the group (and frame), e.g. "
              "'person(?P<group>\\d+)_'.")
    label_map: str | Mapping[str, str] | None = option(
        None, "Map released labels to audited ones before anything is measured: "
              "'glioma=tumor,meningioma=tumor,pituitary=tumor' or a two-column CSV file "
              "(released label, audited label). Applies to every corpus whose labels it names "
              "(audited, --external, --control). Recorded in every record.", metavar="MAP")
    external_label_map: str | Mapping[str, str] | None = option(
        None, "The external corpus's own label map, applied before --label-map (its labels "
              "spelled differently: 'glioma_tumor=glioma,…' or a CSV file).", metavar="MAP")
    control_label_map: str | Mapping[str, str] | None = option(
        None, "The control corpus's own label map, applied before --label-map.", metavar="MAP")
    path_column: str | None = option(None, "List column holding the paths.")
    label_column: str | None = option(None, "List column holding the labels.")
    split_column: str | None = option(None, "List column holding the splits.")
    source_column: str | None = option(None, "List column holding the sources.")
    group_column: str | None = option(None, "List column holding group ids.")
    list_root: str | None = option(
        None, "Folder the listed paths are relative to (default: the list's folder).",
        flag="--root", metavar="DIRECTORY")
    constant_split: str | None = option(
        None, "One split for every row of a list that is a single split.", flag="--split")
    image_column: str | None = option(
        None, "Table column holding the images (a Hugging Face Image struct {bytes, path}, or "
              "binary) of a Parquet/Arrow input; detected when there is one.")
    allow_outside_root: bool = option(
        False, "Read local files whose resolved path (.., an absolute path, a symbolic link) "
               "lies outside the release root, and follow linked folders there; they stay "
               "marked outside_root. URLs need --allow-urls.")
    allow_urls: bool = option(
        False, "Read listed URLs (s3://, gs://, https://, …) through fsspec; without it they "
               "are listed as not read (url).")
    follow_links: bool = option(
        False, "Follow symbolic links to directories in a folder release (loops, and links "
               "out of the root without --allow-outside-root, are left out and listed).")

    def list_options(self) -> dict[str, Any]:
        """Keywords of :func:`splitscope.manifest.read_list` (and of the other readers) for
        the audited release: the columns by role, the root, the single split, the image
        column (only those given)."""
        columns = {role: name for role, name in (
            ("path", self.path_column), ("label", self.label_column),
            ("split", self.split_column), ("source", self.source_column),
            ("group", self.group_column)) if name}
        out: dict[str, Any] = {}
        if columns:
            out["columns"] = columns
        if self.list_root:
            out["root"] = str(self.list_root)
        if self.constant_split:
            out["split"] = self.constant_split
        if self.image_column:
            out["image_column"] = self.image_column
        return out


@dataclass(frozen=True)
class RunOptions:
    """The run: the seed of every draw, bootstrap and group resamples (METHODS §5.3), the
    layers asked for (``None``: all), workers and where the per-file stage runs, the feature
    cache, the pairs the gallery shows, progress lines, which records of the audit are written
    beside it (Croissant, dataset card, REFORMS checklist), whether an output folder
    holding other files may be written into, and whether a ``--fail-on`` metric that was not
    measured may pass (by default it fails the run, exit 5)."""

    seed: int = option(0, "Seed of every draw (bootstrap, group resamples, folds, samples).")
    resamples: int = option(2000, "Bootstrap and group resamples of every layer.", minimum=1)
    layers: tuple[str, ...] | None = option(
        None, "Run only these layers (comma-separated names of the registered layers); the "
              "others are recorded 'not assessed'.", metavar="NAMES", kind=str,
        parse=_comma_list)
    workers: int | None = option(
        None, "Workers of every stage: scan processes, search threads, model-fit processes "
              "and BLAS threads (default: all cores).", kind=int, minimum=1)
    engine: str = option(
        "process", "Where the per-file stage runs: a process pool on this machine, or a Dask "
                   "cluster (the [distributed] extra; --workers N starts a local one, "
                   "--scheduler joins a running one). With dask the audit's NCC search is "
                   "partitioned over the cluster too. Workers must see the files and the "
                   "workspace under the same paths.", flag="--executor",
        choices=("process", "dask"))
    scheduler: str | None = option(
        None, "With --executor dask: address of a running Dask scheduler (tcp://host:8786); "
              "--workers is then ignored.", metavar="ADDRESS")
    workspace: str | None = option(
        None, "Feature cache (default OUT/workspace); reused across runs.",
        metavar="DIRECTORY")
    max_pairs: int = option(60, "Flagged pairs per boundary shown in the report's gallery.")
    progress: bool | None = None
    croissant: bool = option(
        False, "Also write OUT/croissant.json, a Croissant JSON-LD record (with RAI fields) of "
               "the audited release; `splitscope croissant OUT` adds one later.")
    card: bool = option(
        False, "Also write OUT/dataset-card.md, a Hugging Face dataset-card section (front "
               "matter, contamination figures, deduplicated splits, reproduce command); "
               "`splitscope card OUT` adds one later.")
    reforms: bool = option(
        False, "Also write OUT/reforms.json and OUT/reforms.md: each item of the REFORMS "
               "checklist with what the audit's records say of it; `splitscope reforms OUT` "
               "adds them later.")
    force: bool = option(
        False, "Write into an --out folder holding files splitscope did not write there (they "
               "are kept; one where the audit writes is still refused).")
    allow_unmeasured: bool = option(
        False, "Let a --fail-on condition whose metric was not measured (its layer did not run "
               "or was not applicable) pass: it is still reported 'not measured', but the run "
               "does not fail with exit 5.")
    paths_only: bool = option(
        False, "Audit what the rows' paths, labels, sources and groups say when none of their "
               "files is at hand (a published list without its images): the layers that read "
               "files are then not assessed. Without it, an audit that can read no file stops "
               "with exit 2.")

    def __post_init__(self) -> None:
        if int(self.resamples) < 1:
            raise InputError(f"resamples must be at least 1; got {self.resamples}")
        if self.workers is not None and int(self.workers) < 1:
            raise InputError(f"workers must be at least 1; got {self.workers}")
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "resamples", int(self.resamples))
        object.__setattr__(self, "max_pairs", int(self.max_pairs))
        if self.layers is not None:
            layers = _comma_list(self.layers) if isinstance(self.layers, str) \
                else tuple(self.layers)
            object.__setattr__(self, "layers", layers)
        if self.workspace is not None:
            object.__setattr__(self, "workspace", str(self.workspace))
