""""What this means": rules that read several records of one boundary together.

A single rate rarely says what a score on the audited split measures; two signals side by side
often do (a header probe at chance across the split while the partition classifier separates
the two sides means the sides were built differently). Each rule below is one function over
the records of a boundary that returns a sentence or ``None``; :data:`RULES` lists them with
the condition they test, in words, so the report and the documentation can show both. A rule
reads only completed (or partial) records and never invents a number: every figure it quotes
comes from a record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from splitscope.audit.conditions import label_conflicts_found, records_on

__all__ = ["MEMORISATION_MIN_RATE", "RULES", "Rule", "meaning"]

#: near-twin share of the query split from which scores partly measure recall of training
#: images (1 %: a share a reader would not shrug off as a rounding of the headline score)
MEMORISATION_MIN_RATE = 0.01

Records = Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Rule:
    """One interpretation rule: its name, the condition it tests (documented), and the
    function that returns its sentence for a boundary or ``None``."""

    name: str
    condition: str
    says: Callable[[Mapping[str, Any], Records], str | None]


def _done(r: Mapping[str, Any] | None) -> bool:
    return r is not None and r.get("status") in ("completed", "partial")


def _pred(records: Records, name: str, boundary: str | None) -> Mapping[str, Any] | None:
    """The completed record of predicate ``name`` on ``boundary`` (None: pool-wide)."""
    return next(iter(records_on(records, boundary, predicate=name, done=True)), None)


def _by_id(records: Records, prefix: str, boundary: str | None) -> Mapping[str, Any] | None:
    for r in records:
        if (str(r.get("id", "")).startswith(prefix) and _done(r)
                and (r.get("boundary") or {}).get("name") == boundary):
            return r
    return None


def _above(r: Mapping[str, Any] | None, chance: float | None = None) -> bool | None:
    """Whether an estimate's interval lies above chance (None when not measured)."""
    if r is None:
        return None
    low = (r.get("uncertainty") or {}).get("low")
    ref = chance if chance is not None else (r.get("details") or {}).get("chance")
    if low is None or ref is None:
        return None
    return bool(low > ref)


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def _encoded_differently(b, records) -> str | None:
    within = _by_id(records, "provenance.header_probe.within_pool", None)
    cross = _by_id(records, "provenance.header_probe.cross_split", b["name"])
    part = _by_id(records, "provenance.partition[", b["name"])
    if not (_above(within) and _above(cross) is False and _above(part, 0.5)):
        return None
    return (f"header fields predict the label inside the pool (balanced accuracy "
            f"{within['estimate']:.3f}) but not across the split ({cross['estimate']:.3f}, "
            f"chance {cross['details']['chance']:.3g}), while image content tells "
            f"{b['query']['name']} from {b['reference']['name']} (partition AUC "
            f"{part['estimate']:.3f}): the {b['query']['name']} split was built or encoded "
            "differently, and a score on it partly measures that shift")


def _shortcut_transfers(b, records) -> str | None:
    within = _by_id(records, "provenance.header_probe.within_pool", None)
    cross = _by_id(records, "provenance.header_probe.cross_split", b["name"])
    if not (_above(within) and _above(cross)):
        return None
    return (f"file headers alone predict the label across the split (balanced accuracy "
            f"{cross['estimate']:.3f} vs chance {cross['details']['chance']:.3g}): a model can "
            f"score on {b['query']['name']} from how files were made; compare it with this "
            "header-only probe")


def _acquisition_shortcut(b, records) -> str | None:
    within = _by_id(records, "provenance.image_stats_probe.within_pool", None)
    cross = _by_id(records, "provenance.image_stats_probe.cross_split", b["name"])
    if not (_above(within) and _above(cross)):
        return None
    top = ", ".join((within.get("details") or {}).get("top_fields") or []) or "no single one"
    return (f"intensity statistics alone, without anatomy ({top}), predict the label across "
            f"the split (balanced accuracy {cross['estimate']:.3f} vs chance "
            f"{cross['details']['chance']:.3g}): a model can score on {b['query']['name']} from "
            "how images were exposed, processed or padded, unless the finding itself changes "
            "these statistics; compare a model's score with this image-statistics probe")


