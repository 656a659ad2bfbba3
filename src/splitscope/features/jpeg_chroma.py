"""When a colour JPEG's luma alone is its grayscale image, proved from its header.

Exact mode converts a colour image to 8-bit grayscale with Pillow's ``convert("L")``
(ITU-R 601-2 luma, ``L = (19595 R + 38470 G + 7471 B + 2**15) >> 16``). For a YCbCr JPEG whose
two chroma components hold only zero DCT coefficients, that equals the decoded luma plane:

1. an all-zero block's inverse DCT is 128 at every sample (libjpeg's level shift), and every
   chroma upsampler (replication, libjpeg-turbo's "fancy" triangle filters) maps a constant
   plane of 128 to 128;
2. libjpeg's YCbCr → RGB conversion at Cb = Cr = 128 adds 0 to Y in every channel, so
   R = G = B = Y;
3. the three luma weights sum to 2**16, so ``convert("L")`` of (Y, Y, Y) is Y.

The decoded RGB image is then (Y, Y, Y) pixel for pixel, so a luma-only decode (Pillow
``draft("L", None)``: libjpeg skips the chroma inverse DCT, upsampling and colour conversion)
gives the same grayscale image, hashes, thumbnail and decoded-pixel digest.

:func:`chroma_provably_zero` proves the zero coefficients without decoding them: in a
sequential Huffman-coded JPEG a block is a DC difference category symbol (category 0: a zero
difference, no further bits) and AC run/size symbols up to an end-of-block (symbol 0x00).
When the Huffman tables that the scan assigns to both chroma components can code nothing but
those two symbols, every chroma coefficient decodes to zero whatever the entropy-coded bytes
are (libjpeg decodes an invalid code as symbol 0, too). Encoders that build optimal Huffman
tables (``optimize``) write exactly such tables for grey content stored as colour; encoders
using the standard tables do not, and their files keep the full RGB decode.

Everything else keeps the RGB decode: progressive and arithmetic-coded JPEGs (their DC
refinement bits are not Huffman-coded), several scans, a precision other than 8 bits, an Adobe
segment (its transform may declare RGB or YCCK), a JPGn extension marker, component ids that
do not say YCbCr without a JFIF segment, and any marker between the scan and the end of the
image other than a restart.
"""

from __future__ import annotations

import re

__all__ = ["chroma_provably_zero"]

_SEQUENTIAL_HUFFMAN = (0xC0, 0xC1)  # baseline, extended sequential
# other frame types (progressive, lossless, hierarchical, arithmetic), arithmetic-coding
# conditioning, and the JPGn extensions (libjpeg 9 reads a colour transform from JPG8): their
# coefficients or colour space cannot be settled from Huffman tables
_NOT_PROVABLE = frozenset((0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCC, 0xCD, 0xCE,
                           0xCF, 0xC8, *range(0xF0, 0xFE)))
_STANDALONE = frozenset((0x01, *range(0xD0, 0xD8)))  # TEM, RSTn: no length field
# a marker in entropy-coded data: 0xFF not followed by a stuffed 0x00, a restart or a fill byte
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def chroma_provably_zero(data: bytes) -> bool:
    """True when the bytes are a JPEG whose chroma coefficients can only decode to zero.

    The conditions (all checked on the markers, without entropy decoding): one sequential
    Huffman-coded frame (SOF0 or SOF1) of 8-bit precision with three components in YCbCr (a
    JFIF segment, or component ids 1, 2, 3; no Adobe segment); one scan holding all three
    components with the full spectral range and no successive approximation; for the second
    and third components, a DC Huffman table whose only symbol is 0 and an AC Huffman table
    whose only symbol is 0x00 (end of block), as in force at that scan; after the scan only
    restart markers before the end-of-image marker.

    See the module notes for why the luma plane then equals Pillow's ``convert("L")`` of the
    RGB decode. ``False`` means "not proved", never "chroma is not flat".
    """
    n = len(data)
    if n < 4 or data[:2] != b"\xff\xd8":
        return False
    pos = 2
    jfif = False
    ids: list[int] = []
    tables: dict[tuple[int, int], bytes] = {}
    while True:
        while pos < n and data[pos] == 0xFF and pos + 1 < n and data[pos + 1] == 0xFF:
            pos += 1  # fill bytes
        if pos + 4 > n or data[pos] != 0xFF:
            return False
        marker = data[pos + 1]
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker == 0xD9:  # end of image before any scan
            return False
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if length < 2 or pos + 2 + length > n:
            return False
        seg = data[pos + 4:pos + 2 + length]
        pos += 2 + length
        if marker == 0xE0 and seg[:5] == b"JFIF\x00":
            jfif = True
        elif (marker == 0xEE and seg[:5] == b"Adobe") or marker in _NOT_PROVABLE:
            return False
        elif marker in _SEQUENTIAL_HUFFMAN:
            if ids or len(seg) != 15 or seg[0] != 8 or seg[5] != 3:
                return False
            ids = [seg[6], seg[9], seg[12]]
        elif marker == 0xC4:
            if not _read_dht(seg, tables):
                return False
        elif marker == 0xDA:
            return (len(ids) == 3 and len(set(ids)) == 3
                    and (jfif or ids == [1, 2, 3])
                    and _scan_codes_zero_chroma(seg, ids, tables)
                    and _only_restarts_until_eoi(data, pos))


def _read_dht(seg: bytes, tables: dict[tuple[int, int], bytes]) -> bool:
    """Record each table of a DHT segment as its symbol values; False if malformed."""
    p = 0
    while p < len(seg):
        if p + 17 > len(seg):
            return False
        tc, th = seg[p] >> 4, seg[p] & 15
        count = sum(seg[p + 1:p + 17])
        if tc > 1 or th > 3 or p + 17 + count > len(seg):
            return False
        tables[(tc, th)] = bytes(seg[p + 17:p + 17 + count])
        p += 17 + count
    return True


def _scan_codes_zero_chroma(seg: bytes, ids: list[int],
                            tables: dict[tuple[int, int], bytes]) -> bool:
    if len(seg) < 1 or seg[0] != 3 or len(seg) != 1 + 2 * 3 + 3:
        return False
    selectors = {seg[1 + 2 * i]: (seg[2 + 2 * i] >> 4, seg[2 + 2 * i] & 15) for i in range(3)}
    ss, se, ahal = seg[7], seg[8], seg[9]
    if sorted(selectors) != sorted(ids) or ss != 0 or se != 63 or ahal != 0:
        return False
    for cid in ids[1:]:
        dc, ac = selectors[cid]
        if tables.get((0, dc)) != b"\x00" or tables.get((1, ac)) != b"\x00":
            return False
    return True


def _only_restarts_until_eoi(data: bytes, start: int) -> bool:
    match = _NEXT_MARKER.search(data, start)
    return match is not None and data[match.start() + 1] == 0xD9
