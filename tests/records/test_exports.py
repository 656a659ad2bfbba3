"""One output-folder shape for every command: tables, JSON and artifacts.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from artifacts_check import assert_artifacts_cover

from splitscope.records.exports import (
    export_frame,
    file_stem,
    write_artifacts_manifest,
    write_json,
    write_table,
    write_tables,
)


def test_tables_written_as_csv_and_parquet_and_listed(tmp_path):
    tables = {"pairs": pd.DataFrame({"row": [1, 2], "rho": [0.99, 0.5]}),
              "per boundary/test->train": pd.DataFrame({"row": [3]}),
              "note": "not a table"}
    written = write_tables(tables, tmp_path)
    names = [p.relative_to(tmp_path).as_posix() for p in written]
    assert names == ["pairs.csv", "pairs.parquet", "per_boundary/test-_train.csv",
                     "per_boundary/test-_train.parquet"]
    back = pd.read_parquet(tmp_path / "pairs.parquet")
    assert back["rho"].tolist() == [0.99, 0.5]
    write_artifacts_manifest(tmp_path, written)
    assert assert_artifacts_cover(tmp_path) == sorted(names)


def test_listing_catches_a_changed_file(tmp_path):
    written = write_tables({"t": pd.DataFrame({"a": [1]})}, tmp_path)
    write_artifacts_manifest(tmp_path, written)
    (tmp_path / "t.csv").write_text("a\n2\n")
    with pytest.raises(AssertionError):
        assert_artifacts_cover(tmp_path)


def test_object_columns_become_text(tmp_path):
    table = pd.DataFrame({"rules": [["screen", "joint"], []], "meta": [{"k": 1}, None],
                          "mixed": [1, "a"]})
    frame = export_frame(table)
    assert frame["rules"].tolist() == ['["screen", "joint"]', "[]"]
    assert frame["meta"].iloc[0] == '{"k": 1}' and pd.isna(frame["meta"].iloc[1])
    write_table(table, tmp_path / "t")
    assert pd.read_parquet(tmp_path / "t.parquet")["mixed"].tolist() == ["1", "a"]


def test_parquet_failure_is_said_not_raised(tmp_path):
    table = pd.DataFrame({"z": np.array([1 + 2j, 3j])})  # Arrow has no complex type
    problems: list[str] = []
    written = write_table(table, tmp_path / "t", problems=problems)
    assert [p.name for p in written] == ["t.csv"] and not (tmp_path / "t.parquet").exists()
    assert len(problems) == 1 and problems[0].startswith(f"{tmp_path / 't.parquet'} not written")
    with pytest.raises(Exception):  # noqa: B017 - without a problems list the error propagates
        write_table(table, tmp_path / "u")


def test_keep_existing_leaves_a_layers_own_export(tmp_path):
    (tmp_path / "pairs.csv").write_text("own\n")
    written = write_tables({"pairs": pd.DataFrame({"a": [1]}),
                            "other": pd.DataFrame({"b": [2]})}, tmp_path, keep_existing=True)
    assert (tmp_path / "pairs.csv").read_text() == "own\n"
    assert [p.name for p in written] == ["other.csv", "other.parquet"]


def test_file_stem_and_json(tmp_path):
    assert file_stem("a/b c") == "a/b_c"
    assert file_stem("a/b c", subfolders=False) == "a_b_c"
    assert file_stem("...") == "table"
    path = write_json({"x": np.float64(0.5), "p": Path("/a")}, tmp_path / "d" / "x.json")
    assert json.loads(path.read_text()) == {"x": 0.5, "p": "/a"}


def test_neutralise_formulas_cell_by_cell():
    """Each text cell that begins like a formula and is not a plain number gets a leading
    quote, whatever the table's index; other cells and columns are left as they were."""
    import re

    from splitscope.records.exports import _FORMULA_START, _NUMBER, neutralise_formulas

    cells = ["=1+1", "-3.5", "+x", "@SUM(A1)", "plain", None, "-", "\tx", "1e5", "-1e-3", "=",
             "+.5", "\r", "-.", "+1.", "x=1"]
    rng = np.random.default_rng(3)
    table = pd.DataFrame({"a": [cells[i] for i in rng.integers(0, len(cells), 40)],
                          "s": pd.array([cells[i] for i in rng.integers(0, len(cells), 40)],
                                        dtype="string"),
                          "n": rng.integers(-5, 5, 40)}, index=rng.permutation(40) + 100)
    out = neutralise_formulas(table)

    def expected(v):
        if pd.isna(v):
            return None
        risky = v.startswith(_FORMULA_START) and not re.fullmatch(_NUMBER, v)
        return "'" + v if risky else v

    for col in ("a", "s"):
        got = [None if pd.isna(v) else v for v in out[col].tolist()]
        assert got == [expected(v) for v in table[col].tolist()]
    assert out.index.equals(table.index) and out["n"].equals(table["n"])
    clean = pd.DataFrame({"a": ["x", "1", None]})
    pd.testing.assert_frame_equal(neutralise_formulas(clean), clean)
