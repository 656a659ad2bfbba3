"""The audit's verdict: every registered layer's findings measured and ranked by one rule,
one plain line per boundary on whether a score can be trusted as is, at most five findings
and three actions; then the layers' detailed lines, the notes on what uncalibrated
predicates saw, on layers that did not complete and on ``--fail-on`` outcomes. Fed only by
the audit document (its records, boundaries, options and layer outcomes), so the same
document always reads the same way; it knows no layer by name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from splitscope.boundary import WITHIN_RELEASE
from splitscope.core.protocol import declared
from splitscope.records.findings import TIERS, shared
from splitscope.records.format import count as fmt_int
from splitscope.records.metrics import Verdict, metric_records

__all__ = ["findings_and_actions", "layer_verdicts", "measured_findings", "not_checked",
           "notes", "opening", "ranked", "summary_notes", "verdict", "verdicts"]

#: the findings and actions the opening shows
MOST_FINDINGS, MOST_ACTIONS = 5, 3


def layer_verdicts() -> tuple[Verdict, ...]:
    """The verdict sections the registered layers declare (``verdicts``), by ``rank``: label
    conflicts first (they make every score unreadable), then near-twins, copies, the
    deduplicated split, shared groups, containment, scores, probes and attribution."""
    return tuple(declared("verdicts"))


def verdicts(doc: Mapping[str, Any], sections: Sequence[Verdict] | None = None) -> list[str]:
    """The detailed lines, one per measurement a reader cannot misread, section by section
    in the order of ``sections`` (default :func:`layer_verdicts`, notes left out): label
    conflicts, near-twin rates with numerator, denominator and predicate, byte and pixel
    copies, the deduplicated split, group overlap, containment, balanced accuracy, header
    probes, attribution."""
    lines: list[str] = []
    for section in sections if sections is not None else layer_verdicts():
        if not section.note:
            lines.extend(section.lines(doc))
    return lines


def notes(doc: Mapping[str, Any]) -> list[str]:
    """The sections the layers mark as notes (what uncalibrated predicates saw: never a
    finding), for under the first figure."""
    return [line for section in layer_verdicts() if section.note
            for line in section.lines(doc)]


def opening(doc: Mapping[str, Any], extra_lines: Sequence[str] = ()) -> dict[str, Any]:
    """The opening of an audit document: ``verdict`` (warnings, then a line per boundary),
    ``findings`` (at most five sentences) and ``actions`` (at most three), ``notes`` (what
    uncalibrated predicates saw), the detailed ``verdicts``, ``meaning`` and ``lines`` (layers
    that did not complete, ``--fail-on`` outcomes, ``extra_lines``). Sets ``doc["findings"]``
    to every measured finding, ranked ones first."""
    from splitscope.core.meaning import meaning

    doc["findings"] = measured = measured_findings(doc)
    findings, actions = findings_and_actions(measured)
    return {"verdict": verdict(doc, measured), "findings": findings, "actions": actions,
            "notes": notes(doc), "verdicts": verdicts(doc), "meaning": meaning(doc),
            "lines": summary_notes(doc) + list(extra_lines)}


def measured_findings(doc: Mapping[str, Any]) -> list[dict]:
    """Every finding the registered layers declare, measured on every audited boundary where
    the layer's records speak (found or not): the ranked ones first (:func:`ranked`), then
    the rest in the layers' order. The first figure's panel draws them all."""
    from splitscope.core.conditions import all_metrics

    metrics, records = all_metrics(), doc.get("records") or []
    out = []
    for b in doc.get("boundaries") or []:
        for finding in declared("findings"):
            if finding.measure is not None:
                fields = finding.measure(doc, b)
            else:
                fields = _worst_share(metrics.get(finding.metric), records, b["name"])
            if fields:
                out.append(finding.written(fields, _named(b), doc.get("options")))
    top = ranked(out)
    return top + [m for m in out if not m["found"]]


def _named(b: Mapping[str, Any]) -> Mapping[str, Any]:
    """``b`` as the sentences name its sides: a release audited against itself (no split was
    found) is "the release" on both."""
    if b["query"]["name"] == b["reference"]["name"] == WITHIN_RELEASE:
        return {**b, "query": {**b["query"], "name": "release"},
                "reference": {**b["reference"], "name": "release"}}
    return b


def _worst_share(metric, records, boundary: str) -> dict | None:
    """A share finding from the worst record ``metric`` reads on ``boundary``."""
    if metric is None:
        return None
    hits = [r for r in metric_records(metric, records, [boundary]) if r.get("denominator")]
    if not hits:
        return None
    return shared(max(hits, key=lambda r: (r.get("numerator") or 0) / r["denominator"]))


def ranked(measured: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The findings that were found, by the method's one rule: label conflicts first, then
    measured contamination and shortcuts, then what needs confirming; within a tier by size
    (a share of rows, or the interval's lower bound above chance), largest first; ties keep
    the layers' order."""
    order = {tier: i for i, tier in enumerate(TIERS)}
    return sorted((dict(m) for m in measured if m["found"]),
                  key=lambda m: (order[m["tier"]], -m["size"]))


