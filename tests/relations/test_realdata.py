"""Real releases (../shared/data) and the demo benchmark's planted list."""

from __future__ import annotations

import pytest

from splitscope.relations.duplicates import audit_duplicates
from splitscope.relations.options import SearchOptions

pytestmark = pytest.mark.realdata


@pytest.fixture(scope="module")
def kermany_result(kermany_scan):
    return audit_duplicates(kermany_scan, ["test->train"], SearchOptions(transforms=0))


@pytest.mark.slow
def test_kermany_test_train_counts(kermany_result):
    recs = {r.predicate["name"]: r for r in kermany_result.records
            if (r.boundary or {}).get("name") == "test → train"}
    sha = recs["sha256"]
    # measured: no byte-identical test file in train (a measured zero, not missing evidence)
    assert (sha.numerator, sha.denominator, sha.status) == (0, 624, "completed")
    assert sha.details["confirmation"]["groups_checked"] == 0
    ncc = recs["ncc_nearest"]
    sweep = {s["tau"]: s["affected"] for s in ncc.details["sweep"]}
    assert sweep[0.98] == ncc.numerator == 0
    assert sweep[0.9] > sweep[0.95] > 0 and sweep[0.99] == sweep[0.999] == 0
    screen, joint, ssum = (recs[p].numerator for p in ("hash_screen", "hash_joint", "hash_sum"))
    assert screen >= joint >= ssum  # every joint hit passes the screen; every sum hit is joint
    assert (screen, joint, ssum) == (114, 68, 0)  # coarse hashes collide on radiographs
    within = {r.boundary["name"]: r for r in kermany_result.records
              if r.predicate["name"] == "sha256_within"}
    assert within["test → test"].numerator == 12 and within["train → train"].numerator == 50


@pytest.mark.slow
def test_kermany_as_negative_control(planted_scan, kermany_scan):
    """METHODS §2.5: a clean chest X-ray release as the control of another audit: the coarse
    hash rules flag a large share of it (unreliable), NCC at 0.98 flags none."""
    result = audit_duplicates(planted_scan, ["test->train"], SearchOptions(transforms=0),
                              control=kermany_scan)
    recs = {r.predicate["name"]: r for r in result.records if "control" in r.details}
    for name in ("hash_screen", "hash_joint"):
        c = recs[name].details["control"]
        assert c["denominator"] == 624 and c["rate"] > 0.01 and c["unreliable"] is True
        assert "UNRELIABLE" in recs[name].conclusion
    ncc = recs["ncc_nearest"].details["control"]
    assert ncc["numerator"] == 0 and ncc["unreliable"] is False
    assert recs["ncc_nearest"].details["control"]["boundary"]["name"] == "test → train"


@pytest.mark.slow
def test_c3_within_set_byte_groups(shared_data, tmp_path_factory):
    from splitscope.features.scanning import scan

    root = shared_data / "c3-brain-mri-yes-no"
    s = scan(root, tmp_path_factory.mktemp("c3-ws"), progress=False)
    # no split: every row against itself
    result = audit_duplicates(s, None, SearchOptions(transforms=0))
    groups = result.tables["within_copies"]
    assert len(groups) == 22 and groups["n_rows"].sum() == 47
    assert (groups["label_relation"] == "consistent").all()
    four = groups[groups["n_rows"] == 4].iloc[0]
    assert four["paths"] == "yes/Y30.jpg | yes/Y38.jpg | yes/Y54.jpg | yes/Y70.jpg"
    assert four["labels"] == "yes"
    sha = next(r for r in result.records if r.predicate["name"] == "sha256")
    assert sha.numerator == 47 and sha.denominator == 253
