"""Embedding similarity (METHODS §2.4): cosine search through the NCC search machinery, the
``embedding_cosine`` predicate of the audit, and ``duplicates --embeddings``."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from splitscope.boundary import Boundary, Population
from splitscope.errors import InputError
from splitscope.relations.duplicates import audit_duplicates
from splitscope.relations.ncc import EMBEDDING_SWEEP, embedding_search, ncc_search, unit_vectors
from splitscope.relations.ncc_core import centred_unit_vectors
from splitscope.relations.options import SearchOptions


def brute_force(q: np.ndarray, r: np.ndarray, exclude=None) -> np.ndarray:
    """Cosine matrix in float64 with numpy; undefined rows (zero or non-finite) and excluded
    pairs are -inf."""
    q = np.asarray(q, np.float64)
    r = np.asarray(r, np.float64)
    qn = np.linalg.norm(q, axis=1)
    rn = np.linalg.norm(r, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = (q @ r.T) / np.outer(qn, rn)
    bad_q = ~np.isfinite(q).all(1) | (qn == 0)
    bad_r = ~np.isfinite(r).all(1) | (rn == 0)
    cos[bad_q] = -np.inf
    cos[:, bad_r] = -np.inf
    if exclude is not None:
        for i, j in enumerate(exclude):
            if j >= 0:
                cos[i, j] = -np.inf
    return cos


def expected_best(cos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    best = cos.max(1) if cos.shape[1] else np.full(len(cos), -np.inf)
    idx = np.where(np.isfinite(best), cos.argmax(1) if cos.shape[1] else -1, -1)
    return idx, np.where(np.isfinite(best), best, np.nan)


def sign_vectors(rng, n: int, d: int = 8, k: int = 4) -> np.ndarray:
    """Vectors with exactly k entries ±1 (norm 2 for k = 4): unit entries ±0.5, so every cosine
    is a multiple of 1/4, exact in float32 in any summation order (exact ties)."""
    out = np.zeros((n, d))
    for i in range(n):
        out[i, rng.choice(d, k, replace=False)] = rng.choice([-1.0, 1.0], k)
    return out


@pytest.fixture
def vectors():
    rng = np.random.default_rng(3)
    q = rng.normal(size=(25, 16))
    r = rng.normal(size=(60, 16))
    q[:5] = r[[7, 3, 3, 59, 0]] * [[1.0], [2.5], [0.1], [7.0], [1e-3]]  # scaled copies
    q[5] = 0.0  # undefined query
    q[6, 2] = np.nan  # undefined query
    r[10] = 0.0  # undefined reference
    r[11] = q[7] * 3  # a match... that can never be used
    r[11, 0] = np.inf
    return q, r


def test_matches_brute_force_cosine(vectors):
    q, r = vectors
    res = embedding_search(q, r, tau=0.3, block=7, query_chunk=4)
    cos = brute_force(q, r)
    idx, best = expected_best(cos)
    np.testing.assert_array_equal(res.best_index, idx)
    np.testing.assert_allclose(res.best_cosine, best, atol=1e-5)
    assert res.best_index[:5].tolist() == [7, 3, 3, 59, 0]
    np.testing.assert_allclose(res.best_cosine[:5], 1.0, atol=1e-6)
    assert res.best_cosine.dtype == np.float32
    # undefined rows: flagged, NaN, never matched
    assert res.query_undefined.tolist() == [False] * 5 + [True, True] + [False] * 18
    assert res.reference_undefined[[10, 11]].all() and res.reference_undefined.sum() == 2
    assert (res.best_index[[5, 6]] == -1).all() and np.isnan(res.best_cosine[[5, 6]]).all()
    assert not np.isin([10, 11], res.best_index).any()
    assert not res.flagged[[5, 6]].any()
    # pairs: every (q, r) with cosine >= tau (none within 1e-4 of tau in this draw)
    assert np.abs(cos[np.isfinite(cos)] - 0.3).min() > 1e-4
    qi, ri = np.nonzero(cos >= 0.3)
    np.testing.assert_array_equal(res.pairs["query"], qi)
    np.testing.assert_array_equal(res.pairs["reference"], ri)
    np.testing.assert_allclose(res.pairs["cosine"], cos[qi, ri], atol=1e-5)
    assert list(res.pairs.columns) == ["query", "reference", "cosine"]
    assert res.params["dimension"] == 16 and res.params["pairs_total"] == len(qi)


@pytest.mark.parametrize("block,chunk", [(1, 1), (3, 2), (7, 5), (1000, 1000)])
def test_exact_ties_lowest_index_and_pairs(block, chunk):
    rng = np.random.default_rng(5)
    r = sign_vectors(rng, 40)
    q = np.concatenate([sign_vectors(rng, 12), r[[30, 4]]])
    r[[0, 17]] = 0.0
    q[3] = 0.0
    cos = brute_force(q, r)
    idx, best = expected_best(cos)
    # many exact ties: the lowest reference position must win
    ties = (cos == best[:, None]).sum(1)
    assert (ties > 1).sum() >= 5
    res = embedding_search(q, r, tau=0.5, block=block, query_chunk=chunk)
    np.testing.assert_array_equal(res.best_index, idx)
    np.testing.assert_array_equal(res.best_cosine, best.astype(np.float32))
    qi, ri = np.nonzero(cos >= 0.5)  # exact threshold: values are multiples of 1/4
    np.testing.assert_array_equal(res.pairs["query"], qi)
    np.testing.assert_array_equal(res.pairs["reference"], ri)
    np.testing.assert_array_equal(res.pairs["cosine"], cos[qi, ri].astype(np.float32))
    assert res.query_undefined.sum() == 1 and res.reference_undefined.sum() == 2


def test_block_sizes_do_not_change_results(vectors):
    q, r = vectors
    a = embedding_search(q, r, tau=0.2)
    for block, chunk in ((1, 3), (9, 1), (59, 24)):
        b = embedding_search(q, r, tau=0.2, block=block, query_chunk=chunk)
        np.testing.assert_array_equal(a.best_index, b.best_index)
        np.testing.assert_allclose(a.best_cosine, b.best_cosine, atol=1e-6)  # sgemm rounding
        pd.testing.assert_frame_equal(a.pairs, b.pairs, atol=1e-6)


def test_exclusion(vectors):
    _, r = vectors
    r = r.copy()
    r[20] = r[21] * 4  # two parallel references: each other's nearest once self is excluded
    res = embedding_search(r, r, tau=0.99, exclude_self=True, block=8)
    cos = brute_force(r, r, exclude=np.arange(len(r)))
    idx, best = expected_best(cos)
    np.testing.assert_array_equal(res.best_index, idx)
    np.testing.assert_allclose(res.best_cosine, best, atol=1e-5)
    assert res.best_index[20] == 21 and res.best_index[21] == 20
    assert not (res.best_index == np.arange(len(r))).any()
    assert set(zip(res.pairs["query"], res.pairs["reference"])) == {(20, 21), (21, 20)}
    # explicit per-query exclusion (-1: none); a query with its only match excluded is unmatched
    ex = np.full(len(r), -1)
    ex[20] = 21
    res2 = embedding_search(r[[20, 21]], r[[21]], exclude=[0, -1])
    assert res2.best_index.tolist() == [-1, 0] and np.isnan(res2.best_cosine[0])
    res3 = embedding_search(r, r, exclude=ex, tau=0.99)
    assert res3.best_index[20] == 20  # itself: only the parallel reference 21 is excluded
    assert res3.best_index[19] == 19


def test_max_pairs_bound_keeps_best_exact(vectors):
    q, r = vectors
    full = embedding_search(q, r, tau=0.1)
    cut = embedding_search(q, r, tau=0.1, max_pairs=5, block=4)
    assert len(cut.pairs) == 5 and cut.params["pairs_truncated"]
    assert cut.params["pairs_total"] == len(full.pairs) > 5
    np.testing.assert_array_equal(cut.best_index, full.best_index)


def test_same_machinery_as_ncc():
    """NCC is cosine similarity of centred thumbnails: both searches agree on them."""
    rng = np.random.default_rng(2)
    t = rng.integers(0, 256, (30, 10, 10), dtype=np.uint8)
    t[4] = 77  # flat
    _, flat = centred_unit_vectors(t)
    vec = t.reshape(30, -1).astype(np.float64)
    vec -= vec.mean(1, keepdims=True)
    a = ncc_search(t[:12], t, tau=0.2, exclude_self=False, block=5)
    b = embedding_search(vec[:12], vec, tau=0.2, block=5)
    np.testing.assert_array_equal(a.best_index, b.best_index)
    np.testing.assert_allclose(a.best_rho, b.best_cosine, atol=1e-5)
    np.testing.assert_array_equal(a.query_flat, b.query_undefined)
    np.testing.assert_array_equal(flat, b.reference_undefined)
    pd.testing.assert_frame_equal(a.pairs[["query", "reference"]], b.pairs[["query",
                                                                           "reference"]])


def test_unit_vectors_extremes_and_sweep():
    u, bad = unit_vectors(np.array([[1e300, 1e300], [3e-310, 0.0], [0.0, 0.0], [np.nan, 1.0],
                                    [3, 4]]))
    np.testing.assert_allclose(u[[0, 1, 4]], [[2 ** -0.5, 2 ** -0.5], [1, 0], [0.6, 0.8]],
                               rtol=1e-6)
    assert bad.tolist() == [False, False, True, True, False] and not u[bad].any()
    res = embedding_search([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], [[1.0, 0.1], [0.0, 0.0]])
    sw = res.sweep()
    assert sw["tau"].tolist() == list(EMBEDDING_SWEEP)
    assert sw["assessed"].tolist() == [2] * len(EMBEDDING_SWEEP)
    assert sw["flat_or_unmatched"].iloc[0] == 1
    assert sw.set_index("tau").loc[0.99, "affected"] == 1  # cos(q0, r0) = 0.995
    assert sw.set_index("tau").loc[0.999, "affected"] == 0


def test_input_errors():
    with pytest.raises(InputError, match="one embedding on both sides"):
        embedding_search(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(InputError, match=r"\(n, d\)"):
        embedding_search(np.ones((2, 3, 1)), np.ones((2, 3)))
    with pytest.raises(InputError, match="tau"):
        embedding_search(np.ones((2, 3)), np.ones((2, 3)), tau=1.5)
    with pytest.raises(InputError, match="real numbers"):
        embedding_search(np.ones((2, 3), complex), np.ones((2, 3)))
    with pytest.raises(InputError, match="one entry per query"):
        embedding_search(np.ones((2, 3)), np.ones((2, 3)), exclude=[0])
    empty = embedding_search(np.zeros((0, 3)), np.ones((2, 3)))
    assert empty.best_index.size == 0 and len(empty.pairs) == 0


# ---- the audit predicate on the synthetic release ------------------------------------------

D = 64
#: query path → reference path whose embedding it (nearly) repeats; b10_copy repeats b10
PLANTED_EMB = {"test/A/a00.png": "train/A/a00.png", "test/A/crop.png": "train/A/a06.png"}


def embedding_table(manifest: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """One random D-vector per released path; planted near-identical vectors, one zero vector
    (test/B/clean0.png) and one path left out (test/B/broken.png)."""
    rng = np.random.default_rng(seed)
    paths = sorted(set(manifest["path"].astype(str)))
    vec = {p: rng.normal(size=D) for p in paths}
    for q, r in PLANTED_EMB.items():
        vec[q] = vec[r] + 0.02 * rng.normal(size=D)
    vec["train/B/b10_copy.png"] = vec["train/B/b10.png"] * 1.5
    vec["test/B/clean0.png"] = np.zeros(D)
    del vec["test/B/broken.png"]
    table = pd.DataFrame(np.stack(list(vec.values())), columns=[f"e{i}" for i in range(D)])
    table.insert(0, "path", list(vec))
    return table


@pytest.fixture(scope="module")
def emb_audit(planted_scan, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("emb")
    src = tmp / "emb.parquet"
    embedding_table(planted_scan.manifest).to_parquet(src, index=False)
    m = planted_scan.manifest
    clean = np.sort(m.loc[m["path"].str.contains("clean"), "row"].to_numpy(np.int64))
    train = np.sort(m.loc[m["split"] == "train", "row"].to_numpy(np.int64))
    control = Boundary(Population("clean", clean), Population("train", train))
    result = audit_duplicates(planted_scan, ["test->train"],
                              SearchOptions(ssim=False, transforms=0), embeddings=src,
                              control=control, out_dir=tmp / "out")
    return result, src, tmp / "out"


@pytest.mark.slow
def test_audit_flags_planted_embeddings_only(emb_audit, planted_scan):
    result, _, _ = emb_audit
    f = result.tables["query_flags"].set_index("path")
    flagged = set(f.index[f["embedding_cosine"].fillna(False).astype(bool)])
    assert flagged == set(PLANTED_EMB)
    rows = planted_scan.manifest.set_index("path")["row"]
    for q, r in PLANTED_EMB.items():
        assert f.loc[q, "embedding_cosine_counterpart"] == rows[r]
        assert f.loc[q, "embedding_best_cosine"] > 0.99
    # zero vector and missing embedding: flagged undefined, not assessed (NA), never matched
    for p in ("test/B/clean0.png", "test/B/broken.png"):
        assert pd.isna(f.loc[p, "embedding_cosine"]) and f.loc[p, "embedding_undefined"]
        assert f.loc[p, "embedding_cosine_counterpart"] == -1
    others = f.drop(index=[*PLANTED_EMB, "test/B/clean0.png", "test/B/broken.png"])
    assert (others["embedding_best_cosine"] < 0.8).all()  # random 64-d vectors


def test_audit_embedding_record(emb_audit):
    result, src, _ = emb_audit
    rec = next(r for r in result.records if r.predicate["name"] == "embedding_cosine")
    assert rec.id == "near_duplicate.embedding_cosine.test--train"
    assert (rec.unit, rec.numerator, rec.denominator) == ("affected query row", 2, 18)
    assert rec.coverage == {"assessed": 16, "total": 18}
    assert rec.status == "partial" and rec.details["not_assessed"] == 2
    assert rec.details["undefined_query_rows"] == 2
    params = rec.predicate["params"]
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    assert params["source_sha256"] == digest and params["dimension"] == D
    assert params["tau"] == 0.95 and params["similarity"] == "cosine"
    assert params["rows_without_embedding"] == 1
    assert rec.inputs == [{"path": "emb.parquet", "sha256": digest}]
    sweep = rec.details["sweep"]
    assert [s["tau"] for s in sweep] == list(EMBEDDING_SWEEP)
    assert next(s["affected"] for s in sweep if s["tau"] == 0.95) == rec.numerator
    assert all(s["assessed"] == 16 for s in sweep)
    control = rec.details["control"]
    assert control["rate"] == 0 and control["denominator"] == 5  # clean0 is undefined
    schema = pytest.importorskip("splitscope.records.schema")
    schema.validate_record(rec.to_dict())


def test_audit_embedding_exports(emb_audit):
    result, _, out = emb_audit
    cont = result.tables["contaminated"]
    part = cont[cont["predicate"] == "embedding_cosine"].set_index("path")
    assert set(part.index) == set(PLANTED_EMB)
    assert (part["measure"] == "embedding_best_cosine").all() and (part["value"] > 0.99).all()
    assert part.loc["test/A/crop.png", "counterpart_path"] == "train/A/a06.png"
    assert (out / "contaminated" / "embedding_cosine__test_train.csv").is_file()
    pairs = result.tables["embedding_pairs"]
    assert set(pairs["path"]) == set(PLANTED_EMB) and pairs["nearest"].all()
    assert (out / "embedding_pairs.csv").is_file()


def test_within_boundary_and_npy_source(planted_scan, tmp_path):
    table = embedding_table(planted_scan.manifest).set_index("path")
    paths = planted_scan.manifest["path"].astype(str)
    matrix = table.reindex(paths).to_numpy()  # manifest order; broken.png: NaN line
    np.save(tmp_path / "emb.npy", matrix)
    result = audit_duplicates(planted_scan, [("train", "train")],
                              SearchOptions(ssim=False, transforms=0),
                              embeddings=tmp_path / "emb.npy")
    f = result.tables["query_flags"].set_index("path")
    hit = set(f.index[f["embedding_cosine"].fillna(False).astype(bool)])
    assert hit == {"train/B/b10.png", "train/B/b10_copy.png"}  # never a row with itself
    rec = next(r for r in result.records if r.predicate["name"] == "embedding_cosine")
    assert rec.predicate["params"]["source"] == "emb.npy"


def test_no_embeddings_no_record_and_bad_source(planted_scan, tmp_path):
    with pytest.raises(InputError, match="embedding rows"):
        audit_duplicates(planted_scan, ["test->train"], SearchOptions(transforms=0),
                         embeddings=np.ones((3, 4)))
    with pytest.raises(InputError, match="listed twice"):
        t = embedding_table(planted_scan.manifest)
        audit_duplicates(planted_scan, ["test->train"], SearchOptions(transforms=0),
                         embeddings=pd.concat([t, t.iloc[:1]]))
    with pytest.raises(InputError, match="embedding_tau"):
        audit_duplicates(planted_scan, ["test->train"], SearchOptions(transforms=0),
                         embeddings=np.ones((3, 4)), embedding_tau=0)


@pytest.mark.slow
def test_cli_embeddings(planted_root, tmp_path):
    from splitscope.manifest import build_manifest

    src = tmp_path / "emb.csv"
    embedding_table(build_manifest(planted_root)).to_csv(src, index=False)
    res = CliRunner().invoke(app_(), ["duplicates", str(planted_root), "--query", "test",
                                      "--reference", "train", "--workspace",
                                      str(tmp_path / "ws"), "--workers", "1", "--json",
                                      "--embeddings", str(src)])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.output)
    emb = next(p for p in payload["predicates"] if p["predicate"] == "embedding_cosine")
    assert (emb["numerator"], emb["denominator"]) == (2, 18)
    assert emb["params"]["dimension"] == D
    assert any(s["predicate"] == "embedding_cosine" for s in payload["sweeps"])
    table = CliRunner().invoke(app_(), ["duplicates", str(planted_root), "--workspace",
                                        str(tmp_path / "ws"), "--workers", "1",
                                        "--embeddings", str(src)])
    assert table.exit_code == 0, table.output
    assert "embedding_cosine" in table.output and "Embedding cosine sweep" in table.output


def app_():
    from splitscope.cli import app

    return app
