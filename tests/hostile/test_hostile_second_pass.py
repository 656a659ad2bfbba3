"""Second pass over the hostile corpus: names that are not UTF-8, outputs placed in the data,
workbook bombs on every reader, lying JPEG headers, the crash log, full disks and file-size
limits, damaged workspaces and two runs on one output folder."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hostile_corpus import (
    NON_UTF8,
    image,
    lying_jpeg,
    shown,
    small_release,
    tree_state,
    xlsx_bomb,
)

from splitscope import cli
from splitscope.errors import InputError
from splitscope.features.scanning import scan

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def _cli(args, **kw):
    return subprocess.run([sys.executable, "-m", "splitscope.cli", *args], check=False,
                          capture_output=True, text=True, env=ENV, timeout=110, **kw)


def _one_sentence(done) -> str:
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# -- names that are not valid UTF-8 ---------------------------------------------------------


@pytest.fixture()
def undecodable(tmp_path):
    root = small_release(tmp_path / "release")
    for i, name in enumerate(NON_UTF8):
        raw = os.fsencode(root) + b"/" + name
        os.makedirs(os.path.dirname(raw), exist_ok=True)
        image(50 + i).save(raw, format="PNG")
    os.makedirs(os.fsencode(root) + b"/train/.h\xff")
    image(60).save(os.fsencode(root) + b"/train/.h\xff/y.png", format="PNG")
    return root


def test_undecodable_names_in_a_folder_are_listed_rows_never_read(undecodable, tmp_path):
    clean = scan(small_release(tmp_path / "clean"), tmp_path / "ws0", workers=1, progress=False)
    before = tree_state(undecodable)
    result = scan(undecodable, tmp_path / "ws", workers=1, progress=False)
    rows = result.rows().set_index("path")
    for name in NON_UTF8:
        row = rows.loc[shown(name)]
        assert row["status"] == "invalid_utf8" and row["path_issue"] == "invalid_utf8"
        assert pd.isna(row["file"]) and pd.isna(row["sha256"])
    assert rows.loc[shown(b"train/\xe9t\xe9/x.png"), "label"] == "\\xe9t\\xe9"
    excluded = {e["path"]: e["reason"] for e in result.manifest.attrs["excluded"]}
    assert excluded == {"train/.h\\xff/y.png": "inside a hidden directory"}
    assert result.summary()["invalid_paths"] == len(NON_UTF8)
    ok = result.rows()[result.rows()["status"] == "ok"].reset_index(drop=True)
    assert ok["sha256"].tolist() == clean.rows()["sha256"].tolist()  # the rest as without
    assert tree_state(undecodable) == before


@pytest.mark.slow
def test_undecodable_names_through_scan_and_audit_cli(undecodable, tmp_path):
    out = tmp_path / "out"
    done = _cli(["scan", str(undecodable), "-w", str(tmp_path / "ws"), "--workers", "1",
                 "--out", str(out), "--json"])
    assert done.returncode == 0, done.stderr
    for lists in ("failures", "excluded"):
        csv = pd.read_csv(out / "lists" / f"{lists}.csv", dtype=str, keep_default_na=False)
        parquet = pd.read_parquet(out / "lists" / f"{lists}.parquet")
        assert csv["path"].tolist() == parquet["path"].tolist()
    failures = pd.read_parquet(out / "lists" / "failures.parquet")
    assert sorted(failures["path"]) == sorted(shown(n) for n in NON_UTF8)
    assert pd.read_parquet(out / "lists" / "excluded.parquet")["path"].str.contains(
        "\\\\xff").all()
    audit = _cli(["audit", str(undecodable), "--out", str(tmp_path / "audit"), "--workers",
                  "1", "--transforms", "0", "--json"])
    assert audit.returncode == 0, audit.stderr
    doc = json.loads((tmp_path / "audit" / "audit.json").read_text(encoding="utf-8"))
    assert doc["records"]
    listed = pd.read_parquet(tmp_path / "audit" / "lists" / "failures.parquet")
    assert sorted(listed["path"]) == sorted(shown(n) for n in NON_UTF8)


def test_a_release_folder_whose_own_path_is_not_utf8_is_one_sentence(tmp_path):
    root = os.fsencode(tmp_path) + b"/rel\xff"
    os.makedirs(root + b"/a")
    image(1).save(root + b"/a/x.png", format="PNG")
    done = _cli(["scan", os.fsdecode(root), "-w", str(tmp_path / "ws")])
    assert done.returncode == 2 and "not valid UTF-8" in _one_sentence(done)


# -- where outputs may go --------------------------------------------------------------------


@pytest.fixture()
def list_release(tmp_path):
    folder = tmp_path / "lst"
    (folder / "imgs").mkdir(parents=True)
    for i in range(4):
        image(i).save(folder / "imgs" / f"{i}.png")
    (folder / "list.csv").write_text("path,split,label\n" + "".join(
        f"imgs/{i}.png,{'train' if i % 2 else 'test'},c{i % 2}\n" for i in range(4)))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("where", ["workspace", "out"])
@pytest.mark.parametrize("verb", ["scan", "audit"])
def test_outputs_inside_a_list_release_image_folder_are_refused(list_release, tmp_path, verb,
                                                                where):
    before = tree_state(list_release)
    target = list_release / "imgs" / "inside"
    flag = {"workspace": "--workspace", "out": "--out"}[where]
    other = {"workspace": ["--out", str(tmp_path / "o")],
             "out": ["--workspace", str(tmp_path / "w")]}[where]
    done = _cli([verb, str(list_release / "list.csv"), flag, str(target), *other,
                 "--workers", "1"])
    assert done.returncode == 2
    assert "inside the release folder" in _one_sentence(done) and flag in done.stderr
    assert not target.exists() and not (tmp_path / "o").exists()
    assert not (tmp_path / "w").exists()
    assert tree_state(list_release) == before


def test_an_output_folder_above_the_release_is_refused(list_release, tmp_path):
    done = _cli(["scan", str(list_release / "list.csv"), "-w", str(tmp_path / "w"), "--out",
                 str(list_release.parent)])
    assert done.returncode == 2 and "holds the release" in _one_sentence(done)


def test_the_scan_api_refuses_a_workspace_in_a_list_release(list_release):
    with pytest.raises(InputError, match="inside the release folder"):
        scan(list_release / "list.csv", list_release / "imgs" / "ws", workers=1, progress=False)
    assert not (list_release / "imgs" / "ws").exists()


@pytest.mark.slow
def test_a_verb_on_a_table_release_refuses_out_beside_the_table(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "hf"
    folder.mkdir()
    blobs = []
    for i in range(4):
        import io
        buf = io.BytesIO()
        image(i).save(buf, "PNG")
        blobs.append({"bytes": buf.getvalue(), "path": f"{i}.png"})
    pq.write_table(pa.table({"image": blobs, "label": [0, 1, 0, 1]}),
                   folder / "train.parquet")
    done = _cli(["groups", str(folder / "train.parquet"), "--out", str(folder)])
    assert done.returncode == 2 and "holds the release" in _one_sentence(done)
    assert sorted(p.name for p in folder.iterdir()) == ["train.parquet"]


# -- workbook bombs ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bombs")
    for kind in ("sparse", "many", "deflate"):
        xlsx_bomb(folder / f"{kind}.xlsx", kind)
    subs = folder / "subs"
    subs.mkdir()
    (subs / "team.csv").write_text("image_path,x,y\na.png,0.9,0.1\nb.png,0.2,0.8\n")
    return folder


def _peak_of(command: list[str]) -> tuple[subprocess.CompletedProcess, str, float]:
    """Run ``command`` as a grandchild: its exit, its stdout and its own peak resident memory
    (MiB). The intermediate child starts small, so the figure is the command's own (a process
    forked from the large test process would report the parent's high-water mark)."""
    script = ("import resource, subprocess, sys; d = subprocess.run(sys.argv[1:], "
              "capture_output=True, text=True); sys.stderr.write(d.stderr); "
              "sys.stdout.write(d.stdout + '\\n'); "
              "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
              "sys.exit(d.returncode)")
    done = subprocess.run([sys.executable, "-c", script, *command], check=False,
                          capture_output=True, text=True, env=ENV, timeout=110,
                          preexec_fn=_memory_cap)
    out, _, peak = done.stdout.rstrip().rpartition("\n")
    return done, out, int(peak) / 1024


