""""What this means" rules of the group layer (METHODS §3): each reads the records of one
boundary together and returns a sentence or ``None``; the layer declares them (``rules``) and
the audit orders them (:mod:`splitscope.audit.meaning`)."""

from __future__ import annotations

from splitscope.records.format import percent
from splitscope.records.metrics import (
    Rule,
    done,
)


def _patients_straddle(b, records) -> str | None:
    g = next((r for r in records if str(r.get("id", "")).startswith("group.overlap[")
              and done(r) and (r.get("boundary") or {}).get("name") == b["name"]), None)
    if g is None or not g.get("numerator"):
        return None
    return (f"{percent(g['numerator'] / g['denominator'])} of traceable {b['query']['name']} rows "
            f"share a patient, video or lesion with {b['reference']['name']}: scores are not "
            "group-level; re-evaluate on a group-disjoint split (lists/resplit)")


RULES: tuple[Rule, ...] = (
    Rule("patients_straddle", "the group-overlap record counts at least one affected row",
         _patients_straddle),
)
