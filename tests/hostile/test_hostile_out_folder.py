"""An ``--out`` folder belongs to the ``artifacts.json`` splitscope left in it.

A rerun replaces or removes only the files that manifest lists with the SHA-256 they still
have; anything else there (a user's file, a listed file the user edited, a symbolic link) is
refused with exit 2 naming it, or kept byte for byte under ``--force``, and never overwritten.
A symbolic link as the folder, or on the way to what a run writes, is refused and nothing is
written where it points. The outputs are published at once: a run killed at any point of the
publish leaves a folder whose ``artifacts.json`` lists only files present with their SHA-256,
never a mix of two runs, and the next run finishes cleanly.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from hostile_corpus import small_release

from splitscope.cli import main
from splitscope.core.options import AuditOptions
from splitscope.core.run import audit
from splitscope.errors import InputError

LOCK = ".splitscope-out.lock"
CACHE = "workspace"  # the audit's default feature cache, inside --out and no output


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return small_release(tmp_path_factory.mktemp("release") / "data", 12)


@pytest.fixture(scope="module")
def first(release, tmp_path_factory) -> Path:
    """A finished audit with ``--croissant`` (copied by each test that reruns into it)."""
    out = tmp_path_factory.mktemp("first") / "out"
    assert _audit(release, out, "--croissant") == 0
    return out


def _audit(release: Path, out: Path, *extra: str) -> int:
    return main(["audit", str(release), "--out", str(out), "--workers", "1",
                 "--layers", "duplicates", "--json", *extra])


def _copy(first: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(first, out, symlinks=True)
    return out


def _listed(out: Path) -> dict[str, str]:
    doc = json.loads((out / "artifacts.json").read_text(encoding="utf-8"))
    return {e["contentUrl"]: e["sha256"] for e in doc["distribution"]}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(out: Path, skip=()) -> dict[str, str]:
    """SHA-256 of every file under ``out`` but the cache, the lock and ``skip``."""
    found = {}
    for root, dirs, files in os.walk(out):
        for name in files:
            rel = Path(root, name).relative_to(out).as_posix()
            if rel != LOCK and not rel.startswith(CACHE + "/") and rel not in skip:
                found[rel] = _sha(Path(root, name))
    return found


def _only_listed(out: Path, foreign=()) -> None:
    """Every file in ``out`` (but the cache, the lock and ``foreign``) is listed in
    artifacts.json with its SHA-256, every listed file is there, and nothing else is."""
    files, listed = _files(out, skip={"artifacts.json", *foreign}), _listed(out)
    assert files == listed
    assert {"audit.json", "report.html", "lists/manifest.csv"} <= set(listed)


def test_a_users_file_in_lists_is_refused_by_name_and_survives(release, first, tmp_path,
                                                              capsys):
    out = _copy(first, tmp_path)
    precious = out / "lists" / "precious.csv"
    precious.write_text("row,note\n1,mine\n")
    before, outputs = precious.read_bytes(), _files(out, skip={"lists/precious.csv"})
    capsys.readouterr()
    for _ in range(2):
        assert _audit(release, out) == 2
        err = capsys.readouterr().err
        assert "lists/precious.csv" in err and "--force" in err
        assert precious.read_bytes() == before
    assert _files(out, skip={"lists/precious.csv"}) == outputs  # the first audit as it was


def test_a_users_lists_file_in_a_fresh_folder_is_refused(release, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "lists").mkdir(parents=True)
    (out / "lists" / "precious.csv").write_text("mine\n")
    assert _audit(release, out) == 2
    assert "lists/precious.csv" in capsys.readouterr().err
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        LOCK, "lists", "lists/precious.csv"]


@pytest.mark.parametrize("after_an_audit", [False, True])
def test_a_symlinked_lists_folder_is_refused_even_with_force(release, first, tmp_path, capsys,
                                                             after_an_audit):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = _copy(first, tmp_path) if after_an_audit else tmp_path / "out"
    if after_an_audit:
        shutil.rmtree(out / "lists")
    else:
        out.mkdir()
    (out / "lists").symlink_to(elsewhere, target_is_directory=True)
    before = _files(out)
    capsys.readouterr()
    for extra in ((), ("--force",)):
        assert _audit(release, out, *extra) == 2
        assert "lists" in capsys.readouterr().err
        assert list(elsewhere.iterdir()) == []  # nothing written where the link points
        assert _files(out) == before


def test_a_symlinked_out_folder_is_refused(release, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.symlink_to(elsewhere, target_is_directory=True)
    for extra in ((), ("--force",)):
        assert _audit(release, out, *extra) == 2
        assert "symbolic link" in capsys.readouterr().err
        assert list(elsewhere.iterdir()) == []
    with pytest.raises(InputError, match="symbolic link"):
        audit(release, out_dir=out,
              options=AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"]))
    assert list(elsewhere.iterdir()) == []


def test_an_unrelated_report_is_refused_and_left_untouched(release, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    report = out / "report.html"
    report.write_text("<p>my own notes</p>\n")
    for extra in ((), ("--force",)):  # with --force too: it stands where the audit writes
        assert _audit(release, out, *extra) == 2
        assert "report.html" in capsys.readouterr().err
        assert report.read_text() == "<p>my own notes</p>\n"
    assert sorted(p.name for p in out.iterdir()) == [LOCK, "report.html"]


def test_an_edited_output_is_foreign(release, first, tmp_path, capsys):
    out = _copy(first, tmp_path)
    with open(out / "report.html", "a") as fh:
        fh.write("<!-- my annotation -->\n")
    edited = (out / "report.html").read_bytes()
    for extra in ((), ("--force",)):
        assert _audit(release, out, *extra) == 2
        assert "report.html" in capsys.readouterr().err
        assert (out / "report.html").read_bytes() == edited


@pytest.mark.slow
def test_force_writes_beside_foreign_files_and_keeps_them(release, first, tmp_path):
    out = _copy(first, tmp_path)
    notes, precious = out / "notes.txt", out / "lists" / "precious.csv"
    notes.write_text("mine\n")
    precious.write_text("row\n1\n")
    foreign = {"notes.txt": notes.read_bytes(), "lists/precious.csv": precious.read_bytes()}
    for _ in range(2):
        assert _audit(release, out, "--force") == 0
        assert {k: (out / k).read_bytes() for k in foreign} == foreign
        assert not set(foreign) & set(_listed(out))
        _only_listed(out, foreign=foreign)


def test_a_rerun_leaves_only_the_files_its_artifacts_list(release, first, tmp_path):
    out = _copy(first, tmp_path)
    assert "croissant.json" in _listed(out)
    _only_listed(out)
    assert _audit(release, out) == 0  # without --croissant this time
    assert not (out / "croissant.json").exists()
    _only_listed(out)


def test_a_crash_log_and_the_feature_cache_are_left_alone(release, first, tmp_path):
    from splitscope.cli import LOG_PREFIX
    from splitscope.features.workspace import OUT_LOCK
    from splitscope.records.publish import CRASH_LOG_PREFIX, LOCK_FILE

    assert (CRASH_LOG_PREFIX, LOCK_FILE) == (LOG_PREFIX, OUT_LOCK)  # one spelling each
    out = _copy(first, tmp_path)
    log = out / f"{LOG_PREFIX}20250101T000000Z-1-abcd.log"
    log.write_text("Traceback …\n")
    assert _audit(release, out) == 0
    assert log.read_text() == "Traceback …\n"
    assert (out / CACHE / "manifest.parquet").is_file()  # reused by the rerun, never removed
    _only_listed(out, foreign={log.name})


def test_the_croissant_verb_adds_to_the_folder_it_owns(release, first, tmp_path, capsys):
    out = _copy(first, tmp_path)
    assert _audit(release, out) == 0
    lists = {k: v for k, v in _listed(out).items() if k.startswith("lists/")}
    assert main(["croissant", str(out)]) == 0
    listed = _listed(out)
    assert "croissant.json" in listed and {k: listed[k] for k in lists} == lists
    _only_listed(out)
    (out / "mine.txt").write_text("mine\n")
    capsys.readouterr()
    assert main(["croissant", str(out)]) == 2
    assert "mine.txt" in capsys.readouterr().err
    assert main(["croissant", str(out), "--force"]) == 0
    assert (out / "mine.txt").read_text() == "mine\n"
    _only_listed(out, foreign={"mine.txt"})


def test_a_verb_out_folder_follows_the_same_rule(tmp_path, capsys):
    release = small_release(tmp_path / "release", 8)
    out = tmp_path / "out"
    args = ["resplit", str(release), "--group-regex", r"x_0(?P<group>\d)", "--out", str(out)]
    assert main(args) == 0
    _only_listed_verb = _files(out, skip={"artifacts.json"})
    assert _only_listed_verb == _listed(out)
    (out / "mine.csv").write_text("mine\n")
    capsys.readouterr()
    assert main(args) == 2
    assert "mine.csv" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    assert (out / "mine.csv").read_text() == "mine\n"
    assert _files(out, skip={"artifacts.json", "mine.csv"}) == _listed(out)


class _Killed(BaseException):
    """Stands for SIGKILL at a checkpoint: nothing is cleaned up (no ``except`` catches it and
    the staging folder is not discarded)."""


BEFORE_COMMIT = ["audit.json written", "staged"]
AFTER_COMMIT = ["committed", "reduced", "removed croissant.json", "moved audit.json",
                "moved lists/manifest.csv", "moved report.html", "published", "cleaned"]


@pytest.mark.slow
@pytest.mark.parametrize("point", BEFORE_COMMIT + AFTER_COMMIT)
def test_a_kill_at_each_point_of_the_publish_leaves_a_consistent_folder(
        release, first, tmp_path, monkeypatch, point):
    from splitscope.records import publish
    from splitscope.records.publish import out_folder_problems

    out = _copy(first, tmp_path)
    previous = _listed(out)
    reached = []

    def stop(at: str) -> None:
        reached.append(at)
        if at == point:
            raise _Killed(at)

    monkeypatch.setattr(publish, "checkpoint", stop)
    monkeypatch.setattr(publish.OutFolder, "discard", lambda self: None)
    with pytest.raises(_Killed):
        _audit(release, out)  # the rerun without --croissant: croissant.json goes
    assert out_folder_problems(out, keep=[CACHE]) == []
    listed = _listed(out)
    for rel, sha in listed.items():  # what is listed is there, byte for byte
        assert _sha(out / rel) == sha
    journals = list(out.glob(publish.PUBLISHING_PREFIX + "*"))
    if point in BEFORE_COMMIT:  # the previous run, untouched, beside a staging folder
        assert listed == previous and not journals
        assert {k: v for k, v in _files(out, skip={"artifacts.json"}).items()
                if not k.startswith(publish.STAGING_PREFIX)} == previous
    elif point in ("published", "cleaned"):  # the new run, complete
        assert "croissant.json" not in listed and "croissant.json" not in _files(out)
    else:  # mid-publish, never a mix: only files of the previous run are listed
        assert journals and set(listed.items()) <= set(previous.items())
    monkeypatch.undo()
    assert _audit(release, out) == 0
    assert not list(out.glob(".splitscope-*-*"))
    assert not (out / "croissant.json").exists()
    _only_listed(out)


def test_every_point_of_a_publish_is_a_checkpoint(release, first, tmp_path, monkeypatch):
    from splitscope.records import publish

    out = _copy(first, tmp_path)
    reached: list[str] = []
    monkeypatch.setattr(publish, "checkpoint", reached.append)
    assert _audit(release, out) == 0
    assert set(BEFORE_COMMIT + AFTER_COMMIT) <= set(reached)
    moved = [p.removeprefix("moved ") for p in reached if p.startswith("moved ")]
    assert sorted(moved) == sorted(k for k in _listed(out))
    assert reached.index("published") > max(reached.index(f"moved {m}") for m in moved)


def test_a_manifest_naming_files_outside_the_folder_removes_nothing(release, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "artifacts.json").write_text(json.dumps({
        "name": "splitscope outputs", "distribution": [
            {"contentUrl": "../victim.txt", "sha256": _sha(victim)},
            {"contentUrl": str(victim), "sha256": _sha(victim)}]}))
    assert _audit(release, out) == 0
    assert victim.read_text() == "keep me\n"
    _only_listed(out)