def verdict(doc: Mapping[str, Any], measured: Sequence[Mapping[str, Any]]) -> list[str]:
    """The warnings, then one plain line per audited boundary: whether a score on its query
    side can be trusted as is, naming the largest finding (and the largest of another tier);
    or that the checks that ran found nothing, and what was not checked."""
    lines = warnings(doc)
    for b in doc.get("boundaries") or []:
        mine = [m for m in measured if m["boundary"] == b["name"]]
        found = [m for m in mine if m["found"]]
        q, ref = _named(b)["query"]["name"], _named(b)["reference"]["name"]
        if b["query"]["name"] == WITHIN_RELEASE:
            q = "any split drawn from this release"
        if found:
            also = next((m for m in found[1:] if m["tier"] != found[0]["tier"]), None)
            tail = f"; also {also['phrase']}" if also else ""
            lines.append(f"Do not trust a score on {q} as is: {found[0]['phrase']}{tail}.")
        elif not mine:
            lines.append(f"Nothing was measured on {q} against {ref}, so this audit cannot "
                         f"say whether a score on {q} can be trusted; not checked: "
                         f"{not_checked(doc)}.")
        else:
            ran = ", ".join(dict.fromkeys(m["finding"] for m in mine))
            what = ("inside the release" if b["query"]["name"] == WITHIN_RELEASE
                    else f"of {q} by {ref}")
            lines.append(f"No contamination {what} found by the checks that ran ({ran}); "
                         f"not checked: {not_checked(doc)}.")
    if not doc.get("boundaries"):
        lines.append("No boundary was audited (no two sides to compare), so this audit says "
                     "nothing about whether a score can be trusted.")
    return lines


def not_checked(doc: Mapping[str, Any]) -> str:
    """The layers that did not run or ran in part, each with the first clause of its
    reason."""
    out = []
    for layer in doc.get("layers") or []:
        if layer.get("status") in ("not applicable", "not assessed", "partial"):
            reason = str(layer.get("reason") or layer["status"]).split(": ")[0].split(" (")[0]
            part = "in part: " if layer["status"] == "partial" else ""
            out.append(f"{layer['layer']} ({part}{reason})")
    return "; ".join(out) or "nothing the registered layers could check was skipped"


def findings_and_actions(measured: Sequence[Mapping[str, Any]], *, most: int = MOST_FINDINGS,
                         actions: int = MOST_ACTIONS) -> tuple[list[str], list[str]]:
    """The first ``most`` found findings as sentences (naming the boundary when the audit
    has several) and the first ``actions`` distinct actions they call for."""
    found = [m for m in measured if m["found"]]
    several = len({m["boundary"] for m in found}) > 1
    lines = [f"{m['boundary']}: {m['sentence']}" if several else m["sentence"]
             for m in found[:most]]
    todo: list[str] = []
    for m in found:
        if m["action"] and m["action"] not in todo:
            todo.append(m["action"])
    return lines, todo[:actions]


def warnings(doc: Mapping[str, Any]) -> list[str]:
    """What the reader must know before any rate: first, a release of which more than half
    the listed files could not be read (with the likely cause); then a release audited
    against itself (no split was found), a table of re-encoded images, and a release in which
    no row has a label."""
    from splitscope.core.readable import unread_files

    unread = unread_files(doc.get("manifest") or {}, listed_in="lists/failures.csv")
    out = [f"WARNING: {unread}"] if unread else []
    if unread and ((doc.get("options") or {}).get("run") or {}).get("paths_only"):
        out = [f"Paths only (--paths-only): {unread[0].lower()}{unread[1:]} Only what the "
               + "paths, labels, sources and groups say is measured."]
    for b in doc.get("boundaries") or []:
        if b["query"]["name"] == b["reference"]["name"] == WITHIN_RELEASE:
            out.append("WARNING: no train/test split was found (no split folders or split "
                       "column), so the release was audited against itself: copies and "
                       "near-twins inside the set, which a random split would turn into "
                       "leakage. Give the split (ROOT/<split>/<class>/…, or --split-column).")
    tables = (doc.get("manifest") or {}).get("table_images") or {}
    if tables.get("name_format_mismatch"):
        out.append(f"WARNING: {fmt_int(tables['name_format_mismatch'])} of "
                   f"{fmt_int(tables['rows'])} table rows hold image bytes of another format "
                   f"than their stored name says ({'; '.join(tables.get('examples') or [])}): "
                   "the table's images were re-encoded, so byte identity and the header "
                   "fields describe the table, not the released files.")
    labels = (doc.get("manifest") or {}).get("labels") or {}
    rows = (doc.get("manifest") or {}).get("rows") or 0
    if rows and set(labels) <= {"<NA>"}:
        out.append(f"WARNING: none of the {rows:,} rows has a label (no class folders, or a "
                   "label column under an unrecognised name: give --label-column), so the "
                   "header-only probe, label conflicts and per-class rates are not measured.")
    return out


def summary_notes(doc: Mapping[str, Any]) -> list[str]:
    """Layers that did not complete (with the reason) and the --fail-on outcomes
    (:func:`splitscope.core.conditions.fail_on_lines`)."""
    from splitscope.core.conditions import fail_on_lines

    notes = []
    for l in doc["layers"]:
        if l["status"] != "completed":
            notes.append(f"Layer {l['layer']}: {l['status']} — {l.get('reason')}")
    return notes + fail_on_lines(doc)
