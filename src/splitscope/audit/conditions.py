"""``--fail-on`` conditions: the metrics an audit can gate on, each declared once.

A condition is ``metric op value`` (ops ``> >= < <= == !=``; a value may end in ``%``). Each
:class:`Metric` names the records it reads (layer, predicate or words of the record id, the
field read, the counting unit) and how it aggregates over boundaries: the largest value over
the audited boundaries (the worst boundary). The ``--help`` text of ``audit`` is built from
:data:`METRICS` (:func:`metric_table`), so it cannot drift from what is evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from splitscope.groups.predicates import METRICS as GROUP_METRICS
from splitscope.provenance.predicates import METRICS as PROVENANCE_METRICS
from splitscope.provenance.predicates import QUALITY_METRICS
from splitscope.records.metrics import (
    Condition,
    Metric,
    evaluate,
    parse,
)
from splitscope.records.metrics import find_record as _find_record
from splitscope.records.metrics import metric_table as _metric_table
from splitscope.relations.predicates import EXTERNAL_METRICS
from splitscope.relations.predicates import METRICS as RELATIONS_METRICS

__all__ = ["METRICS", "all_metrics", "evaluate_conditions", "find_record", "metric_table",
           "parse_condition"]


_LAYERS_NOT_ASSESSED = Metric(
    "layers_not_assessed", "number of layers that could not run (missing module or failure)",
    (), field="layers", unit=None)

#: the method's metrics, each declared next to its predicates (``<package>/predicates.py``)
#: and by its layer (``metrics``), in the method's order
METRICS: dict[str, Metric] = {**RELATIONS_METRICS, **GROUP_METRICS, **PROVENANCE_METRICS,
                              **QUALITY_METRICS, **EXTERNAL_METRICS,
                              _LAYERS_NOT_ASSESSED.name: _LAYERS_NOT_ASSESSED}

def all_metrics() -> dict[str, Metric]:
    """:data:`METRICS` and the metrics the registered layers declare next to their records
    (a layer's ``metrics``: :class:`~splitscope.records.metrics.Metric` entries); a layer's
    metric may not reuse a name."""
    from splitscope.audit.protocol import registered_layers

    out = dict(METRICS)
    for layer in registered_layers():
        for m in getattr(layer, "metrics", None) or ():
            if m.name in out and out[m.name] is not m:
                raise ValueError(f"layer {layer.name!r} declares --fail-on metric {m.name!r}, "
                                 "which is already declared")
            out[m.name] = m
    return out


def metric_table() -> str:
    """The ``--fail-on`` metrics, one per line, for help texts and error messages."""
    return _metric_table(all_metrics())


def parse_condition(text: str) -> Condition:
    """Parse ``metric op value`` (ops ``> >= < <= == !=``; a value may end in ``%``) over
    :func:`all_metrics`.

    Raises
    ------
    InputError
        When the text does not parse or names an unknown metric (the message lists them).
    """
    return parse(text, all_metrics())


def evaluate_conditions(conditions: Sequence[Condition], records: Sequence[Mapping[str, Any]],
                        layers: Sequence[Mapping[str, Any]] = (),
                        boundaries: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Evaluate each condition on the records: the metric's value is the largest over the
    audited boundaries. A metric no completed record measured has value ``None`` and its
    condition does not hold (it is shown as *not measured*; gate on
    ``layers_not_assessed>0`` to fail when a layer could not run)."""
    return evaluate(conditions, records, all_metrics(), layers, boundaries)


def find_record(records, metric: str, boundary: str) -> Mapping[str, Any] | None:
    """The record a metric reads on one boundary, whatever its status (so a verdict can say
    *not assessed* instead of staying silent)."""
    return _find_record(records, metric, boundary, all_metrics())
