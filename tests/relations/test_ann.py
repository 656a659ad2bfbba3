"""The FAISS IVF embedding search: every reported pair is an exact pair ≥ τ, and with enough
cells probed its result is the exact search's (pairs, values, best references)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from splitscope.errors import InputError
from splitscope.relations.ann import (
    check_index,
    default_nlist,
    ivf_embedding_search,
    search_params,
)
from splitscope.relations.duplicates import audit_duplicates
from splitscope.relations.ncc import embedding_search
from splitscope.relations.options import SearchOptions

faiss = pytest.importorskip("faiss")


def planted(n: int = 3000, d: int = 32, copies: int = 60, seed: int = 0) -> np.ndarray:
    """Clustered vectors with ``copies`` near-copies (rows n-copies… copy rows 0…), a zero row
    and a non-finite row."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, d))
    x = centres[rng.integers(0, 20, n)] + rng.normal(size=(n, d))
    x[n - copies:] = x[:copies] + rng.normal(size=(copies, d)) * rng.uniform(0.01, 0.3,
                                                                            (copies, 1))
    x[7] = 0.0
    x[8, 3] = np.nan
    return x


def same(a, b) -> None:
    pa, pb = a.pairs, b.pairs
    assert pa[["query", "reference"]].equals(pb[["query", "reference"]])
    np.testing.assert_allclose(pa["cosine"], pb["cosine"], atol=2e-6)
    assert np.array_equal(a.query_undefined, b.query_undefined)
    assert np.array_equal(a.reference_undefined, b.reference_undefined)
    flagged = a.flagged
    assert np.array_equal(flagged, b.flagged)
    assert np.array_equal(a.best_index[flagged], b.best_index[flagged])


@pytest.mark.parametrize("tau", [0.9, 0.95, 0.99])
def test_probing_every_cell_gives_the_exact_result(tau):
    x = planted()
    nlist = default_nlist(len(x))
    exact = embedding_search(x[:1000], x, tau=tau)
    ann = ivf_embedding_search(x[:1000], x, tau=tau, nprobe=nlist)
    same(exact, ann)
    np.testing.assert_allclose(exact.best_cosine, ann.best_cosine, atol=2e-6)
    assert np.array_equal(exact.best_index, ann.best_index)  # the k nearest include the best


def test_within_a_set_with_exclusion_and_default_probes():
    x = planted()
    exact = embedding_search(x, x, tau=0.95, exclude_self=True)
    ann = ivf_embedding_search(x, x, tau=0.95, exclude_self=True)
    same(exact, ann)
    assert len(ann.pairs) >= 2 * 50 and not (ann.pairs["query"] == ann.pairs["reference"]).any()
    p = ann.params
    assert p["index"] == "faiss-ivf" and p["nlist"] == default_nlist(len(x) - 2)
    assert p["nprobe"] == 16 and p["train_vectors"] == len(x) - 2 and p["seed"] == 0
    assert p["faiss"] == faiss.__version__
    assert search_params(p)["index_params"]["nprobe"] == 16
    assert search_params(exact.params) == {"index": "exact"}


@pytest.mark.slow
def test_few_probes_can_miss_but_never_invent():
    """One cell of many: what is reported is a subset of the exact pairs, with exact values,
    and no best is above the exact best."""
    x = planted(n=4000, d=16, copies=200, seed=2)
    exact = embedding_search(x, x, tau=0.8, exclude_self=True)
    ann = ivf_embedding_search(x, x, tau=0.8, exclude_self=True, nlist=100, nprobe=1)
    got = ann.pairs.merge(exact.pairs, on=["query", "reference"], how="left")
    assert got["cosine_y"].notna().all()
    np.testing.assert_allclose(got["cosine_x"], got["cosine_y"], atol=2e-6)
    assert (ann.pairs["cosine"] >= 0.8).all()
    ok = np.isfinite(exact.best_cosine)
    assert (ann.best_cosine[ok] <= exact.best_cosine[ok] + 2e-6).all()
    assert len(ann.pairs) < len(exact.pairs)  # the test can fail: one probe does miss here


