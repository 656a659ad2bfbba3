"""The score card (METHODS §6.2): the seven details that travel with a headline score.

Each detail is filled from the audit records that measured it (named by the layer that wrote
them and their predicate) or marked ``not reported``. The card never invents a value: a detail is ``measured`` only when a
``completed`` or ``partial`` record supports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NOT_REPORTED = "not reported"


@dataclass(frozen=True)
class Detail:
    """One score-card detail: its key and its wording. The records that measure it are named
    by the layers that write them (a layer's ``scorecard``: detail key → predicate names, in
    its package's ``predicates.py``); with ``interval``, any record of a layer that names the
    detail also measures it when it has an interval."""

    key: str
    detail: str
    interval: bool = False


DETAILS: tuple[Detail, ...] = (
    Detail("evaluation_split", "Evaluation split (official, deduplicated, external)"),
    Detail("training_policy", "Backbone training policy (frozen or fine-tuned)"),
    Detail("threshold", "Threshold and how it was chosen"),
    Detail("imbalance_metric", "An imbalance-aware metric (e.g. balanced accuracy)"),
    Detail("calibration", "Where calibration was fitted and evaluated"),
    Detail("uncertainty", "Uncertainty or a paired comparison", interval=True),
    Detail("shift_check", "A train-to-test shift check"),
)

#: layer name → detail key → the predicate names of its records that measure the detail
Measures = Mapping[str, Mapping[str, Sequence[str]]]


def _matches(record: Mapping[str, Any], detail: Detail, measures: Measures) -> bool:
    if record.get("status") not in ("completed", "partial"):
        return False
    named = (measures.get(str(record.get("layer"))) or {}).get(detail.key)
    if named is None:
        return False
    if (record.get("predicate") or {}).get("name") in named:
        return True
    unc = record.get("uncertainty") or {}
    return detail.interval and unc.get("low") is not None and unc.get("high") is not None


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def describe(record: Mapping[str, Any]) -> str:
    """One line for a record: title, estimate with numerator/denominator and unit, interval."""
    parts = [str(record.get("title") or record.get("id"))]
    est = record.get("estimate")
    num, den = record.get("numerator"), record.get("denominator")
    if est is not None:
        unit = f" {record['unit']}" if record.get("unit") else ""
        if num is not None and den and abs(est - num / den) < 1e-9:
            s = f"= {100 * est:.3g}% ({_fmt(num)} of {_fmt(den)}{unit})"
        elif den:
            s = f"= {_fmt(est)} (n = {_fmt(den)}{unit})"
        else:
            s = f"= {_fmt(est)}"
        parts.append(s)
    unc = record.get("uncertainty") or None
    if unc and unc.get("low") is not None and unc.get("high") is not None:
        parts.append(f"[{_fmt(unc['low'])}, {_fmt(unc['high'])}] {unc.get('kind', '')}".rstrip())
    boundary = record.get("boundary") or None
    if boundary:
        parts.append(f"on {boundary.get('name')}")
    return " ".join(parts)


def dedup_effect(records: list[Mapping[str, Any]], predicates: Sequence[str]) -> str | None:
    """Deduplication sensitivity BA(official) − BA(deduplicated) per prediction entry
    (METHODS §5.8), from the balanced-accuracy records (of ``predicates``, those the layers
    name for the imbalance-aware metric) whose view is ``official`` and ``deduplicated``;
    ``None`` when there is no such pair."""
    by_entry: dict[str, dict[str, float]] = {}
    for r in records:
        if r.get("status") not in ("completed", "partial") or r.get("estimate") is None:
            continue
        pred = r.get("predicate") or {}
        if pred.get("name") not in predicates:
            continue
        view = ((pred.get("params") or {}).get("view") or {}).get("name")
        entry = str(r.get("title", "")).split(":", 1)[0]
        if view in ("official", "deduplicated"):
            by_entry.setdefault(entry, {})[view] = float(r["estimate"])
    parts = [f"{e} {v['official'] - v['deduplicated']:+.3f}" for e, v in by_entry.items()
             if "official" in v and "deduplicated" in v]
    if not parts:
        return None
    return "deduplication sensitivity BA(official) − BA(deduplicated): " + ", ".join(parts)


def score_card(records: Iterable[Mapping[str, Any]],
               measures: Measures | None = None) -> list[dict[str, Any]]:
    """The seven score-card details from audit records (dicts as in ``audit.json``).

    Parameters
    ----------
    records : iterable of mapping
        Record dicts (``AuditRecord.to_dict()``).
    measures : mapping, optional
        Per layer name, per detail key, the predicates of its records that measure the
        detail (the layers' ``scorecard``; the audit passes those of its registered layers,
        :func:`splitscope.core.protocol.scorecard_measures`). None: no record measures any.

    Returns
    -------
    list of dict
        One dict per detail, in the order of METHODS §6.2, with ``key``, ``detail``,
        ``status`` (``measured`` or ``not reported``), ``value`` (what was measured, or
        ``not reported``), ``effect`` (the largest measured effect in words, or ``None``) and
        ``records`` (ids of the supporting records).
    """
    records = list(records)
    measures = measures or {}
    card = []
    for detail in DETAILS:
        hits = [r for r in records if _matches(r, detail, measures)]
        if not hits:
            card.append({"key": detail.key, "detail": detail.detail, "status": NOT_REPORTED,
                         "value": NOT_REPORTED, "effect": None, "records": []})
            continue
        shown = hits[:3]
        value = "; ".join(describe(r) for r in shown)
        if len(hits) > len(shown):
            value += f"; and {len(hits) - len(shown)} more record(s)"
        effect = dedup_effect(records, [p for m in measures.values()
                                        for p in m.get("imbalance_metric", ())]) \
            if detail.key == "evaluation_split" else None
        for r in hits:
            if effect is None and r.get("conclusion"):
                effect = str(r["conclusion"])
                break
        card.append({"key": detail.key, "detail": detail.detail, "status": "measured",
                     "value": value, "effect": effect, "records": [str(r["id"]) for r in hits]})
    return card
