"""Group layer on real released lists (names only, no images): Kvasir-Capsule folds, the
Capsule Vision 2024 index and the Kermany chest X-ray file names."""

from __future__ import annotations

import pytest

import splitscope
from splitscope.boundary import boundary
from splitscope.groups.layer import audit_groups
from splitscope.groups.overlap import frame_gap_summary, frame_gaps, group_overlap
from splitscope.manifest import apply_group_regex

pytestmark = pytest.mark.realdata

KVASIR_RX = r"^(?P<group>[0-9a-f]{16})_(?P<frame>\d+)"
CV2024_KVASIR_RX = r"^(?P<group>[0-9a-f]{16})_(?P<frame>\d+)\.jpg$"  # video id = name prefix
KERMANY_RX = r"person(?P<group>\d+)_"


@pytest.fixture(scope="module")
def kvasir(shared_data):
    d = shared_data / "kvasir-capsule-splits"
    m = splitscope.build_manifest([splitscope.read_list(d / "split_0.csv", split="split_0"),
                                   splitscope.read_list(d / "split_1.csv", split="split_1")])
    return apply_group_regex(m, KVASIR_RX)


def test_kvasir_capsule_videos_in_both_folds(kvasir):
    fwd = group_overlap(kvasir, boundary(kvasir, "split_0", "split_1")).summary
    back = group_overlap(kvasir, boundary(kvasir, "split_1", "split_0")).summary
    assert (fwd["query_rows"], back["query_rows"]) == (23061, 24100)
    assert fwd["coverage"] == 1.0 and back["coverage"] == 1.0
    assert (fwd["query_groups"], fwd["reference_groups"], fwd["shared_groups"]) == (25, 25, 7)
    assert (fwd["affected_query_rows"], fwd["traceable_query_rows"]) == (5052, 23061)
    assert (back["affected_query_rows"], back["traceable_query_rows"]) == (2892, 24100)
    assert fwd["affected_reference_rows"] == back["affected_query_rows"]


def test_kvasir_capsule_frame_gaps(kvasir):
    g01 = frame_gap_summary(frame_gaps(kvasir, boundary(kvasir, "split_0", "split_1")))
    g10 = frame_gap_summary(frame_gaps(kvasir, boundary(kvasir, "split_1", "split_0")))
    assert g01["rows_with_gap"] == 5052 and g10["rows_with_gap"] == 2892
    assert g01["median"] == 9213.5 and (g01["q1"], g01["q3"]) == (4256.75, 20447.25)
    assert g10["median"] == 3633.5 and (g10["q1"], g10["q3"]) == (2168.0, 8144.25)
    assert g01["min"] == 201 and g10["min"] == 201  # no adjacent frames straddle the folds


def test_cv2024_kvasir_validation_videos_in_training(shared_data):
    from splitscope.provenance.association import source_label_association

    m = splitscope.build_manifest(
        shared_data / "cv2024" / "capsule_vision_2024_train_val_index.csv")
    m = apply_group_regex(m, CV2024_KVASIR_RX)
    # only KVASIR names carry a video prefix
    assert set(m.loc[m["group"].notna(), "source"].unique()) == {"KVASIR"}
    res = audit_groups(m, [boundary(m, "val", "train"),
                           boundary(m, "split=val&source=KVASIR", "train")], resplit=False,
                       n_resamples=200)
    rec = {r.id: r for r in res.records}
    allval = rec["group.overlap[val_train]"]
    assert (allval.numerator, allval.denominator) == (11581, 11581)
    assert allval.coverage["traceable"] == 11581 and allval.coverage["total"] == 16132
    assert allval.status == "partial"  # 4,551 validation rows of other sources untraceable
    kv = rec["group.overlap[split_val_source_kvasir_train]"]
    assert kv.coverage["share"] == 1.0 and kv.estimate == 1.0
    assert kv.details["summary"]["shared_groups"] == 41
    gap = rec["group.frame_gap[split_val_source_kvasir_train]"]
    assert gap.estimate == 1.0  # median: the neighbouring frame is in training
    a = source_label_association(m)
    assert a.n == 53739 and a.table.loc["AIIMS", "Worms"] == 226
    assert a.cramers_v == pytest.approx(0.5928, abs=1e-4)
    dom = a.dominant.set_index("label")
    assert dom.loc["Worms", "dominant_source"] == "AIIMS" and dom.loc["Worms", "dominant_share"] == 1


def test_kermany_patient_overlap_with_caveat(shared_data):
    m = splitscope.read_folder(shared_data / "kermany-chest-xray-224")
    res = audit_groups(m, group_regex=KERMANY_RX, resplit=False, n_resamples=200,
                       unresolved="person<N> ids may be numbered per split; a shared number "
                                  "may not be the same patient")
    ov = res.records[0]
    assert ov.id == "group.overlap[test_train]"
    assert (ov.numerator, ov.denominator) == (320, 390)
    assert ov.coverage == {"traceable": 390, "total": 624, "share": 0.625}
    assert ov.details["summary"]["shared_groups"] == 170
    assert "numbered per split" in ov.unresolved
    assert "conditional on traceability" in ov.conclusion
