"""A short summary of a finished audit for a CI job page (GitHub's ``$GITHUB_STEP_SUMMARY``) or
a terminal: the outcome, the verdict lines, the ``--fail-on`` outcomes, every record with
affected rows as its numerator and denominator, the layers not completed, and where the report
is. It reads only ``audit.json`` (the document), so a gate and its summary cannot disagree."""

from __future__ import annotations

from pathlib import Path

from splitscope.exit_codes import EXIT_CODES, EXIT_NOT_MEASURED, WRITTEN

#: what each exit code of ``splitscope audit`` means (:data:`splitscope.exit_codes.EXIT_CODES`)
EXIT_MEANINGS = EXIT_CODES
MAX_FINDINGS = 40


def _escape(text: object) -> str:
    """``text`` safe inside a Markdown paragraph or table cell (no HTML, no cell breaks)."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|").replace("\n", " "))


def _boundary(record: dict) -> str:
    b = record.get("boundary")
    return str(b.get("name", "")) if isinstance(b, dict) else str(b or "")


def _fraction(record: dict) -> str:
    num, den = record.get("numerator"), record.get("denominator")
    if num is None or den is None:
        return ""
    return f"{num} of {den}"


def _rate(value) -> str:
    return "not measured" if value is None else f"{value:.4g}"


def _outcome(cond: dict, doc: dict) -> str:
    """A ``--fail-on`` outcome as the table says it: HELD, not held, or not measured (the
    gate fails, exit 5, unless ``--allow-unmeasured``) with the reason."""
    if cond.get("held"):
        return "**HELD**"
    if cond.get("value") is not None:
        return "not held"
    allowed = (doc.get("options") or {}).get("run", {}).get("allow_unmeasured")
    gate = ("not measured, allowed (--allow-unmeasured)" if allowed else
            f"NOT MEASURED, the gate fails (exit {EXIT_NOT_MEASURED})")
    return f"{gate}: {cond['reason']}" if cond.get("reason") else gate


def findings(doc: dict) -> list[dict]:
    """The completed records that count affected rows with at least one, largest rate first."""
    found = [r for r in doc.get("records", [])
             if r.get("status") == "completed" and str(r.get("unit") or "").startswith("affected")
             and isinstance(r.get("numerator"), int) and r["numerator"] > 0
             and r.get("denominator")]
    return sorted(found, key=lambda r: (-(r.get("estimate") or 0), r["id"]))


def summary_sections(doc: dict | None, *, exit_code: int | None, out_dir: str | Path,
                     artifact: str | None = None) -> tuple[str, list[tuple[str, list]]]:
    """The headline and the sections ``(heading, rows)``: a row is a line (str) or a table row
    (a tuple, the first one its header). ``doc`` is the ``audit.json`` document, None when the
    run wrote none; ``exit_code`` is the audit's (``run.exit_code`` when not given)."""
    if exit_code is None and doc is not None:
        exit_code = doc.get("run", {}).get("exit_code")
    meaning = EXIT_MEANINGS.get(exit_code, "ended unexpectedly") if exit_code is not None \
        else "outcome unknown"
    headline = f"splitscope audit: {meaning} (exit code {exit_code})"
    out = Path(out_dir)
    if doc is None:
        return headline, [("Report", [(f"No audit.json in {out}: the audit wrote no "
                                       f"report; its message is in the job log.")])]
    sections: list[tuple[str, list]] = []
    summary = doc.get("summary", {})
    verdicts = list(summary.get("verdicts", [])) + list(summary.get("meaning", []))
    sections.append(("Verdicts", verdicts or ["No finding on any boundary."]))

    by_id = {r["id"]: r for r in doc.get("records", [])}
    if doc.get("fail_on"):
        rows: list = [("condition", "value", "outcome", "records")]
        for cond in doc["fail_on"]:
            records = "; ".join(
                f"{rid} ({_fraction(by_id[rid])})" if _fraction(by_id.get(rid, {})) else rid
                for rid in cond.get("records", []))
            rows.append((f"`{cond['condition']}`", _rate(cond.get("value")),
                         _outcome(cond, doc), records))
        sections.append(("--fail-on", rows))

    found = findings(doc)
    if found:
        rows = [("record", "boundary", "affected", "rate", "unit")]
        rows += [(r["id"], _boundary(r), _fraction(r), f"{r.get('estimate') or 0:.2%}",
                  r.get("unit") or "") for r in found[:MAX_FINDINGS]]
        if len(found) > MAX_FINDINGS:
            rows.append(f"… and {len(found) - MAX_FINDINGS} more in audit.json.")
        sections.append(("Findings (numerator of denominator, as audit.json gives them)", rows))

    pending = [f"{layer['layer']}: {layer['status']}"
               + (f" — {layer['reason']}" if layer.get("reason") else "")
               for layer in doc.get("layers", []) if layer.get("status") != "completed"]
    if pending:
        sections.append(("Layers not completed", pending))

    where = [(f"Report: {out / 'report.html'}; records: {out / 'audit.json'}; "
              f"lists: {out / 'lists'}/.")]
    if artifact:
        where.append(f"The folder is attached to this run as the artifact `{artifact}`.")
    sections.append(("Report", where))
    return headline, sections


def render(headline: str, sections: list[tuple[str, list]], *, markdown: bool) -> str:
    """The sections as GitHub-flavoured Markdown or as plain text."""
    lines = [f"## {_escape(headline)}" if markdown else headline]
    for heading, rows in sections:
        lines += ["", f"### {_escape(heading)}" if markdown else f"{heading}:"]
        table_started = False
        for row in rows:
            if isinstance(row, tuple):
                if not markdown:
                    lines.append("  " + " | ".join(str(c).strip("`*") for c in row))
                    continue
                cells = [c if str(c).startswith(("`", "**")) else _escape(c) for c in row]
                lines.append("| " + " | ".join(cells) + " |")
                if not table_started:
                    lines.append("|" + "---|" * len(row))
                    table_started = True
            else:
                lines.append(f"- {_escape(row)}" if markdown else f"  {row}")
    return "\n".join(lines) + "\n"


def audit_summary(out_dir: str | Path, *, exit_code: int | None = None,
                  artifact: str | None = None, markdown: bool = True) -> str:
    """The summary of the audit in ``out_dir``. With an ``exit_code`` that means no audit was
    written (2, 4, …), an ``audit.json`` left there by an earlier run is not read."""
    import json

    path = Path(out_dir) / "audit.json"
    doc = None
    if (exit_code is None or exit_code in WRITTEN) and path.is_file():
        doc = json.loads(path.read_text(encoding="utf-8"))
    headline, sections = summary_sections(doc, exit_code=exit_code, out_dir=out_dir,
                                          artifact=artifact)
    return render(headline, sections, markdown=markdown)


__all__ = ["EXIT_MEANINGS", "audit_summary", "findings", "render", "summary_sections"]
