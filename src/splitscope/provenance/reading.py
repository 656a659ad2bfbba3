""""What this means" rules of the provenance layer (METHODS §4): each reads the records of one
boundary together and returns a sentence or ``None``; the layer declares them (``rules``) and
the audit orders them (:mod:`splitscope.audit.meaning`)."""

from __future__ import annotations

from splitscope.records.metrics import (
    Rule,
    above_chance,
    record_by_id,
)


def _encoded_differently(b, records) -> str | None:
    within = record_by_id(records, "provenance.header_probe.within_pool", None)
    cross = record_by_id(records, "provenance.header_probe.cross_split", b["name"])
    part = record_by_id(records, "provenance.partition[", b["name"])
    if not (above_chance(within) and above_chance(cross) is False and above_chance(part, 0.5)):
        return None
    return (f"header fields predict the label inside the pool (balanced accuracy "
            f"{within['estimate']:.3f}) but not across the split ({cross['estimate']:.3f}, "
            f"chance {cross['details']['chance']:.3g}), while image content tells "
            f"{b['query']['name']} from {b['reference']['name']} (partition AUC "
            f"{part['estimate']:.3f}): the {b['query']['name']} split was built or encoded "
            "differently, and a score on it partly measures that shift")


def _shortcut_transfers(b, records) -> str | None:
    within = record_by_id(records, "provenance.header_probe.within_pool", None)
    cross = record_by_id(records, "provenance.header_probe.cross_split", b["name"])
    if not (above_chance(within) and above_chance(cross)):
        return None
    return (f"file headers alone predict the label across the split (balanced accuracy "
            f"{cross['estimate']:.3f} vs chance {cross['details']['chance']:.3g}): a model can "
            f"score on {b['query']['name']} from how files were made; compare it with this "
            "header-only probe")


def _acquisition_shortcut(b, records) -> str | None:
    within = record_by_id(records, "provenance.image_stats_probe.within_pool", None)
    cross = record_by_id(records, "provenance.image_stats_probe.cross_split", b["name"])
    if not (above_chance(within) and above_chance(cross)):
        return None
    top = ", ".join((within.get("details") or {}).get("top_fields") or []) or "no single one"
    return (f"intensity statistics alone, without anatomy ({top}), predict the label across "
            f"the split (balanced accuracy {cross['estimate']:.3f} vs chance "
            f"{cross['details']['chance']:.3g}): a model can score on {b['query']['name']} from "
            "how images were exposed, processed or padded, unless the finding itself changes "
            "these statistics; compare a model's score with this image-statistics probe")


RULES: tuple[Rule, ...] = (
    Rule("encoded_differently", "the within-pool header probe's interval lies above chance, "
         "the cross-split probe's does not, and the partition classifier's AUC interval lies "
         "above 0.5", _encoded_differently),
    Rule("shortcut_transfers", "both the within-pool and the cross-split header probe's "
         "intervals lie above chance", _shortcut_transfers),
    Rule("acquisition_shortcut", "both the within-pool and the cross-split image-statistics "
         "probe's intervals lie above chance", _acquisition_shortcut),
)
