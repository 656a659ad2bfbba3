"""The audit as a notebook cell shows it (``AuditResult._repr_html_``): the verdicts, the
"what this means" lines, the ``--fail-on`` outcomes, the score card and the completed
records with their numerators, denominators and intervals, in a few kilobytes of plain HTML
(no script, no image). The full report stays ``report.html``."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

#: records shown in the cell; the others are in ``result.records``
RECORDS_SHOWN = 25


def _list(title: str, lines: list[str]) -> str:
    if not lines:
        return ""
    items = "".join(f"<li>{escape(str(x))}</li>" for x in lines)
    return f"<h4>{escape(title)}</h4><ul>{items}</ul>"


def _num(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return escape(str(v))


def _table(head: list[str], body: list[list[str]]) -> str:
    th = "".join(f"<th style='text-align:left'>{escape(h)}</th>" for h in head)
    rows = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in body)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{rows}</tbody></table>"


def _records(records: list[dict]) -> str:
    done = [r for r in records if r.get("status") in ("completed", "partial")
            and (r.get("denominator") or r.get("estimate") is not None)]
    body = []
    for r in done[:RECORDS_SHOWN]:
        unc = r.get("uncertainty") or {}
        interval = (f"[{_num(unc.get('low'))}, {_num(unc.get('high'))}]"
                    if unc.get("low") is not None else "")
        body.append([escape(str(r["id"])), escape(str((r.get("boundary") or {}).get("name")
                                                      or "")),
                     _num(r.get("numerator")), _num(r.get("denominator")),
                     escape(str(r.get("unit") or "")), _num(r.get("estimate")), interval])
    more = len(done) - len(body)
    note = (f"<p>{more} more completed record(s), and {len(records) - len(done)} without a "
            f"count, in <code>result.records</code>.</p>")
    return (f"<h4>Records ({len(done)} with a count)</h4>"
            + _table(["id", "boundary", "numerator", "denominator", "unit", "estimate",
                      "interval"], body) + note)


def audit_html(doc: dict[str, Any], out_dir: str | Path) -> str:
    """HTML for one audit document (see the module docstring)."""
    inputs = ", ".join(str(i.get("path")) for i in doc.get("inputs", [])
                       if i.get("role") == "audited")
    m = doc.get("manifest", {})
    head = (f"<h3>splitscope audit of {escape(inputs or '?')}</h3>"
            f"<p>{m.get('rows', '?')} rows; splits {escape(str(m.get('splits', {})))}; "
            f"exit code {doc['run'].get('exit_code')}; report: "
            f"<code>{escape(str(Path(out_dir) / 'report.html'))}</code></p>")
    s = doc.get("summary", {})
    fail = [f"{c.get('condition')}: "
            + (f"not measured ({c.get('reason') or 'no record'})" if c.get("value") is None
               else f"{'held' if c.get('held') else 'not held'} (value {_num(c['value'])})")
            for c in doc.get("fail_on", [])]
    card = _table(["detail", "status", "value"],
                  [[escape(c["detail"]), escape(c["status"]), escape(str(c["value"]))]
                   for c in doc.get("scorecard", [])])
    return ("<div class='splitscope-audit'>" + head
            + _list("Verdicts", s.get("verdicts", []))
            + _list("What this means", s.get("meaning", []))
            + _list("--fail-on", fail)
            + "<h4>Score card</h4>" + card
            + _records(doc.get("records", []))
            + _list("Notes", s.get("lines", []))
            + "<p>Per-row flags: <code>result.issues</code> (lists/issues.parquet).</p></div>")
