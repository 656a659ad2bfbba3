"""The option groups every layer and verb shares, with the method's defaults (METHODS): how a
release is read (:class:`InputOptions`), the identity and near-duplicate search
(:class:`SearchOptions`: τ 0.98, Hamming radius 6, 50 transformed images), the provenance
probes (:class:`ProvenanceOptions`: 5 folds) and the run (:class:`RunOptions`: seed 0, 2000
resamples, 60 gallery pairs). This module imports no layer, so the layers and the CLI's option
groups (:mod:`splitscope.cli_options`) take their defaults from here; the audit's whole
options object (:class:`splitscope.audit.options.AuditOptions`) composes these groups with
the feature, quality and prediction-reading parameters of their packages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from splitscope.errors import InputError

__all__ = ["InputOptions", "ProvenanceOptions", "RunOptions", "SearchOptions"]


@dataclass(frozen=True)
class InputOptions:
    """How the release is read: groups from file names, the label map (applied to every
    corpus whose labels it names) and the external and control corpora's own maps, the
    list-file columns (``columns`` by role, ``root``, ``split``, ``image_column``), and what a
    scan may read: paths outside the release root, linked folders, URLs."""

    group_regex: str | None = None
    label_map: str | Mapping[str, str] | None = None
    external_label_map: str | Mapping[str, str] | None = None
    control_label_map: str | Mapping[str, str] | None = None
    list_options: Mapping[str, Any] = field(default_factory=dict)
    allow_outside_root: bool = False
    follow_links: bool = False
    allow_urls: bool = False


@dataclass(frozen=True)
class SearchOptions:
    """The identity and near-duplicate search (METHODS §2): NCC threshold τ, Hamming radius
    k of the hash rules, dihedral matching, and the size of the seeded transform-sensitivity
    sample (0 skips it)."""

    tau: float = 0.98
    radius: int = 6
    dihedral: bool = False
    transforms: int = 50

    def __post_init__(self) -> None:
        if not 0 < float(self.tau) <= 1:
            raise InputError(f"tau must be in (0, 1]; got {self.tau}")
        object.__setattr__(self, "tau", float(self.tau))
        object.__setattr__(self, "radius", int(self.radius))
        object.__setattr__(self, "dihedral", bool(self.dihedral))
        object.__setattr__(self, "transforms", int(self.transforms))


@dataclass(frozen=True)
class ProvenanceOptions:
    """The provenance probes (METHODS §4): cross-validation folds of the probes and the
    partition classifier."""

    folds: int = 5


@dataclass(frozen=True)
class RunOptions:
    """The run: the seed of every draw, bootstrap and group resamples (METHODS §5.3), the
    layers asked for (``None``: all), worker processes, the feature cache, the pairs the
    gallery shows, progress lines, and whether a Croissant record is written."""

    seed: int = 0
    resamples: int = 2000
    layers: tuple[str, ...] | None = None
    workers: int | None = None
    workspace: str | None = None
    max_pairs: int = 60
    progress: bool | None = None
    croissant: bool = False

    def __post_init__(self) -> None:
        if int(self.resamples) < 1:
            raise InputError(f"resamples must be at least 1; got {self.resamples}")
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "resamples", int(self.resamples))
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(self.layers))
