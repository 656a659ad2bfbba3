"""Bad input never aborts extraction and never vanishes: each kind works or gets a reason."""

from __future__ import annotations

import hashlib
import io
import os
import struct
import zlib

import numpy as np
import pandas as pd
import pytest
from PIL import Image, ImageOps

from splitscope.features import extract as extract_mod
from splitscope.features.extract import extract_files
from splitscope.features.options import FeatureParams

imagehash = pytest.importorskip("imagehash")


def _image(seed=0, w=64, h=48):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = 120 + 100 * np.sin(xx / 7.0) * np.cos(yy / 5.0) + rng.normal(0, 10, (h, w))
    rgb = np.stack([base, base * 0.8 + 20, 255 - base], -1)
    return Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8), "RGB")


def _one(path, params=None):
    table, thumbs = extract_files([str(path)], params or FeatureParams())
    return table.iloc[0], thumbs[0]


def _assert_imagehash(row, img):
    assert row["status"] == "ok", row["error"]
    assert format(int(row["phash"]), "016x") == str(imagehash.phash(img))
    assert format(int(row["dhash"]), "016x") == str(imagehash.dhash(img))


def _png(width, height, idat=b"\x00" * 16, color_type=0, bit_depth=8):
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(idat))
            + chunk(b"IEND", b""))


# -- files that cannot be read -------------------------------------------------------------

def test_missing_file(tmp_path):
    row, thumb = _one(tmp_path / "nope.jpg")
    assert row["status"] == "missing" and "no such file" in row["error"]
    assert pd.isna(row["sha256"]) and not row["has_thumb"] and not thumb.any()


def test_dangling_symlink_is_missing(tmp_path):
    link = tmp_path / "link.jpg"
    os.symlink(tmp_path / "gone.jpg", link)
    row, _ = _one(link)
    assert row["status"] == "missing" and "dangling" in row["error"]


