"""Intensity statistics of one image (splitscope.features.stats), checked against numpy/scipy
reference computations, and carried by the scan's extraction."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from splitscope.features.extract import FEATURE_COLUMNS, extract_files
from splitscope.features.stats import BLUR_SIDE, STATS_COLUMNS, image_stats


def _noise(seed=0, shape=(60, 80)):
    return np.random.default_rng(seed).integers(30, 220, size=shape, dtype=np.uint8)


def test_histogram_statistics_match_numpy_and_scipy():
    from scipy.stats import entropy

    a = _noise()
    s = image_stats(a)
    assert s["intensity_mean"] == pytest.approx(a.mean(), abs=1e-9)
    assert s["intensity_std"] == pytest.approx(a.std(), abs=1e-9)
    assert s["intensity_p01"] == np.percentile(a, 1, method="inverted_cdf")
    assert s["intensity_p99"] == np.percentile(a, 99, method="inverted_cdf")
    counts = np.bincount(a.ravel(), minlength=256)
    assert s["entropy_bits"] == pytest.approx(entropy(counts, base=2), abs=1e-9)


def test_laplacian_variance_matches_scipy_on_the_thumbnail_grid():
    from scipy.ndimage import laplace

    a = _noise(1, (300, 200))
    small = np.asarray(Image.fromarray(a).resize((BLUR_SIDE, BLUR_SIDE),
                                                 Image.Resampling.BICUBIC), dtype=np.float64)
    ref = laplace(small)[1:-1, 1:-1].var()
    s = image_stats(a)
    assert s["laplacian_var"] == pytest.approx(ref, rel=1e-5)
    assert s["sharpness"] == pytest.approx(ref / small.var(), rel=1e-5)
    thumb = _noise(9, (64, 64))  # a given thumbnail is the grid
    ref = laplace(thumb.astype(np.float64))[1:-1, 1:-1].var()
    assert image_stats(a, thumb=thumb)["laplacian_var"] == pytest.approx(ref, rel=1e-5)


def test_blur_lowers_sharpness_and_darkening_does_not():
    from PIL import ImageFilter

    img = Image.fromarray(_noise(2, (224, 224)))
    sharp = image_stats(img)["sharpness"]
    blurred = image_stats(img.filter(ImageFilter.GaussianBlur(3)))["sharpness"]
    dark = image_stats(Image.fromarray((np.asarray(img) // 4).astype(np.uint8)))["sharpness"]
    assert blurred < sharp / 10
    assert dark == pytest.approx(sharp, rel=0.1)


@pytest.mark.parametrize("pad", [(0, 0, 0, 0), (16, 16, 16, 16), (0, 30, 0, 0), (5, 0, 40, 0)])
def test_border_share_is_the_area_of_uniform_edge_bands(pad):
    top, right, bottom, left = pad
    inner = _noise(3, (64, 64))
    a = np.pad(inner, ((top, bottom), (left, right)), constant_values=0)
    a[a.shape[0] // 2, :left] = 3  # within the tolerance: still uniform
    expected = 1 - inner.size / a.size
    assert image_stats(a, thumb=a)["border_share"] == pytest.approx(expected)  # exact grid
    assert image_stats(a)["border_share"] == pytest.approx(expected, abs=0.04)  # on 96²


def _thumbnail_cases():
    """Thumbnails of several shapes and layouts: noise, padded noise, constant, gradient, and
    the stored thumbnails of the demo-like noise images."""
    rng = np.random.default_rng(11)
    cases = [rng.integers(0, 256, (s, s), dtype=np.uint8) for s in (3, 8, 64, 95, 96, 128)]
    cases += [np.pad(rng.integers(0, 256, (40, 50), dtype=np.uint8), np.reshape(pad, (2, 2)),
                     constant_values=int(v)) for *pad, v in rng.integers(0, 20, (40, 5))]
    noisy = np.pad(rng.integers(100, 104, (30, 30), dtype=np.uint8), 10, constant_values=101)
    edge = rng.integers(0, 256, (48, 48), dtype=np.uint8)  # bands whose range is the tolerance
    edge[:6] = rng.choice(np.array([100, 104], np.uint8), (6, 48))
    edge[:, -5:] = rng.choice(np.array([20, 24], np.uint8), (48, 5))
    cases += [np.full((96, 96), 7, np.uint8), np.tile(np.arange(96, dtype=np.uint8), (96, 1)),
              noisy, edge, edge.T.copy(), np.asfortranarray(cases[4]), cases[5][::2, 1::2]]
    return cases


def _reference_border_share(a):
    """The definition, line by line: from each edge, the lines all of whose values lie within
    the tolerance of every value of the edge line."""
    from splitscope.features.stats import BORDER_TOLERANCE

    def run(lines):
        first = lines[0].astype(int)
        n = 0
        for line in lines:
            if not (np.abs(line.astype(int)[:, None] - first[None, :]) <= BORDER_TOLERANCE).all():
                break
            n += 1
        return n

    h, w = a.shape
    top = run(a)
    if top == h:
        return 1.0
    bottom = run(a[::-1])
    inner = a[top:h - bottom]
    left = run(inner.T)
    right = 0 if left == w else run(inner.T[::-1])
    return 1.0 - (h - top - bottom) * max(w - left - right, 0) / (h * w)


def test_blur_and_border_statistics_equal_their_plain_definitions_bit_for_bit():
    """The Laplacian variance and sharpness equal numpy's float32 Laplacian and ``var``
    (float64), and the border share the line-by-line definition, to the last bit."""
    from splitscope.features.stats import _blur_stats, _border_share

    for a in _thumbnail_cases():
        f = np.ascontiguousarray(a, dtype=np.float32)
        lap = f[:-2, 1:-1] + f[2:, 1:-1] + f[1:-1, :-2] + f[1:-1, 2:] - 4.0 * f[1:-1, 1:-1]
        lap_var, var = float(lap.var(dtype=np.float64)), float(f.var(dtype=np.float64))
        got = _blur_stats(a)
        assert got["laplacian_var"] == lap_var
        assert got["sharpness"] == (lap_var / var if var > 0 else None)
        assert _border_share(a) == _reference_border_share(a)


def test_border_share_of_a_constant_and_of_a_gradient_image():
    assert image_stats(np.full((20, 30), 77, np.uint8))["border_share"] == 1.0
    ramp = np.tile(np.arange(0, 250, 5, dtype=np.uint8)[:, None], (1, 40))  # each row constant
    assert image_stats(ramp, thumb=ramp)["border_share"] < 0.1  # rows differ from the edge row


def test_colour_spread_zero_for_grey_stored_as_colour():
    a = _noise(4)
    grey_rgb = Image.fromarray(a).convert("RGB")
    assert image_stats(a, grey_rgb)["colour_spread"] == 0.0
    col = np.stack([a, a // 2, np.full_like(a, 9)], axis=-1)
    expected = (col.max(axis=2).astype(int) - col.min(axis=2)).mean()
    assert image_stats(a, Image.fromarray(col))["colour_spread"] == pytest.approx(expected)
    assert image_stats(a, col)["colour_spread"] == pytest.approx(expected)  # plain array
    assert image_stats(a, Image.fromarray(a))["colour_spread"] is None  # no colour channels
    assert image_stats(a)["colour_spread"] is None
    pal = Image.fromarray(a).convert("RGB").convert("P")
    assert image_stats(a, pal)["colour_spread"] < 1.0


def test_flat_image_has_no_sharpness():
    s = image_stats(np.full((50, 50), 128, np.uint8))
    assert s["sharpness"] is None and s["laplacian_var"] == 0.0 and s["entropy_bits"] == 0.0


def test_bad_gray_input_is_refused():
    with pytest.raises(ValueError, match="mode L"):
        image_stats(Image.new("RGB", (4, 4)))
    with pytest.raises(ValueError, match="2-D uint8"):
        image_stats(np.zeros((4, 4), np.float32))


def test_extraction_carries_the_statistics(tmp_path):
    a = _noise(5, (48, 64))
    Image.fromarray(a).save(tmp_path / "g.png")
    Image.fromarray(a).convert("RGB").save(tmp_path / "rgb.png")
    (tmp_path / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
    table, thumbs = extract_files([str(tmp_path / n) for n in ("g.png", "rgb.png", "bad.png")])
    assert set(STATS_COLUMNS) <= set(FEATURE_COLUMNS)
    ref = image_stats(a, thumb=thumbs[0])
    for col in STATS_COLUMNS:
        assert str(table[col].dtype) == "Float64"
        if ref[col] is not None:
            assert table.loc[0, col] == pytest.approx(ref[col])
    assert table["colour_spread"].isna().tolist() == [True, False, True]
    assert table.loc[1, "colour_spread"] == 0.0
    assert table.loc[2, "status"] != "ok" and table.loc[2, STATS_COLUMNS].isna().all()


@pytest.mark.parametrize("mode, expected", [("LAB", None), ("HSV", None), ("I;16", None),
                                            ("LA", None), ("1", None), ("RGBA", 0.0),
                                            ("CMYK", 0.0), ("PA", 0.0)])
def test_colour_spread_per_decoded_mode(mode, expected):
    g = Image.new("L", (12, 10), 5)
    assert image_stats(g, Image.new(mode, (12, 10)))["colour_spread"] == expected


def test_a_one_pixel_image_has_every_statistic_but_sharpness():
    s = image_stats(Image.new("L", (1, 1), 7))
    assert s["intensity_mean"] == s["intensity_p99"] == 7.0 and s["border_share"] == 1.0
    assert s["sharpness"] is None


def test_a_jpeg_decoded_by_its_luma_has_zero_colour_spread(tmp_path):
    """A grey JPEG stored as YCbCr with optimised Huffman tables is decoded by its luma alone
    (chroma provably zero): no colour image exists, and its colour spread is the proved 0, so
    the grey-as-colour check still sees it; a colour JPEG keeps its measured spread."""
    rng = np.random.default_rng(0)
    grey = rng.integers(0, 256, (64, 64), dtype=np.uint8)
    Image.fromarray(np.stack([grey] * 3, -1)).save(tmp_path / "g.jpg", optimize=True)
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(
        tmp_path / "c.jpg", optimize=True)
    table, _ = extract_files([str(tmp_path / "g.jpg"), str(tmp_path / "c.jpg")])
    assert bool(table["chroma_flat"][0]) and table["chroma_flat"].isna()[1]
    assert table["colour_spread"][0] == 0.0 and table["colour_spread"][1] > 10
    assert (table["decoded_mode"] == "RGB").all()


def test_grey_stored_as_rgb_uses_its_band_as_the_grayscale_image(tmp_path):
    """An RGB file with R = G = B everywhere gets its R band as the grayscale image (what
    ``convert("L")`` returns for it, so hashes, thumbnail and statistics are unchanged) and a
    colour spread of 0; a colour image whose middle row is grey, and one that differs in one
    pixel only, are converted as colour and keep their measured spread."""
    from splitscope.features.stats import equal_bands

    imagehash = pytest.importorskip("imagehash")
    rng = np.random.default_rng(3)
    grey = rng.integers(0, 256, (40, 56), dtype=np.uint8)
    rgb = np.stack([grey] * 3, -1)
    mid_grey = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
    mid_grey[20] = rgb[20]  # the row checked first is grey
    one_pixel = rgb.copy()
    one_pixel[3, 7, 2] ^= 1
    names = []
    for name, arr in (("g", rgb), ("m", mid_grey), ("p", one_pixel)):
        Image.fromarray(arr).save(tmp_path / f"{name}.png")
        names.append(str(tmp_path / f"{name}.png"))
    band = equal_bands(Image.fromarray(rgb))
    assert band is not None and np.array_equal(np.asarray(band),
                                               np.asarray(Image.fromarray(rgb).convert("L")))
    assert equal_bands(Image.fromarray(mid_grey)) is None
    assert equal_bands(Image.fromarray(one_pixel)) is None
    table, thumbs = extract_files(names)
    assert (table["status"] == "ok").all() and (table["decoded_mode"] == "RGB").all()
    assert table["colour_spread"].tolist()[0] == 0.0
    for i, arr in enumerate((rgb, mid_grey, one_pixel)):
        img = Image.fromarray(arr)
        gray = img.convert("L")
        ref = image_stats(gray, img if i else None, thumb=thumbs[i])
        for col in STATS_COLUMNS:
            if col != "colour_spread":
                assert table.loc[i, col] == pytest.approx(ref[col]), col
        assert format(int(table.loc[i, "phash"]), "016x") == str(imagehash.phash(img))
        assert format(int(table.loc[i, "dhash"]), "016x") == str(imagehash.dhash(img))
    assert table.loc[1, "colour_spread"] == pytest.approx(_spread(mid_grey))
    assert table.loc[2, "colour_spread"] == pytest.approx(1 / (40 * 56))


def _spread(arr):
    a = arr.astype(int)
    return float((a.max(axis=2) - a.min(axis=2)).mean())
