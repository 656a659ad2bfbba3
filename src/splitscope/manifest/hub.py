"""Hugging Face Hub ids: ``hf:NAME`` or ``hf:NAME:CONFIG``, a dataset read from the local
``datasets`` cache, never downloaded.

An id is no path, so it is recognised before the input-form table
(:func:`splitscope.manifest.build.read_input`). The dataset is opened the way
``datasets.load_dataset`` opens a cached dataset offline (its ``Cache`` builder, with
``HF_HUB_OFFLINE`` set for the call), from ``datasets.config.HF_DATASETS_CACHE``
(``HF_DATASETS_CACHE`` / ``HF_HOME``), and its splits are read from their Arrow cache files as
a ``datasets`` object is (:func:`splitscope.manifest.embedded.read_dataset_object`). A dataset
absent from the cache is an :class:`~splitscope.errors.InputError` naming how to cache it.

The input's fingerprint is the SHA-256 over the Arrow cache files read, one
``name<TAB>sha256`` line per file in release order (:func:`fingerprint_hub`). Its release roots,
where no output may go, are the ``datasets`` cache and the Hub download cache
(:func:`hub_roots`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from splitscope.errors import InputError

__all__ = ["HUB_PREFIX", "fingerprint_hub", "hub_cache_dir", "hub_corpus", "hub_roots",
           "is_hub_id", "open_hub_dataset", "parse_hub_id", "read_hub",
           "require_cached"]

#: the prefix of a Hub id input
HUB_PREFIX = "hf:"


def is_hub_id(item: object) -> bool:
    """Whether ``item`` is a Hub id (a ``str`` starting ``hf:``); a ``Path`` never is, so
    ``./hf:x`` or ``Path("hf:x")`` names a file."""
    return isinstance(item, str) and item.startswith(HUB_PREFIX)


def parse_hub_id(item: str) -> tuple[str, str | None]:
    """``(NAME, CONFIG)`` of ``hf:NAME[:CONFIG]``; ``NAME`` is ``dataset`` or
    ``namespace/dataset``.

    Raises
    ------
    InputError
        When the id names no dataset.
    """
    body = item[len(HUB_PREFIX):]
    name, sep, config = body.partition(":")
    name = name.strip("/")
    if not name or name.count("/") > 1 or ":" in config or (sep and not config):
        raise InputError(f"{item!r} is no Hub id: write hf:NAME or hf:NAME:CONFIG "
                         f"(NAME is dataset or namespace/dataset)")
    return name, config or None


def hub_corpus(item: str) -> str:
    """The corpus name of a Hub id: the dataset's name, without namespace or config."""
    return parse_hub_id(item)[0].rsplit("/", 1)[-1]


def hub_cache_dir() -> Path:
    """The ``datasets`` cache in effect (``datasets.config.HF_DATASETS_CACHE``)."""
    import datasets.config

    return Path(os.path.expanduser(str(datasets.config.HF_DATASETS_CACHE)))


def hub_roots(item: str) -> list[Path]:
    """The folders no output may go into for a Hub id: the ``datasets`` cache and the Hub
    download cache, resolved (the id is not opened)."""
    roots = []
    try:
        roots.append(hub_cache_dir())
    except ImportError:
        pass
    try:
        from huggingface_hub import constants

        roots.append(Path(os.path.expanduser(str(constants.HF_HUB_CACHE))))
    except ImportError:
        pass
    return [Path(os.path.realpath(r)) for r in roots]


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """``HF_HUB_OFFLINE`` set for ``datasets`` and ``huggingface_hub`` during the block."""
    import datasets.config

    saved: list[tuple[Any, str, Any]] = []
    targets: list[Any] = [datasets.config]
    with contextlib.suppress(ImportError):
        from huggingface_hub import constants

        targets.append(constants)
    for mod in targets:
        for attr in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            if hasattr(mod, attr):
                saved.append((mod, attr, getattr(mod, attr)))
                setattr(mod, attr, True)
    try:
        yield
    finally:
        for mod, attr, value in saved:
            setattr(mod, attr, value)


def _not_cached(item: str, name: str, config: str | None, cache: Path, why: str) -> InputError:
    args = repr(name) + (f", {config!r}" if config else "")
    return InputError(
        f"{item} is not in the local datasets cache ({cache}): {why}. splitscope reads Hub "
        f"datasets offline and never downloads; cache it once while online with "
        f"`python -c \"import datasets; datasets.load_dataset({args})\"` (or fetch the files "
        f"with `huggingface-cli download --repo-type dataset {name}` and load them once with "
        f"datasets.load_dataset), or point HF_DATASETS_CACHE / HF_HOME at the cache that "
        f"holds it")


