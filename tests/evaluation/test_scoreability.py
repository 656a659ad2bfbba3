"""Readers (CSV, Parquet, XLSX; wide and long) and the scoreability verdict (METHODS §5.7)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from eval_helpers import CLASSES, make_predictions, make_truth

from splitscope.errors import InputError
from splitscope.evaluation.predictions import (
    entry_key,
    entry_name,
    read_predictions,
    read_truth,
)
from splitscope.evaluation.scoreability import check_scoreability


def _write(table: pd.DataFrame, path):
    if path.suffix == ".csv":
        table.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        table.to_parquet(path, index=False)
    else:
        table.to_excel(path, index=False)
    return path


def test_read_truth_onehot_and_label_forms(truth_file, tmp_path):
    path, table = truth_file
    t = read_truth(path)
    assert t.classes == CLASSES
    assert list(t.source[:3]) == list(table["Dataset"][:3])
    np.testing.assert_array_equal(t.labels, table[CLASSES].to_numpy().argmax(axis=1))
    long = pd.DataFrame({"image_path": table["image_path"],
                         "class_label": np.asarray(CLASSES)[t.labels]})
    t2 = read_truth(_write(long, tmp_path / "t2.csv"), classes=CLASSES)
    np.testing.assert_array_equal(t2.labels, t.labels)
    bad = table.copy()
    bad.loc[3, CLASSES] = 1
    with pytest.raises(InputError, match="not one-hot"):
        read_truth(_write(bad, tmp_path / "bad.csv"))


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".xlsx"])
def test_clean_file_is_scoreable_in_every_format(truth_file, tmp_path, suffix):
    path, table = truth_file
    truth = read_truth(path)
    pred_table = make_predictions(table)
    pred = read_predictions(_write(pred_table, tmp_path / f"p{suffix}"),
                            score_kind="probability")
    verdict, aligned = check_scoreability(pred, truth)
    assert verdict.scoreable, verdict.reasons
    np.testing.assert_allclose(aligned, pred_table[CLASSES].to_numpy(), atol=1e-12)
    assert any("extra column" in n for n in verdict.notes)


def test_rows_in_other_order_and_columns_by_name(truth_file, tmp_path):
    path, table = truth_file
    truth = read_truth(path)
    p = make_predictions(table)
    shuffled = p.sample(frac=1, random_state=0)[["image_path", "Gamma Ray", "Alpha", "Beta"]]
    shuffled["image_path"] = shuffled["image_path"].str.replace("\\", "/")
    pred = read_predictions(_write(shuffled, tmp_path / "p.csv"))
    verdict, aligned = check_scoreability(pred, truth)
    assert verdict.scoreable
    np.testing.assert_allclose(aligned, p[CLASSES].to_numpy(), atol=1e-12)
    assert any("different order" in n for n in verdict.notes)
    assert any("backslash" in n for n in verdict.notes)
    assert verdict.counts["separator_only_matches"] == len(table)


def test_long_layout(truth_file, tmp_path):
    path, table = truth_file
    truth = read_truth(path)
    p = make_predictions(table)
    long = p.melt(id_vars=["image_path"], value_vars=CLASSES, var_name="class",
                  value_name="score")
    pred = read_predictions(_write(long, tmp_path / "long.csv"), layout="long")
    verdict, aligned = check_scoreability(pred, truth)
    assert verdict.scoreable
    np.testing.assert_allclose(aligned, p[CLASSES].to_numpy(), atol=1e-12)
    dup = pd.concat([long, long.iloc[:2]])
    pred = read_predictions(_write(dup, tmp_path / "dup.csv"), layout="long")
    verdict, _ = check_scoreability(pred, truth)
    assert not verdict.scoreable
    assert "2 duplicated (path, class) rows" in verdict.reasons[0]


def test_every_reason_is_reported_with_counts(truth_file, tmp_path):
    path, table = truth_file
    truth = read_truth(path)
    p = make_predictions(table)
    p = p.rename(columns={"Gamma Ray": "gamma ray ", "Beta": "Bet"})
    p["image_path"] = p["image_path"].str.rsplit("\\", n=1).str[-1]  # bare filenames
    p = pd.concat([p, p.iloc[:4], p.iloc[:1]], ignore_index=True)  # 4 duplicated paths, 5 extra
    p["Alpha"] = p["Alpha"].astype(object)
    p.loc[7, "Alpha"] = np.nan
    p.loc[8, "Alpha"] = "n/a"
    pred = read_predictions(_write(p, tmp_path / "p.csv"), score_kind="probability")
    verdict, aligned = check_scoreability(pred, truth)
    assert aligned is None and not verdict.scoreable
    text = " | ".join(verdict.reasons)
    assert "case/whitespace only: 'Gamma Ray' only as 'gamma ray '" in text
    assert "1 class column(s) missing: Beta" in text
    assert "4 duplicated paths (5 surplus rows)" in text
    assert f"{len(p)} paths not in truth list: {len(p)} bare filenames" in text
    assert f"{len(table)} truth paths without a prediction" in text
    assert "1 missing value(s)" in text and "1 non-numeric value(s)" in text
    assert verdict.counts["duplicated_paths"] == 4 and verdict.counts["surplus_rows"] == 5


def test_windows_paths_and_opt_in_basename_mode(truth_file, tmp_path):
    path, table = truth_file
    truth = read_truth(path)
    p = make_predictions(table)
    p["image_path"] = "D:\\data\\val_by_source\\" + p["image_path"].str.rsplit("\\", n=1).str[-1]
    pred = read_predictions(_write(p, tmp_path / "p.csv"))
    verdict, _ = check_scoreability(pred, truth)
    assert not verdict.scoreable
    assert (f"{len(p)} paths not in truth list: {len(p)} absolute Windows paths "
            f"({len(p)} match exactly one truth row by file name") in verdict.reasons[0]
    verdict, aligned = check_scoreability(pred, truth, path_mode="basename")
    assert verdict.scoreable and verdict.path_mode == "basename"
    assert any("opt-in" in n for n in verdict.notes)
    np.testing.assert_allclose(aligned, p[CLASSES].to_numpy(), atol=1e-12)


def test_basename_mode_reports_ambiguous_truth_names(tmp_path):
    table = make_truth(n=9)
    table.loc[1, "image_path"] = table.loc[0, "image_path"].replace("val\\", "other\\")
    truth = read_truth(_write(table, tmp_path / "t.csv"))
    p = make_predictions(table)
    p["image_path"] = p["image_path"].str.rsplit("\\", n=1).str[-1]
    verdict, _ = check_scoreability(read_predictions(_write(p, tmp_path / "p.csv")), truth,
                                    path_mode="basename")
    assert not verdict.scoreable
    assert any("truth keys shared by 2 truth rows" in r for r in verdict.reasons)


def test_predicted_class_and_probability_notes(truth_file, tmp_path):
    path, table = truth_file
    truth = read_truth(path)
    p = make_predictions(table)
    arg = np.asarray(CLASSES)[p[CLASSES].to_numpy().argmax(axis=1)]
    arg[:3] = "Alpha"
    p["predicted_class"] = arg
    p.loc[0, CLASSES] = [2.0, -1.0, 0.5]  # not a probability row
    pred = read_predictions(_write(p, tmp_path / "p.csv"), score_kind="probability")
    verdict, _ = check_scoreability(pred, truth)
    assert verdict.scoreable  # notes never block
    assert verdict.counts["probability_rows_invalid"] == 1
    assert verdict.counts["predicted_class_disagreements"] >= 1


def test_entry_names_and_keys():
    assert entry_name("DS&Chill_predicted_val_dataset") == "DS&Chill"
    assert entry_name("DeepScope_Innovators_validation_excel") == "DeepScope_Innovators"
    assert entry_name("DeepScope Innovators_testing_excel") == "DeepScope Innovators"
    assert entry_name("Pioneers_test_predictions-") == "Pioneers"
    assert entry_name("EndoAI_predicted_valid_dataset") == "EndoAI"
    assert entry_key("DeepScope Innovators") == entry_key("DeepScope_Innovators")


def test_reader_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_predictions(tmp_path / "missing.csv")
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(InputError, match="unsupported"):
        read_predictions(tmp_path / "x.json")
    with pytest.raises(InputError, match="score kind"):
        read_predictions(tmp_path / "x.json", score_kind="probs")


@pytest.mark.parametrize("content, message", [
    ("", "prediction file .* is empty"),
    ("image_path,Alpha\n", "prediction file .* has no rows"),
    ('image_path,Alpha\n"a.jpg,0.5\n', "cannot read prediction file"),
])
def test_malformed_prediction_files(tmp_path, content, message):
    path = tmp_path / "p.csv"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        read_predictions(path)
