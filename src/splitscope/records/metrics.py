"""What a ``--fail-on`` metric reads (:class:`Metric`): declared once, by the audit for the
method's metrics (:data:`splitscope.core.conditions.METRICS`) or by a layer next to the
records it writes (its ``metrics``), and read the same way by the conditions."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from splitscope.errors import InputError

__all__ = [
    "NOT_MEASURED",
    "Condition",
    "Metric",
    "Rule",
    "Segment",
    "Verdict",
    "above_chance",
    "completed_record",
    "contrast_on",
    "control_status",
    "done",
    "evaluate",
    "is_control",
    "metric_records",
    "metric_table",
    "not_measured_reason",
    "parse",
    "record_text",
]


@dataclass(frozen=True)
class Metric:
    """A quantity ``--fail-on`` can gate on: which records it reads and how.

    A record is read when it is completed (or partial), not a negative control, written by
    one of ``layers`` (the record's ``layer``, a layer's name), and its predicate name is one
    of ``predicates`` (names from the writing package's ``predicates.py``). ``field`` is the
    record field read (``estimate`` or ``numerator``); the value is the largest over the
    audited boundaries (the worst boundary; a contrast of two groups of a boundary's query
    rows counts for the boundary its predicate's ``params.boundary`` names) and, when
    ``pool_wide``,
    the records that describe the whole pool (no boundary, e.g. the within-pool probe).
    ``control`` marks a pixel predicate whose reliability a negative control measures: the
    outcome then says whether the records read were calibrated and found reliable.
    ``within`` also reads the records inside an evaluated population (copies inside the test
    split, whose boundary is *test → test*); ``trusted_only`` skips records whose predicate
    is not calibrated as reliable (``details.trusted`` false).
    """

    name: str
    description: str
    layers: tuple[str, ...]
    predicates: tuple[str, ...] = ()
    field: str = "estimate"
    unit: str | None = "affected query row"
    pool_wide: bool = False
    control: bool = False
    within: bool = False
    trusted_only: bool = False

    def reads(self) -> str:
        """What the metric reads and how it aggregates, in words (for ``--help``)."""
        if self.field == "layers":
            return "count of layers 'not assessed'"
        which = ", ".join(self.predicates)
        where = "the boundaries and the whole pool" if self.pool_wide else "the boundaries"
        return f"{self.field} of the {which} records, largest over {where}"

    def help_line(self) -> str:
        return f"{self.name}: {self.description} [{self.reads()}]"


_CONDITION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=|==|!=|>|<)\s*([-+0-9.eE]+%?)\s*$")


_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


@dataclass(frozen=True)
class Condition:
    """A parsed ``--fail-on`` condition ``metric op value``."""

    text: str
    metric: str
    op: str
    threshold: float


def record_text(record: Mapping[str, Any]) -> str:
    pred = record.get("predicate") or {}
    return f"{record.get('id')} {pred.get('name')}".lower()


def is_control(record: Mapping[str, Any]) -> bool:
    """Whether a record measures a negative control rather than the audited release: the
    record says so itself (``details.role == "control"``, or a boundary of kind
    ``control``)."""
    details = record.get("details") or {}
    return (details.get("role") == "control"
            or (record.get("boundary") or {}).get("kind") == "control")


def metric_records(metric: Metric, records: Iterable[Mapping[str, Any]],
                   boundaries: Sequence[str] | None = None) -> list[Mapping[str, Any]]:
    """The completed records a metric reads (first matching word alternative wins)."""
    queried = {str(b).split(" → ")[0] for b in boundaries or ()}
    pool = [r for r in records
            if r.get("status") in ("completed", "partial")
            and r.get("layer") in metric.layers
            and not is_control(r)
            and r.get(metric.field) is not None
            and (boundaries is None or (r.get("boundary") or {}).get("name") in boundaries
                 or contrast_on(r) in boundaries
                 or (metric.pool_wide and not r.get("boundary"))
                 or (metric.within and _inside(r.get("boundary"), queried)))
            and not (metric.trusted_only
                     and (r.get("details") or {}).get("trusted", True) is False)]
    pool = [r for r in pool if metric.unit is None or r.get("unit") in (None, metric.unit)]
    return _matching(metric, pool)


def contrast_on(record: Mapping[str, Any]) -> str | None:
    """The audited boundary a contrast record was measured on (two groups of that boundary's
    query rows, e.g. leaked versus clean): its predicate's ``params.boundary``."""
    params = (record.get("predicate") or {}).get("params") or {}
    return params.get("boundary") if isinstance(params.get("boundary"), str) else None


def _inside(boundary: Mapping[str, Any] | None, queried: set[str]) -> bool:
    """Whether a record's boundary is one population against itself, and that population is
    the query side of an audited boundary."""
    if not boundary:
        return False
    q = str((boundary.get("query") or {}).get("name"))
    return q == str((boundary.get("reference") or {}).get("name")) and q in queried


def _matching(metric: Metric, pool: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records of ``pool`` a metric names: those of its predicates."""
    return [r for r in pool if (r.get("predicate") or {}).get("name") in metric.predicates]


def control_status(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the negative control says of the records a pixel-predicate metric reads:
    ``unreliable`` (the predicate flags more of the clean control than its bound),
    ``reliable``, or ``uncalibrated`` (no control was given), with the control's rate."""
    controls = [(r.get("details") or {}).get("control") for r in records]
    measured = [c for c in controls if c and c.get("rate") is not None and c.get("denominator")]
    if not measured:
        return {"status": "uncalibrated", "note": "no negative control given (--control): the "
                "predicate's flag rate on a clean release of this modality is unknown"}
    worst = max(measured, key=lambda c: c["rate"])
    status = "unreliable" if any(c.get("unreliable") for c in measured) else "reliable"
    return {"status": status, "rate": worst["rate"], "numerator": worst.get("numerator"),
            "denominator": worst.get("denominator"), "bound": worst.get("bound")}


def metric_table(metrics: Mapping[str, Metric]) -> str:
    """The ``--fail-on`` metrics, one per line, for help texts and error messages."""
    return "\n".join(f"  {m.help_line()}" for m in metrics.values())


def parse(text: str, metrics: Mapping[str, Metric]) -> Condition:
    """Parse ``metric op value`` (ops ``> >= < <= == !=``; a value may end in ``%``), the
    metric one of ``metrics``.

    Raises
    ------
    InputError
        When the text does not parse or names an unknown metric (the message lists them).
    """
    match = _CONDITION.match(text or "")
    if not match:
        raise InputError(
            f"--fail-on {text!r}: expected 'metric op value' with op one of > >= < <= == != "
            f"(e.g. 'ncc_rate>0.01'); metrics:\n{metric_table(metrics)}"
        )
    name, op, raw = match.groups()
    if name not in metrics:
        raise InputError(f"--fail-on {text!r}: unknown metric {name!r}; valid metrics:\n"
                         f"{metric_table(metrics)}")
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError as exc:
        raise InputError(f"--fail-on {text!r}: {raw!r} is not a number") from exc
    return Condition(text=text.strip(), metric=name, op=op, threshold=value)


def evaluate(conditions: Sequence[Condition], records: Sequence[Mapping[str, Any]],
             metrics: Mapping[str, Metric], layers: Sequence[Mapping[str, Any]] = (),
             boundaries: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Evaluate each condition on the records: the metric's value is the largest over the
    audited boundaries. Each outcome says ``held`` and its ``outcome``: ``"held"``, ``"not
    held"`` or ``"not measured"`` — a metric no completed record measured has value ``None``,
    does not hold, and carries the ``reason`` (:func:`not_measured_reason`); the caller
    decides what an unmeasured gate does to the run (the audit fails it, exit 5)."""
    out = []
    for cond in conditions:
        metric = metrics[cond.metric]
        if metric.field == "layers":
            value: float | None = float(sum(1 for l in layers if l.get("status") == "not assessed"))
            ids: list[str] = []
        else:
            hits = metric_records(metric, records, boundaries)
            values = [float(r[metric.field]) for r in hits]
            value = max(values) if values else None
            ids = [str(r["id"]) for r in hits]
        held = value is not None and _OPS[cond.op](value, cond.threshold)
        outcome = {"condition": cond.text, "metric": cond.metric, "op": cond.op,
                   "threshold": cond.threshold, "value": value, "held": bool(held),
                   "outcome": NOT_MEASURED if value is None else ("held" if held else "not held"),
                   "records": ids}
        if value is None:
            outcome["reason"] = not_measured_reason(metric, records, layers, boundaries)
        if metric.control and metric.field != "layers":
            outcome["control"] = control_status(hits)
        out.append(outcome)
    return out


#: the ``outcome`` of a ``--fail-on`` condition whose metric no completed record measured
NOT_MEASURED = "not measured"


def not_measured_reason(metric: Metric, records: Sequence[Mapping[str, Any]],
                        layers: Sequence[Mapping[str, Any]] = (),
                        boundaries: Sequence[str] | None = None) -> str:
    """Why ``metric`` has no value, in words: the layers that write its records and did not
    run (with their status and reason), else its records that were not completed (the first,
    with its status and reason), else that none of its records was written."""
    mine = [l for l in layers if l.get("layer") in metric.layers]
    idle = [l for l in mine if l.get("status") not in ("completed", "partial")]
    if idle and len(idle) == len(mine):
        return "; ".join(f"layer {l['layer']} {l.get('status')}"
                         + (f": {l['reason']}" if l.get("reason") else "") for l in idle)
    audited = set(boundaries) if boundaries is not None else None
    unfinished = [r for r in _matching(metric, [
        r for r in records if r.get("layer") in metric.layers and not is_control(r)
        and r.get("status") not in ("completed", "partial")
        and (audited is None or (r.get("boundary") or {}).get("name") in audited
             or (metric.pool_wide and not r.get("boundary")))])]
    if unfinished:
        r = unfinished[0]
        more = f" (and {len(unfinished) - 1} more)" if len(unfinished) > 1 else ""
        return (f"record {r.get('id')} {r.get('status')}"
                + (f": {r['reason']}" if r.get("reason") else "") + more)
    which = ", ".join(metric.predicates) or metric.name
    return (f"no completed record of {which} on the audited boundaries (its layer wrote "
            "none: a predicate not asked for, or nothing to compare)")


def find_record(records, metric: Metric | str, boundary: str,
                metrics: Mapping[str, Metric] | None = None) -> Mapping[str, Any] | None:
    """The record a metric reads on one boundary, whatever its status (so a verdict can say
    *not assessed* instead of staying silent)."""
    m = metric if isinstance(metric, Metric) else metrics[metric]
    mine = [r for r in records if (r.get("boundary") or {}).get("name") == boundary
            and r.get("layer") in m.layers and not is_control(r)]
    return next(iter(_matching(m, mine)), None)


def records_on(records, boundary: str | None, *, predicate: str | Sequence[str],
               layer: str | Sequence[str] | None = None,
               done: bool = False) -> list[Mapping[str, Any]]:
    """The records of one boundary (``None``: the pool-wide ones) whose predicate name is
    ``predicate`` (or one of them), written by ``layer`` (a layer's name, or one of them;
    ``None``: any), in document order; with ``done``, only the completed or partial ones."""
    names = (predicate,) if isinstance(predicate, str) else tuple(predicate)
    layers = (layer,) if isinstance(layer, str) else layer
    out = []
    for r in records:
        if ((r.get("boundary") or {}).get("name") == boundary
                and (r.get("predicate") or {}).get("name") in names
                and (layers is None or r.get("layer") in layers)
                and (not done or r.get("status") in ("completed", "partial"))):
            out.append(r)
    return out


def label_conflicts_found(records, boundary: str, predicates: Sequence[str], *,
                          trusted_only: bool) -> list[Mapping[str, Any]]:
    """The completed label-conflict records (of ``predicates``) of a boundary that count at
    least one row; with ``trusted_only``, only those of a predicate that may be counted
    (``details.trusted``)."""
    return [r for r in records_on(records, boundary, predicate=predicates, done=True)
            if r.get("numerator")
            and (not trusted_only or (r.get("details") or {}).get("trusted", True))]


Records = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Rule:
    """One interpretation rule: its name, the condition it tests (documented), and the
    function that returns its sentence for a boundary or ``None``."""

    name: str
    condition: str
    says: Callable[[Mapping[str, Any], Records], str | None]
    #: place among every layer's rules (lowest first; ties keep the layers' order)
    rank: float = 1000.0


def done(record: Mapping[str, Any] | None) -> bool:
    """Whether a record was measured (completed or partial)."""
    return record is not None and record.get("status") in ("completed", "partial")


def completed_record(records: Records, predicate: str | Sequence[str], boundary: str | None,
                     layer: str | Sequence[str] | None = None) -> Mapping[str, Any] | None:
    """The first completed record of ``predicate`` (of ``layer``) on ``boundary`` (None:
    pool-wide)."""
    return next(iter(records_on(records, boundary, predicate=predicate, layer=layer,
                                done=True)), None)


def above_chance(r: Mapping[str, Any] | None, chance: float | None = None) -> bool | None:
    """Whether an estimate's interval lies above chance (None when not measured)."""
    if r is None:
        return None
    low = (r.get("uncertainty") or {}).get("low")
    ref = chance if chance is not None else (r.get("details") or {}).get("chance")
    if low is None or ref is None:
        return None
    return bool(low > ref)


@dataclass(frozen=True)
class Verdict:
    """One section of an audit's verdicts, declared by the layer whose records it reads:
    ``lines(doc)`` returns its sentences (none when it has nothing to say); the audit orders
    the sections (:mod:`splitscope.core.verdicts`)."""

    name: str
    lines: Callable[[Mapping[str, Any]], list[str]]
    #: place among every layer's sections (lowest first; ties keep the layers' order)
    rank: float = 1000.0
    #: what an uncalibrated predicate saw: a note under the first figure, never a finding
    note: bool = False


@dataclass(frozen=True)
class Segment:
    """One category of the composition figure (what an evaluated split is made of), declared
    by the layer whose table flags it: every query row of a boundary falls in the first
    category (lowest ``rank``) whose flag holds, else "clean" or "not assessed".

    ``flags(tables, boundary)`` returns a boolean Series indexed by row id (``<NA>``: not
    assessed), or ``None`` when the layer's tables say nothing on that boundary (the category
    is then left out). The rows of the segments marked ``population`` make the boundary's
    query rows; without any, the figure is not drawn. ``describe`` is the category in the
    figure's rule, formatted with the options groups (``"near twin (NCC ≥ {search.tau:g})"``).
    """

    category: str
    flag: str
    flags: Callable[[Mapping[str, Any], str], Any]
    describe: str
    rank: float = 1000.0
    population: bool = False
