"""A layer declares its own reading: the toy layer (tests/audit/toy_layer.py, its only module)
adds a --fail-on metric, a verdict line and an issue-table column without any edit to
splitscope.core."""

from __future__ import annotations

from pathlib import Path

import pytest
from audit_helpers import tiny_release
from toy_layer import LargeFilesLayer, large_rows

from splitscope.core.conditions import parse_condition
from splitscope.core.options import AuditOptions
from splitscope.core.protocol import register, unregister
from splitscope.core.run import audit
from splitscope.errors import InputError


def _release(root: Path) -> Path:
    return tiny_release(root, seed=1, sizes=(("train", 6), ("test", 4)), side=None)


@pytest.fixture
def toy():
    layer = register(LargeFilesLayer())
    yield layer
    unregister(layer.name)


def test_a_layer_metric_is_unknown_until_the_layer_is_registered():
    with pytest.raises(InputError, match="unknown metric"):
        parse_condition("large_file_rate>0")


def test_the_toy_layer_gates_speaks_and_adds_its_issue_column(tmp_path, toy):
    release = _release(tmp_path / "release")
    result = audit(release, out_dir=tmp_path / "out", fail_on=["large_file_rate>0"],
                   options=AuditOptions.from_flags(layers=["large_files"], progress=False))
    doc = result.document
    record = next(r for r in doc["records"] if r["layer"] == "large_files")
    rows = result.issues
    expected = set(large_rows(rows.assign(size_bytes=_sizes(rows)))) & set(
        rows.loc[rows["split"] == "test", "row"])
    assert record["numerator"] == len(expected) > 0
    assert record["denominator"] == int((rows["split"] == "test").sum())
    (cond,) = doc["fail_on"]
    assert cond["held"] and cond["value"] == pytest.approx(record["estimate"])
    assert cond["records"] == [record["id"]]
    assert result.exit_code == 1
    assert (f"{record['numerator']} of {record['denominator']} test rows are larger than the "
            "median file.") in doc["summary"]["verdicts"]
    flagged = set(rows.loc[rows["large_file"].astype("boolean").fillna(False), "row"])
    assert flagged == set(large_rows(rows.assign(size_bytes=_sizes(rows))))


def test_the_toy_layer_says_nothing_when_it_did_not_run(tmp_path, toy):
    result = audit(_release(tmp_path / "release"), out_dir=tmp_path / "out",
                   options=AuditOptions.from_flags(layers=["groups"], progress=False))
    assert not any("larger than the median" in v for v in result.document["summary"]["verdicts"])
    assert "large_file" not in result.issues.columns


def _sizes(rows):
    return [Path(f).stat().st_size for f in rows["file"]]


def test_a_layer_option_is_a_flag_an_option_and_a_line_of_audit_json(tmp_path, toy):
    """The toy layer's options group (one field, in tests/audit/toy_layer.py only) reaches
    ``--help``, ``AuditOptions``, the layer's ``context.options`` and ``audit.json``."""
    import json

    from click.testing import CliRunner

    from splitscope.cli import app

    text = CliRunner().invoke(app, ["audit", "--help"], terminal_width=200).output
    assert "--large-factor FLOAT" in text and "Toy layer: a file is large" in text
    assert AuditOptions().large_files.factor == 1.0
    assert AuditOptions.from_flags(factor=3).large_files.factor == 3.0
    rel = _release(tmp_path / "rel")
    runs = {}
    for factor in ("1", "100"):
        out = tmp_path / f"out{factor}"
        res = CliRunner().invoke(app, ["audit", str(rel), "--out", str(out), "--layers",
                                       "large_files", "--large-factor", factor, "--workers",
                                       "1", "--json"])
        assert res.exit_code == 0, res.output
        runs[factor] = json.loads((out / "audit.json").read_text())
    for factor, doc in runs.items():
        assert doc["options"]["large_files"] == {"factor": float(factor)}
        (rec,) = [r for r in doc["records"] if r["layer"] == "large_files"]
        assert rec["predicate"]["params"] == {"factor": float(factor)}
    counts = {f: next(r["numerator"] for r in d["records"] if r["layer"] == "large_files")
              for f, d in runs.items()}
    assert counts["1"] > 0 and counts["100"] == 0


def test_a_layer_option_is_unknown_until_the_layer_is_registered():
    from click.testing import CliRunner

    from splitscope.cli import app

    text = CliRunner().invoke(app, ["audit", "--help"], terminal_width=200).output
    assert "--large-factor" not in text
    with pytest.raises(InputError, match="unknown option"):
        AuditOptions.from_flags(factor=3)
