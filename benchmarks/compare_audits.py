"""Compare two audits of the same inputs (``python benchmarks/compare_audits.py OLD NEW``, each
an audit folder): ``audit.json`` key by key and every file under ``lists/`` by SHA-256.

What differs between any two runs is left out: the run's times, durations, host and
command-independent timings, software versions, the output folders' own paths, and the
checksums of ``audit.json``/``report.html`` (they hold the times). Prints each difference;
exit code 1 when there is one outside ``--allow KEY`` (a top-level key, repeatable)."""

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


def _lists(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((folder / "lists").rglob("*")) if p.is_file()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--allow", action="append", default=[],
                    help="top-level key of audit.json allowed to differ (e.g. options)")
    args = ap.parse_args(argv)
    roots = sorted({p.resolve().parent for p in (args.old, args.new)}, key=lambda p: -len(str(p)))
    found = _differences(_normalised(args.old, roots), _normalised(args.new, roots))
    old_lists, new_lists = _lists(args.old), _lists(args.new)
    found += [f"~ {name}: file differs" for name in sorted(set(old_lists) | set(new_lists))
              if old_lists.get(name) != new_lists.get(name)]
    blocking = [d for d in found if d.split()[1].split("/")[1].split("[")[0] not in args.allow
                or not d.split()[1].startswith("/")]
    print(f"{args.old} vs {args.new}: audit.json and {len(new_lists)} list files compared; "
          f"{len(found)} difference(s), {len(blocking)} outside {args.allow or 'nothing'}")
    for line in found[:50]:
        print("  ", line)
    return 1 if blocking else 0


if __name__ == "__main__":
    sys.exit(main())
