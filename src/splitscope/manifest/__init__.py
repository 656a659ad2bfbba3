"""The manifest: one row per released row, in release order, with multiplicity and the full
relative path kept (METHODS §0).

Columns (see ``docs/data-model.md``): ``row``, ``corpus``, ``path``, ``split``,
``split_released``, ``label``, ``source``, ``group``, ``frame``, ``file``, ``basename``.
"""

from splitscope.manifest.build import (
    MANIFEST_COLUMNS,
    build_manifest,
    normalize_split,
    read_folder,
    read_list,
    read_table,
)
from splitscope.manifest.groups import apply_group_mapping, apply_group_regex

__all__ = [
    "MANIFEST_COLUMNS",
    "apply_group_mapping",
    "apply_group_regex",
    "build_manifest",
    "normalize_split",
    "read_folder",
    "read_list",
    "read_table",
]
