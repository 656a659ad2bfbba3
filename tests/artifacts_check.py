"""Check of an output folder's artifacts.json, shared by the tests of every command."""

from __future__ import annotations

import json
from pathlib import Path

from splitscope.features.workspace import OUT_LOCK
from splitscope.records import sha256_file
from splitscope.records.exports import ARTIFACTS_FILE


def assert_artifacts_cover(out_dir: Path) -> list[str]:
    """Every file under ``out_dir`` (except artifacts.json and the lock a run holds there
    while it writes) is listed with its true SHA-256 and size, and nothing else is; returns
    the listed paths."""
    doc = json.loads((out_dir / ARTIFACTS_FILE).read_text())
    listed = {m["contentUrl"]: m for m in doc["distribution"]}
    on_disk = {p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*")
               if p.is_file() and p.name != ARTIFACTS_FILE and not p.name.endswith(OUT_LOCK)}
    assert set(listed) == on_disk
    for name, m in listed.items():
        assert m["sha256"] == sha256_file(out_dir / name)
        assert m["contentSize"] == f"{(out_dir / name).stat().st_size} B"
    return sorted(listed)
