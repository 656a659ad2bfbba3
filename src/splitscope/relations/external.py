"""The cross-corpus boundary (METHODS §2.9): another corpus audited against the audited
release's training rows with the same identity and near-duplicate code as a within-corpus
boundary, by combining the two scans into one."""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, Population

__all__ = ["combine_scans", "external_boundary"]


def combine_scans(audited, other, *, other_corpus: str):
    """One scan over two releases (audited rows first, then ``other``'s), so a cross-corpus
    boundary can be searched with the same code as a within-corpus one. Rows of ``other`` are
    renumbered after the audited rows; thumbnails are concatenated in memory."""
    from splitscope.features.scanning import Scan

    m_a, m_b = audited.manifest, other.manifest.copy()
    m_b["corpus"] = pd.array([other_corpus] * len(m_b), dtype="string")
    manifest = pd.concat([m_a, m_b], ignore_index=True)
    manifest["row"] = pd.array(range(len(manifest)), dtype="int64")
    manifest.attrs = {"inputs": list(m_a.attrs.get("inputs", [])) + list(m_b.attrs.get("inputs", [])),
                      "excluded": list(m_a.attrs.get("excluded", [])) + list(m_b.attrs.get("excluded", []))}
    f_a, f_b = audited.features.copy(), other.features.copy()
    offset = len(audited.thumbnails)
    f_b["thumb_index"] = np.where(f_b["thumb_index"].to_numpy() >= 0,
                                  f_b["thumb_index"].to_numpy() + offset, -1)
    f_b = f_b[~f_b["file"].isin(set(f_a["file"]))]
    features = pd.concat([f_a, f_b], ignore_index=True).sort_values("file", kind="stable")
    features = features.reset_index(drop=True)
    thumbs = np.concatenate([np.asarray(audited.thumbnails), np.asarray(other.thumbnails)]) \
        if len(other.thumbnails) else np.asarray(audited.thumbnails)
    meta = dict(audited.meta)
    # where the thumbnails lie on disk, for a search partitioned over a cluster
    from splitscope.relations.partitioned import THUMBNAIL_SOURCES, thumbnail_sources

    src_a, src_b = thumbnail_sources(audited), thumbnail_sources(other)
    if len(src_a) == 1 and len(src_b) == 1:
        meta[THUMBNAIL_SOURCES] = [src_a[0], (src_b[0][0], offset, offset + src_b[0][2])]
    return Scan(manifest=manifest, features=features, thumbnails=thumbs, params=audited.params,
                workspace=audited.workspace, meta=meta)


def external_boundary(audited_manifest: pd.DataFrame, combined, name: str) -> Boundary:
    """*external corpus → audited training rows* (every audited row when the release has no
    train split) on the combined scan."""
    n_a = len(audited_manifest)
    rows_all = combined.manifest["row"].to_numpy(dtype=np.int64)
    train = audited_manifest.index[audited_manifest["split"].astype("string") == "train"].to_numpy()
    all_rows = audited_manifest["row"].to_numpy(dtype=np.int64)
    ref_rows = all_rows[train] if len(train) else all_rows
    ref_name = "train" if len(train) else "audited corpus"
    return Boundary(Population(name, np.sort(rows_all[n_a:])), Population(ref_name, np.sort(ref_rows)))