def _peak_mib_of(args) -> tuple[subprocess.CompletedProcess, float]:
    """The CLI with ``args`` under :func:`_peak_of`: its exit and peak memory (MiB)."""
    done, _, peak = _peak_of([sys.executable, "-m", "splitscope.cli", *args])
    return done, peak


def _memory_cap() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a failure, not a swamped host


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sparse", "many", "deflate"])
def test_rescore_refuses_a_truth_workbook_bomb_in_bounded_memory(bombs, kind):
    done, peak = _peak_mib_of(["rescore", str(bombs / "subs"), "--truth",
                               str(bombs / f"{kind}.xlsx")])
    assert done.returncode == 2, done.stderr[-500:]
    err = _one_sentence(done)
    assert "not parsed, as a zip bomb would not be: export it as CSV or Parquet" in err
    assert peak < 500, f"peak {peak:.0f} MiB"


@pytest.mark.slow
def test_rescore_on_a_7_7_mb_workbook_bomb_peaks_under_500_mib(bombs, tmp_path):
    """The size of the workbook that aborted the process at 5.5 GB before the workbook reader
    checked what it expands to: 1.78 GB of sheet XML in 7.7 MB."""
    bomb = tmp_path / "truth.xlsx"
    xlsx_bomb(bomb, "deflate", inflated=1_780_000_000)
    assert 7.0e6 < bomb.stat().st_size < 8.5e6
    done, peak = _peak_mib_of(["rescore", str(bombs / "subs"), "--truth", str(bomb)])
    assert done.returncode == 2, done.stderr[-500:]
    assert "not parsed, as a zip bomb would not be" in _one_sentence(done)
    assert peak < 500, f"peak {peak:.0f} MiB"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sparse", "many"])
