"""The hostile release: every crafted entry gets its features or its listed reason, nothing
hangs, nothing crashes, nothing is silently dropped, and the release is left untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pandas as pd
import pytest
from hostile_corpus import build_folder, build_list, disk_entries, tree_state

from splitscope.features.failures import failures_table
from splitscope.features.scanning import scan
from splitscope.manifest import read_folder
from splitscope.manifest.files import EXCLUDED_LINK_LOOP

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")


@pytest.fixture()
def corpus(tmp_path):
    root, outside = tmp_path / "release", tmp_path / "outside"
    expected = build_folder(root, outside)
    return root, outside, expected


def _status_by_path(result) -> dict[str, str]:
    rows = result.rows()
    return dict(zip(rows["path"], rows["status"].astype("string").fillna("no_file")))


def test_every_entry_gets_its_expected_outcome(corpus, tmp_path):
    root, _, expected = corpus
    before = tree_state(root)
    result = scan(root, tmp_path / "ws", workers=1, progress=False)
    status = _status_by_path(result)
    excluded = {e["path"]: e["reason"] for e in result.manifest.attrs["excluded"]}
    for rel, want in expected.items():
        if isinstance(want, tuple):
            assert excluded.get(rel) == want[1], rel
            assert rel not in status, rel
        else:
            assert status.get(rel) == want, (rel, status.get(rel))
    assert tree_state(root) == before  # the release is never written, nor its links followed


def test_the_rest_of_the_release_gives_what_it_gives_without_the_hostile_entries(corpus,
                                                                               tmp_path):
    """The entries that decode, copied alone into a clean release, get the same features as
    beside the hostile ones."""
    import shutil

    import numpy as np

    root, _, expected = corpus
    clean = tmp_path / "clean"
    for rel, want in expected.items():
        if want == "ok" and (root / rel).is_file() and not (root / rel).is_symlink():
            (clean / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, clean / rel)
    hostile = scan(root, tmp_path / "ws", workers=1, progress=False)
    alone = scan(clean, tmp_path / "ws-clean", workers=1, progress=False)
    a, b = alone.rows().set_index("path"), hostile.rows().set_index("path")
    assert len(a) >= 10 and (a["status"] == "ok").all()
    columns = ["sha256", "phash", "dhash", "width", "height", "status", "label", "split"]
    pd.testing.assert_frame_equal(b.loc[a.index, columns], a[columns], check_dtype=False)
    thumbs_a = np.asarray(alone.thumbnails)[a["thumb_index"].to_numpy()]
    thumbs_b = np.asarray(hostile.thumbnails)[b.loc[a.index, "thumb_index"].to_numpy()]
    assert np.array_equal(thumbs_a, thumbs_b)


def test_every_entry_on_disk_is_a_row_or_excluded_exactly_once(corpus):
    root, _, _ = corpus
    manifest = read_folder(root)
    rows = manifest["path"].tolist()
    excluded = [e["path"] for e in manifest.attrs["excluded"]]
    assert len(set(rows)) == len(rows) and len(set(excluded)) == len(excluded)
    assert not set(rows) & set(excluded)
    assert set(rows) | set(excluded) == disk_entries(root)


def test_root_readme_is_not_counted_as_hidden(corpus, tmp_path):
    root, _, _ = corpus
    summary = scan(root, tmp_path / "ws", workers=1, progress=False).summary()
    by_reason = summary["excluded_by_reason"]
    assert by_reason["hidden file"] == 2  # train/a/.hidden.png and .hidden\xff.png
    assert by_reason["file at the root, outside the folder layout"] == 1  # README.md
    assert sum(by_reason.values()) == summary["excluded"]


def test_links_followed_on_request_with_loop_detection(corpus):
    root, _, _ = corpus
    manifest = read_folder(root, follow_links=True, allow_outside_root=True)
    excluded = {e["path"]: e["reason"] for e in manifest.attrs["excluded"]}
    assert excluded["train/a/loop"] == EXCLUDED_LINK_LOOP
    far = manifest[manifest["path"] == "train/a/linked_dir/far.png"]
    assert len(far) == 1 and far["path_issue"].iloc[0] == "outside_root"
    assert set(manifest["path"]) | set(excluded) >= disk_entries(root) - {"train/a/linked_dir"}


def test_outside_root_rows_are_read_only_when_allowed_and_stay_marked(corpus, tmp_path):
    root, outside, _ = corpus
    shut = scan(root, tmp_path / "ws", workers=1, progress=False)
    rows = shut.rows().set_index("path")
    link = rows.loc["test/b/link_outside.png"]
    assert link["status"] == "outside_root" and pd.isna(link["sha256"])
    assert link["thumb_index"] == -1  # no thumbnail: it can never reach a report's gallery
    assert str(outside / "secret.png") not in set(shut.features["file"])
    assert shut.summary()["outside_root"] == {"unit": "manifest row", "rows": 1,
                                              "denominator": len(rows), "read": False}
    opened = scan(root, tmp_path / "ws", workers=1, progress=False, allow_outside_root=True)
    rows = opened.rows().set_index("path")
    link = rows.loc["test/b/link_outside.png"]
    assert link["status"] == "ok" and link["path_issue"] == "outside_root"
    assert opened.summary()["outside_root"]["read"] is True


def test_list_with_dotdot_devices_and_proc(tmp_path):
    listing, shut, opened = build_list(tmp_path / "lst", tmp_path / "outside")
    for allow, want in ((False, shut), (True, opened)):
        started = time.monotonic()
        result = scan(listing, tmp_path / f"ws-{allow}", workers=1, progress=False,
                      allow_outside_root=allow)
        assert time.monotonic() - started < 60  # /dev/zero and /dev/urandom are never read
        got = result.rows()["status"].astype("string").tolist()
        for i, (g, w) in enumerate(zip(got, want)):
            assert g == w or (w is None and g != "ok"), (i, g, w)
        assert (result.manifest["path_issue"] == "outside_root").sum() == shut.count(
            "outside_root")


def test_failures_table_names_every_failed_row(corpus, tmp_path):
    root, _, expected = corpus
    result = scan(root, tmp_path / "ws", workers=1, progress=False)
    table = failures_table(result)
    assert list(table.columns) == ["row", "path", "split", "label", "reason", "detail"]
    want = {k: v for k, v in expected.items() if isinstance(v, str) and v != "ok"}
    assert dict(zip(table["path"], table["reason"])) == want
    assert table["detail"].notna().all()
    summary = result.summary()
    assert len(table) == summary["failures"]["rows"]["total"]


def _cli(args, **kw):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", "splitscope.cli", *args], check=False,
                          capture_output=True, text=True, env=env, timeout=100, **kw)


def test_cli_scan_finishes_and_accounts_for_every_entry(corpus, tmp_path):
    root, _, expected = corpus
    out = tmp_path / "out"
    started = time.monotonic()
    done = _cli(["scan", str(root), "-w", str(tmp_path / "ws"), "--workers", "2",
                 "--out", str(out), "--json"])
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 90
    summary = json.loads(done.stdout)
    failures = pd.read_parquet(out / "lists" / "failures.parquet")
    excluded = pd.read_parquet(out / "lists" / "excluded.parquet")
    ok_rows = summary["rows"] - summary["failures"]["rows"]["total"]
    assert ok_rows + len(failures) + len(excluded) == len(disk_entries(root))
    assert pd.read_csv(out / "lists" / "failures.csv", keep_default_na=False).shape == \
        failures.shape
    artifacts = json.loads((out / "artifacts.json").read_text())
    assert {a["name"] for a in artifacts["distribution"]} >= {"lists/failures.csv",
                                                              "scan.json"}
    assert sum(v == "ok" for v in expected.values()) == ok_rows


def test_cli_out_inside_the_release_is_refused_before_anything_is_created(corpus, tmp_path):
    root, _, _ = corpus
    before = tree_state(root)
    done = _cli(["scan", str(root), "-w", str(tmp_path / "ws"), "--out", str(root / "out")])
    assert done.returncode == 2 and "inside the release" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (root / "out").exists() and not (tmp_path / "ws").exists()
    assert tree_state(root) == before


def test_formula_cells_are_neutralised_in_csv_and_raw_in_parquet(tmp_path):
    names = ['=HYPERLINK("http://x","y").jpg', "@SUM(1+1).jpg", "+1+2.jpg", "-2+3.jpg",
             "\tTAB.jpg", "plain.jpg", "-0.5"]
    listing = tmp_path / "lst" / "list.csv"
    listing.parent.mkdir()
    pd.DataFrame({"path": names, "label": ["=1+1", "@x", "ok", "-1", "a", "b", "c"]}).to_csv(
        listing, index=False)
    out = tmp_path / "out"
    done = _cli(["scan", str(listing), "-w", str(tmp_path / "ws"), "--out", str(out)])
    assert done.returncode == 0, done.stderr
    raw = pd.read_parquet(out / "lists" / "failures.parquet")
    assert raw["path"].tolist() == names and (raw["reason"] == "missing").all()
    shown = pd.read_csv(out / "lists" / "failures.csv", dtype=str, keep_default_na=False)
    assert shown["path"].tolist() == ["'" + n for n in names[:5]] + ["plain.jpg", "-0.5"]
    assert shown["label"].tolist() == ["'=1+1", "'@x", "ok", "-1", "a", "b", "c"]


def test_unprivileged_cli_scan_of_every_kind_accounts_for_every_entry(corpus, tmp_path,
                                                                      unprivileged):
    """The issue's closing check: a folder release with a FIFO, a hidden folder, a linked
    folder and an unreadable folder, scanned by the CLI where permission bits apply, finishes
    in seconds, and its rows and excluded entries account for every entry it can see."""
    root, _, expected = corpus
    locked = root / "train" / "a" / "locked"
    locked.mkdir()
    (locked / "unseen.png").write_bytes(b"never listed")
    locked.chmod(0o000)
    out = tmp_path / "out"
    started = time.monotonic()
    try:
        done = unprivileged("import sys; from splitscope.cli import main; sys.exit(main())",
                            "scan", str(root), "-w", str(tmp_path / "ws"), "--workers", "1",
                            "--out", str(out), "--json")
        visible = disk_entries(root)  # as root: sees into the locked folder
    finally:
        locked.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 90
    visible = (visible - {"train/a/locked/unseen.png"}) | {"train/a/locked"}
    summary = json.loads(done.stdout)
    failures = pd.read_parquet(out / "lists" / "failures.parquet")
    excluded = pd.read_parquet(out / "lists" / "excluded.parquet")
    assert excluded.set_index("path").loc["train/a/locked", "reason"] == \
        "directory cannot be listed"
    ok_rows = summary["rows"] - len(failures)
    assert ok_rows + len(failures) + len(excluded) == len(visible)
    assert set(failures["path"]) | set(excluded["path"]) <= visible
    assert sum(v == "ok" for v in expected.values()) == ok_rows
