"""An audit on a Dask LocalCluster (per-file stage and partitioned NCC search) writes the same
audit.json and the same lists as one on the process pool."""

from __future__ import annotations

import json

import pytest

from splitscope.cli import main

pytest.importorskip("distributed")

#: what may differ between two runs of one audit: when and how long, the command, where, and
#: the executor the options name (options.run.engine)
TIMING_KEYS = {"started", "finished", "duration_s", "scan_seconds", "seconds", "command",
               "engine"}


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


@pytest.mark.slow
def test_external_containment_on_dask_equals_process_pool(tmp_path):
    """The cross-corpus boundary's search is partitioned over the cluster (its sides read
    the two workspaces' thumbnail files) and gives the same audit."""
    import shutil

    from splitscope.datasets import make_demo

    root = make_demo(tmp_path / "demo", seed=0, n_train=80, n_test=44)
    ext = make_demo(tmp_path / "ext", seed=1, n_train=80, n_test=44)
    for src in sorted((root / "train" / "lesion").iterdir())[:6]:  # copies in the external set
        shutil.copy(src, ext / "test" / "lesion" / f"copy_{src.name}")
    docs, notes = {}, {}
    for name, extra in (("process", []), ("dask", ["--executor", "dask"])):
        out = tmp_path / name
        assert main(["audit", str(root), "--external", str(ext), "--out", str(out),
                     "--workers", "2", "--json", *extra]) == 0
        doc = json.loads((out / "audit.json").read_text())
        notes[name] = [r["details"]["notes"].pop("ncc_search") for r in doc["records"]
                       if (r.get("boundary") or {}).get("kind") == "cross-corpus"
                       and "ncc_search" in (r.get("details") or {}).get("notes", {})]
        for r in doc["records"]:
            (r.get("details") or {}).get("notes", {}).pop("ncc_search", None)
        docs[name] = _strip(doc, out)
    assert docs["dask"] == docs["process"]
    assert notes["dask"] and {n["search"] for n in notes["dask"]} == {"partitioned"}
    assert {n["search"] for n in notes["process"]} != {"partitioned"}
    contained = [r for r in docs["dask"]["records"]
                 if (r.get("boundary") or {}).get("kind") == "cross-corpus"
                 and r["id"].startswith("identity.sha256")]
    assert contained and contained[0]["numerator"] >= 6


@pytest.mark.slow
def test_identity_recovery_on_dask_equals_local(tmp_path):
    """Identity recovery's NCC search partitioned over a real LocalCluster gives the same
    mapping as the local search."""
    import distributed
    import pandas as pd
    from PIL import Image

    from splitscope.datasets import make_demo
    from splitscope.features.scanning import scan
    from splitscope.groups.recovery import recover_from_scans

    up_root = make_demo(tmp_path / "up", seed=0, n_train=80, n_test=44)
    other = make_demo(tmp_path / "other", seed=2, n_train=80, n_test=44)
    q_root = tmp_path / "query"
    (q_root / "test" / "x").mkdir(parents=True)
    for i, src in enumerate(sorted((up_root / "train" / "lesion").glob("*.jpg"))[:8]):
        with Image.open(src) as im:  # the same pixels under other bytes: an NCC match
            im.save(q_root / "test" / "x" / f"re{i}.png")
    for i, src in enumerate(sorted((other / "test").rglob("*.jpg"))[:8]):
        (q_root / "test" / "x" / f"o{i}.jpg").write_bytes(src.read_bytes())
    q = scan(q_root, tmp_path / "ws-q", progress=False)
    up = scan(up_root, tmp_path / "ws-up", group_regex=r"(?P<group>p\d+)_", progress=False)
    local = recover_from_scans(q, up)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        remote = recover_from_scans(q, up, client=client)
    pd.testing.assert_frame_equal(remote.mapping, local.mapping)
    pd.testing.assert_frame_equal(remote.by_class, local.by_class)
    assert (local.mapping["method"] == "ncc").sum() >= 8


@pytest.mark.slow
def test_groups_upstream_cli_on_dask_equals_process_pool(tmp_path, monkeypatch, capsys):
    """``groups --upstream --executor dask`` runs identity recovery's NCC search on the
    cluster (the partitioned search is called) and prints the same records."""
    from PIL import Image

    from splitscope.datasets import make_demo
    from splitscope.relations import partitioned

    up_root = make_demo(tmp_path / "up", seed=0, n_train=80, n_test=44)
    q_root = tmp_path / "query"
    for split in ("train", "test"):
        (q_root / split / "x").mkdir(parents=True)
    for i, src in enumerate(sorted((up_root / "train" / "lesion").glob("*.jpg"))[:12]):
        with Image.open(src) as im:  # the same pixels under other bytes: an NCC match
            im.save(q_root / ("test" if i % 2 else "train") / "x" / f"re{i}.png")
    calls = []
    search = partitioned.partitioned_ncc_search

    def spy(client, *args, **kwargs):
        calls.append(type(client).__name__)
        return search(client, *args, **kwargs)

    monkeypatch.setattr(partitioned, "partitioned_ncc_search", spy)
    docs = {}
    for name, extra in (("process", []), ("dask", ["--executor", "dask"])):
        code = main(["groups", str(q_root), "--upstream", str(up_root),
                     "--upstream-group-regex", r"(?P<group>p\d+)_", "--workspace",
                     str(tmp_path / f"ws-{name}"), "--workers", "2", "--json", *extra])
        assert code in (0, 1)
        docs[name] = json.loads(capsys.readouterr().out)
    assert calls and set(calls) == {"Client"}
    assert _strip(docs["dask"], tmp_path) == _strip(docs["process"], tmp_path)
    recovery = [r for r in docs["dask"]["records"] if r["id"] == "group.recovery"]
    assert recovery and "12 of" in recovery[0]["conclusion"]
