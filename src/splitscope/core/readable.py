"""Whether an audit read its release: the sentence that opens an audit in which most listed
files could not be read (the first of its verdict lines, :func:`splitscope.core.verdicts.
warnings`), and the input error of an audit that could read none (exit 2): a report of zero
findings over zero images must never read as clean.

Both read the ``manifest`` section of the audit document (:func:`manifest_section` builds the
part they read before the document exists): the scan's failure counts by unique file, the
first failed rows, and the list files with where their relative paths resolve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from splitscope.records.format import count as fmt_int

__all__ = ["list_roots", "nothing_read", "unread_files"]

#: what a failure reason most likely means, when it is most of the failures
_CAUSES = {
    "outside_root": "their paths lie outside the release root (.., an absolute path or a "
                    "symbolic link): --allow-outside-root reads them",
    "url": "they are URLs: --allow-urls reads them",
    "too_large": "they are larger than the read cap: --max-file-size raises it",
    "invalid_utf8": "their paths are not valid UTF-8",
    "zero_byte": "they are empty (0 bytes): an interrupted copy or download?",
}


def list_roots(inputs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The list files among a manifest's inputs (``manifest.attrs["inputs"]``): ``path``,
    ``root`` (where its relative paths resolve), ``root_given`` (``--root``; else the list's
    folder) and ``relative_paths`` (how many of its paths are relative)."""
    return [{"path": str(i.get("path")), "root": str(i.get("root")),
             "root_given": bool(i.get("root_given")),
             "relative_paths": int(i.get("relative_paths") or 0)}
            for i in inputs if i.get("kind") == "list"]


def _failed_files(manifest: Mapping[str, Any]) -> tuple[int, int, dict[str, int]]:
    files = (((manifest.get("scan") or {}).get("failures") or {}).get("files") or {})
    return (int(files.get("total") or 0), int(files.get("denominator") or 0),
            {str(k): int(v) for k, v in (files.get("by_reason") or {}).items()})


def _cause(manifest: Mapping[str, Any], by_reason: Mapping[str, int]) -> str:
    """The likely cause of the failures: their most common reason, read with where the lists'
    relative paths resolve."""
    top = max(by_reason, key=lambda k: (by_reason[k], k)) if by_reason else None
    if top == "missing":
        lists = [entry for entry in manifest.get("lists") or [] if entry["relative_paths"]]
        defaulted = [entry for entry in lists if not entry["root_given"]]
        if defaulted:
            folders = ", ".join(dict.fromkeys(entry["root"] for entry in defaulted))
            return (f"relative paths resolve against the list's folder ({folders}); pass "
                    "--root DIRECTORY, the folder they are relative to")
        if lists:
            folders = ", ".join(dict.fromkeys(entry["root"] for entry in lists))
            return (f"relative paths resolve against --root ({folders}): is it the folder "
                    "they are relative to?")
        return "the files are not where the release names them"
    if top in _CAUSES:
        return _CAUSES[top]
    return "the files are not images splitscope can decode"


def unread_files(manifest: Mapping[str, Any], *, listed_in: str | None = None) -> str | None:
    """The sentence for an audit in which more than half the files (unique files; "listed
    files" of a list) could not be read, with their count by reason and the likely cause;
    ``None`` otherwise. ``listed_in`` names where each failed file is listed; without it, the
    first one is named."""
    failed, files, by_reason = _failed_files(manifest)
    if not files or 2 * failed <= files:
        return None
    reasons = ", ".join(f"{fmt_int(n)} {reason.replace('_', ' ')}"
                        for reason, n in sorted(by_reason.items(), key=lambda kv: -kv[1]))
    where = f"each file with its reason in {listed_in}" if listed_in else _first(manifest)
    noun = "listed files" if manifest.get("lists") else "files"
    return (f"{fmt_int(failed)} of {fmt_int(files)} {noun} could not be read "
            f"({reasons}): {_cause(manifest, by_reason)}; {where}.")


def _first(manifest: Mapping[str, Any]) -> str:
    listed = ((manifest.get("failures") or {}).get("listed") or [])
    if not listed:
        return "no file was read"
    first = listed[0]
    return f"the first, {first.get('path')}: {first.get('detail') or first.get('reason')}"


def nothing_read(manifest: Mapping[str, Any]) -> str | None:
    """The input error of an audit that could read no file of its release (exit 2): the
    :func:`unread_files` sentence naming the first failed file, else a sentence for a release
    whose rows name no file; ``None`` when a file was read."""
    scan = manifest.get("scan") or {}
    if "features_ok" not in scan or scan["features_ok"] or not manifest.get("rows"):
        return None  # a file was read, no row, or the scan summary failed (it says so)
    _, files, _ = _failed_files(manifest)
    tail = (" (to audit only what the paths, labels and groups say, pass --paths-only)")
    if files:
        return unread_files(manifest) + tail
    return (f"none of the {fmt_int(int(manifest.get('rows') or 0))} rows names a file that "
            f"could be read: {_first(manifest)}{tail}")
