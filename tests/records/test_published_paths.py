"""What an audit publishes names files relative to their release root, never a folder of the
machine that audited (:mod:`splitscope.records.paths`), and records each root once; a rerun
into the same folder leaves no file that its ``artifacts.json`` does not list with its SHA-256;
the verbs that add to a finished folder list what they add; the report still shows the
gallery's thumbnails when it is rendered again from a finished folder."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from splitscope.cli import main
from splitscope.core.options import AuditOptions
from splitscope.core.protocol import record_roles
from splitscope.core.run import AuditResult, audit, caches
from splitscope.datasets import DEMO_GROUP_REGEX, make_demo
from splitscope.features.sources import open_image
from splitscope.records.croissant import CROISSANT_FILE
from splitscope.records.exports import ARTIFACTS_FILE
from splitscope.records.model import sha256_file
from splitscope.records.paths import (
    corpus_roots,
    name_under,
    published_command,
    published_rows,
    release_relative,
    resolve,
    resolve_in,
)
from splitscope.report.html import EXAMPLES, render_html

pytestmark = pytest.mark.slow  # audits of the demo and of lists

ADDED = (CROISSANT_FILE, "dataset-card.md", "reforms.json", "reforms.md")
LAYERS = "duplicates,groups,external"


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> dict[str, Path]:
    """The demo release, and a copy of it as an external corpus of the same name (``data``)."""
    base = tmp_path_factory.mktemp("published")
    data = make_demo(base / "release" / "data", seed=0, n_train=70, n_test=45)
    external = base / "elsewhere" / "data"
    shutil.copytree(data, external)
    return {"base": base, "data": data, "external": external}


@pytest.fixture(scope="module")
def published(release) -> Path:
    """``splitscope audit`` with an external corpus, the Croissant record, the dataset card
    and the REFORMS checklist."""
    out = release["base"] / "audit"
    assert main(["audit", str(release["data"]), "--out", str(out), "--external",
                 str(release["external"]), "--layers", LAYERS, "--group-regex",
                 DEMO_GROUP_REGEX, "--workers", "1", "--croissant", "--card", "--reforms",
                 "--json"]) == 0
    return out


def _strings(value, where: str = ""):
    """Every string in a JSON value, with where it is (``records/#/inputs/#/path``)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{where}/{k}")
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v, f"{where}/#")
    elif isinstance(value, str):
        yield where.lstrip("/"), value


def _text(path: Path) -> str:
    """A published file's content as text: a Parquet file's cells and metadata, every other
    file's text."""
    if path.suffix == ".parquet":
        table = pd.read_parquet(path)
        meta = pq.read_schema(path).metadata or {}
        return "\n".join([table[c].astype(str).str.cat(sep="\n") for c in table.columns]
                         + [v.decode("utf-8", "replace") for v in meta.values()])
    return path.read_text(encoding="utf-8")


def _listed(out: Path) -> dict[str, str]:
    doc = json.loads((out / ARTIFACTS_FILE).read_text(encoding="utf-8"))
    return {e["contentUrl"]: e["sha256"] for e in doc["distribution"]}


def test_no_published_file_names_a_folder_of_the_auditing_machine(published, release):
    roots = [str(release["data"]), str(release["external"])]
    listed = _listed(published)
    assert {"audit.json", "report.html", *ADDED, "lists/manifest.csv",
            "lists/issues.parquet", "lists/external/manifest.csv"} <= set(listed)
    for rel in [*listed, ARTIFACTS_FILE]:
        if rel in ("audit.json", "report.html"):
            continue  # below: they hold the roots as recorded
        text = _text(published / rel)
        assert not any(root in text for root in roots), rel
        assert str(release["base"]) not in text and "../" not in text, rel
    # the lists name each file relative to its corpus's root, which audit.json records
    doc = json.loads((published / "audit.json").read_text(encoding="utf-8"))
    issues = pd.read_parquet(published / "lists" / "issues.parquet")
    first = issues.iloc[0].to_dict()
    assert first["file"] == first["path"] and not os.path.isabs(first["file"])
    assert sha256_file(resolve_in(doc, first)) == first["byte_group"]
    # the API reads the list with each file where it is on this machine
    assert AuditResult.load(published).issues["file"].iloc[0] == str(
        release["data"] / first["path"])
    external = pd.read_csv(published / "lists" / "external" / "manifest.csv", dtype=str)
    other = external[external["corpus"] == "external:data"].iloc[0].to_dict()
    assert resolve_in(doc, other) == str(release["external"] / other["path"])


