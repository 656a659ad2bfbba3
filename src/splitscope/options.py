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
from typing import Any, ClassVar

from splitscope.errors import InputError

__all__ = ["DEFAULT_MAX_FILE_BYTES", "SECTIONS", "InputOptions", "RunOptions", "field_section",
           "flag_fields", "option", "plain"]

#: files larger than this are listed as too large and never read (2 GiB)
DEFAULT_MAX_FILE_BYTES = 2 << 30

#: The sections of ``splitscope audit --help``, in their order: a flag's ``section`` (its own,
#: else its group's class attribute ``section``, else ``checks``) → the section's title.
SECTIONS = {"inputs": "Inputs", "checks": "What to check", "gates": "Gates",
            "performance": "Performance", "outputs": "Outputs"}


def option(default: Any = None, help: str | None = None, *, flag: str | None = None,
           choices: tuple | None = None, metavar: str | None = None, kind: type | None = None,
           parse: Callable[[Any], Any] | None = None, minimum: int | None = None,
           show_default: bool = True, factory: Callable[[], Any] | None = None,
           section: str | None = None):
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
    section : str, optional
        The section of ``splitscope audit --help`` the flag is listed in (a key of
        :data:`SECTIONS`); default: its group's (:func:`field_section`).
    """
    if section is not None and section not in SECTIONS:
        raise ValueError(f"section {section!r} unknown; use one of {', '.join(SECTIONS)}")
    meta = {"help": help, "flag": flag, "choices": choices, "metavar": metavar, "kind": kind,
            "parse": parse, "minimum": minimum, "show_default": show_default,
            "section": section}
    meta = {k: v for k, v in meta.items() if v is not None}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def flag_fields(group: type) -> list[dataclasses.Field]:
    """The fields of an option group that are command-line flags (those with a help)."""
    return [f for f in dataclasses.fields(group) if f.metadata.get("help")]


def field_section(group: type, f: dataclasses.Field) -> str:
    """The ``--help`` section of a flag field: its own ``section``, else its group's class
    attribute ``section``, else ``checks`` (what a layer's options usually are)."""
    return f.metadata.get("section") or getattr(group, "section", None) or "checks"


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

    section: ClassVar[str] = "inputs"  # of ``splitscope audit --help``

    group_regex: str | None = option(
        None, "Regex whose named groups read the group (and frame) from a file name, e.g. "
              "'person(?P<group>\\d+)_'.")
    label_map: str | Mapping[str, str] | None = option(
        None, "Released → audited labels, in every corpus: 'glioma=tumor,…' or a CSV file.",
        metavar="MAP")
    external_label_map: str | Mapping[str, str] | None = option(
        None, "External corpus's own map, before --label-map.", metavar="MAP")
    control_label_map: str | Mapping[str, str] | None = option(
        None, "Control corpus's own map, before --label-map.", metavar="MAP")
    path_column: str | None = option(None, "List column holding the paths.")
    label_column: str | None = option(None, "List column holding the labels.")
    split_column: str | None = option(None, "List column holding the splits.")
    source_column: str | None = option(None, "List column holding the sources.")
    group_column: str | None = option(None, "List column holding group ids.")
    list_root: str | None = option(
        None, "Folder the list's paths are relative to.", flag="--root", metavar="DIRECTORY")
    constant_split: str | None = option(
        None, "The split of a list that is one split.", flag="--split")
    image_column: str | None = option(
        None, "Image column of a table input (detected).")
    allow_outside_root: bool = option(
        False, "Read files outside the release root (marked outside_root). URLs need "
               "--allow-urls.")
    allow_urls: bool = option(
        False, "Read listed URLs (s3://, https://) via fsspec.")
    follow_links: bool = option(
        False, "Follow links to folders (loops are listed).")

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

    seed: int = option(0, "Seed of every draw.",
                       section="checks")
    resamples: int = option(2000, "Bootstrap and group resamples.", minimum=1,
                            section="checks")
    layers: tuple[str, ...] | None = option(
        None, "Run only these layers, the others 'not assessed' (`splitscope help layers`).",
        metavar="NAMES", kind=str,
        parse=_comma_list, section="checks")
    workers: int | None = option(
        None, "Workers of every stage (default: all cores).", kind=int, minimum=1,
        section="performance")
    engine: str = option(
        "process", "Processes here, or Dask (docs/distributed.md).", flag="--executor",
        choices=("process", "dask"),
        section="performance")
    scheduler: str | None = option(
        None, "A running Dask scheduler (tcp://host:8786).",
        metavar="ADDRESS", section="performance")
    workspace: str | None = option(
        None, "Feature cache, reused (default OUT/workspace).",
        metavar="DIRECTORY", section="performance")
    max_pairs: int = option(60, "Gallery pairs per boundary.",
                            section="outputs")
    progress: bool | None = None  # progress lines on stderr: None (default) and True print them
    croissant: bool = option(
        False, "Also write OUT/croissant.json.", section="outputs")
    card: bool = option(
        False, "Also write OUT/dataset-card.md.", section="outputs")
    reforms: bool = option(
        False, "Also write OUT/reforms.json and .md.", section="outputs")
    force: bool = option(
        False, "Write into an --out folder holding other files.",
        section="outputs")
    allow_unmeasured: bool = option(
        False, "A gate on a metric not measured passes (no exit 5).", section="gates")
    paths_only: bool = option(
        False, "A list without its files: audit what its paths and labels say.",
        section="inputs")

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
