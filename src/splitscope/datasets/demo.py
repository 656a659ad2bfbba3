"""A small synthetic benchmark with planted leakage of every kind splitscope measures.

:func:`make_demo` writes a two-class (``normal`` / ``lesion``) brain-MRI-like image set in the
layout ``ROOT/train/<class>/…``, ``ROOT/val/<class>/…``, ``ROOT/test/<class>/…`` and lists every
planted relation in ``ROOT/planted.csv`` (with the generator parameters in
``ROOT/planted.json``), so an audit of the demo can be scored against a known answer:

- identity (METHODS §1): byte copies test → train under the same name, renamed byte copies,
  a byte copy filed under the other class (label conflict), a byte copy inside train;
  re-encodes whose decoded pixels are equal but whose bytes differ;
- near duplicates (§2): lossy JPEG re-encodes (one of them filed under the other class: a
  label-conflicting near-twin), resized and brightness/contrast-changed copies
  (found by NCC and the hash rules); centre crops and small rotations (hard cases, missed by
  the hash rules); 90° rotations and mirror flips (found only by the dihedral option);
- groups (§3): file names carry a patient id (``p0123_s1.png``, regex
  :data:`DEMO_GROUP_REGEX`); some patients have different images on both sides;
- provenance (§4): the file format is correlated with the label (most ``lesion`` images are
  JPEG, most ``normal`` images PNG), so a header-only classifier beats chance.

Everything else is clean: every base image is distinct from every other (checked while
generating: thumbnail NCC, pHash and dHash distances with margins, see
:data:`DISTINCTNESS`), and test patients not listed as shared never occur in train. The
validation split is clean too (its own patients and images, no planted relation): it is the
population the evaluation layer fits thresholds and a temperature on before it scores them on
test (METHODS §5.3–5.4). It is drawn after train and test from streams of its own, so train
and test are the same files with or without it.

The output depends only on the arguments: the same seed gives byte-identical files (PNG and
JPEG encoding in Pillow is deterministic and no timestamps are written).

``planted.csv`` columns
    ``kind``; ``query_path`` and ``reference_path`` (relative to ROOT, ``/``-separated; the
    query is the test-side file, except for ``within_split`` where both are in train;
    empty for the dataset-level ``format_shortcut`` row); ``query_split``,
    ``reference_split``; ``query_label``, ``reference_label``; ``group`` (the patient id the
    two files share, empty when they share none); ``transform`` (how the query was made from
    the reference); ``expected`` (``;``-separated predicates of :data:`PREDICATES` that should
    flag the query against the reference side) and ``missed_by`` (predicates that should not
    flag it; a predicate in neither list is not fixed by the design, e.g. exact pHash
    equality after a mild transform, or any test -> train predicate for a ``within_split``
    copy).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, PngImagePlugin

from splitscope.errors import InputError
from splitscope.relations.predicates import HASH_EXACT_PHASH, HASH_JOINT, HASH_SCREEN, HASH_SUM

__all__ = [
    "CLASSES",
    "DEMO_GROUP_REGEX",
    "DISTINCTNESS",
    "PAIR_MARGINS",
    "PLANTED_COLUMNS",
    "PLANTED_COUNTS",
    "PREDICATES",
    "make_demo",
]

#: Class folders, in order.
CLASSES = ("normal", "lesion")

#: Patient id in a demo file name (``p0123_s2.png`` → ``0123``), for ``--group-regex``.
DEMO_GROUP_REGEX = r"^p(?P<group>\d+)_"

#: Row-level predicates named in ``expected`` / ``missed_by`` (query row vs. the train side).
PREDICATES: dict[str, str] = {
    "sha256": "byte-identical file on the reference side (METHODS §1.1)",
    "basename": "same basename on the reference side (§1.5)",
    "label_conflict": "crossing byte-identity group whose label sets are disjoint (§1.4)",
    "within_split": "byte-identity group inside one split (§1.6)",
    "pixel_reencode": "equal decoded pixels (mode and shape) with different bytes (§1.7)",
    "ncc": "nearest-reference NCC >= 0.98 (96x96 bicubic grayscale thumbnails, §2.2)",
    HASH_SCREEN: "min pHash distance <= 6 and min dHash distance <= 6 (§2.1 screen)",
    HASH_JOINT: "one reference with pHash <= 6 and dHash <= 6 (§2.1 joint)",
    HASH_SUM: "one reference with pHash + dHash <= 6 (§2.1 sum)",
    HASH_EXACT_PHASH: "one reference with pHash distance 0 (§2.1 exact-pHash)",
    "dihedral_ncc": "NCC >= 0.98 only against a rotated/flipped reference variant (§2.8)",
    "dihedral_hash": "joint hash rule only against a rotated/flipped reference variant (§2.8)",
    "group_overlap": "the query's patient id also occurs on the reference side (§3.2)",
    "near_label_conflict": "a twin on the reference side under another label, found by a "
                           "pixel predicate: NCC >= 0.98 or a hash rule (§2.10)",
}
_HASH_RULES = (HASH_SCREEN, HASH_JOINT, HASH_SUM, HASH_EXACT_PHASH)
_NEAR = ("ncc", *_HASH_RULES)
_COPY = ("sha256", *_NEAR)

#: Planted relations per kind (query files on the test side unless said otherwise).
PLANTED_COUNTS: dict[str, int] = {
    "byte_copy": 4,  # same basename in train and test
    "renamed_copy": 3,  # same bytes, different basename (and patient id)
    "label_conflict": 1,  # same bytes and name, filed under the other class in test
    "within_split": 1,  # a second copy inside train (query and reference both in train)
    "pixel_reencode": 3,  # PNG compress level; PNG + tEXt chunk; JPEG decoded to PNG
    "lossy_reencode": 3,  # JPEG q95 -> q75
    "resized": 2,  # 0.75x and 1.5x
    "intensity": 2,  # a*x + b without clipping
    "center_crop": 2,  # 80 % and 85 % centre crops
    "small_rotation": 2,  # 8 and -10 degrees, black fill
    "rotate90": 2,  # 90 and 270 degrees
    "flip": 2,  # left-right and top-bottom mirror
    "shared_group": 6,  # a train patient's other (distinct) image in test
    "near_label_conflict": 1,  # JPEG q95 -> q75 re-encode filed under the other class
}

#: What every planted kind should be flagged by (the rest of :data:`PREDICATES` should not).
_EXPECTED: dict[str, tuple[str, ...]] = {
    "byte_copy": ("basename", "group_overlap", *_COPY),
    "renamed_copy": _COPY,
    "label_conflict": ("basename", "group_overlap", "label_conflict", "near_label_conflict",
                       *_COPY),
    "within_split": ("within_split",),
    "pixel_reencode": ("pixel_reencode", *_NEAR),
    "lossy_reencode": ("ncc", HASH_SCREEN, HASH_JOINT, HASH_SUM),
    "resized": ("ncc", HASH_SCREEN, HASH_JOINT, HASH_SUM),
    "intensity": ("ncc", HASH_SCREEN, HASH_JOINT, HASH_SUM),
    "center_crop": (),
    "small_rotation": (),
    "rotate90": ("dihedral_ncc", "dihedral_hash"),
    "flip": ("dihedral_ncc", "dihedral_hash"),
    "shared_group": ("group_overlap",),
    "near_label_conflict": ("ncc", HASH_SCREEN, HASH_JOINT, HASH_SUM,
                            "near_label_conflict"),
}

#: Predicates whose outcome the design does not fix for a kind (neither expected nor missed):
#: exact pHash equality may or may not survive a mild transform; a within-train copy is not
#: a test -> train relation, so no boundary predicate is asserted for it.
_UNDETERMINED: dict[str, tuple[str, ...]] = {
    "within_split": tuple(p for p in PREDICATES if p != "within_split"),
    "lossy_reencode": (HASH_EXACT_PHASH,),
    "resized": (HASH_EXACT_PHASH,),
    "intensity": (HASH_EXACT_PHASH,),
    "near_label_conflict": (HASH_EXACT_PHASH,),
}

#: Columns of ``planted.csv``, in order.
PLANTED_COLUMNS = (
    "kind", "query_path", "reference_path", "query_split", "reference_split", "query_label",
    "reference_label", "group", "transform", "expected", "missed_by",
)

#: Rejection rule for base images: a candidate is redrawn unless, against every image
#: accepted before it, thumbnail NCC < ``max_ncc`` and pHash and dHash distances are
#: >= ``min_hash_distance`` (so unplanted pairs stay far from tau = 0.98 and radius 6).
DISTINCTNESS = {"max_ncc": 0.85, "min_hash_distance": 12}

_SIDES = (128, 160, 192, 224, 256)
_JPEG_QUALITY = 95
_SHORTCUT_P = 0.85  # P(JPEG | lesion) = P(PNG | normal) for base images
_GENERATOR_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Content


def _field(rng: np.random.Generator, h: int, w: int, *cells_and_weights: float) -> np.ndarray:
    """Smooth random field of size (h, w): a weighted sum of standard-normal grids of
    ``cells``×``cells`` values, each bicubic-upsampled (pairs ``cells, weight``).

    The coarse grids are first upsampled to the finest grid and summed there, so one
    full-size resize serves all of them.
    """
    pairs = list(zip(cells_and_weights[::2], cells_and_weights[1::2], strict=True))
    fine = int(max(c for c, _ in pairs))
    acc = np.zeros((fine, fine), dtype=np.float32)
    for cells, weight in pairs:
        z = rng.standard_normal((int(cells), int(cells)), dtype=np.float32)
        if cells != fine:
            z = np.asarray(Image.fromarray(z, mode="F").resize((fine, fine),
                                                                Image.Resampling.BICUBIC))
        acc += np.float32(weight) * z
    return np.asarray(Image.fromarray(acc, mode="F").resize((w, h), Image.Resampling.BICUBIC))


def _blob(yy: np.ndarray, xx: np.ndarray, py: float, px: float, sy: float, sx: float):
    """Axis-aligned Gaussian ``exp(-((y-py)/sy)² - ((x-px)/sx)²)`` as a separable product."""
    return np.exp(-(((yy - py) / sy) ** 2)) * np.exp(-(((xx - px) / sx) ** 2))


def _brain_slice(rng: np.random.Generator, h: int, w: int, lesion: bool) -> np.ndarray:
    """One axial brain-MRI-like slice, uint8 in [16, 235].

    A skull ring around smooth tissue texture, dark ventricle-like blobs, a smooth
    multiplicative bias field and mild noise; the ``lesion`` class adds one bright blob.
    The pixel range leaves room for brightness/contrast changes without clipping.
    """
    yy = np.arange(h, dtype=np.float32)[:, None]
    xx = np.arange(w, dtype=np.float32)[None, :]
    cy = h * (0.5 + rng.uniform(-0.1, 0.1))
    cx = w * (0.5 + rng.uniform(-0.1, 0.1))
    ay = h * rng.uniform(0.32, 0.44)
    ax = w * rng.uniform(0.30, 0.42)
    th = rng.uniform(-0.4, 0.4)
    c, s = np.float32(np.cos(th)), np.float32(np.sin(th))
    dy, dx = yy - np.float32(cy), xx - np.float32(cx)
    u = (dx * c + dy * s) / np.float32(ax)
    v = (dy * c - dx * s) / np.float32(ay)
    r = np.sqrt(u * u + v * v) * (1 + _field(rng, h, w, 5, 0.06))
    skull = np.exp(-(((r - 1.0) / 0.045) ** 2))
    brain = 0.5 - 0.5 * np.tanh((r - 0.92) * 20)
    tissue = 0.42 + _field(rng, h, w, 4, 0.10, 9, 0.06, 20, 0.03)
    dark = np.zeros((h, w), dtype=np.float32)
    for _ in range(int(rng.integers(2, 5))):
        py = cy + rng.uniform(-0.45, 0.45) * ay
        px = cx + rng.uniform(-0.45, 0.45) * ax
        sy, sx = rng.uniform(0.04, 0.14) * h, rng.uniform(0.03, 0.10) * w
        dark += _blob(yy, xx, py, px, sy, sx)
    tissue -= 0.25 * dark
    if lesion:
        py = cy + rng.uniform(-0.5, 0.5) * ay
        px = cx + rng.uniform(-0.5, 0.5) * ax
        sd = rng.uniform(0.05, 0.09) * min(h, w) * np.sqrt(2)
        tissue += 0.35 * _blob(yy, xx, py, px, sd, sd)
    img = 0.05 + _field(rng, h, w, 3, 0.03) + brain * tissue + 0.55 * skull
    bias = np.clip(1 + _field(rng, h, w, 2, 0.3, 3, 0.15), 0.4, 1.8)
    img = img * bias + 0.012 * rng.standard_normal((h, w), dtype=np.float32)
    return np.round(np.clip(20 + img * 200, 16, 235)).astype(np.uint8)


@dataclass
class _Bases:
    """Base images per class and the realized distinctness of the accepted set."""

    images: dict[str, list[np.ndarray]]
    max_ncc: float
    min_phash: int
    min_dhash: int
    candidates: int
    thumbs: np.ndarray  # every accepted image's centred unit thumbnail, earlier draws first
    phash: np.ndarray
    dhash: np.ndarray


def _draw_bases(seed: int, needed: dict[str, int], stream: int | None = None,
                against: _Bases | None = None) -> _Bases:
    """Draw base images per class, keeping only candidates far from all kept ones.

    Candidates come from per-class seeded streams (``default_rng([seed, class, k])``, or
    ``[seed, class, k, stream]`` for a later draw), examined in a fixed interleaved order
    (normal 0, lesion 0, normal 1, …; a class stops once it has enough). A candidate is kept
    when, against every image kept before it (those of ``against`` too), its thumbnail NCC is
    below ``DISTINCTNESS["max_ncc"]`` and its pHash and dHash distances are at least
    ``DISTINCTNESS["min_hash_distance"]``.
    """
    from splitscope.features.imaging import image_features

    start = 0 if against is None else len(against.thumbs)
    total = start + sum(needed.values())
    thumbs = np.zeros((total, 96 * 96), dtype=np.float32)
    phash = np.zeros(total, dtype=np.uint64)
    dhash = np.zeros(total, dtype=np.uint64)
    if against is not None:
        thumbs[:start], phash[:start], dhash[:start] = (against.thumbs, against.phash,
                                                        against.dhash)
    images: dict[str, list[np.ndarray]] = {c: [] for c in CLASSES}
    drawn = dict.fromkeys(CLASSES, 0)
    n = start
    max_ncc, min_dp, min_dd = -1.0, 64, 64
    limit = 50 * (total - start) + 100
    tail = [] if stream is None else [stream]
    while n < total:
        for ci, label in enumerate(CLASSES):
            if len(images[label]) >= needed[label]:
                continue
            if sum(drawn.values()) > limit:  # pragma: no cover - content generator broken
                raise RuntimeError("could not draw enough distinct demo images")
            rng = np.random.default_rng([seed, ci, drawn[label], *tail])
            drawn[label] += 1
            h, w = (int(v) for v in rng.choice(_SIDES, 2))
            arr = _brain_slice(rng, h, w, label == "lesion")
            f = image_features(Image.fromarray(arr))
            t = f["thumb"].astype(np.float32).ravel()
            t -= t.mean()
            t /= np.linalg.norm(t) + 1e-12
            if n:
                ncc = float((thumbs[:n] @ t).max())
                dp = int(_popcount(phash[:n] ^ np.uint64(f["phash"])).min())
                dd = int(_popcount(dhash[:n] ^ np.uint64(f["dhash"])).min())
                if (ncc >= DISTINCTNESS["max_ncc"] or dp < DISTINCTNESS["min_hash_distance"]
                        or dd < DISTINCTNESS["min_hash_distance"]):
                    continue
                max_ncc, min_dp, min_dd = max(max_ncc, ncc), min(min_dp, dp), min(min_dd, dd)
            thumbs[n], phash[n], dhash[n] = t, f["phash"], f["dhash"]
            n += 1
            images[label].append(arr)
    return _Bases(images, max_ncc, min_dp, min_dd, sum(drawn.values()), thumbs, phash, dhash)


def _validation(seed: int, n_val: int, patient_ids, bases: _Bases
                ) -> tuple[list[_File], _Bases | None]:
    """The clean validation split: ``n_val`` files of new patients (one or two images each),
    formats under the same shortcut, base images distinct from every train and test base.
    Drawn from generators of their own (``[seed, 1]`` and stream 1 of :func:`_draw_bases`), so
    that train and test do not depend on it."""
    if not n_val:
        return [], None
    rng = np.random.default_rng([seed, 1])
    val: list[_File] = []
    _add_patients(val, "val", n_val, 2, rng, patient_ids)
    for f in val:
        typical = "jpg" if f.label == "lesion" else "png"
        f.fmt = typical if rng.random() < _SHORTCUT_P else ("png" if typical == "jpg" else "jpg")
    with _single_threaded_blas():
        drawn = _draw_bases(seed, {c: sum(f.label == c for f in val) for c in CLASSES},
                            stream=1, against=bases)
    next_image = {c: iter(drawn.images[c]) for c in CLASSES}
    for f in val:
        f.data = _encode_like(Image.fromarray(next(next_image[f.label])), f.fmt)
        f.name = _name(f.patient, f.session, f.fmt)
    return val, drawn


def _popcount(x: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    return np.unpackbits(x.astype(">u8").view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)


# ---------------------------------------------------------------------------------------------
# Encoding


def _png(arr_or_img: np.ndarray | Image.Image, **kw) -> bytes:
    img = arr_or_img if isinstance(arr_or_img, Image.Image) else Image.fromarray(arr_or_img)
    buf = io.BytesIO()
    img.save(buf, "PNG", **kw)
    return buf.getvalue()


def _jpeg(arr_or_img: np.ndarray | Image.Image, quality: int = _JPEG_QUALITY) -> bytes:
    img = arr_or_img if isinstance(arr_or_img, Image.Image) else Image.fromarray(arr_or_img)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _decode(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        return im.copy()


def _encode_like(img: Image.Image, fmt: str) -> bytes:
    if fmt == "jpg75":
        return _jpeg(img, quality=75)
    return _png(img) if fmt == "png" else _jpeg(img)


# ---------------------------------------------------------------------------------------------
# Layout


@dataclass
class _File:
    split: str
    label: str
    patient: int
    session: int
    fmt: str  # "png" | "jpg"
    data: bytes = b""
    name: str = ""
    roles: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        return f"{self.split}/{self.label}/{self.name}"


def _name(patient: int, session: int, fmt: str) -> str:
    return f"p{patient:04d}_s{session}.{fmt}"


def _add_patients(files: list[_File], split: str, target: int, max_sessions: int,
                  rng: np.random.Generator, patient_ids) -> None:
    """Append new patients (a random class, 1..``max_sessions`` sessions each) until
    ``files`` holds ``target`` files; the last patient's sessions stop at the target."""
    while len(files) < target:
        label = CLASSES[int(rng.integers(0, 2))]
        pid = next(patient_ids)
        for session in range(1, int(rng.integers(1, max_sessions + 1)) + 1):
            if len(files) < target:
                files.append(_File(split, label, pid, session, ""))


