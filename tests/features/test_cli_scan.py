"""The ``scan`` verb: summary on the terminal, the same result as JSON, exit codes."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from splitscope.cli import main
from splitscope.features.scanning import load_scan


def _release(root):
    rng = np.random.default_rng(3)
    for split, label, n in (("train", "NORMAL", 3), ("train", "PNEUMONIA", 4),
                            ("test", "NORMAL", 2), ("test", "PNEUMONIA", 1)):
        folder = root / split / label
        folder.mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (12, 12), dtype=np.uint8)).save(
                folder / f"person{i}_x{i}.png")
    (root / "test" / "NORMAL" / "bad.png").write_bytes(b"garbage")
    return root


def test_scan_prints_summary(tmp_path, capsys):
    root = _release(tmp_path / "data")
    ws = tmp_path / "ws"
    code = main(["scan", str(root), "--workspace", str(ws), "--thumb-size", "16",
                 "--workers", "1", "--group-regex", r"person(?P<group>\d+)_"])
    out = capsys.readouterr().out
    assert code == 0
    assert "11 rows, 11 unique files, 1 failed file (1 row); 11 extracted, 0 reused" in out
    assert "PNEUMONIA" in out and "failures by reason" in out
    assert "10 of 11 rows carry a group" in out
    scan = load_scan(ws)
    assert len(scan.manifest) == 11 and scan.thumbnails.shape == (10, 16, 16)
    assert "reused from cache" in out


def test_scan_json_is_stable_and_second_run_reuses(tmp_path, capsys):
    root = _release(tmp_path / "data")
    ws = tmp_path / "ws"
    args = ["scan", str(root), "--workspace", str(ws), "--thumb-size", "16", "--workers", "1",
            "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert first["rows"] == 11 and first["unique_files"] == 11
    assert first["counts"] == {"test": {"NORMAL": 3, "PNEUMONIA": 1},
                               "train": {"NORMAL": 3, "PNEUMONIA": 4}}
    assert first["failures"]["files"]["total"] == 1
    assert first["failures"]["rows"]["by_split"] == {"test": {
        next(iter(first["failures"]["rows"]["by_reason"])): 1}}
    assert (first["extracted"], first["reused"]) == (11, 0)
    assert (second["extracted"], second["reused"]) == (0, 11)
    assert set(first) == set(second)


def test_scan_list_with_columns(tmp_path, capsys):
    root = _release(tmp_path / "data")
    listing = tmp_path / "list.csv"
    rel = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.png"))
    listing.write_text("img,cls,part\n" + "".join(
        f"{p},{p.split('/')[1]},{p.split('/')[0]}\n" for p in rel))
    code = main(["scan", str(listing), "--root", str(root), "--path-column", "img",
                 "--label-column", "cls", "--split-column", "part", "--workspace",
                 str(tmp_path / "ws"), "--thumb-size", "16", "--workers", "1", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["train"] == {"NORMAL": 3, "PNEUMONIA": 4}


def test_scan_input_errors_exit_2(tmp_path, capsys):
    assert main(["scan", str(tmp_path / "absent"), "--workspace", str(tmp_path / "ws")]) == 2
    root = _release(tmp_path / "data")
    assert main(["scan", str(root), "--workspace", str(root / "ws")]) == 2
    assert "never writes into a dataset" in capsys.readouterr().err
    assert main(["scan", str(root), "--workspace", str(tmp_path / "w"), "--workers", "0"]) == 2
    assert main(["scan", str(root), "--workspace", str(tmp_path / "w"),
                 "--group-regex", "(unclosed"]) == 2
