"""A crafted hostile release, built in code: every entry with the outcome a scan must give it.

:func:`build_folder` writes a folder release and returns ``{relative path: expected}``, where
``expected`` is a row status (``ok`` or a reason code) or ``("excluded", reason)``.
:func:`build_list` writes a list release (a CSV) whose rows point at ``..``, absolute paths,
devices and ``/proc``, and returns the expected status per row, without and with
``allow_outside_root``. :func:`lying_jpeg` and :func:`xlsx_bomb` build single hostile files;
nothing binary is checked in: every case is generated here.
"""

from __future__ import annotations

import hashlib
import io
import os
import socket
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
from PIL import Image

from splitscope.manifest.files import (
    EXCLUDED_DIR_LINK,
    EXCLUDED_HIDDEN_DIR,
    EXCLUDED_HIDDEN_FILE,
    EXCLUDED_ROOT_FILE,
)

NAMES = [
    "with space.png", "ünïcödé.png", "emoji_😀.png", "new\nline.png", "amp&er.png",
    "-leading-dash.png", '=HYPERLINK("x","y").png', "@SUM(1+1).png", "+plus.png",
    "<img src=x onerror=alert(1)>.png", "'quote\".png", "tab\tname.png",
]


def image(seed: int = 0, w: int = 64, h: int = 48, mode: str = "RGB") -> Image.Image:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = 120 + 100 * np.sin(xx / (5.0 + seed % 7)) * np.cos(yy / 5.0) + rng.normal(0, 12, (h, w))
    rgb = np.stack([base, base * 0.8 + 20, 255 - base], -1)
    return Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8), "RGB").convert(mode)


