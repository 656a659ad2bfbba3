"""The manifest: one row per released row, in release order, with multiplicity and the full
relative path kept (METHODS §0).

Columns (see ``docs/data-model.md``): ``row``, ``corpus``, ``path``, ``split``,
``split_released``, ``label``, ``source``, ``group``, ``frame``, ``file``, ``basename``,
``path_issue``; and ``table``, ``table_row``, ``stored_path``, ``content`` when an input is a
table or an array.
"""

from splitscope.manifest.arrays import Arrays, read_npz
from splitscope.manifest.build import build_manifest, read_folder, read_list
from splitscope.manifest.embedded import read_dataset_object, read_embedded, read_imagefolder
from splitscope.manifest.groups import apply_group_mapping, apply_group_regex
from splitscope.manifest.rows import EMBEDDED_COLUMNS, MANIFEST_COLUMNS, normalize_split, read_table

__all__ = [
    "EMBEDDED_COLUMNS",
    "MANIFEST_COLUMNS",
    "Arrays",
    "apply_group_mapping",
    "apply_group_regex",
    "build_manifest",
    "normalize_split",
    "read_dataset_object",
    "read_embedded",
    "read_folder",
    "read_imagefolder",
    "read_list",
    "read_npz",
    "read_table",
]
