"""The audit's verdicts: one line per finding a reader cannot misread, and the notes on
layers that did not complete and on ``--fail-on`` outcomes. Fed only by the audit document
(its records, boundaries, parameters and layer outcomes), so the same document always reads
the same way."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from splitscope.audit.conditions import (
    find_record,
    is_control,
    label_conflicts_found,
    record_text,
    records_on,
)
from splitscope.boundary import WITHIN_RELEASE

__all__ = ["fmt_int", "summary_notes", "verdicts"]


def _population_phrase(pop: Mapping[str, Any]) -> str:
    name = str(pop.get("name"))
    if name == "release":
        return "the release"
    return f"the {name} split" if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f"the {name} rows"


def _pct(num: float, den: float) -> str:
    return f"{100 * num / den:.3g}%" if den else "—"


def _sides(b: Mapping[str, Any]) -> tuple[dict, str]:
    """The query population and the reference side as a verdict names them (a release
    without a split is audited against itself: "another row of the same release")."""
    q = b["query"]
    ref = str(b["reference"]["name"])
    if q["name"] == ref:
        ref = "another row of the same release" if ref == WITHIN_RELEASE else f"another {ref} row"
        q = {**q, "name": "release" if q["name"] == WITHIN_RELEASE else q["name"]}
    return q, ref


def _count_line(rec: Mapping[str, Any] | None, b: Mapping[str, Any], what: str,
                how: str) -> str:
    q, ref = _sides(b)
    if rec is None:
        return (f"{_population_phrase(q).capitalize()}: {what} in {ref} not assessed "
                f"(no record).")
    if rec.get("status") not in ("completed", "partial"):
        return (f"{_population_phrase(q).capitalize()}: {what} in {ref} {rec.get('status')} — "
                f"{rec.get('reason')}")
    num, den = rec.get("numerator"), rec.get("denominator")
    if num is None or not den:
        return f"{_population_phrase(q).capitalize()}: {what} in {ref}: no rate (no rows)."
    if num:
        line = (f"{_pct(num, den)} of {_population_phrase(q)} ({int(num):,} of {int(den):,} "
                f"rows) has {what} in {ref} ({how})")
    else:  # a measured zero, said as one
        line = (f"None of {_population_phrase(q)} (0 of {int(den):,} rows, 0%) has {what} in "
                f"{ref} ({how})")
    if rec.get("status") == "partial":
        line += f"; partial: {rec.get('reason')}"
    control = (rec.get("details") or {}).get("control") or {}
    if control.get("rate") is not None:
        line += (f"; negative control {100 * control['rate']:.3g}% "
                 f"({control.get('numerator')} of {control.get('denominator')})")
        if control.get("unreliable"):
            line += " — predicate UNRELIABLE on this modality"
    return line + "."


def verdicts(doc: Mapping[str, Any]) -> list[str]:
    """One line per boundary a reader cannot misread (near-twin rate with numerator,
    denominator and predicate), then byte-identical, group-overlap, containment, balanced
    accuracy, header-probe and attribution lines."""
    records = doc.get("records") or []
    params = doc.get("params") or {}
    tau = params["tau"]
    geometry = f"{params.get('thumb_size', 96)}², {params.get('interpolation', 'bicubic')}"
    bounds = doc.get("boundaries") or []
    lines: list[str] = warnings(doc)
    for b in bounds:
        line = _conflict_line(records, b, tau)
        if line:
            lines.append(line)
    lines.extend(_within_lines(records, bounds, "label_conflict_within"))
    for b in bounds:
        lines.append(_count_line(find_record(records, "ncc_rate", b["name"]), b, "a near-twin",
                                 f"NCC ≥ {tau:g}, {geometry}"))
    for b in bounds:
        lines.append(_count_line(find_record(records, "byte_identical_rate", b["name"]), b,
                                 "a byte-identical copy", "SHA-256, confirmed byte for byte"))
    for b in bounds:
        union = next(iter(records_on(records, b["name"], predicate="pixel_identical_union")),
                     None)
        if union is not None:
            parts = (union.get("details") or {}).get("parts") or {}
            how = ("equal decoded pixels; pixel arrays have no bytes, so none is a byte copy "
                   "or a re-encode" if "sha256" not in parts else
                   f"byte copies {fmt_int(parts.get('sha256'))} and re-encodes "
                   f"{fmt_int(parts.get('pixel_xxh128'))}, a row counted once")
            lines.append(_count_line(union, b, "a pixel-identical copy", how))
    lines.extend(_within_lines(records, bounds, "sha256_within"))
    lines.extend(_within_lines(records, bounds, "pixel_xxh128_within"))
    for b in bounds:
        dedup = next(iter(records_on(records, b["name"], predicate="dedup_split")), None)
        if dedup is not None and dedup.get("denominator"):
            removed = (dedup.get("predicate") or {}).get("params", {}).get("removed_by") or []
            lines.append(f"Deduplicated {b['query']['name']} split: {fmt_int(dedup['numerator'])}"
                         f" of {fmt_int(dedup['denominator'])} rows remain "
                         f"({_pct(dedup['numerator'], dedup['denominator'])}; removed by "
                         f"{', '.join(removed)}): lists/dedup/.")
    for b in bounds:
        rec = find_record(records, "group_overlap_rate", b["name"])
        if rec is None:
            continue
        if rec.get("status") not in ("completed", "partial") or not rec.get("denominator"):
            lines.append(f"Group overlap {b['name']}: {rec.get('status')} — "
                         f"{rec.get('reason') or 'no traceable query row'}")
            continue
        cov = rec.get("coverage") or {}
        traced = (f"; traceable {fmt_int(cov.get('traceable'))} of {fmt_int(cov.get('total'))} "
                  f"{b['query']['name']} rows") if cov.get("total") is not None else ""
        lines.append(
            f"{_pct(rec.get('numerator') or 0, rec['denominator'])} of traceable "
            f"{b['query']['name']} rows ({fmt_int(rec.get('numerator'))} of "
            f"{fmt_int(rec['denominator'])}) share a group with {b['reference']['name']}"
            f"{traced}.")
    for b in bounds:
        rec = find_record(records, "containment_rate", b["name"])
        if rec is None or rec.get("status") not in ("completed", "partial"):
            continue
        kept = (rec.get("details") or {}).get("cleaned_external_rows")
        dedup = next(iter(records_on(records, b["name"], predicate="dedup_split")), None)
        gap = ""
        if kept is not None and dedup is not None and dedup.get("numerator") != kept:
            gap = (f" (only rows with a counterpart in {b['reference']['name']} leave it; the "
                   f"deduplicated {b['query']['name']} split, {fmt_int(dedup['numerator'])} "
                   "rows, also drops copies inside it)")
        lines.append(
            f"Cross-corpus containment {b['name']}: {_pct(rec['numerator'], rec['denominator'])} "
            f"of {b['query']['name']} rows ({fmt_int(rec['numerator'])} of "
            f"{fmt_int(rec['denominator'])}) have a byte-identical or NCC ≥ {tau:g} counterpart "
            f"in {b['reference']['name']}" + (f"; cleaned external set: {fmt_int(kept)} rows"
                                               f"{gap}." if kept is not None else "."))
    if not any(l.startswith(("Group overlap", )) or "share a group" in l for l in lines):
        for r in records:
            if str(r.get("layer", "")).startswith("group") and "overlap" in record_text(r) \
                    and r.get("status") not in ("completed", "partial"):
                lines.append(f"Group overlap: {r.get('status')} — {r.get('reason')}")
                break
    evals = [r for r in records if str(r.get("layer", "")).startswith("evaluation")
             and r.get("status") in ("completed", "partial") and r.get("estimate") is not None
             and "balanced accuracy" in str((r.get("predicate") or {}).get("name", "")).lower()]
    for r in evals[:6]:
        unc = r.get("uncertainty") or {}
        interval = (f" [{unc['low']:.3f}, {unc['high']:.3f}]"
                    if unc.get("low") is not None and unc.get("high") is not None else "")
        lines.append(f"{r.get('title') or r['id']}: {r['estimate']:.3f}{interval}"
                     f" (n = {fmt_int(r.get('denominator'))}).")
    if len(evals) > 6:
        lines.append(f"… and {len(evals) - 6} more balanced-accuracy records in audit.json.")
    names = {b["name"] for b in bounds}
    for r in records:
        if not str(r.get("layer", "")).startswith(("provenance", "probe")) or is_control(r):
            continue
        if "header" not in record_text(r) or r.get("estimate") is None:
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
    for r in records:
        if r.get("layer") != "attribution" or r.get("status") not in ("completed", "partial") \
                or r.get("estimate") is None:
            continue
        det, unc = r.get("details") or {}, r.get("uncertainty") or {}
        ex, cl = det.get("exposed") or {}, det.get("clean") or {}
        where = ((r.get("predicate") or {}).get("params") or {}).get("boundary")
        interval = (f" [{unc['low']:+.3f}, {unc['high']:+.3f}]"
                    if unc.get("low") is not None and unc.get("high") is not None else "")
        lines.append(
            f"Attribution outside anatomy{f' ({where})' if where else ''}: leaked rows put "
            f"{ex.get('mean', float('nan')):.3f} of their attribution mass outside the mask, "
            f"clean rows {cl.get('mean', float('nan')):.3f} (n = {fmt_int(ex.get('assessed'))} "
            f"and {fmt_int(cl.get('assessed'))}); difference {r['estimate']:+.3f}{interval}.")
    return lines


_WITHIN_WHAT = {
    "label_conflict_within": ("LABEL CONFLICT within {split}: ", "identical to another {pop} "
                              "row under another label (bytes or decoded pixels)"),
    "sha256_within": ("Within {split}: ", "byte-identical copies of another {pop} row"),
    "pixel_xxh128_within": ("Within {split}: ", "pixel-identical copies of another {pop} row"),
}


def _within_lines(records, bounds, predicate: str) -> list[str]:
    """Copies (or label conflicts) inside each evaluated population (a boundary's query
    side), when there are any: a finding of its own, not a part of any crossing rate."""
    queried = {str(b["query"]["name"]) for b in bounds}
    out = []
    for r in records:
        name = (r.get("predicate") or {}).get("name")
        pop = str(((r.get("boundary") or {}).get("query") or {}).get("name"))
        if (name != predicate or pop not in queried or not r.get("numerator")
                or r.get("status") not in ("completed", "partial")):
            continue
        head, what = _WITHIN_WHAT[predicate]
        split = _population_phrase({"name": pop})
        extra = (r.get("details") or {}).get("extra_copies")
        tail = f"; {fmt_int(extra)} of them are extra copies" if extra else ""
        out.append(f"{head.format(split=split)}{_pct(r['numerator'], r['denominator'])} "
                   f"({fmt_int(r['numerator'])} of {fmt_int(r['denominator'])} rows) are "
                   f"{what.format(pop=pop)}{tail} (lists/"
                   f"{'label_conflicts' if 'conflict' in predicate else 'within_copies'}).")
    return out


_CONFLICT_NAMES = {"label_conflict_sha256": "byte copies",
                   "label_conflict_pixel_xxh128": "decoded-pixel twins",
                   "label_conflict_ncc": "NCC ≥ {tau:g}",
                   "label_conflict_hash_joint": "hash joint rule",
                   "label_conflict_hash_sum": "hash sum rule",
                   "label_conflict_hash_exact_phash": "exact pHash"}


def _conflict_line(records, b: Mapping[str, Any], tau: float) -> str | None:
    """Label-conflicting twins on one boundary (the largest count over the pixel predicates,
    each predicate's count named), or None when no predicate found one."""
    every = label_conflicts_found(records, b["name"], trusted_only=False)
    found = label_conflicts_found(records, b["name"], trusted_only=True)
    q, ref = _sides(b)
    unmatched = [r for r in records_on(records, b["name"], prefix="label_conflict_")
                 if r.get("status") == "not assessed"
                 and (r.get("details") or {}).get("vocabulary")]
    if unmatched:  # corpora spelled differently: no label comparison is made
        vocab = unmatched[0]["details"]["vocabulary"]
        return (f"Label conflicts of {_population_phrase(q)} against {ref}: not assessed, the "
                f"label vocabularies differ ({', '.join(vocab['query_labels'])} against "
                f"{', '.join(vocab['reference_labels'])}); align them with --label-map or "
                "--external-label-map to compare labels.")
    if not found and every:  # only predicates a control has not shown to be reliable
        worst = max(every, key=lambda r: r["numerator"])
        each = ", ".join(f"{_CONFLICT_NAMES.get(r['predicate']['name'], r['predicate']['name'])}"
                         f" ({r['details'].get('calibration')}): {fmt_int(r['numerator'])}"
                         .format(tau=tau) for r in every)
        return (f"Hash rules alone link {fmt_int(worst['numerator'])} of "
                f"{fmt_int(worst['denominator'])} {q['name']} rows to a {ref} image under "
                f"another label ({each}); these rules are not calibrated as reliable on this "
                "modality, so this is no evidence of label noise (lists/label_conflicts).")
    if not found:
        return None
    worst = max(found, key=lambda r: r["numerator"])
    each = ", ".join(f"{_CONFLICT_NAMES.get(r['predicate']['name'], r['predicate']['name'])}"
                     f": {fmt_int(r['numerator'])}".format(tau=tau) for r in found)
    return (f"LABEL CONFLICT: {_pct(worst['numerator'], worst['denominator'])} of "
            f"{_population_phrase(q)} ({fmt_int(worst['numerator'])} of "
            f"{fmt_int(worst['denominator'])} rows) has a twin in {ref} "
            f"under another label ({each}): the same image carries two labels "
            "(lists/label_conflicts).")


def warnings(doc: Mapping[str, Any]) -> list[str]:
    """What the reader must know before any rate: a release audited against itself (no
    split was found), and a release in which no row has a label."""
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


def fmt_int(value: Any) -> str:
    return "—" if value is None else f"{int(value):,}"


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
