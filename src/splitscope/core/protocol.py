"""The layer protocol: what an audit layer declares, how the audit finds it, and the one
guarded call that runs it.

A layer (:class:`Layer`) declares its ``name``, its place in the method's order (``order``),
what it ``needs`` beyond the audited scan (each need with the reason given when it is
missing), which earlier layers it reads (``after``), whether it ``applies`` to the given
inputs, and ``run(context) -> LayerResult``. The audit imports the entry module of every
splitscope package (``splitscope.<package>.layer``) and registers the layers listed in its
``LAYERS``; :func:`register` adds one from anywhere else. A new layer is therefore one module
that lists itself, and the run loop knows no layer by name. Layer packages never import the
audit package: the protocol is a shape, not a base class.

Outcomes
--------
Every layer is recorded, never dropped (:func:`run_layer`): one that does not apply gives a
record with status ``not applicable`` (or ``not assessed`` when an input it depends on could
not be produced) and the reason; one that raises :class:`~splitscope.errors.InputError` gives
``not applicable`` with its message; one that crashes gives ``not assessed`` with the
exception text and its traceback in the record's details, and the audit goes on.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from splitscope.errors import InputError
from splitscope.records import LayerResult, not_run_record
from splitscope.records.roles import ROLES

__all__ = [
    "CORE_GROUPS",
    "AuditContext",
    "Layer",
    "LayerOutcome",
    "NotRun",
    "declared",
    "flag_groups",
    "layer_names",
    "option_groups",
    "record_roles",
    "register",
    "registered_layers",
    "run_layer",
    "scorecard_measures",
    "unregister",
    "why_not_run",
]


@dataclass(frozen=True)
class NotRun:
    """Why a layer does not run on these inputs: ``not applicable`` (nothing to measure) or
    ``not assessed`` (something it depends on could not be produced)."""

    reason: str
    status: str = "not applicable"


@dataclass
class AuditContext:
    """What a layer may read: the audited scan and its boundaries, the optional scans and
    files given, the audit's options (``options``), where its lists go, and the outcomes of
    the layers that ran before it (in the method's order)."""

    scan: Any
    boundaries: list
    options: Any  # AuditOptions (splitscope.core.options): every option, by group
    record_inputs: list[dict[str, Any]]
    lists_dir: Path
    scans: dict[str, Any] = field(default_factory=dict)  # "control", "external"
    paths: dict[str, Path] = field(default_factory=dict)  # "predictions", "external", ...
    outcomes: dict[str, LayerOutcome] = field(default_factory=dict)
    executor: Any = None  # where scans and a partitioned search run (not an option)
    #: per corpus, the release root its rows' published paths are relative to
    #: (:mod:`splitscope.records.paths`)
    roots: dict[str, str] = field(default_factory=dict)

    @property
    def manifest(self):
        return self.scan.manifest

    @property
    def split_boundaries(self) -> list:
        """Boundaries between two sides: group overlap, cross-split probes and the partition
        classifier need one (a release audited against itself has none)."""
        return [b for b in self.boundaries if not b.within]

    def has(self, need: str) -> bool:
        """Whether an input named by a layer's ``needs`` was given (a scan or a path)."""
        return need in self.scans or need in self.paths


@runtime_checkable
class Layer(Protocol):
    """What an audit layer is: an object with these attributes and methods.

    Layer packages do not import the audit: they define plain classes of this shape and list
    one instance of each in their entry module's ``LAYERS``.

    Attributes
    ----------
    name : str
        The layer's name (``--layers``, ``audit.json``'s ``layers``).
    order : int, optional
        Place in the method's order (identity and near duplicates 10, groups 20, provenance
        30, evaluation 40, attribution 50, cross-corpus 60; default 100); ties keep
        registration order.
    needs : mapping of str to str, optional
        Inputs beyond the audited scan (``control``, ``external``, ``predictions``,
        ``attribution_maps``, …), each with the reason recorded (``not applicable``) when it
        was not given.
    after : mapping of str to str, optional
        Layers whose results it reads, each with the reason recorded (``not assessed``) when
        that layer did not run or did not complete.
    uses : mapping of str to str, optional
        Earlier layers whose outcome it reads when they completed (``context.outcomes``),
        each with what it reads; unlike ``after``, the layer still runs without them.
    metrics, verdicts, rules : tuples, optional
        Its reading, declared next to its records: ``--fail-on`` metrics
        (:class:`~splitscope.records.metrics.Metric`), verdict sections
        (:class:`~splitscope.records.metrics.Verdict`) and "what this means" rules
        (:class:`~splitscope.records.metrics.Rule`); the audit orders and renders them.
    scorecard : mapping of str to tuple of str, optional
        The score-card details its records measure (:mod:`splitscope.records.scorecard`):
        detail key → the predicate names of those records (see :func:`scorecard_measures`).
    roles : mapping of str to tuple of str, optional
        What its records are to the report and the Croissant record
        (:mod:`splitscope.records.roles`): role → the predicate names of those records (see
        :func:`record_roles`).
    background : bool or callable(context) -> bool, optional
        Its work is mostly in worker processes of its own, so the audit may start it first,
        in a thread, beside the layers before it in the method's order (only when it reads
        no other layer, and not in a run with ``workers`` given, which keeps N threads busy,
        never two layers' N; one that reads it waits for it). Its records must not depend
        on what runs beside it; a callable says so per input (e.g. not where the two
        layers' peak memory would add up past what the machine has).
    title : str, optional
        What the layer measures, in words; the record left when it does not run is titled
        ``<title> <status>`` (default ``<name> layer <status>``).
    options : dataclass type, optional
        Its options group: a frozen dataclass whose fields are declared with
        :func:`splitscope.options.option` (default, help, flag). The audit's options hold one
        instance (``context.options.<group>``, where ``group`` is the class attribute of that
        name, else the layer's name), ``splitscope audit`` has one flag per field with a help,
        and ``audit.json``'s ``options`` records it. Layers may share a group (the same class).

    Methods
    -------
    applies(context) -> str or None, optional
        Checked after ``needs``: ``None`` when the layer runs on these inputs, else why not
        (``not applicable``).
    run(context) -> LayerResult
        The layer's records, tables and figure data.
    issue_columns(ids, tables) -> DataFrame or None, optional
        Its columns of the issue table (indexed by row id) from its own tables, when it ran.
    """

    name: str

    def run(self, context: AuditContext) -> LayerResult: ...


_REGISTERED: list[Layer] = []
_IMPORT_ERRORS: dict[str, str] = {}
_DISCOVERED = False


def register(layer: Layer) -> Layer:
    """Add a layer (an instance) to the audit; its name must be new. The ``LAYERS`` of every
    ``splitscope.<package>.layer`` module are registered on first use."""
    if not isinstance(getattr(layer, "name", None), str) or not callable(getattr(layer, "run",
                                                                                 None)):
        raise TypeError(f"{layer!r} is not a layer: it needs a name and run(context)")
    group = getattr(layer, "options", None)
    if group is not None and not (isinstance(group, type) and dataclasses.is_dataclass(group)):
        raise TypeError(f"layer {layer.name!r}: options must be a dataclass type, not {group!r}")
    unknown = sorted(set(getattr(layer, "roles", None) or {}) - set(ROLES))
    if unknown:
        raise ValueError(f"layer {layer.name!r} declares unknown record roles {unknown}; "
                         f"roles are {', '.join(ROLES)} (splitscope.records.roles)")
    for other in _REGISTERED:
        if other.name == layer.name and other is not layer:
            raise ValueError(f"a layer named {layer.name!r} is already registered "
                             f"({type(other).__module__}.{type(other).__qualname__})")
    if layer not in _REGISTERED:
        _REGISTERED.append(layer)
    return layer


def unregister(name: str) -> None:
    """Remove the layer named ``name`` (e.g. one a test added)."""
    _REGISTERED[:] = [layer for layer in _REGISTERED if layer.name != name]


def _discover() -> None:
    """Import ``splitscope.<package>.layer`` of every package once and register its
    ``LAYERS``; a module that fails to import is remembered (and recorded ``not assessed``)."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    _DISCOVERED = True
    package = Path(__file__).resolve().parents[1]  # splitscope/, without importing it again
    for info in sorted(pkgutil.iter_modules([str(package)]), key=lambda i: i.name):
        if not info.ispkg:
            continue
        module = f"splitscope.{info.name}.layer"
        try:
            if importlib.util.find_spec(module) is None:
                continue
            for layer in getattr(importlib.import_module(module), "LAYERS", ()):
                register(layer)
        except Exception as exc:  # noqa: BLE001 - a layer that does not import is recorded
            _IMPORT_ERRORS[module] = f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class _Unavailable:
    """Stands for the layers of a module that failed to import."""

    name: str
    reason: str
    order: int = 1000

    def applies(self, context: AuditContext) -> NotRun:
        return NotRun(self.reason, status="not assessed")

    def run(self, context: AuditContext) -> LayerResult:  # pragma: no cover - never applies
        raise RuntimeError(self.reason)


def registered_layers() -> list[Layer]:
    """Every registered layer in the method's order; a layer module that failed to import is
    one ``not assessed`` stand-in named after its package."""
    _discover()
    indexed = sorted(enumerate(_REGISTERED), key=lambda t: (getattr(t[1], "order", 100), t[0]))
    layers = [layer for _, layer in indexed]
    for module, error in sorted(_IMPORT_ERRORS.items()):
        layers.append(_Unavailable(module.split(".")[1], f"{module} not available: {error}"))
    return layers


def scorecard_measures() -> dict[str, dict[str, tuple[str, ...]]]:
    """Per registered layer that declares one, its ``scorecard``: detail key → the predicate
    names of its records that measure the detail (read by
    :func:`splitscope.records.scorecard.score_card`)."""
    return {layer.name: dict(layer.scorecard) for layer in registered_layers()
            if getattr(layer, "scorecard", None)}


def record_roles() -> dict[str, dict[str, tuple[str, ...]]]:
    """Per registered layer that declares them, its ``roles``: role → the predicate names of
    its records that play it (read by :mod:`splitscope.report.html` and
    :mod:`splitscope.records.croissant`, which the audit passes them to)."""
    return {layer.name: {k: tuple(v) for k, v in layer.roles.items()}
            for layer in registered_layers() if getattr(layer, "roles", None)}


#: the option groups of the core (:class:`splitscope.core.options.AuditOptions`), which no
#: layer's group may be named
CORE_GROUPS = ("inputs", "features", "run")


def option_groups() -> dict[str, type]:
    """The registered layers' option groups (``options``), by group name, in the layers'
    order; two layers declaring different classes under one name, or a core group's name, is
    an error."""
    out: dict[str, type] = {}
    owners: dict[str, str] = {}
    for layer in registered_layers():
        group = getattr(layer, "options", None)
        if group is None:
            continue
        name = getattr(group, "group", None) or layer.name
        if name in CORE_GROUPS or (name in out and out[name] is not group):
            raise ValueError(f"layer {layer.name!r} declares the options group {name!r}, "
                             f"already that of {owners.get(name, 'the core')}")
        out[name], owners[name] = group, layer.name
    return out


def flag_groups() -> dict[str, type]:
    """The layers' option groups that ``splitscope audit`` makes flags of, by group name,
    found without importing a layer: the dataclasses with a class attribute ``group`` that
    each package's ``splitscope.<package>.options`` module defines (in the packages' order),
    then the groups of layers registered so far (:func:`register`). A layer's options module
    imports no numerical library, so ``splitscope audit --help`` loads none; the audit itself
    reads :func:`option_groups`, whose groups are these (``tests/audit/test_help.py``)."""
    out: dict[str, type] = {}
    package = Path(__file__).resolve().parents[1]  # splitscope/
    for info in sorted(pkgutil.iter_modules([str(package)]), key=lambda i: i.name):
        if not info.ispkg or not (package / info.name / "options.py").is_file():
            continue
        module = f"splitscope.{info.name}.options"
        try:
            found = importlib.import_module(module)
        except Exception:  # noqa: BLE001, S112 - its layer is recorded not assessed when run
            continue
        for value in vars(found).values():
            if (isinstance(value, type) and dataclasses.is_dataclass(value)
                    and value.__module__ == module
                    and isinstance(getattr(value, "group", None), str)):
                out.setdefault(value.group, value)
    for layer in _REGISTERED:
        group = getattr(layer, "options", None)
        if group is not None:
            out.setdefault(getattr(group, "group", None) or layer.name, group)
    return out


def declared(member: str) -> list:
    """What the registered layers declare under ``member`` (``rules``, ``verdicts``,
    ``findings``, ``composition``: objects with a ``rank``), each once (two layers of a package
    may declare the same object), by ``rank``, ties in the layers' order; two different
    objects under one name is an error."""
    found: dict[str, Any] = {}
    for layer in registered_layers():
        for item in getattr(layer, member, None) or ():
            key = getattr(item, "name", None) or getattr(item, "category", None)
            if key in found and found[key] is not item:
                raise ValueError(f"layer {layer.name!r} declares {member} {key!r}, which "
                                 "another layer already declares")
            found[key] = item
    return sorted(found.values(), key=lambda item: getattr(item, "rank", 1000.0))


def layer_names() -> tuple[str, ...]:
    """Names of the layers an audit runs, in order (for ``layers=`` / ``--layers``)."""
    return tuple(layer.name for layer in registered_layers())


def why_not_run(layer: Layer, context: AuditContext) -> NotRun | None:
    """``None`` when ``layer`` runs on these inputs; else why not: a missing input (``not
    applicable``), :meth:`Layer.applies`, then a layer it reads that did not complete (``not
    assessed``)."""
    for need, reason in (getattr(layer, "needs", None) or {}).items():
        if not context.has(need):
            return NotRun(reason)
    applies = getattr(layer, "applies", None)
    if applies is not None:
        why = applies(context)
        if isinstance(why, NotRun):
            return why
        if why is not None:
            return NotRun(str(why))
    for name, reason in (getattr(layer, "after", None) or {}).items():
        done = context.outcomes.get(name)
        if done is None or done.status in ("not assessed", "not applicable"):
            return NotRun(reason, status="not assessed")
    return None


@dataclass
class LayerOutcome:
    """What running one layer gave: its result, status, reason and time."""

    layer: str
    result: LayerResult
    status: str
    reason: str | None
    duration_s: float

    def summary(self) -> dict[str, Any]:
        return {"layer": self.layer, "status": self.status, "reason": self.reason,
                "records": len(self.result.records), "duration_s": round(self.duration_s, 4)}


def not_run(layer: Layer, context: AuditContext, why: NotRun,
            duration_s: float = 0.0) -> LayerOutcome:
    """The outcome of a layer that did not run: one record with the status and reason."""
    title = getattr(layer, "title", None)
    record = not_run_record(layer.name, why.status, why.reason,
                            title=f"{title} {why.status}" if title else None,
                            inputs=context.record_inputs)
    return LayerOutcome(layer.name, LayerResult([record]), why.status, why.reason, duration_s)


def run_layer(layer: Layer, context: AuditContext) -> LayerOutcome:
    """Run one layer and never let it take the audit down (see the module's *Outcomes*).

    Records a layer returned with a status other than ``completed`` are kept as they are;
    the layer's own status is the worst of them.
    """
    started = time.perf_counter()
    why = why_not_run(layer, context)
    if why is not None:
        return not_run(layer, context, why, time.perf_counter() - started)
    try:
        result = layer.run(context)
    except InputError as exc:
        return not_run(layer, context, NotRun(str(exc)), time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001 - a failing layer is recorded, the audit goes on
        outcome = not_run(layer, context, NotRun(f"layer error: {type(exc).__name__}: {exc}",
                                                 status="not assessed"),
                          time.perf_counter() - started)
        outcome.result.records[0].details["traceback"] = traceback.format_exc(limit=8)
        return outcome
    if result is None:
        result = LayerResult()
    if isinstance(result, (list, tuple)):
        result = LayerResult(list(result))
    status, reason = _layer_status(layer, result, context)
    return LayerOutcome(layer.name, result, status, reason, time.perf_counter() - started)


def _layer_status(layer: Layer, result: LayerResult,
                  context: AuditContext) -> tuple[str, str | None]:
    statuses = [r.status for r in result.records]
    # a proposed record (a group key inferred from names) measures nothing the layer was
    # asked for: beside it the layer is what its measured records say
    done = [s for s in statuses if s not in ("not applicable", "proposed")]
    if not statuses:
        reason = "the layer returned no finding for this input"
        result.records.append(not_run_record(layer.name, "not applicable", reason,
                                             inputs=context.record_inputs))
        return "not applicable", reason
    if not done:
        return "not applicable", next((r.reason for r in result.records if r.reason),
                                      "nothing to measure")
    if all(s == "completed" for s in done):
        # findings that do not apply to this input (e.g. one source only) are listed, not
        # counted against the layer
        return "completed", None
    if any(s in ("completed", "partial") for s in done):
        return "partial", (f"{sum(s in ('partial', 'not assessed') for s in statuses)} of "
                           f"{len(statuses)} records partial or not assessed")
    return "not assessed", next((r.reason for r in result.records if r.reason),
                                "no completed record")
