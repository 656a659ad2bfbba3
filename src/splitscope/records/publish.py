"""Output folders owned by their ``artifacts.json``, and published all at once.

Every verb that writes an output folder (``audit --out``, ``croissant OUT``, the ``--out`` of
the other verbs) writes it through :func:`publishing`, so one rule holds for all of them.

**Ownership.** A folder belongs to the ``artifacts.json`` the previous run left in it: a file
that manifest lists with the SHA-256 it still has is splitscope's own, and a new run may replace
or remove it. Anything else is *foreign*: a file the manifest does not list, a listed file
edited since, a symbolic link, a manifest that is not splitscope's. Foreign entries are never
deleted or overwritten. A folder holding any is refused (:class:`~splitscope.errors.InputError`,
exit code 2, naming them) unless ``force`` is given; even then a foreign entry where the run
must write is refused. A symbolic link as the folder itself is refused, and so is one on the
way to any file the run writes. An absent or empty folder is fine. Neither own nor foreign,
and never touched: the run's lock file, crash logs, and the folders the caller names in
``keep`` (the audit's feature cache, ``OUT/workspace`` by default).

**Publishing.** The run writes into a fresh staging folder, ``OUT/.splitscope-staging-<random>``;
the rest of the folder does not change while it works. At the end:

1. the new ``artifacts.json`` (every staged file, with its SHA-256) and a journal (the previous
   run's files and the new run's, with their SHA-256) are written into the staging folder, which
   is then renamed ``OUT/.splitscope-publishing-<random>``: the commit point;
2. ``OUT/artifacts.json`` is replaced by one listing only the previous files the new run leaves
   as they are;
3. the previous run's other files are removed (each only while its SHA-256 still matches), and
   folders left empty with them;
4. each new file is moved into place with :func:`os.replace`;
5. the new ``artifacts.json`` is moved into place, last, and the publishing folder is removed.

So a kill at any moment leaves ``OUT/artifacts.json`` listing only files that are there with
their SHA-256: the previous run's (until step 2), the files both runs share (steps 2–4), or
the new run's (from step 5). A kill before the commit leaves the previous run as it was and a
staging folder, which the next run deletes; a kill after it leaves a complete journal, and the
next run publishing there finishes the interrupted publish first (every file it names is then
either in place or in the journal), so the folder ends as the new run left it. Each file is
moved by a rename inside one file system, so no file is ever half-written.

Every point of a publish passes through :func:`checkpoint`, which does nothing: the kill soak
(``benchmarks/soak_kill.py``) and the tests replace it to stop a run there.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from splitscope.errors import InputError
from splitscope.records.exports import (
    ARTIFACTS_FILE,
    ARTIFACTS_NAME,
    artifacts_document,
    file_object,
    write_json,
)
from splitscope.records.model import sha256_file

__all__ = ["CRASH_LOG_PREFIX", "LOCK_FILE", "PUBLISHING_PREFIX", "STAGING_PREFIX", "OutFolder",
           "checkpoint", "inside", "out_folder_problems", "publishing", "refuse_link"]

STAGING_PREFIX = ".splitscope-staging-"
"""A run's staging folder inside its output folder; one left by a killed run is deleted."""

PUBLISHING_PREFIX = ".splitscope-publishing-"
"""A staging folder once complete (the commit point); one left by a killed run is finished."""

JOURNAL = ".splitscope-journal.json"
"""In a publishing folder: the previous run's files and the new run's, with their SHA-256."""

_REDUCED = ".splitscope-reduced.json"  # the manifest of step 2, written beside the journal

#: names at the top of an output folder that are splitscope's but never outputs: the lock a
#: run holds there (splitscope.features.workspace.OUT_LOCK) and crash logs (splitscope.cli)
LOCK_FILE = ".splitscope-out.lock"
CRASH_LOG_PREFIX = "splitscope-error-"

_SHOWN = 10  # foreign entries named in a message


def checkpoint(point: str) -> None:
    """A point of a publish (``committed``, ``moved lists/x.csv``, …): does nothing; the kill
    soak and the tests replace it to stop a run exactly there."""


