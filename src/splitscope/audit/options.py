"""The audit's options: one frozen object, built once (from the CLI or from the keywords of
:func:`splitscope.audit.audit`), read by every layer as ``context.options`` and recorded whole
in ``audit.json`` (``options``).

Each group is a frozen dataclass whose defaults are the method's (METHODS): the thumbnail
geometry and read caps (:class:`~splitscope.features.extract.FeatureParams`), how the release
is read (:class:`InputOptions`), the identity and near-duplicate search
(:class:`SearchOptions`), the provenance probes (:class:`ProvenanceOptions`), the quality
thresholds (:class:`~splitscope.provenance.quality.QualityParams`), the prediction files and
scores (:class:`EvaluationOptions`), and the seed, resamples and execution of the run
(:class:`RunOptions`). The CLI's option groups (:mod:`splitscope.cli_options`) take their
defaults from these classes, so a default is written once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from splitscope.errors import InputError
from splitscope.evaluation.readers import ReadOptions, sheet_arg
from splitscope.features.extract import DEFAULT_MAX_FILE_BYTES, FeatureParams
from splitscope.options import InputOptions, ProvenanceOptions, RunOptions, SearchOptions
from splitscope.provenance.quality import QualityParams

__all__ = ["SCORE_KINDS", "AuditOptions", "EvaluationOptions"]

#: what saved prediction scores may be (declared, never guessed)
SCORE_KINDS = ("score", "probability", "logit")


@dataclass(frozen=True)
class EvaluationOptions:
    """The saved predictions (METHODS §5): what their scores are and how their files are
    read (the parsed-table cache is the run's workspace)."""

    score_kind: str = "score"
    reading: ReadOptions = field(default_factory=ReadOptions)

    def __post_init__(self) -> None:
        if self.score_kind not in SCORE_KINDS:
            raise InputError(f"score_kind {self.score_kind!r} unknown; use one of "
                             f"{', '.join(SCORE_KINDS)}")


def _plain(value: Any) -> Any:
    """A JSON-ready copy: dataclasses and mappings as dicts, paths as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


@dataclass(frozen=True)
class AuditOptions:
    """Every option of an audit, by the part of the method that reads it."""

    inputs: InputOptions = field(default_factory=InputOptions)
    features: FeatureParams = field(default_factory=FeatureParams)
    search: SearchOptions = field(default_factory=SearchOptions)
    provenance: ProvenanceOptions = field(default_factory=ProvenanceOptions)
    quality: QualityParams = field(default_factory=QualityParams)
    evaluation: EvaluationOptions = field(default_factory=EvaluationOptions)
    run: RunOptions = field(default_factory=RunOptions)

    def to_dict(self) -> dict[str, Any]:
        """Every option, by group, as plain JSON values (``audit.json``'s ``options``)."""
        return _plain(self)

    @classmethod
    def build(cls, *, tau: float = SearchOptions.tau, radius: int = SearchOptions.radius,
              dihedral: bool = SearchOptions.dihedral,
              transforms: int = SearchOptions.transforms,
              thumb_size: int = FeatureParams.thumb_size,
              mode: str = FeatureParams.mode, interpolation: str = FeatureParams.interpolation,
              max_file_bytes: int | None = None, group_regex: str | None = None,
              label_map: str | Mapping[str, str] | None = None,
              external_label_map: str | Mapping[str, str] | None = None,
              control_label_map: str | Mapping[str, str] | None = None,
              list_options: Mapping[str, Any] | None = None,
              allow_outside_root: bool = InputOptions.allow_outside_root,
              follow_links: bool = InputOptions.follow_links,
              allow_urls: bool = InputOptions.allow_urls,
              score_kind: str = EvaluationOptions.score_kind, prediction_reading: Mapping[str, Any] | None = None,
              folds: int = ProvenanceOptions.folds, seed: int = RunOptions.seed,
              resamples: int = RunOptions.resamples, layers=None, workers: int | None = None,
              workspace=None, max_pairs: int = RunOptions.max_pairs,
              progress: bool | None = None, croissant: bool = RunOptions.croissant,
              quality: QualityParams | None = None) -> AuditOptions:
        """The options from flat keywords (those of :func:`splitscope.audit.audit` and of
        the CLI); ``prediction_reading`` holds ``sheet``, ``header_row``, ``sep``,
        ``decimal``."""
        how = dict(prediction_reading or {})
        unknown = set(how) - {"sheet", "header_row", "sep", "decimal", "engine"}
        if unknown:
            raise InputError(f"prediction_reading: unknown key(s) {sorted(unknown)}; use "
                             "sheet, header_row, sep, decimal")
        if "sheet" in how:
            how["sheet"] = sheet_arg(how["sheet"])
        return cls(
            inputs=InputOptions(group_regex=group_regex, label_map=label_map,
                                external_label_map=external_label_map,
                                control_label_map=control_label_map,
                                list_options=dict(list_options or {}),
                                allow_outside_root=bool(allow_outside_root),
                                follow_links=bool(follow_links), allow_urls=bool(allow_urls)),
            features=FeatureParams(thumb_size=thumb_size, interpolation=interpolation,
                                   mode=mode, max_file_bytes=DEFAULT_MAX_FILE_BYTES
                                   if max_file_bytes is None else int(max_file_bytes)),
            search=SearchOptions(tau=tau, radius=radius, dihedral=dihedral,
                                 transforms=transforms),
            provenance=ProvenanceOptions(folds=int(folds)),
            quality=quality if quality is not None else QualityParams(),
            evaluation=EvaluationOptions(score_kind=score_kind, reading=ReadOptions(**how)),
            run=RunOptions(seed=seed, resamples=resamples, layers=layers, workers=workers,
                           workspace=None if workspace is None else str(workspace),
                           max_pairs=int(max_pairs), progress=progress,
                           croissant=bool(croissant)))

    def scan_options(self) -> dict[str, Any]:
        """Keywords of :func:`splitscope.features.scanning.scan` for every scan of the run
        (the audited release's reading options aside)."""
        f, i = self.features, self.inputs
        out = {"thumb_size": f.thumb_size, "mode": f.mode, "interpolation": f.interpolation,
               "workers": self.run.workers, "progress": self.run.progress,
               "allow_outside_root": i.allow_outside_root, "follow_links": i.follow_links,
               "allow_urls": i.allow_urls}
        if f.max_file_bytes != DEFAULT_MAX_FILE_BYTES:
            out["max_file_bytes"] = f.max_file_bytes
        return out
