"""The Croissant record of an audited release: valid for mlcroissant, its record sets load and
count what the audit counted, every file it names carries its SHA-256."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from splitscope.cli import main
from splitscope.core.croissant import add_croissant
from splitscope.core.options import AuditOptions
from splitscope.core.run import audit
from splitscope.errors import InputError
from splitscope.records.croissant import CROISSANT_FILE, croissant_record
from splitscope.records.model import sha256_file
from splitscope.records.paths import resolve_in


@pytest.fixture(scope="module")
def demo(demo_audit, tmp_path_factory):
    """The demo audit, then ``splitscope croissant`` on its finished folder (a copy)."""
    folder = tmp_path_factory.mktemp("croissant")
    out = folder / "demo"
    shutil.copytree(demo_audit.out_dir, out)  # names its release by the release's own root
    shutil.copytree(demo_audit.out_dir.parent / "data", folder / "data")  # audited afresh
    assert main(["croissant", str(out), "--license",
                 "https://creativecommons.org/licenses/by/4.0/", "--cite-as",
                 "@misc{demo}"]) == 0
    return out


def _load(out: Path):
    mlc = pytest.importorskip("mlcroissant")
    return mlc.Dataset(jsonld=str(out / CROISSANT_FILE))  # raises ValidationError on errors


def _count(dataset, record_set: str) -> int:
    return sum(1 for _ in dataset.records(record_set))


def _record(doc, rid):
    return next(r for r in doc["records"] if r["id"] == rid)


def _check_release(out: Path) -> dict:
    """Validated by mlcroissant; every record set iterates; the counts are the audit's."""
    doc = json.loads((out / "audit.json").read_text())
    record = json.loads((out / CROISSANT_FILE).read_text())
    dataset = _load(out)
    names = [r["name"] for r in record["recordSet"]]
    assert _count(dataset, "release") == doc["manifest"]["rows"]
    dedup = [r for r in doc["records"] if r["id"].startswith("near_duplicate.dedup_split.")]
    assert dedup, "the audit deduplicated no split"
    for r in dedup:
        split = r["boundary"]["query"]["name"]
        assert _count(dataset, f"deduplicated-{split}") == r["numerator"]
    if "resplit" in names:
        assert _count(dataset, "resplit") == _record(doc, "group.resplit")["denominator"]
    if "contaminated" in names:
        table = pd.read_parquet(out / "lists" / "contaminated.parquet")
        assert _count(dataset, "contaminated") == len(table)
    return record


@pytest.mark.slow
def test_mlcroissant_validates_and_loads_the_demo_record(demo):
    record = _check_release(demo)
    assert record["conformsTo"] == "http://mlcommons.org/croissant/1.0"
    assert {"release", "deduplicated-test", "resplit", "resplit-folds", "contaminated"} <= {
        r["name"] for r in record["recordSet"]}
    assert record["license"].startswith("https://creativecommons.org/")


def test_the_release_record_set_reads_ids_and_digests_as_released(demo):
    dataset = _load(demo)
    issues = pd.read_parquet(demo / "lists" / "issues.parquet")
    first = next(iter(dataset.records("release")))
    assert first["release/path"].decode() == issues["path"].iloc[0]
    assert first["release/group"].decode() == issues["group"].iloc[0]  # leading zeros kept
    # the list names the file relative to its release root, which audit.json records
    doc = json.loads((demo / "audit.json").read_text())
    assert first["release/sha256"].decode() == sha256_file(
        resolve_in(doc, issues.iloc[0].to_dict()))


def test_every_file_object_names_its_sha256_and_every_list_is_named(demo):
    record = json.loads((demo / CROISSANT_FILE).read_text())
    objects = [d for d in record["distribution"] if d["@type"] == "cr:FileObject"]
    for entry in objects:
        assert entry["sha256"] == sha256_file(demo / entry["contentUrl"]), entry["name"]
    named = {d["contentUrl"] for d in objects}
    lists = {p.relative_to(demo).as_posix() for p in (demo / "lists").rglob("*") if p.is_file()}
    assert lists <= named and {"audit.json", "report.html"} <= named
    file_sets = [d for d in record["distribution"] if d["@type"] == "cr:FileSet"]
    assert {d["encodingFormat"] for d in file_sets} == {"image/png", "image/jpeg"}
    # relative to the release root (data), not to this machine's folders
    assert sorted(d["includes"] for d in file_sets) == ["**/*.jpg", "**/*.png"]
    assert all(d["@id"].startswith("released-files:data:") for d in file_sets)


def test_rai_fields_carry_numerators_and_denominators(demo):
    doc = json.loads((demo / "audit.json").read_text())
    record = json.loads((demo / CROISSANT_FILE).read_text())
    sha = _record(doc, "identity.sha256.test--train")
    line = next(x for x in record["rai:dataLimitations"] if "identity.sha256.test--train" in x)
    assert f"{sha['numerator']} of {sha['denominator']} affected query rows" in line
    assert any("provenance.header_probe.within_pool" in x for x in record["rai:dataBiases"])
    assert not any("provenance." in x for x in record["rai:dataLimitations"])
    assert str(doc["manifest"]["rows"]) in record["rai:dataCollection"]
    protocol = record["rai:dataPreprocessingProtocol"]
    assert protocol[0] == "no label map: labels as released"
    assert any("removed" in x and "deduplicated test" in x for x in protocol)


