"""Label vocabularies per corpus (METHODS §6.4): a map applies to every corpus whose labels it
names, a corpus may have its own, and labels are compared across corpora only where the two
vocabularies overlap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from splitscope.cli import main
from splitscope.core.options import AuditOptions
from splitscope.core.run import audit
from splitscope.errors import InputError
from splitscope.manifest.labels import apply_label_maps, vocabulary_overlap

MAIN = ("glioma", "meningioma", "no_tumor")
EXTERNAL = {"glioma": "glioma_tumor", "meningioma": "meningioma_tumor", "no_tumor": "no_tumor"}


def _noise(seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).resize(
        (64, 64), Image.BICUBIC)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path]:
    """A main release and an external corpus that spells its labels differently. The external
    corpus holds 6 byte copies of training images: 4 under the same label (spelled its way)
    and 2 under another label — the only true label conflicts."""
    base = tmp_path_factory.mktemp("vocab")
    main_root, ext_root = base / "main", base / "external"
    seed = 0
    for split, n in (("train", 8), ("test", 3)):
        for label in MAIN:
            (main_root / split / label).mkdir(parents=True)
            for i in range(n):
                seed += 1
                _noise(seed).save(main_root / split / label / f"{i}.png")
    for label in MAIN:
        (ext_root / EXTERNAL[label]).mkdir(parents=True)
        for i in range(4):
            seed += 1
            _noise(seed).save(ext_root / EXTERNAL[label] / f"own_{i}.png")
    copies = [("glioma", 0, "glioma"), ("glioma", 1, "glioma"), ("meningioma", 0, "meningioma"),
              ("no_tumor", 0, "no_tumor"), ("glioma", 2, "meningioma"),
              ("no_tumor", 1, "glioma")]
    for k, (label, i, filed) in enumerate(copies):
        (ext_root / EXTERNAL[filed] / f"copy_{k}.png").write_bytes(
            (main_root / "train" / label / f"{i}.png").read_bytes())
    return main_root, ext_root


def _conflicts(result) -> list[dict]:
    return [r for r in result.document["records"]
            if (r.get("predicate") or {}).get("name") == "label_conflict_sha256"
            and (r.get("boundary") or {}).get("kind") == "cross-corpus"]


def test_vocabulary_overlap_rule():
    assert not vocabulary_overlap(["glioma", "meningioma", "no_tumor"],
                                  ["glioma_tumor", "meningioma_tumor", "no_tumor"])["comparable"]
    assert vocabulary_overlap(["glioma", "no_tumor"], ["glioma", "meningioma", "no_tumor",
                                                       "pituitary"])["comparable"]
    assert not vocabulary_overlap(["tumor", "no_tumor"], ["glioma", "meningioma", "no_tumor",
                                                          "pituitary"])["comparable"]


@pytest.fixture(scope="module")
def unmapped(corpora, tmp_path_factory):
    """The audit of the two corpora without a label map (duplicates and external), counting
    the comparisons of their vocabularies: ``(result, calls)``."""
    from splitscope.relations import label_conflicts as lc

    calls = []

    def counted(query_labels, reference_labels):
        calls.append(1)
        return vocabulary_overlap(query_labels, reference_labels)

    main_root, ext_root = corpora
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lc, "vocabulary_overlap", counted)
        res = audit(main_root, external=ext_root,
                    out_dir=tmp_path_factory.mktemp("unmapped") / "a",
                    options=AuditOptions.from_flags(workers=1, progress=False,
                                                    layers=["duplicates", "external"]))
    return res, calls


@pytest.mark.slow
def test_differently_spelled_corpora_are_not_compared(unmapped):
    res, _ = unmapped
    (rec,) = _conflicts(res)
    assert rec["status"] == "not assessed" and rec["numerator"] is None
    assert "label vocabularies differ" in rec["reason"]
    verdicts = res.document["summary"]["verdicts"]
    assert not any(v.startswith("LABEL CONFLICT") for v in verdicts)
    assert any("not assessed, the label vocabularies differ" in v
               and "--external-label-map" in v for v in verdicts)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["own", "common"])
def test_a_map_aligns_the_corpora_and_counts_the_true_conflicts(corpora, tmp_path, how):
    main_root, ext_root = corpora
    spec = "glioma_tumor=glioma,meningioma_tumor=meningioma"
    kw = {"external_label_map": spec} if how == "own" else {"label_map": spec}
    res = audit(main_root, AuditOptions.from_flags(workers=1, progress=False,
                                                   layers=["duplicates", "external"], **kw),
                external=ext_root, out_dir=tmp_path / how)
    (rec,) = _conflicts(res)
    assert rec["status"] == "completed"
    assert (rec["numerator"], rec["denominator"]) == (2, 18)
    assert rec["details"]["vocabulary"]["comparable"]
    maps = res.document["manifest"]["corpus_label_maps"]
    assert maps["external"]["own" if how == "own" else "common"]["rows_changed"] == 13
    assert maps["audited"]["common"] is None  # names no label of the main release
    assert any(v.startswith("LABEL CONFLICT") and "(2 of 18 rows)" in v
               for v in res.document["summary"]["verdicts"])


def test_a_map_naming_no_label_of_any_corpus_is_refused(corpora, tmp_path):
    main_root, ext_root = corpora
    assert main(["audit", str(main_root), "--external", str(ext_root), "--out",
                 str(tmp_path / "o"), "--layers", "duplicates", "--label-map",
                 "pituitary=tumor"]) == 2
    assert not (tmp_path / "o" / "audit.json").exists()


def test_apply_label_maps_refusals():
    import pandas as pd

    m = {"audited": pd.DataFrame({"label": pd.array(["a", "b"], dtype="string")}),
         "external": pd.DataFrame({"label": pd.array(["x", "y"], dtype="string")})}
    out = apply_label_maps(m, "x=a")
    assert list(out["external"]["label"]) == ["a", "y"] and "label_map" not in out["audited"].attrs
    with pytest.raises(InputError, match="external corpus's label map"):
        apply_label_maps(m, None, {"external": "a=b"})
    with pytest.raises(InputError, match="none of the labels of any corpus"):
        apply_label_maps(m, "q=r")


def _two_class_release(root: Path, seed: int, *, train: int, test: int) -> Path:
    """Classes a and b, ``train`` and ``test`` distinct noise images each per split."""
    for split, n in (("train", train), ("test", test)):
        for label in ("a", "b"):
            (root / split / label).mkdir(parents=True)
            for i in range(n):
                seed += 1
                _noise(seed).save(root / split / label / f"{i}.png")
    return root


@pytest.mark.slow
def test_identical_images_under_two_labels_inside_one_split(tmp_path):
    """A byte copy filed under another class inside the test split is a label conflict of
    its own; byte copies inside the test split are a summary line; rows without a label are
    <NA> in the issue table's label_conflict column, assessed rows True or False."""
    root = _two_class_release(tmp_path / "rel", 100, train=6, test=4)
    (root / "test" / "b" / "dup_of_a0.png").write_bytes((root / "test" / "a" / "0.png")
                                                        .read_bytes())
    (root / "test" / "a" / "dup_of_a1.png").write_bytes((root / "test" / "a" / "1.png")
                                                        .read_bytes())
    res = audit(root, out_dir=tmp_path / "out",
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"],
                                                transforms=0))
    recs = {r["id"]: r for r in res.document["records"]}
    within = recs["identity.label_conflict_within.test--test"]
    assert (within["numerator"], within["denominator"], within["details"]["pairs"]) == (2, 10, 1)
    assert recs["identity.label_conflict_within.train--train"]["numerator"] == 0
    verdicts = res.document["summary"]["verdicts"]
    assert any(v.startswith("LABEL CONFLICT within the test split: 20% (2 of 10 rows)")
               and v.endswith("(lists/label_conflicts).") for v in verdicts)
    assert any(v.startswith("Within the test split: 40% (4 of 10 rows) are byte-identical "
                            "copies of another test row; 2 of them are extra copies")
               and v.endswith("(lists/within_copies).") for v in verdicts)
    issues = res.issues.set_index("path")
    assert bool(issues.loc["test/b/dup_of_a0.png", "label_conflict"])
    assert bool(issues.loc["test/a/0.png", "label_conflict"])
    assert not bool(issues.loc["test/a/dup_of_a1.png", "label_conflict"])  # same label
    assert issues["label_conflict"].notna().all()  # every row has a label here


