"""``--fail-on`` conditions: the metrics an audit can gate on, each declared once.

A condition is ``metric op value`` (ops ``> >= < <= == !=``; a value may end in ``%``). Each
:class:`Metric` names the records it reads (layer, predicate or words of the record id, the
field read, the counting unit) and how it aggregates over boundaries: the largest value over
the audited boundaries (the worst boundary). The ``--help`` text of ``audit`` is built from
:data:`METRICS` (:func:`metric_table`), so it cannot drift from what is evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from splitscope.errors import InputError

__all__ = ["METRICS", "Condition", "Metric", "control_status", "evaluate_conditions",
           "find_record",
           "is_control", "label_conflicts_found", "metric_records", "metric_table",
           "parse_condition", "record_text", "records_on"]


@dataclass(frozen=True)
class Metric:
    """A quantity ``--fail-on`` can gate on: which records it reads and how.

    A record is read when it is completed (or partial), not a negative control, in one of
    ``layers`` (prefix), and its predicate name is one of ``predicates`` (exact) or, when no
    record matches exactly, its id/predicate name contains every word of one ``words``
    alternative. ``field`` is the record field read (``estimate`` or ``numerator``); the value
    is the largest over the audited boundaries (the worst boundary) and, when ``pool_wide``,
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
    words: tuple[tuple[str, ...], ...] = ()
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
        which = ", ".join(self.predicates) or " or ".join(" ".join(w) for w in self.words)
        where = "the boundaries and the whole pool" if self.pool_wide else "the boundaries"
        return f"{self.field} of the {which} records, largest over {where}"

    def help_line(self) -> str:
        return f"{self.name}: {self.description} [{self.reads()}]"


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("byte_identical_rate", "share of query rows with a byte-identical (SHA-256) "
           "counterpart on the reference side", ("identity",), ("sha256",)),
    Metric("byte_identical_rows", "query rows with a byte-identical counterpart",
           ("identity",), ("sha256",), field="numerator"),
    Metric("pixel_identical_rate", "share of query rows whose decoded pixels equal a reference "
           "row's, byte copies and re-encodes together (the summary's pixel-identical line)",
           ("identity",), ("pixel_identical_union",)),
    Metric("reencode_rate", "share of query rows whose decoded pixels equal a reference row's "
           "with different bytes (re-encodes alone)", ("identity",), ("pixel_xxh128",)),
    Metric("within_split_copy_rate", "share of an evaluated split's rows that are byte copies "
           "(pixel arrays: pixel-identical copies) of another row of the same split",
           ("identity",), ("sha256_within", "pixel_xxh128_within"), unit="affected row",
           within=True),
    Metric("label_conflict_rate", "share of query rows with a twin under another label "
           "(byte, decoded-pixel or trusted NCC twins across the boundary, or identical "
           "images inside the split; the summary's LABEL CONFLICT lines)",
           ("identity", "near_duplicate"),
           ("label_conflict_sha256", "label_conflict_pixel_xxh128", "label_conflict_ncc",
            "label_conflict_within"), unit=None, within=True, trusted_only=True),
    Metric("basename_rate", "share of query rows whose basename occurs on the reference side",
           ("identity",), ("basename",)),
    Metric("ncc_rate", "share of query rows with a near-twin (best NCC ρ ≥ τ, nearest rule)",
           ("near_duplicate",), ("ncc_nearest",), control=True),
    Metric("ncc_rows", "query rows with a near-twin (best NCC ρ ≥ τ, nearest rule)",
           ("near_duplicate",), ("ncc_nearest",), field="numerator", control=True),
    Metric("phash_rate", "share of query rows passing the pHash/dHash screen rule (radius k)",
           ("near_duplicate",), ("hash_screen",), control=True),
    Metric("group_overlap_rate", "share of traceable query rows whose group also occurs on "
           "the reference side", ("group",), ("group_overlap", "group overlap"), (("overlap",),)),
    Metric("header_probe_ba", "balanced accuracy of the header-only probe (largest of within "
           "pool and cross split)", ("provenance", "probe"), (), (("header",),), unit=None,
           pool_wide=True),
    Metric("image_stats_probe_ba", "balanced accuracy of the image-statistics probe (largest "
           "of within pool and cross split): intensity statistics alone predicting the label",
           ("provenance",), (), (("image_stats_probe",),), unit=None, pool_wide=True),
    Metric("quality_label_v", "largest Cramér's V between an image-quality flag and the label",
           ("quality",), ("quality_flag_label_association",), unit="row", pool_wide=True),
    Metric("partition_auc", "out-of-fold AUC of the partition classifier (train pool vs "
           "query)", ("provenance", "probe", "shift"), (),
           (("partition", "auc"), ("partition",)), unit=None),
    Metric("containment_rate", "share of external-corpus rows with a byte-identical or "
           "NCC ≥ τ counterpart in the audited training rows",
           ("identity", "near_duplicate", "containment"), ("containment_byte_or_ncc",),
           (("containment",),)),
    Metric("layers_not_assessed", "number of layers that could not run (missing module or "
           "failure)", (), field="layers", unit=None),
)}

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


def metric_table() -> str:
    """The ``--fail-on`` metrics, one per line, for help texts and error messages."""
    return "\n".join(f"  {m.help_line()}" for m in METRICS.values())


