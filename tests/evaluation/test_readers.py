"""Tolerant readers: other sheets, offset headers, ';' and decimal commas, byte-order marks,
score plausibility notes, calamine versus openpyxl, and the parsed-workbook cache. In every
folder case the bad entry gets a clear verdict and the good one is still scored."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from eval_helpers import CLASSES, make_predictions, make_truth

from splitscope.cli import main
from splitscope.errors import InputError
from splitscope.evaluation.options import ReadOptions
from splitscope.evaluation.predictions import read_predictions, read_truth
from splitscope.evaluation.readers import find_header, read_any_table
from splitscope.evaluation.rescore import rescore
from splitscope.evaluation.scoreability import COUNT_KEYS, check_scoreability


@pytest.fixture
def case(tmp_path):
    table = make_truth(n=45)
    truth = read_truth(table)
    preds = make_predictions(table, 0.6)
    folder = tmp_path / "subs"
    folder.mkdir()
    preds.to_csv(folder / "good_predicted_val_dataset.csv", index=False)
    return truth, preds, folder


def _verdicts(folder, truth, **kw):
    res = rescore(folder, truth, score_kind="probability", **kw)
    return res, res.verdicts.set_index("entry")


def _good_is_scored(res, v):
    assert bool(v.loc["good", "scoreable"])
    off = res.scores[(res.scores["entry"] == "good") & (res.scores["view"] == "official")]
    assert len(off) == 1 and np.isfinite(off["organizer_score"].iloc[0])


def test_other_sheet_is_named_in_the_verdict_and_read_with_sheet(case, tmp_path):
    truth, preds, folder = case
    path = folder / "side_predicted_val_dataset.xlsx"
    with pd.ExcelWriter(path) as book:
        pd.DataFrame({"note": ["predictions are on the next sheet"]}).to_excel(
            book, sheet_name="About", index=False)
        preds.to_excel(book, sheet_name="Predictions", index=False)
    res, v = _verdicts(folder, truth)
    _good_is_scored(res, v)
    assert not bool(v.loc["side", "scoreable"])
    assert any("no path column" in r for r in v.loc["side", "reasons"])
    assert any("sheet 'Predictions' has one; read it with --sheet 'Predictions'" in n
               for n in v.loc["side", "notes"])
    for sheet in ("Predictions", 1, "1"):  # NAME, INDEX, and an index given as text
        p = read_predictions(path, score_kind="probability", sheet=sheet)
        verdict, aligned = check_scoreability(p, truth)
        assert verdict.scoreable and verdict.read["sheet"] == "Predictions"
        np.testing.assert_allclose(aligned, preds[CLASSES].to_numpy(), rtol=1e-15)
    with pytest.raises(InputError, match="sheet 'Nope' not in .*sheets: 'About', 'Predictions'"):
        read_predictions(path, sheet="Nope")


@pytest.mark.parametrize("suffix", [".csv", ".xlsx"])
def test_offset_header_is_detected_and_can_be_declared(case, suffix):
    truth, preds, folder = case
    path = folder / f"titled_predicted_val_dataset{suffix}"
    title = pd.DataFrame([["Challenge predictions, team titled"] + [None] * (preds.shape[1] - 1),
                          [None] * preds.shape[1]], columns=preds.columns)
    body = pd.concat([pd.DataFrame([preds.columns], columns=preds.columns), preds])
    full = pd.concat([title, body], ignore_index=True)
    if suffix == ".csv":
        full.to_csv(path, index=False, header=False)
    else:
        full.to_excel(path, index=False, header=False)
    res, v = _verdicts(folder, truth)
    _good_is_scored(res, v)
    assert bool(v.loc["titled", "scoreable"])
    assert v.loc["titled", "read_header_row"] == 3 and v.loc["titled", "read_title_rows_skipped"] == 2
    assert any("header found on row 3: 2 title row(s)" in n for n in v.loc["titled", "notes"])
    got = res.scores.set_index(["entry", "view"])["organizer_score"]
    assert got["titled", "official"] == pytest.approx(got["good", "official"], abs=1e-12)
    declared = read_predictions(path, score_kind="probability", read=ReadOptions(header_row=3))
    assert declared.read["header_row"] == 3 and "header on row 3 (declared)" in declared.read[
        "notes"]
    assert check_scoreability(declared, truth)[0].scoreable
    wrong = read_predictions(path, read=ReadOptions(header_row=1))
    assert not check_scoreability(wrong, truth)[0].scoreable  # the title line is no header


def test_semicolon_and_decimal_comma_sniffed_or_declared(case):
    truth, preds, folder = case
    path = folder / "euro_predicted_val_dataset.csv"
    preds.to_csv(path, sep=";", decimal=",", index=False)
    res, v = _verdicts(folder, truth)
    _good_is_scored(res, v)
    assert bool(v.loc["euro", "scoreable"])
    assert v.loc["euro", "read_sep"] == ";" and v.loc["euro", "read_decimal"] == ","
    assert "delimiter ';' (detected)" in v.loc["euro", "notes"]
    assert "decimal comma (detected)" in v.loc["euro", "notes"]
    aligned = res.aligned["euro"]
    np.testing.assert_allclose(aligned, preds[CLASSES].to_numpy(), rtol=1e-15)
    declared = read_predictions(path, read=ReadOptions(sep=";", decimal=","))
    assert "delimiter ';' (declared)" in declared.read["notes"]
    assert check_scoreability(declared, truth)[0].scoreable
    # declared wrongly: the values stay text and the verdict says so
    dotted = read_predictions(path, read=ReadOptions(sep=";", decimal="."))
    verdict, _ = check_scoreability(dotted, truth)
    assert not verdict.scoreable and any("non-numeric" in r for r in verdict.reasons)


def test_byte_order_mark_is_removed_and_recorded(case):
    truth, preds, folder = case
    path = folder / "bom_predicted_val_dataset.csv"
    path.write_bytes(b"\xef\xbb\xbf" + preds.to_csv(index=False).encode())
    res, v = _verdicts(folder, truth)
    _good_is_scored(res, v)
    assert bool(v.loc["bom", "scoreable"]) and bool(v.loc["bom", "read_bom"])
    assert "byte-order mark (utf-8-sig) removed" in v.loc["bom", "notes"]
    utf16 = folder / "wide16_predicted_val_dataset.csv"
    utf16.write_bytes(preds.to_csv(index=False).encode("utf-16"))  # BOM + UTF-16 LE
    assert check_scoreability(read_predictions(utf16), truth)[0].scoreable


def test_logits_under_the_default_kind_get_a_note_and_are_still_scored(case):
    truth, preds, folder = case
    logits = preds.copy()
    logits[CLASSES] = np.log(preds[CLASSES].to_numpy()) * 3.0
    logits.to_csv(folder / "raw_predicted_val_dataset.csv", index=False)
    res = rescore(folder, truth)  # default: score
    v = res.verdicts.set_index("entry")
    assert bool(v.loc["raw", "scoreable"]) and bool(v.loc["good", "scoreable"])
    assert v.loc["raw", "score_rows_outside_unit_interval"] == 45
    assert any("looks like logits / unnormalised scores; declare --score-kind" in n
               for n in v.loc["raw", "notes"])
    assert v.loc["good", "score_rows_outside_unit_interval"] == 0
    assert any("declare --score-kind probability" in n for n in v.loc["good", "notes"])
    # the same argmax and ranking: the scores are usable as scores
    got = res.scores.set_index(["entry", "view"])
    assert got.loc[("raw", "official"), "balanced_accuracy"] == pytest.approx(
        got.loc[("good", "official"), "balanced_accuracy"])
    # declared logits on probabilities: a warning
    as_logit = rescore(folder, truth, score_kind={"good": "logit", "*": "score"})
    note = as_logit.verdicts.set_index("entry").loc["good", "notes"]
    assert any(n.startswith("warning: declared logits") for n in note)


def test_unnormalised_rows_are_counted(case):
    truth, preds, _ = case
    scaled = preds.copy()
    scaled.loc[:9, CLASSES] = scaled.loc[:9, CLASSES] * 0.5  # in [0, 1], sum 0.5
    from splitscope.evaluation.predictions import Predictions

    verdict, _ = check_scoreability(Predictions("s", scaled, "image_path"), truth)
    assert verdict.counts["score_rows_not_summing_to_one"] == 10
    assert verdict.counts["score_rows_outside_unit_interval"] == 0
    assert any("10 not summing to 1" in n for n in verdict.notes)


def test_verdict_keys_are_the_same_for_every_entry_and_mode(case, tmp_path):
    truth, preds, folder = case
    (folder / "empty_predicted_val_dataset.csv").write_text("")
    preds.iloc[:-2].to_csv(folder / "short_predicted_val_dataset.csv", index=False)
    rows = []
    for mode in ("exact", "basename"):
        rows += rescore(folder, truth, path_mode=mode).to_json()["verdicts"]
    keys = {tuple(sorted(r)) for r in rows}
    assert len(keys) == 1 and set(COUNT_KEYS) <= set(rows[0])
    by = {(r["entry"], r["path_mode"]): r for r in rows}
    assert by["empty", "exact"]["duplicated_paths"] is None  # not read: not measured
    assert by["good", "exact"]["duplicated_paths"] == 0  # measured: none
    assert by["short", "exact"]["truth_paths_without_prediction"] == 2
    assert all(isinstance(r["reasons"], list) and isinstance(r["notes"], list) for r in rows)


def test_reason_counts_by_file_name_add_up(case):
    truth, preds, _ = case
    bad = preds.copy()
    bad["image_path"] = "C:\\data\\" + bad["image_path"]
    bad.loc[:4, "image_path"] = [f"C:\\data\\elsewhere{i}.jpg" for i in range(5)]
    from splitscope.evaluation.predictions import Predictions

    verdict, _ = check_scoreability(Predictions("w", bad, "image_path"), truth)
    c = verdict.counts
    assert c["paths_not_in_truth"] == 45
    assert (c["not_in_truth_basename_unique_match"] + c["not_in_truth_basename_several"]
            + c["not_in_truth_basename_none"]) == 45
    assert c["not_in_truth_basename_none"] == 5
    assert any("40 match exactly one truth row by file name, 0 match several, 5 match none" in r
               for r in verdict.reasons)


def test_find_header_rules():
    rows = [["Team X"], [None, None], ["image_path", "A", "B"], ["a.jpg", 0.1, 0.9]]
    assert find_header(rows, {"image_path"}, 3) == 2
    assert find_header(rows, set(), 3) == 2  # first all-text row as wide as the table
    assert find_header([["x", "y"], ["1", "2"]], set(), 2) == 0


def test_calamine_and_openpyxl_read_the_same_table_and_the_cache_returns_it(tmp_path):
    table = make_predictions(make_truth(n=300), 0.5)
    table["note"] = ["x"] * 150 + [None] * 150
    path = tmp_path / "p.xlsx"
    table.to_excel(path, index=False)
    cal, info_c = read_any_table(path, ReadOptions(engine="calamine"))
    opx, info_o = read_any_table(path, ReadOptions(engine="openpyxl"))
    assert info_c["engine"] == "calamine" and info_o["engine"] == "openpyxl"
    pd.testing.assert_frame_equal(cal, opx)
    cache = tmp_path / "ws" / "parsed-tables"
    first, i1 = read_any_table(path, ReadOptions(cache=cache))
    again, i2 = read_any_table(path, ReadOptions(cache=cache))
    assert i1["cache"] == "stored" and i2["cache"] == "hit"
    pd.testing.assert_frame_equal(first, again)
    pd.testing.assert_frame_equal(first, cal)
    assert len(list(cache.glob("*.parquet"))) == 1
    # another sheet option is another cache entry; changed bytes are another file
    read_any_table(path, ReadOptions(cache=cache, header_row=1))
    assert len(list(cache.glob("*.parquet"))) == 2
    table.iloc[:10].to_excel(path, index=False)
    changed, i3 = read_any_table(path, ReadOptions(cache=cache))
    assert i3["cache"] == "stored" and len(changed) == 10


def test_openpyxl_is_the_fallback_when_calamine_fails(tmp_path, monkeypatch):
    path = tmp_path / "p.xlsx"
    make_predictions(make_truth(n=30)).to_excel(path, index=False)
    import python_calamine

    class Refuses:
        @staticmethod
        def from_path(_):
            raise RuntimeError("cannot parse this workbook")

    monkeypatch.setattr(python_calamine, "CalamineWorkbook", Refuses)
    table, info = read_any_table(path)
    assert info["engine"] == "openpyxl" and len(table) == 30
    assert any(n.startswith("read with openpyxl (calamine: RuntimeError") for n in info["notes"])


def test_cli_reader_options_and_json_equals_written_file(case, tmp_path, capsys):
    _truth, preds, folder = case
    table = make_truth(n=45)
    table.to_csv(tmp_path / "truth.csv", index=False)
    preds.to_csv(folder / "euro_predicted_val_dataset.csv", sep=";", decimal=",", index=False)
    out = tmp_path / "out"
    code = main(["rescore", str(folder), "--truth", str(tmp_path / "truth.csv"), "--sep", ";",
                 "--decimal", ",", "--json", "--out", str(out), "--score-kind", "probability"])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.strip() == (out / "rescore.json").read_text().strip()
    payload = json.loads(printed)
    v = {r["entry"]: r for r in payload["verdicts"]}
    assert v["euro"]["scoreable"] and v["euro"]["read_sep"] == ";"
    assert not v["good"]["scoreable"]  # ',' file read with the declared ';': one column
    assert main(["rescore", str(folder), "--truth", str(tmp_path / "truth.csv"),
                 "--sheet", "x", "--header-row", "0"]) == 2
