"""The manifest: one row per released row, in release order, with multiplicity and the full
relative path kept (METHODS §0).

Columns (see ``docs/data-model.md``): ``row``, ``corpus``, ``path``, ``split``,
``split_released``, ``label``, ``source``, ``group``, ``frame``, ``file``, ``basename``,
``path_issue``; and ``table``, ``table_row``, ``stored_path``, ``content`` when an input is a
table or an array. What an input path can be is the table of input forms
(:mod:`splitscope.manifest.forms`).

Names are imported on first use, so that a module below (such as
:mod:`splitscope.manifest.containers`, which the feature workers read) loads without pandas.
"""

from __future__ import annotations

from splitscope.lazy import lazy_names

_EXPORTS = {
    "Arrays": "splitscope.manifest.arrays",
    "read_npz": "splitscope.manifest.arrays",
    "build_manifest": "splitscope.manifest.build",
    "read_folder": "splitscope.manifest.files",
    "read_list": "splitscope.manifest.files",
    "read_dataset_object": "splitscope.manifest.embedded",
    "read_embedded": "splitscope.manifest.embedded",
    "read_imagefolder": "splitscope.manifest.embedded",
    "InputForm": "splitscope.manifest.forms",
    "register_input_form": "splitscope.manifest.forms",
    "unregister_input_form": "splitscope.manifest.forms",
    "apply_group_mapping": "splitscope.manifest.groups",
    "apply_group_regex": "splitscope.manifest.groups",
    "EMBEDDED_COLUMNS": "splitscope.manifest.rows",
    "MANIFEST_COLUMNS": "splitscope.manifest.rows",
    "normalize_split": "splitscope.manifest.rows",
    "read_table": "splitscope.manifest.rows",
}

__all__ = [
    "EMBEDDED_COLUMNS",
    "MANIFEST_COLUMNS",
    "Arrays",
    "InputForm",
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
    "register_input_form",
    "unregister_input_form",
]


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
