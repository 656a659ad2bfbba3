"""Proposed group keys (METHODS §3.6): with no group key given, an identifier in the file or
folder names, or the DICOM PatientID, is proposed as a key and the overlap under it reported
as its own ``proposed`` record, which no metric, deduplicated split or re-split reads."""

from __future__ import annotations

import copy
import hashlib
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import splitscope
from splitscope.cli import main
from splitscope.groups.layer import audit_groups
from splitscope.groups.predicates import METRICS, PROPOSED_GROUP_KEY
from splitscope.groups.proposed_keys import (
    CANDIDATES,
    candidate_keys,
    plausibility,
    propose_group_key,
    with_patient_digests,
)
from splitscope.groups.reading import VERDICTS
from splitscope.manifest import apply_group_regex
from splitscope.records.metrics import evaluate, parse
from splitscope.records.schema import validate_record

#: train persons 0..39, two images each; test persons 30..49 (30..39 shared), one image each
TRAIN = [(p, i) for p in range(40) for i in range(2)]
TEST = [(p, 0) for p in range(30, 50)]


def _listed(tmp_path: Path, rows: list[tuple[str, str, str]], name: str = "release.csv",
            **columns) -> pd.DataFrame:
    """A manifest read from a list file of (path, split, label) rows (no image is read)."""
    table = pd.DataFrame(rows, columns=["path", "split", "label"]).assign(**columns)
    table.to_csv(tmp_path / name, index=False)
    return splitscope.build_manifest(tmp_path / name)


def _kermany_style(tmp_path: Path, name=lambda p, i: f"person{p}_virus_{i}.jpeg"):
    """TRAIN and TEST named by ``name``, and 40 rows named in another scheme without a
    person number (Kermany's NORMAL images)."""
    rows = [(f"train/PNEUMONIA/{name(p, i)}", "train", "PNEUMONIA") for p, i in TRAIN]
    rows += [(f"test/PNEUMONIA/{name(p, i)}", "test", "PNEUMONIA") for p, i in TEST]
    rows += [(f"{s}/NORMAL/IM-{k:04d}-0001.jpeg", s, "NORMAL")
             for s, n in (("train", 30), ("test", 10)) for k in range(n)]
    return _listed(tmp_path, rows)


def _records(result) -> dict:
    return {r.id: r for r in result.records}


def _same_keys(manifest: pd.DataFrame, regex: str, on: str = "basename") -> None:
    """The proposed regex given as a group key finds the proposed keys, row by row."""
    proposal = propose_group_key(manifest)
    given = apply_group_regex(manifest, regex, on=on)["group"]
    pd.testing.assert_series_equal(given.reset_index(drop=True),
                                   proposal.keys.reset_index(drop=True), check_names=False)


def test_kermany_style_person_numbers(tmp_path):
    m = _kermany_style(tmp_path)
    res = audit_groups(m, n_resamples=50)
    recs = _records(res)
    assert set(recs) == {"group.overlap", "group.proposed_key[test_train]"}
    na, rec = recs["group.overlap"], recs["group.proposed_key[test_train]"]
    assert na.status == "not applicable" and "person(?P<group>\\d+)" in na.reason
    assert rec.status == "proposed" and rec.predicate["name"] == PROPOSED_GROUP_KEY
    params = rec.predicate["params"]
    assert params["regex"] == r"person(?P<group>\d+)" and params["source"] == "file name"
    assert params["groups"] == 50 and params["rows_covered"] == 100 and params["rows"] == 140
    # 10 of the 20 traceable test rows belong to a person with train rows
    assert (rec.numerator, rec.denominator, rec.unit) == (10, 20, "query row")
    assert rec.estimate == pytest.approx(0.5)
    assert rec.coverage == {"traceable": 20, "total": 30, "share": pytest.approx(20 / 30),
                            "reference_traceable": 80, "reference_total": 110,
                            "reference_share": pytest.approx(80 / 110)}
    assert rec.details["confirm"] == r"--group-regex 'person(?P<group>\d+)'"
    assert "unconfirmed" in rec.conclusion and "not a measured group overlap" in rec.conclusion
    assert rec.outputs == ["proposed_group_overlap_test_train"]
    assert set(res.tables) == {"proposed_group_overlap_test_train"}  # no re-split
    validate_record(rec.to_dict())
    # the same figure as the explicit regex gives
    given = _records(audit_groups(m, group_regex=params["regex"], resplit=False,
                                  n_resamples=50))["group.overlap[test_train]"]
    assert (given.numerator, given.denominator) == (rec.numerator, rec.denominator)
    assert given.coverage["total"] == rec.coverage["total"]
    _same_keys(m, params["regex"])