def test_every_workbook_reader_gives_the_same_refusal(bombs, kind):
    """The list, truth and prediction readers, in a child (a parser that fails to allocate
    aborts its process)."""
    script = ("import json, sys\n"
              "from splitscope.errors import InputError\n"
              "from splitscope.evaluation.predictions import read_predictions, read_truth\n"
              "from splitscope.manifest import read_list\n"
              "out = []\n"
              "for reader in (read_list, read_truth, read_predictions):\n"
              "    try:\n"
              "        reader(sys.argv[1])\n"
              "        out.append(None)\n"
              "    except InputError as exc:\n"
              "        out.append(str(exc).partition('.xlsx ')[2])\n"
              "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", script, str(bombs / f"{kind}.xlsx")],
                          check=False, capture_output=True, text=True, env=ENV, timeout=110,
                          preexec_fn=_memory_cap)
    assert done.returncode == 0, done.stderr[-300:]
    messages = json.loads(done.stdout)
    assert len(set(messages)) == 1 and "not parsed" in messages[0], messages


# -- lying JPEG headers -----------------------------------------------------------------------


@pytest.mark.slow
def test_a_jpeg_header_claiming_a_huge_image_over_a_small_scan_is_truncated(tmp_path):
    root = tmp_path / "release" / "a"
    root.mkdir(parents=True)
    for side in (9_000, 11_500):
        (root / f"lying_{side}.jpg").write_bytes(lying_jpeg(side, side, seed=side))
    image(1).save(root / "fine.jpg")
    script = ("import sys, json; from splitscope.features.scanning import scan; "
              "r = scan(sys.argv[1], sys.argv[2], workers=1, progress=False).rows(); "
              "print(json.dumps({'status': dict(zip(r['basename'], r['status'])), "
              "'error': dict(zip(r['basename'], r['error'].astype(str)))}))")
    started = time.monotonic()
    done, out, peak = _peak_of([sys.executable, "-c", script, str(root.parent),
                                str(tmp_path / "ws")])
    assert done.returncode == 0, done.stderr
    got = json.loads(out)
    assert got["status"] == {"fine.jpg": "ok", "lying_9000.jpg": "truncated",
                             "lying_11500.jpg": "truncated"}
    assert "filled with grey" in got["error"]["lying_9000.jpg"]
    assert peak < 400, f"peak {peak:.0f} MiB"  # a decode of 11,500² RGB alone takes 397 MB
    assert time.monotonic() - started < 60


