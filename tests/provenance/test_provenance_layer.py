"""Audit entry points: records with every field, not-applicable records, demo detection."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from splitscope.groups.layer import audit_groups
from splitscope.provenance.checks import audit_provenance


def _manifest(groups=True):
    n = 40
    rng = np.random.default_rng(0)
    m = pd.DataFrame({
        "row": np.arange(n, dtype=np.int64),
        "path": pd.array([f"p{i % 12}_{i}.png" for i in range(n)], dtype="string"),
        "split": pd.array(["train"] * 30 + ["test"] * 10, dtype="string"),
        "label": pd.array(rng.choice(["a", "b"], n), dtype="string"),
        "source": pd.array(rng.choice(["s1", "s2"], n), dtype="string"),
        "group": pd.array([f"p{i % 12}" if groups else None for i in range(n)], dtype="string"),
        "frame": pd.array([i for i in range(n)], dtype="Int64"),
    })
    return m


def test_group_records_have_every_field_and_tables_are_row_keyed():
    m = _manifest()
    res = audit_groups(m, n_resamples=200, resplit=True)
    ov = next(r for r in res.records if r.id == "group.overlap[test_train]")
    for f in ("unit", "numerator", "denominator", "coverage", "estimate", "uncertainty",
              "conclusion", "unresolved", "scope"):
        assert getattr(ov, f) is not None, f
    assert ov.unit == "affected query row" and ov.denominator == 10
    assert ov.numerator == 10  # every test patient id 0..11 also occurs in train
    assert "conditional on traceability" in ov.conclusion
    assert ov.uncertainty.kind.startswith("group-resampling")
    gap = next(r for r in res.records if r.id == "group.frame_gap[test_train]")
    assert gap.status == "completed" and gap.estimate is not None
    assert {"group_overlap_test_train", "frame_gaps_test_train", "resplit",
            "resplit_folds"} <= set(res.tables)
    for name in ("group_overlap_test_train", "frame_gaps_test_train", "resplit"):
        assert {"row", "path"} <= set(res.tables[name].columns)
    from splitscope.records.schema import validate_record

    for r in res.records:
        validate_record(r.to_dict())  # JSON-ready and schema-valid


def test_not_applicable_without_groups_or_boundaries():
    res = audit_groups(_manifest(groups=False))
    assert [r.status for r in res.records] == ["not applicable"]
    assert "group" in res.records[0].reason
    m = _manifest()
    m["split"] = pd.array(["all"] * len(m), dtype="string")
    res = audit_groups(m)
    assert res.records[0].status == "not applicable" and "boundary" in res.records[0].reason


def test_partial_when_some_rows_untraceable_and_caveat_carried():
    m = _manifest()
    m.loc[35:, "group"] = pd.NA
    res = audit_groups(m, unresolved="ids may be numbered per split", resplit=False)
    ov = res.records[0]
    assert ov.status == "partial" and ov.coverage == {"traceable": 5, "total": 10, "share": 0.5}
    assert "numbered per split" in ov.unresolved and "5 of 10" in ov.unresolved


def test_provenance_on_a_manifest_without_scan():
    res = audit_provenance(_manifest(), n_resamples=100)
    by_id = {r.id: r for r in res.records}
    assert by_id["provenance.header_probe.within_pool"].status == "not assessed"
    assert by_id["provenance.source_label"].status == "completed"
    assert by_id["provenance.partition"].status == "not assessed"
    from splitscope.records.schema import validate_record

    for r in res.records:
        validate_record(r.to_dict())


@pytest.mark.slow
def test_demo_planted_shared_patients_found(demo_scan):
    sc, planted, _ = demo_scan
    res = audit_groups(sc.manifest, n_resamples=200, resplit=False)
    rows = res.tables["group_overlap_test_train"]
    found = set(rows.loc[rows["affected"], "path"])
    expected = set(planted.loc[planted["expected"].str.contains("group_overlap"), "query_path"])
    shared = set(planted.loc[planted["kind"] == "shared_group", "query_path"])
    assert shared and shared <= found
    assert found == expected  # nothing beyond the planted relations


@pytest.mark.slow
def test_demo_format_shortcut_detected(demo_scan):
    sc, planted, _ = demo_scan
    assert (planted["kind"] == "format_shortcut").any()
    res = audit_provenance(sc, n_resamples=500, partition=True, importance_repeats=3)
    by_id = {r.id: r for r in res.records}
    wp = by_id["provenance.header_probe.within_pool"]
    assert wp.status == "completed"
    assert wp.uncertainty.low > wp.details["chance"] + 0.1  # ≫ chance
    top = wp.details["top_fields"]
    assert {"format", "bytes_per_pixel", "jpeg_qt0", "jpeg_quality", "png_chunks",
            "file_size"} & set(top[:3])
    part = by_id["provenance.partition[test_train]"]
    assert part.status in ("completed", "partial")
    ctl = part.details["shuffled_control"]["auc"]
    assert ctl["low"] < 0.5 < ctl["high"]
    assert "provenance.partition.internal[train]" in by_id


@pytest.mark.slow
def test_demo_identity_recovery_and_schema(demo_scan):
    """Test rows inherit the patient id of their training counterpart: byte copies by bytes,
    re-encoded/resized/intensity-changed copies by NCC; every record validates."""
    from splitscope.groups.recovery import recover_from_scans
    from splitscope.records.schema import validate_record

    sc, planted, _ = demo_scan
    m = sc.manifest
    test = m.loc[m["split"] == "test", "row"].to_numpy()
    train = m.loc[m["split"] == "train", "row"].to_numpy()
    rec = recover_from_scans(sc, sc, query_rows=test, upstream_rows=train)
    mp = rec.mapping.set_index("path")
    for kind in ("byte_copy",):
        for p in planted.loc[planted["kind"] == kind, "query_path"]:
            assert mp.loc[p, "method"] == "bytes"
            assert mp.loc[p, "recovered_group"] == m.set_index("path").loc[p, "group"]
    for kind in ("lossy_reencode", "intensity", "resized"):
        for q, r in planted.loc[planted["kind"] == kind, ["query_path", "reference_path"]].values:
            assert mp.loc[q, "method"] == "ncc", (kind, q)
            assert mp.loc[q, "upstream_path"] == r
    # classes all occur upstream here, so the matcher check is not assessed
    assert rec.summary["matcher_check"] == "not assessed"
    res = audit_groups(sc.manifest, recovery=rec, n_resamples=100)
    assert "group_mapping" in res.tables
    for r in res.records:
        validate_record(r.to_dict())


#: The demo's provenance records (estimate, interval low, interval high) at the defaults, on the
#: demo as it is generated now, with the rows in their stable order (SHA-256, then path) before
#: any fold, sample or resample. The partition values are those of the converged logistic fits
#: (exact content features, Newton–Cholesky to a gradient of 1e-8): the same on every CPU, where
#: a loosely converged L-BFGS fit moved one query–reference pair between machines.
DEMO_PROVENANCE = {
    "provenance.header_probe.within_pool": (0.7747783251231527, 0.7303864158274065,
        0.8242020934184777),
    "provenance.header_probe.cross_split[test_train]": (0.7691007437457742, 0.670384002407329,
        0.8646113282368103),
    "provenance.partition[test_train]": (0.4641927083333333, 0.3891275803275453,
        0.5411514529421744),
    "provenance.partition.internal[train]": (0.5103036876355749, 0.40951725201167244,
        0.6126760136955995),
}


@pytest.mark.slow
def test_demo_provenance_records_unchanged(demo_scan):
    sc, _, _ = demo_scan
    res = audit_provenance(sc)
    by_id = {r.id: r for r in res.records}
    for rid, (est, low, high) in DEMO_PROVENANCE.items():
        r = by_id[rid]
        assert (r.estimate, r.uncertainty.low, r.uncertainty.high) == pytest.approx(
            (est, low, high), abs=1e-12), rid
    top = by_id["provenance.header_probe.within_pool"].details["importances"][0]
    assert top["feature"] == "bytes_per_pixel"
    assert top["importance"] == pytest.approx(0.11392482050291383, abs=1e-12)



@pytest.mark.slow
def test_demo_provenance_the_same_with_every_fit_in_worker_processes(demo_scan, fold_maps,
                                                                    monkeypatch):
    """The layer runs all its fits (both probes' folds and cross splits, the partition
    classifier and its controls) as one set of calls; in worker processes they give the records
    and tables of running them here, one after another."""
    from splitscope.provenance import stats

    sc, _, _ = demo_scan

    def records(result):
        return [{k: v for k, v in r.to_dict().items() if k not in ("inputs", "software")}
                for r in result.records]

    maps = fold_maps
    monkeypatch.setattr(stats, "_round_jobs", lambda requests, n, jobs: 1)
    here = audit_provenance(sc)
    monkeypatch.setattr(stats, "_round_jobs", lambda requests, n, jobs: 2)
    workers = audit_provenance(sc)
    # two maps each: per probe 5 folds + its single-field trees and the one cross split; the
    # partition classifier's 5 folds and 5 control folds for test vs train and train's
    # internal split; then both partitions' AUC intervals (the classifier with its control,
    # and each of the demo's two classes)
    assert maps == [(2 * (5 + 1 + 1) + 2 * 10, 1), (2 * (1 + 2), 1), (34, 2), (6, 2)]
    assert records(here) == records(workers)
    assert here.tables.keys() == workers.tables.keys()
    for name, table in here.tables.items():
        pd.testing.assert_frame_equal(table, workers.tables[name], check_exact=True)


def test_a_check_that_did_not_run_names_its_predicate_and_keeps_its_report_table():
    """The not-run records of the probes and the partition classifier name the predicate they
    would have measured, so the report shows them in that predicate's table."""
    from splitscope.boundary import release_boundaries
    from splitscope.core.protocol import record_roles
    from splitscope.provenance.predicates import HEADER_PROBE_WITHIN, IMAGE_STATS_WITHIN, PARTITION
    from splitscope.report.html import report_context

    res = audit_provenance(_manifest(), n_resamples=100)
    by_id = {r.id: r for r in res.records}
    for rid, name in (("provenance.header_probe.within_pool", HEADER_PROBE_WITHIN),
                      ("provenance.image_stats_probe.within_pool", IMAGE_STATS_WITHIN),
                      ("provenance.partition", PARTITION)):
        assert by_id[rid].status == "not assessed" and by_id[rid].predicate["name"] == name
    (b,) = [x.to_dict() for x in release_boundaries(_manifest())]
    doc = {"records": [r.to_dict() for r in res.records], "boundaries": [b], "inputs": []}
    (view,) = report_context(doc, roles=record_roles())["boundaries"]
    assert [r["id"] for r in view["header"]] == ["provenance.header_probe.within_pool"]
    assert [r["id"] for r in view["image_stats"]] == ["provenance.image_stats_probe.within_pool"]
    assert [r["id"] for r in view["partition"]] == ["provenance.partition"]


