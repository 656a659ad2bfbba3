"""scan / load_scan: incremental cache, parameter keys, worker-count and history invariance,
failures listed and counted, the dataset left untouched."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from splitscope.errors import InputError
from splitscope.features.executor import SerialExecutor
from splitscope.features.extract import extract_files
from splitscope.features.scanning import Scan, load_scan, scan


def run_scan(inputs, workspace, thumb_size=16, **kw):
    kw.setdefault("progress", False)
    kw.setdefault("workers", 1)
    return scan(inputs, workspace, thumb_size=thumb_size, **kw)


def make_release(root: Path, n_per_class: int = 6, seed: int = 0, size: int = 24) -> Path:
    """ROOT/<split>/<class>/img_<i>.png with random content (seeded)."""
    rng = np.random.default_rng(seed)
    for split in ("train", "test"):
        for label in ("a", "b"):
            folder = root / split / label
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n_per_class):
                arr = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(arr).save(folder / f"img_{i:03d}.png")
    return root


def tree_state(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def same_result(a: Scan, b: Scan) -> None:
    pd.testing.assert_frame_equal(a.features, b.features)
    assert a.thumbnails.shape == b.thumbnails.shape
    assert np.asarray(a.thumbnails).tobytes() == np.asarray(b.thumbnails).tobytes()


def test_scan_builds_manifest_features_and_thumbnails(tmp_path):
    root = make_release(tmp_path / "data")
    before = tree_state(root)
    s = run_scan(root, tmp_path / "ws")
    assert len(s.manifest) == 24
    assert s.features["file"].tolist() == sorted(s.manifest["file"])
    assert s.features["status"].eq("ok").all()
    assert s.features["thumb_index"].tolist() == list(range(24))
    assert isinstance(s.thumbnails, np.memmap)
    assert s.thumbnails.shape == (24, 16, 16) and s.thumbnails.dtype == np.uint8
    # thumbnail of a row equals a direct recomputation
    row = 5
    path = s.manifest.loc[row, "file"]
    expect = np.asarray(Image.open(path).convert("L").resize((16, 16), Image.Resampling.BICUBIC))
    assert np.array_equal(s.thumbs([row])[0], expect)
    rows = s.rows()
    assert len(rows) == len(s.manifest) and rows["row"].tolist() == list(range(24))
    summary = s.summary()
    assert summary["rows"] == 24 and summary["unique_files"] == 24
    assert summary["counts"] == {"test": {"a": 6, "b": 6}, "train": {"a": 6, "b": 6}}
    assert summary["extracted"] == 24 and summary["reused"] == 0
    assert summary["failures"]["files"]["total"] == 0
    meta = s.meta
    assert meta["software"]["numpy"] == np.__version__
    assert meta["params"]["thumb_size"] == 16 and "total" in meta["timings"]
    assert tree_state(root) == before  # nothing written into the dataset
    reopened = load_scan(tmp_path / "ws")
    same_result(s, reopened)
    pd.testing.assert_frame_equal(s.manifest, reopened.manifest)


def test_incremental_rescan_and_touch(tmp_path):
    root = make_release(tmp_path / "data")
    ws = tmp_path / "ws"
    first = run_scan(root, ws)
    second = run_scan(root, ws)
    assert second.meta["extracted"] == 0 and second.meta["reused"] == 24
    same_result(first, second)
    # change one file's content: exactly that file is re-extracted
    target = root / "train" / "a" / "img_002.png"
    Image.fromarray(np.full((24, 24), 77, dtype=np.uint8)).save(target)
    os.utime(target, ns=(10**18, 10**18))
    third = run_scan(root, ws)
    assert third.meta["extracted"] == 1 and third.meta["reused"] == 23
    changed = third.features.set_index("file").loc[str(target.resolve())]
    assert changed["flat"]
    assert (third.thumbs([third.manifest.index[third.manifest["file"] == str(target.resolve())][0]])
            == 77).all()
    # only the mtime changes (touch): re-read, same features
    os.utime(target, ns=(2 * 10**18, 2 * 10**18))
    fourth = run_scan(root, ws)
    assert fourth.meta["extracted"] == 1
    same_result(third, fourth)


def test_vanished_files_do_not_pollute(tmp_path):
    root = make_release(tmp_path / "data")
    ws = tmp_path / "ws"
    run_scan(root, ws)
    gone = root / "test" / "b" / "img_000.png"
    gone.unlink()
    s = run_scan(root, ws)
    assert len(s.manifest) == 23 and len(s.features) == 23
    assert str(gone.resolve()) not in set(s.features["file"])
    assert s.meta["extracted"] == 0
    assert s.thumbnails.shape[0] == 23


def test_params_key_separates_stores(tmp_path):
    root = make_release(tmp_path / "data", n_per_class=2)
    ws = tmp_path / "ws"
    a = run_scan(root, ws, thumb_size=16)
    b = run_scan(root, ws, thumb_size=12)
    assert b.meta["extracted"] == 8  # another size is another entry
    assert a.params.key() != b.params.key()
    assert b.thumbnails.shape == (8, 12, 12)
    stores = sorted(p.name for p in (ws / "features").iterdir())
    assert stores == sorted([a.params.key(), b.params.key()])
    # both stay available (same manifest)
    assert load_scan(ws, a.params).thumbnails.shape == (8, 16, 16)
    assert load_scan(ws).thumbnails.shape == (8, 12, 12)  # default: the last scan
    c = run_scan(root, ws, thumb_size=16)
    assert c.meta["extracted"] == 0


def test_failures_listed_and_counted(tmp_path):
    root = tmp_path / "data"
    folder = root / "x"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for i in range(99):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).save(folder / f"{i:03d}.png")
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    s = run_scan(root, tmp_path / "ws")
    assert len(s.features) == 100
    assert int(s.features["status"].eq("ok").sum()) == 99
    bad = s.features[s.features["status"] != "ok"]
    assert bad["file"].str.endswith("broken.png").all() and len(bad) == 1
    assert bad["thumb_index"].tolist() == [-1]
    summary = s.summary()
    assert summary["features_ok"] == 99
    assert summary["failures"]["files"]["total"] == 1
    assert summary["failures"]["rows"]["total"] == 1
    assert sum(summary["failures"]["files"]["by_reason"].values()) == 1
    assert s.thumbnails.shape[0] == 99
    broken_row = int(s.manifest.index[s.manifest["basename"] == "broken.png"][0])
    with pytest.raises(InputError):
        s.thumbs([broken_row])
    # a one-shot iterator is read once: the error still names the failed row
    with pytest.raises(InputError, match=f"e.g. row {broken_row}"):
        s.thumbs(iter([0, broken_row]))
    masked = s.thumbs([0, broken_row], missing="zeros")
    assert masked.shape == (2, 16, 16) and not masked[1].any()
    assert s.thumb_index([broken_row]).tolist() == [-1]


def test_list_of_missing_files_scans(tmp_path):
    listing = tmp_path / "index.csv"
    pd.DataFrame({"image_path": ["nowhere/a.jpg", "nowhere/b.jpg", "nowhere/a.jpg"],
                  "split": ["train", "test", "test"], "label": ["x", "y", "x"]}
                 ).to_csv(listing, index=False)
    s = run_scan(listing, tmp_path / "ws")
    assert len(s.manifest) == 3 and len(s.features) == 2
    assert s.features["status"].eq("missing").all()
    summary = s.summary()
    assert summary["failures"]["files"]["by_reason"] == {"missing": 2}
    assert summary["failures"]["rows"]["by_reason"] == {"missing": 3}
    assert summary["failures"]["rows"]["by_split"] == {"test": {"missing": 2},
                                                       "train": {"missing": 1}}
    assert summary["failures"]["files"]["by_split"] == {"test": {"missing": 2},
                                                        "train": {"missing": 1}}
    assert s.thumbnails.shape[0] == 0
    again = run_scan(listing, tmp_path / "ws")
    assert again.meta["extracted"] == 0  # a still-missing file is not retried


def test_duplicated_rows_share_one_feature_row(tmp_path):
    root = make_release(tmp_path / "data", n_per_class=2)
    base = run_scan(root, tmp_path / "ws").manifest
    doubled = pd.concat([base, base.iloc[:3]], ignore_index=True)
    s = run_scan(doubled, tmp_path / "ws2")
    assert len(s.manifest) == 11 and len(s.features) == 8
    rows = s.rows()
    assert len(rows) == 11
    assert rows["thumb_index"].iloc[8:].tolist() == rows["thumb_index"].iloc[:3].tolist()


def test_odd_file_names(tmp_path):
    root = tmp_path / "data"
    names = ["sp ace.png", "ünïcødé.png", "semi;colon,comma.png", "quote'\"s.png",
             "#hash%percent.png", "-dash.png", "日本.png", "UPPER.PNG", "no_ext",
             "new\nline.png", "trailing space .png", "a" * 200 + ".png"]
    (root / "c").mkdir(parents=True)
    for i, name in enumerate(names):
        Image.fromarray(np.full((8, 8), i * 20, dtype=np.uint8)).save(root / "c" / name,
                                                                      format="PNG")
    s = run_scan(root, tmp_path / "ws")
    assert sorted(s.manifest["basename"]) == sorted(names)
    assert s.features["status"].eq("ok").all()
    again = run_scan(root, tmp_path / "ws")
    assert again.meta["extracted"] == 0


def test_group_regex_fills_groups(tmp_path):
    root = tmp_path / "data" / "train" / "P"
    root.mkdir(parents=True)
    for name in ("person1_a.png", "person1_b.png", "person22_c.png", "other.png"):
        Image.fromarray(np.zeros((8, 8), np.uint8)).save(root / name)
    s = run_scan(tmp_path / "data", tmp_path / "ws", group_regex=r"person(?P<group>\d+)_")
    groups = dict(zip(s.manifest["basename"], s.manifest["group"]))
    assert groups["person1_a.png"] == "1" and groups["person22_c.png"] == "22"
    assert pd.isna(groups["other.png"])
    assert s.summary()["groups"]["rows_with_group"] == 3
    assert s.summary()["flat_thumbnails"] == 4


def test_workspace_inside_dataset_refused(tmp_path):
    root = make_release(tmp_path / "data", n_per_class=1)
    before = tree_state(root)
    with pytest.raises(InputError, match="never writes into a dataset"):
        run_scan(root, root / "ws")
    assert tree_state(root) == before


def test_load_scan_errors(tmp_path):
    with pytest.raises(InputError, match="no finished scan"):
        load_scan(tmp_path / "empty")
    root = make_release(tmp_path / "data", n_per_class=1)
    ws = tmp_path / "ws"
    a = run_scan(root, ws, thumb_size=16)
    with pytest.raises(InputError, match="no finished scan with feature key"):
        load_scan(ws, "nokey")
    # a later scan of another manifest makes the old key's features stale
    (root / "train" / "a" / "img_000.png").unlink()
    run_scan(root, ws, thumb_size=12)
    with pytest.raises(InputError, match="changed since"):
        load_scan(ws, a.params)


def test_retry_after_crash_between_shard_commits(tmp_path):
    """A run that dies after committing some batches: the rerun reuses them."""
    root = make_release(tmp_path / "data", n_per_class=5)
    ws = tmp_path / "ws"
    calls = []

    def dying(files, params):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(list(files))
        return extract_files(files, params)

    with pytest.raises(KeyboardInterrupt):
        scan(root, ws, thumb_size=16, workers=1, progress=False, extractor=dying, batch_size=4)
    done = sum(len(c) for c in calls)
    assert done == 8
    resumed = run_scan(root, ws, batch_size=4)
    assert resumed.meta["extracted"] == 20 - done and resumed.meta["reused"] == done
    fresh = run_scan(root, tmp_path / "fresh", batch_size=7)
    same_result(resumed, fresh)


@pytest.mark.slow
def test_workers_one_and_two_identical(tmp_path):
    root = make_release(tmp_path / "data", n_per_class=10)
    one = run_scan(root, tmp_path / "w1", workers=1)
    two = run_scan(root, tmp_path / "w2", workers=2, batch_size=5)
    same_result(one, two)
    assert two.meta["workers"] == 2


# --------------------------------------------------------------------------- interruption

_SCRIPT = r'''
import os, signal, sys, time
from splitscope.features.scanning import scan
from splitscope.features.extract import extract_files


def slow_extract(files, params):
    time.sleep(float(os.environ.get("SCAN_TEST_DELAY", "0.05")))
    return extract_files(files, params)


if __name__ == "__main__":
    # as at a terminal: a test run started in the background inherits an ignored SIGINT
    signal.signal(signal.SIGINT, signal.default_int_handler)
    root, ws, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    scan(root, ws, thumb_size=16, workers=workers, progress=False, extractor=slow_extract,
         batch_size=10)
    print("finished")
'''


def _many_images(root: Path, n: int = 300) -> Path:
    rng = np.random.default_rng(7)
    for i in range(n):
        split = "train" if i % 3 else "test"
        label = "a" if i % 2 else "b"
        folder = root / split / label
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (20, 20), dtype=np.uint8)).save(folder / f"{i}.png")
    return root


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def _alive(pids: list[int]) -> list[int]:
    """The processes of ``pids`` that still run (zombies count as ended)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _interrupt(tmp_path: Path, root: Path, ws: Path, sig: int, workers: int) -> int:
    """Run a scan in a subprocess, send ``sig`` once ≥ 3 batches are committed; return how many
    batches were committed when it died."""
    import signal  # noqa: F401
    import subprocess
    import sys
    import time

    script = tmp_path / "scan_script.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, SCAN_TEST_DELAY="0.1")
    proc = subprocess.Popen([sys.executable, str(script), str(root), str(ws), str(workers)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    shards = None
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            found = list(ws.glob("features/*/shards/*.json"))  # commit records
            if len([p for p in found if not p.name.startswith(".tmp-")]) >= 3:
                shards = found
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.005)
        assert shards is not None, "scan never committed a batch"
        assert proc.poll() is None, "scan finished before it could be interrupted"
        helpers = _descendants(proc.pid)
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, proc.communicate()
    assert not list(ws.glob("features/*/meta.json"))  # it really died mid-run
    if workers > 1 and Path("/proc").is_dir():
        assert len(helpers) >= workers  # the pool's workers (and forkserver) were running
        deadline = time.monotonic() + 15
        while _alive(helpers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(helpers), "worker processes outlived the killed scan"
    return len([p for p in ws.glob("features/*/shards/*.json")
                if not p.name.startswith(".tmp-")])


@pytest.mark.slow
@pytest.mark.parametrize(("signame", "workers"), [("SIGKILL", 1), ("SIGINT", 1),
                                                   ("SIGKILL", 2)])
def test_interrupted_scan_resumes_identically(tmp_path, signame, workers):
    import signal

    root = _many_images(tmp_path / "data")
    before = tree_state(root)
    ws = tmp_path / "ws"
    committed = _interrupt(tmp_path, root, ws, getattr(signal, signame), workers)
    assert committed >= 3
    resumed = run_scan(root, ws, batch_size=10)
    assert resumed.meta["reused"] >= 30  # every committed batch reused
    assert resumed.meta["extracted"] + resumed.meta["reused"] == 300
    assert resumed.meta["extracted"] < 300
    fresh = run_scan(root, tmp_path / "fresh", batch_size=64)
    same_result(resumed, fresh)
    pd.testing.assert_frame_equal(resumed.manifest, fresh.manifest)
    assert not list(ws.rglob(".tmp-*"))  # leftovers of the killed run are gone
    assert tree_state(root) == before


@pytest.mark.parametrize(("stage", "after"), [("write_result", False), ("write_result", True),
                                           ("commit_meta", False), ("commit_meta", True),
                                           ("prune_shards", True)])
def test_failure_at_each_commit_point_resumes_identically(tmp_path, monkeypatch, stage, after):
    """A crash while assembling: before or after each step that commits the new result."""
    from splitscope.features.workspace import FeatureStore

    root = make_release(tmp_path / "data", n_per_class=4)
    ws = tmp_path / "ws"
    run_scan(root, ws)
    # change two files so the next scan assembles a new result
    for name in ("train/a/img_000.png", "test/b/img_003.png"):
        Image.fromarray(np.full((24, 24), 9, np.uint8)).save(root / name)
        os.utime(root / name, ns=(10**18, 10**18))
    original = getattr(FeatureStore, stage)

    def crash(self, *args, **kwargs):
        if after:
            original(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(FeatureStore, stage, crash)
    with pytest.raises(KeyboardInterrupt):
        run_scan(root, ws)
    monkeypatch.setattr(FeatureStore, stage, original)
    resumed = run_scan(root, ws)
    assert resumed.meta["extracted"] == 0  # the two re-extracted files were committed
    fresh = run_scan(root, tmp_path / "fresh")
    same_result(resumed, fresh)
    store = ws / "features" / resumed.params.key()
    assert len(list((store / "results").iterdir())) == 1  # no orphaned generation
    assert not list((store / "shards").iterdir())  # every shard folded into the result


def test_transient_failures_are_retried(tmp_path):
    """A permission failure may vanish without the file changing (chmod keeps size and
    mtime): such entries are not reused from the cache."""
    root = make_release(tmp_path / "data", n_per_class=2)
    ws = tmp_path / "ws"
    target = str((root / "train" / "a" / "img_001.png").resolve())

    def denying(files, params):
        table, thumbs = extract_files(files, params)
        hit = (table["file"] == target).to_numpy(dtype=bool)
        table.loc[hit, "status"] = "permission_denied"
        table.loc[hit, "has_thumb"] = False
        thumbs[hit] = 0
        return table, thumbs

    first = scan(root, ws, thumb_size=16, workers=1, progress=False, extractor=denying)
    assert first.summary()["failures"]["files"]["by_reason"] == {"permission_denied": 1}
    second = run_scan(root, ws)
    assert second.meta["extracted"] == 1 and second.meta["reused"] == 7
    assert second.features["status"].eq("ok").all()
    same_result(second, run_scan(root, tmp_path / "fresh"))


def test_manifest_without_files(tmp_path):
    root = make_release(tmp_path / "data", n_per_class=1)
    manifest = run_scan(root, tmp_path / "ws").manifest.copy()
    manifest["file"] = pd.array([pd.NA] * len(manifest), dtype="string")
    s = run_scan(manifest, tmp_path / "ws2")
    assert len(s.features) == 0 and s.thumbnails.shape == (0, 16, 16)
    summary = s.summary()
    assert summary["rows_without_file"] == 4
    assert summary["failures"]["rows"]["by_reason"] == {"no_file": 4}
    assert (s.rows()["thumb_index"] == -1).all()


@pytest.mark.parametrize("case", ["images", "failures", "all_failed", "no_files", "rescan"])
def test_the_features_a_scan_returns_are_those_read_back(tmp_path, case):
    """A scan that writes its result returns that table without reading it back: it must
    equal, value for value and dtype for dtype, what load_scan reads from the workspace."""
    root = make_release(tmp_path / "data", n_per_class=3)
    folder = root / "train" / "a"
    if case in ("failures", "all_failed"):
        (folder / "zero.png").write_bytes(b"")
        (folder / "cut.png").write_bytes((folder / "img_000.png").read_bytes()[:40])
    if case == "all_failed":
        for p in root.rglob("img_*.png"):
            p.write_bytes(b"not an image")
    inputs = root
    if case == "no_files":
        inputs = run_scan(root, tmp_path / "first").manifest.copy()
        inputs["file"] = pd.array([pd.NA] * len(inputs), dtype="string")
    if case == "rescan":  # the result gathers the previous result's rows and a new shard
        run_scan(root, tmp_path / "ws")
        Image.fromarray(np.zeros((24, 24, 3), np.uint8)).save(folder / "new.png")
    s = run_scan(inputs, tmp_path / "ws")
    assert s.meta["extracted"] > 0 or case == "no_files"
    again = load_scan(tmp_path / "ws")
    pd.testing.assert_frame_equal(s.features, again.features, check_exact=True,
                                  check_index_type=True, check_column_type=True)
    assert list(s.features.dtypes) == list(again.features.dtypes)


@pytest.mark.parametrize(("n", "workers"), [(5840, 2), (2000, 2), (7000, 4), (100, 2), (17, 1),
                                            (1, 2), (0, 2)])
def test_batches_cover_every_file_once_and_taper_at_the_end(n, workers):
    from splitscope.features.scanning import _batch_bounds, _batch_size

    step = _batch_size(n, workers)
    for taper in (False, True):
        bounds = _batch_bounds(n, step, workers, taper)
        covered = [i for a, b in bounds for i in range(a, b)]
        assert covered == list(range(n))  # contiguous, in order, each file once
        sizes = [b - a for a, b in bounds]
        assert all(0 < s <= step for s in sizes)
        if not taper:
            assert sizes[:-1] == [step] * (len(sizes) - 1)
    sizes = [b - a for a, b in _batch_bounds(n, step, workers, True)]
    if n >= 4 * workers * step:  # many full batches: the last ones are small
        assert sizes[0] == step and max(sizes[-workers:]) <= max(8, step // 8)
        assert sizes == sorted(sizes, reverse=True)


class _Recording(SerialExecutor):
    """The serial executor, recording the number of files in each batch it runs."""

    def __init__(self, workers: int):
        self.workers = workers
        self.sizes: list[int] = []

    def map(self, fn, chunks):
        def recorded():
            for chunk_id, payload in chunks:
                self.sizes.append(len(payload[1]))
                yield chunk_id, payload

        return super().map(fn, recorded())


def test_batch_sizes_taper_unless_given(tmp_path):
    root = make_release(tmp_path / "data", n_per_class=10)  # 40 files: batches of 8 at least
    given = _Recording(workers=2)
    run_scan(root, tmp_path / "ws1", batch_size=6, executor=given)
    assert given.sizes == [6] * 6 + [4]
    chosen = _Recording(workers=2)
    s = run_scan(root, tmp_path / "ws2", executor=chosen)
    assert sum(chosen.sizes) == 40 and len(s.features) == 40
    assert chosen.sizes == [8] * 5  # _batch_size(40, 2) = 8 = the smallest batch: no taper
    big = make_release(tmp_path / "big", n_per_class=50)  # 200 files: batches of 25
    tapered = _Recording(workers=1)
    s = run_scan(big, tmp_path / "ws3", executor=tapered)
    assert tapered.sizes == [25] * 7 + [13, 8, 4] and len(s.features) == 200


def test_a_scan_with_one_worker_starts_no_thread(tmp_path, monkeypatch):
    """With one worker the commits, the result's thumbnails, the manifest and the pruning
    run in their turn (one busy thread); with more they overlap in threads. Same result."""
    from splitscope.features import workspace

    started = []
    real = workspace.ThreadPoolExecutor

    def recording(*args, **kwargs):
        started.append(kwargs.get("thread_name_prefix"))
        return real(*args, **kwargs)

    monkeypatch.setattr(workspace, "ThreadPoolExecutor", recording)
    root = make_release(tmp_path / "data")
    one = run_scan(root, tmp_path / "ws1", workers=1)
    assert started == []
    beside = run_scan(root, tmp_path / "ws2", workers=2, executor=SerialExecutor())
    assert set(started) == {"splitscope-commit", "splitscope-result", "splitscope-manifest",
                            "splitscope-prune"}
    same_result(one, beside)
