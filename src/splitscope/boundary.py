"""Boundaries: ordered pairs of populations, query → reference (METHODS §0).

A population is chosen from the manifest by a selector: ``test`` (a split name), or
``column=value`` terms joined by ``&`` (``split=val&source=KVASIR``), or ``column!=value``
(``source!=KVASIR``), or ``*`` for every row. Every finding names its boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.manifest.rows import normalize_split


@dataclass(frozen=True)
class Population:
    """Rows of the manifest chosen by a selector."""

    name: str
    rows: np.ndarray  # manifest ``row`` values, ascending

    @property
    def size(self) -> int:
        return int(self.rows.size)


@dataclass(frozen=True)
class Boundary:
    """Ordered pair query → reference. ``within`` marks a boundary of a population with itself
    (copies inside one split), where a row is never its own counterpart."""

    query: Population
    reference: Population

    @property
    def name(self) -> str:
        return f"{self.query.name} → {self.reference.name}"

    @property
    def within(self) -> bool:
        return self.query.name == self.reference.name

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "query": {"name": self.query.name, "rows": self.query.size},
            "reference": {"name": self.reference.name, "rows": self.reference.size},
        }


def select(manifest: pd.DataFrame, selector: str) -> Population:
    """Rows of ``manifest`` matching ``selector`` (see module docstring)."""
    selector = selector.strip()
    if not selector:
        raise InputError("empty population selector")
    mask = np.ones(len(manifest), dtype=bool)
    if selector != "*":
        for term in selector.split("&"):
            term = term.strip()
            negate = "!=" in term
            if "=" in term:
                column, value = term.split("!=" if negate else "=", 1)
                column, value = column.strip(), value.strip()
            else:
                column, value = "split", term
            if column not in manifest.columns:
                raise InputError(
                    f"selector {selector!r}: no column {column!r}; found: "
                    f"{', '.join(manifest.columns)}"
                )
            if column == "split":
                value = normalize_split(value)
            values = manifest[column].astype("string")
            hit = (values == value).fillna(False).to_numpy(dtype=bool)
            mask &= ~hit if negate else hit
    rows = manifest["row"].to_numpy(dtype=np.int64)[mask]
    return Population(name=selector, rows=np.sort(rows))


def boundary(manifest: pd.DataFrame, query: str, reference: str) -> Boundary:
    """The boundary ``query → reference``; an error when either side is empty."""
    q, r = select(manifest, query), select(manifest, reference)
    for side, pop in (("query", q), ("reference", r)):
        if pop.size == 0:
            present = sorted(manifest["split"].dropna().unique().tolist())
            raise InputError(
                f"{side} population {pop.name!r} has no rows (splits present: {present})"
            )
    return Boundary(q, r)


def default_boundaries(manifest: pd.DataFrame) -> list[Boundary]:
    """The released split's boundaries: test → train, val → train (where both sides exist)."""
    splits = set(manifest["split"].dropna().unique().tolist())
    out = []
    for query in ("test", "val"):
        if query in splits and "train" in splits:
            out.append(boundary(manifest, query, "train"))
    return out


def boundaries_or_default(manifest: pd.DataFrame, boundaries=None) -> list[Boundary]:
    """``boundaries`` as a list when given, else the release's :func:`default_boundaries`."""
    return list(boundaries) if boundaries is not None else default_boundaries(manifest)


#: Name of the population "every row of the release" in a release without a split.
WITHIN_RELEASE = "all rows"


def release_boundaries(manifest: pd.DataFrame) -> list[Boundary]:
    """The released split's boundaries (:func:`default_boundaries`); for a release without
    one, the whole release against itself (copies and near-twins inside the set, a row never
    its own counterpart), which is what a later random split would turn into leakage."""
    found = default_boundaries(manifest)
    if found:
        return found
    everything = Population(WITHIN_RELEASE, np.sort(manifest["row"].to_numpy(np.int64)))
    if everything.size < 2:
        raise InputError(f"the release has {everything.size} row(s); nothing to audit")
    return [Boundary(everything, everything)]
