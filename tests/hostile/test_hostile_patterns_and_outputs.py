"""Hostile patterns and outputs: a user regex over crafted names runs in linear time, every CSV
the project writes is guarded against formulas and reads back as written from, URLs and
linked folders outside the root need their own permission, and JSON-LD cannot end a
``<script>``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hostile_corpus import image

from splitscope import cli
from splitscope.core.options import AuditOptions
from splitscope.errors import InputError
from splitscope.manifest import apply_group_regex, read_folder, read_table
from splitscope.manifest.files import EXCLUDED_LINK_OUTSIDE

SRC = Path(__file__).resolve().parents[2] / "src" / "splitscope"
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
EVIL = r"(?P<group>(a+)+)$"  # exponential on a backtracking engine
NAME = "a" * 32 + ".png"  # ~340 s in Python's re; 24 a's already take seconds


def _cli(args, timeout=40):
    return subprocess.run([sys.executable, "-m", "splitscope.cli", *args], check=False,
                          capture_output=True, text=True, env=ENV, timeout=timeout)


def _release(root: Path, names: dict[str, str]) -> Path:
    for i, (split, name) in enumerate(names.items()):
        (root / split / "x").mkdir(parents=True, exist_ok=True)
        image(i, 16, 16).save(root / split / "x" / name)
    return root


# -- user patterns ----------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["groups", pytest.param("audit", marks=pytest.mark.slow)])
def test_a_catastrophic_group_regex_ends_in_seconds_on_the_cli(verb, tmp_path):
    root = _release(tmp_path / "rel", {"train": NAME, "test": "person2_c.png"})

    def run(pattern, tag):
        args = [verb, str(root), "--group-regex", pattern, "--workspace", str(tmp_path / tag)]
        if verb == "audit":
            args += ["--out", str(tmp_path / f"out-{tag}"), "--layers", "groups",
                     "--workers", "1"]
        started = time.monotonic()
        done = _cli(args)
        return done, time.monotonic() - started

    _, baseline = run(r"person(?P<group>\d+)_", "plain")
    done, took = run(EVIL, "evil")
    assert took < baseline + 5, f"the pattern cost {took - baseline:.1f} s"
    if done.returncode == 2:
        assert EVIL in done.stderr
    else:  # linear-time and correct: no name ends in a's, so the regex matches none
        assert done.returncode == 0, done.stderr
        assert "matched none" in done.stdout


def test_user_patterns_run_linear_time_with_pythons_meaning():
    names = pd.DataFrame({"basename": [NAME, "a" * 32, "person12_bacteria_3.jpeg",
                                       "ünïcödé_7.png", "张三_001.png", "٣4_x.png",
                                       "new\nline.png", pd.NA]})
    started = time.monotonic()
    got = apply_group_regex(names, EVIL)["group"]
    assert time.monotonic() - started < 1
    assert got.isna().tolist() == [True, False, True, True, True, True, True, True]
    assert got.iloc[1] == "a" * 32
    for pattern in (r"person(?P<group>\d+)_", r"(?P<group>\w+)_(?P<frame>\d+)",
                    r"^(?P<group>\D+?)\s*[_\n]", r"(?P<group>[^\d_]{2,})", r"(?i)(?P<group>N\w*)",
                    r"(?P<group>.+?)\.png\Z", r"(?P<group>x{,3})e"):
        out = apply_group_regex(names, pattern)
        want = names["basename"].astype("string").str.extract(pattern)
        assert out["group"].tolist() == want["group"].tolist(), pattern
        if "frame" in want:
            assert out["frame"].tolist() == pd.to_numeric(want["frame"]).astype(
                "Int64").tolist()


@pytest.mark.parametrize("pattern", [r"(?P<group>a)\1", r"(?P<group>\w+)(?=_)",
                                     r"(?<=p)(?P<group>\d+)", r"(?P<group>(?>a+))b"])
def test_constructs_without_a_linear_time_form_are_refused_by_name(pattern):
    names = pd.DataFrame({"basename": ["aab.png", "p1_x.png"]})
    with pytest.raises(InputError, match=re.escape(repr(pattern))) as err:
        apply_group_regex(names, pattern)
    assert "RE2" in str(err.value) and "rewrite" in str(err.value)


def test_a_refused_pattern_exits_2_naming_it(tmp_path):
    root = _release(tmp_path / "rel", {"train": "p1_a.png", "test": "p1_b.png"})
    done = _cli(["groups", str(root), "--group-regex", r"(?P<group>p\d)(?=_)",
                 "--workspace", str(tmp_path / "ws")])
    assert done.returncode == 2
    assert "(?P<group>p\\\\d)(?=_)" in done.stderr and "RE2" in done.stderr


# -- one guarded CSV writer --------------------------------------------------------------------


def test_no_csv_is_written_outside_the_one_writer():
    writer = SRC / "records" / "exports.py"
    found = [f"{p.relative_to(SRC)}:{n}" for p in sorted(SRC.rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if ".to_csv(" in line and p != writer]
    assert found == [], "write CSVs through splitscope.records.exports.write_csv"
    assert writer.read_text(encoding="utf-8").count(".to_csv(") == 1


CELLS = ["=1+2", "'=1+2", "''@x", "-0.5", "+3", "-x.png", "'quote.png", "plain", "\tTAB", "'",
         "@SUM(1)", None]


def test_the_guard_reads_back_exactly_through_every_reader(tmp_path):
    from splitscope.evaluation.readers import read_any_table
    from splitscope.records.exports import read_csv, write_csv

    table = pd.DataFrame({"path": CELLS, "label": CELLS[::-1],
                          "p": np.linspace(0, 1, len(CELLS))})
    path = write_csv(table, tmp_path / "t.csv")
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)["path"].tolist()
    assert raw[:3] == ["'=1+2", "''=1+2", "'''@x"] and raw[3:5] == ["-0.5", "+3"]
    assert raw[6] == "'quote.png" and raw[9] == "'"
    want = list(CELLS)
    for got in (read_csv(path, dtype=str, keep_default_na=False, na_values=[""]),
                read_table(path), read_any_table(path, key_names=("path",), text=True)[0]):
        assert [None if pd.isna(v) else v for v in got["path"]] == want
        assert [None if pd.isna(v) else v for v in got["label"]] == want[::-1]


@pytest.mark.slow
def test_experiment_outputs_are_guarded_and_read_back(tmp_path):
    pytest.importorskip("torch", reason="the experiments need the [torch] extra")
    from splitscope.experiments.layer import audit_experiment
    from splitscope.experiments.protocol import Protocol
    from splitscope.experiments.retraining import train_experiment
    from splitscope.records.exports import read_csv

    root = tmp_path / "rel"
    root.mkdir()
    labels, rows, seed = {"a": "=1+2", "b": "@b"}, [], 0
    for split, n in (("train", 12), ("test", 5)):
        for k, label in labels.items():
            for i in range(n):
                name = f"-{split}_{k}_{i:02d}.png"  # names start like a formula too
                image(seed := seed + 1, 48, 48, mode="L").save(root / name)
                rows.append({"path": name, "split": split, "label": label})
    for k, label in labels.items():  # a test copy of a training image per class
        shutil.copyfile(root / f"-train_{k}_00.png", root / f"-leak_{k}.png")
        rows.append({"path": f"-leak_{k}.png", "split": "test", "label": label})
    pd.DataFrame(rows).to_csv(root / "list.csv", index=False)
    res = train_experiment(root / "list.csv", tmp_path / "out", policies=("finetune",),
                           seeds=(0,), pools=("Full",), workers=1, device="cpu",
                           protocol=Protocol(image_size=48, epochs=1, batch_size=16),
                           workspace=tmp_path / "ws")
    out = res.out_dir
    truth = pd.read_csv(out / "truth.csv", dtype=str, keep_default_na=False)
    assert set(truth["label"]) == {"'=1+2", "'@b"}
    assert truth["path"].str.startswith("'-").all()
    excluded = pd.read_csv(out / "views" / "deduplicated_exclude.csv", dtype=str)
    assert sorted(excluded["path"]) == ["'-leak_a.png", "'-leak_b.png"]
    back = read_csv(out / "truth.csv", dtype=str, keep_default_na=False)
    assert set(back["label"]) == set(labels.values()) and back["path"].str.startswith("-").all()
    # splitscope read both back as written from: the classes, and the leaks left out
    run = json.loads(next((out / "runs").glob("*/run.json")).read_text())
    views = run["metrics"]
    assert set(views["official"]["class_support"]) == set(labels.values())
    assert views["deduplicated"]["rows"] == views["official"]["rows"] - 2
    assert audit_experiment(out, n_boot=20).records


# -- URLs, linked folders, JSON-LD --------------------------------------------------------------


def test_urls_need_allow_urls_and_are_listed_without_it(tmp_path):
    folder = tmp_path / "lst"
    folder.mkdir()
    image(1).save(folder / "local.png")
    url = "http://127.0.0.1:9/remote.png"
    pd.DataFrame({"path": ["local.png", url], "split": ["train", "test"],
                  "label": ["a", "a"]}).to_csv(folder / "list.csv", index=False)
    out = tmp_path / "out"
    done = _cli(["scan", str(folder / "list.csv"), "--workspace", str(tmp_path / "ws"),
                 "--allow-outside-root", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    failures = pd.read_csv(out / "lists" / "failures.csv", dtype=str)
    assert failures["path"].tolist() == [url] and failures["reason"].tolist() == ["url"]
    assert "--allow-urls" in failures["detail"].iloc[0]
    assert "--allow-urls" in done.stdout


def test_allowed_urls_are_read(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    from PIL import Image

    from splitscope.features.scanning import scan

    bucket = f"memory://hostile-{os.getpid()}"
    fs = fsspec.filesystem("memory")
    with fs.open(f"{bucket}/x.png", "wb") as fh:
        Image.fromarray(np.full((8, 8), 9, np.uint8)).save(fh, format="PNG")
    listing = tmp_path / "list.csv"
    pd.DataFrame({"path": [f"{bucket}/x.png"], "label": ["a"]}).to_csv(listing, index=False)
    try:
        shut = scan(listing, tmp_path / "ws", workers=1, allow_outside_root=True)
        assert shut.rows()["status"].tolist() == ["url"]
        assert shut.summary()["urls"] == {"unit": "manifest row", "rows": 1, "denominator": 1,
                                          "read": False}
        opened = scan(listing, tmp_path / "ws2", workers=1, allow_urls=True)
        assert opened.rows()["status"].tolist() == ["ok"]
    finally:
        fs.rm(bucket.removeprefix("memory://"), recursive=True)


def test_help_names_allow_urls_apart_from_allow_outside_root():
    for verb in ("audit", "scan", "duplicates"):
        shown = CliRunner().invoke(cli.app, [verb, "--help"], terminal_width=1000,
                                   max_content_width=1000).output
        text = " ".join(shown.split())
        outside = re.search(r"--allow-outside-root (.*?) --allow-urls Read listed URLs", text)
        assert outside is not None, text
        assert "URLs need --allow-urls" in outside.group(1)


def test_followed_links_stay_inside_the_root(tmp_path):
    root = _release(tmp_path / "rel", {"train": "a.png", "test": "b.png"})
    outside = tmp_path / "elsewhere"
    for i in range(30):
        (outside / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (outside / f"d{i % 3}" / f"secret{i}.txt").write_text("x")
    os.symlink(outside, root / "train" / "x" / "etc")
    os.symlink(root / "test", root / "train" / "x" / "inside")  # a link within the root
    manifest = read_folder(root, follow_links=True)
    assert not manifest["path"].str.contains("secret").any()
    excluded = {e["path"]: e["reason"] for e in manifest.attrs["excluded"]}
    assert excluded == {"train/x/etc": EXCLUDED_LINK_OUTSIDE}
    assert "outside the release root" in EXCLUDED_LINK_OUTSIDE
    assert "train/x/inside/x/b.png" in set(manifest["path"])
    allowed = read_folder(root, follow_links=True, allow_outside_root=True)
    far = allowed[allowed["path"].str.startswith("train/x/etc/")]
    assert len(far) == 30 and (far["path_issue"] == "outside_root").all()


def test_croissant_json_cannot_end_a_script(tmp_path):
    from splitscope.core.run import audit

    label = "</script><script>alert(1)</script>"
    folder = tmp_path / "rel"
    folder.mkdir()
    rows = []
    for i in range(6):
        image(i, 16, 16).save(folder / f"{i}.png")
        rows.append({"path": f"{i}.png", "split": "train" if i < 4 else "test",
                     "label": label if i % 2 else "<!--x"})
    pd.DataFrame(rows).to_csv(folder / "list.csv", index=False)
    out = tmp_path / "out"
    audit(folder / "list.csv", out_dir=out,
          options=AuditOptions.from_flags(workspace=tmp_path / "ws", workers=1, progress=False,
                                          layers=["groups"], croissant=True))
    text = (out / "croissant.json").read_text(encoding="utf-8")
    assert "</" not in text and "<!--" not in text
    collection = json.loads(text)["rai:dataCollection"]
    assert f"{label} 3" in collection and "<!--x 3" in collection