def refuse_link(out_dir: str | Path, what: str = "--out") -> None:
    """Raise :class:`InputError` when ``out_dir`` is a symbolic link or a file: splitscope
    writes only into a real folder, so nothing lands where the link points."""
    out = Path(out_dir)
    if out.is_symlink():
        raise InputError(f"{what} {out} is a symbolic link (to {os.readlink(out)}); splitscope "
                         f"writes only into a real folder: pass the folder itself or another one")
    if out.exists() and not out.is_dir():
        raise InputError(f"{what} {out} is a file, not a folder; pass a folder")


def inside(out_dir: str | Path, paths: Iterable[str | Path]) -> list[str]:
    """Those of ``paths`` that lie inside ``out_dir``, relative to it (POSIX): the ``keep``
    of :func:`publishing` for a cache a run keeps in its output folder."""
    out = os.path.abspath(out_dir)
    found = []
    for path in paths:
        rel = os.path.relpath(os.path.abspath(path), out)
        if rel != "." and rel != ".." and not rel.startswith(".." + os.sep):
            found.append(PurePosixPath(*Path(rel).parts).as_posix())
    return found


@dataclass
class _Survey:
    """What an output folder holds: its own files (path → ``artifacts.json`` entry, SHA-256
    checked) and its foreign entries (relative paths; a folder link counts once)."""

    own: dict[str, dict[str, Any]] = field(default_factory=dict)
    foreign: list[str] = field(default_factory=list)
    manifest_own: bool = True


@dataclass
class OutFolder:
    """An output folder claimed for one run (:func:`publishing`): the run writes under
    :attr:`path`, a staging folder inside it, and :meth:`publish` moves the files into place."""

    out: Path
    path: Path
    force: bool = False
    keep: tuple[str, ...] = ()
    what: str = "--out"
    published: list[Path] = field(default_factory=list)
    _carry: bool = False
    _committed: bool = False

    def carry(self) -> None:
        """Keep the previous run's own files in the new set unless the run writes them anew
        (for a verb that adds to a finished folder, like ``croissant``)."""
        self._carry = True

    def publish(self) -> list[Path]:
        """Move the staged files into the output folder (module docstring, steps 1–5); returns
        the paths published, ``artifacts.json`` last."""
        with contextlib.suppress(FileNotFoundError):  # publishing writes the manifest itself
            (self.path / ARTIFACTS_FILE).unlink()
        staged = _files_under(self.path)
        survey = _survey(self.out, self.keep)
        if survey.foreign and not self.force:  # something appeared while the run worked
            raise InputError(_foreign_message(self.out, survey.foreign, self.what))
        carried = ({p: e for p, e in survey.own.items() if p not in staged}
                   if self._carry else {})
        blocked = _blocked(self.out, [*staged, ARTIFACTS_FILE], survey)
        if blocked:
            raise InputError(_blocked_message(self.out, blocked, self.what))
        new = {p: file_object(self.path / p, self.path) for p in staged} | carried
        write_json({"previous": sorted(survey.own.values(), key=_url),
                    "new": sorted(new.values(), key=_url)}, self.path / JOURNAL)
        write_json(artifacts_document(new.values()), self.path / ARTIFACTS_FILE)
        checkpoint("staged")
        journal = self.out / (PUBLISHING_PREFIX + self.path.name.removeprefix(STAGING_PREFIX))
        os.rename(self.path, journal)
        self._committed = True
        checkpoint("committed")
        _roll_forward(self.out, journal, verify=False)
        self.published = [self.out / p for p in sorted(new)] + [self.out / ARTIFACTS_FILE]
        return self.published

    def discard(self) -> None:
        """Remove the staging folder of a run that did not reach its commit point."""
        if not self._committed:
            shutil.rmtree(self.path, ignore_errors=True)