def test_a_query_with_more_pairs_than_k_gets_them_all():
    rng = np.random.default_rng(4)
    r = rng.normal(size=(2000, 16))
    r[100:130] = r[5] + 0.001 * rng.normal(size=(30, 16))  # 31 near-copies of one vector
    exact = embedding_search(r[[5]], r, tau=0.99)
    ann = ivf_embedding_search(r[[5]], r, tau=0.99, k=4)
    assert len(exact.pairs) == 31
    same(exact, ann)


@pytest.mark.slow
def test_pair_bound_and_empty_sides():
    x = planted()
    ann = ivf_embedding_search(x, x, tau=0.5, exclude_self=True, max_pairs=100)
    exact = embedding_search(x, x, tau=0.5, exclude_self=True, max_pairs=100)
    assert len(ann.pairs) == 100 and ann.params["pairs_truncated"]
    assert ann.params["pairs_total"] <= exact.params["pairs_total"]
    empty = ivf_embedding_search(np.empty((0, 32)), x)
    assert empty.best_index.size == 0 and empty.pairs.empty
    none = ivf_embedding_search(x[:5], np.zeros((3, 32)))
    assert (none.best_index == -1).all() and none.reference_undefined.all()


def test_input_errors(monkeypatch):
    with pytest.raises(InputError, match="choose from exact, faiss-ivf"):
        check_index("hnsw")
    with pytest.raises(InputError, match="dimension"):
        ivf_embedding_search(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(InputError, match="nprobe"):
        ivf_embedding_search(np.ones((2, 3)), np.ones((2, 3)), nprobe=0)
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(InputError, match=r"splitscope\[scale\]"):
        ivf_embedding_search(np.ones((2, 3)), np.ones((2, 3)))


def _embeddings(manifest: pd.DataFrame) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    paths = manifest["path"].astype(str).tolist()
    vec = rng.normal(size=(len(paths), 24))
    test = [i for i, p in enumerate(paths) if p.startswith("test/")]
    train = [i for i, p in enumerate(paths) if p.startswith("train/")]
    vec[test[:3]] = vec[train[:3]] + 0.01 * rng.normal(size=(3, 24))
    table = pd.DataFrame(vec, columns=[f"e{i}" for i in range(24)])
    table.insert(0, "path", paths)
    return table


@pytest.mark.slow
def test_the_layer_records_the_index_and_finds_what_exact_finds(planted_scan, tmp_path):
    src = tmp_path / "emb.parquet"
    _embeddings(planted_scan.manifest).to_parquet(src, index=False)
    recs = {}
    for index in ("exact", "faiss-ivf"):
        res = audit_duplicates(planted_scan, ["test->train"],
                               SearchOptions(ssim=False, transforms=0), embeddings=src,
                               embedding_index=index)
        recs[index] = next(r for r in res.records if r.predicate["name"] == "embedding_cosine")
    exact, ann = recs["exact"], recs["faiss-ivf"]
    assert exact.predicate["params"]["index"] == "exact"
    assert ann.predicate["params"]["index"] == "faiss-ivf"
    assert ann.predicate["params"]["index_params"]["nlist"] >= 1
    assert (ann.numerator, ann.denominator) == (exact.numerator, exact.denominator) == (
        3, exact.denominator)
    with pytest.raises(InputError, match="unknown embedding index"):
        audit_duplicates(planted_scan, ["test->train"], SearchOptions(transforms=0), embeddings=src,
                         embedding_index="x")


@pytest.mark.slow
def test_cli_index_option(planted_root, tmp_path):
    from splitscope.cli import app
    from splitscope.manifest import build_manifest

    src = tmp_path / "emb.csv"
    _embeddings(build_manifest(planted_root)).to_csv(src, index=False)
    res = CliRunner().invoke(app, ["duplicates", str(planted_root), "--query", "test",
                                   "--reference", "train", "--workspace", str(tmp_path / "ws"),
                                   "--workers", "1", "--json", "--embeddings", str(src),
                                   "--index", "faiss-ivf"])
    assert res.exit_code == 0, res.output
    emb = next(p for p in json.loads(res.output)["predicates"]
               if p["predicate"] == "embedding_cosine")
    assert emb["numerator"] == 3 and emb["params"]["index"] == "faiss-ivf"
