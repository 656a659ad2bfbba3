"""What a reviewer reads: verdicts, warnings, what-this-means lines, the census with its
control column, per-class rates, label conflicts, the gallery and its denominator, label maps,
list-column options and progress (one test per item a reviewer would otherwise misread)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from PIL import Image

from splitscope.cli import app, main
from splitscope.core.conditions import evaluate_conditions, parse_condition
from splitscope.core.meaning import layer_rules, meaning
from splitscope.core.options import AuditOptions
from splitscope.core.run import audit
from splitscope.provenance.predicates import HEADER_PROBE_CROSS, HEADER_PROBE_WITHIN, PARTITION
from splitscope.report.figures import sweep_ylim
from splitscope.report.gallery import BANDS, gallery

pytestmark = pytest.mark.slow  # a demo audit of its own

def _noise(seed: int, size: int = 64) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8)).resize(
        (size, size), Image.BICUBIC)


def make_release(root: Path) -> Path:
    """Three classes; ``a`` stored as PNG, ``b`` and ``c`` as JPEG (a header cue that tells
    ``a`` from the rest, not ``b`` from ``c``). Planted across test → train: a byte copy, a
    PNG re-save of a train image filed under another class (a label-conflicting twin)."""
    seed = 0
    for split, n in (("train", 25), ("test", 8)):
        for label in ("a", "b", "c"):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i in range(n):
                seed += 1
                img = _noise(seed)
                if label == "a":
                    img.save(folder / f"{split}_{i}.png")
                else:
                    img.save(folder / f"{split}_{i}.jpg", quality=90)
    (root / "test" / "a" / "copy.png").write_bytes((root / "train" / "a" / "train_0.png")
                                                   .read_bytes())
    Image.open(root / "train" / "a" / "train_1.png").save(root / "test" / "b" / "twin.png",
                                                          compress_level=1)
    return root


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return make_release(tmp_path_factory.mktemp("rel") / "release")


@pytest.fixture(scope="module")
def audited(release, tmp_path_factory):
    out = tmp_path_factory.mktemp("audit") / "out"
    res = audit(release, out_dir=out, fail_on=["phash_rate>0", "header_probe_ba>0"],
                options=AuditOptions.from_flags(workers=1, progress=False, max_pairs=1,
                                                transforms=0,
                                                layers=["duplicates", "groups", "provenance"]))
    return res, json.loads(res.audit_json.read_text()), res.report.read_text()


def _records(doc, predicate):
    return [r for r in doc["records"] if (r.get("predicate") or {}).get("name") == predicate]


# --- 10, 13, 12: label conflicts, the pixel-identical union, the deduplicated split --------


@pytest.mark.slow
def test_label_conflicting_twin_is_a_record_a_verdict_and_first(audited):
    _, doc, html = audited
    rec = _records(doc, "label_conflict_pixel_xxh128")[0]
    assert (rec["numerator"], rec["denominator"]) == (1, 26)  # twin.png, under b vs a
    assert rec["details"]["examples"][0]["path"] == "test/b/twin.png"
    assert _records(doc, "label_conflict_sha256")[0]["numerator"] == 0  # copy.png keeps a
    (first,) = doc["summary"]["verdict"]  # the conflict ranks first, then the detailed line
    assert first.startswith("Do not trust a score on test as is: 3.85% of test (1 of 26 rows) "
                            "is a copy of a train image under another label")
    assert doc["summary"]["findings"][0].startswith("Label conflicts: 3.85% (1 of 26)")
    second = doc["summary"]["verdicts"][0]
    assert second.startswith("LABEL CONFLICT: 3.85% of the test split (1 of 26 rows)")
    conflicts = pd.read_csv(Path(audited[0].out_dir) / "lists" / "label_conflicts.csv")
    assert set(conflicts["path"]) == {"test/b/twin.png"}
    assert html.index('data-section="conflicts"') < html.index('data-section="census"')


def test_pixel_identical_union_counts_each_row_once(audited):
    _, doc, _ = audited
    union = _records(doc, "pixel_identical_union")[0]
    byte = _records(doc, "sha256")[0]
    pixel = _records(doc, "pixel_xxh128")[0]
    assert (byte["numerator"], pixel["numerator"], union["numerator"]) == (1, 1, 2)
    assert any("has a pixel-identical copy in train" in v for v in doc["summary"]["verdicts"])


def test_deduplicated_split_size_is_said(audited):
    _, doc, html = audited
    dedup = _records(doc, "dedup_split")[0]
    assert (dedup["numerator"], dedup["denominator"]) == (24, 26)
    line = next(v for v in doc["summary"]["verdicts"] if v.startswith("Deduplicated"))
    assert line.startswith("Deduplicated test split: 24 of 26 rows remain")
    assert "Deduplicated test split: 24 of 26 rows remain" in html


# --- 1, 14: the gallery's denominator and bands --------------------------------------------


def test_gallery_says_how_many_pairs_were_flagged(audited):
    res, doc, html = audited
    summary = doc["figures"]["test → train"]["gallery"]
    pairs = pd.read_csv(res.out_dir / "lists" / "pairs.csv")
    flagged = pairs[pairs["rules"].fillna("") != ""][["row", "reference_row"]]
    assert summary["flagged_pairs"] >= len(flagged.drop_duplicates()) >= 2
    assert summary["shown"] == 1  # max_pairs=1: the label conflict, shown first
    assert doc["gallery"][0]["band"] == "label conflict"
    assert f"1 of {summary['flagged_pairs']} flagged pairs shown" in html


def test_gallery_bands_share_the_limit_and_spread_along_rho():
    rows = pd.DataFrame({"row": range(40), "path": [f"p{i}" for i in range(40)],
                         "label": ["x"] * 40, "split": ["test"] * 20 + ["train"] * 20})

    class B:
        name = "test → train"

        class query:
            rows = np.arange(20)

        class reference:
            rows = np.arange(20, 40)

    rho = np.r_[np.ones(8), np.linspace(0.999, 0.98, 8), [0.95, 0.9, 0.85, 0.8]]
    pairs = pd.DataFrame({"boundary": B.name, "query_row": np.arange(20),
                          "reference_row": np.arange(20, 40), "rho": rho,
                          "rules": ["ncc"] * 16 + ["joint"] * 4})
    conflicts = pd.DataFrame({"boundary": [B.name], "row": [5], "counterpart_row": [25]})
    items, summary = gallery({"pairs": pairs, "label_conflicts": conflicts}, B, rows, 7, 0.98)
    assert [i["band"] for i in items][:1] == ["label conflict"]
    assert summary["bands"]["identical"] == {"flagged": 7, "shown": 3}
    assert summary["bands"]["near-twin ≥ τ"] == {"flagged": 8, "shown": 3}
    assert summary["bands"]["below τ"] == {"flagged": 4, "shown": 0}  # screens: never shown
    near = [i["measurements"]["rho"] for i in items if i["band"] == "near-twin ≥ τ"]
    assert near[0] == pytest.approx(0.999) and near[-1] == pytest.approx(0.98)  # both ends
    assert list(summary["bands"]) == list(BANDS) and summary["flagged_pairs"] == 20


# --- 2, 4: the negative-control column -----------------------------------------------------


def test_census_says_a_pixel_predicate_is_uncalibrated_without_control(audited):
    _, doc, html = audited
    assert "uncalibrated: no negative control given" in html
    phash = next(c for c in doc["fail_on"] if c["metric"] == "phash_rate")
    assert phash["control"]["status"] == "uncalibrated"
    assert any("phash_rate>0" in line and "uncalibrated" in line
               for line in doc["summary"]["lines"])


@pytest.mark.slow
def test_census_marks_a_predicate_the_control_finds_unreliable(release, tmp_path):
    control = tmp_path / "control"
    for split, n in (("train", 6), ("test", 4)):
        (control / split / "x").mkdir(parents=True)
        for i in range(n):  # one flat gradient for all: every hash collides
            Image.fromarray(np.tile(np.arange(64, dtype=np.uint8) * 4, (64, 1)) + i).save(
                control / split / "x" / f"{i}.png")
    res = audit(release, control=control, out_dir=tmp_path / "o", fail_on=["phash_rate>0"],
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"],
                                                transforms=0))
    screen = _records(res.document, "hash_screen")[0]
    assert screen["details"]["control"]["unreliable"]
    html = res.report.read_text()
    assert re.search(r'data-control="near_duplicate\.hash_screen\.test--train">[0-9.]+% '
                     r"\(\d+ of 4\) · UNRELIABLE on this modality", html)
    cond = res.document["fail_on"][0]
    assert cond["control"]["status"] == "unreliable"
    assert any("UNRELIABLE" in line for line in res.document["summary"]["lines"])


# --- 3, 15: header_probe_ba reads the within-pool probe; the label map ---------------------


def test_header_probe_ba_reads_the_within_pool_probe():
    records = [
        {"id": "provenance.header_probe.within_pool", "layer": "provenance",
         "status": "completed", "estimate": 0.767, "boundary": None, "unit": "row (case)",
         "predicate": {"name": "header-only probe (within pool)"}},
        {"id": "provenance.header_probe.cross_split[test_train]", "layer": "provenance",
         "status": "completed", "estimate": 0.5, "unit": "row (case)",
         "boundary": {"name": "test → train"},
         "predicate": {"name": "header-only probe (cross split)"}},
    ]
    out = evaluate_conditions([parse_condition("header_probe_ba>0.7")], records, (),
                              ["test → train"])
    assert out[0]["value"] == pytest.approx(0.767) and out[0]["held"]


@pytest.mark.slow
def test_label_map_gives_the_binary_probe_and_gates_it(release, tmp_path):
    three = audit(release, out_dir=tmp_path / "three", fail_on=["header_probe_ba>0.9"],
                  options=AuditOptions.from_flags(workers=1, progress=False, layers=["provenance"]))
    two = audit(release, out_dir=tmp_path / "two", fail_on=["header_probe_ba>0.9"],
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["provenance"],
                                                label_map="b=other,c=other"))
    w3, w2 = (next(r for r in res.document["records"]
                   if r["id"] == "provenance.header_probe.within_pool") for res in (three, two))
    assert w3["estimate"] < 0.9 and three.exit_code == 0
    assert w2["estimate"] > 0.9 and two.exit_code == 1
    assert set(w2["class_support"]) == {"a", "other"}
    assert w2["details"]["label_map"]["map"] == {"b": "other", "c": "other"}
    assert two.document["manifest"]["label_map"]["rows_changed"] == 67
    assert all(r["details"].get("label_map") for r in two.document["records"])
    assert any("Header-only probe: within pool" in v for v in two.document["summary"]["verdicts"])
    manifest = pd.read_csv(two.out_dir / "lists" / "manifest.csv")
    assert set(manifest["label_released"].dropna()) == {"a", "b", "c"}


def test_a_label_map_naming_no_label_is_an_input_error(release, tmp_path):
    assert main(["audit", str(release), "--out", str(tmp_path / "o"),
                 "--label-map", "glioma=tumor"]) == 2
    assert not (tmp_path / "o" / "audit.json").exists()


# --- 5, 9: what the header probe claims and counts -----------------------------------------


def test_shortcut_carried_by_size_alone_is_not_called_a_construction_shortcut():
    from splitscope.provenance.probe_records import carried_by as _carried_by

    class R:
        features: ClassVar[list[str]] = ["file_size", "bytes_per_pixel"]
        dropped: ClassVar[dict[str, str]] = {"width": "constant", "height": "constant", "format": "constant"}

    text = _carried_by(R(), ["file_size"])
    assert "only the compressed size (file_size)" in text and "construction shortcut" in text
    assert "format, height, width are the same for every file" in text
    assert "no evidence of a construction shortcut" in text
    R.features = ["format", "file_size"]
    assert _carried_by(R(), ["format"]).startswith("a construction shortcut, carried by format")


def test_balanced_accuracy_records_carry_no_count_that_is_not_the_estimate(audited):
    _, doc, _ = audited
    probes = [r for r in doc["records"] if r["layer"] == "provenance" and r.get("estimate")
              is not None and ("header" in r["id"] or "partition" in r["id"])]
    assert probes
    for r in probes:
        assert r["numerator"] is None and r["denominator"] > 0


# --- 6: the sweep axis --------------------------------------------------------------------


def test_sweep_axis_starts_at_zero():
    assert sweep_ylim(65.9) == (0.0, pytest.approx(72.49))
    assert sweep_ylim(0.2) == (0.0, 1.0) and sweep_ylim(99.0) == (0.0, 100.0)


# --- 7, 8: what is missing is said ---------------------------------------------------------


def test_group_regex_that_matches_nothing_says_so(release, tmp_path):
    res = audit(release, out_dir=tmp_path / "o",
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["groups"],
                                                group_regex=r"^patient(?P<group>\d+)_"))
    rec = next(r for r in res.document["records"] if r["id"] == "group.overlap")
    assert rec["reason"].startswith("the group regex '^patient(?P<group>\\\\d+)_' matched none "
                                    "of the 101 rows' basename")


@pytest.mark.slow
def test_unrecognised_label_column_is_a_warning(release, tmp_path):
    files = sorted(p for p in release.rglob("*") if p.is_file())
    lst = tmp_path / "list.csv"
    pd.DataFrame({"path": [p.relative_to(release).as_posix() for p in files],
                  "split": [p.relative_to(release).parts[0] for p in files],
                  "finding": [p.parent.name for p in files]}).to_csv(lst, index=False)
    res = audit(lst, out_dir=tmp_path / "o",
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"],
                                                transforms=0, list_root=str(release)))
    assert res.document["summary"]["verdict"][0].startswith(
        "WARNING: none of the 101 rows has a label")
    assert "WARNING: none of the 101 rows has a label" in res.report.read_text()


# --- 11: per-class rates ------------------------------------------------------------------


def test_per_class_rates_are_a_table(audited):
    _, doc, html = audited
    table = html[html.index('data-section="per-class"'):]
    table = table[:table.index("</table>")]
    byte = _records(doc, "sha256")[0]
    by = {x["label"]: x for x in byte["details"]["by_label"]}
    assert (by["a"]["affected"], by["a"]["rows"]) == (1, 9)
    assert "1 / 9 (11.1%)" in table and "0 / 8 (0%)" in table


# --- 16: list-column options on audit -----------------------------------------------------


@pytest.mark.slow
def test_audit_reads_a_list_with_named_columns(release, tmp_path):
    files = sorted(p for p in release.rglob("*") if p.is_file())
    lst = tmp_path / "index.csv"
    pd.DataFrame({"img": [p.relative_to(release).as_posix() for p in files],
                  "fold": [p.relative_to(release).parts[0] for p in files],
                  "dx": [p.parent.name for p in files]}).to_csv(lst, index=False)
    res = CliRunner().invoke(app, ["audit", str(lst), "--path-column", "img", "--split-column",
                                   "fold", "--label-column", "dx", "--root", str(release),
                                   "--layers", "duplicates", "--transforms", "0", "--workers",
                                   "1", "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "o" / "audit.json").read_text())
    assert doc["manifest"]["labels"] == {"a": 34, "b": 34, "c": 33}
    assert _records(doc, "sha256")[0]["numerator"] == 1
    given = doc["options"]["inputs"]
    assert (given["path_column"], given["label_column"], given["split_column"]) == (
        "img", "dx", "fold")


# --- 17: progress -------------------------------------------------------------------------


def test_progress_per_layer_piped_too_and_quiet_on_request(release, tmp_path, capsys):
    audit(release, out_dir=tmp_path / "o",
          options=AuditOptions.from_flags(workers=1, layers=["groups"]))
    err = capsys.readouterr().err  # not a terminal: the lines still come (a CI log)
    assert re.search(r"layer \d+/\d+ groups: not applicable, 1 record in \d+\.\d s", err)
    audit(release, out_dir=tmp_path / "o",
          options=AuditOptions.from_flags(workers=1, progress=False, layers=["groups"]))
    assert capsys.readouterr().err == ""
    res = CliRunner().invoke(app, ["audit", str(release), "--layers", "groups", "--workers", "1",
                                   "--out", str(tmp_path / "o2"), "--quiet"])
    assert res.exit_code == 0 and res.stderr == ""


# --- 18: what this means ------------------------------------------------------------------


def _b(name="test → train"):
    q, r = name.split(" → ")
    return {"name": name, "query": {"name": q}, "reference": {"name": r}}


def _probe(kind, est, low, boundary=None):
    rid = ("provenance.header_probe.within_pool" if kind == "within" else
           "provenance.header_probe.cross_split[test_train]")
    pred = HEADER_PROBE_WITHIN if kind == "within" else HEADER_PROBE_CROSS
    return {"id": rid, "layer": "provenance", "status": "completed", "estimate": est,
            "boundary": boundary, "uncertainty": {"low": low}, "details": {"chance": 0.5},
            "predicate": {"name": pred}}


def test_each_meaning_rule_speaks_only_on_its_condition():
    b = _b()
    bound = {"name": b["name"]}
    part = {"id": "provenance.partition[test_train]", "layer": "provenance",
            "status": "completed", "estimate": 0.78, "boundary": bound,
            "uncertainty": {"low": 0.74}, "predicate": {"name": PARTITION}}
    rules = {r.name: r for r in layer_rules()}
    differ = [_probe("within", 0.82, 0.80), _probe("cross", 0.51, 0.45, bound), part]
    assert "built or encoded differently" in rules["encoded_differently"].says(b, differ)
    assert rules["shortcut_transfers"].says(b, differ) is None
    transfer = [_probe("within", 0.82, 0.80), _probe("cross", 0.74, 0.70, bound)]
    assert rules["shortcut_transfers"].says(b, transfer)
    assert rules["encoded_differently"].says(b, transfer) is None
    ncc = {"layer": "duplicates", "status": "completed", "boundary": bound, "numerator": 2,
           "denominator": 100, "predicate": {"name": "ncc_nearest"}}
    assert rules["memorisation"].says(b, [ncc]).startswith("2% of test rows")
    assert rules["memorisation"].says(b, [{**ncc, "numerator": 0}]) is None
    byte = {**ncc, "numerator": 0, "predicate": {"name": "sha256"}}
    assert rules["clean"].says(b, [byte, {**ncc, "numerator": 0}])
    assert rules["clean"].says(b, [byte, ncc]) is None
    conflict = {**ncc, "numerator": 3, "predicate": {"name": "label_conflict_ncc"}}
    assert "at least 3 test row(s)" in rules["label_noise"].says(b, [conflict])
    group = {"id": "group.overlap[test_train]", "layer": "groups", "status": "completed",
             "boundary": bound, "numerator": 5, "denominator": 50,
             "predicate": {"name": "group overlap"}}
    assert rules["patients_straddle"].says(b, [group]).startswith("10% of traceable")
    hashed = {**ncc, "predicate": {"name": "hash_screen"},
              "details": {"control": {"rate": 0.183, "unreliable": True}}}
    assert "18.3% of the clean control" in rules["hash_unreliable"].says(b, [hashed])
    lines = meaning({"boundaries": [b], "records": differ + [ncc]})
    assert lines[0].startswith("test → train: 2% of test rows")
    assert any("encoded differently" in line for line in lines)


def test_meaning_is_in_the_document_and_the_report(audited):
    _, doc, html = audited
    assert doc["summary"]["meaning"]
    assert all(line.startswith("test → train: ") for line in doc["summary"]["meaning"])
    assert 'data-section="meaning"' in html


# --- 19: the report cites documentation a reader can open ---------------------------------


def test_report_cites_the_packaged_method(audited):
    _, _, html = audited
    assert "METHODS §" not in html and "docs/method.md §" in html
    method = Path(__file__).resolve().parents[2] / "docs" / "method.md"
    text = method.read_text(encoding="utf-8")
    for section in re.findall(r"docs/method\.md §(\d+\.\d+)", html):
        assert f"§{section}" in text, section


def test_every_meaning_rule_is_documented():
    text = (Path(__file__).resolve().parents[2] / "docs" / "method.md").read_text("utf-8")
    for rule in layer_rules():
        assert f"| `{rule.name}` | {rule.condition} |" in text, rule.name


def test_hash_only_label_conflicts_are_not_called_label_noise():
    from splitscope.core.verdicts import measured_findings, notes, verdicts
    from splitscope.relations.label_conflicts import calibration

    assert calibration("sha256", None) == ("exact", True)
    assert calibration("ncc", None) == ("uncalibrated", True)
    assert calibration("hash_joint", None) == ("uncalibrated", False)
    assert calibration("hash_joint", {"hash_joint": {"rate": 0.2, "denominator": 50,
                                                     "unreliable": True}}) == ("unreliable", False)
    assert calibration("hash_sum", {"hash_sum": {"rate": 0.0, "denominator": 50,
                                                 "unreliable": False}}) == ("reliable", True)
    assert calibration("hash_sum", {"hash_sum": {"rate": 0.0, "denominator": 0,
                                                 "unreliable": False}}) == ("uncalibrated", False)
    b = {"name": "test → train", "query": {"name": "test", "rows": 10},
         "reference": {"name": "train", "rows": 20}}
    hashed = {"id": "near_duplicate.label_conflict_hash_joint.test--train", "layer":
              "duplicates", "section": "near_duplicate", "status": "completed", "boundary": {"name": b["name"]},
              "numerator": 3, "denominator": 10, "estimate": 0.3, "unit": "affected query row",
              "predicate": {"name": "label_conflict_hash_joint"},
              "details": {"calibration": "uncalibrated", "trusted": False}}
    doc = {"records": [hashed], "boundaries": [b], "options": {"search": {"tau": 0.98}}}
    lines = verdicts(doc)
    assert not any(line.startswith(("LABEL CONFLICT", "Hash rules")) for line in lines)
    (note,) = notes(doc)  # under the first figure, never a finding
    assert note.startswith("Hash rules alone link 3 of 10 test rows")
    assert not any(m["found"] for m in measured_findings(doc))
    assert not any("label noise that no model" in line for line in meaning(doc))
    trusted = {**hashed, "details": {"calibration": "reliable", "trusted": True}}
    (conflict,) = [m for m in measured_findings({**doc, "records": [trusted]}) if m["found"]]
    assert (conflict["finding"], conflict["numerator"], conflict["denominator"]) == (
        "label conflicts", 3, 10)
    assert verdicts({**doc, "records": [trusted]})[0].startswith("LABEL CONFLICT: 30%")
    assert not notes({**doc, "records": [trusted]})


def test_an_untrusted_conflict_record_does_not_claim_the_same_image():
    from splitscope.relations.label_conflicts import _conflict_conclusion

    assert _conflict_conclusion("ncc", 2, 10, 3, "uncalibrated", True).endswith(
        "the same image is released under two labels")
    text = _conflict_conclusion("hash_joint", 2, 10, 3, "unreliable", False)
    assert "hash_joint is unreliable on this modality" in text
    assert "no evidence that the same image carries two labels" in text
