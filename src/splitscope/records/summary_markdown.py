"""A short summary of a finished audit for a CI job page (GitHub's ``$GITHUB_STEP_SUMMARY``) or
a terminal: the outcome, the audit's opening (verdict, findings, actions, notes), the
``--fail-on`` outcomes, every measured finding with its numerator and denominator or interval,
the layers not completed, and where the report is. It reads only ``audit.json`` (the document), so a gate and its summary cannot disagree."""

from __future__ import annotations

from pathlib import Path

from splitscope.exit_codes import EXIT_CODES, EXIT_NOT_MEASURED, WRITTEN

#: what each exit code of ``splitscope audit`` means (:data:`splitscope.exit_codes.EXIT_CODES`)
EXIT_MEANINGS = EXIT_CODES


def _escape(text: object) -> str:
    """``text`` safe inside a Markdown paragraph or table cell (no HTML, no cell breaks)."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|").replace("\n", " "))


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


def _figure(m: dict) -> str:
    """A measured finding's figure: numerator of denominator for a share, else the estimate
    with its interval and baseline."""
    if m.get("kind") == "share":
        return f"{m['numerator']:,} of {m['denominator']:,} ({m['estimate']:.2%})"
    return (f"{m['estimate']:.3f} [{m['low']:.3f}, {m['high']:.3f}], chance "
            f"{m['baseline']:.3g}")


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
    for head, key in (("Verdict", "verdict"), ("Findings, largest first", "findings"),
                      ("What to do", "actions"), ("Notes (not findings)", "notes")):
        if summary.get(key):
            sections.append((head, list(summary[key])))

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

    measured = doc.get("findings") or []
    if measured:
        rows = [("finding", "boundary", "found", "figure", "interval", "record")]
        rows += [(m["finding"], m["boundary"], "yes" if m["found"] else "no", _figure(m),
                  m["interval"], m.get("record") or "") for m in measured]
        sections.append(("Every finding measured, ranked (audit.json findings)", rows))

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


__all__ = ["EXIT_MEANINGS", "audit_summary", "render", "summary_sections"]
