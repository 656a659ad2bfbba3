"""The per-row issue table and the notebook view of an audit: one row per manifest row, flags
that agree with the records' counts, not-assessed rows left ``<NA>``, and the result object's
accessors and HTML."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from splitscope.core.options import AuditOptions
from splitscope.core.run import AuditResult, audit
from splitscope.errors import InputError

#: record predicate name → issue-table column (the census predicates of the duplicates layer)
CENSUS = ("sha256", "pixel_xxh128", "ncc_nearest", "ncc_first_candidate", "ncc_any_candidate",
          "hash_screen", "hash_joint", "hash_sum", "hash_exact_phash", "basename")


@pytest.fixture()
def demo(small_demo):
    return small_demo


def _agree(result: AuditResult) -> int:
    """Every census record's numerator equals the number of its query rows flagged in the
    issue table; returns how many records were compared."""
    issues = result.issues.set_index("row")
    compared = 0
    for r in result.document["records"]:
        name = (r.get("predicate") or {}).get("name")
        b = r.get("boundary") or {}
        if r["status"] not in ("completed", "partial") or name not in CENSUS or "query" not in b \
                or r["id"].split(".")[1] != name:  # the census record of that predicate
            continue
        q = b["query"]["name"]
        rows = issues[issues["split"] == q]
        assert len(rows) == r["denominator"], r["id"]
        assert int(rows[name].fillna(False).sum()) == r["numerator"], r["id"]
        if r["status"] == "partial":  # rows not assessed are <NA>, not "no"
            assert f"{int(rows[name].isna().sum())} query row(s) not assessed" == r["reason"]
        compared += 1
    return compared


@pytest.mark.slow
def test_one_row_per_manifest_row_in_manifest_order(demo):
    issues = demo.issues
    manifest = pd.read_csv(demo.out_dir / "lists" / "manifest.csv")
    assert len(issues) == len(manifest) == demo.document["manifest"]["rows"]
    assert issues["row"].tolist() == manifest["row"].tolist()
    assert issues["path"].tolist() == manifest["path"].tolist()
    assert (demo.out_dir / "lists" / "issues.csv").is_file()


def test_flags_agree_with_the_records(demo):
    assert _agree(demo) >= 8
    issues = demo.issues
    recs = {r["id"]: r for r in demo.document["records"]}
    test = issues["split"] == "test"
    dedup = recs["near_duplicate.dedup_split.test--train"]  # numerator: rows kept
    removed = int(issues.loc[test, "dedup_removed"].fillna(False).sum())
    assert removed == dedup["denominator"] - dedup["numerator"] > 0
    conflict = recs["identity.label_conflict_sha256.test--train"]
    assert int(issues.loc[test, "label_conflict"].sum()) >= conflict["numerator"] > 0
    group = recs["group.overlap[test_train]"]
    assert int(issues.loc[test, "group_shared"].fillna(False).sum()) == group["numerator"]


def test_quality_flags_agree_with_the_quality_records(demo):
    issues = demo.issues
    from splitscope.provenance.quality import FLAGS

    names = {f"quality.{f.name}" for f in FLAGS}
    quality = [r for r in demo.document["records"] if r["id"] in names
               and r["status"] in ("completed", "partial")]
    assert quality
    for r in quality:
        col = "quality_" + r["id"].split(".")[1]
        assert int(issues[col].fillna(False).sum()) == r["numerator"], r["id"]
        assert int(issues[col].notna().sum()) == r["denominator"], r["id"]


def test_rows_not_queried_are_not_assessed_and_scores_are_present(demo):
    issues = demo.issues
    train = issues[issues["split"] == "train"]
    assert train["ncc_nearest"].isna().all() and train["queried_on"].isna().all()
    test = issues[issues["split"] == "test"]
    assert test["ncc_nearest"].notna().all() and (test["queried_on"] == "test → train").all()
    hit = test[test["ncc_nearest"].astype(bool)]
    assert (hit["ncc_best_rho"] >= 0.98).all()
    assert (test.loc[~test["ncc_nearest"].astype(bool), "ncc_best_rho"] < 0.98).all()
    byte = test[test["sha256"].astype(bool)]
    assert (byte["byte_copies"] >= 1).all() and (byte["d_p_min"] == 0).all()


def _release(root: Path) -> Path:
    """Two splits × two classes of noise PNGs, two test files byte copies of train files."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("test", 5)):
        for label in ("a", "b"):
            d = root / split / label
            d.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).resize(
                    (48, 48), Image.BICUBIC).save(d / f"{split}_{i}.png")
    for label in ("a", "b"):
        (root / "test" / label / "copy.png").write_bytes(
            (root / "train" / label / "train_0.png").read_bytes())
    return root


@pytest.mark.slow
def test_unreadable_rows_carry_their_reason(tmp_path):
    root = _release(tmp_path / "rel")
    (root / "test" / "a" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    (root / "test" / "a" / "empty.png").write_bytes(b"")
    res = audit(root, out_dir=tmp_path / "out",
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"]))
    issues = res.issues.set_index("path")
    assert issues.loc["test/a/empty.png", "failure_reason"] == "zero_byte"
    assert not issues.loc["test/a/broken.png", "readable"]
    assert int((~issues["readable"]).sum()) == res.document["manifest"]["failures"]["rows"]
    assert _agree(res) >= 4


def test_the_result_object_in_a_notebook(demo):
    again = AuditResult.load(demo.out_dir)
    assert again.document == json.loads(demo.audit_json.read_text())
    recs = again.records
    assert len(recs) == len(demo.document["records"])
    assert {"id", "numerator", "denominator", "estimate", "low", "high"} <= set(recs.columns)
    s = again.summary
    assert s["verdicts"] == demo.document["summary"]["verdicts"]
    html = again._repr_html_()
    assert "<script" not in html and len(html) < 60_000
    first = s["verdicts"][0]
    assert first.split(":")[0] in html
    assert "Score card" in html and "result.issues" in html
    with pytest.raises(InputError):
        AuditResult.load(demo.out_dir / "lists")


@pytest.mark.slow
def test_the_example_notebook_runs(tmp_path, monkeypatch):
    """Every code cell of docs/notebook_example.ipynb, in order, in one namespace (as a
    kernel runs them), from a scratch folder."""
    notebook = Path(__file__).resolve().parents[2] / "docs" / "notebook_example.ipynb"
    nb = json.loads(notebook.read_text())
    assert nb["nbformat"] == 4
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "notebook"}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            exec(compile(source, str(notebook), "exec"), namespace)  # noqa: S102
    result = namespace["result"]
    assert isinstance(result, AuditResult)
    assert result.out_dir.resolve() == (tmp_path / "splitscope-notebook" / "audit").resolve()
    flagged = int(result.issues["ncc_nearest"].fillna(False).astype(bool).sum())
    assert len(namespace["leaked"]) == flagged > 0


@pytest.mark.realdata
@pytest.mark.slow
def test_kermany_issue_table(kermany_audit):
    res = AuditResult.load(kermany_audit)  # the session's audit (duplicates, groups, persons)
    issues = res.issues
    assert len(issues) == res.document["manifest"]["rows"] == 5840
    assert _agree(res) >= 8
