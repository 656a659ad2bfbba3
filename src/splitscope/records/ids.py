"""Record ids and table names: the slugs every layer builds them from, defined once."""

from __future__ import annotations

import re

__all__ = ["boundary_slug", "slug"]


def slug(text: str, *, empty: str = "all") -> str:
    """A lower-case, file-name-safe key (``test → train`` → ``test_train``); ``empty`` when
    nothing alphanumeric is left."""
    return re.sub(r"[^0-9A-Za-z]+", "_", str(text).replace("→", " ")).strip("_").lower() or empty


def boundary_slug(boundary) -> str:
    """The id suffix of a boundary's records: ``query--reference`` with ``*`` read as ``all``
    and case kept (``test--train``, ``external_B--train``)."""
    names = [("all" if n.strip() == "*" else n) for n in (boundary.query.name,
                                                           boundary.reference.name)]
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "--".join(names)).strip("_") or "all"
