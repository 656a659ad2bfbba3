"""The ``duplicates`` CLI verb."""

from __future__ import annotations

import json

import numpy as np
import pytest
from artifacts_check import assert_artifacts_cover
from click.testing import CliRunner

from splitscope.cli import app, main


@pytest.mark.slow
def test_duplicates_table_and_exports(planted_root, tmp_path):
    out = tmp_path / "out"
    runner = CliRunner()
    res = runner.invoke(app, ["duplicates", str(planted_root), "--query", "test",
                              "--reference", "train", "--workspace", str(tmp_path / "ws"),
                              "--workers", "1", "--out", str(out), "--transforms", "2"])
    assert res.exit_code == 0, res.output
    assert "hash_screen" in res.output and "ncc_nearest" in res.output
    assert "NCC sweep" in res.output and "0.995" in res.output
    assert "transform sensitivity" in res.output and "center_crop_80" in res.output
    assert "pairs.parquet" in assert_artifacts_cover(out)


@pytest.mark.slow
def test_duplicates_json_and_fail_on(planted_root, tmp_path):
    runner = CliRunner()
    args = ["duplicates", str(planted_root), "--workspace", str(tmp_path / "ws"),
            "--workers", "1", "--json", "--control-boundary", "split=test&label=A->train"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    assert set(payload) == {"predicates", "sweeps", "transforms", "records"}
    sha = next(p for p in payload["predicates"] if p["predicate"] == "sha256"
               and p["boundary"] == "test → train")
    assert (sha["numerator"], sha["denominator"]) == (3, 18)
    assert sha["control_rate"] is not None
    assert main(["duplicates", str(planted_root), "--workspace", str(tmp_path / "ws"),
                 "--workers", "1", "--fail-on", "nonsense"]) == 2
    assert main(["duplicates", str(planted_root), "--workspace", str(tmp_path / "ws"),
                 "--query", "test"]) == 2


def test_a_bare_predicate_name_is_a_usage_error(planted_root, tmp_path, capsys):
    """--fail-on takes METRIC OP VALUE only: a bare name stops before any scan (exit 2), the
    message showing the grammar."""
    assert main(["duplicates", str(planted_root), "--workspace", str(tmp_path / "ws"),
                 "--workers", "1", "--fail-on", "sha256"]) == 2
    err = capsys.readouterr().err
    assert "expected 'metric op value'" in err and "ncc_rate>0.01" in err
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize("selector", ["val", "split=nothing"])
def test_unknown_population_is_an_input_error(planted_root, tmp_path, selector):
    assert main(["duplicates", str(planted_root), "--workspace", str(tmp_path / "ws"),
                 "--workers", "1", "--query", selector, "--reference", "train"]) == 2


@pytest.mark.slow
def test_duplicates_gates_with_the_audit_grammar(planted_root, tmp_path):
    """--fail-on METRIC OP VALUE as in audit: the value is the worst boundary's."""
    args = ["duplicates", str(planted_root), "--workspace", str(tmp_path / "ws"),
            "--workers", "1", "--json"]
    res = CliRunner().invoke(app, args)
    sha = [p for p in json.loads(res.output)["predicates"] if p["predicate"] == "sha256"
           and p["status"] == "completed"]
    worst = max(p["numerator"] for p in sha)
    assert main(args + ["--fail-on", f"byte_identical_rows>={worst}"]) == 1
    assert main(args + ["--fail-on", f"byte_identical_rows>{worst}"]) == 0
    assert main(args + ["--fail-on", "header_probe_ba>0.5"]) == 2  # not a duplicates metric
    assert main(args + ["--fail-on", "ncc_rate>"]) == 2


def test_duplicates_reads_list_files_like_scan(planted_root, tmp_path):
    rows = [(p.relative_to(planted_root).as_posix(), p.parts[-3], p.parts[-2])
            for p in sorted(planted_root.rglob("*")) if p.is_file()]
    listed = tmp_path / "index.csv"
    listed.write_text("image,subset,dx\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))
    base = ["duplicates", str(listed), "--workspace", str(tmp_path / "ws"), "--workers", "1",
            "--json", "--root", str(planted_root)]
    res = CliRunner().invoke(app, base + ["--path-column", "image", "--split-column", "subset",
                                          "--label-column", "dx"])
    assert res.exit_code == 0, res.output
    sha = next(p for p in json.loads(res.output)["predicates"] if p["predicate"] == "sha256"
               and p["boundary"] == "test → train")
    assert (sha["numerator"], sha["denominator"]) == (3, 18)


def _fast_release(root):
    """Train/test over 256² grey JPEGs (reduced-scale in fast mode at S = 32): test holds a
    byte copy and a quality-75 re-encode of two training files, and two files of its own."""
    from PIL import Image

    rng = np.random.default_rng(11)
    yy, xx = np.mgrid[0:256, 0:256] / 256.0

    def image(k):
        a, b, c = rng.uniform(2, 9, 3)
        z = np.sin(a * xx + k) * np.cos(b * yy - k) + 0.5 * np.sin(c * (xx + yy))
        z = z + rng.normal(0, 0.05, z.shape)
        return Image.fromarray(np.uint8(np.clip(127 + 100 * z, 0, 255))).convert("RGB")

    train = []
    for k in range(8):
        path = root / "train" / "AB"[k % 2] / f"t{k}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        image(k).save(path, quality=90)
        train.append(path)
    (root / "test" / "A").mkdir(parents=True)
    (root / "test" / "B").mkdir(parents=True)
    (root / "test" / "A" / "copy.jpg").write_bytes(train[0].read_bytes())
    with Image.open(train[3]) as im:
        im.save(root / "test" / "B" / "reencoded.jpg", quality=75)
    for k in range(2):
        image(100 + k).save(root / "test" / "AB"[k] / f"own{k}.jpg", quality=90)


@pytest.mark.slow
def test_duplicates_and_audit_take_the_fast_mode(tmp_path):
    """``--mode fast`` reaches the scan of ``duplicates`` and of ``audit``: the copies are found
    in both modes, the features are cached apart under the fast key, and decoded-pixel identity
    is not assessed for reduced-scale decodes."""
    root = tmp_path / "release"
    _fast_release(root)
    found = {}
    for mode in ("exact", "fast"):
        res = CliRunner().invoke(app, [
            "duplicates", str(root), "-q", "test", "-r", "train", "--workers", "1",
            "--thumb-size", "32", "--mode", mode, "--workspace", str(tmp_path / "ws"),
            "--json"])
        assert res.exit_code == 0, res.output
        found[mode] = {p["predicate"]: (p["status"], p["numerator"])
                       for p in json.loads(res.output)["predicates"]
                       if p["boundary"] == "test → train"}
    for mode in ("exact", "fast"):
        assert found[mode]["sha256"] == ("completed", 1)
        assert found[mode]["ncc_nearest"] == ("completed", 2)
    assert found["exact"]["pixel_xxh128"][0] == "completed"
    assert found["fast"]["pixel_xxh128"][0] == "not assessed"
    metas = [json.loads(p.read_text()) for p in (tmp_path / "ws" / "features").glob("*/meta.json")]
    assert sorted(m["params"]["mode"] for m in metas) == ["exact", "fast"]

    out = tmp_path / "audit"
    assert main(["audit", str(root), "--out", str(out), "--workers", "1", "--thumb-size", "32",
                 "--mode", "fast", "--layers", "duplicates", "--json"]) == 0
    doc = json.loads((out / "audit.json").read_text())
    assert doc["options"]["features"]["mode"] == "fast"
    pixel = next(r for r in doc["records"] if r["id"] == "identity.pixel_xxh128.test--train")
    assert pixel["status"] == "not assessed"
