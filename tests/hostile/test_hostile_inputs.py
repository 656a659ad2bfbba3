"""Hostile list files, crashing workers and unexpected errors: each ends in a listed reason or
a one-line message with its own exit code, never a hang or a traceback on the terminal."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hostile_corpus import image

from splitscope import cli
from splitscope.errors import InputError
from splitscope.features.executor import ProcessExecutor
from splitscope.features.executors import ChunkFailed
from splitscope.features.scanning import scan
from splitscope.manifest import read_list, workbook

# -- list files ---------------------------------------------------------------------------


def _xlsx_bomb(path: Path, inflated: int) -> None:
    """A valid workbook whose one sheet expands from well under a megabyte to ``inflated``
    bytes of XML."""
    buf = io.BytesIO()
    pd.DataFrame({"path": ["a.png"], "label": ["x"]}).to_excel(buf, index=False)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, \
            zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "xl/worksheets/sheet1.xml":
                head, tail = data.split(b"</sheetData>")
                data = head + b"</sheetData>" + b" " * inflated + tail
            out.writestr(item, data, zipfile.ZIP_DEFLATED)


def test_xlsx_bomb_is_refused_before_parsing(tmp_path):
    path = tmp_path / "bomb.xlsx"
    _xlsx_bomb(path, 100 << 20)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(InputError, match=r"expands \d[\d,]*-fold.*limit: 200-fold"):
        read_list(path)


def test_xlsx_declared_size_above_the_limit_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "big.xlsx"
    _xlsx_bomb(path, 2 << 20)
    monkeypatch.setattr(workbook, "MAX_WORKBOOK_BYTES", 1 << 20)
    with pytest.raises(InputError, match="more than the limit of 1,048,576"):
        read_list(path)


def test_ordinary_xlsx_still_reads(tmp_path):
    path = tmp_path / "ok.xlsx"
    pd.DataFrame({"path": ["a.png", "b.png"], "label": ["x", "y"]}).to_excel(path, index=False)
    assert read_list(path)["path"].tolist() == ["a.png", "b.png"]


def test_not_a_zip_xlsx_is_an_input_error(tmp_path):
    path = tmp_path / "fake.xlsx"
    path.write_bytes(b"PK\x03\x04 but nothing more")
    with pytest.raises(InputError, match="not a valid XLSX"):
        read_list(path)


def test_invalid_utf8_paths_are_listed_distinct_and_never_read(tmp_path):
    folder = tmp_path / "lst"
    folder.mkdir()
    image(1).save(folder / "good.png")
    paths = [b"good.png", b"bad\xff.png", b"bad\xfe.png", b"caf\xc3\xa9.png"]
    table = pa.table({"path": pa.array(paths, pa.binary()), "label": ["a", "b", "c", "d"]})
    pq.write_table(table, folder / "list.parquet")
    result = scan(folder / "list.parquet", tmp_path / "ws", workers=1, progress=False)
    rows = result.rows()
    assert rows["path"].tolist() == ["good.png", "bad\\xff.png", "bad\\xfe.png", "café.png"]
    assert rows["path_issue"].tolist()[1:3] == ["invalid_utf8", "invalid_utf8"]
    assert rows["status"].tolist() == ["ok", "invalid_utf8", "invalid_utf8", "missing"]
    assert rows["file"].isna().tolist() == [False, True, True, False]
    assert result.summary()["invalid_paths"] == 2


def test_invalid_utf8_in_a_csv_is_listed(tmp_path):
    folder = tmp_path / "lst"
    folder.mkdir()
    (folder / "list.csv").write_bytes(b"path,label\nok.png,a\nbad\xff.png,b\xfe\n")
    m = read_list(folder / "list.csv")
    assert m["path"].tolist() == ["ok.png", "bad\\xff.png"]
    assert m["label"].tolist() == ["a", "b\\xfe"]
    assert m["path_issue"].isna().tolist() == [True, False]


# -- crashing workers ---------------------------------------------------------------------

_CRASHY = '''
import os, signal, time
from pathlib import Path


def crash_on_three(x):
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 10


def crash_once(payload):
    marker, x = payload
    if x == 2 and not Path(marker).exists():
        Path(marker).write_text("crashed once")
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 10


def crash_late(x):
    if x == 1:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 10


def crash_on_poison(files, params):
    from splitscope.features.extract import extract_files
    if any("poison" in f for f in files):
        os.kill(os.getpid(), signal.SIGKILL)
    return extract_files(files, params)
'''


@pytest.fixture()
def crashy(tmp_path, monkeypatch):
    (tmp_path / "crashy_module.py").write_text(_CRASHY)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import crashy_module

    return importlib.reload(crashy_module)


@pytest.mark.slow
def test_a_chunk_whose_worker_dies_twice_is_reported_and_the_rest_completes(crashy):
    got = dict(ProcessExecutor(2, max_in_flight=4).map(
        crashy.crash_on_three, ((f"c{i}", i) for i in range(8))))
    assert set(got) == {f"c{i}" for i in range(8)}
    assert isinstance(got["c3"], ChunkFailed) and "BrokenProcessPool" in got["c3"].detail
    assert {k: v for k, v in got.items() if k != "c3"} == {f"c{i}": i * 10 for i in range(8)
                                                           if i != 3}


@pytest.mark.slow
def test_a_chunk_whose_worker_dies_once_is_retried(crashy, tmp_path):
    marker = str(tmp_path / "marker")
    got = dict(ProcessExecutor(2).map(crashy.crash_once, ((i, (marker, i)) for i in range(6))))
    assert got == {i: i * 10 for i in range(6)} and Path(marker).exists()


@pytest.mark.slow
def test_a_worker_dying_while_the_caller_holds_a_result_is_recovered(crashy):
    """The pool breaks between two chunks taken by the caller: the next submission is refused
    (BrokenProcessPool at submit), yet the dying chunk is retried alone and reported, and the
    refused chunk and every later one still run."""
    import time

    got = {}
    for chunk_id, result in ProcessExecutor(2, max_in_flight=2).map(
            crashy.crash_late, ((f"c{i}", i) for i in range(6))):
        got[chunk_id] = result
        if chunk_id == "c0":
            time.sleep(1.5)  # c1's worker dies meanwhile
    assert set(got) == {f"c{i}" for i in range(6)}
    assert isinstance(got["c1"], ChunkFailed)
    assert {k: v for k, v in got.items() if k != "c1"} == {f"c{i}": i * 10 for i in range(6)
                                                           if i != 1}


@pytest.mark.slow
def test_scan_lists_the_files_of_a_crashing_batch_and_completes(crashy, tmp_path):
    root = tmp_path / "release" / "a"
    root.mkdir(parents=True)
    for i in range(40):
        image(i, w=24, h=24).save(root / f"x_{i:02d}.png")
    image(99).save(root / "poison.png")
    result = scan(root.parent, tmp_path / "ws", workers=2, batch_size=4, progress=False,
                  extractor=crashy.crash_on_poison)
    status = dict(zip(result.rows()["basename"], result.rows()["status"]))
    crashed = {k for k, v in status.items() if v == "worker_crashed"}
    assert "poison.png" in crashed and len(crashed) <= 4  # only the poison's own batch
    assert all(v == "ok" for k, v in status.items() if k not in crashed)
    again = scan(root.parent, tmp_path / "ws", workers=1, progress=False)
    assert again.meta["extracted"] == len(crashed)  # worker_crashed is retried next time
    assert (again.rows()["status"] == "ok").all()


# -- exit codes ---------------------------------------------------------------------------


def test_internal_error_is_one_line_exit_4_and_a_log_file(tmp_path, monkeypatch, capsys):
    from splitscope.features import scanning

    def broken(*args, **kwargs):
        raise RuntimeError("something inside broke")

    monkeypatch.setattr(scanning, "scan", broken)
    monkeypatch.delenv(cli.TRACEBACK_VARIABLE, raising=False)
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "rel").mkdir()
    image(0).save(tmp_path / "rel" / "a.png")
    assert cli.main(["scan", str(tmp_path / "rel"), "--out", str(out)]) == 4
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "RuntimeError: something inside broke" in err and str(out) in err
    logs = list(out.glob(cli.LOG_PREFIX + "*.log"))
    assert len(logs) == 1 and str(logs[0]) in err
    log = logs[0].read_text()
    assert "Traceback (most recent call last)" in log and "something inside broke" in log


@pytest.mark.slow
def test_broken_pipe_ends_quietly(tmp_path):
    root = tmp_path / "release" / "a"
    root.mkdir(parents=True)
    for i in range(3):
        image(i).save(root / f"{i}.png")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    script = (f"{sys.executable!s} -m splitscope.cli scan {root.parent} -w {tmp_path / 'ws'} "
              f"--workers 1 --json | head -c 1")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", script], check=False,
                          capture_output=True, text=True, env=env, timeout=100)
    assert done.stdout == "{"
    assert done.stderr == ""  # no traceback, no "Exception ignored"
    assert done.returncode in (0, cli.EXIT_BROKEN_PIPE)


# -- read cap -----------------------------------------------------------------------------


@pytest.mark.slow
def test_files_above_the_read_cap_are_listed_and_never_read(tmp_path):
    root = tmp_path / "release" / "a"
    root.mkdir(parents=True)
    image(1, w=16, h=16).save(root / "small.png")
    image(2, w=400, h=300).save(root / "large.png")
    cap = (root / "small.png").stat().st_size + 10
    done = subprocess.run([sys.executable, "-m", "splitscope.cli", "scan", str(root.parent),
                           "-w", str(tmp_path / "ws"), "--workers", "1", "--max-file-size",
                           str(cap), "--json"], check=False, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                          timeout=100)
    assert done.returncode == 0, done.stderr
    result = scan(root.parent, tmp_path / "ws", workers=1, progress=False, max_file_bytes=cap)
    rows = result.rows().set_index("basename")
    assert rows.loc["small.png", "status"] == "ok"
    assert rows.loc["large.png", "status"] == "too_large"
    assert pd.isna(rows.loc["large.png", "sha256"])  # not read at all
    assert "exceeds max_file_bytes" in rows.loc["large.png", "error"]
    # the cap decides what is read, not what a feature is: a larger cap reads the file
    again = scan(root.parent, tmp_path / "ws", workers=1, progress=False)
    assert again.meta["extracted"] == 1 and (again.rows()["status"] == "ok").all()


def test_a_file_that_reports_size_zero_is_still_read_only_up_to_the_cap(tmp_path):
    from splitscope.features.extract import _Failure, _read_bytes

    environ = Path("/proc/self/environ")
    if not environ.exists() or environ.stat().st_size != 0:
        pytest.skip("needs a /proc file that reports size 0")
    assert len(_read_bytes(str(environ))) > 0
    with pytest.raises(_Failure) as failure:
        _read_bytes(str(environ), limit=8)
    assert failure.value.status == "too_large"