@contextlib.contextmanager
def publishing(out_dir: str | Path, *, force: bool = False, keep: Iterable[str] = (),
               writes: Iterable[str] = (), what: str = "--out") -> Iterator[OutFolder]:
    """Claim ``out_dir`` for a run, yield it, and publish what the run wrote under its
    ``path`` when the block completes (see the module docstring).

    The claim finishes or clears what a killed run left, then refuses the folder when it holds
    foreign entries (unless ``force``) or when one sits at a path of ``writes`` (relative
    paths the run is known to write, so that a refusal comes before the work). ``keep``: folders
    (relative paths) left alone. An error in the block discards the staging folder and leaves
    the output folder as it was.
    """
    out = Path(out_dir)
    keep = tuple(keep)
    refuse_link(out, what)
    if out.is_dir():
        _recover(out)
        survey = _survey(out, keep)
        if survey.foreign and not force:
            raise InputError(_foreign_message(out, survey.foreign, what))
        blocked = _blocked(out, [*writes, ARTIFACTS_FILE], survey)
        if blocked:
            raise InputError(_blocked_message(out, blocked, what))
    out.mkdir(parents=True, exist_ok=True)
    staging = out / f"{STAGING_PREFIX}{secrets.token_hex(6)}"
    staging.mkdir()
    folder = OutFolder(out=out, path=staging, force=force, keep=keep, what=what)
    try:
        yield folder
        folder.publish()
    finally:
        folder.discard()


