"""Files that hold many images: the suffixes of the tables and array archives whose rows a
manifest names by an embedded key ``<container>::<member>/<index>``
(:func:`splitscope.manifest.rows.embedded_key`), which the feature stage reads back
(:func:`splitscope.features.sources.parse_key`).

Defined here, below both, and importing nothing, so that a worker process that reads keys does
not load pandas.
"""

__all__ = ["ARRAY_SUFFIXES", "CONTAINER_SUFFIXES", "TABLE_SUFFIXES"]

TABLE_SUFFIXES = (".parquet", ".pq", ".arrow")
"""Parquet and Arrow tables whose column holds images (``Image`` structs or binary)."""

ARRAY_SUFFIXES = (".npz",)
"""Array archives whose member holds images (``(N, H, W)`` or ``(N, H, W, 3)`` uint8)."""

CONTAINER_SUFFIXES = TABLE_SUFFIXES + ARRAY_SUFFIXES
"""Every suffix the container of an embedded key may have."""
