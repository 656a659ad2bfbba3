"""A Hugging Face dataset-card section of a finished audit (``dataset-card.md``).

:func:`card_text` turns an audit document into a card a maintainer can publish with the
release on the Hub: YAML front matter with the card fields the audit knows (the task when the
rows carry labels, the size bucket of the row count, the ``splitscope-audit`` tag), then the
*Train/test contamination* section between :data:`BEGIN` and :data:`END`: the audit's verdict
lines, per audited boundary the figures each with its numerator, denominator and record id
(read through the layers' ``--fail-on`` metrics), the deduplicated split sizes and lists, the
command that reproduces the audit (its paths by their names,
:func:`splitscope.records.paths.published_command`) and the splitscope version.

:func:`merge_card` puts that section into an existing card: it replaces the text between the
markers when they are there, appends the section otherwise, and adds only the front-matter
keys the card lacks; every other byte of the card is kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from splitscope.records import roles as R
from splitscope.records.findings import Finding
from splitscope.records.format import count, percent_of
from splitscope.records.metrics import Metric
from splitscope.records.paths import published_command
from splitscope.records.roles import Roles, has_role

__all__ = ["BEGIN", "CARD_FILE", "END", "card_metadata", "card_section", "card_text",
           "merge_card", "size_category", "write_card"]

CARD_FILE = "dataset-card.md"
BEGIN = "<!-- splitscope:begin -->"
END = "<!-- splitscope:end -->"

#: the figures each boundary reports: what they count, and the ``--fail-on`` metric whose
#: records hold them
#: the Hub's ``size_categories`` buckets: (upper bound, exclusive; name)
_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
          (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"),
          (1_000_000_000, "100M<n<1B"), (10 ** 10, "1B<n<10B"), (10 ** 11, "10B<n<100B"),
          (10 ** 12, "100B<n<1T"))

_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
_KEY = re.compile(r"^([^\s#\-][^:\n]*):", re.MULTILINE)


def size_category(rows: int) -> str:
    """The Hub's ``size_categories`` bucket of a row count (``150`` → ``n<1K``)."""
    for bound, name in _SIZES:
        if rows < bound:
            return name
    return "n>1T"


def card_metadata(doc: Mapping[str, Any]) -> dict[str, list[str]]:
    """The card fields the audit document establishes: ``task_categories`` only when the rows
    carry labels, ``size_categories`` from the manifest's row count, ``tags``."""
    m = doc.get("manifest") or {}
    meta: dict[str, list[str]] = {}
    labels = [k for k, v in (m.get("labels") or {}).items() if k != "<NA>" and v]
    if labels:
        meta["task_categories"] = ["image-classification"]
    if isinstance(m.get("rows"), int):
        meta["size_categories"] = [size_category(m["rows"])]
    meta["tags"] = ["splitscope-audit"]
    return meta


def write_card(out_dir: str | Path, doc: Mapping[str, Any], findings: Sequence[Finding],
               metrics: Mapping[str, Metric], *, roles: Roles | None = None) -> Path:
    """Write ``out_dir/dataset-card.md`` of the audit document ``doc`` (:func:`card_text`);
    returns its path."""
    path = Path(out_dir) / CARD_FILE
    path.write_text(card_text(doc, findings, metrics, roles=roles), encoding="utf-8",
                    newline="\n")
    return path


def card_text(doc: Mapping[str, Any], findings: Sequence[Finding],
              metrics: Mapping[str, Metric], *, roles: Roles | None = None,
              files: Iterable[str] | None = None) -> str:
    """The whole card of an audit document: front matter (:func:`card_metadata`) and the
    section (:func:`card_section`; the other arguments as there)."""
    return _front_matter(card_metadata(doc)) + "\n" + card_section(
        doc, findings, metrics, roles=roles, files=files)