def require_cached(item: str) -> None:
    """Raise :class:`InputError` unless the dataset of ``item`` is in the local cache; its
    Arrow files are not opened (a check before an audit creates anything)."""
    with _cache_builder(item):
        pass


def _cached_configs(cache: Path, name: str) -> list[str]:
    """The configs of ``name`` in the cache (``<cache>/<namespace>___<name>/<config>/<version>/
    <hash>/``, the layout ``datasets`` writes)."""
    from datasets.naming import camelcase_to_snakecase

    parts = name.split("/")
    parts[-1] = camelcase_to_snakecase(parts[-1])
    return sorted({p.parts[-3] for p in (cache / "___".join(parts)).glob("*/*/*") if p.is_dir()})


@contextlib.contextmanager
def _cache_builder(item: str) -> Iterator[Any]:
    """The ``datasets`` ``Cache`` builder of ``item``, in offline mode; a dataset, config or
    file missing from the cache, inside the block too, is the not-cached error."""
    name, config = parse_hub_id(item)
    try:
        from datasets.packaged_modules.cache.cache import Cache
    except ImportError as exc:
        raise InputError(f"{item}: reading a Hub id needs the datasets library "
                         f"(pip install 'splitscope[hf]')") from exc
    cache = hub_cache_dir()
    if config is None:  # datasets would take the latest-written one: an audit names its data
        configs = _cached_configs(cache, name)
        if len(configs) > 1:
            raise InputError(f"{item}: the cache holds several configs of {name} "
                             f"({', '.join(configs)}); name one as hf:{name}:CONFIG")
    with _offline():
        try:
            yield Cache(cache_dir=str(cache), repo_id=name, dataset_name=name.rsplit("/", 1)[-1],
                        config_name=config, version="auto", hash="auto")
        except (ValueError, FileNotFoundError, NotImplementedError) as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise _not_cached(item, name, config, cache, why) from exc


def open_hub_dataset(item: str):
    """The cached ``DatasetDict`` of a Hub id, memory-mapped from its Arrow cache files.

    Parameters
    ----------
    item : str
        ``hf:NAME`` or ``hf:NAME:CONFIG``.

    Returns
    -------
    datasets.DatasetDict

    Raises
    ------
    InputError
        When ``datasets`` is not installed, or the dataset (or that config) is not cached.
    """
    with _cache_builder(item) as builder:
        return builder.as_dataset()


def read_hub(item: str, *, corpus: str | None = None, columns: Mapping[str, str] | None = None,
             image_column: str | None = None, **_) -> pd.DataFrame:
    """Manifest of a Hub id: its cached splits read as a ``datasets`` object, the corpus named
    after the dataset unless ``corpus`` is given.

    Parameters
    ----------
    item : str
        ``hf:NAME`` or ``hf:NAME:CONFIG``.
    corpus : str, optional
        Corpus name; default the dataset's name (:func:`hub_corpus`).
    columns : mapping, optional
        Column names by role, as for a table.
    image_column : str, optional
        The image column, when the dataset has several.

    Returns
    -------
    DataFrame
    """
    from splitscope.manifest.embedded import read_dataset_object

    return read_dataset_object(open_hub_dataset(item), corpus=corpus or hub_corpus(item),
                               columns=columns, image_column=image_column)


def fingerprint_hub(item: str, role: str, manifest: pd.DataFrame | None) -> dict[str, Any]:
    """Fingerprint of a Hub id input: the SHA-256 over its Arrow cache files (one
    ``name<TAB>sha256`` line per file, in the order the manifest lists them), which names the
    bytes read whatever cache folder holds them."""
    from splitscope.records.model import sha256_file

    digest = hashlib.sha256()
    if manifest is not None and "table" in manifest.columns:
        for table in manifest["table"].dropna().astype(str).unique():
            digest.update(f"{Path(table).name}\t{sha256_file(table)}\n".encode())
    return {"role": role, "path": item, "kind": "hub", "sha256": digest.hexdigest(),
            "sha256_of": "name and SHA-256 of each Arrow cache file read, release order",
            "rows": len(manifest) if manifest is not None else None}
