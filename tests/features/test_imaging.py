"""Pixel features against their references: imagehash for the hashes, Pillow for resizes."""

from __future__ import annotations

import imagehash
import numpy as np
import pytest
from PIL import Image

from splitscope.features import imaging
from splitscope.features.imaging import (
    array_to_gray8,
    dhash64,
    dhash64_batch,
    gray_features,
    image_features,
    phash64,
    phash64_batch,
    resize_exact,
    thumbnail,
    to_gray8,
)

MODES = ["L", "RGB", "RGBA", "P", "1", "CMYK", "LA", "YCbCr"]
SIZES = [(1, 1), (2, 3), (9, 8), (31, 33), (64, 64), (100, 37), (37, 200), (300, 257)]


def _smooth_rgb(rng, w, h):
    """Random image with structure (blobs + noise), so hash bits are not all ties."""
    yy, xx = np.mgrid[0:h, 0:w]
    out = np.zeros((h, w, 3))
    for c in range(3):
        cy, cx = rng.random(2) * (h, w)
        out[..., c] = 255 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * (0.3 * max(h, w)) ** 2))
    out += rng.normal(0, 20, out.shape)
    return np.clip(out, 0, 255).astype(np.uint8)


def _hexes(img):
    return str(imagehash.phash(img)), str(imagehash.dhash(img))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", SIZES)
def test_hashes_bit_identical_to_imagehash(mode, size):
    rng = np.random.default_rng(hash((mode, size)) % 2**32)
    img = Image.fromarray(_smooth_rgb(rng, *size), "RGB").convert(mode)
    ref_p, ref_d = _hexes(img)
    assert format(phash64(img), "016x") == ref_p
    assert format(dhash64(img), "016x") == ref_d
    feats = image_features(img)
    assert format(feats["phash"], "016x") == ref_p
    assert format(feats["dhash"], "016x") == ref_d
    expected_thumb = np.asarray(img.convert("L").resize((96, 96), Image.Resampling.BICUBIC))
    np.testing.assert_array_equal(feats["thumb"], expected_thumb)
    assert feats["thumb"].dtype == np.uint8 and feats["thumb"].shape == (96, 96)


def test_palette_with_transparency_matches_imagehash():
    rng = np.random.default_rng(1)
    img = Image.fromarray(_smooth_rgb(rng, 50, 40)).convert("P", palette=Image.Palette.ADAPTIVE)
    img.info["transparency"] = 3
    assert format(phash64(img), "016x") == str(imagehash.phash(img))
    assert format(dhash64(img), "016x") == str(imagehash.dhash(img))


def test_hash_bit_order_is_imagehash_hex_order():
    # left half dark, right half bright: dHash bits are 1 only at the single edge column
    a = np.zeros((64, 64), np.uint8)
    a[:, 32:] = 255
    img = Image.fromarray(a)
    value = dhash64(img)
    assert format(value, "016x") == str(imagehash.dhash(img))
    bits = np.array([(value >> (63 - i)) & 1 for i in range(64)]).reshape(8, 8)
    assert bits[:, 3:5].any() and not bits[:, 0].any()


def test_flat_image_hashes_and_flag():
    img = Image.new("L", (40, 30), 128)
    feats = image_features(img)
    assert feats["flat"] is True
    assert format(feats["phash"], "016x") == str(imagehash.phash(img))
    assert format(feats["dhash"], "016x") == str(imagehash.dhash(img))
    assert image_features(Image.fromarray(_smooth_rgb(np.random.default_rng(0), 40, 30)))[
        "flat"] is False


def test_matrix_dct_is_far_inside_the_recompute_margin():
    """The batched DCT and scipy.fftpack's differ by rounding only: on random, smooth, binary
    and flat inputs the difference stays below 1e-13 · (4 Σ|x| + 1), so the recompute
    margin (_NEAR_MEDIAN) is at least 1,000 times the largest difference seen."""
    import scipy.fftpack

    from splitscope.features.imaging import _NEAR_MEDIAN, _dct_rows

    rng = np.random.default_rng(11)
    yy, xx = np.mgrid[0:32, 0:32]
    inputs = [rng.integers(0, 256, (32, 32)) for _ in range(200)]
    inputs += [np.clip(128 + 100 * np.sin(xx / rng.uniform(2, 9) + yy / rng.uniform(2, 9)), 0, 255)
               for _ in range(100)]
    inputs += [np.where(rng.random((32, 32)) < 0.5, 0, 255) for _ in range(100)]
    inputs += [np.full((32, 32), v) for v in (0, 1, 128, 255)]
    c = _dct_rows()
    worst = 0.0
    for x in inputs:
        x = np.asarray(x, dtype=np.float64)
        ref = scipy.fftpack.dct(scipy.fftpack.dct(x, axis=0), axis=1)[:8, :8]
        worst = max(worst, np.abs(c @ x @ c.T - ref).max() / (4.0 * np.abs(x).sum() + 1.0))
    assert worst < 1e-13
    assert _NEAR_MEDIAN >= 1_000 * worst


