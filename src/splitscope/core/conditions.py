"""``--fail-on`` conditions: the metrics an audit can gate on, each declared once, by the layer
whose records it reads.

A condition is ``metric op value`` (ops ``> >= < <= == !=``; a value may end in ``%``). Each
:class:`Metric` names the records it reads (layer, predicate or words of the record id, the
field read, the counting unit) and how it aggregates over boundaries: the largest value over
the audited boundaries (the worst boundary). The metrics are those of the registered layers (a
layer's ``metrics``, in the layers' order) and the core's own ``layers_not_assessed``;
``splitscope help fail-on`` (:mod:`splitscope.core.topics`) and the error message of an
unknown metric (:func:`metric_table`) are built from them, so they cannot drift from what is
evaluated. A gate never passes on
nothing: a condition whose metric the run did not measure fails the audit (exit 5) unless
``--allow-unmeasured`` (METHODS §6.5).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from splitscope.core.protocol import registered_layers
from splitscope.exit_codes import EXIT_FAIL_ON, EXIT_NOT_MEASURED
from splitscope.records.metrics import (
    Condition,
    Metric,
    evaluate,
    parse,
)
from splitscope.records.metrics import find_record as _find_record
from splitscope.records.metrics import metric_table as _metric_table

__all__ = ["LAYERS_NOT_ASSESSED", "all_metrics", "evaluate_conditions", "fail_on_lines",
           "find_record", "metric_table", "parse_condition", "unmeasured"]


#: the core's own metric: layers that could not run
LAYERS_NOT_ASSESSED = Metric(
    "layers_not_assessed", "number of layers that could not run (missing module or failure)",
    (), field="layers", unit=None)


def all_metrics() -> dict[str, Metric]:
    """The metrics the registered layers declare next to their records (a layer's
    ``metrics``: :class:`~splitscope.records.metrics.Metric` entries), in the layers' order,
    then :data:`LAYERS_NOT_ASSESSED`; two layers may declare one metric (the same object),
    never two under one name."""
    out: dict[str, Metric] = {}
    for layer in registered_layers():
        for m in getattr(layer, "metrics", None) or ():
            if m.name in out and out[m.name] is not m:
                raise ValueError(f"layer {layer.name!r} declares --fail-on metric {m.name!r}, "
                                 "which is already declared")
            out[m.name] = m
    if LAYERS_NOT_ASSESSED.name in out:
        raise ValueError(f"a layer declares the core's metric {LAYERS_NOT_ASSESSED.name!r}")
    out[LAYERS_NOT_ASSESSED.name] = LAYERS_NOT_ASSESSED
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
    audited boundaries. A metric no completed record measured has value ``None``, its
    condition does not hold, and its ``outcome`` is ``"not measured"`` with the ``reason``
    (its layer's status, or its record's); the audit then fails the gate (exit 5) unless
    ``allow_unmeasured`` (:func:`splitscope.core.run.exit_code`)."""
    return evaluate(conditions, records, all_metrics(), layers, boundaries)


def unmeasured(fail_on: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The ``--fail-on`` outcomes whose metric was not measured."""
    return [c for c in fail_on if c.get("value") is None]


def fail_on_lines(doc: Mapping[str, Any]) -> list[str]:
    """One line per ``--fail-on`` outcome of an audit document, as the terminal and the
    summary notes say it: the value and whether it HELD; a metric not measured says that the
    gate fails (exit 5), or that ``--allow-unmeasured`` lets it pass, and why it was not
    measured; a pixel predicate's negative-control status follows."""
    allow = bool(((doc.get("options") or {}).get("run") or {}).get("allow_unmeasured"))
    lines = []
    for c in doc.get("fail_on") or []:
        if c.get("value") is None:
            why = c.get("reason") or "no completed record measured it"
            gate = ("the gate does not fail (--allow-unmeasured)" if allow else
                    f"the gate fails (exit {EXIT_NOT_MEASURED})")
            line = f"--fail-on {c['condition']}: not measured → {gate}: {why}"
        else:
            line = (f"--fail-on {c['condition']}: value {c['value']:.4g} → "
                    f"{f'HELD (exit {EXIT_FAIL_ON})' if c['held'] else 'not held'}")
        control = c.get("control") or {}
        if control.get("status") == "unreliable":
            line += (f"; the predicate is UNRELIABLE on this modality: it flags "
                     f"{100 * control['rate']:.3g}% of the clean control "
                     f"({control.get('numerator')} of {control.get('denominator')})")
        elif control.get("status") == "uncalibrated":
            line += "; uncalibrated: no negative control given (--control)"
        lines.append(line)
    return lines


def find_record(records, metric: str, boundary: str) -> Mapping[str, Any] | None:
    """The record a metric reads on one boundary, whatever its status (so a verdict can say
    *not assessed* instead of staying silent)."""
    return _find_record(records, metric, boundary, all_metrics())