def out_folder_problems(out_dir: str | Path, *, keep: Iterable[str] = (),
                        foreign: Iterable[str] = ()) -> list[str]:
    """Why ``out_dir`` does not hold one consistent run (empty when it does): a file its
    ``artifacts.json`` lists that is missing or differs from its SHA-256; a file present that
    it does not list (besides ``foreign`` and ``keep``, relative paths known to be there) and
    that no interrupted publish names with its bytes; and, while a publish is interrupted
    before its last step, a listed file that is not the previous run's (a mix of two runs).
    A staging folder is no problem (the next run deletes it). For the tests and the kill soak.
    """
    out = Path(out_dir)
    problems: list[str] = []
    listed = _manifest(out / ARTIFACTS_FILE)
    if listed is None and os.path.lexists(out / ARTIFACTS_FILE):
        problems.append(f"{ARTIFACTS_FILE} is not splitscope's")
    listed = listed or {}
    problems += [f"{rel}: listed in {ARTIFACTS_FILE} but missing or changed"
                 for rel, e in sorted(listed.items()) if not _own(out, rel, e["sha256"])]
    journaled: dict[str, set[str]] = {}
    for journal_dir in sorted(out.glob(PUBLISHING_PREFIX + "*")):
        try:
            journal = json.loads((journal_dir / JOURNAL).read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue  # the publish is done but for removing its folder
        if not _regular(journal_dir / ARTIFACTS_FILE):
            continue
        previous, new = _entries(journal["previous"]), _entries(journal["new"])
        for rel, e in [*previous.items(), *new.items()]:
            journaled.setdefault(rel, set()).add(e["sha256"])
        problems += [f"{rel}: listed in {ARTIFACTS_FILE} during an interrupted publish but not "
                     f"the previous run's" for rel, e in sorted(listed.items())
                     if previous.get(rel, {}).get("sha256") != e["sha256"]]
    known = set(foreign) | {ARTIFACTS_FILE}
    for rel, entry in _walk(out, tuple(keep)):
        if rel in known or rel in listed:
            continue
        if rel in journaled and entry.is_file(follow_symlinks=False) \
                and sha256_file(entry.path) in journaled[rel]:
            continue
        problems.append(f"{rel}: present but not listed in {ARTIFACTS_FILE}")
    return problems


# --- the survey -----------------------------------------------------------------------------

def _survey(out: Path, keep: tuple[str, ...]) -> _Survey:
    """Sort what ``out`` holds into own files and foreign entries (module docstring)."""
    listed = _manifest(out / ARTIFACTS_FILE)
    survey = _Survey(manifest_own=listed is not None or not os.path.lexists(
        out / ARTIFACTS_FILE))
    if not survey.manifest_own:
        survey.foreign.append(ARTIFACTS_FILE)
    listed = listed or {}
    for rel, entry in _walk(out, keep):
        if entry.is_file(follow_symlinks=False) and rel in listed \
                and sha256_file(entry.path) == listed[rel]["sha256"]:
            survey.own[rel] = listed[rel]
        else:
            survey.foreign.append(rel)
    return survey


def _walk(out: Path, keep: tuple[str, ...]) -> Iterator[tuple[str, os.DirEntry]]:
    """Every entry under ``out`` that is neither a folder (those are entered) nor left alone
    (:func:`_ignored`), with its relative POSIX path, in name order; a symbolic link is
    yielded, never followed."""

    def visit(folder: str, prefix: str) -> Iterator[tuple[str, os.DirEntry]]:
        with os.scandir(folder) as found:
            entries = sorted(found, key=lambda e: e.name)
        for entry in entries:
            rel = prefix + entry.name
            if _ignored(rel, entry, keep):
                continue
            if entry.is_dir(follow_symlinks=False):
                yield from visit(entry.path, rel + "/")
            else:
                yield rel, entry

    yield from visit(str(out), "")


def _ignored(rel: str, entry: os.DirEntry, keep: tuple[str, ...]) -> bool:
    if rel == ARTIFACTS_FILE or any(rel == k or rel.startswith(k.rstrip("/") + "/")
                                    for k in keep):
        return True
    if "/" in rel:
        return False
    if entry.is_symlink():
        return False
    if entry.is_dir():
        return rel.startswith((STAGING_PREFIX, PUBLISHING_PREFIX))
    return rel == LOCK_FILE or (rel.startswith(CRASH_LOG_PREFIX) and rel.endswith(".log"))


def _manifest(path: Path) -> dict[str, dict[str, Any]] | None:
    """The entries of a splitscope ``artifacts.json`` by path (only safe relative paths), or
    None when ``path`` is not a plain file holding one."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("name") != ARTIFACTS_NAME \
            or not isinstance(doc.get("distribution"), list):
        return None
    return _entries(doc["distribution"])


def _entries(items: Iterable[Any]) -> dict[str, dict[str, Any]]:
    return {e["contentUrl"]: e for e in items
            if isinstance(e, dict) and _safe(e.get("contentUrl"))
            and isinstance(e.get("sha256"), str)}


def _safe(rel: Any) -> bool:
    """Whether ``rel`` is a plain relative POSIX path under the folder (no ``..``, not
    absolute, not one of publishing's own names)."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel:
        return False
    parts = rel.split("/")
    return all(p not in ("", ".", "..") for p in parts) \
        and rel not in (ARTIFACTS_FILE, JOURNAL, _REDUCED)


def _url(entry: Mapping[str, Any]) -> str:
    return entry["contentUrl"]


def _files_under(folder: Path) -> dict[str, None]:
    """Relative POSIX paths of the regular files under ``folder``, sorted (a link or another
    kind of entry there is a bug of the writer)."""
    found: list[str] = []
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = Path(root, name)
            rel = path.relative_to(folder).as_posix()
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise RuntimeError(f"{path}: not a regular file; a run stages files only")
            found.append(rel)
    return dict.fromkeys(sorted(found))


def _blocked(out: Path, paths: Iterable[str], survey: _Survey) -> list[str]:
    """The entries that stop the run writing ``paths`` (relative files): a symbolic link on the
    way or at the place, a foreign file where a folder or the file goes, a folder holding
    foreign entries where the file goes. An own file is replaced (or, where a folder goes,
    removed first)."""
    found: set[str] = set()
    foreign = set(survey.foreign)
    for rel in paths:
        parts = rel.split("/")
        for i in range(1, len(parts) + 1):
            here = "/".join(parts[:i])
            try:
                mode = os.lstat(out / here).st_mode
            except FileNotFoundError:
                break
            if stat.S_ISLNK(mode):
                found.add(here)
                break
            if stat.S_ISDIR(mode):
                if i == len(parts) and any(f.startswith(here + "/") for f in foreign):
                    found.add(here)
                continue
            if here == ARTIFACTS_FILE and survey.manifest_own:
                break
            if here not in survey.own:
                found.add(here)
            break
    return sorted(found)


def _foreign_message(out: Path, foreign: list[str], what: str = "--out") -> str:
    return (f"{what} {out} holds files splitscope did not write there, or that changed since "
            f"(its {ARTIFACTS_FILE} does not list them with their SHA-256): {_names(foreign)}. "
            f"splitscope never deletes or overwrites such files; choose an empty or new folder, "
            f"or pass --force to write beside them")


def _blocked_message(out: Path, blocked: list[str], what: str = "--out") -> str:
    return (f"{what} {out}: {_names(blocked)} stands where this run writes and is not "
            f"splitscope's own (a file it did not write, or that changed since, or a symbolic "
            f"link); splitscope never overwrites it, even with --force: move it away or choose "
            f"another folder")


def _names(paths: list[str]) -> str:
    more = f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else ""
    return ", ".join(paths[:_SHOWN]) + more


# --- publishing -----------------------------------------------------------------------------

def _recover(out: Path) -> None:
    """Finish the publish a killed run committed; delete the staging folder of one that had
    not."""
    with os.scandir(out) as entries:
        folders = sorted(e.path for e in entries if e.is_dir(follow_symlinks=False))
    for folder in folders:
        base = os.path.basename(folder)
        if base.startswith(PUBLISHING_PREFIX):
            _roll_forward(out, Path(folder), verify=True)
        elif base.startswith(STAGING_PREFIX):
            shutil.rmtree(folder)


def _roll_forward(out: Path, journal_dir: Path, *, verify: bool) -> None:
    """Steps 2–5 of the module docstring from wherever a killed run stopped them; with
    ``verify`` (finishing another run's publish) a file is replaced only when it holds that
    run's previous or new bytes."""
    final = journal_dir / ARTIFACTS_FILE
    try:
        journal = json.loads((journal_dir / JOURNAL).read_text(encoding="utf-8"))
    except FileNotFoundError:
        journal = None  # removed after step 5: only the folder is left to remove
    if journal is not None and _regular(final):
        previous, new = _entries(journal["previous"]), _entries(journal["new"])
        if _regular(out / ARTIFACTS_FILE):
            reduced = write_json(artifacts_document(
                e for p, e in previous.items() if p in new and new[p]["sha256"] == e["sha256"]),
                journal_dir / _REDUCED)
            os.replace(reduced, out / ARTIFACTS_FILE)
            checkpoint("reduced")
        for rel in sorted(set(previous) - set(new)):
            if _own(out, rel, previous[rel]["sha256"]):
                (out / rel).unlink()
                _prune(out, rel)
            checkpoint(f"removed {rel}")
        for rel, entry in sorted(new.items()):
            if _regular(journal_dir / rel):
                _make_room(out, rel, [previous.get(rel, {}).get("sha256"), entry["sha256"]]
                           if verify else None)
                os.replace(journal_dir / rel, out / rel)
                checkpoint(f"moved {rel}")
            elif verify and not _own(out, rel, entry["sha256"]):
                raise InputError(f"{out}: cannot finish the publish a killed run began: {rel} "
                                 f"is missing or changed; remove {journal_dir} and run again")
        os.replace(final, out / ARTIFACTS_FILE)
        checkpoint("published")
    shutil.rmtree(journal_dir)
    checkpoint("cleaned")


def _make_room(out: Path, rel: str, allowed: list[str | None] | None) -> None:
    """Make the folders of ``out/rel`` (refusing a link or a file on the way) and check what
    is at its place: nothing, an empty folder (removed), or a file to replace (with
    ``allowed``: one holding one of those SHA-256)."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        here = out.joinpath(*parts[:i])
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            here.mkdir()
            continue
        if not stat.S_ISDIR(mode):
            raise InputError(_blocked_message(out, ["/".join(parts[:i])]))
    place = out / rel
    try:
        mode = os.lstat(place).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        for root, dirs, _ in os.walk(place, topdown=False):
            for d in dirs:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(root, d))
        with contextlib.suppress(OSError):
            os.rmdir(place)
        if os.path.lexists(place):
            raise InputError(_blocked_message(out, [rel]))
    elif not stat.S_ISREG(mode) or (allowed is not None and sha256_file(place) not in allowed):
        raise InputError(_blocked_message(out, [rel]))


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _own(out: Path, rel: str, sha256: str) -> bool:
    """Whether ``out/rel`` is a regular file, reached through real folders only, holding the
    bytes of ``sha256``."""
    parts = rel.split("/")
    try:
        if any(not stat.S_ISDIR(os.lstat(out.joinpath(*parts[:i])).st_mode)
               for i in range(1, len(parts))):
            return False
    except FileNotFoundError:
        return False
    return _regular(out / rel) and sha256_file(out / rel) == sha256


def _prune(out: Path, rel: str) -> None:
    """Remove the folders of ``rel`` that are left empty, deepest first (never ``out``)."""
    parent = PurePosixPath(rel).parent
    while parent != PurePosixPath("."):
        try:
            os.rmdir(out / parent)
        except OSError:
            return
        parent = parent.parent
