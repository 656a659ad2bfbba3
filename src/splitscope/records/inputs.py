"""Input fingerprints: what a record or an audit read, named by SHA-256 (METHODS §6.1)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pandas as pd

from splitscope.records.model import file_fingerprint, sha256_file
from splitscope.records.paths import input_name

__all__ = ["fingerprint_input", "fingerprint_path", "release_inputs"]


def fingerprint_input(path: str | Path, role: str, manifest: pd.DataFrame | None) -> dict[str, Any]:
    """Fingerprint one release input: the SHA-256 of a list file's bytes, or, for a folder, of
    its listing (one ``path<TAB>split<TAB>label`` line per row, release order), which names
    exactly what was read (a Hub id is fingerprinted by
    :func:`splitscope.manifest.hub.fingerprint_hub`)."""
    rows = len(manifest) if manifest is not None else None
    if not isinstance(path, (str, os.PathLike)):  # in-memory arrays or a datasets object
        digest = hashlib.sha256()
        if manifest is not None:
            for p, s, lab, f in zip(manifest["path"].astype(str),
                                    manifest["split_released"].astype(str),
                                    manifest["label"].astype(str), manifest["file"].astype(str)):
                digest.update(f"{p}\t{s}\t{lab}\t{f}\n".encode("utf-8", "surrogateescape"))
        return {"role": role, "path": f"in-memory {type(path).__name__}", "kind": "in-memory",
                "sha256": digest.hexdigest(),
                "sha256_of": "path, split, label and file key per row, release order (the "
                             "key of an array names the SHA-256 of its pixels)", "rows": rows}
    path = Path(path)
    if path.is_file():
        fp = file_fingerprint(path)
        kind = "list" if manifest is None or "content" not in manifest.columns else "table"
        return {"role": role, "path": str(path), "kind": kind, "sha256": fp["sha256"],
                "sha256_of": f"the {kind} file's bytes", "rows": rows}
    digest = hashlib.sha256()
    if manifest is not None:
        for p, s, lab in zip(manifest["path"].astype(str), manifest["split_released"].astype(str),
                             manifest["label"].astype(str)):
            digest.update(f"{p}\t{s}\t{lab}\n".encode("utf-8", "surrogateescape"))
    return {"role": role, "path": str(path), "kind": "folder", "sha256": digest.hexdigest(),
            "sha256_of": "the folder listing (path, split, label per row, release order)",
            "rows": rows}


def fingerprint_path(role: str, path: str | Path) -> dict[str, Any]:
    """Fingerprint of a supplied file (SHA-256 of its bytes) or folder (SHA-256 over the
    relative path and SHA-256 of every file, sorted), e.g. predictions or attribution maps."""
    path = Path(path)
    if path.is_file():
        return {"role": role, "path": str(path), "kind": "file",
                "sha256": sha256_file(path), "sha256_of": "the file's bytes", "rows": None}
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f.relative_to(path).as_posix().encode() + b"\0")
        digest.update(sha256_file(f).encode() + b"\n")
    return {"role": role, "path": str(path), "kind": "folder", "sha256": digest.hexdigest(),
            "sha256_of": "relative path and SHA-256 of every file, sorted", "rows": None}


def release_inputs(manifest: pd.DataFrame) -> list[dict[str, str]]:
    """``{"path", "sha256"}`` of each input a manifest was built from: a list file's bytes, or
    for a folder the newline-joined released paths of its rows (a folder has no single file to
    digest). ``path`` is the input's name (:func:`splitscope.records.paths.input_name`), as a
    record publishes it."""
    out = []
    for item in manifest.attrs.get("inputs", []):
        path = item.get("path")
        if item.get("kind") == "list" and path:
            try:
                out.append({**file_fingerprint(path), "path": input_name(path)})
            except OSError:
                out.append({"path": input_name(path), "sha256": "unreadable"})
        elif path:
            paths = manifest.loc[manifest["file"].astype("string").str.startswith(
                str(Path(path).resolve())).fillna(False), "path"].astype(str)
            digest = hashlib.sha256("\n".join(paths).encode("utf-8")).hexdigest()
            out.append({"path": input_name(path), "sha256": digest,
                        "sha256_of": "newline-joined released paths of the folder"})
    return out
