"""The indexed NCC search's reference index kept in the workspace, so that a new batch of
queries (another test folder, a new list, a submission's images) is searched against a
corpus without projecting and clustering the corpus again.

What is kept (``features/<feature key>/ncc-index.npz``, beside the features it was computed
from, so a change of thumbnail geometry or extraction version never reuses it): the form of
the bound (cell side and principal basis), and for every reference thumbnail seen so far its
content key (the SHA-256 of the file it came from: the thumbnail is a function of those bytes
and the feature key), its bound coordinates and residual (``(k + 1)`` float32) and its
cluster; and the clusters' unit centres.

A search whose references are all in the saved index takes their coordinates and clusters
from it; references not in it are projected with the saved bound, assigned to their nearest
saved centre, and appended (the index grows incrementally; nothing is re-clustered). A
cluster's radius and norms are measured afresh on the members of the search at hand, so they
bound exactly those. Whatever the index holds, the search stays exact (its clusters and bound
only decide its speed), so a reused index gives the result of a cold run, bit for bit. An
unreadable or mismatched file is rebuilt and said so; writes are atomic.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.relations.pruned import CellBound, Plan

__all__ = ["FILE", "IndexStore", "References", "SavedIndex", "scan_references"]

#: The index's file in a feature store's folder.
FILE = "ncc-index.npz"
#: Bumped when the file's layout changes (an older file is then rebuilt).
FORMAT = 1
#: Content keys are SHA-256 hex digests, stored as ASCII.
KEY_DTYPE = "S64"
#: References whose saved coordinates are computed afresh and compared before an index is
#: used, and the largest difference allowed (far below the bound's margin, far above the
#: rounding of one product computed in another shape).
CHECKED = 16
CHECK_TOLERANCE = 1e-5


@dataclass(frozen=True)
class SavedIndex:
    """The saved bound, and per reference key its coordinates and cluster."""

    bound: CellBound
    size: int
    keys: np.ndarray  # (n,) S64, unique
    coords: np.ndarray  # (n, k + 1) float32
    label: np.ndarray  # (n,) int64 into centres
    centres: np.ndarray  # (m, k + 1) float64, unit rows

    def arrays(self) -> dict[str, np.ndarray]:
        basis = self.bound.basis if self.bound.basis is not None else np.zeros((0, 0))
        return {"format": np.int64(FORMAT), "side": np.int64(self.bound.side),
                "size": np.int64(self.size), "basis": np.asarray(basis, np.float64),
                "keys": self.keys, "coords": self.coords, "label": self.label,
                "centres": self.centres}


class IndexStore:
    """The saved index of one feature store: :meth:`load` and :meth:`save` (atomic)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def load(self) -> tuple[SavedIndex | None, str]:
        """The saved index, or None with why (``"none saved"``, or what is wrong with the
        file)."""
        if not self.path.is_file():
            return None, "none saved"
        try:
            with np.load(self.path, allow_pickle=False) as z:
                a = {name: z[name] for name in z.files}
            if int(a["format"]) != FORMAT:
                return None, f"format {int(a['format'])}, not {FORMAT}"
            basis = a["basis"] if a["basis"].size else None
            saved = SavedIndex(CellBound(int(a["side"]), basis), int(a["size"]),
                               a["keys"].astype(KEY_DTYPE), a["coords"].astype(np.float32),
                               a["label"].astype(np.int64), a["centres"].astype(np.float64))
        except (OSError, EOFError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as exc:
            return None, f"unreadable ({type(exc).__name__}: {exc})"
        n, k1 = saved.coords.shape if saved.coords.ndim == 2 else (-1, -1)
        if (saved.keys.shape != (n,) or saved.label.shape != (n,) or saved.centres.ndim != 2
                or saved.centres.shape[1] != k1
                or k1 != saved.bound.dims(saved.size) + 1 or n < 1
                or saved.label.min() < 0 or saved.label.max() >= len(saved.centres)):
            return None, "inconsistent arrays"
        return saved, "loaded"

    def save(self, saved: SavedIndex) -> None:
        from splitscope.features.workspace import atomic_path

        with atomic_path(self.path) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, **saved.arrays())


@dataclass(frozen=True)
class References:
    """What a search needs to use a saved index: its store, and the content key of each
    reference position (``b""`` where a reference has none)."""

    store: IndexStore
    keys: np.ndarray


