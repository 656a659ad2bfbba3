"""The one-command audit on a tiny folder release whose file name and label are markup:
audit.json validates, every layer is recorded, outputs are fingerprinted, the report escapes
every input string, and --fail-on sets the exit code exactly when its condition holds."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image
from reportkit import EVIL

from splitscope.cli import app, main
from splitscope.core.options import AuditOptions
from splitscope.core.protocol import AuditContext, layer_names, run_layer
from splitscope.core.run import audit
from splitscope.errors import InputError
from splitscope.records.schema import validate

LAYER_NAMES = set(layer_names())


def _image(seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).resize(
        (64, 64), Image.BICUBIC)


def make_release(root: Path) -> Path:
    """train/{NORMAL,EVIL}/ 6 images each, test/ 3 each, plus one byte copy of a training
    image filed in test under a markup name."""
    seed = 0
    for split, n in (("train", 6), ("test", 3)):
        for label in ("NORMAL", EVIL):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                seed += 1
                _image(seed).save(folder / f"{split}_{i}.png")
    shutil.copy(root / "train" / "NORMAL" / "train_0.png", root / "test" / "NORMAL" / f"{EVIL}.png")
    return root


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return make_release(tmp_path_factory.mktemp("rel") / "release")


@pytest.fixture(scope="module")
def full(release, tmp_path_factory):
    out = tmp_path_factory.mktemp("audit") / "out"
    return audit(release, out_dir=out, fail_on=["byte_identical_rows>=1", "ncc_rate>0.5"],
                 options=AuditOptions.from_flags(workers=1, progress=False))


@pytest.mark.slow
def test_audit_json_validates_and_records_every_layer(full):
    doc = json.loads(full.audit_json.read_text())
    validate(doc)
    assert {l["layer"] for l in doc["layers"]} == LAYER_NAMES
    by_layer = {l["layer"]: l for l in doc["layers"]}
    assert by_layer["evaluation"]["status"] == "not applicable"
    assert by_layer["external"]["status"] == "not applicable"
    assert by_layer["groups"]["status"] == "not applicable"  # no group key in this release
    ids = {r["id"]: r for r in doc["records"]}
    assert ids["evaluation.not_applicable"]["reason"].startswith("no saved predictions")
    byte = ids["identity.sha256.test--train"]
    assert (byte["numerator"], byte["denominator"], byte["status"]) == (1, 7, "completed")
    assert all(r["inputs"] and r["software"] for r in doc["records"])
    assert doc["inputs"][0]["role"] == "audited" and len(doc["inputs"][0]["sha256"]) == 64


@pytest.mark.slow
def test_fail_on_outcome_and_summary(full):
    doc = full.document
    held = {c["condition"]: c["held"] for c in doc["fail_on"]}
    assert held == {"byte_identical_rows>=1": True, "ncc_rate>0.5": False}
    assert full.exit_code == 1 and doc["run"]["exit_code"] == 1
    first = next(v for v in doc["summary"]["verdicts"] if "near-twin" in v)
    assert first.startswith("14.3% of the test split (1 of 7 rows) has a near-twin in train")
    assert "NCC ≥ 0.98, 96², bicubic" in first


@pytest.mark.slow
def test_artifacts_are_fingerprinted(full):
    doc = full.document
    paths = {a["path"] for a in doc["artifacts"]}
    assert "lists/manifest.csv" in paths and any(p.startswith("lists/pairs") for p in paths)
    for a in doc["artifacts"]:
        data = (full.out_dir / a["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == a["sha256"] and len(data) == a["bytes"]
    manifest = json.loads((full.out_dir / "artifacts.json").read_text())
    listed = {e["contentUrl"]: e["sha256"] for e in manifest["distribution"]}
    for name in ("audit.json", "report.html"):
        assert listed[name] == hashlib.sha256((full.out_dir / name).read_bytes()).hexdigest()


@pytest.mark.slow
def test_markup_file_name_and_label_render_as_text(full):
    html = full.report.read_text()
    assert "<img src=x" not in html
    escaped = "&lt;img src=x onerror=alert(1)&gt;"
    assert f"test/NORMAL/{escaped}.png" in html  # the file name, in the gallery
    assert f"label: {escaped}" in html or f"{escaped} " in html  # the label
    assert full.report.stat().st_size < 5_000_000


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """One feature cache for the CLI runs of this module (reused across runs)."""
    return tmp_path_factory.mktemp("ws") / "workspace"


def _cli(args):
    return CliRunner().invoke(app, args, catch_exceptions=False)


@pytest.mark.slow
@pytest.mark.parametrize("condition, code", [
    ("byte_identical_rate>0", 1), ("byte_identical_rate>0.5", 0), ("byte_identical_rows==1", 1),
    ("ncc_rows<1", 0),
])
def test_cli_fail_on_exit_code(release, tmp_path, workspace, condition, code):
    res = _cli(["audit", str(release), "--out", str(tmp_path / "o"), "--workers", "1",
                "--workspace", str(workspace),
                "--layers", "duplicates", "--fail-on", condition, "--json"])
    assert res.exit_code == code, res.output
    payload = json.loads(res.stdout)
    assert payload["fail_on"][0]["held"] is bool(code)
    assert payload["exit_code"] == code
    assert {l["layer"] for l in payload["layers"]} == LAYER_NAMES


def test_cli_input_errors_exit_2(release, tmp_path):
    assert main(["audit", str(release), "--fail-on", "nonsense>1",
                 "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()  # rejected before any work
    assert main(["audit", str(release), "--layers", "everything",
                 "--out", str(tmp_path / "o")]) == 2
    single = tmp_path / "single"
    (single / "a").mkdir(parents=True)
    _image(1).save(single / "a" / "x.png")  # one row: nothing to compare
    assert main(["audit", str(single), "--out", str(tmp_path / "o2"), "--workers", "1"]) == 2


def test_a_failing_layer_is_recorded_and_exits_3(release, tmp_path, monkeypatch):
    import splitscope.relations.layer as rel

    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(rel, "audit_duplicates", boom)
    res = audit(release, out_dir=tmp_path / "o",
                options=AuditOptions.from_flags(workers=1, progress=False,
                                                layers=["duplicates", "evaluation"]))
    assert res.exit_code == 3
    rec = next(r for r in res.document["records"] if r["layer"] == "duplicates")
    assert rec["status"] == "not assessed" and "RuntimeError: disk on fire" in rec["reason"]
    assert "traceback" in rec["details"]
    assert any("disk on fire" in line for line in res.document["summary"]["lines"])
    assert (tmp_path / "o" / "audit.json").is_file() and (tmp_path / "o" / "report.html").is_file()
    validate(res.document)
    not_run = {l["layer"]: l for l in res.document["layers"]}
    assert not_run["groups"]["status"] == "not assessed"
    assert not_run["groups"]["reason"].startswith("not requested")


class _Layer:
    """A layer whose run is the given function."""

    def __init__(self, name, run):
        self.name, self._run = name, run

    def run(self, context):
        return self._run(context)


def _context(tmp_path) -> AuditContext:
    return AuditContext(scan=None, boundaries=[], options=None, record_inputs=[],
                        lists_dir=tmp_path)


def test_run_layer_outcomes(tmp_path, monkeypatch):
    from splitscope.core import protocol

    monkeypatch.setattr(protocol, "_IMPORT_ERRORS",
                        {"splitscope.no_such.layer": "ModuleNotFoundError: no_such"})
    missing = next(l for l in protocol.registered_layers() if l.name == "no_such")
    missing = run_layer(missing, _context(tmp_path))
    assert missing.status == "not assessed" and "not available" in missing.reason
    assert missing.result.records[0].status == "not assessed"

    def raise_input(context):
        raise InputError("no group keys in this release")

    na = run_layer(_Layer("groups", raise_input), _context(tmp_path))
    assert na.status == "not applicable" and na.reason == "no group keys in this release"
    empty = run_layer(_Layer("groups", lambda context: None), _context(tmp_path))
    assert empty.status == "not applicable" and empty.result.records


@pytest.mark.slow
def test_control_and_external_corpus(release, tmp_path):
    control = tmp_path / "control"
    for split, n in (("train", 6), ("test", 3)):
        (control / split / "a").mkdir(parents=True)
        for i in range(n):
            _image(500 + 10 * i + (split == "test")).save(control / split / "a" / f"{i}.png")
    external = tmp_path / "external" / "a"
    external.mkdir(parents=True)
    for i in range(4):
        _image(900 + i).save(external / f"e{i}.png")
    shutil.copy(release / "train" / "NORMAL" / "train_2.png", external / "copy.png")
    res = audit(release, control=control, external=tmp_path / "external", out_dir=tmp_path / "o",
                fail_on=["containment_rate>0.1"],
                options=AuditOptions.from_flags(workers=1, progress=False,
                                                layers=["duplicates", "external"]))
    doc = res.document
    validate(doc)
    ids = [r["id"] for r in doc["records"]]
    assert len(ids) == len(set(ids))
    kinds = {b["name"]: b["kind"] for b in doc["boundaries"]}
    assert kinds == {"test → train": "released split", "external:external → train": "cross-corpus"}
    roles = [i["role"] for i in doc["inputs"]]
    assert roles == ["audited", "control", "external"]
    contained = next(r for r in doc["records"]
                     if r["predicate"].get("name") == "containment_byte_or_ncc")
    assert (contained["numerator"], contained["denominator"]) == (1, 5)
    assert doc["fail_on"][0]["held"] and res.exit_code == 1
    ncc = next(r for r in doc["records"] if r["id"] == "near_duplicate.ncc_nearest.test--train")
    assert ncc["details"]["control"]["denominator"] == 3  # the control's own test rows
    for name in kinds:
        roles = [h["role"] for h in doc["figures"][name]["distribution"]]
        assert roles == ["audited", "control"]
    ncc_line = next(v for v in doc["summary"]["verdicts"] if "near-twin" in v)
    assert "negative control 0%" in ncc_line
    assert any(v.startswith("Cross-corpus containment") for v in doc["summary"]["verdicts"])
    assert (res.out_dir / "lists" / "external" / "manifest.csv").is_file()
    assert (res.out_dir / "lists" / "query_flags.csv").read_text().count("external") == 0


@pytest.mark.slow
def test_release_without_split_is_audited_against_itself(tmp_path):
    flat = tmp_path / "flat"
    for label in ("yes", "no"):
        (flat / label).mkdir(parents=True)
        for i in range(4):
            _image(700 + 10 * i + len(label)).save(flat / label / f"{i}.png")
    shutil.copy(flat / "yes" / "0.png", flat / "no" / "copy.png")
    res = audit(flat, out_dir=tmp_path / "o",
                options=AuditOptions.from_flags(workers=1, progress=False,
                                                layers=["duplicates", "groups"]))
    doc = res.document
    assert [b["name"] for b in doc["boundaries"]] == ["all rows → all rows"]
    byte = next(r for r in doc["records"] if r["id"].startswith("identity.sha256."))
    assert (byte["numerator"], byte["denominator"]) == (2, 9)  # the copy and its original
    verdicts = doc["summary"]["verdicts"]
    assert doc["summary"]["verdict"][0].startswith("WARNING: no train/test split was found")
    assert next(v for v in verdicts if "byte-identical" in v).startswith(
        "22.2% of the release (2 of 9 rows) has a byte-identical copy in another row of the "
        "same release")
    validate(doc)


@pytest.mark.slow
def test_predictions_evaluation_layer(release, tmp_path, workspace):
    import pandas as pd

    from splitscope.manifest import read_folder

    m = read_folder(release)
    test = m[m["split"] == "test"]
    p = np.where(test["label"] == "NORMAL", 0.8, 0.3)
    preds = tmp_path / "preds"
    preds.mkdir()
    pd.DataFrame({"path": test["path"], "NORMAL": p, EVIL: 1 - p}).to_csv(
        preds / "model.csv", index=False)
    res = audit(release, predictions=preds, out_dir=tmp_path / "o",
                options=AuditOptions.from_flags(score_kind="probability", workspace=workspace,
                                                workers=1, progress=False,
                                                layers=["duplicates", "evaluation"]))
    doc = res.document
    validate(doc)
    layer = next(l for l in doc["layers"] if l["layer"] == "evaluation")
    assert layer["status"] in ("completed", "partial")
    ba = [r for r in doc["records"] if r["layer"] == "evaluation"
          and "balanced accuracy" in (r["predicate"].get("name") or "")]
    assert {r["predicate"]["params"]["view"]["name"] for r in ba} == {"official", "deduplicated"}
    official = next(r for r in ba if r["predicate"]["params"]["view"]["name"] == "official")
    assert official["estimate"] == pytest.approx(1.0) and official["denominator"] == 7
    rel = official["details"]
    assert sum(b["count"] for b in rel["reliability"]) == 7 and rel["ece"] == pytest.approx(
        (4 * 0.2 + 3 * 0.3) / 7)
    card = {c["key"]: c for c in doc["scorecard"]}
    assert card["imbalance_metric"]["status"] == "measured"
    assert card["uncertainty"]["status"] == "measured"
    assert "BA(official) − BA(deduplicated)" in card["evaluation_split"]["effect"]
    assert any("balanced accuracy on the official view" in v for v in doc["summary"]["verdicts"])
    html = res.report.read_text()
    assert 'data-section="reliability"' in html and "<img src=x" not in html


@pytest.mark.slow
def test_rerun_into_the_same_folder_lists_only_this_run(release, tmp_path, workspace):
    out = tmp_path / "o"
    first = audit(release, out_dir=out,
                  options=AuditOptions.from_flags(workspace=workspace, workers=1, progress=False,
                                                  layers=["duplicates"]))
    second = audit(release, out_dir=out,
                   options=AuditOptions.from_flags(workspace=workspace, workers=1, progress=False,
                                                   layers=["groups"]))
    lists = {a["path"] for a in second.document["artifacts"]}
    assert lists < {a["path"] for a in first.document["artifacts"]}
    # the first run's other lists are gone: the folder holds this run's files only
    assert {p.relative_to(out).as_posix() for p in (out / "lists").rglob("*")
            if p.is_file()} == lists
    mine = out / "lists" / "mine.csv"  # a file the audit did not write is never removed
    mine.write_text("x\n")
    with pytest.raises(InputError, match="lists/mine.csv"):
        audit(release, out_dir=out,
              options=AuditOptions.from_flags(workspace=workspace, workers=1, progress=False,
                                              layers=["groups"]))
    audit(release, out_dir=out,
          options=AuditOptions.from_flags(workspace=workspace, workers=1, progress=False,
                                          layers=["duplicates"], force=True))
    assert mine.read_text() == "x\n"


@pytest.mark.slow
def test_attribution_layer_compares_leaked_and_clean_test_rows(release, tmp_path):
    from splitscope.manifest import build_manifest

    test_paths = [p for p in build_manifest(release)["path"] if p.startswith("test/")]
    inside = np.zeros((16, 16))
    inside[6:10, 6:10] = 1.0
    outside = np.zeros((16, 16))
    outside[0, 0] = 1.0
    leaked = f"test/NORMAL/{EVIL}.png"
    maps = {p: (outside if p == leaked else inside) for p in test_paths}
    mask = np.zeros((16, 16), np.uint8)
    mask[4:12, 4:12] = 1
    np.savez(tmp_path / "maps.npz", **maps)
    np.savez(tmp_path / "masks.npz", **{p: mask for p in test_paths})
    res = audit(release, out_dir=tmp_path / "out", attribution_maps=tmp_path / "maps.npz",
                attribution_masks=tmp_path / "masks.npz",
                options=AuditOptions.from_flags(workers=1, progress=False,
                                                layers=["duplicates", "attribution"]))
    doc = json.loads(res.audit_json.read_text())
    validate(doc)
    assert {l["layer"]: l["status"] for l in doc["layers"]}["attribution"] == "completed"
    rec = next(r for r in doc["records"] if r["id"] == "evaluation.attribution_outside_mask")
    assert rec["layer"] == "attribution"
    assert rec["predicate"]["params"]["boundary"] == "test → train"
    card = {d["key"]: d for d in doc["scorecard"]}
    assert card["uncertainty"]["status"] == "not reported"  # the contrast is no headline score
    assert "sha256" in rec["boundary"]["name"]  # leaked rows: flagged by the byte copy
    assert rec["estimate"] == pytest.approx(1.0)  # leaked row: all mass outside; clean: none
    assert ("Attribution outside anatomy (test → train): leaked rows put 1.000 of their "
            "attribution mass outside the mask, clean rows 0.000 (n = 1 and 6); difference "
            "+1.000") in " ".join(doc["summary"]["verdicts"])
    rows = res.out_dir / "lists" / "attribution_rows.csv"
    import pandas as pd

    table = pd.read_csv(rows)
    assert len(table) == len(test_paths) and table["exposed"].sum() == 1
    assert table.loc[table["exposed"], "path"].tolist() == [leaked]
    assert {r["role"] for r in doc["inputs"]} >= {"attribution maps", "attribution masks"}


def test_attribution_maps_need_masks(release, tmp_path):
    np.savez(tmp_path / "maps.npz", x=np.ones((2, 2)))
    with pytest.raises(InputError, match="go together"):
        audit(release, out_dir=tmp_path / "out", attribution_maps=tmp_path / "maps.npz",
              options=AuditOptions.from_flags(workers=1, progress=False))


@pytest.mark.slow
def test_attribution_layer_without_leaked_rows_is_not_assessed(tmp_path):
    root = make_release(tmp_path / "clean")
    (root / "test" / "NORMAL" / f"{EVIL}.png").unlink()  # the one byte copy: now no leak
    paths = [str(p.relative_to(root).as_posix()) for p in sorted((root / "test").rglob("*.png"))]
    np.savez(tmp_path / "maps.npz", **{p: np.ones((8, 8)) for p in paths})
    np.savez(tmp_path / "masks.npz", **{p: np.ones((8, 8), np.uint8) for p in paths})
    res = audit(root, out_dir=tmp_path / "out", attribution_maps=tmp_path / "maps.npz",
                attribution_masks=tmp_path / "masks.npz",
                options=AuditOptions.from_flags(workers=1, progress=False,
                                                layers=["duplicates", "attribution"]))
    layer = {l["layer"]: l for l in res.document["layers"]}["attribution"]
    rec = next(r for r in res.document["records"] if r["layer"] == "attribution")
    assert layer["status"] == rec["status"] == "not assessed"
    assert "no predicate flagged a row" in rec["title"] and rec["reason"]
