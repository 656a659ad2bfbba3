"""How the identity and near-duplicate layers (METHODS §2) read: their "what this means" rules
(each reads the records of one boundary together and returns a sentence or ``None``) and their
verdict sections (lines from the finished document). The layers declare them (``rules``,
``verdicts``); the audit orders them (:mod:`splitscope.core.meaning`,
:mod:`splitscope.core.verdicts`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from splitscope.boundary import WITHIN_RELEASE
from splitscope.records.findings import CONFLICT, Finding
from splitscope.records.format import count, percent, percent_of
from splitscope.records.metrics import (
    Rule,
    Segment,
    Verdict,
    completed_record,
    find_record,
    label_conflicts_found,
    records_on,
)
from splitscope.relations.predicates import (
    DEDUP_SPLIT,
    EXTERNAL_LAYER,
    EXTERNAL_METRICS,
    HASH_EXACT_PHASH,
    HASH_JOINT,
    HASH_RULE_PREDICATES,
    HASH_SUM,
    LABEL_CONFLICT_NCC,
    LABEL_CONFLICT_PIXEL,
    LABEL_CONFLICT_PREDICATES,
    LABEL_CONFLICT_PREFIX,
    LABEL_CONFLICT_SHA256,
    LABEL_CONFLICT_WITHIN,
    LAYER,
    METRICS,
    NCC_NEAREST,
    PIXEL_IDENTICAL_UNION,
    PIXEL_WITHIN,
    PIXEL_XXH128,
    SHA256,
    SHA256_WITHIN,
)

#: the layers whose records this module reads
_MINE = (LAYER, EXTERNAL_LAYER)
_CONFLICTS = LABEL_CONFLICT_PREDICATES

def _on(records, b, predicate, **kw):
    """This package's records of ``predicate`` on boundary ``b``."""
    return records_on(records, b["name"], predicate=predicate, layer=_MINE, **kw)


#: near-twin share of the query split from which scores partly measure recall of training
#: images (1 %: a share a reader would not shrug off as a rounding of the headline score)
MEMORISATION_MIN_RATE = 0.01


def _label_noise(b, records) -> str | None:
    found = label_conflicts_found(records, b["name"], _CONFLICTS, trusted_only=True)
    if not found:
        return None
    n = max(r["numerator"] for r in found)
    return (f"at least {n:,} {b['query']['name']} row(s) are the same image as a "
            f"{b['reference']['name']} row under another label: label noise that no model "
            "can score right under both labels; settle the labels before comparing models")


def _memorisation(b, records) -> str | None:
    ncc = completed_record(records, NCC_NEAREST, b["name"], _MINE)
    if ncc is None or not ncc.get("denominator"):
        return None
    rate = ncc["numerator"] / ncc["denominator"]
    if rate < MEMORISATION_MIN_RATE:
        return None
    dedup = completed_record(records, DEDUP_SPLIT, b["name"], _MINE)
    clean = (f"; report it beside the score on the deduplicated split ({dedup['numerator']:,} "
             f"of {dedup['denominator']:,} rows)") if dedup is not None else ""
    return (f"{percent(rate)} of {b['query']['name']} rows have a near-twin in "
            f"{b['reference']['name']}, so a score on {b['query']['name']} partly measures "
            f"recall of training images{clean}")


def _hash_unreliable(b, records) -> str | None:
    bad = [r for r in _on(records, b, HASH_RULE_PREDICATES, done=True)
           if ((r.get("details") or {}).get("control") or {}).get("unreliable")]
    if not bad:
        return None
    rate = max(r["details"]["control"]["rate"] for r in bad)
    return (f"the hash rules flag up to {percent(rate)} of the clean control: on this modality "
            "their counts are no evidence of copies; read NCC and its threshold sweep instead")


def _clean(b, records) -> str | None:
    byte = completed_record(records, SHA256, b["name"], _MINE)
    ncc = completed_record(records, NCC_NEAREST, b["name"], _MINE)
    if byte is None or ncc is None or byte.get("numerator") or ncc.get("numerator"):
        return None
    return (f"no byte copy and no near-twin (NCC) of a {b['reference']['name']} row was found "
            f"in {b['query']['name']}; this does not exclude semantic near-duplicates "
            "(supply embeddings) or shared patients without group keys")


RULES: tuple[Rule, ...] = (
    Rule("label_noise", "a trusted label-conflict record of the boundary (byte or pixel "
         "identity, NCC, or a hash rule a negative control found reliable) counts at least one "
         "row",
         _label_noise, rank=10),
    Rule("memorisation", "the NCC nearest-rule rate of the boundary is at least "
         f"{MEMORISATION_MIN_RATE:.0%} of the query rows", _memorisation, rank=20),
    Rule("hash_unreliable", "a hash rule flags more of the negative control than its bound",
         _hash_unreliable, rank=70),
    Rule("clean", "the byte-identity and NCC records of the boundary both count zero rows",
         _clean, rank=80),
)