def test_batch_hashes_equal_single_and_imagehash():
    rng = np.random.default_rng(7)
    imgs = []
    for i in range(400):
        h, w = rng.integers(1, 90, 2)
        kind = i % 4
        if kind == 0:
            a = rng.integers(0, 256, (h, w), dtype=np.uint8)
        elif kind == 1:  # flat: all AC coefficients tie at the median
            a = np.full((h, w), rng.integers(0, 256), np.uint8)
        elif kind == 2:  # exact symmetries (ties between coefficients)
            a = np.tile((np.arange(w) * 7 % 256).astype(np.uint8), (h, 1))
        else:
            a = np.where(rng.random((h, w)) < 0.5, 0, 255).astype(np.uint8)
        imgs.append(Image.fromarray(a))
    smalls = np.stack([np.asarray(im.resize((32, 32), Image.Resampling.LANCZOS)) for im in imgs])
    nines = np.stack([np.asarray(im.resize((9, 8), Image.Resampling.LANCZOS)) for im in imgs])
    ph = phash64_batch(smalls)
    dh = dhash64_batch(nines)
    assert ph.dtype == np.uint64 and dh.dtype == np.uint64
    for im, p, d in zip(imgs, ph, dh):
        assert format(int(p), "016x") == str(imagehash.phash(im))
        assert format(int(d), "016x") == str(imagehash.dhash(im))
    assert phash64_batch(np.zeros((0, 32, 32))).shape == (0,)
    with pytest.raises(ValueError):
        phash64_batch(np.zeros((3, 16, 16)))


def test_wide_modes_use_the_linear_rule():
    a = np.array([[0, 1000], [3000, 4000]], dtype=np.uint16)
    img = Image.fromarray(a)  # mode I;16
    assert img.mode == "I;16"
    gray = np.asarray(to_gray8(img))
    # 255 * (v - 0) / 4000, rounded half to even: 0, 63.75 -> 64, 191.25 -> 191, 255
    np.testing.assert_array_equal(gray, [[0, 64], [191, 255]])
    assert to_gray8(img).mode == "L"
    # big-endian 16-bit and 32-bit int give the same gray image for the same values
    big = Image.frombytes("I;16B", (2, 2), a.astype(">u2").tobytes())
    np.testing.assert_array_equal(np.asarray(to_gray8(big)), gray)
    np.testing.assert_array_equal(np.asarray(to_gray8(Image.fromarray(a.astype(np.int32)))), gray)
    # hashes of a 16-bit image are the hashes of its mapped 8-bit image
    rng = np.random.default_rng(3)
    wide = (_smooth_rgb(rng, 60, 50)[..., 0].astype(np.uint16) * 257)
    wimg = Image.fromarray(wide)
    mapped = Image.fromarray(array_to_gray8(wide))
    assert phash64(wimg) == int(str(imagehash.phash(mapped)), 16)
    assert dhash64(wimg) == int(str(imagehash.dhash(mapped)), 16)


def test_linear_rule_edge_cases():
    np.testing.assert_array_equal(array_to_gray8(np.full((3, 4), 1234.5)), np.zeros((3, 4)))
    f = np.array([[np.nan, 0.0], [0.5, 1.0]], dtype=np.float32)
    np.testing.assert_array_equal(array_to_gray8(f), [[0, 0], [128, 255]])  # 127.5 -> 128
    np.testing.assert_array_equal(array_to_gray8(np.full((2, 2), np.nan)), np.zeros((2, 2)))
    fimg = Image.fromarray(np.array([[-1.0, 1.0]], dtype=np.float32))
    assert fimg.mode == "F"
    np.testing.assert_array_equal(np.asarray(to_gray8(fimg)), [[0, 255]])
    with pytest.raises(ValueError):
        array_to_gray8(np.zeros((2, 2, 2)))


def test_thumbnail_sizes_and_interpolations():
    rng = np.random.default_rng(4)
    img = Image.fromarray(_smooth_rgb(rng, 130, 70))
    for interp, flt in imaging.INTERPOLATIONS.items():
        t = thumbnail(img, 48, interp)
        np.testing.assert_array_equal(t, np.asarray(img.convert("L").resize((48, 48), flt)))
        assert t.flags.writeable
    with pytest.raises(ValueError, match="interpolation"):
        thumbnail(img, 96, "cubic-ish")
    with pytest.raises(ValueError, match="size"):
        thumbnail(img, 1)


def test_array_input_equals_image_input():
    rng = np.random.default_rng(5)
    a = _smooth_rgb(rng, 80, 60)[..., 1]
    assert phash64(a) == phash64(Image.fromarray(a))
    assert dhash64(a) == dhash64(Image.fromarray(a))