def test_report_links_it_and_artifacts_list_it(demo):
    assert 'href="croissant.json"' in (demo / "report.html").read_text()
    artifacts = json.loads((demo / "artifacts.json").read_text())["distribution"]
    digests = {a["contentUrl"]: a["sha256"] for a in artifacts}
    assert digests[CROISSANT_FILE] == sha256_file(demo / CROISSANT_FILE)
    assert digests["report.html"] == sha256_file(demo / "report.html")
    assert digests["audit.json"] == sha256_file(demo / "audit.json")
    assert json.loads((demo / "audit.json").read_text())["options"]["run"]["croissant"] is True


def test_a_changed_list_is_refused(demo, tmp_path, capsys):
    import shutil

    copy = tmp_path / "audit"
    shutil.copytree(demo, copy)
    with open(copy / "lists" / "dedup" / "test_kept.csv", "a") as fh:
        fh.write("999,extra.png,test,lesion,True,\n")
    with pytest.raises(InputError, match="changed since the audit"):
        croissant_record(copy)
    assert main(["croissant", str(copy)]) == 2
    assert "test_kept.csv" in capsys.readouterr().err
    assert main(["croissant", str(tmp_path)]) == 2  # no audit.json


@pytest.mark.slow
def test_writing_it_needs_no_mlcroissant(demo, tmp_path):
    import shutil

    copy = tmp_path / "audit"
    shutil.copytree(demo, copy)
    (copy / CROISSANT_FILE).unlink()
    code = ("import sys; sys.modules['mlcroissant'] = None\n"
            "from splitscope.core.croissant import add_croissant\n"
            f"add_croissant({str(copy)!r})\n"
            "assert 'mlcroissant' not in [m for m in sys.modules if sys.modules[m]]\n")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert json.loads((copy / CROISSANT_FILE).read_text())["recordSet"]


@pytest.mark.slow
def test_audit_with_croissant_writes_it(demo, tmp_path):
    out = tmp_path / "again"
    res = audit(demo.parent / "data", out_dir=out,
                options=AuditOptions.from_flags(workers=1, progress=False,
                                                layers=["duplicates", "groups"],
                                                group_regex=r"^p(?P<group>\d+)_", croissant=True))
    assert (out / CROISSANT_FILE).is_file() and res.document["options"]["run"]["croissant"] is True
    assert 'href="croissant.json"' in res.report.read_text()
    assert out / CROISSANT_FILE in res.files
    _check_release(out)
    # the verb on a folder that has one already rewrites it, the report untouched
    before = sha256_file(out / "report.html")
    assert add_croissant(out) == out / CROISSANT_FILE
    assert sha256_file(out / "report.html") == before


@pytest.mark.slow
def test_the_audit_verb_flag(demo, tmp_path):
    out = tmp_path / "cli"
    assert main(["audit", str(demo.parent / "data"), "--out", str(out), "--layers", "groups",
                 "--group-regex", r"^p(?P<group>\d+)_", "--workers", "1", "--croissant",
                 "--json"]) == 0
    record = json.loads((out / CROISSANT_FILE).read_text())
    assert [r["name"] for r in record["recordSet"]] == ["release", "resplit", "resplit-folds"]
    _load(out)


@pytest.mark.slow
def test_a_list_release_names_its_list(demo, tmp_path):
    manifest = pd.read_csv(demo / "lists" / "manifest.csv", dtype=str)
    listed = tmp_path / "index.csv"
    manifest[["path", "split", "label"]].to_csv(listed, index=False)
    out = tmp_path / "listed"
    audit(listed, out_dir=out,
          options=AuditOptions.from_flags(workers=1, progress=False, layers=["groups"],
                                          croissant=True, list_root=str(demo.parent / "data")))
    record = json.loads((out / CROISSANT_FILE).read_text())
    entry = next(d for d in record["distribution"] if d["@id"].startswith("input:"))
    assert entry["sha256"] == sha256_file(listed) and entry["encodingFormat"] == "text/csv"
    assert entry["contentUrl"] == "index.csv"  # outside the root (--root): by its name
    _load(out)


@pytest.mark.slow
def test_an_audit_without_it_does_not_link_it(tmp_path, demo):
    res = audit(demo.parent / "data", out_dir=tmp_path / "plain",
                options=AuditOptions.from_flags(workers=1, progress=False, layers=["groups"],
                                                group_regex=r"^p(?P<group>\d+)_"))
    assert not (res.out_dir / CROISSANT_FILE).exists()
    assert "croissant.json" not in res.report.read_text()


@pytest.mark.realdata
@pytest.mark.slow
def test_kermany_release_record(kermany_audit):
    record = _check_release(kermany_audit)
    file_sets = [d for d in record["distribution"] if d["@type"] == "cr:FileSet"]
    assert sum(int(d["description"].split()[0]) for d in file_sets) == 5840
