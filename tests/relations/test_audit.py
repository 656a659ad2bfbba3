"""The audit entry point on a synthetic release with planted relations (known answers)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from relations_helpers import PLANTED, mini_scan

from splitscope.boundary import Boundary, Population
from splitscope.errors import InputError
from splitscope.relations.boundary_relations import resolve_boundaries
from splitscope.relations.controls import control_rate
from splitscope.relations.duplicates import audit_duplicates
from splitscope.relations.options import SearchOptions

HASHES = ["hash_screen", "hash_joint", "hash_sum", "hash_exact_phash"]
NEAR = HASHES + ["ncc_nearest"]
#: planted kind → predicates that must flag the query (all others listed in MUST_MISS must not)
MUST_FLAG = {
    "byte_copy": ["sha256", "basename", *NEAR],
    "renamed_copy": ["sha256", *NEAR],
    "label_conflict": ["sha256", *NEAR],
    "re_encode": ["pixel_xxh128", *NEAR],
    "resize": ["ncc_nearest", "hash_screen", "hash_joint", "hash_sum"],
    "brightness_contrast": ["ncc_nearest", "hash_screen", "hash_joint", "hash_sum"],
    "crop": [],
    "rotate_small": [],
    "flip_lr": ["ncc_nearest_dihedral", "hash_joint_dihedral"],
    "rot90": ["ncc_nearest_dihedral", "hash_joint_dihedral"],
}
MUST_MISS = {
    "byte_copy": ["pixel_xxh128", "ncc_nearest_dihedral"],
    "renamed_copy": ["basename", "pixel_xxh128"],
    "re_encode": ["sha256", "basename"],
    "resize": ["sha256", "pixel_xxh128"],
    "brightness_contrast": ["sha256", "pixel_xxh128"],
    "crop": ["sha256", "ncc_nearest", *HASHES],  # hashes miss crops, as the method predicts
    "rotate_small": ["sha256", *HASHES],
    "flip_lr": ["sha256", *NEAR],  # found only with the dihedral option
    "rot90": ["sha256", *NEAR],
}


@pytest.fixture(scope="module")
def audited(planted_scan, tmp_path_factory):
    out = tmp_path_factory.mktemp("exports")
    result = audit_duplicates(planted_scan, ["test->train"],
                              SearchOptions(dihedral=True, transforms=0), out_dir=out)
    return result, out


def _flags(result) -> pd.DataFrame:
    return result.tables["query_flags"].set_index("path")


@pytest.mark.slow
@pytest.mark.parametrize("kind,query,reference", PLANTED)
def test_planted_relation_found_by_the_right_predicates(audited, planted_scan, kind, query,
                                                        reference):
    result, _ = audited
    f = _flags(result).loc[query]
    for pred in MUST_FLAG[kind]:
        assert f[pred] is True or bool(f[pred]), f"{kind}: {pred} should flag {query}"
    for pred in MUST_MISS.get(kind, []):
        assert not bool(f[pred]), f"{kind}: {pred} should not flag {query}"
    ref_row = int(planted_scan.manifest.set_index("path").loc[reference, "row"])
    if "ncc_nearest" in MUST_FLAG[kind]:
        assert f["ncc_nearest_counterpart"] == ref_row
    if "ncc_nearest_dihedral" in MUST_FLAG[kind]:
        assert f["ncc_nearest_dihedral_counterpart"] == ref_row
        assert f["ncc_nearest_dihedral_variant"] == kind  # flip_lr / rot90
        assert f["ncc_nearest_dihedral_only"]


def test_records_units_denominators_and_status(audited):
    result, _ = audited
    recs = {r.id: r for r in result.records}
    sha = recs["identity.sha256.test--train"]
    assert (sha.numerator, sha.denominator, sha.unit) == (3, 18, "affected query row")
    # renamed.png and conflict.png carry other names than their train originals
    assert sha.details["renamed_groups"] == 2 and sha.details["label_disjoint_groups"] == 1
    assert sha.details["confirmation"]["groups_checked"] == 3
    assert sha.details["confirmation"]["groups_mismatched"] == 0
    ncc = recs["near_duplicate.ncc_nearest.test--train"]
    # broken.png (unreadable) and flat.png (zero variance) are not assessed, still counted
    assert ncc.denominator == 18 and ncc.coverage == {"assessed": 16, "total": 18}
    assert ncc.status == "partial" and "2 query row" in ncc.reason
    assert ncc.details["flat_query_rows"] == 1
    assert ncc.predicate["params"]["thumb_size"] == 96
    assert ncc.predicate["params"]["interpolation"] == "bicubic"
    assert [s["tau"] for s in ncc.details["sweep"]] == [0.9, 0.95, 0.98, 0.99, 0.995, 0.999]
    aff = [s["affected"] for s in ncc.details["sweep"]]
    assert aff == sorted(aff, reverse=True)
    assert ncc.numerator == next(s["affected"] for s in ncc.details["sweep"] if s["tau"] == 0.98)
    dih = recs["near_duplicate.ncc_nearest_dihedral.test--train"]
    assert dih.details["dihedral_only_rows"] == 2
    assert dih.details["variants"] == {"flip_lr": 1, "rot90": 1}
    by_label = {d["label"]: d for d in sha.details["by_label"]}
    assert by_label["B"]["affected"] == 1  # the label conflict, filed under B
    within = recs["identity.within_copies.train--train"]
    assert within.numerator == 2 and within.details["extra_copies"] == 1


def test_counterpart_rules_in_the_pair_table(audited):
    result, _ = audited
    pairs = result.tables["pairs"]
    for col in ("row", "path", "reference_row", "reference_path", "d_p", "d_d", "rho", "ssim",
                "rules", "counterpart_rules", "thumb_size", "interpolation", "variant"):
        assert col in pairs.columns
    copy = pairs[pairs["path"] == "test/A/a00.png"].iloc[0]
    assert copy["d_p"] == 0 and copy["d_d"] == 0 and copy["rho"] > 0.9999
    assert copy["ssim"] == pytest.approx(1.0)
    assert "nearest" in copy["counterpart_rules"] and "first_candidate" in \
        copy["counterpart_rules"]
    flip = pairs[(pairs["path"] == "test/A/flip.png") & (pairs["variant"] == "flip_lr")]
    assert len(flip) == 1 and flip["rho"].iloc[0] > 0.999


def test_exports_written_and_verifiable(audited):
    result, out = audited
    manifest = json.loads((out / "artifacts.json").read_text())["distribution"]
    names = {m["contentUrl"] for m in manifest}
    assert {"pairs.parquet", "contaminated.csv", "dedup_splits.csv"} <= names
    assert "contaminated/sha256__test_train.csv" in names
    assert "dedup/test_removed.csv" in names and "dedup/train_kept.csv" in names
    for m in manifest:
        assert hashlib.sha256((out / m["contentUrl"]).read_bytes()).hexdigest() == m["sha256"]
    pairs = pd.read_parquet(out / "pairs.parquet")
    assert len(pairs) == len(result.tables["pairs"])
    dedup = result.tables["dedup_splits"].set_index("path")
    assert not dedup.loc["test/A/a00.png", "kept"]
    assert "sha256 (test → train)" in dedup.loc["test/A/a00.png", "removed_by"]
    assert dedup.loc["test/A/crop.png", "kept"] and dedup.loc["train/B/b10.png", "kept"]
    assert "sha256_within" in dedup.loc["train/B/b10_copy.png", "removed_by"]
    assert all(r.outputs for r in result.records)


def test_negative_control_on_a_clean_boundary(planted_scan):
    m = planted_scan.manifest
    clean = m.loc[m["path"].str.contains("clean"), "row"].to_numpy(np.int64)
    train = m.loc[m["split"] == "train", "row"].to_numpy(np.int64)
    control = Boundary(Population("clean", np.sort(clean)), Population("train", np.sort(train)))
    result = audit_duplicates(planted_scan, ["test->train"], SearchOptions(transforms=0),
                              control=control)
    ncc = next(r for r in result.records if r.predicate["name"] == "ncc_nearest")
    assert ncc.details["control"]["rate"] == 0 and ncc.details["control"]["denominator"] == 6
    assert ncc.details["control"]["unreliable"] is False
    assert ncc.details["control"]["boundary"]["query"] == {"name": "clean", "rows": 6}


def test_control_rate_marks_unreliable():
    c = control_rate([True, False, False, pd.NA, False] * 10, bound=0.1)
    assert (c["numerator"], c["denominator"], c["not_assessed"]) == (10, 40, 10)
    assert c["rate"] == 0.25 and c["unreliable"]
    assert not control_rate([False] * 5)["unreliable"]


def test_within_boundary_never_matches_itself(planted_scan):
    result = audit_duplicates(planted_scan, [("train", "train")], SearchOptions(transforms=0))
    f = result.tables["query_flags"].set_index("path")
    assert bool(f.loc["train/B/b10.png", "sha256"]) and bool(f.loc["train/B/b10_copy.png",
                                                                   "ncc_nearest"])
    assert f["ncc_nearest"].fillna(False).astype(bool).sum() == 2
    assert f["hash_exact_phash"].fillna(False).astype(bool).sum() == 2


def test_cross_corpus_containment(planted_root):
    s = mini_scan([planted_root / "train", planted_root / "test"])
    result = audit_duplicates(s, [("corpus=test", "corpus=train")], SearchOptions(transforms=0))
    recs = {r.predicate["name"]: r for r in result.records}
    assert recs["containment_byte"].numerator == 3
    both = recs["containment_byte_or_ncc"]
    assert both.numerator == 6 and both.details["cleaned_external_rows"] == 18 - 6
    table = result.tables["containment"]
    assert len(table) == 18 and int(table["kept"].sum()) == 12
    assert not table.set_index("path").loc["A/a00.png", "kept"]


def test_resolve_boundaries_inputs(planted_scan):
    m = planted_scan.manifest
    assert [b.name for b in resolve_boundaries(m)] == ["test → train"]
    assert resolve_boundaries(m, "test->train")[0].reference.size == 15
    with pytest.raises(InputError, match="no rows"):
        resolve_boundaries(m, ("val", "train"))
    with pytest.raises(InputError, match="cannot read boundary"):
        resolve_boundaries(m, ["test"])


def test_records_match_the_schema(audited):
    schema = pytest.importorskip("splitscope.records.schema")
    result, _ = audited
    for rec in result.records:
        schema.validate_record(rec.to_dict())


def test_near_duplicates_take_the_scans_flatness(planted_scan):
    """The NCC search takes each thumbnail's flatness from the scan's ``flat`` column (no
    extra pass over the store); without that column it finds the same flatness itself."""
    from splitscope.relations.near_duplicate import near_duplicates

    rows = planted_scan.rows()
    b = resolve_boundaries(planted_scan.manifest, ["test->train"])[0]
    with_column = near_duplicates(rows, planted_scan.thumbs, b)
    without = near_duplicates(rows.drop(columns="flat"), planted_scan.thumbs, b)
    pd.testing.assert_frame_equal(with_column.flags, without.flags)
    pd.testing.assert_frame_equal(with_column.pairs, without.pairs)
    # the column is what the search used: marked flat, a row is no longer assessed for NCC
    marked = rows.copy()
    marked["flat"] = pd.array([True] * len(marked), dtype="boolean")
    none_left = near_duplicates(marked, planted_scan.thumbs, b)
    assert none_left.assessed["ncc_nearest"] == 0 < with_column.assessed["ncc_nearest"]


@pytest.mark.slow
def test_the_audits_workers_reach_both_searches_with_the_same_findings(planted_scan, audited,
                                                                      monkeypatch):
    """``workers`` reaches the hash search's threads and the NCC search's BLAS threads,
    plain and dihedral, and bounds the BLAS pools around them; the findings are those of a
    run on every core."""
    from threadpoolctl import threadpool_info

    from splitscope.relations import near_duplicate

    seen = []

    def spy(name, real):
        def call(*args, **kwargs):
            blas = max(p["num_threads"] for p in threadpool_info())
            seen.append((name, kwargs.get("workers"), blas))
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(near_duplicate, "hash_search",
                        spy("hash", near_duplicate.hash_search))
    monkeypatch.setattr(near_duplicate, "ncc_search", spy("ncc", near_duplicate.ncc_search))
    one = audit_duplicates(planted_scan, ["test->train"],
                           SearchOptions(dihedral=True, transforms=0), workers=1)
    assert {name for name, _, _ in seen} == {"hash", "ncc"}
    assert len(seen) > 2  # the dihedral variants search too
    assert all(workers == 1 and blas == 1 for _, workers, blas in seen)
    every_core, _ = audited
    for name in ("query_flags", "pairs", "contaminated"):
        pd.testing.assert_frame_equal(one.tables[name], every_core.tables[name], obj=name)