def scan_references(scan, reference_rows: np.ndarray) -> References:
    """:class:`References` of manifest rows ``reference_rows`` of ``scan``: its feature
    store's saved index, keyed by the SHA-256 of each row's file."""
    features = scan.features
    by_thumb = np.full(len(scan.thumbnails), b"", dtype=KEY_DTYPE)
    has = features["thumb_index"].to_numpy(np.int64) >= 0
    digests = features["sha256"].astype("string").fillna("").to_numpy(str)[has]
    by_thumb[features["thumb_index"].to_numpy(np.int64)[has]] = np.char.encode(digests, "ascii")
    thumb = scan.thumb_index(reference_rows)
    keys = np.where(thumb >= 0, by_thumb[np.maximum(thumb, 0)], b"").astype(KEY_DTYPE)
    path = Path(scan.workspace) / "features" / scan.params.key() / FILE
    return References(IndexStore(path), keys)


def from_saved(saved: SavedIndex, keys: np.ndarray, reference_thumbs, r_keep: np.ndarray,
               block: int, seed: int, assign) -> tuple[Plan, np.ndarray, SavedIndex | None, int]:
    """The :class:`~splitscope.relations.pruned.Plan` of a search over references ``r_keep``
    (with content ``keys``) from ``saved``, each reference's cluster (into ``saved.centres``),
    the saved index extended by the references it lacked (None when it lacked none) and how
    many references were added. ``assign(coords, centres)`` gives each new reference's
    cluster."""
    keys = np.asarray(keys, KEY_DTYPE)
    at = pd.Index(saved.keys).get_indexer(keys)
    missing = np.flatnonzero(at < 0)
    extended, added = None, 0
    if missing.size:
        new_keys, first = np.unique(keys[missing], return_index=True)
        pos = r_keep[missing[first]]
        order = np.argsort(pos, kind="stable")  # ascending positions for the reader
        new_coords = np.empty((pos.size, saved.coords.shape[1]), np.float32)
        k = saved.coords.shape[1] - 1
        for b0 in range(0, pos.size, block):
            sel = order[b0:b0 + block]
            new_coords[sel, :k], new_coords[sel, k] = saved.bound.coordinates(
                np.asarray(reference_thumbs(pos[sel])))
        extended = SavedIndex(saved.bound, saved.size,
                              np.concatenate([saved.keys, new_keys]),
                              np.concatenate([saved.coords, new_coords]),
                              np.concatenate([saved.label, assign(new_coords, saved.centres)]),
                              saved.centres)
        at = pd.Index(extended.keys).get_indexer(keys)
        saved, added = extended, int(new_keys.size)
    plan = Plan(saved.bound, float("nan"), [], saved.size, r_keep, saved.coords[at],
                {"saved_index": True}, seed, 0.0)
    return plan, saved.label[at], extended, added


def disagrees(saved: SavedIndex, keys: np.ndarray, reference_thumbs, r_keep: np.ndarray,
              seed: int) -> str | None:
    """Why ``saved`` cannot serve this search, or None: the coordinates of up to
    :data:`CHECKED` seeded references it holds, computed afresh by this version's bound, must
    equal the saved ones (to :data:`CHECK_TOLERANCE`), so an index written by code that
    projected otherwise is never trusted."""
    at = pd.Index(saved.keys).get_indexer(np.asarray(keys, KEY_DTYPE))
    held = np.flatnonzero(at >= 0)
    if held.size == 0:
        return None
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(held, size=min(CHECKED, held.size), replace=False))
    k = saved.coords.shape[1] - 1
    fresh = np.empty((pick.size, k + 1), np.float32)
    fresh[:, :k], fresh[:, k] = saved.bound.coordinates(np.asarray(reference_thumbs(r_keep[pick])))
    off = np.abs(fresh - saved.coords[at[pick]]).max(axis=1) > CHECK_TOLERANCE
    if off.any():
        return (f"its coordinates of {int(off.sum())} of {pick.size} references checked differ "
                f"from this version's")
    return None


def saved_of(plan: Plan, label: np.ndarray, centres: np.ndarray, keys: np.ndarray
             ) -> SavedIndex:
    """What to save after a cold search: ``plan``'s bound and coordinates with each
    reference's cluster (``label`` into ``centres``), one entry per distinct key."""
    keys = np.asarray(keys, KEY_DTYPE)
    uniq, first = np.unique(keys, return_index=True)
    return SavedIndex(plan.bound, plan.size, uniq, plan.ref_p[first], label[first],
                      np.asarray(centres, np.float64))
