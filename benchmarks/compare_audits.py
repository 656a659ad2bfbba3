"""Compare two audits of the same inputs (``python benchmarks/compare_audits.py OLD NEW``, each
an audit folder): ``audit.json`` key by key and every file under ``lists/`` by SHA-256.

What differs between any two runs is left out: the run's times, durations, host and
command-independent timings, software versions, the output folders' own paths, and the
checksums of ``audit.json``/``report.html`` (they hold the times). Prints each difference;
exit code 1 when there is one outside ``--allow KEY`` (a top-level key, repeatable).

``--renamed-layers`` allows one more change, to compare audits across the change that made a
record's ``layer`` the name of the layer that wrote it: a record (same id, same place) whose
``layer`` became the name of one of the new audit's layers, with a ``section`` equal to its
old ``layer`` or none. Each such rename is counted and printed; anything else in the record
still counts as a difference."""

from __future__ import annotations

import argparse
import hashlib
import json
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


def _lists(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((folder / "lists").rglob("*")) if p.is_file()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--allow", action="append", default=[],
                    help="top-level key of audit.json allowed to differ (e.g. options)")
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
    blocking = [d for d in found if d.split()[1].split("/")[1].split("[")[0] not in args.allow
                or not d.split()[1].startswith("/")]
    print(f"{args.old} vs {args.new}: audit.json and {len(new_lists)} list files compared; "
          f"{len(found)} difference(s), {len(blocking)} outside {args.allow or 'nothing'}")
    for (was, now), n in sorted(renamed.items()):
        print(f"   allowed: record layer {was} -> {now} ({n} records)")
    for line in found[:50]:
        print("  ", line)
    return 1 if blocking else 0


if __name__ == "__main__":
    sys.exit(main())
