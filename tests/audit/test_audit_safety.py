"""The audit's share of the safety rules: nothing written inside a release, failed rows listed by
name in lists/, audit.json and the report, and a closed pipe that is not read as a condition."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from splitscope.cli import main
from splitscope.core.options import AuditOptions
from splitscope.core.run import audit


def _release(root: Path) -> Path:
    rng = np.random.default_rng(1)
    for split, n in (("train", 6), ("test", 3)):
        (root / split / "a").mkdir(parents=True)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8)).save(
                root / split / "a" / f"{i}.png")
    (root / "test" / "a" / "empty.png").write_bytes(b"")
    (root / "test" / "a" / "cut.png").write_bytes((root / "train" / "a" / "0.png")
                                                 .read_bytes()[:60])
    return root


def test_out_inside_the_release_is_refused_before_anything_is_created(tmp_path):
    rel = _release(tmp_path / "rel")
    before = sorted(p.relative_to(rel) for p in rel.rglob("*"))
    assert main(["audit", str(rel), "--out", str(rel / "test" / "audit-out"), "--workers",
                 "1"]) == 2
    assert sorted(p.relative_to(rel) for p in rel.rglob("*")) == before


@pytest.mark.slow
def test_failed_rows_are_listed_by_name_everywhere(tmp_path):
    rel = _release(tmp_path / "rel")
    res = audit(rel, out_dir=tmp_path / "o",
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"],
                                                transforms=0))
    failures = pd.read_csv(res.out_dir / "lists" / "failures.csv")
    assert dict(zip(failures["path"], failures["reason"])) == {
        "test/a/cut.png": "truncated", "test/a/empty.png": "zero_byte"}
    doc = json.loads(res.audit_json.read_text())
    assert doc["manifest"]["failures"]["rows"] == 2
    assert {(g["reason"], g["split"], g["rows"]) for g in
            doc["manifest"]["failures"]["by_reason_and_split"]} == {
        ("truncated", "test", 1), ("zero_byte", "test", 1)}
    assert any(a["path"] == "lists/failures.csv" and len(a["sha256"]) == 64
               for a in doc["artifacts"])
    html = res.report.read_text()
    section = html[html.index('data-section="failures"'):]
    assert "2 of 11 rows could not be read" in section and "test/a/empty.png" in section


@pytest.mark.slow
def test_a_closed_pipe_ends_the_audit_quietly_and_not_as_a_held_condition(tmp_path):
    rel = _release(tmp_path / "rel")
    cmd = (f"{sys.executable} -m splitscope.cli audit {rel} --out {tmp_path / 'o'} "
           f"--workers 1 --layers duplicates --transforms 0 | head -1; "
           "echo \"rc=${PIPESTATUS[0]}\"")
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.stdout.strip().splitlines()[-1] == "rc=141", done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr


@pytest.mark.slow
def test_audit_reads_predictions_from_the_sheet_it_is_told(tmp_path):
    rel = _release(tmp_path / "rel")
    rng = np.random.default_rng(0)
    (rel / "test" / "z").mkdir()  # a second class, so that the task has two
    Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8)).save(rel / "test" / "z" /
                                                                        "z0.png")
    rows = sorted(p.relative_to(rel).as_posix() for p in (rel / "test").rglob("*.png"))
    p = rng.dirichlet([1, 1], len(rows))
    workbook = tmp_path / "preds.xlsx"
    with pd.ExcelWriter(workbook) as xl:
        pd.DataFrame({"note": ["scores of run 1"]}).to_excel(xl, sheet_name="about", index=False)
        pd.DataFrame({"path": rows, "a": p[:, 0], "z": p[:, 1]}).to_excel(
            xl, sheet_name="scores", index=False)
    told = audit(rel, predictions=workbook, out_dir=tmp_path / "told",
                 options=AuditOptions.from_flags(workers=1, progress=False, layers=["evaluation"],
                                                 score_kind="probability", sheet="scores"))
    untold = audit(rel, predictions=workbook, out_dir=tmp_path / "untold",
                   options=AuditOptions.from_flags(workers=1, progress=False, layers=["evaluation"],
                                                   score_kind="probability"))

    def scoreability(res):
        return next(r for r in res.document["records"] if r["id"] == "evaluation.scoreability")

    assert scoreability(told)["numerator"] == 1
    assert scoreability(untold)["numerator"] == 0
    assert "sheet" in json.dumps(scoreability(untold)).lower()
    assert told.document["options"]["evaluation"]["sheet"] == "scores"
