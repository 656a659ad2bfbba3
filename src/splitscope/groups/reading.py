"""How the group layer (METHODS §3) reads: its "what this means" rule (records of one boundary
read together, a sentence or ``None``) and its verdict sections (lines from the finished
document). The layer declares them (``rules``, ``verdicts``); the audit orders them
(:mod:`splitscope.core.meaning`, :mod:`splitscope.core.verdicts`)."""

from __future__ import annotations

from splitscope.groups.predicates import (
    GROUP_OVERLAP,
    KEY_SOURCES,
    LAYER,
    METRICS,
    PROPOSED_GROUP_KEY,
)
from splitscope.records.findings import INDICATION, Finding, shared
from splitscope.records.format import count, percent, percent_of
from splitscope.records.ids import slug
from splitscope.records.metrics import (
    Rule,
    Segment,
    Verdict,
    completed_record,
    done,
    find_record,
)


def _patients_straddle(b, records) -> str | None:
    g = completed_record(records, GROUP_OVERLAP, b["name"], LAYER)
    if g is None or not g.get("numerator"):
        return None
    return (f"{percent(g['numerator'] / g['denominator'])} of traceable {b['query']['name']} rows "
            f"share a patient, video or lesion with {b['reference']['name']}: scores are not "
            "group-level; re-evaluate on a group-disjoint split (lists/resplit)")


RULES: tuple[Rule, ...] = (
    Rule("patients_straddle", "the group-overlap record counts at least one affected row",
         _patients_straddle, rank=30),
)


def _overlap_lines(doc) -> list[str]:
    records, lines = doc.get("records") or [], []
    for b in doc.get("boundaries") or []:
        rec = find_record(records, METRICS["group_overlap_rate"], b["name"])
        if rec is None:
            continue
        if rec.get("status") not in ("completed", "partial") or not rec.get("denominator"):
            lines.append(f"Group overlap {b['name']}: {rec.get('status')} — "
                         f"{rec.get('reason') or 'no traceable query row'}")
            continue
        cov = rec.get("coverage") or {}
        traced = (f"; traceable {count(cov.get('traceable'))} of {count(cov.get('total'))} "
                  f"{b['query']['name']} rows") if cov.get("total") is not None else ""
        lines.append(
            f"{percent_of(rec.get('numerator') or 0, rec['denominator'])} of traceable "
            f"{b['query']['name']} rows ({count(rec.get('numerator'))} of "
            f"{count(rec['denominator'])}) share a group with {b['reference']['name']}"
            f"{traced}.")
    return lines


def proposed_sentence(query: str, reference: str, key: str, source: str, numerator: int,
                      denominator: int, confirm: str) -> str:
    """The overlap under a proposed group key in one sentence that says it is unconfirmed
    (the record's conclusion opens with it, the verdict line is it)."""
    return (f"Proposed group key (unconfirmed) {key} from {KEY_SOURCES.get(source, source)}: "
            f"{count(numerator)} of {count(denominator)} traceable {query} rows "
            f"({percent_of(numerator, denominator)}) share a key with {reference}; confirm "
            f"with {confirm}")


def _proposed(records) -> list:
    return [r for r in records if r.get("layer") == LAYER and r.get("status") == "proposed"
            and (r.get("predicate") or {}).get("name") == PROPOSED_GROUP_KEY]


def _proposed_lines(doc) -> list[str]:
    """The overlap under a group key proposed from the names, per boundary, as unconfirmed
    (METHODS §3.6); never read as a measured overlap."""
    lines = []
    for r in _proposed(doc.get("records") or []):
        b, params = r.get("boundary") or {}, (r.get("predicate") or {}).get("params") or {}
        if not b or not r.get("denominator"):
            continue
        lines.append(proposed_sentence(
            b["query"]["name"], b["reference"]["name"],
            params.get("regex") or params.get("candidate") or "?", params.get("source", ""),
            r.get("numerator") or 0, r["denominator"],
            (r.get("details") or {}).get("confirm") or "a group key") + ".")
    return lines


def _not_run_lines(doc) -> list[str]:
    """Why group overlap was not measured, when no boundary has its record and no key was
    proposed from the names (a proposal says it instead)."""
    records = doc.get("records") or []
    if any(find_record(records, METRICS["group_overlap_rate"], b["name"]) is not None
           for b in doc.get("boundaries") or []) or _proposed(records):
        return []
    for r in records:
        if r.get("layer") == LAYER and (r.get("predicate") or {}).get("name") == GROUP_OVERLAP \
                and not done(r):
            return [f"Group overlap: {r.get('status')} — {r.get('reason')}"]
    return []


#: the group layer's verdict sections (the audit orders them, splitscope.core.verdicts)
VERDICTS: tuple[Verdict, ...] = (Verdict("group_overlap", _overlap_lines, rank=60),
                                 Verdict("proposed_group_key", _proposed_lines, rank=61),
                                 Verdict("group_overlap_not_run", _not_run_lines, rank=80))


#: the group layer's findings (ranked with every layer's in splitscope.core.verdicts)
FINDINGS: tuple[Finding, ...] = (
    Finding("shared groups", metric="group_overlap_rate", panel=True,
            phrase="{percent} of traceable {query} rows ({numerator} of {denominator}) share "
                   "a group (patient, video) with {reference}",
            says="Shared groups: {share} traceable {query} rows belong to a group (patient, "
                 "video) that also has rows in {reference}, so a model can recognise the "
                 "group instead of the finding.",
            action="Re-split by group (lists/resplit.csv is a group-disjoint split) and score "
                   "{query} without the shared groups.", rank=60),
    Finding(PROPOSED_GROUP_KEY, measure=lambda doc, b: _proposed_share(doc, b),
            tier=INDICATION, panel=True,
            phrase="under a group key proposed from the names ({regex}, unconfirmed), "
                   "{percent} of traceable {query} rows ({numerator} of {denominator}) share a "
                   "group with {reference}",
            says="Proposed group key (unconfirmed): under {regex}, found in the {source}, "
                 "{share} traceable {query} rows share a group with {reference}; if it is a "
                 "patient or video id, the split leaks those groups.",
            action="Confirm the proposed key ({confirm}) if it names patients or videos: the "
                   "overlap is then measured, and lists/resplit.csv gives a group-disjoint "
                   "split.", rank=70),
)


def _proposed_share(doc, b) -> dict | None:
    """The share finding of the proposed key's record on ``b``, with its regex, source and
    how to confirm it."""
    mine = [r for r in _proposed(doc.get("records") or [])
            if (r.get("boundary") or {}).get("name") == b["name"]]
    if not mine:
        return None
    r = mine[0]
    params = (r.get("predicate") or {}).get("params") or {}
    return shared(r, regex=str(params.get("regex") or params.get("candidate") or "?"),
                  source=str(params.get("source") or "names"),
                  confirm=str((r.get("details") or {}).get("confirm") or "a group flag"))


def _shared_group(tables, boundary: str):
    """Whether each query row's group also has rows on the boundary's reference side."""
    table = tables.get(f"group_overlap_{slug(boundary)}")
    if table is None or not len(table) or "affected" not in table:
        return None
    return table.drop_duplicates("row").set_index("row")["affected"]


#: the group layer's category of the composition figure (splitscope.core.composition)
SEGMENTS: tuple[Segment, ...] = (Segment("shared group", "group_shared", _shared_group,
                                         "shared group", rank=40),)
