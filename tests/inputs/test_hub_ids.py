"""``hf:NAME[:CONFIG]`` inputs: a Hub dataset read from the local ``datasets`` cache with the
network closed audits like its ``save_to_disk`` folder; an uncached one is refused (exit 2)
with how to cache it; outputs never go into the cache."""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from input_builders import dataset_dict, generated_jpegs, planted_release

import splitscope
from splitscope.cli import app, main
from splitscope.core.options import AuditOptions
from splitscope.manifest.build import build_manifest
from splitscope.manifest.hub import parse_hub_id

AUDIT = AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"])
NAME = "splitscope_tiny"


@pytest.fixture()
def hub(tmp_path, datasets, monkeypatch):
    """A tiny image DatasetDict (train/test, planted byte copies) cached as ``load_dataset``
    caches a Parquet Hub repository (``<cache>/NAME/default/0.0.0/<hash>/NAME-<split>.arrow``),
    its ``save_to_disk`` folder, and the cache made the one in effect."""
    from datasets.packaged_modules.parquet.parquet import Parquet

    dd = dataset_dict(datasets, planted_release(generated_jpegs(12)))
    saved = tmp_path / "saved"
    dd.save_to_disk(str(saved))
    repo = tmp_path / "repo" / "data"
    repo.mkdir(parents=True)
    files = {}
    for split in dd:
        files[split] = str(repo / f"{split}-00000-of-00001.parquet")
        dd[split].to_parquet(files[split])
    cache = tmp_path / "hf" / "datasets"
    Parquet(cache_dir=str(cache), dataset_name=NAME, config_id="default", hash="0123abcd",
            data_files=files).download_and_prepare()
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    return saved, cache


@pytest.fixture()
def no_network(monkeypatch):
    """Any socket opened fails the test: nothing may be downloaded."""
    def refuse(*args, **kwargs):
        raise AssertionError("a network connection was opened")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _doc(out: Path) -> dict:
    return json.loads((out / "audit.json").read_text())


def _findings(doc: dict) -> dict[str, dict]:
    """Each record minus its inputs (paths and fingerprints differ by design)."""
    return {r["id"]: {k: v for k, v in r.items() if k != "inputs"} for r in doc["records"]}


def _arrow_digests(cache: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(cache.rglob("*.arrow"))}


def _listing(cache: Path) -> list[str]:
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*"))


@pytest.mark.slow
def test_hub_id_audits_like_its_save_to_disk_folder(tmp_path, hub, no_network):
    saved, cache = hub
    before, listed = _arrow_digests(cache), _listing(cache)
    splitscope.audit(str(saved), AUDIT, out_dir=tmp_path / "out-saved")
    splitscope.audit(f"hf:{NAME}", AUDIT, out_dir=tmp_path / "out-hub")
    a, b = _doc(tmp_path / "out-saved"), _doc(tmp_path / "out-hub")
    ra, rb = _findings(a), _findings(b)
    assert set(ra) == set(rb)
    for rid in ra:
        assert ra[rid] == rb[rid], rid
    assert ra["identity.sha256.test--train"]["numerator"] == 2  # the planted byte copies
    (entry,) = [i for i in b["inputs"] if i["role"] == "audited"]
    assert entry["path"] == f"hf:{NAME}" and entry["kind"] == "hub" and entry["rows"] == 16
    digest = hashlib.sha256("".join(f"{n}\t{before[n]}\n" for n in
                                    (f"{NAME}-train.arrow", f"{NAME}-test.arrow")).encode())
    assert entry["sha256"] == digest.hexdigest()
    assert b["manifest"]["corpora"] == {NAME: 16}  # the corpus is named after the dataset
    assert b["manifest"]["rows"] == a["manifest"]["rows"] == 16
    assert _arrow_digests(cache) == before and _listing(cache) == listed  # read, not written


