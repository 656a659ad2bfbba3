"""An audit on a Dask LocalCluster (per-file stage and partitioned NCC search) writes the same
audit.json and the same lists as one on the process pool."""

from __future__ import annotations

import json

import pytest

from splitscope.cli import main

pytest.importorskip("distributed")

#: what may differ between two runs of one audit: when and how long, the command, where
TIMING_KEYS = {"started", "finished", "duration_s", "scan_seconds", "seconds", "command"}


def _strip(doc, out_dir):
    if isinstance(doc, dict):
        return {k: _strip(v, out_dir) for k, v in doc.items() if k not in TIMING_KEYS}
    if isinstance(doc, list):
        return [_strip(v, out_dir) for v in doc]
    if isinstance(doc, str):
        return doc.replace(str(out_dir), "OUT")
    return doc


@pytest.mark.slow
def test_audit_with_dask_executor_equals_process_pool(tmp_path, monkeypatch):
    from splitscope.datasets import make_demo
    from splitscope.relations import partitioned

    # small task blocks so that every boundary's search is cut into many tasks
    monkeypatch.setattr(partitioned, "QUERY_BLOCK", 16)
    monkeypatch.setattr(partitioned, "REFERENCE_BLOCK", 50)
    root = make_demo(tmp_path / "demo", seed=0, n_train=80, n_test=44)
    docs, notes = {}, {}
    for name, extra in (("process", []), ("dask", ["--executor", "dask"])):
        out = tmp_path / name
        assert main(["audit", str(root), "--out", str(out), "--workers", "2", "--json",
                     *extra]) == 0
        doc = json.loads((out / "audit.json").read_text())
        notes[name] = [r["details"]["notes"].pop("ncc_search") for r in doc["records"]
                       if "ncc_search" in (r.get("details") or {}).get("notes", {})]
        docs[name] = _strip(doc, out)
    assert docs["dask"] == docs["process"]
    # the search note says how it ran: locally, or in tasks on the cluster
    assert notes["process"] and len(notes["dask"]) == len(notes["process"])
    assert {n["search"] for n in notes["process"]} == {"brute"}
    assert {n["search"] for n in notes["dask"]} == {"partitioned"}
    assert all(n["partitions"]["tasks"] > 1 for n in notes["dask"])
    lists = sorted(p.relative_to(tmp_path / "process") for p in
                   (tmp_path / "process" / "lists").rglob("*") if p.is_file())
    assert lists
    for rel in lists:
        assert (tmp_path / "dask" / rel).read_bytes() == \
            (tmp_path / "process" / rel).read_bytes(), rel
