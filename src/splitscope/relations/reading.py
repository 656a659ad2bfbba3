""""What this means" rules of the identity and near-duplicate layers (METHODS §2): each reads the records of one
boundary together and returns a sentence or ``None``; the layer declares them (``rules``) and
the audit orders them (:mod:`splitscope.audit.meaning`)."""

from __future__ import annotations

from splitscope.records.format import percent
from splitscope.records.metrics import (
    Rule,
    completed_record,
    label_conflicts_found,
    records_on,
)
from splitscope.relations.predicates import DEDUP_SPLIT, HASH_PREFIX, NCC_NEAREST, SHA256

#: near-twin share of the query split from which scores partly measure recall of training
#: images (1 %: a share a reader would not shrug off as a rounding of the headline score)
MEMORISATION_MIN_RATE = 0.01


def _label_noise(b, records) -> str | None:
    found = label_conflicts_found(records, b["name"], trusted_only=True)
    if not found:
        return None
    n = max(r["numerator"] for r in found)
    return (f"at least {n:,} {b['query']['name']} row(s) are the same image as a "
            f"{b['reference']['name']} row under another label: label noise that no model "
            "can score right under both labels; settle the labels before comparing models")


def _memorisation(b, records) -> str | None:
    ncc = completed_record(records, NCC_NEAREST, b["name"])
    if ncc is None or not ncc.get("denominator"):
        return None
    rate = ncc["numerator"] / ncc["denominator"]
    if rate < MEMORISATION_MIN_RATE:
        return None
    dedup = completed_record(records, DEDUP_SPLIT, b["name"])
    clean = (f"; report it beside the score on the deduplicated split ({dedup['numerator']:,} "
             f"of {dedup['denominator']:,} rows)") if dedup is not None else ""
    return (f"{percent(rate)} of {b['query']['name']} rows have a near-twin in "
            f"{b['reference']['name']}, so a score on {b['query']['name']} partly measures "
            f"recall of training images{clean}")


def _hash_unreliable(b, records) -> str | None:
    bad = [r for r in records_on(records, b["name"], prefix=HASH_PREFIX, done=True)
           if ((r.get("details") or {}).get("control") or {}).get("unreliable")]
    if not bad:
        return None
    rate = max(r["details"]["control"]["rate"] for r in bad)
    return (f"the hash rules flag up to {percent(rate)} of the clean control: on this modality "
            "their counts are no evidence of copies; read NCC and its threshold sweep instead")


def _clean(b, records) -> str | None:
    byte = completed_record(records, SHA256, b["name"])
    ncc = completed_record(records, NCC_NEAREST, b["name"])
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
    Rule("hash_unreliable", "a hash rule flags more of the negative control than its bound",
         _hash_unreliable),
    Rule("clean", "the byte-identity and NCC records of the boundary both count zero rows",
         _clean),
)
