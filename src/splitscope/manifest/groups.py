"""Group and frame keys (METHODS §3.1): from a named-group regex over the file name, a manifest
column, or a mapping file."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from splitscope.errors import InputError
from splitscope.manifest.patterns import compile_pattern


def apply_group_regex(manifest: pd.DataFrame, pattern: str, on: str = "basename") -> pd.DataFrame:
    """Fill ``group`` (and ``frame``) from a regex with named groups over a column.

    Parameters
    ----------
    manifest : DataFrame
        A manifest (see :func:`splitscope.manifest.build_manifest`).
    pattern : str
        A regular expression with a named group ``group`` and optionally ``frame``, searched
        (``re.search``) in each value on a linear-time engine
        (:mod:`splitscope.manifest.patterns`), e.g.
        ``^(?P<group>[0-9a-f]{16})_(?P<frame>\\d+)`` for Kvasir-Capsule or
        ``person(?P<group>\\d+)_`` for Kermany.
    on : str
        Column to match against: ``basename`` (default) or ``path``.

    Returns
    -------
    DataFrame
        A copy with ``group`` set where the regex matched (``<NA>`` elsewhere, so the share of
        traceable rows stays visible) and ``frame`` set when the pattern has a ``frame`` group.
    """
    rx = compile_pattern(pattern, "group regex")
    if "group" not in rx.groupindex:
        raise InputError(
            f"group regex {pattern!r} has no named group 'group'; write e.g. 'person(?P<group>\\d+)_'"
        )
    if on not in manifest.columns:
        raise InputError(f"column {on!r} not in manifest; found: {', '.join(manifest.columns)}")
    out = manifest.copy()
    parts = rx.extract(out[on])
    out["group"] = parts["group"].astype("string")
    if "frame" in rx.groupindex:
        frame = pd.to_numeric(parts["frame"], errors="coerce")
        out["frame"] = frame.astype("Int64")
    out.attrs = dict(manifest.attrs)
    out.attrs["group_key"] = {"kind": "regex", "pattern": pattern, "on": on}
    return out


def apply_group_mapping(
    manifest: pd.DataFrame,
    mapping: str | Path | pd.DataFrame,
    key: str = "basename",
    group_column: str = "group",
) -> pd.DataFrame:
    """Fill ``group`` from a mapping table with a key column (``basename`` or ``path``) and a
    group column. Keys that map to more than one group are an error (the mapping is ambiguous)."""
    from splitscope.manifest.rows import read_table

    table = mapping if isinstance(mapping, pd.DataFrame) else read_table(Path(mapping))
    missing = [c for c in (key, group_column) if c not in table.columns]
    if missing:
        raise InputError(
            f"mapping lacks column(s) {', '.join(missing)}; found: {', '.join(map(str, table.columns))}"
        )
    table = table[[key, group_column]].dropna().astype("string").drop_duplicates()
    ambiguous = table[key][table[key].duplicated()]
    if len(ambiguous):
        raise InputError(
            f"mapping gives more than one group for {ambiguous.nunique()} key(s), e.g. "
            f"{ambiguous.iloc[0]!r}"
        )
    lookup = pd.Series(table[group_column].to_numpy(), index=table[key].to_numpy())
    out = manifest.copy()
    out["group"] = out[key].astype("string").map(lookup).astype("string")
    out.attrs = dict(manifest.attrs)
    out.attrs["group_key"] = {"kind": "mapping", "key": key}
    return out
