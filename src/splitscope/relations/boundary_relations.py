"""The relations of one boundary (METHODS §1, §2): the identity census, basename and pixel
identity, the near-duplicate predicates and, with embeddings, the embedding predicate, as one
boolean flag per query row and predicate (:func:`boundary_relations`); and the boundaries an
audit runs on (:func:`resolve_boundaries`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, release_boundaries
from splitscope.boundary import boundary as make_boundary
from splitscope.errors import InputError
from splitscope.features.failures import identity_rows
from splitscope.features.options import FeatureParams
from splitscope.relations.embedding import embedding_relations
from splitscope.relations.identity import (
    IdentityCensus,
    basename_matches,
    identity_census,
    no_bytes,
    pixel_identity,
    side,
)
from splitscope.relations.ncc import DEFAULT_EMBEDDING_TAU
from splitscope.relations.near_duplicate import NearDuplicates, near_duplicates
from splitscope.relations.options import SearchOptions
from splitscope.relations.predicates import EMBEDDING_PREDICATE, IDENTITY_PREDICATES


@dataclass
class BoundaryRelations:
    """Everything measured on one boundary: the identity census, basename and pixel identity,
    and the near-duplicate predicates. ``flags`` has one row per query row and one boolean
    column per predicate (``<NA>`` = not assessed). ``embedding`` (when embeddings were
    supplied): the embedding predicate's parameters, sweep, counts and pairs."""

    boundary: Boundary
    census: IdentityCensus
    basenames: pd.DataFrame
    pixels: pd.DataFrame | None
    near: NearDuplicates
    flags: pd.DataFrame = field(default_factory=pd.DataFrame)
    embedding: dict | None = None

    def predicates(self) -> list[str]:
        return [p for p in (*IDENTITY_PREDICATES, *self.near.predicates(), EMBEDDING_PREDICATE)
                if p in self.flags]


def geometry_of(scan) -> dict:
    """Thumbnail geometry of a scan: ``thumb_size``, ``interpolation``, ``mode``."""
    params = getattr(scan, "params", None)
    meta = getattr(scan, "meta", {}) or {}
    out = {}
    for key, default in (("thumb_size", FeatureParams.thumb_size),
                         ("interpolation", FeatureParams.interpolation),
                         ("mode", FeatureParams.mode)):
        value = getattr(params, key, None) if params is not None else None
        if value is None:
            value = meta.get(key, default)
        out[key] = value
    return out


def resolve_boundaries(manifest: pd.DataFrame, boundaries=None) -> list[Boundary]:
    """Boundaries from ``Boundary`` objects, ``(query, reference)`` selector pairs or
    ``"query->reference"`` strings; default: the release's test → train and val → train, or,
    when the release has no such splits, every row against itself (copies within the set)."""
    if boundaries is None:
        return release_boundaries(manifest)
    if isinstance(boundaries, (Boundary, str, tuple)):
        boundaries = [boundaries]
    out = []
    for b in boundaries:
        if isinstance(b, Boundary):
            out.append(b)
        elif isinstance(b, tuple) and len(b) == 2:
            out.append(make_boundary(manifest, b[0], b[1]))
        elif isinstance(b, str) and ("->" in b or "→" in b):
            qsel, rsel = re.split(r"->|→", b, maxsplit=1)
            out.append(make_boundary(manifest, qsel.strip(), rsel.strip()))
        else:
            raise InputError(f"cannot read boundary {b!r}; use 'test->train', a (query, "
                             "reference) pair of selectors, or a Boundary")
    if not out:
        raise InputError("no boundary given")
    return out


def boundary_relations(rows: pd.DataFrame, thumbs, boundary: Boundary,
                       options: SearchOptions | None = None, *,
                       geometry: dict | None = None, confirm: bool = True,
                       workers: int | None = None, embeddings: np.ndarray | None = None,
                       embedding_tau: float = DEFAULT_EMBEDDING_TAU,
                       embedding_params: dict | None = None,
                       searcher=None) -> BoundaryRelations:
    """Identity and near-duplicate relations of one boundary (see module docstring), the
    near-duplicate predicates under ``options`` (:class:`SearchOptions`; default: the
    method's).

    ``embeddings``, when given, is an (len(rows), d) array aligned with ``rows`` (NaN lines for
    rows without an embedding); it adds the ``embedding_cosine`` predicate at
    ``embedding_tau``, recorded with ``embedding_params`` (source file, digest, dimension).
    ``searcher`` runs the NCC search in place of the local one (see :func:`near_duplicates`).
    """
    rows = identity_rows(rows)  # an empty file is a failure, never a copy
    census = identity_census(rows, boundary, confirm=confirm)
    names = basename_matches(rows, boundary)
    pixels = pixel_identity(rows, boundary) if "pixel_xxh128" in rows.columns else None
    near = near_duplicates(rows, thumbs, boundary, options, geometry=geometry,
                           workers=workers, searcher=searcher)
    q = side(rows, boundary.query)
    flags = pd.DataFrame({"row": q["row"].to_numpy(np.int64)})
    has_digest = q["sha256"].notna().to_numpy()
    for name, hit_rows in (("sha256", census.affected["row"]),
                           ("basename", names.loc[names["basename_match"], "row"]),
                           ("pixel_xxh128", pixels["row"] if pixels is not None else None)):
        if hit_rows is None:
            continue
        col = pd.array(flags["row"].isin(set(hit_rows)).to_numpy(), dtype="boolean")
        if name == "sha256":
            col[~has_digest] = pd.NA
        if name == "pixel_xxh128":
            col[~q["pixel_xxh128"].notna().to_numpy()] = pd.NA
        if name == "basename":  # a pixel array has no file name to match
            col[no_bytes(q)] = pd.NA
        flags[name] = col
    for p in near.predicates():
        flags[p] = near.flags[p].to_numpy()
    emb = None
    if embeddings is not None:
        emb = embedding_relations(rows, embeddings, boundary, tau=embedding_tau,
                                  index=(embedding_params or {}).get("index", "exact"))
        emb["params"] = {**emb["params"], **(embedding_params or {})}
        flags[EMBEDDING_PREDICATE] = emb.pop("flag")
        for col, values in emb.pop("columns").items():  # counterpart and measure per row
            near.flags[col] = values
    return BoundaryRelations(boundary, census, names, pixels, near, flags, emb)