def test_config_is_read_and_named_configs_must_be_cached(tmp_path, hub, no_network):
    manifest = build_manifest(f"hf:{NAME}:default")
    assert len(manifest) == 16 and set(manifest["corpus"]) == {NAME}
    assert set(manifest["split"]) == {"train", "test"}
    with pytest.raises(splitscope.InputError, match="not in the local datasets cache"):
        build_manifest(f"hf:{NAME}:other")


def test_uncached_dataset_is_refused_with_how_to_cache_it(tmp_path, hub, no_network,
                                                           capsys):
    with pytest.raises(splitscope.InputError) as err:
        splitscope.audit("hf:someone/not-cached", AUDIT, out_dir=tmp_path / "out")
    text = str(err.value)
    assert "is not in the local datasets cache" in text
    assert "datasets.load_dataset('someone/not-cached')" in text
    assert "huggingface-cli download" in text
    assert not (tmp_path / "out").exists()
    assert main(["audit", "hf:someone/not-cached", "--out", str(tmp_path / "out"),
                 "--workers", "1"]) == 2
    assert "is not in the local datasets cache" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_output_inside_the_cache_is_refused(tmp_path, hub, no_network):
    _, cache = hub
    for out in (cache / "out", cache.parent):
        with pytest.raises(splitscope.InputError, match="never writes"):
            splitscope.audit(f"hf:{NAME}", AUDIT, out_dir=out)
    assert not (cache / "out").exists()
    opts = AuditOptions.from_flags(workers=1, progress=False, layers=["duplicates"],
                                   workspace=str(cache / "ws"))
    with pytest.raises(splitscope.InputError, match="never writes"):
        splitscope.audit(f"hf:{NAME}", opts, out_dir=tmp_path / "out")


@pytest.mark.slow
def test_cli_audits_a_hub_id(tmp_path, hub, no_network):
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["audit", f"hf:{NAME}", "--out", str(out), "--workers", "1",
                                   "--layers", "duplicates"])
    assert res.exit_code in (0, 1), res.output  # 1: the planted leak may fail a default gate
    doc = _doc(out)
    assert doc["inputs"][0]["path"] == f"hf:{NAME}"
    assert {r["id"]: r for r in doc["records"]}["identity.sha256.test--train"]["numerator"] == 2
    assert main(["scan", f"hf:{NAME}", "--workspace", str(tmp_path / "ws"),
                 "--workers", "1"]) == 0
    assert (tmp_path / "ws" / "manifest.parquet").is_file()


def test_scan_reads_a_hub_id_like_the_loaded_dataset(tmp_path, hub, datasets, no_network):
    saved, _ = hub
    by_id = splitscope.scan(f"hf:{NAME}", tmp_path / "ws", workers=1, progress=False).manifest
    loaded = build_manifest(datasets.load_from_disk(str(saved)))
    same = ["split", "split_released", "label", "basename", "stored_path", "table_row"]
    assert by_id[same].reset_index(drop=True).equals(loaded[same].reset_index(drop=True))


@pytest.mark.parametrize("bad", ["hf:", "hf:a/b/c", "hf:x:", "hf:x:y:z"])
def test_malformed_ids_are_refused(bad):
    with pytest.raises(splitscope.InputError, match="no Hub id"):
        parse_hub_id(bad)


def test_several_cached_configs_need_one_named(tmp_path, hub, no_network):
    from datasets.packaged_modules.parquet.parquet import Parquet

    _, cache = hub
    files = {"train": str(next((tmp_path / "repo" / "data").glob("train-*.parquet")))}
    Parquet(cache_dir=str(cache), dataset_name=NAME, config_name="small", config_id="small",
            hash="4567cdef",
            data_files=files).download_and_prepare()
    with pytest.raises(splitscope.InputError, match=f"hf:{NAME}:CONFIG"):
        build_manifest(f"hf:{NAME}")
    assert len(build_manifest(f"hf:{NAME}:small")) == 8
