"""A damaged, full or read-only workspace: repaired to the clean result, or one sentence and
exit 2 — never a traceback, never a silently reused damaged file."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hostile_corpus import image

from splitscope import cli
from splitscope.errors import InputError
from splitscope.features import workspace
from splitscope.features.extract import extract_files
from splitscope.features.scanning import load_scan, scan


def _release(root: Path, n: int = 40) -> Path:
    for i in range(n):
        folder = root / ("train" if i % 4 else "test") / ("a" if i % 2 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        image(i, w=32, h=24).save(folder / f"x_{i:03d}.png")
    (root / "test" / "b" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    return root


def _same(a, b) -> None:
    pd.testing.assert_frame_equal(a.features, b.features)
    assert np.asarray(a.thumbnails).tobytes() == np.asarray(b.thumbnails).tobytes()
    pd.testing.assert_frame_equal(a.manifest, b.manifest)


class _Stop(Exception):
    pass


def stop_at_x_030(files, params):
    """Extract like the default, but stop the scan (as a crash would) at a later batch."""
    if any(f.endswith("x_030.png") for f in files):
        raise _Stop
    return extract_files(files, params)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    base = tmp_path_factory.mktemp("clean")
    root = _release(base / "release")
    return root, scan(root, base / "ws", workers=1, batch_size=6, progress=False)


def _key_dir(ws: Path) -> Path:
    return next((ws / "features").iterdir())


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _zero_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 64] = bytes(64)
    path.write_bytes(bytes(data))


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00{not json")


SHARD_DAMAGE = {
    "truncated shard table": ("*.parquet", _truncate),
    "zeroed shard thumbnails": ("*.npy", _zero_middle),
    "garbage shard commit record": ("*.json", _garbage),
}


@pytest.mark.parametrize("kind", sorted(SHARD_DAMAGE))
def test_damaged_shard_is_quarantined_and_re_extracted(clean, tmp_path, kind):
    root, reference = clean
    ws = tmp_path / "ws"
    with pytest.raises(_Stop):
        scan(root, ws, workers=1, batch_size=6, extractor=stop_at_x_030, progress=False)
    shards = _key_dir(ws) / "shards"
    pattern, damage = SHARD_DAMAGE[kind]
    victim = min(p for p in shards.glob(pattern) if not p.name.startswith(".tmp-"))
    damage(victim)
    repaired = scan(root, ws, workers=1, batch_size=6, progress=False)
    repairs = repaired.summary()["repairs"]
    assert any(victim.stem in r["path"] for r in repairs), repairs
    assert all(Path(r["moved_to"]).exists() for r in repairs)
    assert repaired.meta["extracted"] >= 6  # the damaged shard's files were read again
    _same(repaired, reference)


RESULT_DAMAGE = {
    "truncated features.parquet": ("features.parquet", _truncate),
    "truncated thumbnails.npy": ("thumbnails.npy", _truncate),
    "zeroed thumbnail slice, same size": ("thumbnails.npy", _zero_middle),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(RESULT_DAMAGE))
def test_damaged_result_is_refused_on_load_and_rebuilt_by_scan(clean, tmp_path, kind):
    root, reference = clean
    ws = tmp_path / "ws"
    scan(root, ws, workers=1, batch_size=6, progress=False)
    name, damage = RESULT_DAMAGE[kind]
    victim = next((_key_dir(ws) / "results").iterdir()) / name
    size = victim.stat().st_size
    damage(victim)
    assert kind != "zeroed thumbnail slice, same size" or victim.stat().st_size == size
    with pytest.raises(InputError, match="damaged.*rerun `splitscope scan`"):
        load_scan(ws)
    repaired = scan(root, ws, workers=1, batch_size=6, progress=False)
    assert repaired.summary()["repairs"] and repaired.meta["extracted"] == 41
    _same(repaired, reference)
    _same(load_scan(ws), reference)


@pytest.mark.parametrize("name", ["meta.json", "scan.json", "manifest.parquet"])
def test_garbage_top_level_file_is_rebuilt(clean, tmp_path, name):
    root, reference = clean
    ws = tmp_path / "ws"
    scan(root, ws, workers=1, batch_size=6, progress=False)
    victim = _key_dir(ws) / name if name == "meta.json" else ws / name
    _garbage(victim)
    assert cli.main(["duplicates", "-w", str(ws)]) == 2  # one sentence, not a traceback
    repaired = scan(root, ws, workers=1, batch_size=6, progress=False)
    _same(repaired, reference)
    if name == "meta.json":
        assert repaired.summary()["repairs"][0]["problem"].startswith("not valid JSON")


def test_unrepairable_workspace_is_one_sentence_and_exit_2(clean, tmp_path, capsys):
    root, _ = clean
    ws = tmp_path / "ws"
    scan(root, ws, workers=1, batch_size=6, progress=False)
    _garbage(_key_dir(ws) / "meta.json")
    (ws / "quarantine").write_text("a file where the quarantine folder goes")
    capsys.readouterr()
    assert cli.main(["scan", str(root), "-w", str(ws), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "cannot be repaired" in err and str(ws) in err and "--workspace" in err


def test_disk_full_is_one_sentence_and_the_workspace_stays_consistent(clean, tmp_path,
                                                                      monkeypatch, capsys):
    root, reference = clean
    ws = tmp_path / "ws"
    real = workspace._fsync_file
    calls = {"n": 0}

    def fill_up(path):
        calls["n"] += 1
        if calls["n"] > 3:  # the fourth file written (the second batch's) finds the disk full
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path)

    monkeypatch.setattr(workspace, "_fsync_file", fill_up)
    code = cli.main(["scan", str(root), "-w", str(ws), "--workers", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "No space left on device" in err and "MiB free" in err and str(ws) in err
    monkeypatch.setattr(workspace, "_fsync_file", real)
    again = scan(root, ws, workers=1, batch_size=6, progress=False)
    assert again.meta["reused"] > 0  # what was committed before the disk filled is kept
    _same(again, reference)


@pytest.mark.slow
def test_read_only_workspace_is_one_sentence_and_exit_2(tmp_path, unprivileged):
    root = _release(tmp_path / "release", n=8)
    ws = tmp_path / "ws"
    ws.mkdir()
    ws.chmod(0o555)
    try:
        done = unprivileged("import sys; from splitscope.cli import main; sys.exit(main())",
                            "scan", str(root), "-w", str(ws), "--workers", "1")
    finally:
        ws.chmod(0o755)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert str(ws) in done.stderr and "MiB free" in done.stderr
    assert list(ws.iterdir()) == []


def test_unlistable_directory_is_excluded_not_dropped(tmp_path, unprivileged):
    root = _release(tmp_path / "release", n=8)
    locked = root / "train" / "a" / "locked"
    locked.mkdir()
    image(99).save(locked / "unseen.png")
    locked.chmod(0o000)
    script = ("import json, sys; from splitscope.manifest import read_folder; "
              "m = read_folder(sys.argv[1]); "
              "print(json.dumps({'rows': m['path'].tolist(), 'excluded': m.attrs['excluded']}))")
    try:
        done = unprivileged(script, str(root))
    finally:
        locked.chmod(0o755)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["excluded"] == [{"path": "train/a/locked", "reason": "directory cannot be listed",
                                "detail": "Permission denied"}]
    assert len(out["rows"]) == 9  # 8 images and the broken PNG; the locked folder is listed
