"""The tool's own logits (Parquet written by ``splitscope experiment``, recognised by its
splitscope metadata) are scored as their softmax everywhere they are scored (METHODS §5.13);
a file without that metadata keeps its scores as supplied (§5.2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from sklearn.metrics import roc_auc_score

from splitscope.core.options import AuditOptions
from splitscope.core.run import audit
from splitscope.evaluation.effects import runs_from_predictions
from splitscope.evaluation.metrics import softmax
from splitscope.evaluation.predictions import read_predictions, read_truth
from splitscope.evaluation.rescore import rescore
from splitscope.evaluation.views import official_view
from splitscope.experiments.retraining import write_predictions

CLASSES = ["a", "b", "c"]


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A folder release (train/test × 3 classes) and logits for its test rows whose per-class
    one-vs-rest ranking differs between raw logits and their softmax."""
    root = tmp_path_factory.mktemp("own") / "rel"
    rng = np.random.default_rng(7)
    rows = []
    for split, n in (("train", 3), ("test", 14)):
        for c in CLASSES:
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (24, 24), dtype=np.uint8)).save(
                    root / split / c / f"{i}.png")
                if split == "test":
                    rows.append((f"test/{c}/{i}.png", CLASSES.index(c)))
    paths = [p for p, _ in rows]
    y = np.array([k for _, k in rows])
    logits = rng.normal(0, 3, (len(rows), 3))
    logits[np.arange(len(rows)), y] += 1.5
    logits += rng.normal(0, 4, (len(rows), 1))  # a per-row offset: moves raw-logit AUCs only
    return root, paths, y, logits


def _pred_table(paths, logits):
    table = pd.DataFrame({"path": paths, "split": "test", "view": "official"})
    for j, c in enumerate(CLASSES):
        table[c] = logits[:, j]
    return table


def _sklearn(y, probs):
    return roc_auc_score(y, probs, multi_class="ovr", average="macro", labels=[0, 1, 2])


def _raw(y, s):
    """Macro one-vs-rest AUC on scores as supplied (scikit-learn's multiclass form wants
    probabilities, so per class)."""
    return float(np.mean([roc_auc_score(y == k, s[:, k]) for k in range(s.shape[1])]))


def _macro_auc(res):
    rec = next(r for r in res.document["records"]
               if r["id"].startswith("evaluation.metrics.") and r["id"].endswith(".official"))
    return rec["details"]["macro_auc"], rec


@pytest.mark.slow
def test_macro_auc_of_the_tools_logits_through_the_audit_is_sklearns_ovr_on_softmax(
        release, tmp_path):
    root, paths, y, logits = release
    want = _sklearn(y, softmax(logits))
    raw = _raw(y, logits)
    assert abs(want - raw) > 1e-3  # the fixture separates the two readings
    own = tmp_path / "predictions.parquet"
    write_predictions(_pred_table(paths, logits), own, CLASSES)
    res = audit(root, predictions=own, out_dir=tmp_path / "own",
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["evaluation"],
                                                score_kind="logit"))
    got, rec = _macro_auc(res)
    assert abs(got - want) <= 1e-12
    assert rec["predicate"]["params"]["scores"] == "softmax of the tool's own logits"

    supplied = tmp_path / "supplied.parquet"  # the same numbers without the tool's metadata
    _pred_table(paths, logits).to_parquet(supplied, index=False)
    res = audit(root, predictions=supplied, out_dir=tmp_path / "supplied",
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["evaluation"],
                                                score_kind="logit"))
    got, rec = _macro_auc(res)
    assert abs(got - raw) <= 1e-12
    assert rec["predicate"]["params"]["scores"] == "as supplied"


def test_rescore_and_effects_read_the_tools_logits_as_softmax(release, tmp_path):
    _, paths, y, logits = release
    own = tmp_path / "run1.parquet"
    write_predictions(_pred_table(paths, logits), own, CLASSES)
    supplied = tmp_path / "run2.csv"
    _pred_table(paths, logits).to_csv(supplied, index=False)
    truth = read_truth(pd.DataFrame({"path": paths, "label": np.asarray(CLASSES)[y]}), CLASSES)
    pred = read_predictions(own, score_kind="score")
    assert pred.own_logits and pred.score_kind == "probability"
    assert any("softmax" in n for n in pred.read["notes"])
    np.testing.assert_allclose(pred.table[CLASSES].to_numpy(), softmax(logits), atol=0)
    plain = read_predictions(supplied, score_kind="logit")
    assert not plain.own_logits and plain.score_kind == "logit"
    np.testing.assert_array_equal(plain.table[CLASSES].to_numpy(), logits)

    res = rescore([own, supplied], truth, [official_view(truth)], score_kind="logit")
    by = res.scores.set_index("entry")["macro_auc"]
    assert abs(by["run1"] - _sklearn(y, softmax(logits))) <= 1e-12
    assert abs(by["run2"] - _raw(y, logits)) <= 1e-12

    runs = pd.DataFrame({"run": ["r1", "r2"], "predictions": [str(own), str(supplied)],
                         "score_kind": ["logit", "logit"]})
    table = runs_from_predictions(runs, truth, [official_view(truth)]).set_index("run")
    assert abs(table.loc["r1", "macro_auc"] - _sklearn(y, softmax(logits))) <= 1e-12
    assert abs(table.loc["r2", "macro_auc"] - _raw(y, logits)) <= 1e-12
    # the probability metrics of both readings are those of the logits' softmax
    assert table.loc["r1", "nll"] == pytest.approx(table.loc["r2", "nll"], abs=1e-12)


def test_a_parquet_with_other_metadata_is_read_as_supplied(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(_pred_table(["x.png"], np.array([[3.0, 1.0, 0.0]])),
                                 preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"splitscope"] = b'{"score_kind": "logit", "classes": ["a", "b", "missing"]}'
    path = Path(tmp_path) / "p.parquet"
    pq.write_table(table.replace_schema_metadata(meta), path)
    pred = read_predictions(path, score_kind="logit")
    assert not pred.own_logits
    assert pred.table[CLASSES].to_numpy().tolist() == [[3.0, 1.0, 0.0]]
