"""The reference index saved in the workspace: a new batch of queries reuses it, new
references extend it, a damaged or mismatched file is rebuilt, and every search returns what a
search without it returns (best reference, best ρ, the pairs), bit for bit; in an audit, a new
batch against a saved corpus gives the records of a cold audit."""

from __future__ import annotations

import hashlib
import shutil

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from relations_helpers import smooth_image

from splitscope.relations import ncc_index, pruned
from splitscope.relations.ncc import ncc_search
from splitscope.relations.saved_index import FILE, IndexStore, References

SIZE = 24


@pytest.fixture(autouse=True)
def indexed_at_any_size(monkeypatch):
    """The index is built and saved whatever the size (below 1 M pairs the brute force runs,
    below 64 M the pruned passes without an index)."""
    monkeypatch.setattr(pruned, "MIN_PAIRS", 0)
    monkeypatch.setattr(ncc_index, "INDEX_MIN_PAIRS", 0)


def _smooth(n: int, rng) -> np.ndarray:
    grid = rng.uniform(20, 230, (n, 4, 4))
    img = np.kron(grid, np.ones((SIZE // 4, SIZE // 4))) + rng.normal(0, 1.0, (n, SIZE, SIZE))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _keys(thumbs: np.ndarray) -> np.ndarray:
    return np.array([hashlib.sha256(t.tobytes()).hexdigest().encode() for t in thumbs],
                    dtype="S64")


def _same(a, b) -> None:
    np.testing.assert_array_equal(a.best_index, b.best_index)
    np.testing.assert_array_equal(a.best_rho, b.best_rho)
    pd.testing.assert_frame_equal(a.pairs, b.pairs)


def _search(q, r, store=None, **kw):
    refs = None if store is None else References(store, _keys(r))
    return ncc_search(q, r, tau=0.98, block=64, query_chunk=40, workers=1, references=refs, **kw)


@pytest.fixture
def corpus():
    rng = np.random.default_rng(3)
    r = _smooth(600, rng)
    q = _smooth(200, rng)
    q[:25] = np.clip(r[rng.choice(600, 25, replace=False)].astype(int)
                     + rng.integers(-1, 2, (25, SIZE, SIZE)), 0, 255).astype(np.uint8)
    return q, r, rng


def test_a_new_batch_reuses_the_saved_index_with_the_cold_result(corpus, tmp_path):
    q, r, rng = corpus
    store = IndexStore(tmp_path / FILE)
    cold = _search(q, r, store)
    assert cold.params["index"] == "built and saved" and store.path.is_file()
    _same(cold, _search(q, r))  # the store changes nothing
    batch = _smooth(150, rng)
    batch[:10] = r[:10]
    before = store.path.read_bytes()
    warm = _search(batch, r, store)
    assert warm.params["index"] == "saved index reused"
    assert store.path.read_bytes() == before  # nothing to add: not written again
    _same(warm, _search(batch, r))
    assert (warm.best_rho[:10] > 0.999).all()
    # a subset of the references: the clusters are measured on the members at hand
    sub = _search(batch, r[::3], store)
    assert sub.params["index"] == "saved index reused"
    _same(sub, _search(batch, r[::3]))


def test_new_references_extend_the_saved_index(corpus, tmp_path):
    q, r, rng = corpus
    store = IndexStore(tmp_path / FILE)
    _search(q, r, store)
    more = np.concatenate([r, _smooth(90, rng), r[:5]])  # 90 new, 5 repeated
    more[-20:-5] = q[50:65]  # 15 of the new ones are queries' own images
    grown = _search(q, more, store)
    assert grown.params["index"] == "saved index extended by 90 references"
    _same(grown, _search(q, more))
    saved, _ = store.load()
    assert len(saved.keys) == 690 and len(np.unique(saved.keys)) == 690
    assert (grown.best_rho[50:65] > 0.999).all()
    again = _search(q, more, store)
    assert again.params["index"] == "saved index reused"
    _same(again, grown)


def test_mostly_other_references_are_clustered_afresh(corpus, tmp_path):
    q, r, _ = corpus
    store = IndexStore(tmp_path / FILE)
    _search(q, r[:100], store)
    other = _search(q, r, store)
    assert other.params["index"].startswith("built and saved (500 new references outnumbered")
    _same(other, _search(q, r))
    assert len(store.load()[0].keys) == 600


@pytest.mark.parametrize("damage", ["garbage", "empty", "truncated", "other_size"])
def test_a_damaged_or_mismatched_index_is_rebuilt(corpus, tmp_path, damage):
    q, r, _ = corpus
    store = IndexStore(tmp_path / FILE)
    _search(q, r, store)
    data = store.path.read_bytes()
    if damage == "garbage":
        store.path.write_bytes(b"not an index" * 100)
    elif damage == "empty":
        store.path.write_bytes(b"")
    elif damage == "truncated":
        store.path.write_bytes(data[:len(data) // 2])
    else:  # an index of 48² thumbnails under this store's name
        big = np.kron(r, np.ones((2, 2), np.uint8))
        ncc_search(big[:50], big, tau=0.98, block=64, workers=1,
                   references=References(store, _keys(r)))
    res = _search(q, r, store)
    assert res.params["index"].startswith("built and saved (")
    _same(res, _search(q, r))
    assert _search(q, r, store).params["index"] == "saved index reused"


def test_an_index_is_saved_only_where_one_is_built(corpus, tmp_path, monkeypatch):
    q, r, rng = corpus
    store = IndexStore(tmp_path / FILE)
    monkeypatch.setattr(ncc_index, "INDEX_MIN_PAIRS", q.shape[0] * r.shape[0] + 1)
    small = _search(q, r, store)
    assert small.params["search"].startswith("pruned (fewer than") and not store.path.exists()
    monkeypatch.setattr(ncc_index, "INDEX_MIN_PAIRS", 0)
    _search(q, r, store)
    # once saved, it serves a search of any size
    monkeypatch.setattr(ncc_index, "INDEX_MIN_PAIRS", q.shape[0] * r.shape[0] + 1)
    few = _search(_smooth(20, rng), r, store)
    assert few.params["index"] == "saved index reused"


def test_an_index_whose_coordinates_disagree_is_never_used(corpus, tmp_path):
    """A readable index whose coordinates another projection wrote (here: shifted by 0.01,
    ten times the bound's margin, which would lose pairs) is found out and rebuilt."""
    import dataclasses

    q, r, _ = corpus
    store = IndexStore(tmp_path / FILE)
    _search(q, r, store)
    saved, _ = store.load()
    store.save(dataclasses.replace(saved, coords=saved.coords - np.float32(0.01)))
    res = _search(q, r, store)
    assert res.params["index"] == ("built and saved (its coordinates of 16 of 16 references "
                                   "checked differ from this version's before)")
    _same(res, _search(q, r))
    np.testing.assert_array_equal(store.load()[0].coords, saved.coords)


def test_references_without_a_key_are_searched_without_saving(corpus, tmp_path):
    q, r, _ = corpus
    store = IndexStore(tmp_path / FILE)
    keys = _keys(r)
    keys[7] = b""
    res = ncc_search(q, r, tau=0.98, block=64, workers=1, references=References(store, keys))
    assert res.params["index"] == "built (not saved: a reference without a content key)"
    assert not store.path.exists()
    _same(res, _search(q, r))


# ---- in an audit ---------------------------------------------------------------------------

def _write(folder, images):
    folder.mkdir(parents=True, exist_ok=True)
    for i, img in enumerate(images):
        Image.fromarray(img).save(folder / f"im{i:03d}.png")


def _release(root, train, test):
    _write(root / "train" / "a", train)
    _write(root / "test" / "a", test)
    return root


def _audit(root, workspace):
    from splitscope.features.scanning import scan
    from splitscope.relations.duplicates import audit_duplicates

    s = scan(root, workspace=workspace, workers=1)
    res = audit_duplicates(s, workers=1)
    notes, records = [], []
    for rec in res.records:
        d = rec.to_dict()
        search = d.get("details", {}).get("notes", {}).pop("ncc_search", None)
        if search is not None:
            notes.append(search)
        records.append(d)
    return records, res.tables["query_flags"], res.tables["pairs"], notes


def test_a_new_test_folder_against_a_saved_corpus_gives_the_cold_records(tmp_path):
    rng = np.random.default_rng(5)
    train = [smooth_image(rng, (96, 96)) for _ in range(120)]
    test = [smooth_image(rng, (96, 96)) for _ in range(30)] + train[:4]
    batch = [smooth_image(rng, (96, 96)) for _ in range(25)] + train[10:13]
    ws = tmp_path / "ws"
    _, _, _, first = _audit(_release(tmp_path / "release", train, test), ws)
    assert first and first[0]["index"] == "built and saved"
    shutil.copytree(tmp_path / "release" / "train", tmp_path / "batch" / "train")
    _write(tmp_path / "batch" / "test" / "a", batch)
    warm = _audit(tmp_path / "batch", ws)
    assert warm[3][0]["index"] == "saved index reused"
    cold = _audit(tmp_path / "batch", tmp_path / "fresh-ws")
    assert cold[3][0]["index"] == "built and saved"
    assert warm[0] == cold[0]
    pd.testing.assert_frame_equal(warm[1], cold[1])
    pd.testing.assert_frame_equal(warm[2], cold[2])
    flags = warm[1]
    assert int((flags["ncc_best_rho"] > 0.999).sum()) >= 3  # the planted copies are found
