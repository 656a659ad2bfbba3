"""How the provenance layer (METHODS §4) reads: its "what this means" rules (records of one
boundary read together, a sentence or ``None``) and its verdict section (lines from the
finished document). The layer declares them (``rules``, ``verdicts``); the audit orders them
(:mod:`splitscope.core.meaning`, :mod:`splitscope.core.verdicts`)."""

from __future__ import annotations

from splitscope.provenance.predicates import (
    HEADER_PROBE_CROSS,
    HEADER_PROBE_WITHIN,
    HEADER_PROBES,
    IMAGE_STATS_CROSS,
    IMAGE_STATS_WITHIN,
    LAYER,
    PARTITION,
    PROBE_SCORE,
)
from splitscope.records.findings import EVIDENCE, INDICATION, Finding, scored
from splitscope.records.metrics import Rule, Verdict, above_chance, completed_record, is_control


def _encoded_differently(b, records) -> str | None:
    within = completed_record(records, HEADER_PROBE_WITHIN, None, LAYER)
    cross = completed_record(records, HEADER_PROBE_CROSS, b["name"], LAYER)
    part = completed_record(records, PARTITION, b["name"], LAYER)
    if not (above_chance(within) and above_chance(cross) is False and above_chance(part, 0.5)):
        return None
    return (f"header fields predict the label inside the pool (balanced accuracy "
            f"{within['estimate']:.3f}) but not across the split ({cross['estimate']:.3f}, "
            f"chance {cross['details']['chance']:.3g}), while image content tells "
            f"{b['query']['name']} from {b['reference']['name']} (partition AUC "
            f"{part['estimate']:.3f}): the {b['query']['name']} split was built or encoded "
            "differently, and a score on it partly measures that shift")


def _shortcut_transfers(b, records) -> str | None:
    within = completed_record(records, HEADER_PROBE_WITHIN, None, LAYER)
    cross = completed_record(records, HEADER_PROBE_CROSS, b["name"], LAYER)
    if not (above_chance(within) and above_chance(cross)):
        return None
    return (f"file headers alone predict the label across the split (balanced accuracy "
            f"{cross['estimate']:.3f} vs chance {cross['details']['chance']:.3g}): a model can "
            f"score on {b['query']['name']} from how files were made; compare it with this "
            "header-only probe")


def _acquisition_shortcut(b, records) -> str | None:
    within = completed_record(records, IMAGE_STATS_WITHIN, None, LAYER)
    cross = completed_record(records, IMAGE_STATS_CROSS, b["name"], LAYER)
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
         "above 0.5", _encoded_differently, rank=40),
    Rule("shortcut_transfers", "both the within-pool and the cross-split header probe's "
         "intervals lie above chance", _shortcut_transfers, rank=50),
    Rule("acquisition_shortcut", "both the within-pool and the cross-split image-statistics "
         "probe's intervals lie above chance", _acquisition_shortcut, rank=60),
)


def _header_probe_lines(doc) -> list[str]:
    records, lines = doc.get("records") or [], []
    names = {b["name"] for b in doc.get("boundaries") or []}
    for r in records:
        if r.get("layer") != LAYER or is_control(r):
            continue
        if (r.get("predicate") or {}).get("name") not in HEADER_PROBES or r.get("estimate") is None:
            continue
        if r.get("status") not in ("completed", "partial"):
            continue
        bname = (r.get("boundary") or {}).get("name")
        if bname is not None and bname not in names:
            continue
        unc = r.get("uncertainty") or {}
        interval = (f", {100 * (unc.get('level') or 0.95):g}% interval [{unc['low']:.3f}, "
                    f"{unc['high']:.3f}]"
                    if unc.get("low") is not None and unc.get("high") is not None else "")
        chance = (r.get("details") or {}).get("chance")
        chance_txt = f", chance {chance:.3g}" if isinstance(chance, (int, float)) else ""
        lines.append(f"{r.get('title') or r['id']}{f' ({bname})' if bname else ''}: "
                     f"balanced accuracy {r['estimate']:.3f}{interval}{chance_txt}.")
    return lines


#: the provenance layer's verdict section (the audit orders it, splitscope.core.verdicts)
VERDICTS: tuple[Verdict, ...] = (Verdict("header_probe", _header_probe_lines,
                                                         rank=100),)


def _cross(predicate: str, what: str = PROBE_SCORE, baseline: float | None = None):
    """How a probe's cross-split record on a boundary measures its finding."""
    def measure(doc, b):
        record = completed_record(doc.get("records") or [], predicate, b["name"], LAYER)
        return scored(record, what, baseline)
    return measure


#: the provenance layer's findings (ranked with every layer's in splitscope.core.verdicts),
#: each a probe's score against its reference, sized by its interval's lower bound above it
FINDINGS: tuple[Finding, ...] = (
    Finding("header shortcut", measure=_cross(HEADER_PROBE_CROSS), tier=EVIDENCE, panel=True,
            phrase="file headers alone predict the label ({share})",
            says="Header shortcut: file headers alone, without a pixel, predict the {query} "
                 "labels from {reference} ({share}, {interval}), so a model can score on "
                 "{query} from how files were made.",
            action="Compare every model's {query} score with the header-only probe's "
                   "(lists/header_probe_importance.csv names the fields) and strip or "
                   "normalise those fields before training.", rank=30),
    Finding("image-statistics shortcut", measure=_cross(IMAGE_STATS_CROSS), tier=INDICATION,
            panel=True,
            phrase="intensity statistics without anatomy predict the label ({share})",
            says="Image-statistics shortcut: intensity statistics without anatomy predict "
                 "the {query} labels from {reference} ({share}, {interval}); unconfirmed, "
                 "since a finding can itself change these statistics.",
            action="Compare a model's {query} score with the image-statistics probe's "
                   "(lists/image_stats_probe_importance.csv).", rank=40),
    Finding("train/test shift", measure=_cross(PARTITION, "AUC", 0.5), tier=INDICATION,
            panel=True,
            phrase="image content tells {query} from {reference} ({share})",
            says="Shift: a classifier tells {query} rows from {reference} rows by image "
                 "content ({share}, {interval}), so the two sides were drawn or made "
                 "differently.",
            action="Check how {query} was collected against {reference} before reading a "
                   "score on it as a score on {reference}'s population.", rank=50),
)
