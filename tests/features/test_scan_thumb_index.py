"""Scan.thumb_index: computed once per manifest and feature table, recomputed when either is
replaced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.features.scanning import Scan


def _scan() -> Scan:
    manifest = pd.DataFrame({"row": np.arange(4), "file": pd.array(["b", "a", "b", "c"],
                                                                   dtype="string")})
    features = pd.DataFrame({"file": pd.array(["a", "b", "c"], dtype="string"),
                             "thumb_index": np.array([1, 0, -1])})
    thumbs = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4)
    return Scan(manifest=manifest, features=features, thumbnails=thumbs, params=None,
                workspace=Path("."), meta={"thumb_size": 4})


def test_thumb_index_is_computed_once_and_follows_replaced_tables():
    s = _scan()
    assert s.thumb_index([0, 1, 2, 3]).tolist() == [0, 1, 0, -1]
    first = s._row_thumb_index()
    assert s._row_thumb_index() is first and not first.flags.writeable
    np.testing.assert_array_equal(s.thumbs([1, 0]), s.thumbnails[[1, 0]])
    s.manifest = s.manifest.iloc[[3, 1]].reset_index(drop=True)  # a new manifest
    assert s.thumb_index([0, 1]).tolist() == [-1, 1]
    s.features = s.features.assign(thumb_index=np.array([0, 1, -1]))  # new features
    assert s.thumb_index([0, 1]).tolist() == [-1, 0]
