"""Hostile names stored in an embedded-image table (the ``path`` of a Hugging Face Image
struct): bytes that are not UTF-8, control characters, newlines and carriage returns, ``../``,
absolute and Windows paths, a formula. Every verb that reads the table exits 0 with each name
listed (bytes as ``\\xNN`` escapes), reads nothing the names point at, and gives the rest of
the results of the same table with plain names."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hostile_corpus import image, tree_state

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

NAMES = [b"ok_0.png", b"bad\xff\xfe.png", b"new\nline.png", b"ctrl\x1b[31m\x07.png",
         b"nul\x00.png", b"cr\rname.png", b"tab\t.png", b'=HYPERLINK("x").png',
         b"\xed\xa0\x80surrogate.png", b"C:\\Windows\\..\\x.png", b"dup.png", b"dup.png"]
"""Stored names; the table also names ``../outside/secret.png`` and the absolute path of
that file, which holds other bytes."""


def _png(i: int) -> bytes:
    buf = io.BytesIO()
    image(i, w=32, h=24).save(buf, "PNG")
    return buf.getvalue()


def _escaped(name: bytes) -> str:
    return name.decode("utf-8", "backslashreplace")


def _table(names: list[bytes], binary: bool) -> pa.Table:
    """An image table whose struct's ``path`` holds ``names`` as raw bytes: a string field
    (written unchecked, as a writer of another language may) or a binary one."""
    n = len(names)
    raw = pa.array(names, pa.binary())
    paths = raw if binary else pa.Array.from_buffers(pa.string(), n, raw.buffers())
    images = pa.StructArray.from_arrays([pa.array([_png(i) for i in range(n)]), paths],
                                        ["bytes", "path"])
    return pa.table({"image": images, "label": [("a", "b")[i % 2] for i in range(n)],
                     "split": [("train", "test")[(i // 2) % 2] for i in range(n)]})


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """``{kind: table path}`` for the hostile names as a string and as a binary field, and
    ``plain``: the same images under names ``plain_<i>.png``."""
    root = tmp_path_factory.mktemp("names")
    outside = root / "outside"
    outside.mkdir()
    image(99).save(outside / "secret.png")
    names = NAMES + [b"../outside/secret.png", os.fsencode(outside / "secret.png")]
    data = root / "data"
    data.mkdir()
    found = {}
    for kind, binary in (("string", False), ("binary", True)):
        found[kind] = data / f"{kind}.parquet"
        pq.write_table(_table(names, binary), found[kind])
    found["plain"] = root / "plain" / "plain.parquet"
    found["plain"].parent.mkdir()
    pq.write_table(_table([f"plain_{i}.png".encode() for i in range(len(names))], False),
                   found["plain"])
    return {"tables": found, "names": names, "outside": outside, "data": data}


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "splitscope.cli", *args], check=False,
                          capture_output=True, text=True, env=ENV, timeout=110)


def test_the_unchecked_string_field_really_holds_invalid_utf8(release):
    with pytest.raises((UnicodeDecodeError, pa.ArrowInvalid)):
        column = pq.read_table(release["tables"]["string"]).column("image")
        column.combine_chunks().field("path").validate(full=True)


@pytest.mark.parametrize("kind", ["string", "binary"])
def test_every_stored_name_is_listed_escaped_and_nothing_it_names_is_read(release, kind,
                                                                         tmp_path):
    from splitscope.features.scanning import scan

    table = release["tables"][kind]
    before = tree_state(release["outside"]), tree_state(release["data"])
    result = scan([str(table)], workspace=tmp_path / "ws", workers=1, progress=False)
    rows = result.rows()
    expected = [_escaped(n) for n in release["names"]]
    assert rows["stored_path"].tolist() == expected
    assert rows["basename"].tolist()[:2] == ["ok_0.png", "bad\\xff\\xfe.png"]
    assert rows["basename"].tolist()[9] == "x.png"  # the Windows path's last component
    assert (rows["status"] == "ok").all()
    # every row's bytes are the table's own, never those of a file a name points at
    own = [hashlib.sha256(_png(i)).hexdigest() for i in range(len(expected))]
    assert rows["sha256"].tolist() == own
    assert (before[0], before[1]) == (tree_state(release["outside"]),
                                      tree_state(release["data"]))
    # the rest of the results are those of the same images under plain names
    plain = scan([str(release["tables"]["plain"])], workspace=tmp_path / "ws-plain",
                 workers=1, progress=False).rows()
    for column in ("sha256", "phash", "dhash", "split", "label", "status"):
        assert rows[column].tolist() == plain[column].tolist(), column


def _lists_names(csv: Path) -> list[str]:
    frame = pd.read_csv(csv, keep_default_na=False, dtype=str)
    return frame["stored_path"].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["string", "binary"])
def test_audit_lists_and_report_on_hostile_stored_names(release, kind, tmp_path):
    table = str(release["tables"][kind])
    before = tree_state(release["outside"]), tree_state(release["data"])
    expected = [_escaped(n) for n in release["names"]]
    audit = _cli(["audit", table, "--out", str(tmp_path / "audit"), "--workspace",
                  str(tmp_path / "ws"), "--workers", "1", "--transforms", "0"])
    assert audit.returncode in (0, 1), audit.stderr
    lists = tmp_path / "audit" / "lists"
    # a CR or LF cell reads back whole; a formula-leading one is neutralised
    assert _lists_names(lists / "manifest.csv") == [
        "'" + e if e.startswith("=") else e for e in expected]
    issues = pd.read_parquet(lists / "issues.parquet")
    assert set(issues["stored_path"].dropna()) <= set(expected)
    html = (tmp_path / "audit" / "report.html").read_bytes().decode("utf-8")
    assert "\x1b" not in html and "\x00" not in html
    doc = json.loads((tmp_path / "audit" / "audit.json").read_text(encoding="utf-8"))
    assert doc["manifest"]["rows"] == len(expected)
    assert (before[0], before[1]) == (tree_state(release["outside"]),
                                      tree_state(release["data"]))


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["scan", "duplicates", "groups", "probe"])
def test_every_verb_on_hostile_stored_names(release, verb, tmp_path):
    table = str(release["tables"]["string"])
    before = tree_state(release["outside"]), tree_state(release["data"])
    expected = [_escaped(n) for n in release["names"]]
    in_csv = ["'" + e if e.startswith("=") else e for e in expected]
    done = _cli([verb, table, "--workspace", str(tmp_path / "ws"), "--out",
                 str(tmp_path / verb)])
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    written = list((tmp_path / verb).rglob("*.csv"))
    assert written or verb == "groups"  # no group column: no group lists
    for csv in written:  # every list reads back whole
        frame = pd.read_csv(csv, keep_default_na=False, dtype=str)
        if "stored_path" in frame:
            assert set(frame["stored_path"]) <= set(in_csv) | {""}, csv
    for parquet in (tmp_path / verb).rglob("*.parquet"):
        frame = pd.read_parquet(parquet)
        if "stored_path" in frame:
            assert set(frame["stored_path"].dropna()) <= set(expected), parquet
    assert (before[0], before[1]) == (tree_state(release["outside"]),
                                      tree_state(release["data"]))
