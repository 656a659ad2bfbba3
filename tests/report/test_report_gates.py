"""A gate never passes on nothing: a --fail-on metric the run did not measure fails the audit
(exit 5) unless --allow-unmeasured; a release of which no file could be read is an input error
(exit 2) that says why; one of which most files could not be read says so in its first line;
a few unreadable files change nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from splitscope.cli import main
from splitscope.core.options import AuditOptions
from splitscope.core.run import AuditResult, audit
from splitscope.records.schema import validate

UNMEASURED = "pixel_identical_rate>0"  # a duplicates metric, with --layers groups


def _image(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (16, 16), dtype=np.uint8)).save(path)


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """train/{a,b}/ 4 images each, test/{a,b}/ 2 each, one of them a byte copy of train."""
    root = tmp_path_factory.mktemp("rel") / "release"
    seed = 0
    for split, n in (("train", 4), ("test", 2)):
        for label in ("a", "b"):
            for i in range(n):
                seed += 1
                _image(root / split / label / f"{split}_{i}.png", seed)
    (root / "test" / "a" / "copy.png").write_bytes((root / "train" / "a" / "train_0.png")
                                                   .read_bytes())
    return root


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ws") / "workspace"


def _audit(capsys, release, out: Path, workspace, *args: str) -> tuple[int, str, str]:
    code = main(["audit", str(release), "--out", str(out), "--workers", "1", "--workspace",
                 str(workspace), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _fail_on_line(out: str, condition: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"--fail-on {condition}:"))


# -- exit 5: a --fail-on metric not measured ------------------------------------------------


def test_an_unmeasured_gate_fails_with_exit_5_and_says_why(release, workspace, tmp_path,
                                                            capsys):
    code, out, _ = _audit(capsys, release, tmp_path / "o", workspace, "--layers", "groups",
                          "--fail-on", UNMEASURED)
    assert code == 5, out
    assert _fail_on_line(out, UNMEASURED) == (
        f"--fail-on {UNMEASURED}: not measured → the gate fails (exit 5): layer duplicates "
        "not assessed: not requested (layers= option)")
    doc = json.loads((tmp_path / "o" / "audit.json").read_text())
    validate(doc)
    (cond,) = doc["fail_on"]
    assert (cond["value"], cond["held"], cond["outcome"]) == (None, False, "not measured")
    assert cond["reason"] == "layer duplicates not assessed: not requested (layers= option)"
    assert doc["run"]["exit_code"] == 5 and doc["options"]["run"]["allow_unmeasured"] is False
    assert _fail_on_line("\n".join(doc["summary"]["lines"]), UNMEASURED) \
        == _fail_on_line(out, UNMEASURED)
    assert AuditResult.load(tmp_path / "o").exit_code == 5


def test_allow_unmeasured_reports_the_gate_and_passes(release, workspace, tmp_path, capsys):
    code, out, _ = _audit(capsys, release, tmp_path / "o", workspace, "--layers", "groups",
                          "--fail-on", UNMEASURED, "--allow-unmeasured")
    assert code == 0, out
    assert _fail_on_line(out, UNMEASURED) == (
        f"--fail-on {UNMEASURED}: not measured → the gate does not fail (--allow-unmeasured): "
        "layer duplicates not assessed: not requested (layers= option)")
    doc = json.loads((tmp_path / "o" / "audit.json").read_text())
    assert doc["fail_on"][0]["outcome"] == "not measured"
    assert doc["options"]["run"]["allow_unmeasured"] is True and doc["run"]["exit_code"] == 0
    assert "--allow-unmeasured" in doc["run"]["command"]


@pytest.mark.slow
def test_a_held_condition_exits_1_beside_an_unmeasured_one(release, workspace, tmp_path,
                                                            capsys):
    # groups is not applicable here (no group key): group_overlap_rate is not measured
    code, out, _ = _audit(capsys, release, tmp_path / "o", workspace, "--layers",
                          "duplicates,groups", "--fail-on", "byte_identical_rate>0",
                          "--fail-on", "group_overlap_rate>0", "--json")
    assert code == 1
    payload = json.loads(out)
    assert [c["outcome"] for c in payload["fail_on"]] == ["held", "not measured"]
    assert payload["fail_on"][1]["reason"].startswith("layer groups not applicable: no group")
    assert payload["exit_code"] == 1


def test_the_python_api_returns_exit_code_5(release, workspace, tmp_path):
    result = audit(release, AuditOptions.from_flags(workers=1, progress=False, layers=["groups"],
                                                    workspace=str(workspace)),
                   out_dir=tmp_path / "o", fail_on=["ncc_rate>0.01", "layers_not_assessed>10"])
    assert result.exit_code == 5
    ncc, layers = result.document["fail_on"]
    assert ncc["outcome"] == "not measured" and layers["outcome"] == "not held"


# -- exit 2: nothing readable; the first line when most files are not --------------------------


def _list_release(root: Path, n: int = 120, present: int = 0) -> Path:
    """``root/lists/release.csv`` naming ``n`` files ``images/<split>/img_<i>.png`` relative to
    ``root`` (not to the list's folder), of which the first ``present`` of each split exist."""
    rows = []
    for i in range(n):
        split = "train" if i < 2 * n // 3 else "test"
        rows.append({"path": f"images/{split}/img_{i:03d}.png", "split": split,
                     "label": "ab"[i % 2]})
    per_split: dict[str, int] = {}
    for i, row in enumerate(rows):
        per_split[row["split"]] = per_split.get(row["split"], 0) + 1
        if per_split[row["split"]] <= present:
            _image(root / "lists" / row["path"], i)  # where the list's folder resolves them
    (root / "lists").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(root / "lists" / "release.csv", index=False)
    for i, row in enumerate(rows):  # the files themselves, relative to root
        _image(root / row["path"], i)
    return root / "lists" / "release.csv"


@pytest.fixture(scope="module")
def missing_list(tmp_path_factory) -> Path:
    return _list_release(tmp_path_factory.mktemp("lst") / "release")


@pytest.mark.parametrize("gate", [[], ["--fail-on", "pixel_identical_rate>0"]])
@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_a_list_whose_files_are_all_missing_exits_2_and_says_pass_root(missing_list, tmp_path,
                                                                        capsys, gate, as_json):
    out = tmp_path / "o"
    code = main(["audit", str(missing_list), "--out", str(out), "--workers", "1", *gate,
                 *as_json])
    captured = capsys.readouterr()
    assert code == 2
    said = [line for line in captured.err.splitlines()
            if not line.startswith("splitscope audit [")]  # the progress lines
    first = said[0]  # the first line that is not progress
    assert first.startswith("error: 120 of 120 listed files could not be read (120 missing): "
                            "relative paths resolve against the list's folder "
                            f"({missing_list.parent}); pass --root DIRECTORY")
    assert "images/train/img_000.png" in first
    assert captured.out == ""  # no summary, no "clean" verdict
    assert not (out / "audit.json").exists()


def test_nothing_readable_is_an_input_error_in_the_python_api(missing_list, tmp_path):
    from splitscope.errors import InputError

    with pytest.raises(InputError, match="120 of 120 listed files could not be read"):
        audit(missing_list, AuditOptions.from_flags(workers=1, progress=False,
                                                    layers=["groups"]),
              out_dir=tmp_path / "o")


@pytest.mark.slow
def test_the_root_the_message_asks_for_reads_the_list(missing_list, tmp_path, capsys):
    code = main(["audit", str(missing_list), "--out", str(tmp_path / "o"), "--workers", "1",
                 "--root", str(missing_list.parent.parent), "--layers", "groups", "--json"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    assert not any("could not be read" in line for line in doc["verdict"])


def test_most_files_missing_is_the_first_line(tmp_path, capsys):
    listed = _list_release(tmp_path / "release", n=12, present=2)  # 4 of 12 in the list's folder
    code = main(["audit", str(listed), "--out", str(tmp_path / "o"), "--workers", "1",
                 "--layers", "groups"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0] == (
        "WARNING: 8 of 12 listed files could not be read (8 missing): relative paths resolve "
        f"against the list's folder ({listed.parent}); pass --root DIRECTORY, the folder they "
        "are relative to; each file with its reason in lists/failures.csv.")
    doc = json.loads((tmp_path / "o" / "audit.json").read_text())
    assert doc["summary"]["verdict"][0] == out.splitlines()[0]
    assert doc["manifest"]["lists"] == [{"path": str(listed), "root": str(listed.parent),
                                         "root_given": False, "relative_paths": 12}]
    validate(doc)


def test_a_few_unreadable_files_change_nothing(release, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in release.rglob("*.png"):
        target = broken / item.relative_to(release)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(item.read_bytes())
    (broken / "train" / "a" / "train_1.png").write_bytes(b"not an image")
    options = AuditOptions.from_flags(workers=1, progress=False, layers=["groups"])
    clean = audit(release, options, out_dir=tmp_path / "clean")
    one_bad = audit(broken, options, out_dir=tmp_path / "bad")
    assert one_bad.document["manifest"]["scan"]["failures"]["files"]["total"] == 1
    assert one_bad.exit_code == clean.exit_code == 0
    for part in ("verdict", "verdicts"):
        assert one_bad.document["summary"][part] == clean.document["summary"][part]
    assert one_bad.document["manifest"]["lists"] == []


def _section(by_reason: dict[str, int], files: int, lists=()) -> dict:
    failed = sum(by_reason.values())
    return {"rows": files, "scan": {"features_ok": files - failed, "failures": {"files": {
        "total": failed, "denominator": files, "by_reason": by_reason}}},
        "failures": {"listed": [{"path": "a.png", "reason": "missing",
                                 "detail": "no such file: /r/a.png"}]},
        "lists": list(lists)}


LIST = {"path": "/r/l/list.csv", "root": "/r/l", "root_given": False, "relative_paths": 9}


@pytest.mark.parametrize("by_reason, files, lists, says", [
    ({"missing": 5}, 10, [LIST], None),  # half is not more than half
    ({"missing": 6}, 10, [LIST], ("6 of 10 listed files could not be read (6 missing): "
                                  "relative paths resolve against the list's folder (/r/l); "
                                  "pass --root")),
    ({"missing": 6}, 10, [{**LIST, "root_given": True}],
     "relative paths resolve against --root (/r/l): is it the folder they are relative to?"),
    ({"missing": 6}, 10, [{**LIST, "relative_paths": 0}],
     ("6 of 10 listed files could not be read (6 missing): the files are not where the "
      "release")),
    ({"outside_root": 7, "missing": 1}, 10, [],
     ("8 of 10 files could not be read (7 outside root, 1 missing): their paths lie "
      "outside")),
    ({"url": 9}, 10, [LIST], "they are URLs: --allow-urls reads them"),
    ({"zero_byte": 9}, 10, [], "they are empty (0 bytes)"),
    ({"unsupported": 4, "truncated": 3}, 10, [],
     ("7 of 10 files could not be read (4 unsupported, 3 truncated): the files are not "
      "images")),
])
def test_the_unread_line_counts_by_reason_and_names_the_likely_cause(by_reason, files, lists,
                                                                      says):
    from splitscope.core.readable import nothing_read, unread_files

    line = unread_files(_section(by_reason, files, lists), listed_in="lists/failures.csv")
    if says is None:
        assert line is None
    else:
        assert says in line and line.endswith("each file with its reason in lists/failures.csv.")
    assert nothing_read(_section(by_reason, files, lists)) is None  # some file was read
    everything = _section({"missing": files}, files, lists)
    assert nothing_read(everything).endswith(
        "the first, a.png: no such file: /r/a.png. (to audit only what the paths, labels and "
        "groups say, pass --paths-only)")
