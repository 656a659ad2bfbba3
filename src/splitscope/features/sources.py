"""Where a row's image comes from when it is not a file of its own: a cell of a table or a
slice of an array.

A manifest's ``file`` is the key the feature stage reads. For a file it is the file's absolute
path. For an embedded image it is ``<container>::<member>/<index>``:

- a Parquet or Arrow table (``.parquet``, ``.pq``, ``.arrow``) whose column ``member`` holds
  Hugging Face ``Image`` structs ``{bytes, path}``; ``index`` is the row of that file;
- an ``.npz`` archive whose array ``member`` holds images ``(N, H, W)`` or ``(N, H, W, 3)``,
  uint8; ``index`` is the first axis.

The suffixes are those of :mod:`splitscope.manifest.containers`.

``index`` is written in decimal, zero-padded to the digits of the container's last index, so
the keys of one container sort in row order and a batch of consecutive keys reads one stretch
of it (the manifest writes the keys: :func:`splitscope.manifest.rows.embedded_key`). A path
that exists as a file is always a file (:func:`parse_key`).

:func:`fetch` reads the embedded keys of one extraction batch with one open per container:
Parquet by row groups (only the groups that hold the batch's rows, only the image column),
Arrow through a memory map, ``.npz`` members memory-mapped when stored uncompressed (what
``numpy.savez`` writes) and decompressed once per process otherwise. Table cells come back as
bytes, which the extraction hashes, probes and decodes exactly like a file's bytes; array slices
come back as arrays (no bytes: byte identity does not apply to them).

This module imports neither pandas nor, until a table is read, pyarrow, so worker processes
stay light.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Iterable
from typing import Any

import numpy as np

from splitscope.manifest.containers import ARRAY_SUFFIXES, CONTAINER_SUFFIXES, TABLE_SUFFIXES

__all__ = ["TABLE_SUFFIXES", "Embedded", "ReadFailure", "container_of", "fetch", "open_image",
           "parse_key", "read_content"]

_CONTAINER = "|".join(re.escape(s) for s in CONTAINER_SUFFIXES)
_KEY = re.compile(rf"^(?P<container>.*?(?:{_CONTAINER}))::(?P<member>.+)/(?P<index>\d+)$",
                  re.IGNORECASE)


class ReadFailure(Exception):
    """An embedded image that cannot be read: ``status`` is a reason code of the extraction
    (``missing``, ``too_large``, ``unreadable``, ...), ``error`` the detail."""

    def __init__(self, status: str, error: str):
        super().__init__(error)
        self.status = status
        self.error = error


class Embedded:
    """One embedded image as read: ``content`` (bytes of a table cell, or a pixel array),
    ``name`` (the stored path, for the header's extension check) or the failure."""

    __slots__ = ("content", "failure", "name")

    def __init__(self, content: bytes | np.ndarray | None = None, name: str | None = None,
                 failure: ReadFailure | None = None):
        self.content = content
        self.name = name
        self.failure = failure


def parse_key(key: str) -> tuple[str, str, int] | None:
    """``(container, member, index)`` of an embedded key, ``None`` for a file path (a path
    that exists on disk is a file even when it looks like a key)."""
    if "::" not in key:
        return None
    m = _KEY.match(key)
    if m is None or os.path.lexists(key):
        return None
    return m["container"], m["member"], int(m["index"])


def container_of(key: str) -> str:
    """The file whose size and modification time stand for ``key`` in the cache: the
    container of an embedded key, the key itself for a file."""
    parsed = parse_key(key)
    return key if parsed is None else parsed[0]


# ----------------------------------------------------------------------------- tables


def _failure_for(exc: BaseException, container: str) -> ReadFailure:
    if isinstance(exc, ReadFailure):
        return exc
    if isinstance(exc, FileNotFoundError):
        return ReadFailure("missing", f"no such file: {container}")
    if isinstance(exc, PermissionError):
        return ReadFailure("permission_denied", f"permission denied: {container}")
    return ReadFailure("unreadable", f"cannot read {os.path.basename(container)}: "
                                     f"{type(exc).__name__}: {exc}"[:300])


def _is_arrow_stream(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(6) != b"ARROW1"


def _open_arrow(path: str):
    """An Arrow IPC file or stream (``datasets.save_to_disk`` writes streams) as one table,
    memory-mapped (nothing is copied until a cell is taken)."""
    import pyarrow as pa

    source = pa.memory_map(path, "r")
    reader = pa.ipc.open_stream(source) if _is_arrow_stream(path) else pa.ipc.open_file(source)
    return reader.read_all()


def _table_cells(container: str, member: str, rows: list[int]):
    """The image structs of ``rows`` (ascending) of one table, as a pyarrow StructArray in the
    order of ``rows``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if container.lower().endswith(".arrow"):
        table = _open_arrow(container)
        if member not in table.column_names:
            raise ReadFailure("unreadable", f"no column {member!r} in {container}")
        n = table.num_rows
        if rows and rows[-1] >= n:
            raise ReadFailure("missing", f"row {rows[-1]} not in {container} ({n} rows)")
        return table.column(member).take(pa.array(rows, pa.int64())).combine_chunks()
    pf = pq.ParquetFile(container)
    if member not in pf.schema_arrow.names:
        raise ReadFailure("unreadable", f"no column {member!r} in {container}")
    meta = pf.metadata
    starts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    if rows and rows[-1] >= starts[-1]:
        raise ReadFailure("missing", f"row {rows[-1]} not in {container} ({starts[-1]} rows)")
    wanted = np.asarray(rows, dtype=np.int64)
    group_of = np.searchsorted(starts, wanted, side="right") - 1
    groups = sorted(set(group_of.tolist()))
    part = pf.read_row_groups(groups, columns=[member])  # only the groups the batch needs
    sizes = np.diff(starts)[groups]
    first_in_part = dict(zip(groups, np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()))
    local = [first_in_part[int(g)] + int(r - starts[g]) for r, g in zip(wanted, group_of)]
    return part.column(member).take(pa.array(local, pa.int64())).combine_chunks()


def _stored_names(column) -> list:
    """The paths stored beside embedded images as text (for the extension check): bytes that
    are not UTF-8, in a string or a binary field, as ``\\xNN`` escapes (as the manifest lists
    them), so that no stored name fails the rows it names."""
    import pyarrow as pa

    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        try:
            column.validate(full=True)
            return column.to_pylist()
        except pa.ArrowInvalid:
            column = column.cast(pa.large_binary())
    return [v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v
            for v in column.to_pylist()]


def _fetch_table(container: str, member: str, items: list[tuple[str, int]], limit: int,
                 out: dict[str, Embedded]) -> None:
    import pyarrow.compute as pc

    try:
        cells = _table_cells(container, member, [i for _, i in items])
    except Exception as exc:  # noqa: BLE001 - a damaged table fails its rows, not the run
        failure = _failure_for(exc, container)
        for key, _ in items:
            out[key] = Embedded(failure=failure)
        return
    import pyarrow as pa

    kind = cells.type
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):  # a plain binary column
        data, stored = cells, [None] * len(items)
    else:
        names = [kind.field(i).name for i in range(kind.num_fields)] \
            if pa.types.is_struct(kind) else []
        if "bytes" not in names:
            failure = ReadFailure("unsupported", f"column {member!r} of {container} is not an "
                                                 f"image struct {{bytes, path}} (type {kind})")
            for key, _ in items:
                out[key] = Embedded(failure=failure)
            return
        data = cells.field("bytes")
        stored = _stored_names(cells.field("path")) if "path" in names else [None] * len(items)
    lengths = pc.binary_length(data).to_pylist()
    valid = cells.is_valid().to_pylist()
    for pos, (key, index) in enumerate(items):
        name = stored[pos] if valid[pos] else None
        size = lengths[pos] if valid[pos] else None
        if size is None:
            where = f" (stored path {name!r} is not read)" if name else ""
            out[key] = Embedded(name=name, failure=ReadFailure(
                "missing", f"row {index} of {os.path.basename(container)} stores no image "
                           f"bytes{where}"))
        elif size > limit:
            out[key] = Embedded(name=name, failure=ReadFailure(
                "too_large", f"{size:,} bytes exceeds max_file_bytes = {limit:,}; not read"))
        else:
            out[key] = Embedded(content=data[pos].as_py(), name=name)


# ----------------------------------------------------------------------------- arrays


_INFLATED: dict[tuple, np.ndarray] = {}  # one decompressed .npz member per process


def _npz_member(container: str, member: str) -> np.ndarray:
    """Array ``member`` of an ``.npz``: memory-mapped when stored uncompressed, else
    decompressed once and kept for the next batches of this process (the last one only)."""
    name = member + ".npy"
    st = os.stat(container)
    with zipfile.ZipFile(container) as archive:
        try:
            info = archive.getinfo(name)
        except KeyError:
            raise ReadFailure("unreadable", f"no array {member!r} in {container}") from None
        if info.compress_type == zipfile.ZIP_STORED:
            with open(container, "rb") as fh:
                fh.seek(info.header_offset)
                local = fh.read(30)
                start = info.header_offset + 30 + int.from_bytes(local[26:28], "little") + \
                    int.from_bytes(local[28:30], "little")
                fh.seek(start)
                version = np.lib.format.read_magic(fh)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read_header(fh)
                offset = fh.tell()
            if dtype.hasobject:
                raise ReadFailure("unsupported", f"array {member!r} holds Python objects")
            return np.memmap(container, dtype=dtype, mode="r", offset=offset, shape=shape,
                             order="F" if fortran else "C")
    ident = (container, member, st.st_size, st.st_mtime_ns)
    if ident not in _INFLATED:
        _INFLATED.clear()
        with np.load(container, allow_pickle=False) as npz:
            _INFLATED[ident] = npz[member]
    return _INFLATED[ident]


def _fetch_array(container: str, member: str, items: list[tuple[str, int]],
                 out: dict[str, Embedded]) -> None:
    try:
        images = _npz_member(container, member)
        if images.ndim not in (3, 4) or images.dtype != np.uint8:
            raise ReadFailure("unsupported", f"array {member!r} has dtype {images.dtype} and "
                                             f"shape {images.shape}; need uint8 (N, H, W) or "
                                             f"(N, H, W, 3)")
        for key, index in items:
            if index >= len(images):
                out[key] = Embedded(failure=ReadFailure(
                    "missing", f"index {index} not in {member} ({len(images)} images)"))
            else:
                out[key] = Embedded(content=np.ascontiguousarray(images[index]))
    except Exception as exc:  # noqa: BLE001 - a damaged archive fails its rows, not the run
        failure = _failure_for(exc, container)
        for key, _ in items:
            out.setdefault(key, Embedded(failure=failure))


# ----------------------------------------------------------------------------- batches


def fetch(keys: Iterable[str], limit: int) -> dict[str, Embedded]:
    """Every embedded key of ``keys`` read, one open per container (file paths are left out:
    the extraction reads them itself). ``limit`` is the read cap of a table cell."""
    groups: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for key in keys:
        parsed = parse_key(key)
        if parsed is not None:
            groups.setdefault(parsed[:2], []).append((key, parsed[2]))
    out: dict[str, Embedded] = {}
    for (container, member), items in groups.items():
        items.sort(key=lambda t: t[1])
        if container.lower().endswith(ARRAY_SUFFIXES):
            _fetch_array(container, member, items, out)
        else:
            _fetch_table(container, member, items, limit, out)
    return out


def read_content(key: str, limit: int = 2 << 30) -> bytes | np.ndarray:
    """The bytes (a file, a listed URL, a table cell) or the pixel array behind one key; raises
    :class:`ReadFailure` or ``OSError``."""
    if parse_key(key) is None:
        from splitscope.manifest.sources import read_all

        return read_all(key, limit)  # a local file, or a URL through fsspec
    got = fetch([key], limit)[key]
    if got.failure is not None:
        raise got.failure
    return got.content


def open_image(key: str) -> Any:
    """A PIL image of the file, listed URL or embedded image behind ``key`` (a context
    manager, as ``Image.open``)."""
    import io

    from PIL import Image

    if parse_key(key) is None:
        from splitscope.manifest.sources import open_for_image

        return Image.open(open_for_image(key))
    content = read_content(key)
    if isinstance(content, np.ndarray):
        return Image.fromarray(content)
    return Image.open(io.BytesIO(content))
