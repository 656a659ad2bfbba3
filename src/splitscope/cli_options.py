"""Command-line options shared by several verbs: how list files are read, what a scan may
read, where the per-file stage runs, and the seed and resamples of every draw."""

from __future__ import annotations

import click

from splitscope.options import InputOptions, RunOptions, SearchOptions

#: The identity and near-duplicate search (METHODS §2); defaults: :class:`SearchOptions`.
SEARCH_OPTIONS = [
    click.option("--tau", default=SearchOptions.tau, show_default=True, type=float,
                 help="NCC threshold τ."),
    click.option("--radius", default=SearchOptions.radius, show_default=True, type=int,
                 help="Hamming radius k of the hash rules."),
    click.option("--dihedral", is_flag=True, default=SearchOptions.dihedral,
                 help="Also match rotated and flipped copies."),
]

#: Seed and resamples of every draw; defaults: :class:`RunOptions`.
RUN_OPTIONS = [
    click.option("--seed", default=RunOptions.seed, show_default=True, type=int,
                 help="Seed of every draw (bootstrap, group resamples, folds, samples)."),
]

#: Options naming the columns of a list file (CSV, TSV, Parquet, XLSX) and where its paths lie.
LIST_FILE_OPTIONS = [
    click.option("--path-column", default=None, help="List column holding the paths."),
    click.option("--label-column", default=None, help="List column holding the labels."),
    click.option("--split-column", default=None, help="List column holding the splits."),
    click.option("--source-column", default=None, help="List column holding the sources."),
    click.option("--group-column", default=None, help="List column holding group ids."),
    click.option("--root", "list_root", type=click.Path(file_okay=False), default=None,
                 help="Folder the listed paths are relative to (default: the list's folder)."),
    click.option("--split", "constant_split", default=None,
                 help="One split for every row of a list that is a single split."),
]


#: The image column of a table input (Parquet/Arrow with embedded images), when detection needs
#: help; the other roles of a table are named with the list options (--label-column, ...).
IMAGE_COLUMN_OPTION = click.option(
    "--image-column", default=None,
    help="Table column holding the images (a Hugging Face Image struct {bytes, path}, or "
         "binary) of a Parquet/Arrow input; detected when there is one.")


#: How each file is decoded for its features (METHODS §2.2; the mode is part of every pixel
#: predicate and of the feature cache's key).
MODE_OPTION = click.option(
    "--mode", type=click.Choice(["exact", "fast"]), default="exact", show_default=True,
    help="Feature extraction: 'exact' decodes every pixel; 'fast' decodes a JPEG whose "
         "shorter side is at least 4 × max(S, 32) at reduced scale (another geometry, cached "
         "apart; those files get no decoded-pixel digest).")


def with_image_column(options: dict, image_column: str | None) -> dict:
    """``options`` with ``image_column`` added when it was given."""
    return {**options, "image_column": image_column} if image_column else options


#: Released labels → audited labels, applied once to the manifest (METHODS §6.4).
LABEL_MAP_OPTION = click.option(
    "--label-map", default=None, metavar="MAP",
    help="Map released labels to audited ones before anything is measured: "
         "'glioma=tumor,meningioma=tumor,pituitary=tumor' or a two-column CSV file "
         "(released label, audited label). Applies to every corpus whose labels it names "
         "(audited, --external, --control). Recorded in every record.")


#: Options deciding what a scan may read (every verb that scans a release takes them).
SAFETY_OPTIONS = [
    click.option("--allow-outside-root", is_flag=True, default=InputOptions.allow_outside_root,
                 help="Read local files whose resolved path (.., an absolute path, a symbolic "
                      "link) lies outside the release root, and follow linked folders there; "
                      "they stay marked outside_root. URLs need --allow-urls."),
    click.option("--allow-urls", is_flag=True, default=InputOptions.allow_urls,
                 help="Read listed URLs (s3://, gs://, https://, …) through fsspec; without "
                      "it they are listed as not read (url)."),
    click.option("--follow-links", is_flag=True, default=InputOptions.follow_links,
                 help="Follow symbolic links to directories in a folder release (loops, and "
                      "links out of the root without --allow-outside-root, are left out and "
                      "listed)."),
    click.option("--max-file-size", type=int, default=None, metavar="BYTES",
                 help="Files larger than this are listed as too_large and never read "
                      "(default 2 GiB)."),
]


EXECUTOR_OPTIONS = [
    click.option("--executor", "engine", type=click.Choice(["process", "dask"]),
                 default="process", show_default=True,
                 help="Where the per-file stage runs: a process pool on this machine, or a "
                      "Dask cluster (the [distributed] extra; --workers N starts a local one, "
                      "--scheduler joins a running one). With dask the audit's NCC search is "
                      "partitioned over the cluster too. Workers must see the files and the "
                      "workspace under the same paths."),
    click.option("--scheduler", default=None, metavar="ADDRESS",
                 help="With --executor dask: address of a running Dask scheduler "
                      "(tcp://host:8786); --workers is then ignored."),
]


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


def safety_options(allow_outside_root=False, follow_links=False, max_file_size=None,
                   allow_urls=False) -> dict:
    """Keyword arguments for :func:`splitscope.features.scanning.scan` from
    :data:`SAFETY_OPTIONS`."""
    out: dict = {"allow_outside_root": bool(allow_outside_root),
                 "follow_links": bool(follow_links), "allow_urls": bool(allow_urls)}
    if max_file_size is not None:
        out["max_file_bytes"] = int(max_file_size)
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