@pytest.mark.slow
def test_probes_one_after_another_give_the_same_records(demo_scan, monkeypatch, fold_maps):
    """Above TOGETHER_MAX_ROWS pool rows the probes and the partition classifier run one after
    another (one probe's matrices held at a time): every record and table is the one of
    running them together, and the fits go to more, smaller maps."""
    from splitscope.provenance import checks

    sc, _, _ = demo_scan
    together = audit_provenance(sc)
    maps_together = len(fold_maps)
    monkeypatch.setattr(checks, "TOGETHER_MAX_ROWS", 0)
    apart = audit_provenance(sc)
    assert len(fold_maps) - maps_together > maps_together  # more rounds, one probe each
    assert [r.id for r in apart.records] == [r.id for r in together.records]
    for a, b in zip(apart.records, together.records):
        da, db = a.to_dict(), b.to_dict()
        assert da == db, a.id
    assert sorted(apart.tables) == sorted(together.tables)
    for name, table in together.tables.items():
        pd.testing.assert_frame_equal(apart.tables[name], table, obj=name)


def test_provenance_folds_stay_within_the_runs_workers(monkeypatch):
    """``workers`` bounds every map of fold workers (``run_steps``'s limit) and the BLAS
    pools around the checks; the records are those of a run on every core."""
    from threadpoolctl import threadpool_info

    from splitscope.provenance import checks

    seen = []
    real = checks.run_steps

    def spy(steps, jobs=None, limit=None):
        seen.append((limit, max(p["num_threads"] for p in threadpool_info())))
        return real(steps, jobs, limit)

    monkeypatch.setattr(checks, "run_steps", spy)
    one = audit_provenance(_manifest(), n_resamples=100, workers=1)
    assert seen and all(limit == 1 and blas == 1 for limit, blas in seen)
    every_core = audit_provenance(_manifest(), n_resamples=100)
    assert seen[-1][0] is None
    assert [r.to_dict() for r in one.records] == [r.to_dict() for r in every_core.records]


def test_group_resamples_run_within_the_runs_workers(monkeypatch):
    from threadpoolctl import threadpool_info

    from splitscope.groups import overlap

    seen = []
    real = overlap.group_resampling_interval

    def spy(*args, **kwargs):
        seen.append(max(p["num_threads"] for p in threadpool_info()))
        return real(*args, **kwargs)

    monkeypatch.setattr(overlap, "group_resampling_interval", spy)
    one = audit_groups(_manifest(), n_resamples=200, workers=1)
    assert seen and set(seen) == {1}
    every_core = audit_groups(_manifest(), n_resamples=200)
    assert [r.to_dict() for r in one.records] == [r.to_dict() for r in every_core.records]