def test_audit_json_records_each_root_once(published, release):
    doc = json.loads((published / "audit.json").read_text(encoding="utf-8"))
    assert doc["manifest"]["roots"] == {"data": str(release["data"]),
                                        "external:data": str(release["external"])}
    assert [i["path"] for i in doc["inputs"]] == [str(release["data"]),
                                                  str(release["external"])]
    for root in (str(release["data"]), str(release["external"])):
        where = sorted({w for w, text in _strings(doc) if root in text})
        # the inputs as given, the roots, the command line as typed: nowhere else
        assert set(where) <= {"inputs/#/path", "manifest/roots/data",
                              "manifest/roots/external:data", "run/command"}, where
        assert sum(root == text for w, text in _strings(doc)
                   if w.startswith("manifest/roots")) == 1
    assert not [(w, t) for w, t in _strings(doc) if "../" in t]
    for r in doc["records"]:  # an input by its name, and its SHA-256
        assert {i["path"] for i in r["inputs"]} <= {"data"}, r["id"]
    sides = [g[s] for g in doc["gallery"] for s in ("query", "reference")]
    assert sides and all(s["file"] == s["path"] for s in sides)
    assert {s["corpus"] for s in sides} == {"data", "external:data"}
    html = (published / "report.html").read_text(encoding="utf-8")
    assert html.count(str(release["data"])) == 1  # its inputs table
    assert "../" not in html


def _gallery_thumbnails(doc: dict) -> tuple[int, int]:
    html = render_html(doc, roles=record_roles(), opener=open_image)
    return html.count(' thumbnail">'), html.count("no thumbnail")


def test_the_report_reads_thumbnails_through_the_recorded_roots(published, tmp_path,
                                                                monkeypatch):
    """From a finished folder copied elsewhere, read from another working folder."""
    copy = tmp_path / "copied"
    shutil.copytree(published, copy, ignore=shutil.ignore_patterns("workspace*"))
    monkeypatch.chdir(tmp_path)
    doc = json.loads((copy / "audit.json").read_text(encoding="utf-8"))
    shown = sum(min(len([g for g in doc["gallery"] if g["boundary"] == b["name"]]),
                    doc["options"]["run"]["max_pairs"]) for b in doc["boundaries"])
    assert shown > 0
    examples = min(shown, EXAMPLES)  # shown again under the first figure
    assert _gallery_thumbnails(doc) == (2 * (shown + examples), 0)
    del doc["manifest"]["roots"]  # without the roots the files are not found here
    assert _gallery_thumbnails(doc)[0] == 0


def _whole(out: Path) -> dict[str, str]:
    """Every file under ``out`` is listed in its artifacts.json with the SHA-256 it has, and
    nothing listed is missing, apart from what the docs say is owned separately: the feature
    caches (``OUT/workspace``) and the lock of a run."""
    listed = _listed(out)
    kept = tuple(caches(out))
    found = set()
    for root, dirs, files in os.walk(out):
        for name in files:
            rel = Path(root, name).relative_to(out).as_posix()
            if rel in (ARTIFACTS_FILE, ".splitscope-out.lock") or rel.startswith(
                    tuple(k + "/" for k in kept)):
                continue
            found.add(rel)
    assert found == set(listed)
    for rel, digest in listed.items():
        assert sha256_file(out / rel) == digest, rel
    return listed


def _croissant_current(out: Path) -> None:
    """Every file the Croissant record names in the folder has the SHA-256 it gives."""
    record = json.loads((out / CROISSANT_FILE).read_text(encoding="utf-8"))
    named = [d for d in record["distribution"] if d["@type"] == "cr:FileObject"
             and not d["@id"].startswith("input:")]
    assert named
    for entry in named:
        assert sha256_file(out / entry["contentUrl"]) == entry["sha256"], entry["contentUrl"]


