"""Compare two audits of the same inputs (``python benchmarks/compare_audits.py OLD NEW``, each
an audit folder): ``audit.json`` key by key and every file under ``lists/`` by SHA-256.

What differs between any two runs is left out: the run's times, durations, host and
command-independent timings, software versions, the output folders' own paths, and the
checksums of ``audit.json``/``report.html`` (they hold the times). Prints each difference;
exit code 1 when there is one outside ``--allow KEY`` (a top-level key, repeatable).

``--report`` also compares ``report.html`` section by section (the text from one
``data-section`` mark to the next, with the run's times and the layers' durations left out)
and, when both audits wrote one, ``croissant.json`` key by key (without its dates and the
checksums of ``audit.json``/``report.html``).

``--renamed-layers`` allows one more change, to compare audits across the change that made a
record's ``layer`` the name of the layer that wrote it: a record (same id, same place) whose
``layer`` became the name of one of the new audit's layers, with a ``section`` equal to its
old ``layer`` or none. Each such rename is counted and printed; anything else in the record
still counts as a difference."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

VOLATILE_RUN = {"started", "finished", "duration_s", "scan_seconds", "host"}


def _normalised(folder: Path, roots: list[Path]) -> dict:
    """``folder``'s audit.json without what differs between runs; ``roots`` (the folders
    holding either audit) are written ``<OUT>``."""
    text = json.dumps(json.loads((folder / "audit.json").read_text()))
    for root in roots:
        text = text.replace(str(root), "<OUT>")
    doc = json.loads(text)
    doc["run"] = {k: v for k, v in doc["run"].items() if k not in VOLATILE_RUN}
    doc.pop("software", None)
    for layer in doc.get("layers", []):
        layer.pop("duration_s", None)
    doc["manifest"]["scan"].pop("seconds", None)
    doc["artifacts"] = [a for a in doc.get("artifacts", [])
                        if a.get("path") not in ("audit.json", "report.html")]
    return doc


def _differences(a, b, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a:
                out.append(f"+ {path}/{k}")
            elif k not in b:
                out.append(f"- {path}/{k}")
            else:
                out += _differences(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"~ {path}: {str(a)[:100]} -> {str(b)[:100]}"]


def _renamed_layers(old: dict, new: dict) -> dict[tuple[str, str], int]:
    """Undo in ``new`` the renames ``--renamed-layers`` allows (see the module docstring) and
    count them by (old layer, new layer)."""
    names = {layer["layer"] for layer in new.get("layers", [])}
    counts: dict[tuple[str, str], int] = {}
    for a, b in zip(old.get("records", []), new.get("records", [])):
        if a.get("id") != b.get("id") or a.get("layer") == b.get("layer"):
            continue
        if b.get("layer") in names and b.get("section", a.get("layer")) == a.get("layer"):
            key = (a["layer"], b["layer"])
            counts[key] = counts.get(key, 0) + 1
            b["layer"] = a["layer"]
            b.pop("section", None)
    return counts


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z?")
_RUN_SECONDS = re.compile(r"(<div class=\"meta\">[^<]*?· )[\d.]+ s ·")
_LAYER_SECONDS = re.compile(r'(<td class="num">[\d,]+</td>)<td class="num">[^<]*</td>')


def _report_sections(folder: Path, roots: list[Path]) -> list[tuple[str, str]]:
    """``report.html`` as (section, text) in page order: the text before the first
    ``data-section`` mark, then from each mark to the next, without the run's times and
    durations."""
    text = (folder / "report.html").read_text(encoding="utf-8")
    for root in roots:
        text = text.replace(str(root), "<OUT>")
    text = _TIME.sub("<TIME>", _RUN_SECONDS.sub(r"\1<S> s ·", text))
    head, *rest = re.split(r'data-section="([^"]+)"', text)
    sections = [("(head)", head)] + list(zip(rest[::2], rest[1::2]))
    return [(name, _LAYER_SECONDS.sub(r'\1<td class="num"><S></td>', body) if name == "layers"
             else body) for name, body in sections]


def _report_differences(old: Path, new: Path, roots: list[Path]) -> tuple[list[str], int, int]:
    """Differences between the two reports' sections, the sections compared and how many
    are identical."""
    a, b = _report_sections(old, roots), _report_sections(new, roots)
    if [n for n, _ in a] != [n for n, _ in b]:
        return [f"~ /report.html: sections {[n for n, _ in a]} -> {[n for n, _ in b]}"], \
            max(len(a), len(b)), 0
    found = [f"~ /report.html[{i}] ({name}): section differs" for i, ((name, x), (_, y))
             in enumerate(zip(a, b)) if x != y]
    return found, len(a), len(a) - len(found)


def _croissant(folder: Path, roots: list[Path]) -> dict | None:
    path = folder / "croissant.json"
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    for root in roots:
        text = text.replace(str(root), "<OUT>")
    doc = json.loads(_TIME.sub("<TIME>", text))
    doc.pop("datePublished", None)
    for entry in doc.get("distribution", []):
        if entry.get("@id") in ("audit.json", "report.html"):
            entry.pop("sha256", None)
            entry.pop("contentSize", None)
    return doc


def _lists(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((folder / "lists").rglob("*")) if p.is_file()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--allow", action="append", default=[],
                    help="top-level key of audit.json allowed to differ (e.g. options)")
    ap.add_argument("--report", action="store_true",
                    help="also compare report.html section by section and croissant.json")
    ap.add_argument("--renamed-layers", action="store_true",
                    help="allow a record's layer to become its writing layer's name (with the "
                         "old value as its section)")
    args = ap.parse_args(argv)
    roots = sorted({p.resolve().parent for p in (args.old, args.new)}, key=lambda p: -len(str(p)))
    old, new = _normalised(args.old, roots), _normalised(args.new, roots)
    renamed = _renamed_layers(old, new) if args.renamed_layers else {}
    found = _differences(old, new)
    old_lists, new_lists = _lists(args.old), _lists(args.new)
    found += [f"~ {name}: file differs" for name in sorted(set(old_lists) | set(new_lists))
              if old_lists.get(name) != new_lists.get(name)]
    report_line = ""
    if args.report:
        in_report, sections, same = _report_differences(args.old, args.new, roots)
        found += in_report
        report_line = f"; report.html: {same} of {sections} sections identical"
        old_cr, new_cr = _croissant(args.old, roots), _croissant(args.new, roots)
        if old_cr is not None or new_cr is not None:
            in_croissant = _differences(old_cr or {}, new_cr or {}, "croissant.json")
            found += [d.replace(" croissant.json", " /croissant.json", 1)
                      for d in in_croissant]
            report_line += (f"; croissant.json: {len(in_croissant)} difference(s)"
                            if old_cr is not None and new_cr is not None
                            else "; croissant.json written by one audit only")
    blocking = [d for d in found if d.split()[1].split("/")[1].split("[")[0] not in args.allow
                or not d.split()[1].startswith("/")]
    records = len(new.get("records", []))
    same = sum(x == y for x, y in zip(old.get("records", []), new.get("records", [])))
    print(f"{args.old} vs {args.new}: audit.json ({same} of {records} records identical) and "
          f"{len(new_lists)} list files compared{report_line}; {len(found)} difference(s), "
          f"{len(blocking)} outside {args.allow or 'nothing'}")
    for (was, now), n in sorted(renamed.items()):
        print(f"   allowed: record layer {was} -> {now} ({n} records)")
    for line in found[:50]:
        print("  ", line)
    return 1 if blocking else 0


if __name__ == "__main__":
    sys.exit(main())