# ------------------------------------------------------------------------------- verdicts

def _population_phrase(pop: Mapping[str, Any]) -> str:
    name = str(pop.get("name"))
    if name == "release":
        return "the release"
    return f"the {name} split" if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f"the {name} rows"


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
        line = (f"{percent_of(num, den)} of {_population_phrase(q)} ({int(num):,} of {int(den):,} "
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


_CONFLICT_NAMES = {LABEL_CONFLICT_SHA256: "byte copies",
                   LABEL_CONFLICT_PIXEL: "decoded-pixel twins",
                   LABEL_CONFLICT_NCC: "NCC ≥ {tau:g}",
                   f"{LABEL_CONFLICT_PREFIX}{HASH_JOINT}": "hash joint rule",
                   f"{LABEL_CONFLICT_PREFIX}{HASH_SUM}": "hash sum rule",
                   f"{LABEL_CONFLICT_PREFIX}{HASH_EXACT_PHASH}": "exact pHash"}


def _conflict_line(records, b: Mapping[str, Any], tau: float,
                   uncalibrated: bool = False) -> str | None:
    """Label-conflicting twins on one boundary (the largest count over the pixel predicates,
    each predicate's count named), or None when no predicate found one; with
    ``uncalibrated``, only what predicates no control has shown reliable linked (a note)."""
    every = label_conflicts_found(records, b["name"], _CONFLICTS, trusted_only=False)
    found = label_conflicts_found(records, b["name"], _CONFLICTS, trusted_only=True)
    q, ref = _sides(b)
    unmatched = [r for r in _on(records, b, LABEL_CONFLICT_PREDICATES)
                 if r.get("status") == "not assessed"
                 and (r.get("details") or {}).get("vocabulary")]
    if uncalibrated:
        return _uncalibrated_conflicts(every, found, q, ref, tau)
    if unmatched:  # corpora spelled differently: no label comparison is made
        vocab = unmatched[0]["details"]["vocabulary"]
        return (f"Label conflicts of {_population_phrase(q)} against {ref}: not assessed, the "
                f"label vocabularies differ ({', '.join(vocab['query_labels'])} against "
                f"{', '.join(vocab['reference_labels'])}); align them with --label-map or "
                "--external-label-map to compare labels.")
    if not found:
        return None
    worst = max(found, key=lambda r: r["numerator"])
    each = ", ".join(f"{_CONFLICT_NAMES.get(r['predicate']['name'], r['predicate']['name'])}"
                     f": {count(r['numerator'])}".format(tau=tau) for r in found)
    return (f"LABEL CONFLICT: {percent_of(worst['numerator'], worst['denominator'])} of "
            f"{_population_phrase(q)} ({count(worst['numerator'])} of "
            f"{count(worst['denominator'])} rows) has a twin in {ref} "
            f"under another label ({each}): the same image carries two labels "
            "(lists/label_conflicts).")


def _uncalibrated_conflicts(every, found, q, ref, tau) -> str | None:
    """What predicates no control has shown reliable linked under another label, when no
    reliable predicate found a conflict: no evidence of label noise, a note."""
    if found or not every:
        return None
    worst = max(every, key=lambda r: r["numerator"])
    each = ", ".join(f"{_CONFLICT_NAMES.get(r['predicate']['name'], r['predicate']['name'])}"
                     f" ({r['details'].get('calibration')}): {count(r['numerator'])}"
                     .format(tau=tau) for r in every)
    return (f"Hash rules alone link {count(worst['numerator'])} of "
            f"{count(worst['denominator'])} {q['name']} rows to a {ref} image under "
            f"another label ({each}); these rules are not calibrated as reliable on this "
            "modality, so this is no evidence of label noise (lists/label_conflicts).")


def _uncalibrated_conflict_lines(doc) -> list[str]:
    records, tau = doc.get("records") or [], _tau(doc)
    return [line for b in doc.get("boundaries") or []
            if (line := _conflict_line(records, b, tau, uncalibrated=True))]


def _tau(doc) -> float:
    return doc["options"]["search"]["tau"]


def _label_conflict_lines(doc) -> list[str]:
    records, tau = doc.get("records") or [], _tau(doc)
    return [line for b in doc.get("boundaries") or []
            if (line := _conflict_line(records, b, tau))] + _within_lines(
        doc, LABEL_CONFLICT_WITHIN)


_WITHIN_WHAT = {
    LABEL_CONFLICT_WITHIN: ("LABEL CONFLICT within {split}: ",
                            ("identical to another {pop} row under another label (bytes or "
                             "decoded pixels)")),
    SHA256_WITHIN: ("Within {split}: ", "byte-identical copies of another {pop} row"),
    PIXEL_WITHIN: ("Within {split}: ", "pixel-identical copies of another {pop} row"),
}


def _within_lines(doc, predicate: str) -> list[str]:
    """Copies (or label conflicts) inside each evaluated population (a boundary's query
    side), when there are any: a finding of its own, not a part of any crossing rate."""
    queried = {str(b["query"]["name"]) for b in doc.get("boundaries") or []}
    out = []
    for r in doc.get("records") or []:
        name = (r.get("predicate") or {}).get("name")
        pop = str(((r.get("boundary") or {}).get("query") or {}).get("name"))
        if (name != predicate or pop not in queried or not r.get("numerator")
                or r.get("status") not in ("completed", "partial")):
            continue
        head, what = _WITHIN_WHAT[predicate]
        split = _population_phrase({"name": pop})
        extra = (r.get("details") or {}).get("extra_copies")
        tail = f"; {count(extra)} of them are extra copies" if extra else ""
        out.append(f"{head.format(split=split)}{percent_of(r['numerator'], r['denominator'])} "
                   f"({count(r['numerator'])} of {count(r['denominator'])} rows) are "
                   f"{what.format(pop=pop)}{tail} (lists/"
                   f"{'label_conflicts' if predicate == LABEL_CONFLICT_WITHIN else 'within_copies'}).")
    return out


def _near_twin_lines(doc) -> list[str]:
    records, tau = doc.get("records") or [], _tau(doc)
    features = (doc.get("options") or {}).get("features") or {}
    geometry = f"{features.get('thumb_size', 96)}², {features.get('interpolation', 'bicubic')}"
    return [_count_line(find_record(records, METRICS["ncc_rate"], b["name"]), b, "a near-twin",
                        f"NCC ≥ {tau:g}, {geometry}") for b in doc.get("boundaries") or []]


def _byte_copy_lines(doc) -> list[str]:
    records = doc.get("records") or []
    return [_count_line(find_record(records, METRICS["byte_identical_rate"], b["name"]), b,
                        "a byte-identical copy", "SHA-256, confirmed byte for byte")
            for b in doc.get("boundaries") or []]


def _pixel_copy_lines(doc) -> list[str]:
    records, lines = doc.get("records") or [], []
    for b in doc.get("boundaries") or []:
        union = next(iter(_on(records, b, PIXEL_IDENTICAL_UNION)), None)
        if union is not None:
            parts = (union.get("details") or {}).get("parts") or {}
            how = ("equal decoded pixels; pixel arrays have no bytes, so none is a byte copy "
                   "or a re-encode" if SHA256 not in parts else
                   f"byte copies {count(parts.get(SHA256))} and re-encodes "
                   f"{count(parts.get(PIXEL_XXH128))}, a row counted once")
            lines.append(_count_line(union, b, "a pixel-identical copy", how))
    return lines + _within_lines(doc, SHA256_WITHIN) + _within_lines(doc, PIXEL_WITHIN)


def _deduplicated_lines(doc) -> list[str]:
    records, lines = doc.get("records") or [], []
    for b in doc.get("boundaries") or []:
        dedup = next(iter(_on(records, b, DEDUP_SPLIT)), None)
        if dedup is not None and dedup.get("denominator"):
            removed = (dedup.get("predicate") or {}).get("params", {}).get("removed_by") or []
            lines.append(f"Deduplicated {b['query']['name']} split: {count(dedup['numerator'])}"
                         f" of {count(dedup['denominator'])} rows remain "
                         f"({percent_of(dedup['numerator'], dedup['denominator'])}; removed by "
                         f"{', '.join(removed)}): lists/dedup/.")
    return lines


def _containment_lines(doc) -> list[str]:
    records, tau, lines = doc.get("records") or [], _tau(doc), []
    for b in doc.get("boundaries") or []:
        rec = find_record(records, EXTERNAL_METRICS["containment_rate"], b["name"])
        if rec is None or rec.get("status") not in ("completed", "partial"):
            continue
        kept = (rec.get("details") or {}).get("cleaned_external_rows")
        dedup = next(iter(_on(records, b, DEDUP_SPLIT)), None)
        gap = ""
        if kept is not None and dedup is not None and dedup.get("numerator") != kept:
            gap = (f" (only rows with a counterpart in {b['reference']['name']} leave it; the "
                   f"deduplicated {b['query']['name']} split, {count(dedup['numerator'])} "
                   "rows, also drops copies inside it)")
        lines.append(
            f"Cross-corpus containment {b['name']}: "
            f"{percent_of(rec['numerator'], rec['denominator'])} "
            f"of {b['query']['name']} rows ({count(rec['numerator'])} of "
            f"{count(rec['denominator'])}) have a byte-identical or NCC ≥ {tau:g} counterpart "
            f"in {b['reference']['name']}" + (f"; cleaned external set: {count(kept)} rows"
                                               f"{gap}." if kept is not None else "."))
    return lines


#: the duplicates layer's verdict sections (the audit orders them, splitscope.core.verdicts)
VERDICTS: tuple[Verdict, ...] = (
    Verdict("label_conflicts", _label_conflict_lines, rank=10),
    Verdict("near_twins", _near_twin_lines, rank=20),
    Verdict("byte_copies", _byte_copy_lines, rank=30),
    Verdict("pixel_copies", _pixel_copy_lines, rank=40),
    Verdict("deduplicated", _deduplicated_lines, rank=50),
    Verdict("uncalibrated_label_conflicts", _uncalibrated_conflict_lines, rank=15, note=True),
)
#: the cross-corpus layer's verdict section
EXTERNAL_VERDICTS: tuple[Verdict, ...] = (Verdict("containment", _containment_lines,
                                                                rank=70),)


# ------------------------------------------------------------------- opening and composition
_DEDUP = ("Score on the deduplicated {query} split (lists/dedup/) and report it "
          "beside the official score.")
#: the duplicates layer's findings (ranked with every layer's in splitscope.core.verdicts),
#: each a share of the evaluated rows read through its --fail-on metric; at equal shares the
#: stronger evidence first (bytes, then pixels, then NCC)
FINDINGS: tuple[Finding, ...] = (
    Finding("label conflicts", metric="label_conflict_rate", tier=CONFLICT, panel=True,
            phrase="{percent} of {query} ({numerator} of {denominator} rows) is a copy of a "
                   "{reference} image under another label",
            says="Label conflicts: {share} {query} rows have a copy in {reference} under "
                 "another label, so the same image is scored as two classes.",
            action="Resolve the conflicting labels (lists/label_conflicts.csv) before any "
                   "score on {query} is read.", rank=10),
    Finding("near twins (NCC ≥ τ)", metric="ncc_rate",
            phrase="{percent} of {query} ({numerator} of {denominator} rows) has a near twin "
                   "in {reference}",
            says="Near twins: {share} {query} rows have a near twin in {reference} (NCC ≥ "
                 "{search[tau]:g}, nearest counterpart), so a model is partly tested on what it "
                 "trained on.",
            action=_DEDUP, rank=40),
    Finding("byte copies", metric="byte_identical_rate",
            phrase="{percent} of {query} ({numerator} of {denominator} rows) is a byte copy "
                   "of a {reference} file",
            says="Byte copies: {share} {query} rows are byte-identical to a {reference} file "
                 "(SHA-256, confirmed byte for byte).", action=_DEDUP, rank=20),
    Finding("pixel-identical copies", metric="pixel_identical_rate",
            phrase="{percent} of {query} ({numerator} of {denominator} rows) has the pixels "
                   "of a {reference} image",
            says="Pixel-identical copies: {share} {query} rows decode to the pixels of a "
                 "{reference} image (byte copies and re-encodes).", action=_DEDUP, rank=30),
    Finding("copies inside the split", metric="within_split_copy_rate",
            phrase="{percent} of {query} ({numerator} of {denominator} rows) is a copy of "
                   "another {query} row",
            says="Copies inside {query}: {share} {query} rows are byte copies of another "
                 "{query} row, so those images weigh more than once in a score.",
            action="Count each {query} image once: drop the extra copies "
                   "(lists/within_copies.csv).", rank=50),
)


def _query_flag(column: str):
    """The per-row flag ``column`` of a boundary's query rows in ``query_flags``."""
    def flags(tables: Mapping[str, Any], boundary: str):
        table = tables.get("query_flags")
        if table is None or not len(table) or "boundary" not in table:
            return None
        mine = table[table["boundary"] == boundary].drop_duplicates("row").set_index("row")
        if not len(mine) or column not in mine:
            return None
        return mine[column]
    return flags


#: the duplicates layer's categories of the composition figure (splitscope.core.composition):
#: its query flags name every query row of a boundary
SEGMENTS: tuple[Segment, ...] = (
    Segment("byte copy", SHA256, _query_flag(SHA256), "byte copy (SHA-256)", rank=10,
            population=True),
    Segment("pixel-identical", PIXEL_XXH128, _query_flag(PIXEL_XXH128),
            "pixel-identical (decoded pixels, other bytes)", rank=20, population=True),
    Segment("near twin", NCC_NEAREST, _query_flag(NCC_NEAREST),
            "near twin (NCC ≥ {search.tau:g}, nearest rule)", rank=30, population=True),
)
