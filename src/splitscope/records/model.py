"""The audit-record model (METHODS §6.1).

A record says what was measured (predicate or contrast, with parameters), on which boundary,
in which counting unit, over which denominator, with which uncertainty, supporting which
conclusion, and with which status. Layers build records with :class:`AuditRecord`; the report
and the JSON output are rendered from them.
"""

from __future__ import annotations

import functools
import hashlib
import math
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATUSES = ("completed", "partial", "not assessed", "not applicable", "proposed")
"""A record's status (METHODS §0): ``proposed`` is a group key inferred from names (§3.6),
reported beside the measured records and read by none of their metrics."""


@dataclass
class Uncertainty:
    """An interval and what it is (e.g. ``percentile bootstrap over cases, 2000 resamples``)."""

    kind: str
    level: float | None = 0.95
    low: float | None = None
    high: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class AuditRecord:
    """One finding. ``estimate`` is ``numerator / denominator`` for rates; ``status`` is one of
    :data:`STATUSES` and ``reason`` says why when it is not ``completed``."""

    id: str
    layer: str  # the name of the layer that wrote it (duplicates, groups, provenance, ...)
    title: str
    boundary: dict[str, Any] | None = None  # Boundary.to_dict()
    predicate: dict[str, Any] = field(default_factory=dict)  # {"name": ..., "params": {...}}
    unit: str | None = None  # pair | identity group | affected query row | unique file | ...
    numerator: float | None = None
    denominator: float | None = None
    coverage: dict[str, Any] | None = None  # {"traceable": n, "total": m}
    class_support: dict[str, int] | None = None
    estimate: float | None = None
    uncertainty: Uncertainty | None = None
    scope: str | None = None  # selection scope: which rows the statement covers
    conclusion: str | None = None  # what the evidence supports, in words
    unresolved: str | None = None  # what it does not settle
    status: str = "completed"
    reason: str | None = None
    inputs: list[dict[str, str]] = field(default_factory=list)  # [{"path", "sha256"}]
    outputs: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # breakdowns, sweeps, small tables
    software: dict[str, str] = field(default_factory=lambda: dict(software_versions()))
    #: the part of its layer's method (the duplicates layer: ``identity`` or
    #: ``near_duplicate``); left out of the document when None
    section: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} not one of {STATUSES}")
        if self.status != "completed" and not self.reason:
            raise ValueError(f"record {self.id}: status {self.status!r} needs a reason")
        if self.estimate is None and self.numerator is not None and self.denominator:
            self.estimate = self.numerator / self.denominator

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (NaN and infinities become ``None``; no ``section`` key when
        the record has none)."""
        out = asdict(self)
        if out["section"] is None:
            del out["section"]
        return _clean(out)


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB chunks (memory stays bounded)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_fingerprint(path: str | Path) -> dict[str, str]:
    """``{"path", "sha256"}`` of an input list, so a record names exactly what it read."""
    return {"path": str(path), "sha256": sha256_file(path)}


@functools.lru_cache(maxsize=1)
def software_versions() -> dict[str, str]:
    """Versions of splitscope and the libraries whose behaviour a number depends on."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for name in ("splitscope", "numpy", "pandas", "pillow", "imagehash", "scipy",
                 "scikit-learn", "scikit-image"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


@dataclass
class LayerResult:
    """What one layer hands to the audit: its records and the row-keyed tables to export
    (name → DataFrame, written as ``lists/<name>.csv`` and ``.parquet``)."""

    records: list[AuditRecord] = field(default_factory=list)
    tables: dict[str, Any] = field(default_factory=dict)
    #: boundaries the layer audited beyond the release's own, as ``(Boundary, kind)``
    #: (e.g. an external corpus → train, kind ``cross-corpus``)
    boundaries: list[tuple[Any, str]] = field(default_factory=list)
    #: figure data per boundary name (e.g. the best-ρ distribution and threshold sweep)
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: row table naming rows beyond the audited release's (those of ``boundaries``)
    rows: Any = None

    def extend(self, other: LayerResult) -> LayerResult:
        self.records.extend(other.records)
        self.tables.update(other.tables)
        self.boundaries.extend(other.boundaries)
        self.figures.update(other.figures)
        return self


def not_run_record(layer: str, status: str, reason: str, *, id: str | None = None,
                   title: str | None = None, boundary: Any = None,
                   inputs: list | None = None, predicate: str | None = None) -> AuditRecord:
    """The record a check or a layer leaves when it did not run: ``not assessed`` (it could
    not run) or ``not applicable`` (nothing to measure on this input), with the reason and,
    when given, the name of the predicate it would have measured. The default id is
    ``<layer>[.<boundary>].<status>``."""
    if id is None:
        from splitscope.records.ids import slug

        bname = f".{slug(boundary.name, empty='x')}" if boundary is not None else ""
        id = f"{layer}{bname}.{status.replace(' ', '_')}"
    return AuditRecord(
        id=id, layer=layer, title=title or f"{layer.replace('_', ' ')} layer {status}",
        boundary=boundary.to_dict() if boundary is not None else None,
        status=status, reason=reason, inputs=list(inputs or []),
        predicate={"name": predicate, "params": {}} if predicate is not None else {},
    )