@pytest.mark.parametrize("resample", [Image.Resampling.LANCZOS, Image.Resampling.BICUBIC,
                                      Image.Resampling.BILINEAR, Image.Resampling.BOX])
def test_resize_exact_single_axis_equals_pillow(resample):
    rng = np.random.default_rng(int(resample))
    for _ in range(30):
        h, w = (int(v) for v in rng.integers(1, 400, 2))
        g = rng.integers(0, 256, (h, w), dtype=np.uint8)
        for size in [(int(rng.integers(1, 300)), h), (w, int(rng.integers(1, 300)))]:
            ref = np.asarray(Image.fromarray(g).resize(size, resample))
            np.testing.assert_array_equal(resize_exact(g, size, resample), ref)


def test_resize_exact_two_pass_equals_pillow_in_one_order():
    rng = np.random.default_rng(11)
    for _ in range(60):
        h, w = (int(v) for v in rng.integers(2, 500, 2))
        g = rng.integers(0, 256, (h, w), dtype=np.uint8)
        size = (int(rng.integers(1, 200)), int(rng.integers(1, 200)))
        ref = np.asarray(Image.fromarray(g).resize(size, Image.Resampling.LANCZOS))
        outs = [resize_exact(g, size, Image.Resampling.LANCZOS, o) for o in ("h", "v")]
        assert any(np.array_equal(o, ref) for o in outs), (h, w, size)


def test_gray_features_equal_pillow_when_geometries_recur():
    # the fast path is learned on the 2nd image of a geometry and used from the 3rd on;
    # every result must still equal Pillow's resize, from an image or from an array
    rng = np.random.default_rng(12)
    shapes = [(int(h), int(w)) for h, w in rng.integers(40, 700, (12, 2))] + [(512, 512),
                                                                             (224, 224)]
    for h, w in shapes:
        for rep in range(4):
            a = rng.integers(0, 256, (h, w), dtype=np.uint8) if rep != 3 else \
                np.full((h, w), 9, np.uint8)
            img = Image.fromarray(a)
            # an image or its array, alternating: both reach the same resizes
            s32, s9, th = gray_features(a if rep % 2 else img, 96, "bicubic")
            np.testing.assert_array_equal(s32, np.asarray(img.resize((32, 32), Image.LANCZOS)))
            np.testing.assert_array_equal(s9, np.asarray(img.resize((9, 8), Image.LANCZOS)))
            np.testing.assert_array_equal(th, np.asarray(img.resize((96, 96), Image.BICUBIC)))
    with pytest.raises(ValueError, match="mode L"):
        gray_features(Image.new("RGB", (4, 4)))


def _real_files(root):
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


@pytest.mark.realdata
@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["c3-brain-mri-yes-no", "kermany-chest-xray-224"])
def test_realdata_every_file_bit_identical(shared_data, corpus):
    """Exact-mode pHash/dHash of every file equal imagehash's, and the thumbnail equals
    Pillow's direct bicubic resize (one decode per file)."""
    root = shared_data / corpus
    if not root.is_dir():
        pytest.skip(f"{root} absent")
    files = _real_files(root)
    assert files
    mismatches, thumb_mismatches = [], []
    for path in files:
        with Image.open(path) as img:
            img.load()
            feats = image_features(img)
            ref = _hexes(img)
            thumb = np.asarray(img.convert("L").resize((96, 96), Image.Resampling.BICUBIC))
        got = (format(feats["phash"], "016x"), format(feats["dhash"], "016x"))
        if got != ref:
            mismatches.append((path.name, got, ref))
        if not np.array_equal(feats["thumb"], thumb):
            thumb_mismatches.append(path.name)
    assert not mismatches, mismatches[:5]
    assert not thumb_mismatches, thumb_mismatches[:5]
    if corpus == "kermany-chest-xray-224":
        assert len(files) == 5840
    else:
        assert len(files) == 253


@pytest.mark.parametrize("size", [(32, 32), (9, 8), (96, 50), (17, 50), (50, 96)])
@pytest.mark.parametrize("order", ["h", "v"])
def test_exact_resizes_are_c_ordered_whatever_the_pass_order(size, order):
    """Every resize comes back C-ordered (statistics computed on it must not depend on which
    path made it: their summation order follows the memory layout)."""
    from splitscope.features.imaging import resize_exact
    from splitscope.features.stats import image_stats

    gray = np.random.default_rng(1).integers(0, 256, (50, 70), dtype=np.uint8)
    out = resize_exact(gray, size, Image.Resampling.BICUBIC, order=order)
    assert out.flags.c_contiguous and out.shape == (size[1], size[0])
    if out.shape[0] > 2 and out.shape[1] > 2:
        fortran = np.asfortranarray(out)
        assert image_stats(gray, thumb=fortran) == image_stats(gray, thumb=out)
