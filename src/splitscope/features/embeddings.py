"""Supplied embeddings (METHODS §2.4, §4.4): vectors per manifest row, read once here for
every layer that uses them (near-duplicate cosine search, the partition classifier)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.errors import InputError

__all__ = ["load_embeddings"]


def load_embeddings(source: str | Path | np.ndarray | pd.DataFrame, paths: pd.Series | None = None,
                    *, missing: str = "raise") -> np.ndarray:
    """Embeddings as an (n, d) float array aligned with ``paths``.

    ``source`` is an (n, d) array or a ``.npy`` file holding one (used as is, already aligned:
    one line per manifest row, in manifest order), or a Parquet/CSV file or a DataFrame with a
    ``path`` column and either one list-valued column or numeric columns (matched by path; a
    path listed twice is an InputError).

    ``missing`` says what happens to paths without an embedding: ``"raise"`` (an InputError
    naming the first few) or ``"nan"`` (their line is NaN, for callers that count such rows as
    not assessed).
    """
    if missing not in ("raise", "nan"):
        raise InputError(f"missing must be 'raise' or 'nan'; got {missing!r}")
    if isinstance(source, (str, Path)) and Path(source).suffix.lower() == ".npy":
        p = Path(source)
        if not p.exists():
            raise InputError(f"embeddings file not found: {p}")
        try:
            source = np.load(p, allow_pickle=False)
        except ValueError as exc:
            raise InputError(f"cannot read {p} as a numeric .npy array: {exc}") from exc
    if isinstance(source, np.ndarray):
        try:
            arr = np.asarray(source, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise InputError(f"embeddings must be numbers; got dtype {source.dtype}") from exc
        if arr.ndim != 2:
            raise InputError(f"embeddings must be (n, d); got shape {arr.shape}")
        if paths is not None and len(paths) != len(arr):
            raise InputError(f"{len(arr)} embedding rows for {len(paths)} manifest rows")
        return arr
    if isinstance(source, pd.DataFrame):
        table = source
    else:
        p = Path(source)
        if not p.exists():
            raise InputError(f"embeddings file not found: {p}")
        table = pd.read_parquet(p) if p.suffix.lower() in {".parquet", ".pq"} else pd.read_csv(p)
    if "path" not in table.columns:
        raise InputError(f"embeddings table needs a `path` column; found: "
                         f"{', '.join(map(str, table.columns))}")
    rest = [c for c in table.columns if c != "path"]
    if not rest:
        raise InputError("embeddings table has a `path` column but no embedding column")
    if len(rest) == 1 and table[rest[0]].map(lambda v: hasattr(v, "__len__")).all():
        mat = np.stack(table[rest[0]].map(np.asarray).to_list()).astype(np.float32)
    else:
        mat = table[rest].apply(pd.to_numeric, errors="coerce").to_numpy(np.float32)
    if paths is None:
        return mat
    index = pd.Index(table["path"].astype(str))
    if index.has_duplicates:
        dup = index[index.duplicated()].unique()[:3].tolist()
        raise InputError(f"{int(index.duplicated().sum())} path(s) listed twice in the "
                         f"embeddings table, e.g. {dup}")
    pos = index.get_indexer(paths.astype(str))
    if (pos < 0).any() and missing == "raise":
        missing_paths = paths.astype(str)[pos < 0].head(3).tolist()
        raise InputError(f"{int((pos < 0).sum())} row(s) have no embedding, e.g. "
                         f"{missing_paths}")
    out = mat[np.maximum(pos, 0)] if len(mat) else np.zeros((len(pos), mat.shape[1]),
                                                             np.float32)
    out[pos < 0] = np.nan
    return out