def make_demo(
    path: str | Path,
    seed: int = 0,
    n_train: int = 240,
    n_test: int = 80,
    n_val: int = 40,
    *,
    overwrite: bool = False,
) -> Path:
    """Write the demo benchmark with planted leakage under ``path``.

    Parameters
    ----------
    path : str or Path
        Root folder to create. It must not exist or be empty, unless it holds an earlier demo
        (a ``planted.json``) and ``overwrite`` is True, in which case that demo is replaced.
    seed : int
        Seed of every random choice; the same seed gives byte-identical files.
    n_train, n_test : int
        Number of files in ``train`` and ``test`` (planted files included). ``n_test`` must
        leave room for the planted test files (:data:`PLANTED_COUNTS`) plus at least 10 clean
        ones; ``n_train`` must provide distinct references for every planted relation.
    n_val : int
        Number of files in ``val`` (clean; at least 10; 0 for none).

    Returns
    -------
    Path
        The root folder, holding ``train/``, ``val/``, ``test/``, ``planted.csv`` and
        ``planted.json``.

    Notes
    -----
    Images are 8-bit grayscale, 128–256 px a side. Base images are stored as PNG (zlib level
    6) or JPEG (quality 95); ``lesion`` images are JPEG with
    probability 0.85 and ``normal`` images PNG with probability 0.85 (the format shortcut;
    the realized class × format table is in ``planted.json``). Planted near-duplicates keep
    their reference's format except where the transform is a format change. Copies and
    transformed copies get a fresh patient id (the identity was lost), except ``byte_copy``
    and ``label_conflict`` files, which keep the reference's name. A transformed copy must
    keep :data:`PAIR_MARGINS` against its reference (found kinds clearly found, missed kinds
    clearly missed); a reference image where it does not is skipped for another one (the
    number skipped is in ``planted.json``).

    Examples
    --------
    >>> import tempfile, pandas as pd
    >>> root = make_demo(tempfile.mkdtemp() + "/demo", seed=0)
    >>> planted = pd.read_csv(root / "planted.csv", keep_default_na=False)
    >>> int((planted["kind"] == "byte_copy").sum())
    4
    """
    root = Path(path)
    seed = _check_int("seed", seed, 0)
    n_train = _check_int("n_train", n_train, 1)
    n_test = _check_int("n_test", n_test, 1)
    n_val = _check_int("n_val", n_val, 0)
    if 0 < n_val < 10:
        raise InputError(f"n_val={n_val} is too small: use 0 (no validation split) or at "
                         f"least 10, so that both classes are likely in it")
    counts = dict(PLANTED_COUNTS)
    n_test_planted = sum(v for k, v in counts.items() if k != "within_split")
    n_refs = sum(v for k, v in counts.items() if k != "within_split") + counts["within_split"]
    if n_test < n_test_planted + 10:
        raise InputError(
            f"n_test={n_test} is too small: the demo plants {n_test_planted} test files and "
            f"needs at least 10 clean ones; use n_test >= {n_test_planted + 10}"
        )
    n_train_bases = n_train - counts["within_split"]
    if n_train_bases < 2 * n_refs:
        raise InputError(
            f"n_train={n_train} is too small: {n_refs} planted relations need distinct train "
            f"references among at least {2 * n_refs} train images; use n_train >= "
            f"{2 * n_refs + counts['within_split']}"
        )
    _prepare_root(root, overwrite)

    rng = np.random.default_rng(seed)
    # test files made from a train image: everything planted except the shared-group images
    n_derived = n_test_planted - counts["shared_group"]
    n_test_bases = n_test - n_derived

    # -- patients and labels ------------------------------------------------------------------
    patient_pool = rng.permutation(np.arange(1, 10000))
    patient_ids = iter(patient_pool[: n_train + n_test + 50].tolist())
    train: list[_File] = []
    _add_patients(train, "train", n_train_bases, 3, rng, patient_ids)
    train_patients = list(dict.fromkeys(f.patient for f in train))
    shared_pids = [int(p) for p in rng.choice(train_patients, counts["shared_group"],
                                               replace=False)]
    test: list[_File] = []
    for pid in shared_pids:
        first = next(f for f in train if f.patient == pid)
        session = max(f.session for f in train if f.patient == pid) + 1
        test.append(_File("test", first.label, pid, session, "", roles=["shared_group"]))
    _add_patients(test, "test", n_test_bases, 2, rng, patient_ids)

    # -- formats: the shortcut ----------------------------------------------------------------
    for f in train + test:
        typical = "jpg" if f.label == "lesion" else "png"
        other = "png" if typical == "jpg" else "jpg"
        f.fmt = typical if rng.random() < _SHORTCUT_P else other

    # -- pixels (distinct by construction) ----------------------------------------------------
    with _single_threaded_blas():
        bases = _draw_bases(seed, {c: sum(f.label == c for f in train + test) for c in CLASSES})
    next_image = {c: iter(bases.images[c]) for c in CLASSES}
    for f in train + test:
        f.data = _encode_like(Image.fromarray(next(next_image[f.label])), f.fmt)
        f.name = _name(f.patient, f.session, f.fmt)

    # -- planted relations --------------------------------------------------------------------
    # references: distinct train images, chosen in a seeded order, by required format
    order = [train[i] for i in rng.permutation(len(train))]
    # a shared patient's train images stay out of the other relations (one answer per query)
    used: set[int] = {id(f) for f in train if f.patient in shared_pids}

    def take(fmt: str | None = None) -> _File:
        for f in order:
            if id(f) in used or (fmt and f.fmt != fmt):
                continue
            used.add(id(f))
            return f
        raise InputError("n_train is too small to find a reference image for every relation")

    rows: list[dict[str, str]] = []
    extra_train: list[_File] = []
    derived: list[_File] = []

    def fresh(ref: _File, split: str, label: str, fmt: str, data: bytes) -> _File:
        pid = next(patient_ids)
        out = _File(split, label, pid, 1, fmt, data, _name(pid, 1, fmt))
        (extra_train if split == "train" else derived).append(out)
        return out

    def record(kind: str, query: _File, ref: _File | None, transform: str) -> None:
        shared = ref is not None and ref.patient == query.patient
        expected = _EXPECTED[kind]
        open_ = _UNDETERMINED.get(kind, ())
        rows.append({
            "kind": kind,
            "query_path": query.path,
            "reference_path": ref.path if ref else "",
            "query_split": query.split,
            "reference_split": ref.split if ref else "",
            "query_label": query.label,
            "reference_label": ref.label if ref else "",
            "group": f"{query.patient:04d}" if shared else "",
            "transform": transform,
            "expected": ";".join(p for p in PREDICATES if p in expected),
            "missed_by": ";".join(p for p in PREDICATES if p not in expected and p not in open_),
        })

    for _ in range(counts["byte_copy"]):
        ref = take()
        q = _File("test", ref.label, ref.patient, ref.session, ref.fmt, ref.data, ref.name)
        derived.append(q)
        record("byte_copy", q, ref, "copy")
    for _ in range(counts["renamed_copy"]):
        ref = take()
        record("renamed_copy", fresh(ref, "test", ref.label, ref.fmt, ref.data), ref,
               "copy;rename")
    for _ in range(counts["label_conflict"]):
        ref = take()
        other = CLASSES[1 - CLASSES.index(ref.label)]
        q = _File("test", other, ref.patient, ref.session, ref.fmt, ref.data, ref.name)
        derived.append(q)
        record("label_conflict", q, ref, f"copy;label={other}")
    for _ in range(counts["within_split"]):
        ref = take()
        record("within_split", fresh(ref, "train", ref.label, ref.fmt, ref.data), ref,
               "copy;rename")

    reencodes = [
        ("png", "png_compress_level=1", lambda im: _png(im, compress_level=1)),
        ("png", "png_text_chunk", lambda im: _png(im, pnginfo=_text_chunk())),
        ("jpg", "jpeg_to_png", lambda im: _png(im)),
    ]
    for i in range(counts["pixel_reencode"]):
        fmt, name, encode = reencodes[i % len(reencodes)]
        ref = take(fmt)
        record("pixel_reencode", fresh(ref, "test", ref.label, "png", encode(_decode(ref.data))),
               ref, name)
    skipped = {"references_skipped": 0}

    def near(kind: str, transforms: list[tuple[str, object]], fmt: str | None = None,
             out_fmt: str | None = None) -> None:
        for i in range(counts[kind]):
            name, fn = transforms[i % len(transforms)]
            for _attempt in range(50):
                ref = take(fmt)
                ref_img = _decode(ref.data)
                img = fn(ref_img)
                data = _encode_like(img, out_fmt or ref.fmt)
                if _behaves_as_planted(kind, name, _decode(data), ref_img):
                    break
                skipped["references_skipped"] += 1
            else:  # pragma: no cover - the content generator no longer fits the design
                raise RuntimeError(f"no reference image behaves as planted for {kind}")
            q_fmt = "jpg" if (out_fmt or ref.fmt).startswith("jpg") else "png"
            record(kind, fresh(ref, "test", ref.label, q_fmt, data), ref, name)

    near("lossy_reencode", [(f"jpeg_quality={_JPEG_QUALITY}->75", lambda im: im)], fmt="jpg",
         out_fmt="jpg75")
    near("resized", [("resize=0.75", lambda im: _scale(im, 0.75)),
                     ("resize=1.5", lambda im: _scale(im, 1.5))])
    near("intensity", [("intensity=0.8*x+30", lambda im: _affine(im, 0.8, 30)),
                       ("intensity=1.1*x-10", lambda im: _affine(im, 1.1, -10))])
    near("center_crop", [("center_crop=0.80", lambda im: _center_crop(im, 0.80)),
                         ("center_crop=0.85", lambda im: _center_crop(im, 0.85))])
    near("small_rotation", [("rotate=8deg", lambda im: _rotate(im, 8)),
                            ("rotate=10deg", lambda im: _rotate(im, -10))])
    near("rotate90", [("rot90", lambda im: im.transpose(Image.Transpose.ROTATE_90)),
                      ("rot270", lambda im: im.transpose(Image.Transpose.ROTATE_270))])
    near("flip", [("flip_lr", lambda im: im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)),
                  ("flip_ud", lambda im: im.transpose(Image.Transpose.FLIP_TOP_BOTTOM))])
    for _ in range(counts["near_label_conflict"]):  # a lossy re-encode under the other class
        for _attempt in range(50):
            ref = take("jpg")
            ref_img = _decode(ref.data)
            data = _encode_like(ref_img, "jpg75")
            if _behaves_as_planted("lossy_reencode", "", _decode(data), ref_img):
                break
            skipped["references_skipped"] += 1
        else:  # pragma: no cover - the content generator no longer fits the design
            raise RuntimeError("no reference image behaves as planted for near_label_conflict")
        other = CLASSES[1 - CLASSES.index(ref.label)]
        record("near_label_conflict", fresh(ref, "test", other, "jpg", data), ref,
               f"jpeg_quality={_JPEG_QUALITY}->75;label={other}")

    for q in test:
        if "shared_group" in q.roles:
            ref = next(f for f in train if f.patient == q.patient)
            record("shared_group", q, ref, "other_image_same_patient")

    # -- the validation split: clean, drawn after the rest from streams of its own ------------
    val, val_bases = _validation(seed, n_val, iter(patient_pool[n_train + n_test + 50:].tolist()),
                                 bases)
    if val_bases is not None:  # the realized distinctness of every base image, val's too
        bases.max_ncc = max(bases.max_ncc, val_bases.max_ncc)
        bases.min_phash = min(bases.min_phash, val_bases.min_phash)
        bases.min_dhash = min(bases.min_dhash, val_bases.min_dhash)
        bases.candidates += val_bases.candidates

    # -- write --------------------------------------------------------------------------------
    files = train + extra_train + test + derived + val
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):  # pragma: no cover - names are unique by construction
        raise RuntimeError("demo file names collide")
    for f in files:
        target = root / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.data)

    contingency = {
        split: {
            label: {
                fmt: sum(1 for f in files if f.split == split and f.label == label and f.fmt == fmt)
                for fmt in ("png", "jpg")
            }
            for label in CLASSES
        }
        for split in ("train", "val", "test") if split != "val" or val
    }
    rule_ba = {split: _rule_balanced_accuracy(tab) for split, tab in contingency.items()}
    rows.append({
        "kind": "format_shortcut", "query_path": "", "reference_path": "", "query_split": "",
        "reference_split": "", "query_label": "", "reference_label": "", "group": "",
        "transform": f"lesion->JPEG, normal->PNG (p={_SHORTCUT_P} for base images)",
        "expected": "header_probe", "missed_by": "",
    })
    _write_csv(root / "planted.csv", rows)

    kinds = list(PLANTED_COUNTS) + ["format_shortcut"]
    meta = {
        "generator": "splitscope.datasets.make_demo",
        "generator_version": _GENERATOR_VERSION,
        "seed": seed,
        "n_train": n_train,
        "n_test": n_test,
        "n_val": n_val,
        "files": {"train": sum(f.split == "train" for f in files),
                  "val": sum(f.split == "val" for f in files),
                  "test": sum(f.split == "test" for f in files)},
        "classes": list(CLASSES),
        "image_sides_px": list(_SIDES),
        "mode": "L",
        "group_regex": DEMO_GROUP_REGEX,
        "jpeg_quality": _JPEG_QUALITY,
        "png_compress_level": 6,
        "counts": {k: sum(r["kind"] == k for r in rows) for k in kinds},
        "predicates": {**PREDICATES,
                       "header_probe": "header-only classifier predicts the label (§4.2)"},
        "assumed_parameters": {"tau": 0.98, "radius": 6, "thumb_size": 96,
                               "interpolation": "bicubic"},
        "format_shortcut": {
            "rule": "base images: lesion saved as JPEG and normal as PNG with probability "
                    f"{_SHORTCUT_P}, the other format otherwise; planted copies keep their "
                    "reference's format except format-changing re-encodes",
            "p_typical_format": _SHORTCUT_P,
            "class_by_format": contingency,
            "rule_balanced_accuracy": rule_ba,
            "rule_balanced_accuracy_note": "balanced accuracy of predicting lesion iff JPEG, "
                                           "per split, over all files of the split",
        },
        "pair_margins": PAIR_MARGINS,
        **skipped,
        "base_images": {
            "count": len(train) + len(test) + len(val),
            "distinctness_rule": DISTINCTNESS,
            "max_pairwise_ncc": round(bases.max_ncc, 4),
            "min_pairwise_phash_distance": bases.min_phash,
            "min_pairwise_dhash_distance": bases.min_dhash,
            "candidates_drawn": bases.candidates,
            "note": "measured on the arrays before encoding (JPEG q95 moves pixels slightly)",
        },
    }
    (root / "planted.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return root


# ---------------------------------------------------------------------------------------------
# Helpers


def _single_threaded_blas():
    """Small matrix products run faster on one BLAS thread (and do not fight other jobs)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def _prepare_root(root: Path, overwrite: bool) -> None:
    if root.exists() and not root.is_dir():
        raise InputError(f"{root} exists and is not a folder")
    if root.is_dir() and any(root.iterdir()):
        if not (root / "planted.json").is_file():
            raise InputError(f"{root} is not empty; choose a new folder for the demo")
        if not overwrite:
            raise InputError(f"{root} already holds a demo; pass overwrite=True to replace it")
        for sub in ("train", "val", "test"):
            if (root / sub).is_dir():
                shutil.rmtree(root / sub)
        for name in ("planted.csv", "planted.json"):
            (root / name).unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)


def _text_chunk() -> PngImagePlugin.PngInfo:
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", "splitscope demo re-export")
    return info


def _scale(img: Image.Image, factor: float) -> Image.Image:
    w, h = img.size
    return img.resize((round(w * factor), round(h * factor)), Image.Resampling.LANCZOS)


def _affine(img: Image.Image, a: float, b: float) -> Image.Image:
    arr = np.asarray(img, dtype=np.float64) * a + b
    if arr.min() < 0 or arr.max() > 255:  # pragma: no cover - base images leave headroom
        raise RuntimeError("intensity change would clip")
    return Image.fromarray(np.round(arr).astype(np.uint8))


def _center_crop(img: Image.Image, keep: float) -> Image.Image:
    w, h = img.size
    cw, ch = round(w * keep), round(h * keep)
    left, top = (w - cw) // 2, (h - ch) // 2
    return img.crop((left, top, left + cw, top + ch))


def _rotate(img: Image.Image, degrees: float) -> Image.Image:
    return img.rotate(degrees, resample=Image.Resampling.BICUBIC, fillcolor=0)


_POSITIVE_KINDS = ("lossy_reencode", "resized", "intensity")
_DIHEDRAL_KINDS = ("rotate90", "flip")
_INVERSE_OP = {
    "rot90": Image.Transpose.ROTATE_270,
    "rot270": Image.Transpose.ROTATE_90,
    "flip_lr": Image.Transpose.FLIP_LEFT_RIGHT,
    "flip_ud": Image.Transpose.FLIP_TOP_BOTTOM,
}
#: Margins a planted near-duplicate must keep against its reference (tau 0.98, radius 6).
PAIR_MARGINS = {"found_min_ncc": 0.99, "found_max_hash_sum": 4, "missed_max_ncc": 0.95,
                "missed_min_hash": 9}


def _pair(query: Image.Image, ref: Image.Image) -> tuple[float, int, int]:
    """NCC (96² bicubic thumbnails), pHash and dHash distances of two images."""
    from splitscope.features.imaging import image_features

    fq, fr = image_features(query), image_features(ref)
    a = fq["thumb"].astype(np.float64).ravel()
    b = fr["thumb"].astype(np.float64).ravel()
    a -= a.mean()
    b -= b.mean()
    ncc = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))
    return ncc, (fq["phash"] ^ fr["phash"]).bit_count(), (fq["dhash"] ^ fr["dhash"]).bit_count()


def _behaves_as_planted(kind: str, transform: str, query: Image.Image, ref: Image.Image) -> bool:
    """Does this query keep the margins its kind promises against its reference?

    Found kinds need NCC >= 0.99 and pHash + dHash <= 4; missed kinds (and the plain view of
    rotated/flipped copies) need NCC <= 0.95 and both hash distances >= 9; rotated/flipped
    copies must be found once the inverse transform is applied.
    """
    m = PAIR_MARGINS
    ncc, dp, dd = _pair(query, ref)
    if kind in _POSITIVE_KINDS:
        return ncc >= m["found_min_ncc"] and dp + dd <= m["found_max_hash_sum"]
    missed = ncc <= m["missed_max_ncc"] and min(dp, dd) >= m["missed_min_hash"]
    if kind in _DIHEDRAL_KINDS:
        ncc2, dp2, dd2 = _pair(query.transpose(_INVERSE_OP[transform]), ref)
        return missed and ncc2 >= m["found_min_ncc"] and dp2 + dd2 <= m["found_max_hash_sum"]
    return missed


def _rule_balanced_accuracy(table: dict[str, dict[str, int]]) -> float | None:
    les, nor = table["lesion"], table["normal"]
    if not sum(les.values()) or not sum(nor.values()):
        return None
    recall_lesion = les["jpg"] / sum(les.values())
    recall_normal = nor["png"] / sum(nor.values())
    return round((recall_lesion + recall_normal) / 2, 4)


def _write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=PLANTED_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
