"""The audit's options: one frozen object, built once (from the command line's flags by
:meth:`AuditOptions.from_flags`, or in Python), read by every layer as ``context.options`` and
recorded whole in ``audit.json`` (``options``, :meth:`AuditOptions.to_dict`).

It holds the core's groups — how the release is read (:class:`~splitscope.options.InputOptions`),
the feature geometry and read caps (:class:`~splitscope.features.options.FeatureParams`), the
run (:class:`~splitscope.options.RunOptions`) — and one object per options group the registered
layers declare (a layer's ``options``, :mod:`splitscope.core.protocol`), reached by its name
(``options.search.tau``). The core names no layer: a layer's option reaches its rule from the
flag without being written anywhere in between.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from splitscope.core.protocol import CORE_GROUPS, option_groups
from splitscope.errors import InputError
from splitscope.features.options import FeatureParams
from splitscope.options import DEFAULT_MAX_FILE_BYTES, InputOptions, RunOptions, plain

__all__ = ["AuditOptions", "core_groups"]


def core_groups() -> dict[str, type]:
    """The core's option groups by name, in the order they are recorded."""
    return {"inputs": InputOptions, "features": FeatureParams, "run": RunOptions}


def _layer_defaults() -> dict[str, Any]:
    return {name: group() for name, group in option_groups().items()}


@dataclass(frozen=True)
class AuditOptions:
    """Every option of an audit: the core's groups, and ``layer_options``, one object per
    registered layer's options group (missing ones take their defaults); a layer's group is
    also an attribute (``options.search``)."""

    inputs: InputOptions = field(default_factory=InputOptions)
    features: FeatureParams = field(default_factory=FeatureParams)
    run: RunOptions = field(default_factory=RunOptions)
    layer_options: dict[str, Any] = field(default_factory=_layer_defaults)

    def __post_init__(self) -> None:
        groups = option_groups()
        given = dict(self.layer_options)
        unknown = sorted(set(given) - set(groups))
        if unknown:
            raise InputError(f"unknown options group(s) {unknown}; the registered layers' "
                             f"groups are {', '.join(groups) or 'none'}")
        for name, group in groups.items():
            if name not in given:
                given[name] = group()
            elif not isinstance(given[name], group):
                raise InputError(f"options group {name!r} must be a {group.__name__}, not "
                                 f"{type(given[name]).__name__}")
        object.__setattr__(self, "layer_options", {n: given[n] for n in groups})

    def __getattr__(self, name: str) -> Any:
        groups = self.__dict__.get("layer_options") or {}
        if name in groups:
            return groups[name]
        raise AttributeError(f"{type(self).__name__} has no options group {name!r} (groups: "
                             f"{', '.join([*CORE_GROUPS, *groups])})")

    def replace(self, **groups: Any) -> AuditOptions:
        """A copy with whole groups replaced by name (core or layer):
        ``options.replace(run=..., search=SearchOptions(tau=0.9))``."""
        core = {k: v for k, v in groups.items() if k in CORE_GROUPS}
        layer = {k: v for k, v in groups.items() if k not in CORE_GROUPS}
        return dataclasses.replace(self, **core,
                                   layer_options={**self.layer_options, **layer})

    def to_dict(self) -> dict[str, Any]:
        """Every option by group as plain JSON values (``audit.json``'s ``options``): the
        core's input and feature groups, each layer's group, then the run."""
        out = {"inputs": plain(self.inputs), "features": plain(self.features)}
        out.update({name: plain(group) for name, group in self.layer_options.items()})
        out["run"] = plain(self.run)
        return out

    @classmethod
    def from_flags(cls, **values: Any) -> AuditOptions:
        """The options from values by field name, whatever group holds the field (the
        destinations of ``splitscope audit``'s flags are the fields' names, so the command
        passes its flags through unchanged). A text value of a field that declares a
        ``parse`` is parsed (``--layers a,b``); an unknown name is an :class:`InputError`
        listing the known ones."""
        owner: dict[str, tuple[str, dataclasses.Field]] = {}
        groups = {**core_groups(), **option_groups()}
        for name, group in groups.items():
            for f in dataclasses.fields(group):
                if f.name in owner:
                    raise ValueError(f"option {f.name!r} is declared by the groups "
                                     f"{owner[f.name][0]!r} and {name!r}")
                owner[f.name] = (name, f)
        unknown = sorted(set(values) - set(owner))
        if unknown:
            raise InputError(f"unknown option(s) {', '.join(unknown)}; options are "
                             f"{', '.join(sorted(owner))}")
        by_group: dict[str, dict[str, Any]] = {name: {} for name in groups}
        for key, value in values.items():
            name, f = owner[key]
            parse = f.metadata.get("parse")
            if parse is not None and isinstance(value, str):
                value = parse(value)
            by_group[name][key] = value
        built = {name: group(**by_group[name]) for name, group in groups.items()}
        return cls(**{n: built.pop(n) for n in CORE_GROUPS}, layer_options=built)

    def scan_options(self) -> dict[str, Any]:
        """Keywords of :func:`splitscope.features.scanning.scan` for every scan of the run
        (the audited release's list options aside)."""
        f, i = self.features, self.inputs
        out = {"thumb_size": f.thumb_size, "mode": f.mode, "interpolation": f.interpolation,
               "workers": self.run.workers, "progress": self.run.progress,
               "allow_outside_root": i.allow_outside_root, "follow_links": i.follow_links,
               "allow_urls": i.allow_urls}
        if f.max_file_bytes != DEFAULT_MAX_FILE_BYTES:
            out["max_file_bytes"] = f.max_file_bytes
        return out