def _memorisation(b, records) -> str | None:
    ncc = _pred(records, "ncc_nearest", b["name"])
    if ncc is None or not ncc.get("denominator"):
        return None
    rate = ncc["numerator"] / ncc["denominator"]
    if rate < MEMORISATION_MIN_RATE:
        return None
    dedup = _pred(records, "dedup_split", b["name"])
    clean = (f"; report it beside the score on the deduplicated split ({dedup['numerator']:,} "
             f"of {dedup['denominator']:,} rows)") if dedup is not None else ""
    return (f"{_pct(rate)} of {b['query']['name']} rows have a near-twin in "
            f"{b['reference']['name']}, so a score on {b['query']['name']} partly measures "
            f"recall of training images{clean}")


def _patients_straddle(b, records) -> str | None:
    g = next((r for r in records if str(r.get("id", "")).startswith("group.overlap[")
              and _done(r) and (r.get("boundary") or {}).get("name") == b["name"]), None)
    if g is None or not g.get("numerator"):
        return None
    return (f"{_pct(g['numerator'] / g['denominator'])} of traceable {b['query']['name']} rows "
            f"share a patient, video or lesion with {b['reference']['name']}: scores are not "
            "group-level; re-evaluate on a group-disjoint split (lists/resplit)")


def _label_noise(b, records) -> str | None:
    found = label_conflicts_found(records, b["name"], trusted_only=True)
    if not found:
        return None
    n = max(r["numerator"] for r in found)
    return (f"at least {n:,} {b['query']['name']} row(s) are the same image as a "
            f"{b['reference']['name']} row under another label: label noise that no model "
            "can score right under both labels; settle the labels before comparing models")


def _hash_unreliable(b, records) -> str | None:
    bad = [r for r in records_on(records, b["name"], prefix="hash_", done=True)
           if ((r.get("details") or {}).get("control") or {}).get("unreliable")]
    if not bad:
        return None
    rate = max(r["details"]["control"]["rate"] for r in bad)
    return (f"the hash rules flag up to {_pct(rate)} of the clean control: on this modality "
            "their counts are no evidence of copies; read NCC and its threshold sweep instead")


def _clean(b, records) -> str | None:
    byte = _pred(records, "sha256", b["name"])
    ncc = _pred(records, "ncc_nearest", b["name"])
    if byte is None or ncc is None or byte.get("numerator") or ncc.get("numerator"):
        return None
    return (f"no byte copy and no near-twin (NCC) of a {b['reference']['name']} row was found "
            f"in {b['query']['name']}; this does not exclude semantic near-duplicates "
            "(supply embeddings) or shared patients without group keys")


RULES: tuple[Rule, ...] = (
    Rule("label_noise", "a trusted label-conflict record of the boundary (byte or pixel "
         "identity, NCC, or a hash rule a negative control found reliable) counts at least one "
         "row",
         _label_noise),
    Rule("memorisation", "the NCC nearest-rule rate of the boundary is at least "
         f"{MEMORISATION_MIN_RATE:.0%} of the query rows", _memorisation),
    Rule("patients_straddle", "the group-overlap record counts at least one affected row",
         _patients_straddle),
    Rule("encoded_differently", "the within-pool header probe's interval lies above chance, "
         "the cross-split probe's does not, and the partition classifier's AUC interval lies "
         "above 0.5", _encoded_differently),
    Rule("shortcut_transfers", "both the within-pool and the cross-split header probe's "
         "intervals lie above chance", _shortcut_transfers),
    Rule("acquisition_shortcut", "both the within-pool and the cross-split image-statistics "
         "probe's intervals lie above chance", _acquisition_shortcut),
    Rule("hash_unreliable", "a hash rule flags more of the negative control than its bound",
         _hash_unreliable),
    Rule("clean", "the byte-identity and NCC records of the boundary both count zero rows",
         _clean),
)


def meaning(doc: Mapping[str, Any]) -> list[str]:
    """One "what this means" line per boundary and rule that speaks on it, in the order of
    :data:`RULES`, each naming its boundary."""
    records = doc.get("records") or []
    out = []
    for b in doc.get("boundaries") or []:
        for rule in RULES:
            text = rule.says(b, records)
            if text:
                out.append(f"{b['name']}: {text[0].upper()}{text[1:]}.")
    return out