@pytest.mark.slow
def test_a_rerun_leaves_no_file_of_the_previous_run(release, tmp_path):
    out = tmp_path / "again"

    def run(layers: str, *flags: str) -> dict[str, str]:
        assert main(["audit", str(release["data"]), "--out", str(out), "--layers", layers,
                     "--group-regex", DEMO_GROUP_REGEX, "--workers", "1", "--json",
                     *flags]) == 0
        return _whole(out)

    first = run("duplicates,groups", "--croissant", "--card", "--reforms")
    assert set(ADDED) <= set(first)
    _croissant_current(out)
    second = run("duplicates,groups")  # without them: the record, card and checklist go
    assert not set(ADDED) & set(second)
    assert not any((out / name).exists() for name in ADDED)
    third = run("duplicates")  # fewer layers: the groups layer's lists go
    assert "lists/resplit.parquet" in second and "lists/resplit.parquet" not in third
    assert not (out / "lists" / "resplit.parquet").exists()
    # the verbs that add to the finished folder list what they add, with its SHA-256
    for verb in ("croissant", "card", "reforms"):
        assert main([verb, str(out)]) == 0
        added = _whole(out)
    assert set(ADDED) <= set(added)
    _croissant_current(out)  # the card and the checklist change nothing it names
    # the croissant verb rendered the report again, with the gallery's thumbnails
    assert json.loads((out / "audit.json").read_text(encoding="utf-8"))["gallery"]
    html = (out / "report.html").read_text(encoding="utf-8")
    assert ' thumbnail">' in html and "no thumbnail" not in html
    assert set(ADDED).isdisjoint(run("groups"))  # and a rerun removes them again
    assert not any((out / name).exists() for name in ADDED)


def test_a_list_release_names_its_files_relative_to_its_root(release, published, tmp_path):
    manifest = pd.read_csv(published / "lists" / "manifest.csv", dtype=str)
    listed = tmp_path / "lists" / "index.csv"
    listed.parent.mkdir()
    manifest[["path", "split", "label"]].to_csv(listed, index=False)
    out = tmp_path / "listed"
    res = audit(listed, AuditOptions.from_flags(
        workers=1, progress=False, layers=["duplicates"], list_root=str(release["data"]),
        croissant=True), out_dir=out)
    assert res.document["manifest"]["roots"] == {"index": str(release["data"])}
    for rel in _whole(out):
        if rel not in ("audit.json", "report.html"):
            text = _text(out / rel)
            assert str(tmp_path) not in text and str(release["base"]) not in text, rel
            assert "../" not in text, rel
    files = pd.read_csv(out / "lists" / "manifest.csv", dtype=str)["file"]
    assert files.tolist() == manifest["path"].tolist()


# --- the rules, one by one ----------------------------------------------------------------


@pytest.mark.parametrize(("path", "root", "published"), [
    ("/data/release/train/a.png", "/data/release", "train/a.png"),
    ("/data/release/t.parquet::image/07", "/data/release", "t.parquet::image/07"),
    ("/data/other/a.png", "/data/release", "../other/a.png"),  # a row allowed outside
    ("s3://bucket/a.png", "/data/release", "s3://bucket/a.png"),
    ("/data/release/a.png", None, "/data/release/a.png"),
    (None, "/data/release", None),
])
def test_release_relative_and_back(path, root, published):
    assert release_relative(path, root) == published
    if isinstance(path, str) and root is not None and "::" not in path:
        assert resolve(published, root) == path


def test_rows_take_their_corpus_root_and_renamed_corpora_the_one_holding_them():
    rows = pd.DataFrame({"corpus": ["a", "a", "external:a", "arrays"],
                         "file": ["/x/a/1.png", "/x/a/s/2.png", "/y/a/1.png",
                                  "/ws/arrays/f.npz::images/0"]})
    roots = corpus_roots(rows, ["/x/a", "/y/a"])
    assert roots == {"a": "/x/a", "external:a": "/y/a", "arrays": "/ws/arrays"}
    named = published_rows(rows, {"a": "/x/a", "external:a": "/y/a"})
    assert named["file"].tolist() == ["1.png", "s/2.png", "1.png", "/ws/arrays/f.npz::images/0"]
    renamed = published_rows(rows.iloc[:3], {"a": "/x/a", "external:b": "/y/a"})
    assert renamed["file"].tolist() == ["1.png", "s/2.png", "1.png"]


def test_commands_and_inputs_are_published_by_name(tmp_path):
    command = ("splitscope audit /data/release --out=/tmp/out --group-regex '/(?P<group>\\d+)/' "
               "--predictions ../runs --tau 0.98")
    assert published_command(command) == (
        "splitscope audit release --out=out --group-regex '/(?P<group>\\d+)/' "
        "--predictions runs --tau 0.98")
    assert published_command(None) is None
    runs = tmp_path / "runs"
    assert name_under(runs / "a" / "p.csv", runs) == "runs/a/p.csv"
    assert name_under(tmp_path / "p.csv", tmp_path / "p.csv") == "p.csv"
    assert name_under(tmp_path / "other.csv", runs) == "other.csv"
