"""The demo benchmark: layout, determinism, and that every planted relation is what it says."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from splitscope.datasets import DEMO_GROUP_REGEX, PLANTED_COUNTS, PREDICATES, make_demo
from splitscope.datasets.demo import CLASSES, PLANTED_COLUMNS
from splitscope.errors import InputError
from splitscope.features.header import header_fields
from splitscope.features.imaging import image_features

SMALL = {"n_train": 70, "n_test": 45}
_VARIANTS = (
    Image.Transpose.ROTATE_90, Image.Transpose.ROTATE_180, Image.Transpose.ROTATE_270,
    Image.Transpose.FLIP_LEFT_RIGHT, Image.Transpose.FLIP_TOP_BOTTOM,
    Image.Transpose.TRANSPOSE, Image.Transpose.TRANSVERSE,
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return make_demo(tmp_path_factory.mktemp("demo") / "demo", seed=0)


@pytest.fixture(scope="module")
def planted(demo) -> pd.DataFrame:
    return pd.read_csv(demo / "planted.csv", dtype=str, keep_default_na=False)


@pytest.fixture(scope="module")
def features(demo) -> tuple[dict[str, int], Features]:
    """Features of every demo image, computed once: (path -> row, Features)."""
    files = image_files(demo)
    return {f: i for i, f in enumerate(files)}, Features([decode(demo / f) for f in files])


def image_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.suffix in (".png", ".jpg"))


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def decode(path: Path) -> Image.Image:
    with Image.open(path) as im:
        im.load()
        return im.copy()


def split_predicates(value: str) -> set[str]:
    return set(value.split(";")) if value else set()


class Features:
    """NCC unit vectors and hashes, computed exactly as METHODS §2.1–2.2 say."""

    def __init__(self, images: list[Image.Image]):
        feats = [image_features(im) for im in images]
        t = np.stack([f["thumb"].ravel() for f in feats]).astype(np.float64)
        t -= t.mean(axis=1, keepdims=True)
        self.unit = t / (np.linalg.norm(t, axis=1, keepdims=True) + 1e-12)
        self.phash = np.array([f["phash"] for f in feats], dtype=np.uint64)
        self.dhash = np.array([f["dhash"] for f in feats], dtype=np.uint64)

    def take(self, index: list[int]) -> Features:
        out = object.__new__(Features)
        out.unit, out.phash, out.dhash = self.unit[index], self.phash[index], self.dhash[index]
        return out


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x = a[:, None] ^ b[None, :]
    return np.unpackbits(x.astype(">u8").view(np.uint8).reshape(*x.shape, 8), axis=-1).sum(-1)


def hash_rules(dp: np.ndarray, dd: np.ndarray, k: int = 6) -> dict[str, np.ndarray]:
    """The four hash rules of METHODS §2.1 for (n_query, n_reference) distance matrices."""
    return {
        "hash_screen": (dp.min(axis=1) <= k) & (dd.min(axis=1) <= k),
        "hash_joint": ((dp <= k) & (dd <= k)).any(axis=1),
        "hash_sum": ((dp + dd) <= k).any(axis=1),
        "hash_exact_phash": (dp == 0).any(axis=1),
    }


# --- layout -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_layout_counts_and_columns(demo, planted):
    files = image_files(demo)
    assert sum(f.startswith("train/") for f in files) == 240
    assert sum(f.startswith("test/") for f in files) == 80
    assert sum(f.startswith("val/") for f in files) == 40
    for f in files:
        split, label, name = f.split("/")
        assert split in ("train", "val", "test") and label in CLASSES
        assert re.match(DEMO_GROUP_REGEX, name), name
    assert tuple(planted.columns) == PLANTED_COLUMNS
    counts = planted["kind"].value_counts().to_dict()
    assert counts == {**PLANTED_COUNTS, "format_shortcut": 1}
    meta = json.loads((demo / "planted.json").read_text())
    assert meta["seed"] == 0 and meta["group_regex"] == DEMO_GROUP_REGEX
    assert meta["counts"] == counts
    assert meta["files"] == {"train": 240, "val": 40, "test": 80}


def test_planted_rows_reference_existing_files(demo, planted):
    for row in planted.itertuples():
        if row.kind == "format_shortcut":
            assert row.query_path == "" and row.expected == "header_probe"
            continue
        for path, split, label in [(row.query_path, row.query_split, row.query_label),
                                   (row.reference_path, row.reference_split, row.reference_label)]:
            assert (demo / path).is_file(), path
            assert path.split("/")[:2] == [split, label]
        assert row.reference_split == "train"
        assert row.query_split == ("train" if row.kind == "within_split" else "test")
        expected, missed = split_predicates(row.expected), split_predicates(row.missed_by)
        # centre crops and small rotations are planted to be missed by every default predicate
        assert bool(expected) != (row.kind in ("center_crop", "small_rotation"))
        assert not expected & missed
        assert expected | missed <= set(PREDICATES)
    # one relation per query file, and distinct references
    pairs = planted[planted["kind"] != "format_shortcut"]
    assert pairs["query_path"].is_unique
    assert pairs.loc[pairs["kind"] != "shared_group", "reference_path"].is_unique


def test_invalid_arguments_and_existing_folders(tmp_path):
    with pytest.raises(InputError, match="n_test"):
        make_demo(tmp_path / "a", n_test=20)
    with pytest.raises(InputError, match="n_train"):
        make_demo(tmp_path / "b", n_train=30)
    with pytest.raises(InputError, match="n_val"):
        make_demo(tmp_path / "b", n_val=5)
    with pytest.raises(InputError, match="seed"):
        make_demo(tmp_path / "c", seed=-1)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "mine.txt").write_text("keep")
    with pytest.raises(InputError, match="not empty"):
        make_demo(tmp_path / "d")
    assert (tmp_path / "d" / "mine.txt").read_text() == "keep"


# --- determinism ------------------------------------------------------------------------------


@pytest.mark.slow
def test_same_seed_same_bytes_and_overwrite(tmp_path):
    a = digests(make_demo(tmp_path / "a", seed=3, **SMALL))
    b_root = make_demo(tmp_path / "b", seed=3, **SMALL)
    assert digests(b_root) == a
    assert len(a) == SMALL["n_train"] + SMALL["n_test"] + 40 + 2
    with pytest.raises(InputError, match="overwrite"):
        make_demo(b_root, seed=4, **SMALL)
    c = digests(make_demo(b_root, seed=4, overwrite=True, **SMALL))
    assert c != a  # another seed, other images
    assert set(a.values()).isdisjoint(v for k, v in c.items() if not k.startswith("planted"))


# --- identity relations -----------------------------------------------------------------------


def test_byte_copies_are_identical(demo, planted):
    copies = planted[planted["kind"].isin(
        ["byte_copy", "renamed_copy", "label_conflict", "within_split"])]
    assert len(copies) == 9
    for row in copies.itertuples():
        q, r = (demo / row.query_path).read_bytes(), (demo / row.reference_path).read_bytes()
        assert q == r
        same_name = Path(row.query_path).name == Path(row.reference_path).name
        assert same_name == (row.kind in ("byte_copy", "label_conflict"))
        assert (row.query_label != row.reference_label) == (row.kind == "label_conflict")
    assert copies.loc[copies["kind"] == "within_split", "query_path"].str.startswith("train/").all()


def test_pixel_reencodes_equal_pixels_different_bytes(demo, planted):
    rows = planted[planted["kind"] == "pixel_reencode"]
    assert len(rows) == 3
    for row in rows.itertuples():
        q, r = demo / row.query_path, demo / row.reference_path
        assert q.read_bytes() != r.read_bytes()
        qi, ri = decode(q), decode(r)
        assert (qi.mode, qi.size) == (ri.mode, ri.size)
        assert np.array_equal(np.asarray(qi), np.asarray(ri))
    assert set(rows["transform"]) == {"png_compress_level=1", "png_text_chunk", "jpeg_to_png"}


def test_other_near_duplicates_are_not_pixel_equal(demo, planted):
    rows = planted[planted["kind"].isin(["lossy_reencode", "resized", "intensity",
                                         "center_crop", "small_rotation", "rotate90", "flip"])]
    for row in rows.itertuples():
        q = np.asarray(decode(demo / row.query_path))
        r = np.asarray(decode(demo / row.reference_path))
        assert q.shape != r.shape or not np.array_equal(q, r), row.query_path


# --- measured predicates agree with expected / missed_by --------------------------------------


def test_expected_and_missed_predicates_hold(demo, planted, features):
    files = image_files(demo)
    train = [f for f in files if f.startswith("train/")]
    index, every = features
    ref = every.take([index[f] for f in train])
    rows = planted[planted["kind"] != "format_shortcut"]
    rows = rows[rows["query_split"] == "test"].reset_index(drop=True)
    images = [decode(demo / p) for p in rows["query_path"]]
    plain = every.take([index[p] for p in rows["query_path"]])
    ncc = plain.unit @ ref.unit.T
    dp, dd = hamming(plain.phash, ref.phash), hamming(plain.dhash, ref.dhash)
    flagged = {"ncc": ncc.max(axis=1) >= 0.98, **hash_rules(dp, dd)}
    dihedral_ncc = np.zeros(len(rows), bool)
    dihedral_hash = np.zeros(len(rows), bool)
    for op in _VARIANTS:
        var = Features([im.transpose(op) for im in images])
        dihedral_ncc |= (var.unit @ ref.unit.T).max(axis=1) >= 0.98
        dihedral_hash |= hash_rules(hamming(var.phash, ref.phash),
                                    hamming(var.dhash, ref.dhash))["hash_joint"]
    # a twin under a pixel predicate (NCC or a one-reference hash rule) with another label
    train_labels = np.array([f.split("/")[1] for f in train])
    twin = (ncc >= 0.98) | ((dp <= 6) & (dd <= 6)) | (dp + dd <= 6) | (dp == 0)
    other = train_labels[None, :] != rows["query_label"].to_numpy()[:, None]
    flagged["near_label_conflict"] = (twin & other).any(axis=1)
    plain_any = flagged["ncc"] | flagged["hash_joint"]
    flagged["dihedral_ncc"] = dihedral_ncc & ~plain_any
    flagged["dihedral_hash"] = dihedral_hash & ~plain_any

    digest = {f: hashlib.sha256((demo / f).read_bytes()).hexdigest() for f in files}
    train_digests = {digest[f] for f in train}
    train_names = {Path(f).name for f in train}
    group_of = {f: re.match(DEMO_GROUP_REGEX, Path(f).name)["group"] for f in files}
    train_groups = {group_of[f] for f in train}
    labels_of_digest: dict[str, set[str]] = {}
    for f in files:
        labels_of_digest.setdefault(digest[f], set()).add(f.split("/")[1])
    pixels = {f: np.asarray(decode(demo / f)) for f in train}
    sizes = {f: p.shape for f, p in pixels.items()}

    for i, row in rows.iterrows():
        q = row["query_path"]
        qpix = np.asarray(images[i])
        measured = {k: bool(v[i]) for k, v in flagged.items()}
        measured["sha256"] = digest[q] in train_digests
        measured["basename"] = Path(q).name in train_names
        measured["group_overlap"] = group_of[q] in train_groups
        measured["label_conflict"] = measured["sha256"] and len(labels_of_digest[digest[q]]) > 1
        measured["within_split"] = False
        measured["pixel_reencode"] = not measured["sha256"] and any(
            sizes[f] == qpix.shape and np.array_equal(pixels[f], qpix) for f in train)
        expected = split_predicates(row["expected"])
        missed = split_predicates(row["missed_by"])
        assert {p for p in expected if not measured[p]} == set(), (q, row["kind"])
        assert {p for p in missed if measured[p]} == set(), (q, row["kind"])


def test_dihedral_copies_match_their_reference_exactly(demo, planted):
    ops = {"rot90": Image.Transpose.ROTATE_90, "rot270": Image.Transpose.ROTATE_270,
           "flip_lr": Image.Transpose.FLIP_LEFT_RIGHT, "flip_ud": Image.Transpose.FLIP_TOP_BOTTOM}
    rows = planted[planted["kind"].isin(["rotate90", "flip"])]
    assert sorted(rows["transform"]) == sorted(ops)
    for row in rows.itertuples():
        ref = decode(demo / row.reference_path).transpose(ops[row.transform])
        query = decode(demo / row.query_path)
        assert query.size == ref.size
        if row.query_path.endswith(".png"):
            assert np.array_equal(np.asarray(query), np.asarray(ref))


@pytest.mark.slow
def test_the_validation_split_leaves_train_and_test_as_they_are(tmp_path):
    """val is drawn after train and test from streams of its own: the same train and test
    bytes with or without it, and none of its images in either."""
    with_val = digests(make_demo(tmp_path / "a", seed=3, **SMALL))
    without = digests(make_demo(tmp_path / "b", seed=3, n_val=0, **SMALL))
    assert {k: v for k, v in with_val.items() if not k.startswith(("val/", "planted"))} == {
        k: v for k, v in without.items() if not k.startswith("planted")}
    val = {v for k, v in with_val.items() if k.startswith("val/")}
    assert len(val) == 40 and val.isdisjoint(without.values())


# --- clean part -------------------------------------------------------------------------------


def test_unplanted_pairs_are_not_near_duplicates(demo, planted, features):
    derived = set(planted.loc[~planted["kind"].isin(["shared_group", "format_shortcut"]),
                              "query_path"])
    bases = [f for f in image_files(demo) if f not in derived]
    assert len(bases) == 240 - 1 + 80 - (sum(PLANTED_COUNTS.values()) - 1 - 6) + 40
    index, every = features
    feats = every.take([index[f] for f in bases])
    ncc = feats.unit @ feats.unit.T
    dp, dd = hamming(feats.phash, feats.phash), hamming(feats.dhash, feats.dhash)
    off = ~np.eye(len(bases), dtype=bool)
    assert ncc[off].max() < 0.90
    assert dp[off].min() > 8 and dd[off].min() > 8  # radius 6 with a margin
    meta = json.loads((demo / "planted.json").read_text())["base_images"]
    assert meta["count"] == len(bases)
    assert meta["max_pairwise_ncc"] < 0.9


def test_group_overlap_is_exactly_the_planted_one(demo, planted):
    files = image_files(demo)
    group = {f: re.match(DEMO_GROUP_REGEX, Path(f).name)["group"] for f in files}
    train_groups = {group[f] for f in files if f.startswith("train/")}
    overlapping = {f for f in files if f.startswith("test/") and group[f] in train_groups}
    val_groups = {group[f] for f in files if f.startswith("val/")}
    test_groups = {group[f] for f in files if f.startswith("test/")}
    assert val_groups.isdisjoint(train_groups | test_groups)  # the validation split is clean
    shared = planted[planted["kind"] == "shared_group"]
    assert len(shared) == 6
    assert (shared["group"] != "").all()
    kept_names = planted[planted["kind"].isin(["byte_copy", "label_conflict"])]
    assert overlapping == set(shared["query_path"]) | set(kept_names["query_path"])
    for row in shared.itertuples():
        assert group[row.query_path] == group[row.reference_path] == row.group
        assert (demo / row.query_path).read_bytes() != (demo / row.reference_path).read_bytes()


def test_format_shortcut_in_headers(demo):
    meta = json.loads((demo / "planted.json").read_text())["format_shortcut"]
    for split in ("train", "val", "test"):
        table = pd.crosstab(
            *zip(*[(f.split("/")[1], header_fields((demo / f).read_bytes(), f)["format"])
                   for f in image_files(demo) if f.startswith(split + "/")]),
            rownames=["label"], colnames=["format"],
        )
        recall_lesion = table.loc["lesion", "JPEG"] / table.loc["lesion"].sum()
        recall_normal = table.loc["normal", "PNG"] / table.loc["normal"].sum()
        balanced = (recall_lesion + recall_normal) / 2
        assert balanced > 0.7, (split, table)  # chance is 0.5
        assert balanced == pytest.approx(meta["rule_balanced_accuracy"][split], abs=1e-4)
        assert {c: {"png": int(table.loc[c, "PNG"]), "jpg": int(table.loc[c, "JPEG"])}
                for c in CLASSES} == meta["class_by_format"][split]
