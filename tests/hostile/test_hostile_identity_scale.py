"""Identity at scale: one image copied thousands of times, and thousands of empty files, cost
time and memory in proportion to rows (identity is counted per digest group, never by pairing
rows; near duplicates measure each query content once), and an empty file is a failure, never
a byte copy of another empty file.

The audits run as a child process under an address-space cap (``RLIMIT_AS``), so a quadratic
join fails the test with a MemoryError instead of taking the machine's memory. The unit tests
compare the per-group counts with the pairwise definitions on small random data."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import time
import types
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hostile_corpus import image

from splitscope.boundary import Boundary, Population
from splitscope.features.failures import identity_rows
from splitscope.relations.identity import identity_census, pixel_identity, within_copies
from splitscope.relations.label_conflicts import (
    conflict_records,
    label_conflicts,
    within_conflict_record,
)

# glibc reserves 64 MiB of address space per malloc arena (up to 8 per core): on a many-core
# host that alone could reach the cap; two arenas keep the cap a measure of the audit's memory
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), MALLOC_ARENA_MAX="2")
CAP = 4 << 30


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _audit(root: Path, out: Path) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "splitscope.cli", "audit", str(root),
                           "--out", str(out)], env=ENV, capture_output=True, text=True,
                          timeout=110, check=False, preexec_fn=_capped)
    return done, time.monotonic() - start


def _records(out: Path) -> dict:
    doc = json.loads((out / "audit.json").read_text())
    return doc, {r["id"]: r for r in doc["records"]}


# -- audits ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_twenty_thousand_empty_files_per_split_are_failures_not_copies(tmp_path):
    root = tmp_path / "release"
    for split in ("train", "test"):
        folder = root / split / "a"
        folder.mkdir(parents=True)
        for i in range(20_000):
            (folder / f"x{i:05d}.png").touch()
    done, seconds = _audit(root, tmp_path / "out")  # nothing readable: an input error
    assert done.returncode == 2, done.stderr[-2000:]
    assert seconds < 60
    said = [line for line in done.stderr.splitlines()
            if not line.startswith("splitscope audit [")]  # the progress lines
    assert said[0].startswith("error: 40,000 of 40,000 files could not be read (40,000 "
                              "zero byte): they are empty (0 bytes)")
    assert len(said) == 1 and done.stdout == ""
    assert not (tmp_path / "out" / "audit.json").exists()
    for split in ("train", "test"):  # one readable image per split: the audit runs
        image(0 if split == "train" else 1).save(root / split / "a" / "real.png")
    done, seconds = _audit(root, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-2000:]
    assert seconds < 60
    doc, rec = _records(tmp_path / "out")
    assert doc["summary"]["verdict"][0].startswith(
        "WARNING: 40,000 of 40,002 files could not be read (40,000 zero byte)")
    layers = {x["layer"]: x for x in doc["layers"]}
    assert layers["duplicates"]["status"] == "partial"  # it ran; the empty files not assessed
    assert doc["manifest"]["failures"]["rows"] == 40_000
    failures = pd.read_csv(tmp_path / "out" / "lists" / "failures.csv")
    assert len(failures) == 40_000 and set(failures["reason"]) == {"zero_byte"}
    sha = rec["identity.sha256.test--train"]
    assert sha["numerator"] == 0 and sha["denominator"] == 20_001
    assert sha["status"] == "partial"
    for split in ("test", "train"):
        within = rec[f"identity.within_copies.{split}--{split}"]
        assert within["numerator"] == 0 and within["status"] == "partial"
        assert within["denominator"] == 20_001
    lists = tmp_path / "out" / "lists"
    assert pd.read_csv(lists / "identity_groups.csv").empty
    assert pd.read_csv(lists / "within_copies.csv").empty
    conflicts = pd.read_csv(lists / "label_conflicts.csv")
    assert conflicts.empty


@pytest.mark.slow
def test_four_thousand_copies_of_one_image_cost_seconds(tmp_path):
    """2,000 copies in test, 2,000 in train (1,000 labelled a, 1,000 b): every test row is a
    byte copy, and a label conflict, of every train row; the lists stay in proportion to rows
    and say what they left out."""
    buf = io.BytesIO()
    image(3, w=32, h=24).save(buf, "PNG")
    data = buf.getvalue()
    root = tmp_path / "release"
    for split, label, names in (("test", "a", range(2000)), ("train", "a", range(1000)),
                                ("train", "b", range(1000, 2000))):
        folder = root / split / label
        folder.mkdir(parents=True)
        for i in names:
            (folder / f"{split}_{i:04d}.png").write_bytes(data)
    done, seconds = _audit(root, tmp_path / "out")
    assert done.returncode == 0, done.stderr[-2000:]
    assert seconds < 60  # ~10 s here; the pairwise join took over 500 s
    _, rec = _records(tmp_path / "out")
    lists = tmp_path / "out" / "lists"

    sha = rec["identity.sha256.test--train"]
    assert (sha["numerator"], sha["denominator"], sha["status"]) == (2000, 2000, "completed")
    assert rec["near_duplicate.ncc_nearest.test--train"]["numerator"] == 2000
    groups = pd.read_csv(lists / "identity_groups.csv")
    assert groups[["n_query_rows", "n_reference_rows"]].values.tolist() == [[2000, 2000]]
    within = pd.read_csv(lists / "within_copies.csv")
    assert sorted(within["n_rows"]) == [2000, 2000]

    # the pair table: at most max_pairs_per_query pairs per query row, the cap recorded
    notes = rec["near_duplicate.ncc_nearest.test--train"]["details"]["notes"]
    counts = notes["pairs"]
    pairs = pd.read_csv(lists / "pairs.csv")
    assert counts["pairs_total"] == 2000 * 2000
    assert counts["pairs_listed"] == len(pairs) <= 2000 * (counts["max_pairs_per_query"] + 1)
    assert counts["query_rows_capped"] == 2000
    assert notes["distinct_files"]["query_measured"] == 1  # one content measured, not 2,000

    # label conflicts: exact counts, a list capped per digest group with the cap recorded
    conflicts = pd.read_csv(lists / "label_conflicts.csv")
    for rid, pred in (("identity.label_conflict_sha256.test--train", "sha256"),
                      ("near_duplicate.label_conflict_pixel_xxh128.test--train",
                       "pixel_xxh128")):
        r = rec[rid]
        assert r["numerator"] == 2000 and r["details"]["pairs"] == 2000 * 1000
        assert r["details"]["label_pairs"] == {"a / b": 2000 * 1000}
        listed = conflicts[(conflicts["predicate"] == pred)
                           & (conflicts["boundary"] == "test → train")]
        cap = r["details"]["pair_list"]
        assert cap["max_pairs_per_group"] >= 1
        assert cap["pairs_listed"] == len(listed) < 2000 + 1000 + 1
        assert cap["pairs_omitted"] == 2000 * 1000 - len(listed)
        assert listed["row"].nunique() == 2000  # every conflicting row is listed once at least
        assert listed["counterpart_row"].nunique() == 1000
    inside = rec["identity.label_conflict_within.train--train"]
    assert inside["numerator"] == 2000 and inside["details"]["pairs"] == 1000 * 1000
    assert inside["details"]["label_pairs"] == {"a / b": 1000 * 1000}
    assert inside["details"]["pair_list"]["pairs_omitted"] > 0
    assert rec["identity.label_conflict_within.test--test"]["numerator"] == 0
    assert len(conflicts) < 4 * 4000


# -- per-group counts against the pairwise definitions -----------------------------------------


def _random_rows(seed: int, n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)

    def pick(k: int, missing: float, prefix: str) -> pd.arrays.StringArray:
        v = np.array([f"{prefix}{i}" for i in rng.integers(0, k, n)], dtype=object)
        v[rng.random(n) < missing] = None
        return pd.array(v, dtype="string")

    rows = pd.DataFrame({
        "row": np.sort(rng.choice(3 * n, n, replace=False)).astype(np.int64),
        "path": pd.array([f"p/{i}.png" for i in range(n)], dtype="string"),
        "basename": pick(5, 0.1, "b"), "label": pick(3, 0.15, "L"),
        "source": pick(2, 0.0, "s"), "file": [f"/absent/{i}" for i in range(n)],
        "sha256": pick(int(rng.integers(2, 12)), 0.1, "d"),
        "split": rng.choice(["test", "train", "val"], n)})
    # re-encodes: one decoded-pixel digest shared by several byte digests
    pixel = [None if pd.isna(d) or rng.random() < 0.1 else f"P{int(d[1:]) % 4}"
             for d in rows["sha256"]]
    rows["pixel_xxh128"] = pd.array(pixel, dtype="string")
    return rows


def _boundaries(rows: pd.DataFrame) -> list[Boundary]:
    def pop(name, mask):
        return Population(name, np.sort(rows.loc[mask, "row"].to_numpy(np.int64)))

    test, train = pop("test", rows["split"] == "test"), pop("train", rows["split"] == "train")
    everything = pop("*", np.ones(len(rows), bool))
    return [Boundary(test, train), Boundary(train, train), Boundary(everything, everything),
            Boundary(test, pop("train+val", rows["split"] != "test"))]


def _sides(rows, b):
    q = rows[rows["row"].isin(b.query.rows)]
    r = q if b.within else rows[rows["row"].isin(b.reference.rows)]
    return q, r


def _pairs(q, r, key, within):
    """Every (query row, reference row) pair sharing ``key``: the pairwise definition."""
    pairs = q[q[key].notna()].merge(r[r[key].notna()], on=key, suffixes=("", "_r"))
    return pairs[pairs["row"] != pairs["row_r"]] if within else pairs


def _conflicting(pairs):
    known = pairs["label"].notna() & pairs["label_r"].notna()
    return pairs[known & (pairs["label"].astype(str) != pairs["label_r"].astype(str))]


#: the first seeds run in the fast tier, the rest with the slow tests
SEEDS = [pytest.param(s, marks=pytest.mark.slow) if s >= 6 else s for s in range(40)]


@pytest.mark.parametrize("seed", SEEDS)
def test_byte_identity_counts_equal_the_pairwise_definition(seed):
    rows = _random_rows(seed)
    for b in _boundaries(rows):
        got = identity_census(rows, b, confirm=False).affected
        pairs = _pairs(*_sides(rows, b), "sha256", b.within)
        expected = []
        for row, part in pairs.groupby("row", sort=True):
            first = part.sort_values("row_r").iloc[0]
            same_label = (part["label"] == part["label_r"]).fillna(False).any()
            expected.append((row, first["row_r"], len(part),
                             not (part["basename"] == part["basename_r"]).fillna(False).any(),
                             bool(pd.notna(first["label"]) and pd.notna(first["label_r"])
                                  and not same_label)))
        assert [tuple(x) for x in got[["row", "counterpart_row", "n_counterparts", "renamed",
                                       "label_differs"]].itertuples(index=False)] == expected


@pytest.mark.parametrize("seed", SEEDS)
def test_pixel_identity_counts_equal_the_pairwise_definition(seed):
    rows = _random_rows(seed)
    for b in _boundaries(rows):
        got = pixel_identity(rows, b)
        q, r = _sides(rows, b)
        q, r = (x[x["sha256"].notna()] for x in (q, r))
        pairs = _pairs(q, r, "pixel_xxh128", b.within)
        expected = []
        for row, part in pairs.groupby("row", sort=True):
            other = part[part["sha256"] != part["sha256_r"]]
            if len(other):
                expected.append((row, other["row_r"].min(), len(other),
                                 bool((part["sha256"] == part["sha256_r"]).any())))
        assert [tuple(x) for x in got[["row", "counterpart_row", "n_counterparts",
                                       "byte_match"]].itertuples(index=False)] == expected


def _rel(b):
    return types.SimpleNamespace(boundary=b, near=types.SimpleNamespace(notes={}))


def _label_pairs(pairs) -> dict:
    counts = Counter(zip(pairs["label"], pairs["label_r"]))
    return {f"{a} / {c}": n for (a, c), n in sorted(counts.items())}


@pytest.mark.parametrize("seed", SEEDS)
def test_label_conflict_counts_equal_the_pairwise_definition(seed):
    rows = _random_rows(seed)
    kw = {"tau": 0.98, "radius": 6, "geometry": {}, "slug": "b"}
    for b in _boundaries(rows):
        q, r = _sides(rows, b)
        found = {k: _conflicting(_pairs(q, r, k, b.within)) for k in ("sha256", "pixel_xxh128")}
        table = label_conflicts(rows, b, None)
        capped = label_conflicts(rows, b, None, max_pairs_per_group=2)
        for key, pairs in found.items():  # the full list, and the capped one
            mine = table[table["predicate"] == key]
            assert sorted(zip(mine["row"], mine["counterpart_row"])) == \
                sorted(zip(pairs["row"], pairs["row_r"]))
            few = capped[capped["predicate"] == key]
            assert set(zip(few["row"], few["counterpart_row"])) <= set(zip(pairs["row"],
                                                                           pairs["row_r"]))
            assert set(few["row"]) == set(pairs["row"])
            if not b.within:
                assert set(few["counterpart_row"]) == set(pairs["row_r"])
        if b.within:
            union = pd.concat(found.values()).drop_duplicates(["row", "row_r"])
            once = union[union["row"] < union["row_r"]]
            for t in (table, capped):
                rec = within_conflict_record(b, rows, t, "b", max_pairs_per_group=2)
                assert rec.numerator == union["row"].nunique()
                assert rec.details["pairs"] == len(once)
                assert rec.details["label_pairs"] == _label_pairs(once)
                listed = len({tuple(sorted(p)) for p in zip(t["row"], t["counterpart_row"])})
                assert rec.details.get("pair_list", {}).get("pairs_listed", listed) == listed
            continue
        for t in (table, capped):
            recs = {x.predicate["name"]: x for x in conflict_records(
                _rel(b), rows, t, **kw, max_pairs_per_group=2)}
            for key, pairs in found.items():
                rec = recs[f"label_conflict_{key}"]
                assert rec.numerator == pairs["row"].nunique()
                assert rec.details["pairs"] == len(pairs)
                assert rec.details["label_pairs"] == _label_pairs(pairs)
                listed = int((t["predicate"] == key).sum())
                if listed < len(pairs):
                    assert rec.details["pair_list"] == {
                        **rec.details["pair_list"], "max_pairs_per_group": 2,
                        "pairs_listed": listed, "pairs_omitted": len(pairs) - listed}
                else:
                    assert "pair_list" not in rec.details


# -- empty files -----------------------------------------------------------------------------


def test_empty_files_have_no_identity():
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # SHA-256 of b""
    rows = pd.DataFrame({
        "row": np.arange(6, dtype=np.int64), "path": [f"{s}/{i}.png" for i, s in
                                                      enumerate(["test"] * 3 + ["train"] * 3)],
        "basename": [f"{i}.png" for i in range(6)], "label": ["a", "b", "a", "b", "a", "a"],
        "source": "s", "file": [f"/x/{i}" for i in range(6)],
        "sha256": pd.array([empty] * 4 + ["d1", "d1"], dtype="string"),
        "pixel_xxh128": pd.array([pd.NA] * 4 + ["p1", "p1"], dtype="string"),
        "size_bytes": pd.array([0, 0, 0, 0, 10, 10], dtype="Int64"),
        "status": ["zero_byte"] * 4 + ["ok", "ok"]})
    test, train = Population("test", np.arange(3)), Population("train", np.arange(3, 6))
    census = identity_census(rows, Boundary(test, train), confirm=False)
    assert census.n_affected == 0 and census.not_assessed == 3 and census.n_query == 3
    copies = within_copies(rows, test)
    assert copies.empty
    inside = Boundary(train, train)
    assert within_copies(rows, train)["n_rows"].tolist() == [2]  # the two real copies
    assert label_conflicts(rows, Boundary(test, train), None).empty
    assert within_conflict_record(inside, rows, label_conflicts(rows, inside, None),
                                  "t").numerator == 0
    cleared = identity_rows(rows)
    assert cleared["sha256"].isna().tolist() == [True] * 4 + [False] * 2
    assert identity_rows(cleared) is cleared  # nothing left to clear: no copy


# -- near duplicates: each query content measured once ------------------------------------


@pytest.fixture(scope="module")
def copied_scan(tmp_path_factory):
    """Byte copies under distinct names on the query side: of a train image, of a test-only
    image, of a flat image and of an undecodable file; train holds copies too."""
    from splitscope.features.scanning import scan

    root = tmp_path_factory.mktemp("copies")
    for folder in ("train/a", "train/b", "test/a", "test/b"):
        (root / folder).mkdir(parents=True)
    for i in range(6):
        image(i, w=40, h=32).save(root / f"train/{'ab'[i % 2]}/t{i}.png")
    (root / "train/b/t0_again.png").write_bytes((root / "train/a/t0.png").read_bytes())
    copies = {"train/a/t0.png": 5, "train/b/t1.png": 3}
    for src, n in copies.items():
        for k in range(n):
            (root / f"test/{'ab'[k % 2]}/c_{Path(src).stem}_{k}.png").write_bytes(
                (root / src).read_bytes())
    image(40, w=40, h=32).save(root / "test/a/own0.png")
    for k in range(4):
        (root / f"test/b/own_{k}.png").write_bytes((root / "test/a/own0.png").read_bytes())
    flat = io.BytesIO()
    image(0, w=40, h=32).point(lambda v: 128).save(flat, "PNG")
    for k in range(3):
        (root / f"test/a/flat_{k}.png").write_bytes(flat.getvalue())
    for k in range(2):
        (root / f"test/b/broken_{k}.png").write_bytes(b"not an image")
    image(50, w=40, h=32).save(root / "test/a/alone.png")
    return scan(root, tmp_path_factory.mktemp("copies-ws"), workers=1, progress=False)


@pytest.mark.parametrize(("cap", "dihedral"), [(1, False), (5, False), (2, True)])
def test_query_copies_measured_once_equal_every_row(copied_scan, cap, dihedral):
    from splitscope.relations.boundary_relations import resolve_boundaries
    from splitscope.relations.near_duplicate import near_duplicates, near_duplicates_rows
    from splitscope.relations.options import SearchOptions

    rows = copied_scan.rows()
    b = resolve_boundaries(copied_scan.manifest, ["test->train"])[0]
    options = SearchOptions(max_pairs_per_query=cap, dihedral=dihedral)
    fast = near_duplicates(rows, copied_scan.thumbs, b, options, workers=1)
    full = near_duplicates_rows(rows, copied_scan.thumbs, b, options, workers=1)
    measured = fast.notes["distinct_files"]
    assert measured["query_measured"] < measured["query_files"] == measured["query_rows"]
    pd.testing.assert_frame_equal(fast.flags, full.flags)
    pd.testing.assert_frame_equal(fast.pairs, full.pairs)
    pd.testing.assert_frame_equal(fast.sweep, full.sweep)
    assert fast.assessed == full.assessed
    assert fast.notes["pairs"] == full.notes["pairs"]
    assert fast.flags["ncc_nearest"].fillna(False).sum() == 8  # the copies of t0 and t1
