"""Header fields without pixel decode (METHODS §4.1)."""

from __future__ import annotations

import hashlib
import io
import os
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from splitscope.features.header import (
    HEADER_COLUMNS,
    HEADER_DTYPES,
    ZIGZAG,
    estimate_jpeg_quality,
    header_fields,
    sniff_format,
)

RNG = np.random.default_rng(1234)
# smooth content so quality and subsampling matter like on real images
_Y, _X = np.mgrid[0:48, 0:64]
_BASE = np.stack([(_X * 4) % 256, (_Y * 5) % 256, ((_X + _Y) * 2) % 256], axis=-1)
RGB = Image.fromarray((_BASE + RNG.integers(0, 20, _BASE.shape)).clip(0, 255).astype(np.uint8))
GRAY = RGB.convert("L")


def jpeg_bytes(im: Image.Image = RGB, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def png_bytes(im: Image.Image = RGB, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG", **kw)
    return buf.getvalue()


def natural(table_string: str) -> list[int]:
    zz = np.array(table_string.split(","), dtype=int)
    nat = np.empty(64, dtype=int)
    nat[ZIGZAG] = zz
    return nat.tolist()


def tiff_exif(byte_order: str, orientation: int, make: str | None = None) -> bytes:
    """A minimal TIFF block with IFD0 holding Orientation (and Make), in either byte order."""
    bo = "<" if byte_order == "II" else ">"
    entries = [(0x0112, 3, 1, struct.pack(bo + "HH", orientation, 0))]
    tail = b""
    n = 1 + (make is not None)
    if make is not None:
        raw = make.encode() + b"\x00"
        offset = 8 + 2 + 12 * n + 4
        entries.insert(0, (0x010F, 2, len(raw), struct.pack(bo + "I", offset)))
        tail = raw
    ifd = struct.pack(bo + "H", n) + b"".join(
        struct.pack(bo + "HHI", t, ty, c) + v for t, ty, c, v in entries
    ) + struct.pack(bo + "I", 0)
    return byte_order.encode() + struct.pack(bo + "HI", 42, 8) + ifd + tail


# --- contract ---------------------------------------------------------------------------------


def test_columns_are_stable_and_every_dict_has_exactly_them():
    assert len(HEADER_COLUMNS) == len(set(HEADER_COLUMNS))
    assert list(HEADER_DTYPES) == HEADER_COLUMNS
    for data, name in [(jpeg_bytes(), "a.jpg"), (png_bytes(), "a.png"), (b"", "x"),
                       (b"\x00" * 50, None)]:
        h = header_fields(data, name)
        assert list(h) == HEADER_COLUMNS
        for key, value in h.items():
            assert value is None or type(value) in (int, float, bool, str), (key, type(value))


def test_values_fit_declared_dtypes():
    import pandas as pd

    rows = [header_fields(jpeg_bytes(), "a.jpg"), header_fields(png_bytes(), "b.png"),
            header_fields(b"junk", "c.bmp")]
    df = pd.DataFrame(rows, columns=HEADER_COLUMNS).astype(HEADER_DTYPES)
    assert df["width"].tolist() == [64, 64, pd.NA]


def test_generic_fields():
    h = header_fields(jpeg_bytes(quality=90), "dir/scan.JPG")
    assert h["format"] == "JPEG"
    assert h["extension"] == "jpg"
    assert h["extension_mismatch"] is False
    assert (h["width"], h["height"]) == (64, 48)
    assert h["aspect"] == pytest.approx(64 / 48)
    assert h["mode"] == "RGB" and h["channels"] == 3 and h["bit_depth"] == 8
    assert h["file_size"] == len(jpeg_bytes(quality=90))
    assert h["bytes_per_pixel"] == pytest.approx(h["file_size"] / (64 * 48))
    assert h["header_error"] is None


# --- JPEG -------------------------------------------------------------------------------------


@pytest.mark.parametrize("q", range(50, 96))
def test_quality_estimate_within_one(q):
    h = header_fields(jpeg_bytes(quality=q))
    assert abs(h["jpeg_quality"] - q) <= 1
    assert h["jpeg_quality_error"] == 0.0  # Pillow writes the IJG tables exactly
    hg = header_fields(jpeg_bytes(GRAY, quality=q))
    assert abs(hg["jpeg_quality"] - q) <= 1
    assert hg["jpeg_qt1"] is None and hg["jpeg_subsampling"] == "gray"


@pytest.mark.parametrize("q", [1, 10, 25, 49, 100])
def test_quality_estimate_outside_usual_range(q):
    assert abs(header_fields(jpeg_bytes(quality=q))["jpeg_quality"] - q) <= 1


def test_quality_error_positive_for_custom_tables():
    flat = [[3] * 64, [5] * 64]
    h = header_fields(jpeg_bytes(qtables=flat))
    assert h["jpeg_qt0"] == ",".join(["3"] * 64)
    assert h["jpeg_qt0_sum"] == 192 and h["jpeg_qt1_sum"] == 320
    assert h["jpeg_quality_error"] > 1.0


def test_estimate_quality_reference_values():
    # hand-computed: q=50 reproduces the Annex K luminance table itself
    luma = [16, 11, 12, 14, 12, 10, 16, 14, 13, 14, 18, 17, 16, 19, 24, 40, 26, 24, 22, 22, 24,
            49, 35, 37, 29, 40, 58, 51, 61, 60, 57, 51, 56, 55, 64, 72, 92, 78, 64, 68, 87, 69,
            55, 56, 80, 109, 81, 87, 95, 98, 103, 104, 103, 62, 77, 113, 121, 112, 100, 120,
            92, 101, 103, 99]
    assert estimate_jpeg_quality(luma) == (50, 0.0)
    assert estimate_jpeg_quality([1] * 64)[0] == 100
    with pytest.raises(ValueError):
        estimate_jpeg_quality([1] * 10)


def test_quantization_tables_match_pillow():
    for q in (30, 75, 93):
        data = jpeg_bytes(quality=q)
        h = header_fields(data)
        pil = Image.open(io.BytesIO(data)).quantization  # natural order
        assert h["jpeg_n_qtables"] == len(pil) == 2
        for tid, table in pil.items():
            assert natural(h[f"jpeg_qt{tid}"]) == list(table)
            assert h[f"jpeg_qt{tid}_sum"] == sum(table)


@pytest.mark.parametrize(
    "subsampling,name,sampling",
    [(0, "4:4:4", "1x1,1x1,1x1"), (1, "4:2:2", "2x1,1x1,1x1"), (2, "4:2:0", "2x2,1x1,1x1")],
)
def test_subsampling(subsampling, name, sampling):
    h = header_fields(jpeg_bytes(quality=85, subsampling=subsampling))
    assert h["jpeg_subsampling"] == name
    assert h["jpeg_sampling"] == sampling
    assert h["jpeg_components"] == 3


def test_progressive_and_optimized():
    base = header_fields(jpeg_bytes(quality=80))
    assert base["jpeg_progressive"] is False and base["jpeg_sof"] == "SOF0"
    assert base["jpeg_optimized_huffman"] is False
    opt = header_fields(jpeg_bytes(quality=80, optimize=True))
    assert opt["jpeg_optimized_huffman"] is True and opt["jpeg_progressive"] is False
    prog = header_fields(jpeg_bytes(quality=80, progressive=True))
    assert prog["jpeg_progressive"] is True and prog["jpeg_sof"] == "SOF2"
    assert prog["jpeg_optimized_huffman"] is True  # libjpeg's progressive mode optimizes


def test_app_segments_and_comment():
    h = header_fields(jpeg_bytes())
    assert h["app_segments"] == "APP0"
    assert h["app_jfif"] is True and h["app_exif"] is False and h["app_icc"] is False
    assert h["jpeg_comment"] is False
    assert h["density_unit"] == "none" and h["density_x"] == 1.0
    h = header_fields(jpeg_bytes(dpi=(300, 300), comment=b"hello"))
    assert h["jpeg_comment"] is True and h["density_unit"] == "dpi" and h["density_x"] == 300.0


def test_exif_orientation_pillow_writer():
    exif = Image.Exif()
    exif[0x0112] = 6
    exif[0x010F] = "ScannerCo"
    h = header_fields(jpeg_bytes(exif=exif.tobytes()))
    assert h["app_exif"] is True
    assert h["exif_orientation"] == 6
    assert h["exif_make"] == "ScannerCo"
    assert h["app_segments"] == "APP0,APP1"


@pytest.mark.parametrize("byte_order", ["II", "MM"])
def test_exif_orientation_both_byte_orders(byte_order):
    data = jpeg_bytes(exif=b"Exif\x00\x00" + tiff_exif(byte_order, 6, make="Acme Medical"))
    assert Image.open(io.BytesIO(data)).getexif()[0x0112] == 6  # the reference reader agrees
    h = header_fields(data)
    assert h["exif_orientation"] == 6
    assert h["exif_make"] == "Acme Medical"


def test_broken_exif_is_not_a_header_error():
    data = jpeg_bytes(exif=b"Exif\x00\x00MM\x00*\xff\xff\xff\xff")
    h = header_fields(data)
    assert h["app_exif"] is True and h["exif_orientation"] is None and h["header_error"] is None


def test_icc_profile_and_xmp_and_adobe():
    from PIL import ImageCms

    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    h = header_fields(jpeg_bytes(icc_profile=icc))
    assert h["app_icc"] is True and "APP2" in h["app_segments"]
    # XMP (APP1 with the Adobe namespace) and an Adobe APP14, inserted by hand after SOI
    data = jpeg_bytes()
    xmp = b"http://ns.adobe.com/xap/1.0/\x00<x:xmpmeta/>"
    adobe = b"Adobe\x00\x64\x00\x00\x00\x00\x01"

    def seg(marker: int, payload: bytes) -> bytes:
        return bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload

    data2 = data[:2] + seg(0xE1, xmp) + seg(0xEE, adobe) + data[2:]
    h2 = header_fields(data2)
    assert h2["app_xmp"] is True and h2["app_exif"] is False and h2["app_adobe"] is True
    assert h2["app_segments"] == "APP1,APP14,APP0"
    assert h2["header_error"] is None


def test_restart_interval():
    data = jpeg_bytes()
    assert header_fields(data)["jpeg_restart_interval"] == 0
    dri = b"\xff\xdd\x00\x04\x00\x10"
    assert header_fields(data[:2] + dri + data[2:])["jpeg_restart_interval"] == 16


def test_fill_bytes_between_markers():
    data = jpeg_bytes()
    # JPEG allows any number of 0xFF fill bytes before a marker
    h = header_fields(data[:2] + b"\xff\xff\xff" + data[2:])
    assert h["header_error"] is None and h["width"] == 64


# --- PNG --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,color_type,bit_depth,channels",
    [("1", 0, 1, 1), ("L", 0, 8, 1), ("I;16", 0, 16, 1), ("RGB", 2, 8, 3), ("P", 3, 8, 1),
     ("LA", 4, 8, 2), ("RGBA", 6, 8, 4)],
)
def test_png_color_types(mode, color_type, bit_depth, channels):
    # a full palette (Pillow writes a small palette with fewer bits)
    im = RGB.resize((30, 20)).convert("P") if mode == "P" else Image.new(mode, (30, 20))
    data = png_bytes(im)
    h = header_fields(data, "x.png")
    assert h["format"] == "PNG" and h["extension_mismatch"] is False
    assert (h["png_color_type"], h["png_bit_depth"], h["channels"]) == (color_type, bit_depth,
                                                                      channels)
    assert h["bit_depth"] == bit_depth
    assert h["mode"] == Image.open(io.BytesIO(data)).mode
    assert (h["width"], h["height"]) == (30, 20)
    assert h["png_interlace"] == 0
    assert h["header_error"] is None


def test_png_palette_bit_depth_and_transparency():
    im = Image.new("P", (8, 8))
    im.putpalette([0, 0, 0, 255, 255, 255])
    data = png_bytes(im, bits=1, transparency=0)
    h = header_fields(data)
    assert h["png_color_type"] == 3 and h["png_bit_depth"] == 1
    assert h["png_PLTE"] is True and h["png_tRNS"] is True


def test_png_chunks_and_flags():
    from PIL import ImageCms

    info = PngImagePlugin.PngInfo()
    info.add_text("Software", "scanner v1")
    info.add_text("Comment", "zipped", zip=True)
    info.add_itxt("Title", "intl")
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    data = png_bytes(RGB, pnginfo=info, dpi=(72, 72), icc_profile=icc)
    h = header_fields(data)
    chunks = h["png_chunks"].split(",")
    assert chunks[0] == "IHDR" and chunks[-1] == "IEND" and "IDAT" in chunks
    assert len(chunks) == len(set(chunks))
    assert {"iCCP", "pHYs", "tEXt", "zTXt", "iTXt"} <= set(chunks)
    assert h["png_iCCP"] and h["png_pHYs"] and h["png_tEXt"] and h["png_zTXt"] and h["png_iTXt"]
    assert not h["png_gAMA"] and not h["png_sRGB"] and not h["png_tIME"]
    assert h["png_text_keys"] == "Software,Comment,Title"
    assert h["density_unit"] == "per_metre" and h["density_x"] == pytest.approx(72 / 0.0254, 1e-3)
    plain = header_fields(png_bytes(RGB))
    assert plain["png_chunks"] == "IHDR,IDAT,IEND" and plain["png_tEXt"] is False


def test_png_zlib_level_and_idat_count():
    lo = header_fields(png_bytes(RGB, compress_level=1))
    hi = header_fields(png_bytes(RGB, compress_level=9))
    assert (lo["png_zlib_level"], hi["png_zlib_level"]) == (0, 3)
    assert lo["png_idat_count"] >= 1


def test_png_interlace_flag_read_from_ihdr():
    data = bytearray(png_bytes(GRAY))
    data[8 + 8 + 12] = 1  # IHDR interlace byte (CRC is not checked by a header parser)
    assert header_fields(bytes(data))["png_interlace"] == 1


def test_png_exif_chunk_orientation():
    exif = Image.Exif()
    exif[0x0112] = 3
    h = header_fields(png_bytes(RGB, exif=exif.tobytes()))
    assert h["png_eXIf"] is True and h["exif_orientation"] == 3


# --- names and formats ------------------------------------------------------------------------


def test_png_saved_under_jpeg_name_is_a_mismatch():
    h = header_fields(png_bytes(), "brain/yes/Y12.jpg")
    assert h["format"] == "PNG" and h["extension"] == "jpg" and h["extension_mismatch"] is True
    assert header_fields(jpeg_bytes(), "a.jpeg")["extension_mismatch"] is False
    assert header_fields(jpeg_bytes(), "a.png")["extension_mismatch"] is True
    unknown = header_fields(jpeg_bytes(), "a.xyz")
    assert unknown["extension"] == "xyz" and unknown["extension_mismatch"] is None
    noext = header_fields(jpeg_bytes(), "dir.v2/IMG_0001")
    assert noext["extension"] == "" and noext["extension_mismatch"] is None
    assert header_fields(jpeg_bytes())["extension"] is None


@pytest.mark.parametrize(
    "fmt,mode,kw",
    [("BMP", "RGB", {}), ("GIF", "P", {}), ("TIFF", "RGB", {}), ("TIFF", "I;16", {}),
     ("WEBP", "RGB", {"lossless": True})],
)
def test_other_formats_via_pillow_header(fmt, mode, kw):
    im = RGB.convert(mode) if mode != "I;16" else Image.new("I;16", (64, 48))
    buf = io.BytesIO()
    try:
        im.save(buf, fmt, **kw)
    except (KeyError, OSError):
        pytest.skip(f"Pillow cannot write {fmt} here")
    h = header_fields(buf.getvalue(), f"x.{fmt.lower()}")
    assert h["format"] == fmt and h["extension_mismatch"] is False
    assert (h["width"], h["height"]) == (64, 48)
    assert h["mode"] == Image.open(io.BytesIO(buf.getvalue())).mode
    assert h["header_error"] is None
    if mode == "I;16":
        assert h["bit_depth"] == 16


def test_sniff_format():
    assert sniff_format(jpeg_bytes()) == "JPEG"
    assert sniff_format(png_bytes()) == "PNG"
    assert sniff_format(b"GIF89a....") == "GIF"
    assert sniff_format(b"\x00" * 128 + b"DICM") == "DICOM"
    assert sniff_format(b"hello world") is None


# --- bad input never raises -------------------------------------------------------------------


def test_zero_bytes():
    h = header_fields(b"", "empty.jpg")
    assert h["header_error"] == "empty file"
    assert h["file_size"] == 0 and h["format"] is None and h["extension_mismatch"] is None


def test_random_bytes():
    rng = np.random.default_rng(7)
    for n in (1, 7, 100, 5000):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        h = header_fields(data, "r.png")
        assert h["header_error"] is not None
        assert h["width"] is None


def test_every_prefix_of_a_jpeg_header():
    data = jpeg_bytes(exif=b"Exif\x00\x00" + tiff_exif("MM", 6), progressive=True)
    sos = data.index(b"\xff\xda")
    for n in range(sos + 2):
        h = header_fields(data[:n])
        assert h["header_error"] is not None, n
    whole = header_fields(data)
    assert whole["header_error"] is None
    # truncated after the header (inside the scan) still parses: the header is complete
    assert header_fields(data[: sos + 20])["header_error"] is None


def test_every_prefix_of_a_png():
    data = png_bytes(GRAY, pnginfo=_text_info())
    for n in range(1, len(data)):
        h = header_fields(data[:n])
        assert h["header_error"] is not None, n
        if n >= 8 + 8 + 13:
            assert (h["width"], h["height"]) == (64, 48)
    assert header_fields(data)["header_error"] is None


def _text_info():
    info = PngImagePlugin.PngInfo()
    info.add_text("k", "v")
    return info


def test_corrupted_lengths():
    data = bytearray(jpeg_bytes())
    data[4:6] = b"\x00\x01"  # APP0 length < 2
    assert "length" in header_fields(bytes(data))["header_error"]
    data = bytearray(jpeg_bytes())
    data[4:6] = b"\xff\xf0"  # APP0 runs past the end
    assert "truncated" in header_fields(bytes(data))["header_error"]
    png = bytearray(png_bytes())
    png[8:12] = b"\x7f\xff\xff\xff"
    h = header_fields(bytes(png))
    assert h["header_error"] is not None


def test_bytearray_accepted_and_non_bytes_rejected():
    assert header_fields(bytearray(png_bytes()))["format"] == "PNG"
    with pytest.raises(TypeError):
        header_fields("not bytes")  # type: ignore[arg-type]


# --- DICOM ------------------------------------------------------------------------------------


def test_dicom_tags():
    pydicom = pytest.importorskip("pydicom")
    from pydicom.data import get_testdata_file

    path = get_testdata_file("CT_small.dcm")
    data = Path(path).read_bytes()
    ds = pydicom.dcmread(path, stop_before_pixels=True)
    h = header_fields(data, "CT_small.dcm")
    assert h["format"] == "DICOM" and h["extension_mismatch"] is False
    assert h["dicom_Modality"] == ds.Modality == "CT"
    assert h["dicom_Rows"] == ds.Rows and h["dicom_Columns"] == ds.Columns
    assert (h["width"], h["height"]) == (ds.Columns, ds.Rows)
    assert h["dicom_BitsAllocated"] == ds.BitsAllocated
    assert h["dicom_BitsStored"] == ds.BitsStored == h["bit_depth"]
    assert h["dicom_Manufacturer"] == str(ds.Manufacturer)
    assert h["dicom_PhotometricInterpretation"] == "MONOCHROME2"
    assert h["dicom_PixelSpacing"] == ",".join(str(v) for v in ds.PixelSpacing)
    assert h["dicom_TransferSyntaxUID"] == str(ds.file_meta.TransferSyntaxUID)
    assert h["dicom_InstitutionName"] == str(ds.InstitutionName)
    # the PatientID only as a digest (a group key the group layer may propose, METHODS §3.6)
    assert h["dicom_PatientID_digest"] == hashlib.sha256(
        str(ds.PatientID).encode()).hexdigest()[:16]
    assert str(ds.PatientID) not in {str(v) for v in h.values()}
    assert h["header_error"] is None
    # the preamble of this file starts like a TIFF: the DICM check must win
    assert data[:4] == b"II*\x00"
    for n in (132, 300, 1000):
        cut = header_fields(data[:n])
        assert cut["format"] == "DICOM" and cut["header_error"] is not None


# --- real data --------------------------------------------------------------------------------


def _files(root):
    out = []
    for dirpath, _dirs, names in os.walk(root):
        out += [os.path.join(dirpath, n) for n in sorted(names)]
    return sorted(out)


@pytest.mark.realdata
def test_brain_mri_headers(shared_data):
    files = _files(shared_data / "c3-brain-mri-yes-no")
    assert len(files) == 253
    rows = []
    for path in files:
        data = Path(path).read_bytes()
        h = header_fields(data, path)
        assert h["header_error"] is None, (path, h["header_error"])
        # agree with Pillow's header parser on what it also reads
        im = Image.open(io.BytesIO(data))
        assert (h["format"], h["width"], h["height"], h["mode"]) == (
            im.format, im.size[0], im.size[1], im.mode), path
        if im.format == "JPEG":
            for tid, table in im.quantization.items():
                assert natural(h[f"jpeg_qt{tid}"]) == list(table), path
        if h["app_exif"]:
            assert h["exif_orientation"] == im.getexif().get(0x0112), path
        rows.append(h)
    # the data README: some PNG files under JPEG names, some files with EXIF/XMP segments
    mismatched = [r for r in rows if r["extension_mismatch"]]
    assert len(mismatched) == 6
    assert all(r["format"] == "PNG" and r["extension"] == "jpg" for r in mismatched)
    assert sum(bool(r["app_exif"]) for r in rows) > 0
    assert sum(bool(r["app_xmp"]) for r in rows) > 0
    assert {r["jpeg_subsampling"] for r in rows} >= {"4:2:0", "gray"}


@pytest.mark.realdata
def test_kermany_headers_sample_and_speed(shared_data):
    files = _files(shared_data / "kermany-chest-xray-224")[::20]
    datas = [Path(p).read_bytes() for p in files]
    t0 = time.perf_counter()
    rows = [header_fields(d, p) for d, p in zip(datas, files)]
    per_file = (time.perf_counter() - t0) / len(files)
    assert all(r["header_error"] is None for r in rows)
    assert {(r["format"], r["width"], r["height"]) for r in rows} == {("JPEG", 224, 224)}
    assert per_file < 0.005  # header parsing must stay far below decode cost


def test_cmyk_jpeg_mode_and_adobe_segment():
    data = jpeg_bytes(Image.new("CMYK", (20, 10), (1, 2, 3, 4)))
    h = header_fields(data)
    assert h["mode"] == Image.open(io.BytesIO(data)).mode == "CMYK"
    assert h["channels"] == 4 and h["app_adobe"] is True
    assert h["jpeg_sampling"] == "1x1,1x1,1x1,1x1" and h["jpeg_subsampling"] == "4:4:4"