def test_directory_named_like_an_image_is_a_special_file(tmp_path):
    d = tmp_path / "folder.jpg"
    d.mkdir()
    row, _ = _one(d)
    assert row["status"] == "special_file" and "directory" in row["error"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root reads files whatever their permission bits")
def test_permission_denied_real(tmp_path):
    path = tmp_path / "locked.png"
    _image().save(path)
    path.chmod(0)
    try:
        row, _ = _one(path)
    finally:
        path.chmod(0o644)
    assert row["status"] == "permission_denied"


def test_permission_denied_simulated(tmp_path, monkeypatch):
    """Runs as root too: the read raises PermissionError as it would for another user."""
    path = tmp_path / "locked.png"
    _image().save(path)
    real_open = open

    def fake_open(file, mode="r", *args, **kwargs):
        if os.fspath(file) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(extract_mod, "open", fake_open, raising=False)
    row, _ = _one(path)
    assert row["status"] == "permission_denied" and "denied" in row["error"].lower()


def test_other_read_error_is_unreadable(tmp_path, monkeypatch):
    path = tmp_path / "io.png"
    _image().save(path)

    def fake_open(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(extract_mod, "open", fake_open, raising=False)
    row, _ = _one(path)
    assert row["status"] == "unreadable" and "Input/output" in row["error"]


# -- files that are read but not decoded ---------------------------------------------------

def test_zero_byte_file(tmp_path):
    path = tmp_path / "empty.png"
    path.write_bytes(b"")
    row, _ = _one(path)
    assert row["status"] == "zero_byte"
    assert row["size_bytes"] == 0 and row["sha256"] == hashlib.sha256(b"").hexdigest()


def test_text_file_is_not_an_image(tmp_path):
    path = tmp_path / "notes.jpg"
    path.write_text("patient list\n1,2,3\n")
    row, _ = _one(path)
    assert row["status"] == "not_an_image"
    assert row["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_truncated_file_keeps_digest_and_header(tmp_path, fmt):
    buf = io.BytesIO()
    _image(w=200, h=150).save(buf, fmt)
    data = buf.getvalue()[: len(buf.getvalue()) // 2]
    path = tmp_path / f"cut.{fmt.lower()}"
    path.write_bytes(data)
    row, thumb = _one(path)
    assert row["status"] == "truncated", row["error"]
    assert row["sha256"] == hashlib.sha256(data).hexdigest()
    assert row["size_bytes"] == len(data)
    assert row["format"] == fmt and row["width"] == 200 and row["height"] == 150
    assert not row["has_thumb"] and not thumb.any() and pd.isna(row["pixel_xxh128"])


def test_unsupported_format(tmp_path):
    """Recognised but not decodable here: EPS needs Ghostscript (absent on test machines)."""
    import shutil

    if shutil.which("gs"):
        pytest.skip("Ghostscript installed: EPS decodes here")
    path = tmp_path / "figure.eps"
    path.write_text("%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n"
                    "newpath 0 0 moveto 10 10 lineto stroke\nshowpage\n")
    row, _ = _one(path)
    assert row["status"] == "unsupported", row["error"]


def test_unsupported_tiff_variant(tmp_path):
    """A TIFF whose compression tag names no known codec: recognised, not decodable."""
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(buf, "TIFF")
    data = bytearray(buf.getvalue())
    assert data[:2] == b"II"
    ifd = struct.unpack("<I", data[4:8])[0]
    for i in range(struct.unpack("<H", data[ifd:ifd + 2])[0]):
        entry = ifd + 2 + 12 * i
        if struct.unpack("<H", data[entry:entry + 2])[0] == 259:  # Compression
            data[entry + 8:entry + 10] = struct.pack("<H", 60000)
    path = tmp_path / "odd.tif"
    path.write_bytes(bytes(data))
    row, _ = _one(path)
    assert row["status"] == "unsupported", row["error"]
    assert row["format"] == "TIFF" and "TIFF" in row["error"]


def test_png_cut_inside_its_header_is_truncated(tmp_path):
    buf = io.BytesIO()
    _image().save(buf, "PNG")
    path = tmp_path / "stub.png"
    path.write_bytes(buf.getvalue()[:10])
    row, _ = _one(path)
    assert row["status"] == "truncated", row["error"]


def test_decompression_bomb_header(tmp_path):
    """A small PNG whose header claims 100000 x 100000 pixels is listed, not decoded."""
    data = _png(100_000, 100_000)
    assert len(data) < 200
    path = tmp_path / "bomb.png"
    path.write_bytes(data)
    row, _ = _one(path)
    assert row["status"] == "decompression_bomb"
    assert row["width"] == 100_000  # header fields kept


def test_decompression_bomb_bound_is_a_parameter(tmp_path):
    path = tmp_path / "ok.png"
    _image(w=40, h=30).save(path)
    row, _ = _one(path, FeatureParams(max_pixels=40 * 30 - 1))
    assert row["status"] == "decompression_bomb" and "max_pixels" in row["error"]
    row, _ = _one(path, FeatureParams(max_pixels=40 * 30))
    assert row["status"] == "ok"


# -- unusual but valid images: decoded, with imagehash semantics ---------------------------

def test_cmyk_jpeg(tmp_path):
    path = tmp_path / "cmyk.jpg"
    _image().convert("CMYK").save(path, quality=95)
    with Image.open(path) as img:
        assert img.mode == "CMYK"
        row, _ = _one(path)
        _assert_imagehash(row, img)
    assert row["decoded_mode"] == "CMYK"


def test_palette_png_with_transparency(tmp_path):
    path = tmp_path / "pal.png"
    img = _image().convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    img.save(path, transparency=2)
    with Image.open(path) as img2:
        assert img2.mode == "P" and "transparency" in img2.info
        row, _ = _one(path)
        _assert_imagehash(row, img2)


def test_16bit_png_uses_the_linear_rule(tmp_path):
    a = (np.arange(64 * 48, dtype=np.uint32).reshape(48, 64) * 13 % 4096).astype(np.uint16)
    path = tmp_path / "deep.png"
    Image.fromarray(a).save(path)
    row, thumb = _one(path)
    assert row["status"] == "ok" and row["gray_rule"] == "minmax"
    assert row["decoded_mode"].startswith("I")
    from splitscope.features.imaging import array_to_gray8, image_features

    expected = image_features(Image.fromarray(array_to_gray8(a)))
    assert int(row["phash"]) == expected["phash"]
    np.testing.assert_array_equal(thumb, expected["thumb"])


def test_exif_rotated_jpeg_describes_stored_pixels(tmp_path):
    img = _image(w=80, h=40)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise for display
    path = tmp_path / "rotated.jpg"
    img.save(path, quality=95, exif=exif.tobytes())
    row, thumb = _one(path)
    with Image.open(path) as stored:
        assert stored.getexif().get(0x0112) == 6
        _assert_imagehash(row, stored)  # the stored (unrotated) pixels
        assert row["width"] == 80 and row["height"] == 40
        upright = ImageOps.exif_transpose(stored)
        assert upright.size == (40, 80)
        assert format(int(row["phash"]), "016x") != str(imagehash.phash(upright))
        ref = np.asarray(stored.convert("L").resize((96, 96), Image.Resampling.BICUBIC))
    np.testing.assert_array_equal(thumb, ref)


@pytest.mark.parametrize("name", ["with space.png", "ünïcødé_画像.png", "a&b.png", "-leading.png",
                                  "--help.png"])
def test_odd_file_names(tmp_path, name):
    path = tmp_path / name
    _image().save(path)
    table, _ = extract_files([str(path)])
    assert table.loc[0, "status"] == "ok"
    assert table.loc[0, "file"] == str(path)


# -- a run with one bad file ---------------------------------------------------------------

def test_one_corrupt_file_among_100(tmp_path):
    files = []
    for i in range(100):
        path = tmp_path / f"img_{i:03d}.png"
        _image(seed=i, w=32, h=24).save(path)
        files.append(str(path))
    bad = tmp_path / "img_042.png"
    bad.write_bytes(bad.read_bytes()[:60])  # cut inside the image data
    table, thumbs = extract_files(files, FeatureParams(thumb_size=16))
    assert len(table) == 100
    assert (table["status"] == "ok").sum() == 99
    failed = table[table["status"] != "ok"]
    assert failed["file"].tolist() == [str(bad)]
    assert failed["status"].iloc[0] == "truncated" and isinstance(failed["error"].iloc[0], str)
    assert table["has_thumb"].sum() == 99 and not thumbs[42].any()
    assert table["phash"].notna().sum() == 99


def test_every_kind_in_one_batch_never_raises(tmp_path):
    kinds = {}
    kinds["ok"] = tmp_path / "ok.png"
    _image().save(kinds["ok"])
    kinds["missing"] = tmp_path / "missing.png"
    kinds["zero_byte"] = tmp_path / "zero.png"
    kinds["zero_byte"].write_bytes(b"")
    kinds["not_an_image"] = tmp_path / "text.png"
    kinds["not_an_image"].write_text("x")
    kinds["decompression_bomb"] = tmp_path / "bomb.png"
    kinds["decompression_bomb"].write_bytes(_png(60_000, 60_000))
    kinds["special_file"] = tmp_path / "dir.png"
    kinds["special_file"].mkdir()
    table, _ = extract_files([str(p) for p in kinds.values()])
    assert table["status"].tolist() == list(kinds)
