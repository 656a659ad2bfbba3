"""Where a listed file lives: a local path, or a URL read through fsspec.

The rule (see ``docs/distributed.md``):

- A listed path with a scheme (``scheme://…``) is a URL. ``file://`` and ``local://`` URLs
  name local files: they become local absolute paths and are read and checked as local files.
- Any other URL (``s3://``, ``gs://``, ``memory://``, …) stays the row's ``file`` as given
  (``.`` and ``..`` segments resolved) and is read through ``fsspec.open``; ``s3://`` needs
  ``s3fs`` installed, and so on for each filesystem.
- A URL row has ``path_issue`` ``url`` and is read only when URLs are allowed
  (``allow_urls``, ``--allow-urls``): a list file never makes splitscope reach the network
  on its own. With a URL root (``--root s3://bucket/release``; relative paths in the list
  are then joined to it) a URL that escapes the root is ``outside_root`` instead, and is
  read only when both URLs and paths outside the root are allowed.
- Its cache signature is its size and its ETag (hashed), or else its modification time, from
  ``fs.info``; a URL whose filesystem gives neither is read again on every scan.

fsspec is imported only when a URL is met.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import re
import time
from datetime import datetime
from urllib.parse import unquote, urlsplit

import numpy as np

__all__ = ["LOCAL_SCHEMES", "URL_PATTERN", "is_url", "join_url", "local_path", "normalize_url",
           "open_for_image", "read_all", "url_inside", "url_signature"]

URL_PATTERN = r"^[A-Za-z][A-Za-z0-9+.\-]*://"
"""A URL: ``scheme://`` first (a Windows drive letter ``C:\\`` is not a scheme)."""
_SCHEME = re.compile(URL_PATTERN)
LOCAL_SCHEMES = ("file", "local")
FSSPEC_HINT = "reading URLs needs fsspec (pip install fsspec; s3:// also needs s3fs, gs:// gcsfs)"


def is_url(path: object) -> bool:
    """True for ``scheme://…`` (a Windows drive letter ``C:\\`` is not a scheme)."""
    return isinstance(path, str) and bool(_SCHEME.match(path))


def scheme(url: str) -> str:
    return url.split("://", 1)[0].lower()


def local_path(url: str) -> str | None:
    """The local path of a ``file://`` or ``local://`` URL (``None`` for other URLs)."""
    if scheme(url) not in LOCAL_SCHEMES:
        return None
    parts = urlsplit(url)
    if parts.netloc in ("", "localhost"):
        return unquote(parts.path)
    return unquote(f"//{parts.netloc}{parts.path}")  # a host named: a network path


def normalize_url(url: str) -> str:
    """``scheme://`` and the rest with ``.``/``..`` segments and doubled slashes resolved."""
    head, rest = url.split("://", 1)
    norm = posixpath.normpath("/" + rest).lstrip("/")
    return f"{head.lower()}://{norm}"


def join_url(root: str, relative: str) -> str:
    return normalize_url(root.rstrip("/") + "/" + relative)


def url_inside(url: str, root: str | None) -> bool:
    """``url`` lies under the URL ``root`` (after normalising both)."""
    if root is None or not is_url(root):
        return False
    u, r = normalize_url(url), normalize_url(root).rstrip("/")
    return u == r or u.startswith(r + "/")


def _fsspec():
    import fsspec

    return fsspec


def _to_ns(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return int(value.timestamp() * 1e9)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return int(float(value) * 1e9)
    try:
        return int(datetime.fromisoformat(str(value)).timestamp() * 1e9)
    except ValueError:
        return None


def url_signature(url: str) -> tuple[int, int]:
    """``(size, change marker)`` from ``fs.info``: the ETag hashed to 63 bits, else the
    modification time in ns, else the time of this call (so it is never reused); ``(-1, -1)``
    when the URL cannot be looked up (missing, no permission, no fsspec, unknown scheme)."""
    try:
        of = _fsspec().open(url, "rb")
        info = of.fs.info(of.path)
    except Exception:  # noqa: BLE001 - the read lists why; here it only means "look again"
        return -1, -1
    size = info.get("size")
    if size is None or info.get("type") not in (None, "file"):
        return -1, -1
    for key in ("ETag", "etag", "md5Hash", "checksum"):
        if info.get(key):
            digest = hashlib.sha256(f"etag:{info[key]}".encode()).digest()
            return int(size), int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        ns = _to_ns(info.get(key))
        if ns is not None:
            return int(size), ns
    return int(size), time.time_ns()


def open_for_image(file: str, limit: int = 2 << 30):
    """What ``PIL.Image.open`` takes for a row's file: the path itself when local, the
    (capped) bytes of a URL otherwise."""
    if not is_url(file):
        return file
    with _fsspec().open(file, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{file}: more than {limit:,} bytes")
    return io.BytesIO(data)


def read_all(file: str, limit: int = 2 << 30) -> bytes:
    """The bytes of a local file or a URL, up to ``limit`` (OSError beyond it)."""
    source = open_for_image(file, limit)
    if isinstance(source, io.BytesIO):
        return source.getvalue()
    with open(source, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{file}: more than {limit:,} bytes")
    return data