@pytest.mark.slow
def test_within_split_copies_and_conflicts_have_gates(tmp_path):
    from splitscope.core.conditions import evaluate_conditions, parse_condition

    root = _two_class_release(tmp_path / "rel", 300, train=5, test=4)
    (root / "test" / "b" / "again.png").write_bytes((root / "test" / "a" / "0.png").read_bytes())
    res = audit(root, out_dir=tmp_path / "out",
                fail_on=["within_split_copy_rate>0.1", "label_conflict_rate>0.5"],
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"],
                                                transforms=0))
    held = {c["metric"]: (c["value"], c["held"]) for c in res.document["fail_on"]}
    assert held["within_split_copy_rate"] == (pytest.approx(2 / 9), True)
    assert held["label_conflict_rate"] == (pytest.approx(2 / 9), False)
    assert res.exit_code == 1
    doc = res.document
    (none,) = evaluate_conditions([parse_condition("within_split_copy_rate>0")],
                                  [r for r in doc["records"]
                                   if "test → test" not in str(r.get("boundary"))],
                                  doc["layers"], [b["name"] for b in doc["boundaries"]])
    assert none["value"] in (0, None)  # train copies (none here) never stand for the test split


@pytest.mark.slow
def test_the_vocabularies_of_a_cross_corpus_boundary_are_compared_once(unmapped):
    """The conflict table and its records read one comparison of the two vocabularies."""
    res, calls = unmapped
    (rec,) = _conflicts(res)
    assert rec["status"] == "not assessed" and rec["details"]["vocabulary"]["shared"]
    boundaries = {r["boundary"]["name"] for r in res.document["records"]
                  if (r.get("boundary") or {}).get("kind") == "cross-corpus"
                  and (r.get("predicate") or {}).get("name", "").startswith("label_conflict_")}
    assert len(calls) == len(boundaries) == 1
