"""The audit's verdicts: one line per finding a reader cannot misread, and the notes on
layers that did not complete and on ``--fail-on`` outcomes. Fed only by the audit document
(its records, boundaries, parameters and layer outcomes), so the same document always reads
the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from splitscope.boundary import WITHIN_RELEASE
from splitscope.core.protocol import declared
from splitscope.records.format import count as fmt_int
from splitscope.records.format import percent_of
from splitscope.records.metrics import Verdict

__all__ = ["largest_first", "layer_verdicts", "summary_notes", "verdicts"]


def layer_verdicts() -> tuple[Verdict, ...]:
    """The verdict sections the registered layers declare (``verdicts``), by ``rank``: label
    conflicts first (they make every score unreadable), then near-twins, copies, the
    deduplicated split, shared groups, containment, scores, probes and attribution."""
    return tuple(declared("verdicts"))


def verdicts(doc: Mapping[str, Any], sections: Sequence[Verdict] | None = None) -> list[str]:
    """The warnings, then one line per finding a reader cannot misread, section by section in
    the order of ``sections`` (default :func:`layer_verdicts`): label conflicts, near-twin
    rates with numerator, denominator and predicate, byte and pixel copies, the deduplicated
    split, group overlap, containment, balanced accuracy, header probes, attribution."""
    lines: list[str] = warnings(doc) + largest_first(doc)
    for section in sections if sections is not None else layer_verdicts():
        lines.extend(section.lines(doc))
    return lines


def largest_first(doc: Mapping[str, Any]) -> list[str]:
    """One line per audited boundary ranking its findings (the registered layers'
    ``findings``) by their share of the evaluated split, largest first (a label conflict is
    flagged in capitals but ranked by size like the rest); each share is the value of the
    ``--fail-on`` metric named beside it."""
    from splitscope.core.conditions import all_metrics
    from splitscope.records.metrics import metric_records

    metrics = all_metrics()
    findings = [f for f in declared("findings") if f.metric in metrics]
    records = doc.get("records") or []
    out = []
    for b in doc.get("boundaries") or []:
        found = []
        for finding in findings:
            hits = [r for r in metric_records(metrics[finding.metric], records, [b["name"]])
                    if r.get("numerator") and r.get("denominator")]
            if hits:
                worst = max(hits, key=lambda r: r["numerator"] / r["denominator"])
                found.append((worst["numerator"] / worst["denominator"], finding.name, worst,
                              finding.metric))
        if not found:
            continue
        found.sort(key=lambda f: -f[0])
        each = "; ".join(f"{what} {percent_of(r['numerator'], r['denominator'])} "
                         f"({fmt_int(r['numerator'])} of {fmt_int(r['denominator'])}, {name})"
                         for _, what, r, name in found)
        out.append(f"Findings on {b['query']['name']} against {b['reference']['name']}, largest "
                   f"first: {each}.")
    return out


def warnings(doc: Mapping[str, Any]) -> list[str]:
    """What the reader must know before any rate: a release audited against itself (no
    split was found), a table of re-encoded images, and a release in which no row has a
    label."""
    out = []
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
    """Layers that did not complete (with the reason) and the --fail-on outcomes."""
    notes = []
    for l in doc["layers"]:
        if l["status"] != "completed":
            notes.append(f"Layer {l['layer']}: {l['status']} — {l.get('reason')}")
    for c in doc.get("fail_on") or []:
        value = "not measured" if c["value"] is None else f"{c['value']:.4g}"
        line = (f"--fail-on {c['condition']}: value {value} → "
                f"{'HELD (exit 1)' if c['held'] else 'not held'}")
        control = c.get("control") or {}
        if control.get("status") == "unreliable":
            line += (f"; the predicate is UNRELIABLE on this modality: it flags "
                     f"{100 * control['rate']:.3g}% of the clean control "
                     f"({control.get('numerator')} of {control.get('denominator')})")
        elif control.get("status") == "uncalibrated":
            line += "; uncalibrated: no negative control given (--control)"
        notes.append(line)
    return notes
