"""Command-line options shared by several verbs, generated from the option fields that declare
them (:func:`splitscope.options.option`): how list files are read, where the per-file stage
runs, and the seed and resamples of every draw. The flags of what a scan reads and decodes are
:mod:`splitscope.features.flags`. :class:`SectionedCommand` is a verb whose ``--help`` lists
its options by section (``splitscope audit --help``)."""

from __future__ import annotations

import dataclasses

import click

from splitscope.options import (
    DEFAULT_MAX_FILE_BYTES,
    SECTIONS,
    InputOptions,
    RunOptions,
    flag_fields,
)


class SectionOption(click.Option):
    """A ``click`` option that names the section of a :class:`SectionedCommand`'s ``--help``
    it is listed in (a key of :data:`splitscope.options.SECTIONS`)."""

    def __init__(self, *args, section: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.section = section

    def get_help_extra(self, ctx: click.Context):
        """The default, without a range annotation (a value out of range is refused with
        the bound)."""
        extra = super().get_help_extra(ctx)
        extra.pop("range", None)
        return extra


class SectionedCommand(click.Command):
    """A command whose ``--help`` lists its options by section, in the order of
    :data:`splitscope.options.SECTIONS` (click has no option groups of its own); an option
    that names no section (``--help``) is listed last, under "Other", and every section's
    help texts start in one column."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str | None, list[tuple[str, str]]] = {key: [] for key in SECTIONS}
        sections[None] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if record is not None:
                sections.get(getattr(param, "section", None), sections[None]).append(record)
        width = min(26, max((len(term) for rows in sections.values() for term, _ in rows),
                            default=0))
        titles = {**SECTIONS, None: "Other"}
        for key, rows in sections.items():
            if rows:
                with formatter.section(titles[key]):
                    formatter.write_dl([(term.ljust(width), text) for term, text in rows],
                                       col_max=width)


def click_option(f: dataclasses.Field, section: str | None = None):
    """The ``click`` option of an option field (:func:`splitscope.options.option`): its flag,
    the field's name as destination, its default, help, type and bounds, and the ``--help``
    section it is listed in (``section``)."""
    meta = f.metadata
    flag = meta.get("flag") or "--" + f.name.replace("_", "-")
    default = f.default if f.default is not dataclasses.MISSING else None
    kind = meta.get("kind") or (type(default) if default is not None else str)
    extra: dict = {}
    if "choices" in meta:
        extra["type"] = click.Choice(list(meta["choices"]))
    elif kind is bool:
        extra["is_flag"] = True
    elif "minimum" in meta and kind is int:
        extra["type"] = click.IntRange(min=meta["minimum"])
    else:
        extra["type"] = kind
    if "metavar" in meta:
        extra["metavar"] = meta["metavar"]
    elif kind is int and "choices" not in meta:
        extra["metavar"] = "N"
    show = meta.get("show_default", True) and default is not None and kind is not bool
    return click.option(flag, f.name, default=default, show_default=show, help=meta["help"],
                        cls=SectionOption, section=section, **extra)


def group_flags(group: type, names: tuple[str, ...] | None = None) -> list:
    """The ``click`` options of an option group's flag fields (all, or those named, in that
    order)."""
    fields = {f.name: f for f in flag_fields(group)}
    return [click_option(fields[n]) for n in (names or tuple(fields))]


#: Seed of every draw; default: :class:`RunOptions`.
RUN_OPTIONS = group_flags(RunOptions, ("seed",))

#: Options naming the columns of a list file (CSV, TSV, Parquet, XLSX) and where its paths lie.
LIST_FILE_OPTIONS = group_flags(InputOptions, (
    "path_column", "label_column", "split_column", "source_column", "group_column",
    "list_root", "constant_split"))

#: The image column of a table input (Parquet/Arrow with embedded images), when detection needs
#: help; the other roles of a table are named with the list options (--label-column, ...).
IMAGE_COLUMN_OPTION = group_flags(InputOptions, ("image_column",))[0]

def with_image_column(options: dict, image_column: str | None) -> dict:
    """``options`` with ``image_column`` added when it was given."""
    return {**options, "image_column": image_column} if image_column else options


#: Released labels → audited labels, applied once to the manifest (METHODS §6.4).
LABEL_MAP_OPTION = group_flags(InputOptions, ("label_map",))[0]

#: Where the per-file stage runs (``--executor``, ``--scheduler``).
EXECUTOR_OPTIONS = group_flags(RunOptions, ("engine", "scheduler"))


def resamples_option(default: int = RunOptions.resamples, dest: str = "n_boot",
                     help: str = "Bootstrap resamples (0: none)."):
    """``--resamples``, the one name of every verb's bootstrap / group resamples."""
    return click.option("--resamples", dest, type=int, default=default, show_default=True,
                        help=help)


def fail_on_option(metrics):
    """``--fail-on METRIC OP VALUE``, the one gate of every verb that gates (``audit`` lists
    its own metrics); ``metrics`` are those the verb measures
    (:class:`~splitscope.records.metrics.Metric` by name)."""
    names = ", ".join(metrics)
    return click.option(
        "--fail-on", "fail_on", multiple=True, metavar="CONDITION",
        help="Exit with code 1 when METRIC OP VALUE holds (repeatable), e.g. "
             f"'{next(iter(metrics))}>0'; ops > >= < <= == !=, a value may end in %; the value "
             f"is the largest over the boundaries. Metrics: {names}.")


def safety_options(allow_outside_root=False, follow_links=False, max_file_bytes=None,
                   allow_urls=False) -> dict:
    """Keyword arguments for :func:`splitscope.features.scanning.scan` from
    :data:`SAFETY_OPTIONS` (the read cap only when it is not the default)."""
    out: dict = {"allow_outside_root": bool(allow_outside_root),
                 "follow_links": bool(follow_links), "allow_urls": bool(allow_urls)}
    if max_file_bytes is not None and int(max_file_bytes) != DEFAULT_MAX_FILE_BYTES:
        out["max_file_bytes"] = int(max_file_bytes)
    return out


def with_options(options):
    """Decorator applying a list of click options in their listed order."""
    def apply(f):
        for option in reversed(options):
            f = option(f)
        return f
    return apply


def list_options(path_column=None, label_column=None, split_column=None, source_column=None,
                 group_column=None, list_root=None, constant_split=None) -> dict:
    """Keyword arguments for :func:`splitscope.manifest.read_list` from
    :data:`LIST_FILE_OPTIONS` (only the ones given)."""
    columns = {role: name for role, name in (
        ("path", path_column), ("label", label_column), ("split", split_column),
        ("source", source_column), ("group", group_column)) if name}
    out: dict = {}
    if columns:
        out["columns"] = columns
    if list_root:
        out["root"] = list_root
    if constant_split:
        out["split"] = constant_split
    return out