def card_section(doc: Mapping[str, Any], findings: Sequence[Finding],
                 metrics: Mapping[str, Metric], *, roles: Roles | None = None,
                 files: Iterable[str] | None = None) -> str:
    """The *Train/test contamination* section of an audit document, markers included.

    Parameters
    ----------
    doc : mapping
        The audit document (``audit.json``).
    findings : sequence of Finding
        What the figures are: the layers' declared findings
        (:func:`splitscope.core.protocol.declared` ``("findings")``); those read through a
        ``--fail-on`` metric make the per-boundary tables.
    metrics : mapping of str to Metric
        The ``--fail-on`` metrics by name (:func:`splitscope.core.conditions.all_metrics`).
    roles : Roles, optional
        What the layers declare their records to be (:mod:`splitscope.records.roles`): which
        records are deduplicated splits.
    files : iterable of str, optional
        The folder's files as ``artifacts.json`` lists them (relative paths), where the
        deduplicated lists are looked up; default the lists ``audit.json`` names.

    Returns
    -------
    str
        Markdown from :data:`BEGIN` to :data:`END`, ending in a newline.
    """
    if files is None:
        files = [a.get("path") for a in doc.get("artifacts") or [] if a.get("path")]
    files = sorted(str(f) for f in files)
    m = doc.get("manifest") or {}
    version = (doc.get("software") or {}).get("splitscope", "")
    splits = ", ".join(f"{k} {count(v)}" for k, v in (m.get("splits") or {}).items())
    lines = [BEGIN, "## Train/test contamination", "",
             (f"Audited by splitscope {version} on "
              f"{str((doc.get('run') or {}).get('started') or '')[:10]}: "
              f"{count(m.get('rows'))} rows ({splits}). Each figure counts query rows of one "
              f"boundary (numerator of denominator) and names the `audit.json` record it comes "
              f"from."), ""]
    opening = doc.get("summary") or {}
    for head, items in (("Verdict", opening.get("verdict")),
                        ("Findings, largest first", opening.get("findings")),
                        ("What to do", opening.get("actions")),
                        ("Notes (uncalibrated predicates: not findings)", opening.get("notes"))):
        if items:
            lines += [f"### {head}", "", *(f"- {v}" for v in items), ""]
    for b in doc.get("boundaries") or []:
        rows = _figures(doc, b["name"], findings, metrics)
        if rows:
            lines += [f"### {b['query']['name']} against {b['reference']['name']}", "",
                      "| Finding | Rows | Of | Share | Predicate | Calibration | Record |",
                      "|---|---:|---:|---:|---|---|---|", *rows, ""]
    dedup = _dedup_rows(doc, roles, files)
    if dedup:
        lines += ["### Deduplicated splits", "",
                  ("Rows kept after removing every row flagged on the boundary by the "
                   "predicates named; the kept and removed rows are listed in the audit "
                   "folder."), "",
                  "| Split | Rows kept | Of | Share | Removed by | Lists | Record |",
                  "|---|---:|---:|---:|---|---|---|", *dedup, ""]
    run = doc.get("run") or {}
    # paths as their names: the card names no folder of the machine that audited
    command = published_command(run.get("reproduce") or run.get("command"))
    lines += ["### Reproduce", ""]
    if command:
        lines += ["```", str(command), "```", ""]
    else:
        lines += [("The audit recorded no command line (it was run from Python); "
                   "`audit.json` holds its inputs and options."), ""]
    lines += [(f"splitscope version: {version}. The audit folder holds `audit.json` (every "
               f"record with its parameters), `report.html` and `artifacts.json` (the SHA-256 "
               f"of every file)."), END]
    return "\n".join(lines) + "\n"


def merge_card(existing: str, card: str) -> str:
    """``existing`` with the section of ``card`` in it and the front-matter keys it lacks.

    The text between :data:`BEGIN` and :data:`END` (markers included) is replaced when
    ``existing`` holds them; otherwise the section is appended after one blank line. Keys of
    ``card``'s front matter that ``existing``'s lacks are added at the end of its front matter
    (a card without one gets ``card``'s); nothing else of ``existing`` changes.
    """
    section = card[card.index(BEGIN):card.index(END) + len(END)]
    front, body = _split_front(existing)
    new_front, _ = _split_front(card)
    if front is None:
        front_out = new_front or ""
    else:
        have = set(_keys(front))
        added = [block for key, block in _key_blocks(new_front or "") if key not in have]
        front_out = _add_keys(front, added) if added else front
    start, end = body.find(BEGIN), body.find(END)
    if start != -1 and end > start:
        body = body[:start] + section + body[end + len(END):]
    else:
        sep = "" if not body or body.endswith("\n\n") else ("\n" if body.endswith("\n")
                                                            else "\n\n")
        body = body + sep + section + "\n"
    return front_out + body