def test_the_block_bound_never_flags_a_whole_jpeg():
    """Flat and noisy images at the coarsest coding there is (optimized Huffman tables, 4:2:0
    and greyscale, progressive): every one codes at least a bit a block."""
    import io

    import numpy as np
    from PIL import Image

    from splitscope.features.extract import jpeg_data_too_short
    from splitscope.features.header import header_fields

    for img in (Image.new("L", (4000, 3000), 128), Image.new("RGB", (3000, 2000), (9, 9, 9)),
                Image.fromarray(np.zeros((1024, 1024), np.uint8))):
        for kw in ({"optimize": True}, {"progressive": True, "optimize": True},
                   {"subsampling": 2, "quality": 5}):
            buf = io.BytesIO()
            img.save(buf, "JPEG", **kw)
            data = buf.getvalue()
            head = header_fields(data, "x.jpg")
            assert jpeg_data_too_short(data, head["width"], head["height"], head) is None, kw


def test_the_decompression_bomb_message_names_one_limit(tmp_path):
    from hostile_corpus import _png_header_only

    root = tmp_path / "release" / "a"
    root.mkdir(parents=True)
    (root / "bomb.png").write_bytes(_png_header_only(100_000, 100_000))
    (root / "just_over.png").write_bytes(_png_header_only(12_000, 12_000))
    rows = scan(root.parent, tmp_path / "ws", workers=1, progress=False).rows()
    assert rows["status"].tolist() == ["decompression_bomb"] * 2
    for error in rows["error"]:
        assert error.count("max_pixels = 134,217,728") == 1, error
        assert "limit" not in error and "268" not in error, error


# -- crash log, full disk, file-size limit ----------------------------------------------------


def _broken_scan(monkeypatch):
    from splitscope.features import scanning

    def broken(*args, **kwargs):
        raise RuntimeError("something inside broke")

    monkeypatch.setattr(scanning, "scan", broken)
    monkeypatch.delenv(cli.TRACEBACK_VARIABLE, raising=False)


def test_the_crash_log_never_follows_a_planted_link(tmp_path, monkeypatch, capsys):
    import secrets
    import tempfile

    _broken_scan(monkeypatch)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    # the old fixed name, and the exact new name, both planted as links to the victim
    os.symlink(victim, tmp / "splitscope-error.log")
    monkeypatch.setattr(secrets, "token_hex", lambda n: "00000000")
    monkeypatch.setattr(time, "strftime", lambda fmt, t=None: "T")
    planted = tmp / f"{cli.LOG_PREFIX}T-{os.getpid()}-00000000.log"
    os.symlink(victim, planted)
    (tmp_path / "rel" / "a").mkdir(parents=True)
    image(0).save(tmp_path / "rel" / "a" / "x.png")
    assert cli.main(["scan", str(tmp_path / "rel"), "-w", str(tmp_path / "ws")]) == 4
    assert victim.read_text() == "precious"
    assert "no log file could be written" in capsys.readouterr().err
    monkeypatch.setattr(secrets, "token_hex", lambda n: "11111111")
    assert cli.main(["scan", str(tmp_path / "rel"), "-w", str(tmp_path / "ws")]) == 4
    written = tmp / f"{cli.LOG_PREFIX}T-{os.getpid()}-11111111.log"
    assert "something inside broke" in written.read_text() and victim.read_text() == "precious"
    assert oct(written.stat().st_mode & 0o777) == "0o600"