def small_release(root: Path, n: int = 8) -> Path:
    """A plain folder release of ``n`` small PNGs under ``root`` (two splits, two classes)."""
    for i in range(n):
        folder = root / ("train" if i % 2 else "test") / ("a" if i % 4 < 2 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        image(i, w=32, h=24).save(folder / f"x_{i:02d}.png")
    return root


def _jpeg(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", **kw)
    return buf.getvalue()


def _png_header_only(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + chunk(b"IEND", b""))


def _corrupt_scan_data() -> bytes:
    """A complete JPEG (end marker kept) whose entropy-coded data holds random bytes, chosen so
    that libjpeg gives up on it (seed 0 does with Pillow's decoder)."""
    rng = np.random.default_rng(0)
    noise = Image.fromarray((rng.random((256, 256, 3)) * 255).astype(np.uint8))
    data = bytearray(_jpeg(noise, quality=90))
    start = data.find(b"\xff\xda") + 200
    data[start:start + 2000] = np.random.default_rng(0).integers(0, 256, 2000,
                                                                 dtype=np.uint8).tobytes()
    return bytes(data)


def lying_jpeg(width: int, height: int, seed: int = 0) -> bytes:
    """A complete, valid 64×64 JPEG (end marker kept) whose frame header claims ``width`` ×
    ``height``: libjpeg would fill every block past the first few with grey."""
    rng = np.random.default_rng(seed)
    data = bytearray(_jpeg(Image.fromarray((rng.random((64, 64, 3)) * 255).astype(np.uint8)),
                           quality=90))
    sof = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


def xlsx_bomb(path: Path, kind: str, inflated: int = 1_200_000_000) -> None:
    """A workbook with the columns of a truth list (``image_path``, two classes) made hostile:
    ``sparse``, one more cell at XFD1048576 (a 17-billion-cell range, a few kB on disk);
    ``many``, 20 million empty cells; ``deflate``, ``inflated`` bytes of blank XML after
    the data (about a thousandth of that on disk)."""
    buf = io.BytesIO()
    import pandas as pd

    pd.DataFrame({"image_path": ["a.png", "b.png"], "x": [1, 0], "y": [0, 1]}).to_excel(
        buf, index=False)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, \
            zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename != "xl/worksheets/sheet1.xml":
                out.writestr(item, data)
                continue
            head, tail = data.split(b"</sheetData>")
            with out.open(item.filename, "w", force_zip64=True) as fh:
                if kind == "sparse":
                    fh.write(head + b'<row r="1048576"><c r="XFD1048576"><v>1</v></c></row>')
                elif kind == "many":
                    fh.write(head + b'<row r="4">' + b"<c/>" * 20_000_000 + b"</row>")
                else:
                    fh.write(head)
                fh.write(b"</sheetData>")
                block = b" " * (1 << 24)
                for _ in range(inflated // len(block) if kind == "deflate" else 0):
                    fh.write(block)
                fh.write(tail)


NON_UTF8 = [b"test/b/caf\xe9.png", b"test/b/bad\xff\xfe.png", b"train/\xe9t\xe9/x.png"]
"""Names that are not valid UTF-8 (Latin-1 bytes, stray bytes), as a file and as a folder."""


def shown(name: bytes) -> str:
    """How a manifest shows a name that is not valid UTF-8: ``\\xNN`` escapes."""
    return name.decode("utf-8", "backslashreplace")


def _save(path: Path, img: Image.Image, **kw) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, **kw)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def build_folder(root: Path, outside: Path) -> dict[str, object]:
    """Write the folder release under ``root`` (a ``split/class/file`` layout) and a file and a
    folder outside it under ``outside``; return the expected outcome of every entry."""
    expected: dict[str, object] = {}
    a, b = root / "train" / "a", root / "test" / "b"

    def ok(rel: str, img: Image.Image, **kw) -> None:
        _save(root / rel, img, **kw)
        expected[rel] = "ok"

    # images of every awkward kind that must decode
    ok("train/a/plain.png", image(1))
    ok("train/a/cmyk.jpg", image(2, mode="CMYK"), format="JPEG")
    pal = image(3).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    pal.info["transparency"] = 0
    ok("train/a/palette_trns.png", pal, transparency=0)
    ok("train/a/gray16.png", Image.fromarray(np.arange(64 * 48, dtype=np.uint16)
                                              .reshape(48, 64) * 13))
    ok("train/a/bilevel.png", image(4).convert("1"))
    frames = [image(5 + i).convert("P") for i in range(3)]
    _save(a / "animated.gif", frames[0], save_all=True, append_images=frames[1:], duration=50)
    expected["train/a/animated.gif"] = "ok"
    pages = [image(8 + i) for i in range(3)]
    _save(a / "multipage.tiff", pages[0], save_all=True, append_images=pages[1:])
    expected["train/a/multipage.tiff"] = "ok"
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90° (not applied: features describe stored pixels)
    ok("train/a/exif_rotated.jpg", image(11), format="JPEG", exif=exif.tobytes())
    ok("train/a/one_pixel.png", Image.new("L", (1, 1), 7))
    ok("train/a/flat.png", Image.new("L", (40, 30), 128))
    ok("train/a/wide_20000x10.png", image(12, w=20000, h=10, mode="L"))
    for i, name in enumerate(NAMES):
        ok(f"test/b/{name}", image(20 + i))

    # files that are read (or looked at) and must fail with their reason
    good = _jpeg(image(40), quality=90)
    _write(b / "truncated.jpg", good[: len(good) // 2])
    expected["test/b/truncated.jpg"] = "truncated"
    _write(b / "corrupt_scan_data.jpg", _corrupt_scan_data())
    expected["test/b/corrupt_scan_data.jpg"] = "corrupt"
    _write(b / "zero.png", b"")
    expected["test/b/zero.png"] = "zero_byte"
    _write(b / "text.jpg", b"this is not an image\n" * 10)
    expected["test/b/text.jpg"] = "not_an_image"
    _write(b / "bomb.png", _png_header_only(100_000, 100_000))
    expected["test/b/bomb.png"] = "decompression_bomb"
    _write(b / '=cmd|" /C calc"!A0.jpg', b"not an image either")
    expected['test/b/=cmd|" /C calc"!A0.jpg'] = "not_an_image"
    os.mkfifo(b / "fifo.jpg")
    expected["test/b/fifo.jpg"] = "special_file"
    sock_path = b / "s.jpg"
    if len(os.fsencode(sock_path)) < 100:  # AF_UNIX path limit
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(sock_path))
        expected["test/b/s.jpg"] = "special_file"
    os.mkdir(b / "folder.png.d")
    (b / "folder.png.d" / "inner.png").write_bytes(good)  # a folder below a class: rows
    expected["test/b/folder.png.d/inner.png"] = "ok"
    os.symlink(b / "gone.jpg", b / "dangling.jpg")
    expected["test/b/dangling.jpg"] = "missing"
    os.symlink(a / "plain.png", b / "link_inside.png")
    expected["test/b/link_inside.png"] = "ok"
    _save(outside / "secret.png", image(50))
    os.symlink(outside / "secret.png", b / "link_outside.png")
    expected["test/b/link_outside.png"] = "outside_root"

    # names that are not valid UTF-8: rows, listed as such, never read
    for i, name in enumerate(NON_UTF8):
        raw = os.fsencode(root) + b"/" + name
        os.makedirs(os.path.dirname(raw), exist_ok=True)
        with open(raw, "wb") as fh:
            fh.write(_jpeg(image(80 + i), quality=90))
        expected[shown(name)] = "invalid_utf8"
    with open(os.fsencode(a) + b"/.hidden\xff.png", "wb") as fh:
        fh.write(good)
    expected[shown(b"train/a/.hidden\xff.png")] = ("excluded", EXCLUDED_HIDDEN_FILE)
    # headers that claim a large image (under max_pixels) over a 64x64 scan
    for side in (9_000, 11_500):
        _write(b / f"lying_{side}.jpg", lying_jpeg(side, side, seed=side))
        expected[f"test/b/lying_{side}.jpg"] = "truncated"

    # entries that are not rows: each excluded with its reason
    _save(a / ".hidden.png", image(60))
    expected["train/a/.hidden.png"] = ("excluded", EXCLUDED_HIDDEN_FILE)
    _save(a / ".cache" / "x.png", image(61))
    _write(a / ".cache" / "deeper" / "y.txt", b"y")
    expected["train/a/.cache/x.png"] = ("excluded", EXCLUDED_HIDDEN_DIR)
    expected["train/a/.cache/deeper/y.txt"] = ("excluded", EXCLUDED_HIDDEN_DIR)
    _write(root / "README.md", b"# a release\n")
    expected["README.md"] = ("excluded", EXCLUDED_ROOT_FILE)
    (outside / "dir").mkdir(parents=True, exist_ok=True)
    _save(outside / "dir" / "far.png", image(62))
    os.symlink(outside / "dir", a / "linked_dir")
    expected["train/a/linked_dir"] = ("excluded", EXCLUDED_DIR_LINK)
    os.symlink(root / "train", a / "loop")
    expected["train/a/loop"] = ("excluded", EXCLUDED_DIR_LINK)
    return expected


def build_list(folder: Path, outside: Path) -> tuple[Path, list[str], list[str]]:
    """Write ``folder/list.csv`` and its images; return the list and the expected status of
    each row without and with ``allow_outside_root``."""
    imgs = folder / "imgs"
    _save(imgs / "inside.png", image(70))
    _save(outside / "secret.png", image(71))
    os.mkfifo(imgs / "pipe.png")
    rows = [
        ("imgs/inside.png", "ok", "ok"),
        (str(imgs / "inside.png"), "ok", "ok"),  # absolute, inside the root
        ("imgs/../imgs/inside.png", "ok", "ok"),
        ("imgs/pipe.png", "special_file", "special_file"),
        (os.path.relpath(outside / "secret.png", folder), "outside_root", "ok"),
        ("imgs/../" + os.path.relpath(outside / "secret.png", folder), "outside_root", "ok"),
        (str(outside / "secret.png"), "outside_root", "ok"),
        ("/dev/zero", "outside_root", "special_file"),
        ("/dev/urandom", "outside_root", "special_file"),
        ("imgs/missing.png", "missing", "missing"),
        ("imgs/nul\x00byte.png", "unreadable", "unreadable"),
    ]
    if Path("/etc/hostname").is_file():
        rows.append(("/etc/hostname", "outside_root", "not_an_image"))
    if Path("/proc/self/environ").exists():
        rows.append(("/proc/self/environ", "outside_root", None))  # None: any failure
    lines = ["path,split,label"] + [
        f'"{p}",{"train" if i % 2 else "test"},c{i % 3}' for i, (p, _, _) in enumerate(rows)]
    listing = folder / "list.csv"
    listing.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return listing, [r[1] for r in rows], [r[2] for r in rows]


def disk_entries(root: Path) -> set[str]:
    """Every entry under ``root`` that a release listing must account for: each file, link
    and special file (inside hidden folders too), each symbolic link to a folder (not
    entered), and each folder that cannot be listed. Relative, ``/``-separated."""
    found: set[str] = set()
    stack = [(str(root), "")]
    while stack:
        folder, prefix = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            found.add(prefix.rstrip("/"))
            continue
        for e in entries:
            name = shown(os.fsencode(e.name))  # as a manifest shows it
            if e.is_dir(follow_symlinks=False):
                stack.append((e.path, prefix + name + "/"))
            else:
                found.add(prefix + name)
    return found


def tree_state(root: Path) -> dict[str, tuple]:
    """Listing and content hash of every regular file under ``root`` (links and special
    files by their ``lstat``), to prove a scan wrote and changed nothing."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            digest = None
            if p.is_file() and not p.is_symlink():
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            state[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return state
