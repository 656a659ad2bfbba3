"""Views (row lists, selectors, equal-source averaging) and re-scoring of a folder."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from eval_helpers import CLASSES, make_predictions, make_truth
from scipy.stats import spearmanr

from splitscope.errors import InputError
from splitscope.evaluation import metrics as M
from splitscope.evaluation.predictions import read_truth
from splitscope.evaluation.rescore import final_ranking, rank_table, rescore
from splitscope.evaluation.views import (
    equal_source_scores,
    official_view,
    parse_view,
    per_source_scores,
    source_removed_view,
    view_from_list,
    view_where,
)


@pytest.fixture
def truth(tmp_path):
    table = make_truth(n=90)
    path = tmp_path / "truth.csv"
    table.to_csv(path, index=False)
    return read_truth(path), table


def test_views_from_selectors_and_lists(truth, tmp_path):
    t, table = truth
    assert official_view(t).n == 90
    v = view_where(t, "source!=S1", "no-S1")
    assert v.n == int((table["Dataset"] != "S1").sum())
    assert source_removed_view(t, "S1").n == v.n
    with pytest.raises(InputError, match="not in the truth"):
        source_removed_view(t, "S9")
    lst = pd.DataFrame({"path": list(table["image_path"][:5].str.replace("\\", "/"))
                        + ["val/none.jpg"]})
    lst.to_csv(tmp_path / "list.csv", index=False)
    ex = view_from_list(t, tmp_path / "list.csv", "exclude", "filtered")
    assert ex.n == 85 and ex.params["unmatched_list_entries"] == 1
    inc = parse_view(t, f"kept=include:{tmp_path / 'list.csv'}")
    assert inc.n == 5 and inc.name == "kept"
    rows = pd.DataFrame({"row": [0, 1, 2, 999]})
    byrow = view_from_list(t, rows, "exclude", "r")
    assert byrow.n == 87 and byrow.params["unmatched_list_entries"] == 1
    with pytest.raises(InputError, match="NAME=KIND"):
        parse_view(t, "nonsense")


def test_equal_source_and_pooled_relation(truth):
    t, table = truth
    p = make_predictions(table)[CLASSES].to_numpy()
    per = per_source_scores(t.labels, p, CLASSES, t.source)
    pooled_acc = M.accuracy(t.labels, M.predict(p))
    # pooled accuracy is the row-weighted mean of the per-source accuracies
    assert pooled_acc == pytest.approx(np.average(per["accuracy"], weights=per["rows"]))
    eq = equal_source_scores(t.labels, p, CLASSES, t.source)
    assert eq["equal_source_accuracy"] == pytest.approx(per["accuracy"].mean())
    # per-class recall pooled = support-weighted mean of per-source recalls
    pred = M.predict(p)
    for c in range(3):
        rec = []
        w = []
        for s in ("S1", "S2"):
            m = (t.source == s) & (t.labels == c)
            rec.append((pred[m] == c).mean())
            w.append(m.sum())
        assert M.per_class_recall(t.labels, pred, 3)[c] == pytest.approx(np.average(rec,
                                                                                  weights=w))


def _folder(tmp_path, table, qualities, name="sub"):
    folder = tmp_path / name
    folder.mkdir()
    for i, q in enumerate(qualities):
        make_predictions(table, quality=q, seed=i).to_csv(
            folder / f"team{i}_predicted_val_dataset.csv", index=False)
    return folder


def test_rescore_ranks_deltas_spearman_reported(truth, tmp_path):
    t, table = truth
    folder = _folder(tmp_path, table, [0.1, 0.9, 0.4, 0.6])
    bad = make_predictions(table).iloc[:-3]
    bad.to_csv(folder / "broken_predicted_val_dataset.csv", index=False)
    views = [view_where(t, "source!=S1", "no-S1")]
    reported = pd.DataFrame({"entry": ["team1", "team2", "broken"], "mean_auc": [0.9, 0.5, 0.7]})
    final = pd.DataFrame({"entry": ["team0", "team1", "team2", "team3"],
                          "final_score": [0.1, 0.8, 0.5, 0.6]})
    res = rescore(folder, t, views, score_kind="probability", reported=reported, final=final)
    v = res.verdicts.set_index("entry")
    assert not v.loc["broken", "scoreable"] and "3 truth paths without a prediction" in v.loc[
        "broken", "reasons"]
    assert set(res.scores["entry"]) == {"team0", "team1", "team2", "team3"}
    r = res.ranks
    # rank bookkeeping: ranks are a permutation per view; rank_change = official − view
    for view, g in r.groupby("view"):
        assert sorted(g["rank"].tolist()) == [1, 2, 3, 4]
        expect = g[res.params["rank_metric"]].rank(ascending=False, method="min")
        assert (g["rank"].to_numpy() == expect.to_numpy()).all()
    assert (r["rank_change"] == r["official_rank"] - r["rank"]).all()
    assert np.allclose(r["delta_organizer_score"],
                       r["organizer_score"] - r["official_organizer_score"])
    off = r[r["view"] == "official"].set_index("entry")["organizer_score"]
    sp = res.spearman.set_index("view")
    rho = spearmanr(off[final["entry"]].to_numpy(), final["final_score"]).statistic
    assert sp.loc["official", "rho_final"] == pytest.approx(rho)
    assert sp.loc["official", "rho_official"] == pytest.approx(1.0)
    rep = res.reported.set_index("entry")
    got = res.scores.query("view == 'official'").set_index("entry")["macro_auc"]
    assert rep.loc["team1", "abs_error"] == pytest.approx(abs(got["team1"] - 0.9))
    assert np.isnan(rep.loc["broken", "recomputed"]) and "not scoreable" in rep.loc["broken",
                                                                                    "reason"]
    summary = res.summary()
    assert summary["entries"] == 5 and summary["scoreable"] == 4
    files = res.write(tmp_path / "out")
    assert (tmp_path / "out" / "rescore.json").exists() and len(files) >= 5


def test_rescore_exclude_and_final_from_folder(truth, tmp_path):
    t, table = truth
    folder = _folder(tmp_path, table, [0.2, 0.8, 0.5])
    test_folder = _folder(tmp_path, table, [0.3, 0.7, 0.6], name="test")
    for f in test_folder.iterdir():  # bare file names: only the opt-in basename mode aligns
        d = pd.read_csv(f)
        d["image_path"] = d["image_path"].str.rsplit("\\", n=1).str[-1]
        d.to_csv(f.with_name(f.name.replace("_val_", "_test_")), index=False)
        f.unlink()
    fin_exact = final_ranking(test_folder, t)
    assert not fin_exact.verdicts["scoreable"].any()
    fin = final_ranking(test_folder, t, path_mode="basename")
    assert fin.verdicts["scoreable"].all() and (fin.scores["path_mode"] == "basename").all()
    res = rescore(folder, t, None, final=fin, exclude=["team0"])
    assert set(res.scores["entry"]) == {"team1", "team2"}
    assert res.verdicts.set_index("entry").loc["team0", "excluded"]
    assert res.spearman.loc[0, "entries_with_final"] == 2
    assert "path mode basename" in res.params["final"]
    with pytest.raises(InputError, match="names no entry"):
        rescore(folder, t, None, exclude=["nobody"])


def test_rank_ties_share_lowest_rank():
    scores = pd.DataFrame({"entry": list("abc"), "view": "official",
                           "organizer_score": [0.9, 0.9, 0.5]})
    r = rank_table(scores)
    assert r["rank"].tolist() == [1, 1, 3]


def test_an_unreadable_submission_is_an_unscoreable_entry_not_a_crash(tmp_path):
    from splitscope.evaluation.rescore import load_entries, rescore

    rng = np.random.default_rng(0)
    classes = ["a", "b"]
    paths = [f"img/{i}.png" for i in range(20)]
    labels = [classes[i % 2] for i in range(20)]
    truth_path = tmp_path / "truth.csv"
    pd.DataFrame({"image_path": paths, "label": labels}).to_csv(truth_path, index=False)
    folder = tmp_path / "subs"
    folder.mkdir()
    probs = rng.dirichlet([1, 1], size=20)
    pd.DataFrame({"image_path": paths, "a": probs[:, 0], "b": probs[:, 1]}).to_csv(
        folder / "good.csv", index=False)
    (folder / "broken.csv").write_text("")
    with pytest.raises(InputError, match="empty"):
        load_entries(folder)
    from splitscope.evaluation.predictions import read_truth

    res = rescore(folder, read_truth(truth_path), score_kind="probability")
    verdicts = res.verdicts.set_index("entry")
    assert bool(verdicts.loc["good", "scoreable"])
    assert not bool(verdicts.loc["broken", "scoreable"])
    assert "file cannot be read" in "; ".join(verdicts.loc["broken", "reasons"])
    assert set(res.scores["entry"]) == {"good"}