def _limited(limit: int, args: list[str]) -> subprocess.CompletedProcess:
    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "splitscope.cli", *args], check=False,
                          capture_output=True, text=True, env=ENV, timeout=110, preexec_fn=cap)


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


@pytest.mark.slow
def test_a_file_size_limit_in_the_workspace_is_one_sentence(tmp_path):
    root = small_release(tmp_path / "release", n=40)
    ws = tmp_path / "ws"
    done = _limited(40_000, ["scan", str(root), "-w", str(ws), "--workers", "1"])
    assert done.returncode == 2
    err = _one_sentence(done)
    assert "File too large" in err and str(ws) in err
    assert all(p.stat().st_size <= 40_000 for p in _files(ws))
    assert not [p for p in _files(ws) if ".tmp-" in p.name]  # nothing half-written is left
    again = scan(root, ws, workers=1, progress=False)
    assert (again.rows()["status"] == "ok").all()


@pytest.mark.slow
def test_a_file_size_limit_on_the_outputs_is_one_sentence_and_nothing_half_written(tmp_path):
    folder = tmp_path / "lst"
    folder.mkdir()
    (folder / "list.csv").write_text("path,split,label,group\n" + "".join(
        f"img_{i:05d}_with_a_long_name.png,{'train' if i % 3 else 'test'},c{i % 4},g{i // 3}\n"
        for i in range(3000)))
    out = tmp_path / "out"
    done = _limited(60_000, ["resplit", str(folder / "list.csv"), "--out", str(out)])
    assert done.returncode == 2
    err = _one_sentence(done)
    assert "File too large" in err and "ulimit -f" in err
    files = _files(out)
    assert not [p for p in files if ".tmp-" in p.name]
    for p in files:  # what is there is whole
        if p.suffix == ".csv":
            pd.read_csv(p)
        elif p.suffix == ".parquet":
            pd.read_parquet(p)


def test_a_full_disk_on_the_outputs_is_one_sentence(tmp_path, monkeypatch, capsys):
    import errno

    real = pd.DataFrame.to_csv

    def full(self, path=None, *args, **kwargs):
        if path is not None and "lists" in str(path):
            Path(path).write_bytes(b"row,pa")  # a partial write, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    root = small_release(tmp_path / "release")
    (root / "test" / "a" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    out = tmp_path / "out"
    assert cli.main(["scan", str(root), "-w", str(tmp_path / "ws"), "--workers", "1",
                     "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "No space left on device" in err
    # no half-written list is left: the outputs were staged, and the staging folder removed
    left = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert [p for p in left if p.name != ".splitscope-out.lock"] == []


# -- damaged workspace, concurrent runs -------------------------------------------------------


def test_a_deleted_thumbnails_file_is_a_listed_repair(tmp_path):
    root = small_release(tmp_path / "release")
    ws = tmp_path / "ws"
    reference = scan(root, ws, workers=1, progress=False)
    victim = next((ws / "features").glob("*/results/*/thumbnails.npy"))
    victim.unlink()
    repaired = scan(root, ws, workers=1, progress=False)
    repairs = repaired.summary()["repairs"]
    assert any("thumbnails.npy is missing" in r["problem"] for r in repairs), repairs
    assert repaired.rows()["sha256"].tolist() == reference.rows()["sha256"].tolist()
    import numpy as np

    assert np.array_equal(np.asarray(repaired.thumbnails), np.asarray(reference.thumbnails))


def test_a_second_audit_on_the_same_out_refuses_in_one_sentence(tmp_path, capsys):
    from splitscope.features.workspace import output_lock

    root = small_release(tmp_path / "release")
    out = tmp_path / "out"
    with output_lock(out):  # a first audit writing there
        assert cli.main(["audit", str(root), "--out", str(out), "--workers", "1",
                         "--transforms", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "in use by another run" in err and str(out) in err
    assert not (out / "audit.json").exists()
