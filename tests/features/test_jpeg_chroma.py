"""Luma-only decode of colour JPEGs whose chroma is provably zero: taken only where the luma
equals convert("L") of the RGB decode, and the features are those of the RGB decode."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from splitscope.features import extract as extract_mod
from splitscope.features.extract import extract_files
from splitscope.features.jpeg_chroma import chroma_provably_zero
from splitscope.features.options import FeatureParams


def _grey(rng, w=96, h=80):
    yy, xx = np.mgrid[0:h, 0:w]
    base = 120 + 60 * np.sin(xx / 7.0) * np.cos(yy / 5.0) + rng.normal(0, 12, (h, w))
    return np.clip(base, 0, 255).astype(np.uint8)


def _jpeg(arr, **kw) -> bytes:
    img = Image.fromarray(arr)
    if "mode" in kw:
        img = img.convert(kw.pop("mode"))
    buf = io.BytesIO()
    img.save(buf, "JPEG", **kw)
    return buf.getvalue()


def _rgb_and_luma(data: bytes):
    rgb = Image.open(io.BytesIO(data))
    rgb.load()
    luma = Image.open(io.BytesIO(data))
    luma.draft("L", None)
    luma.load()
    return rgb, luma


def _cases():
    rng = np.random.default_rng(0)
    g = _grey(rng)
    colour = np.stack([g, np.roll(g, 3, axis=1), 255 - g], -1)
    one_pixel = np.stack([g] * 3, -1)
    one_pixel[40, 50] = (250, 10, 10)
    odd = _grey(rng, 77, 53)  # partial MCUs at the right and bottom edges
    grey_rgb = np.stack([g] * 3, -1)
    return {
        # grey stored as colour with optimal Huffman tables: provable
        "grey-420-opt": (_jpeg(grey_rgb, quality=90, optimize=True, subsampling=2), True),
        "grey-422-opt": (_jpeg(grey_rgb, quality=90, optimize=True, subsampling=1), True),
        "grey-444-opt": (_jpeg(grey_rgb, quality=75, optimize=True, subsampling=0), True),
        "grey-odd-size-opt": (_jpeg(np.stack([odd] * 3, -1), optimize=True, subsampling=2),
                              True),
        "grey-restarts-opt": (_jpeg(grey_rgb, optimize=True, restart_marker_blocks=4), True),
        # not provable: standard tables, colour, one coloured pixel, progressive, other modes
        "grey-420-standard": (_jpeg(grey_rgb, quality=90), False),
        "colour-opt": (_jpeg(colour, quality=90, optimize=True), False),
        "one-colour-pixel-opt": (_jpeg(one_pixel, quality=95, optimize=True, subsampling=0),
                                 False),
        "grey-progressive": (_jpeg(grey_rgb, optimize=True, progressive=True), False),
        "cmyk": (_jpeg(grey_rgb, mode="CMYK", optimize=True), False),
        "single-component": (_jpeg(g, optimize=True), False),
        "adobe-rgb-opt": (_jpeg(grey_rgb, optimize=True, keep_rgb=True), False),
    }


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_proof_only_where_luma_equals_convert_l(name):
    data, expected = CASES[name]
    assert chroma_provably_zero(data) is expected
    rgb, luma = _rgb_and_luma(data)
    if expected:
        # the claim the proof stands for: the RGB decode is (Y, Y, Y), so convert("L") is Y
        y = np.asarray(luma)
        assert rgb.mode == "RGB" and luma.mode == "L"
        np.testing.assert_array_equal(np.asarray(rgb.convert("L")), y)
        np.testing.assert_array_equal(np.asarray(rgb), np.repeat(y[..., None], 3, axis=2))


def test_colour_content_is_never_proved():
    rng = np.random.default_rng(1)
    for seed in range(20):
        rgb = np.stack([_grey(np.random.default_rng([seed, c])) for c in range(3)], -1)
        for sub in (0, 1, 2):
            assert not chroma_provably_zero(_jpeg(rgb, optimize=True, subsampling=sub,
                                                  quality=int(rng.integers(50, 100))))


def test_malformed_and_non_jpeg_bytes_are_not_proved():
    data, _ = CASES["grey-420-opt"]
    assert chroma_provably_zero(data)
    sos = data.index(b"\xff\xda")
    for broken in (b"", b"\xff\xd8", data[:sos], data[:sos + 6], data[:-2], data[:len(data) // 2],
                   b"\x89PNG\r\n\x1a\n" + data[8:], data[:sos] + b"\xff\xd9"):
        assert not chroma_provably_zero(broken)
    # a marker other than a restart between the scan and the end of the image
    assert not chroma_provably_zero(data[:-2] + b"\xff\xdc\x00\x04\x00\x10\xff\xd9")


def _features(paths, monkeypatch=None, proof=True):
    if not proof:
        monkeypatch.setattr(extract_mod.jpeg_chroma, "chroma_provably_zero", lambda data: False)
    table, thumbs = extract_files(paths, FeatureParams(thumb_size=32))
    if not proof:
        monkeypatch.undo()
    return table, thumbs


def test_features_of_the_luma_path_equal_the_rgb_decode(tmp_path, monkeypatch):
    paths = []
    for name, (data, _) in sorted(CASES.items()):
        path = tmp_path / f"{name}.jpg"
        path.write_bytes(data)
        paths.append(str(path))
    luma, luma_thumbs = _features(paths)
    rgb, rgb_thumbs = _features(paths, monkeypatch, proof=False)
    assert (luma["status"] == "ok").all()
    expected = [CASES[name][1] for name in sorted(CASES)]
    assert luma["chroma_flat"].fillna(False).tolist() == expected
    assert rgb["chroma_flat"].isna().all()
    cols = ["phash", "dhash", "pixel_xxh128", "decoded_mode", "gray_rule", "flat", "sha256"]
    assert luma[cols].equals(rgb[cols])
    np.testing.assert_array_equal(luma_thumbs, rgb_thumbs)
    assert set(luma.loc[luma["chroma_flat"].fillna(False), "decoded_mode"]) == {"RGB"}


def test_a_grey_colour_jpeg_and_its_lossless_rgb_copy_are_pixel_identical(tmp_path):
    data, _ = CASES["grey-444-opt"]
    jpg = tmp_path / "a.jpg"
    jpg.write_bytes(data)
    with Image.open(jpg) as img:
        img.save(tmp_path / "a.png")  # the RGB decode, stored losslessly
    table, _ = extract_files([str(jpg), str(tmp_path / "a.png")])
    assert table.loc[0, "chroma_flat"] and table.loc[0, "decoded_mode"] == "RGB"
    assert table.loc[0, "pixel_xxh128"] == table.loc[1, "pixel_xxh128"]


def test_large_image_digest_in_strips_equals_whole(tmp_path, monkeypatch):
    data, _ = CASES["grey-odd-size-opt"]
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    whole, _ = extract_files([str(path)])
    monkeypatch.setattr(extract_mod, "_DIGEST_STRIP_PIXELS", 200)
    strips, _ = extract_files([str(path)])
    assert whole.loc[0, "chroma_flat"] and strips.loc[0, "chroma_flat"]
    assert whole.loc[0, "pixel_xxh128"] == strips.loc[0, "pixel_xxh128"]
    assert whole.loc[0, "phash"] == strips.loc[0, "phash"]


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_a_failing_luma_decode_is_reported_as_the_rgb_decode_reports_it(tmp_path, monkeypatch,
                                                                       cut):
    data, _ = CASES["grey-420-opt"]
    path = tmp_path / "cut.jpg"
    path.write_bytes(data[:int(len(data) * cut)])
    luma, _ = _features([str(path)])
    rgb, _ = _features([str(path)], monkeypatch, proof=False)
    assert luma.loc[0, "status"] == rgb.loc[0, "status"] == "truncated"
    assert luma.loc[0, "error"] == rgb.loc[0, "error"]


@pytest.mark.realdata
def test_realdata_every_proved_jpeg_decodes_to_convert_l(shared_data):
    """On every real JPEG whose chroma is proved zero, the luma-only decode equals
    convert("L") of the RGB decode, and the RGB decode is (Y, Y, Y)."""
    roots = [shared_data / name for name in ("c3-brain-mri-yes-no", "kermany-chest-xray-224")]
    roots = [r for r in roots if r.is_dir()]
    if not roots:
        pytest.skip("no real image set present")
    proved = 0
    for root in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            data = path.read_bytes()
            if not chroma_provably_zero(data):
                continue
            proved += 1
            rgb, luma = _rgb_and_luma(data)
            y = np.asarray(luma)
            assert np.array_equal(np.asarray(rgb.convert("L")), y), path.name
            assert (np.asarray(rgb) == y[..., None]).all(), path.name
    if (shared_data / "c3-brain-mri-yes-no").is_dir():
        assert proved > 0  # c3 holds grey images stored as colour with optimal tables


def test_extension_and_adobe_markers_before_the_frame_are_not_proved():
    data, _ = CASES["grey-444-opt"]
    assert chroma_provably_zero(data)
    assert chroma_provably_zero(data[:2] + b"\xff\xfe\x00\x05abc" + data[2:])  # a comment
    for segment in (b"\xff\xf8\x00\x04\x0d\x01",  # JPG8 (a libjpeg 9 colour transform)
                    b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00\x01"):  # Adobe, YCbCr
        assert not chroma_provably_zero(data[:2] + segment + data[2:])