@pytest.mark.parametrize(("name", "regex"), [
    (lambda p, i: f"patient-{p:04d}_{i}.png", r"patient-(?P<group>\d+)"),
    (lambda p, i: f"img_{i}_Patient_{p}.png", r"Patient_(?P<group>\d+)"),
    (lambda p, i: (f"PATIENT{p}_{i}.png" if p % 2 else f"patient_{p}_{i}.png"),
     r"(?i)patient[_-]?(?P<group>\d+)"),
    (lambda p, i: f"sub-{p:02d}_run{i}.png", r"(?:^|[^A-Za-z])sub-(?P<group>\d+)"),
    (lambda p, i: f"{p:05d}_{i}.png", r"^(?P<group>\d{3,})[_-]"),
])
def test_written_regex_is_the_narrowest_with_the_same_keys(tmp_path, name, regex):
    m = _kermany_style(tmp_path, name)
    proposal = propose_group_key(m)
    assert proposal.regex == regex
    _same_keys(m, regex)


def test_folder_names(tmp_path):
    rows = [(f"train/patient{p:04d}/{i}.png", "train", "a") for p, i in TRAIN]
    rows += [(f"test/patient{p:04d}/{i}.png", "test", "a") for p, i in TEST]
    m = _listed(tmp_path, rows)
    rec = _records(audit_groups(m, n_resamples=50))["group.proposed_key[test_train]"]
    params = rec.predicate["params"]
    assert params["source"] == "folder" and params["on"] == "path"
    assert params["regex"] == r"patient(?P<group>\d+)[^/]*/"
    assert (rec.numerator, rec.denominator) == (10, 20)
    # --group-regex reads the file name only: the hint names the way that reads the path
    assert "on='path'" in rec.details["confirm"] and "--group-column" in rec.details["confirm"]
    _same_keys(m, params["regex"], on="path")


def _dicom_release(root: Path) -> None:
    """root/<split>/a/img_<k>.dcm: CT_small with a PatientID per person of TRAIN / TEST and
    pixels changed per file (no byte copies)."""
    pydicom = pytest.importorskip("pydicom")
    from pydicom.data import get_testdata_file

    base = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    for split, people in (("train", TRAIN), ("test", TEST)):
        folder = root / split / "a"
        folder.mkdir(parents=True)
        for k, (p, i) in enumerate(people):
            ds = copy.deepcopy(base)
            ds.PatientID = f"PAT{p:03d}"
            pixels = ds.pixel_array.copy()
            pixels[0, : k % 100 + 1] = 100 + i
            ds.PixelData = pixels.tobytes()
            buf = io.BytesIO()
            ds.save_as(buf)
            (folder / f"img_{k}.dcm").write_bytes(buf.getvalue())


def test_dicom_patient_id(tmp_path):
    from splitscope.features.scanning import scan
    from splitscope.provenance.header_probe import header_columns

    _dicom_release(tmp_path / "rel")
    s = scan(tmp_path / "rel", tmp_path / "ws", workers=1, progress=False)
    digests = s.features["dicom_PatientID_digest"]
    assert digests.notna().all()
    assert hashlib.sha256(b"PAT030").hexdigest()[:16] in set(digests)
    # the identifier itself is nowhere in the features; the digest is no probe input
    assert not s.features.astype(str).apply(lambda c: c.str.contains("PAT0")).any().any()
    assert "dicom_PatientID_digest" not in header_columns()
    res = audit_groups(with_patient_digests(s.manifest, s), n_resamples=50)
    rec = _records(res)["group.proposed_key[test_train]"]
    params = rec.predicate["params"]
    assert params["source"] == "DICOM PatientID" and params["regex"] is None
    assert (rec.numerator, rec.denominator) == (10, 20) and params["groups"] == 50
    assert "--group-column" in rec.details["confirm"]
    validate_record(rec.to_dict())


def test_names_without_identifier_stay_as_today(tmp_path):
    rows = [(f"train/a/img_{k}.png", "train", "a") for k in range(60)]
    rows += [(f"test/a/img_{k}.png", "test", "a") for k in range(20)]
    m = _listed(tmp_path, rows)
    assert propose_group_key(m) is None
    res = audit_groups(m, n_resamples=50)
    today = audit_groups(m, n_resamples=50, propose_key=False)
    assert [r.to_dict() for r in res.records] == [r.to_dict() for r in today.records]
    assert [r.id for r in res.records] == ["group.overlap"]
    assert res.records[0].reason.startswith("no group keys")


