"""extract_files: digests, table schema, DICOM, fast mode."""

from __future__ import annotations

import hashlib
import io
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from splitscope.errors import InputError
from splitscope.features import imaging
from splitscope.features.extract import (
    FEATURE_COLUMNS,
    REASONS,
    FeatureParams,
    extract_files,
)

imagehash = pytest.importorskip("imagehash")


def _blobs(rng, w, h, noise=6.0):
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.zeros((h, w))
    for _ in range(5):
        cy, cx = rng.random(2)
        s = rng.uniform(0.05, 0.2)
        img += rng.uniform(0.3, 1) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
    img = img / img.max() * 220 + rng.normal(0, noise, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _save(path, arr_or_img, fmt=None, **kw):
    img = arr_or_img if isinstance(arr_or_img, Image.Image) else Image.fromarray(arr_or_img)
    img.save(path, fmt, **kw)
    return str(path)


def test_table_schema_and_order(tmp_path):
    rng = np.random.default_rng(0)
    files = [
        _save(tmp_path / "b.png", _blobs(rng, 40, 30)),
        str(tmp_path / "missing.png"),
        _save(tmp_path / "a.jpg", np.stack([_blobs(rng, 50, 50)] * 3, -1), quality=90),
    ]
    table, thumbs = extract_files(files, FeatureParams(thumb_size=32))
    assert list(table.columns) == FEATURE_COLUMNS
    assert table["file"].tolist() == files
    assert table["status"].tolist() == ["ok", "missing", "ok"]
    assert str(table["phash"].dtype) == "UInt64" and str(table["dhash"].dtype) == "UInt64"
    assert table["phash"].isna().tolist() == [False, True, False]
    assert table["has_thumb"].dtype == bool
    assert table["has_thumb"].tolist() == [True, False, True]
    assert thumbs.shape == (3, 32, 32) and thumbs.dtype == np.uint8
    assert not thumbs[1].any()
    assert table["error"].isna().tolist() == [True, False, True]
    assert table.loc[0, "width"] == 40 and table.loc[0, "height"] == 30
    assert table.loc[2, "format"] == "JPEG"
    # hashes and thumbnails equal imagehash / Pillow on the same file
    for i in (0, 2):
        with Image.open(files[i]) as img:
            assert format(int(table.loc[i, "phash"]), "016x") == str(imagehash.phash(img))
            assert format(int(table.loc[i, "dhash"]), "016x") == str(imagehash.dhash(img))
            ref = np.asarray(img.convert("L").resize((32, 32), Image.Resampling.BICUBIC))
        np.testing.assert_array_equal(thumbs[i], ref)


def test_empty_input_declares_every_column():
    table, thumbs = extract_files([], FeatureParams())
    assert len(table) == 0 and list(table.columns) == FEATURE_COLUMNS
    assert thumbs.shape == (0, 96, 96)
    assert str(table["phash"].dtype) == "UInt64"
    assert str(table["status"].dtype).startswith("string")


def test_sha256_is_the_digest_of_the_bytes(tmp_path):
    rng = np.random.default_rng(1)
    path = _save(tmp_path / "x.png", _blobs(rng, 33, 21))
    table, _ = extract_files([path])
    data = Path(path).read_bytes()
    assert table.loc[0, "sha256"] == hashlib.sha256(data).hexdigest()
    assert table.loc[0, "size_bytes"] == len(data)


def test_pixel_digest_equal_for_lossless_reencodes_and_distinct_otherwise(tmp_path):
    rng = np.random.default_rng(2)
    a = _blobs(rng, 30, 20)
    p1 = _save(tmp_path / "a1.png", a, compress_level=1)
    p2 = _save(tmp_path / "a2.png", a, compress_level=9, optimize=True)
    p3 = _save(tmp_path / "a3.tif", a)  # another container, same pixels
    p4 = _save(tmp_path / "rgb.png", np.stack([a] * 3, -1))  # same gray content, mode RGB
    p5 = _save(tmp_path / "t.png", a.reshape(30, 20))  # same bytes, another shape
    p6 = _save(tmp_path / "b.png", np.where(a == a.max(), 0, a).astype(np.uint8))
    table, _ = extract_files([p1, p2, p3, p4, p5, p6])
    assert (table["status"] == "ok").all()
    sha, pix = table["sha256"].tolist(), table["pixel_xxh128"].tolist()
    assert sha[0] != sha[1] and sha[0] != sha[2]
    assert pix[0] == pix[1] == pix[2]
    assert len({pix[0], pix[3], pix[4], pix[5]}) == 4
    # the gray images behind the features are equal for the L and RGB versions
    assert table.loc[0, "phash"] == table.loc[3, "phash"]


def test_pixel_digest_of_palette_images_includes_the_palette(tmp_path):
    idx = np.arange(64, dtype=np.uint8).reshape(8, 8) % 4
    pal1 = [0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255] + [0] * (256 * 3 - 12)
    pal2 = [0, 0, 0, 0, 255, 0, 255, 0, 0, 0, 0, 255] + [0] * (256 * 3 - 12)
    paths = []
    for name, pal in (("p1.png", pal1), ("p2.png", pal2)):
        img = Image.fromarray(idx, "P")
        img.putpalette(pal)
        paths.append(_save(tmp_path / name, img))
    table, _ = extract_files(paths)
    assert table.loc[0, "pixel_xxh128"] != table.loc[1, "pixel_xxh128"]


def test_params_key_validation_and_round_trip():
    exact, fast = FeatureParams(), FeatureParams(mode="fast")
    assert exact.key() != fast.key()
    assert "exact" in exact.key() and "fast" in fast.key()
    assert FeatureParams(thumb_size=64).key() != exact.key()
    assert FeatureParams(interpolation="bilinear").key() != exact.key()
    assert FeatureParams(max_pixels=1000).key() != exact.key()
    assert FeatureParams(**exact.to_dict()) == exact
    assert exact.key() == FeatureParams().key()  # stable
    for bad in ({"mode": "quick"}, {"thumb_size": 0}, {"thumb_size": 9.5},
                {"interpolation": "cubic"}, {"max_pixels": 0}):
        with pytest.raises(InputError):
            FeatureParams(**bad)
    with pytest.raises(InputError):
        extract_files("one/path.png")


def test_fast_mode_reduced_jpeg_decode_is_close_to_exact(tmp_path):
    rng = np.random.default_rng(3)
    big = [_save(tmp_path / f"big{i}.jpg", np.stack([_blobs(rng, 640, 512)] * 3, -1),
                 quality=90) for i in range(4)]
    small = _save(tmp_path / "small.jpg", np.stack([_blobs(rng, 224, 224)] * 3, -1), quality=90)
    png = _save(tmp_path / "big.png", _blobs(rng, 512, 512))
    files = big + [small, png]
    exact, te = extract_files(files, FeatureParams())
    fast, tf = extract_files(files, FeatureParams(mode="fast"))
    assert (exact["status"] == "ok").all() and (fast["status"] == "ok").all()
    # reduced-scale decodes carry no decoded-pixel digest; full decodes keep it
    assert fast["pixel_xxh128"].isna().tolist() == [True] * 4 + [False, False]
    # files not decoded at reduced scale: identical features in both modes
    for i in (4, 5):
        assert fast.loc[i, "pixel_xxh128"] == exact.loc[i, "pixel_xxh128"]
        assert fast.loc[i, "phash"] == exact.loc[i, "phash"]
        np.testing.assert_array_equal(tf[i], te[i])
    # reduced-scale decodes: same image, small differences (a different geometry)
    for i in range(4):
        x = te[i].astype(np.float64) - te[i].mean()
        y = tf[i].astype(np.float64) - tf[i].mean()
        rho = (x * y).sum() / (np.linalg.norm(x) * np.linalg.norm(y))
        assert rho > 0.99
        p_bits = (int(exact.loc[i, "phash"]) ^ int(fast.loc[i, "phash"])).bit_count()
        d_bits = (int(exact.loc[i, "dhash"]) ^ int(fast.loc[i, "dhash"])).bit_count()
        assert p_bits <= 8 and d_bits <= 12


def test_dicom_decodes_with_rescale_and_linear_rule():
    pydicom = pytest.importorskip("pydicom")
    from pydicom.data import get_testdata_file

    path = get_testdata_file("CT_small.dcm")
    table, thumbs = extract_files([path])
    row = table.iloc[0]
    assert row["status"] == "ok", row["error"]
    assert row["decoded_mode"] == "DICOM" and row["gray_rule"] == "minmax"
    assert row["format"] == "DICOM"
    ds = pydicom.dcmread(path)
    values = ds.pixel_array.astype(np.float64) * float(ds.RescaleSlope) + float(
        ds.RescaleIntercept)
    gray = imaging.array_to_gray8(values)
    expected = imaging.image_features(Image.fromarray(gray))
    assert int(row["phash"]) == expected["phash"] and int(row["dhash"]) == expected["dhash"]
    np.testing.assert_array_equal(thumbs[0], expected["thumb"])
    assert isinstance(row["pixel_xxh128"], str) and len(row["pixel_xxh128"]) == 32


def test_dicom_without_pydicom_is_unsupported_and_names_the_extra(monkeypatch):
    pytest.importorskip("pydicom")
    from pydicom.data import get_testdata_file

    path = get_testdata_file("CT_small.dcm")
    monkeypatch.setitem(sys.modules, "pydicom", None)  # import pydicom -> ImportError
    table, _ = extract_files([path])
    assert table.loc[0, "status"] == "unsupported"
    assert "[dicom]" in table.loc[0, "error"]
    assert table.loc[0, "sha256"] == hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_dicom_without_pixel_data_is_unsupported(tmp_path):
    pydicom = pytest.importorskip("pydicom")
    from pydicom.data import get_testdata_file

    ds = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    del ds.PixelData
    buf = io.BytesIO()
    ds.save_as(buf)
    path = tmp_path / "nopix.dcm"
    path.write_bytes(buf.getvalue())
    table, _ = extract_files([str(path)])
    assert table.loc[0, "status"] == "unsupported"
    assert "pixel data" in table.loc[0, "error"]


def test_reason_codes_are_documented():
    from pathlib import Path

    from splitscope.features import extract as extract_mod

    data_model = (Path(__file__).resolve().parents[2] / "docs" / "data-model.md").read_text()
    assert len(set(REASONS)) == len(REASONS) == 12
    for reason in REASONS:
        assert f"``{reason}``" in extract_mod.__doc__, reason
        assert f"`{reason}`" in data_model, reason


def test_pillow_settings_are_restored(tmp_path):
    from PIL import ImageFile

    before = (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES)
    extract_files([_save(tmp_path / "a.png", np.zeros((4, 4), np.uint8))],
                  FeatureParams(max_pixels=10**6))
    assert (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES) == before


def test_table_concatenates_with_pandas(tmp_path):
    a, _ = extract_files([_save(tmp_path / "a.png", np.zeros((4, 4), np.uint8))])
    b, _ = extract_files([str(tmp_path / "nope.png")])
    both = pd.concat([a, b], ignore_index=True)
    assert str(both["phash"].dtype) == "UInt64"
    assert both["status"].tolist() == ["ok", "missing"]


@pytest.mark.realdata
@pytest.mark.slow
def test_realdata_c3_every_file_extracts_and_matches_imagehash(shared_data):
    root = shared_data / "c3-brain-mri-yes-no"
    if not root.is_dir():
        pytest.skip(f"{root} absent")
    files = sorted(str(p) for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    table, _ = extract_files(files)
    assert (table["status"] == "ok").all(), table.loc[table["status"] != "ok", "error"].head()
    for path, p, d in zip(files, table["phash"], table["dhash"]):
        with Image.open(path) as img:
            assert format(int(p), "016x") == str(imagehash.phash(img))
            assert format(int(d), "016x") == str(imagehash.dhash(img))
    # some files are PNGs saved under JPEG names: format comes from the bytes
    assert set(table["format"]) >= {"JPEG", "PNG"}
    assert table["pixel_xxh128"].notna().all()
    # the release holds byte-identical copies; equal bytes always mean equal decoded pixels
    assert table["sha256"].duplicated().any()
    assert (table.groupby("sha256")["pixel_xxh128"].nunique() == 1).all()


def test_dcm_suffix_does_not_override_the_bytes(tmp_path):
    """A PNG named .dcm is decoded as the PNG it is (format comes from the magic bytes)."""
    rng = np.random.default_rng(9)
    path = _save(tmp_path / "scan.dcm", _blobs(rng, 40, 40), "PNG")
    table, _ = extract_files([path])
    assert table.loc[0, "status"] == "ok" and table.loc[0, "format"] == "PNG"
    assert table.loc[0, "decoded_mode"] == "L"


@pytest.mark.parametrize("mode", ["RGB", "L", "1", "P"])
def test_pixel_digest_of_large_images_is_streamed_identically(tmp_path, monkeypatch, mode):
    from splitscope.features import extract as extract_mod

    rng = np.random.default_rng(10)
    img = Image.fromarray(rng.integers(0, 256, (97, 61, 3), dtype=np.uint8)).convert(mode)
    path = _save(tmp_path / "x.png", img)
    whole, _ = extract_files([path])
    monkeypatch.setattr(extract_mod, "_DIGEST_STRIP_PIXELS", 200)  # ~3 rows per strip
    strips, _ = extract_files([path])
    assert whole.loc[0, "pixel_xxh128"] == strips.loc[0, "pixel_xxh128"]


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "I;16", "P"])
def test_pixel_digest_is_xxh3_128_of_mode_size_and_pixel_bytes(tmp_path, mode):
    xxhash = pytest.importorskip("xxhash")
    rng = np.random.default_rng(11)
    img = Image.fromarray(rng.integers(0, 256, (23, 37, 3), dtype=np.uint8)).convert(mode)
    path = _save(tmp_path / "x.png", img)
    table, _ = extract_files([path])
    with Image.open(path) as back:
        back.load()
        content = f"{back.mode}:{back.size[0]}x{back.size[1]}:".encode()
        if back.mode == "P":
            content += back.palette.mode.encode() + b":" + bytes(back.palette.tobytes()) + b":"
        content += back.tobytes()
    assert table.loc[0, "status"] == "ok"
    assert table.loc[0, "pixel_xxh128"] == xxhash.xxh3_128(content).hexdigest()