def _figures(doc: Mapping[str, Any], boundary: str, findings: Sequence[Finding],
             metrics: Mapping[str, Metric]) -> list[str]:
    """The table rows of one boundary: each finding's record through its metric."""
    from splitscope.records.metrics import control_status, find_record, metric_records

    records = doc.get("records") or []
    tau = ((doc.get("options") or {}).get("search") or {}).get("tau")
    rows = []
    for what, name in ((f.name, f.metric) for f in findings if f.metric):
        metric = metrics.get(name)
        if metric is None:
            continue
        if tau is not None:
            what = what.replace("τ", f"τ = {tau}")
        found = [r for r in metric_records(metric, records, [boundary])
                 if ((r.get("boundary") or {}).get("name") == boundary or metric.within)
                 and r.get("numerator") is not None and r.get("denominator")]
        if found:
            r = max(found, key=lambda r: r["numerator"] / r["denominator"])
            calibration = ""
            if metric.control:
                status = control_status([r])
                calibration = status["status"]
                if status.get("denominator"):
                    calibration += (f" ({count(status['numerator'])} of "
                                    f"{count(status['denominator'])} control rows)")
            rows.append(f"| {what} | {count(r['numerator'])} | {count(r['denominator'])} | "
                        f"{percent_of(r['numerator'], r['denominator'])} | "
                        f"`{r['predicate']['name']}` | {calibration} | `{r['id']}` |")
            continue
        r = find_record(records, metric, boundary)
        if r is not None:
            reason = str(r.get("reason") or r.get("status")).replace("|", "/").replace("\n", " ")
            rows.append(f"| {what} | — | — | — | `{(r.get('predicate') or {}).get('name')}` | "
                        f"{r.get('status')}: {reason} | `{r['id']}` |")
    return rows


def _dedup_rows(doc: Mapping[str, Any], roles: Roles | None, files: list[str]) -> list[str]:
    """The table rows of the deduplicated splits, with the lists the folder holds."""
    rows = []
    for r in doc.get("records") or []:
        if not has_role(r, R.DEDUPLICATED_SPLIT, roles) or r.get("status") != "completed":
            continue
        split = str(((r.get("boundary") or {}).get("query") or {}).get("name"))
        lists = [f for f in files if PurePosixPath(f).parts[:2] == ("lists", "dedup")
                 and PurePosixPath(f).stem in (f"{_stem(split)}_kept", f"{_stem(split)}_removed")]
        removed_by = ((r.get("predicate") or {}).get("params") or {}).get("removed_by") or []
        rows.append(f"| {split} | {count(r['numerator'])} | {count(r['denominator'])} | "
                    f"{percent_of(r['numerator'], r['denominator'])} | "
                    f"{', '.join(f'`{p}`' for p in removed_by)} | "
                    f"{', '.join(f'`{f}`' for f in lists) or '—'} | `{r['id']}` |")
    return rows


def _stem(name: str) -> str:
    from splitscope.records.exports import file_stem

    return file_stem(str(name), subfolders=False)


def _front_matter(meta: Mapping[str, list[str]]) -> str:
    """YAML front matter of string lists (the Hub's card metadata block)."""
    lines = ["---"]
    for key, values in meta.items():
        lines += [f"{key}:", *(f"- {v}" for v in values)]
    return "\n".join([*lines, "---"]) + "\n"


def _split_front(text: str) -> tuple[str | None, str]:
    """A card's front matter (with its ``---`` lines) and the rest; ``None`` without one."""
    match = _FRONT.match(text)
    if match is None:
        return None, text
    return text[:match.end()], text[match.end():]


def _keys(front: str) -> list[str]:
    """The top-level keys of a front matter."""
    return [k.strip() for k in _KEY.findall(_inner(front))]


def _inner(front: str) -> str:
    match = _FRONT.match(front)
    return match.group(1) if match else ""


def _key_blocks(front: str) -> list[tuple[str, str]]:
    """Each top-level key of a front matter with its lines."""
    inner = _inner(front)
    starts = [(m.start(), m.group(1).strip()) for m in _KEY.finditer(inner)]
    return [(key, inner[pos:(starts[i + 1][0] if i + 1 < len(starts) else len(inner))])
            for i, (pos, key) in enumerate(starts)]


def _add_keys(front: str, blocks: list[str]) -> str:
    """``front`` with ``blocks`` (whole key blocks) before its closing ``---`` line."""
    match = _FRONT.match(front)
    close = match.end(1)
    inner = front[:close]
    newline = "\r\n" if "\r\n" in front else "\n"
    if inner and not inner.endswith("\n"):
        inner += newline
    added = "".join(b if b.endswith("\n") else b + "\n" for b in blocks)
    if newline != "\n":
        added = added.replace("\n", newline)
    return inner + added + front[close:]