def test_a_given_key_makes_no_proposal(tmp_path):
    m = _kermany_style(tmp_path)
    given = audit_groups(m, group_regex=r"person(?P<group>\d+)_", n_resamples=50)
    assert not [r for r in given.records if r.status == "proposed"]
    assert "group.overlap[test_train]" in _records(given)
    # a regex that matches nothing is a key given: no proposal, the reason says why
    none = audit_groups(m, group_regex=r"^nobody(?P<group>\d+)", n_resamples=50)
    assert [r.id for r in none.records] == ["group.overlap"]
    assert "matched none" in none.records[0].reason
    # so is a list's group column, even an empty one
    rows = [(f"train/person{p}_{i}.png", "train", "a") for p, i in TRAIN]
    rows += [(f"test/person{p}_{i}.png", "test", "a") for p, i in TEST]
    listed = _listed(tmp_path, rows, "grouped.csv", patient_id="")
    assert listed["group"].isna().all()
    assert not [r for r in audit_groups(listed, n_resamples=50).records
                if r.status == "proposed"]


@pytest.mark.parametrize(("keys", "why"), [
    ([f"{k}" for k in range(100)], "a number per file"),
    (["a"] * 50 + ["b"] * 50, "a few large groups"),
    ([f"{k // 2}" for k in range(40)] + [None] * 60, "under 50%"),
    ([f"{k // 2}" for k in range(90)] + ["big"] * 30, "largest group of 30 rows"),
])
def test_implausible_keys(keys, why):
    verdict = plausibility(pd.Series(keys, dtype="string"))
    assert not verdict["plausible"] and why in verdict["why_not"]


def test_plausible_key():
    keys = pd.Series([f"{k // 2}" for k in range(60)] + [f"s{k}" for k in range(40)],
                     dtype="string")
    v = plausibility(keys)
    assert v["plausible"] and v["why_not"] is None
    assert (v["groups"], v["median_rows_per_group"], v["largest_group_rows"]) == (70, 1.0, 2)
    assert v["repeated_share"] == pytest.approx(0.6)


def test_more_rows_win_and_ties_go_to_the_earlier_candidate(tmp_path):
    # every name has a person number; only the train names have a case number
    rows = [(f"train/a/person{p}_case{p % 20}_{i}.png", "train", "a") for p, i in TRAIN]
    rows += [(f"test/a/person{p}_{i}.png", "test", "a") for p, i in TEST]
    m = _listed(tmp_path, rows)
    p = propose_group_key(m)
    assert p.candidate.name == "person number"
    tried = {t["candidate"]: t for t in p.tried}
    assert tried["case number"]["rows_covered"] == 80 < tried["person number"]["rows_covered"]
    assert [t["candidate"] for t in p.tried] == [c.name for c in CANDIDATES[1:]]


def test_fail_on_group_overlap_rate_still_not_measured(tmp_path, capsys):
    m = _kermany_style(tmp_path)
    docs = [r.to_dict() for r in audit_groups(m, n_resamples=50).records]
    outcome = evaluate([parse("group_overlap_rate>0", METRICS)], docs, METRICS,
                       boundaries=["test → train"])[0]
    assert outcome["value"] is None and outcome["records"] == [] and not outcome["held"]
    code = main(["groups", str(tmp_path / "release.csv"), "--fail-on", "group_overlap_rate>0"])
    captured = capsys.readouterr()
    # the verb's gate, as without a proposal: not measured, so not held (the audit's exits 5)
    assert code == 0 and "group_overlap_rate>0: not measured → not held" in captured.err
    assert "Proposed group key (unconfirmed)" in " ".join(captured.out.split())


def test_verdict_line_names_the_proposal_instead_of_not_applicable(tmp_path):
    m = _kermany_style(tmp_path)
    res = audit_groups(m, n_resamples=50)
    doc = {"records": [r.to_dict() for r in res.records],
           "boundaries": [next(r.boundary for r in res.records if r.boundary)]}
    lines = [line for v in VERDICTS for line in v.lines(doc)]
    assert lines == [("Proposed group key (unconfirmed) person(?P<group>\\d+) from the file "
                      "names: 10 of 20 traceable test rows (50%) share a key with train; "
                      "confirm with --group-regex 'person(?P<group>\\d+)'.")]
    plain = audit_groups(m, n_resamples=50, propose_key=False)
    doc = {"records": [r.to_dict() for r in plain.records], "boundaries": doc["boundaries"]}
    assert next(line for v in VERDICTS for line in v.lines(doc)).startswith(
        "Group overlap: not applicable — no group keys")


