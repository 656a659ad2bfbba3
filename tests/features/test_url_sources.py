"""Listed URLs read through fsspec (``memory://`` here; ``s3://`` works the same with s3fs)
when URLs are allowed: the same features as local files, the hardened checks and reason codes,
the root rule, the cache signature, and byte confirmation of identity groups."""

from __future__ import annotations

import io
import uuid

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from splitscope.features.scanning import scan
from splitscope.manifest import read_list
from splitscope.manifest.sources import is_url, local_path, url_inside, url_signature
from splitscope.relations.identity import confirm_bytes

fsspec = pytest.importorskip("fsspec")
from fsspec.spec import AbstractFileSystem


class DeniedFileSystem(AbstractFileSystem):
    """Every object exists and may not be read."""

    protocol = "denied"

    def info(self, path, **kwargs):
        raise PermissionError(f"access denied: {path}")


fsspec.register_implementation("denied", DeniedFileSystem, clobber=True)


def _png(seed, size=(20, 16)):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, size[::-1], np.uint8)).save(
        buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def bucket():
    name = f"memory://bucket-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    yield name, fs
    fs.rm(name.removeprefix("memory://"), recursive=True)


def _release(tmp_path, bucket, extra=()):
    """The same images as local files and as memory:// objects, with one list for each."""
    name, fs = bucket
    rows = []
    for i, (split, label) in enumerate([("train", "a"), ("train", "b"), ("test", "a"),
                                        ("test", "b")] * 3):
        rel = f"{split}/{label}/img{i}.png"
        data = _png(i)
        fs.pipe(f"{name}/{rel}", data)
        (tmp_path / "local" / split / label).mkdir(parents=True, exist_ok=True)
        (tmp_path / "local" / rel).write_bytes(data)
        rows.append({"path": rel, "split": split, "label": label})
    rows += list(extra)
    table = pd.DataFrame(rows)
    (tmp_path / "lists").mkdir(exist_ok=True)
    table.to_csv(tmp_path / "lists" / "urls.csv", index=False)
    table.to_csv(tmp_path / "local" / "list.csv", index=False)
    return tmp_path / "lists" / "urls.csv", tmp_path / "local" / "list.csv"


def test_url_rule():
    assert is_url("s3://b/k.png") and is_url("memory://x") and not is_url("C:\\x.png")
    assert not is_url("/abs/x.png") and not is_url("rel/x.png")
    assert local_path("file:///data/x%20y.png") == "/data/x y.png"
    assert local_path("s3://b/x") is None
    assert url_inside("s3://b/rel/a/x.png", "s3://b/rel")
    assert url_inside("s3://b/rel/a/../x.png", "s3://b/rel/")
    assert not url_inside("s3://b/rel/../other/x.png", "s3://b/rel")
    assert not url_inside("s3://b/release2/x.png", "s3://b/release")
    assert not url_inside("s3://b/rel/x.png", "/local/root")


def test_url_scan_equals_local_scan(tmp_path, bucket):
    urls, local = _release(tmp_path, bucket)
    by_url = scan(urls, tmp_path / "ws-url", root=bucket[0], workers=1, thumb_size=16,
                  allow_urls=True)
    by_path = scan(local, tmp_path / "ws-local", workers=1, thumb_size=16)
    assert by_url.manifest["file"].str.startswith(bucket[0] + "/").all()
    assert (by_url.manifest["path_issue"] == "url").all()
    cols = [c for c in by_path.features.columns if c != "file"]
    pd.testing.assert_frame_equal(by_url.features[cols], by_path.features[cols])
    np.testing.assert_array_equal(np.asarray(by_url.thumbnails), np.asarray(by_path.thumbnails))
    assert by_url.summary()["features_ok"] == 12
    # signatures from fs.info: the second scan reuses everything; a changed object is read again
    again = scan(urls, tmp_path / "ws-url", root=bucket[0], workers=1, thumb_size=16,
                 allow_urls=True)
    assert (again.meta["extracted"], again.meta["reused"]) == (0, 12)
    name, fs = bucket
    fs.pipe(f"{name}/train/a/img0.png", _png(99))
    changed = scan(urls, tmp_path / "ws-url", root=bucket[0], workers=1, thumb_size=16,
                   allow_urls=True)
    assert (changed.meta["extracted"], changed.meta["reused"]) == (1, 11)


def test_url_failures_have_their_reason_codes(tmp_path, bucket):
    name, fs = bucket
    fs.pipe(f"{name}/test/a/empty.png", b"")
    fs.pipe(f"{name}/test/a/big.png", _png(1, (200, 200)))
    fs.mkdir(f"{name}/test/a/folder.png")
    extra = [{"path": p, "split": "test", "label": "a"} for p in (
        "test/a/empty.png", "test/a/big.png", "test/a/folder.png", "test/a/gone.png")]
    extra += [{"path": "denied://x/y.png", "split": "test", "label": "a"},
              {"path": "nosuch://x/y.png", "split": "test", "label": "a"}]
    urls, _ = _release(tmp_path, bucket, extra)
    result = scan(urls, tmp_path / "ws", root=bucket[0], workers=1, thumb_size=16,
                  max_file_bytes=4000, allow_outside_root=True, allow_urls=True)
    status = dict(zip(result.rows()["path"], result.rows()["status"]))
    assert status["test/a/empty.png"] == "zero_byte"
    assert status["test/a/big.png"] == "too_large"
    assert status["test/a/folder.png"] == "special_file"
    assert status["test/a/gone.png"] == "missing"
    assert status["denied://x/y.png"] == "permission_denied"
    assert status["nosuch://x/y.png"] == "unsupported"
    assert status["train/a/img0.png"] == "ok"
    assert url_signature(f"{name}/test/a/gone.png") == (-1, -1)


def test_urls_outside_a_url_root_are_not_read(tmp_path, bucket):
    name, fs = bucket
    fs.pipe(f"{name}-other/x.png", _png(3))
    extra = [{"path": f"{name}-other/x.png", "split": "test", "label": "a"},
             {"path": "../escape.png", "split": "test", "label": "a"}]
    urls, _ = _release(tmp_path, bucket, extra)
    # a list whose root is a local folder: a URL in it is a URL, ../ is outside
    local_root = read_list(urls)
    issue = dict(zip(local_root["path"], local_root["path_issue"]))
    assert issue[f"{name}-other/x.png"] == "url"
    assert issue["../escape.png"] == "outside_root"
    manifest = read_list(urls, root=bucket[0])
    issue = dict(zip(manifest["path"], manifest["path_issue"]))
    assert issue["train/a/img0.png"] == "url"
    assert issue[f"{name}-other/x.png"] == "outside_root"
    assert issue["../escape.png"] == "outside_root"
    result = scan(urls, tmp_path / "ws", root=bucket[0], workers=1, thumb_size=16,
                  allow_urls=True)
    status = dict(zip(result.rows()["path"], result.rows()["status"]))
    assert status[f"{name}-other/x.png"] == "outside_root"
    fs.rm(f"{name}-other".removeprefix("memory://"), recursive=True)


def test_file_urls_are_local_paths(tmp_path, bucket):
    _, local = _release(tmp_path, bucket)
    table = pd.read_csv(local)
    table["path"] = [f"file://{tmp_path / 'local' / p}" for p in table["path"]]
    table.loc[0, "path"] = f"file://{tmp_path / 'lists' / 'urls.csv'}"  # outside the root
    table.to_csv(tmp_path / "local" / "file-urls.csv", index=False)
    manifest = read_list(tmp_path / "local" / "file-urls.csv")
    assert manifest["file"].iloc[1] == str(tmp_path / "local" / pd.read_csv(local)["path"][1])
    assert manifest["path_issue"].iloc[0] == "outside_root"
    assert manifest["path_issue"].iloc[1:].isna().all()


def test_identity_confirmation_reads_urls(bucket):
    name, fs = bucket
    fs.pipe(f"{name}/a.png", b"same bytes")
    fs.pipe(f"{name}/b.png", b"same bytes")
    fs.pipe(f"{name}/c.png", b"other byte")
    out = confirm_bytes([f"{name}/a.png", f"{name}/b.png", f"{name}/c.png",
                         f"{name}/gone.png"])
    assert out["mismatched"] == [f"{name}/c.png"]
    assert out["unreadable"] == [f"{name}/gone.png"]
