"""Two runs at once on one output: every verb that writes an ``--out`` folder (or file, or the
demo's folder) refuses, in one sentence, while another run holds it; two scans into one
``--workspace`` at once: the second is refused and the first's result is that of a run alone.
Every test here uses two real processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from hostile_corpus import small_release

from splitscope import cli

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
OUTPUTS = ("out_dir", "out_file", "directory")

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="advisory locks (flock) and /proc")


def _verbs_writing_outputs() -> dict[str, list[click.Parameter]]:
    ctx = click.Context(cli.app)
    found = {}
    for verb in sorted(cli.VERBS):
        command = cli.app.get_command(ctx, verb)
        if any(p.name in OUTPUTS for p in command.params):
            found[verb] = command.params
    return found


WRITERS = _verbs_writing_outputs()


def test_the_verbs_writing_an_output_are_found():
    assert {"audit", "duplicates", "groups", "probe", "shift", "rescore", "metrics", "scan",
            "resplit", "train", "embed", "experiment", "explain", "demo",
            "croissant"} <= set(WRITERS)


def _arguments(verb: str, params, tmp_path: Path, out: Path) -> list[str]:
    """Command-line arguments that click accepts for ``verb``: every required parameter given
    an existing folder or file, the output pointed at ``out``."""
    release = small_release(tmp_path / "release", 4)
    table = tmp_path / "table.csv"
    table.write_text("path,label\nx.png,a\n")
    args: list[str] = []
    for p in params:
        if p.name in OUTPUTS:
            value = str(out / "emb.parquet") if p.name == "out_file" else str(out)
        elif p.required:
            file_only = isinstance(p.type, click.Path) and not p.type.dir_okay
            value = str(table if file_only else release)
        else:
            continue
        args += [value] if isinstance(p, click.Argument) else [p.opts[0], value]
    return args


_HOLDER = r"""
import sys, time
from splitscope.features.workspace import output_locks
with output_locks({sys.argv[1]: sys.argv[2]}):
    print("held", flush=True)
    time.sleep(100)
"""


def _hold(name: str, value: Path) -> subprocess.Popen:
    """A second process holding the lock of one output (as a run writing there does)."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, name, str(value)], env=ENV,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


@pytest.mark.parametrize("verb", sorted(WRITERS))
def test_every_verb_writing_an_output_refuses_one_held_by_another_run(verb, tmp_path,
                                                                     capsys):
    params = WRITERS[verb]
    out = tmp_path / "out"
    if verb == "croissant":  # reads and writes a finished audit's folder
        out.mkdir()
    args = _arguments(verb, params, tmp_path, out)
    name = next(p.name for p in params if p.name in OUTPUTS)
    holder = _hold(name, out / "emb.parquet" if name == "out_file" else out)
    try:
        code = cli.main([verb, *args])
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err.strip()
    assert code == 2, (args, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "by another run" in err and str(out) in err, err
    assert sorted(p.name for p in out.iterdir()) == \
        sorted(p.name for p in out.iterdir() if p.name.endswith(".splitscope-out.lock"))


_SLOW_START = r"""
import sys, time
from splitscope.features import workspace
repair = workspace.FeatureStore.repair

def slow_repair(self):  # the scan holds its workspace lock here: hold it a while longer
    time.sleep(6)
    return repair(self)

workspace.FeatureStore.repair = slow_repair
from splitscope.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _start(args: list[str], slow: bool = False) -> subprocess.Popen:
    """A CLI run in a process of its own; ``slow``: its scan waits 6 s once it holds the
    workspace lock (so that a second run surely meets the first one running)."""
    start = ["-c", _SLOW_START] if slow else ["-m", "splitscope.cli"]
    return subprocess.Popen([sys.executable, *start, *args], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _when_locked(proc: subprocess.Popen, lock: Path, limit: float = 60) -> None:
    """Wait until ``proc`` has created (and so is about to hold) ``lock``."""
    deadline = time.monotonic() + limit
    while not lock.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, f"{lock} never appeared"
        time.sleep(0.02)
    time.sleep(0.1)


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_two_audits_at_once_on_one_out(tmp_path):
    root = small_release(tmp_path / "release", 12)
    common = ["--workers", "1", "--transforms", "0", "--layers", "duplicates,groups"]
    # the audit alone (its own --out and workspace) runs while the first one waits
    alone = _start(["audit", str(root), "--out", str(tmp_path / "alone"), *common,
                    "--workspace", str(tmp_path / "ws-alone")])

    out = tmp_path / "out"
    first = _start(["audit", str(root), "--out", str(out), *common,
                    "--workspace", str(tmp_path / "ws-1")], slow=True)
    _when_locked(first, out / ".splitscope-out.lock")
    second = subprocess.run([sys.executable, "-m", "splitscope.cli", "audit", str(root),
                             "--out", str(out), *common, "--workspace", str(tmp_path / "ws-2")],
                            env=ENV, capture_output=True, text=True, timeout=110, check=False)
    still_running = first.poll() is None
    assert first.wait(timeout=110) == 0, first.stderr.read()
    assert still_running, "the first audit ended before the second tried"
    err = second.stderr.strip()
    assert second.returncode == 2 and len(err.splitlines()) == 1, err
    assert f"--out {out} is in use by another run" in err
    assert not (tmp_path / "ws-2").exists()  # refused before it scanned anything
    assert alone.wait(timeout=110) == 0, alone.stderr.read()
    # the first audit's lists are those of an audit run alone
    assert _digests(out / "lists") == _digests(tmp_path / "alone" / "lists")


@pytest.mark.slow
def test_two_scans_at_once_into_one_workspace(tmp_path):
    from splitscope.features.scanning import load_scan

    root = small_release(tmp_path / "release", 60)
    other = small_release(tmp_path / "other", 12)
    # the scan alone (a workspace of its own) runs while the first one waits
    alone = _start(["scan", str(root), "--workspace", str(tmp_path / "ws-alone"),
                    "--workers", "1", "--no-progress"])

    ws = tmp_path / "ws"
    first = _start(["scan", str(root), "--workspace", str(ws), "--workers", "1",
                    "--no-progress"], slow=True)
    _when_locked(first, ws / ".lock")
    others = [_start(["scan", str(release), "--workspace", str(ws), "--workers", "1",
                      "--no-progress"]) for release in (root, other)]  # the same, another
    codes = [p.wait(timeout=110) for p in others]
    still_running = first.poll() is None
    assert first.wait(timeout=110) == 0, first.stderr.read()
    assert still_running, "the first scan ended before the others tried"
    for second, code in zip(others, codes):
        err = second.stderr.read().strip()
        assert code == 2 and len(err.splitlines()) == 1, err
        assert f"workspace {ws} is in use by another scan" in err, err
    assert alone.wait(timeout=110) == 0, alone.stderr.read()
    got, expected = load_scan(ws), load_scan(tmp_path / "ws-alone")
    assert got.rows()["sha256"].tolist() == expected.rows()["sha256"].tolist()
    assert (got.thumbnails == expected.thumbnails).all()
    # once the first is done the workspace takes the next scan, reusing what it holds
    again = subprocess.run([sys.executable, "-m", "splitscope.cli", "scan", str(root),
                            "--workspace", str(ws), "--workers", "1", "--no-progress", "--json"],
                           env=ENV, capture_output=True, text=True, timeout=110, check=False)
    assert again.returncode == 0, again.stderr
    assert load_scan(ws).rows()["sha256"].tolist() == expected.rows()["sha256"].tolist()