def parse_condition(text: str) -> Condition:
    """Parse ``metric op value`` (ops ``> >= < <= == !=``; a value may end in ``%``).

    Raises
    ------
    InputError
        When the text does not parse or names an unknown metric (the message lists them).
    """
    match = _CONDITION.match(text or "")
    if not match:
        raise InputError(
            f"--fail-on {text!r}: expected 'metric op value' with op one of > >= < <= == != "
            f"(e.g. 'ncc_rate>0.01'); metrics:\n{metric_table()}"
        )
    name, op, raw = match.groups()
    if name not in METRICS:
        raise InputError(f"--fail-on {text!r}: unknown metric {name!r}; valid metrics:\n"
                         f"{metric_table()}")
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError as exc:
        raise InputError(f"--fail-on {text!r}: {raw!r} is not a number") from exc
    return Condition(text=text.strip(), metric=name, op=op, threshold=value)


def record_text(record: Mapping[str, Any]) -> str:
    pred = record.get("predicate") or {}
    return f"{record.get('id')} {pred.get('name')}".lower()


def is_control(record: Mapping[str, Any]) -> bool:
    details = record.get("details") or {}
    return ("control" in str(record.get("id", "")).lower()
            or details.get("role") == "control"
            or (record.get("boundary") or {}).get("kind") == "control")


def metric_records(metric: Metric, records: Iterable[Mapping[str, Any]],
                   boundaries: Sequence[str] | None = None) -> list[Mapping[str, Any]]:
    """The completed records a metric reads (first matching word alternative wins)."""
    queried = {str(b).split(" → ")[0] for b in boundaries or ()}
    pool = [r for r in records
            if r.get("status") in ("completed", "partial")
            and str(r.get("layer", "")).lower().startswith(metric.layers)
            and not is_control(r)
            and r.get(metric.field) is not None
            and (boundaries is None or (r.get("boundary") or {}).get("name") in boundaries
                 or (metric.pool_wide and not r.get("boundary"))
                 or (metric.within and _inside(r.get("boundary"), queried)))
            and not (metric.trusted_only
                     and (r.get("details") or {}).get("trusted", True) is False)]
    pool = [r for r in pool if metric.unit is None or r.get("unit") in (None, metric.unit)]
    return _matching(metric, pool)


def _inside(boundary: Mapping[str, Any] | None, queried: set[str]) -> bool:
    """Whether a record's boundary is one population against itself, and that population is
    the query side of an audited boundary."""
    if not boundary:
        return False
    q = str((boundary.get("query") or {}).get("name"))
    return q == str((boundary.get("reference") or {}).get("name")) and q in queried


def _matching(metric: Metric, pool: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records of ``pool`` a metric names: those of its predicates, else those of the
    first word alternative that any record's id or predicate name contains."""
    exact = [r for r in pool if (r.get("predicate") or {}).get("name") in metric.predicates]
    if exact:
        return exact
    for words in metric.words:
        hits = [r for r in pool if all(w in record_text(r) for w in words)]
        if hits:
            return hits
    return []


def evaluate_conditions(conditions: Sequence[Condition], records: Sequence[Mapping[str, Any]],
                        layers: Sequence[Mapping[str, Any]] = (),
                        boundaries: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Evaluate each condition on the records: the metric's value is the largest over the
    audited boundaries. A metric no completed record measured has value ``None`` and its
    condition does not hold (it is shown as *not measured*; gate on
    ``layers_not_assessed>0`` to fail when a layer could not run)."""
    out = []
    for cond in conditions:
        metric = METRICS[cond.metric]
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
                   "records": ids}
        if metric.control and metric.field != "layers":
            outcome["control"] = control_status(hits)
        out.append(outcome)
    return out


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


def find_record(records, metric: str, boundary: str) -> Mapping[str, Any] | None:
    """The record a metric reads on one boundary, whatever its status (so a verdict can say
    *not assessed* instead of staying silent)."""
    m = METRICS[metric]
    mine = [r for r in records if (r.get("boundary") or {}).get("name") == boundary
            and str(r.get("layer", "")).lower().startswith(m.layers) and not is_control(r)]
    return next(iter(_matching(m, mine)), None)


def records_on(records, boundary: str | None, *, predicate: str | None = None,
               prefix: str = "", done: bool = False) -> list[Mapping[str, Any]]:
    """The records of one boundary (``None``: the pool-wide ones) whose predicate name is
    ``predicate``, or starts with ``prefix``, in document order; with ``done``, only the
    completed or partial ones."""
    out = []
    for r in records:
        name = str((r.get("predicate") or {}).get("name", ""))
        if ((r.get("boundary") or {}).get("name") == boundary
                and (name == predicate if predicate is not None else name.startswith(prefix))
                and (not done or r.get("status") in ("completed", "partial"))):
            out.append(r)
    return out


def label_conflicts_found(records, boundary: str, *, trusted_only: bool
                          ) -> list[Mapping[str, Any]]:
    """The completed label-conflict records of a boundary that count at least one row; with
    ``trusted_only``, only those of a predicate that may be counted (``details.trusted``)."""
    return [r for r in records_on(records, boundary, prefix="label_conflict_", done=True)
            if r.get("numerator")
            and (not trusted_only or (r.get("details") or {}).get("trusted", True))]