def _image_release(root: Path) -> None:
    """root/<split>/PNEUMONIA/person<p>_virus_<i>.png, small random images, and two test
    images that are byte copies of train images (so the deduplicated split removes rows)."""
    rng = np.random.default_rng(0)
    for split, people in (("train", TRAIN), ("test", TEST)):
        folder = root / split / "PNEUMONIA"
        folder.mkdir(parents=True)
        for p, i in people:
            pixels = rng.integers(0, 256, (24, 24), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"person{p}_virus_{i}.png")
    for p in (31, 45):
        (root / "test" / "PNEUMONIA" / f"person{p}_virus_0.png").write_bytes(
            (root / "train" / "PNEUMONIA" / "person3_virus_1.png").read_bytes())


def _dedup_lists(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "lists" / "dedup").glob("*.csv"))}


@pytest.mark.slow
def test_audit_proposal_changes_no_dedup_split_and_no_resplit(tmp_path, monkeypatch):
    from splitscope.core.options import AuditOptions
    from splitscope.core.run import audit
    from splitscope.groups import layer
    from splitscope.records.schema import validate

    _image_release(tmp_path / "rel")

    def run(name: str):
        return audit(tmp_path / "rel", out_dir=tmp_path / name,
                     fail_on=["group_overlap_rate>0"],
                     options=AuditOptions.from_flags(workers=1, progress=False,
                                                     workspace=tmp_path / "ws",
                                                     layers=["duplicates", "groups"],
                                                     transforms=0))

    proposed = run("proposed")
    doc = proposed.document
    validate(doc)
    rec = next(r for r in doc["records"] if r["id"] == "group.proposed_key[test_train]")
    assert rec["status"] == "proposed" and (rec["numerator"], rec["denominator"]) == (10, 20)
    groups = next(layer for layer in doc["layers"] if layer["layer"] == "groups")
    assert groups["status"] == "not applicable" and "proposed" in groups["reason"]
    assert not [r for r in doc["records"] if r["id"].startswith("group.resplit")]
    assert not list((tmp_path / "proposed" / "lists").glob("resplit*"))
    assert any(v.startswith("Proposed group key (unconfirmed) person(?P<group>\\d+)")
               for v in doc["summary"]["verdicts"])
    assert not any(v.startswith("Group overlap: not applicable")
                   for v in doc["summary"]["verdicts"])
    gate = doc["fail_on"][0]
    assert gate["value"] is None and gate["records"] == [] and not gate["held"]
    assert gate["outcome"] == "not measured" and proposed.exit_code == 5  # never on a proposal
    assert any(line.startswith("--fail-on group_overlap_rate>0: not measured → the gate fails "
                               "(exit 5)") for line in doc["summary"]["lines"])
    # the issue table and the composition figure know no shared group from a proposal
    assert "group_shared" not in proposed.issues.columns

    monkeypatch.setattr(layer, "propose_group_key", lambda table, *a: None)
    plain = run("plain")
    assert not [r for r in plain.document["records"] if r["status"] == "proposed"]
    dedup = _dedup_lists(tmp_path / "proposed")
    assert dedup["test_removed.csv"].count(b"person") == 2  # the two byte copies
    assert dedup == _dedup_lists(tmp_path / "plain")


@pytest.mark.realdata
def test_kermany_proposed_key_matches_the_explicit_regex(shared_data):
    m = splitscope.read_folder(shared_data / "kermany-chest-xray-224")
    rec = _records(audit_groups(m, n_resamples=50))["group.proposed_key[test_train]"]
    params = rec.predicate["params"]
    assert params["regex"] == r"person(?P<group>\d+)" and params["source"] == "file name"
    assert (rec.numerator, rec.denominator) == (320, 390)
    assert rec.coverage["total"] == 624 and rec.coverage["reference_traceable"] == 3875
    given = _records(audit_groups(m, group_regex=r"person(?P<group>\d+)_", resplit=False,
                                  n_resamples=50))["group.overlap[test_train]"]
    assert (given.numerator, given.denominator) == (320, 390)
    assert given.details["summary"]["shared_groups"] == rec.details["summary"]["shared_groups"]


def test_names_that_are_not_valid_utf8_are_searched_with_the_rest():
    m = pd.DataFrame({"basename": pd.Series(["person1_\udce9.png", "person2_a.png", None],
                                            dtype=object)})
    assert candidate_keys(m, CANDIDATES[1]).tolist() == ["1", "2", pd.NA]
