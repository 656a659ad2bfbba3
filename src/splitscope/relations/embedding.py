"""The embedding predicate (METHODS §2.4): nearest reference row by cosine similarity of
user-supplied embeddings, and the source those embeddings are read from."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary
from splitscope.errors import InputError
from splitscope.relations.ann import search_params
from splitscope.relations.identity import side
from splitscope.relations.ncc import DEFAULT_EMBEDDING_TAU, EMBEDDING_SWEEP, embedding_search
from splitscope.relations.near_context import exclude_positions


def embedding_relations(rows: pd.DataFrame, embeddings: np.ndarray, boundary: Boundary, *,
                        tau: float = DEFAULT_EMBEDDING_TAU, index: str = "exact") -> dict:
    """The ``embedding_cosine`` predicate on one boundary (METHODS §2.4).

    Each query row's nearest reference row by cosine similarity of the supplied embeddings
    (:func:`~splitscope.relations.ncc.embedding_search`, exact); the row is flagged when that
    cosine reaches ``tau``. A row whose vector is undefined (zero norm, non-finite, or no
    embedding for its path) is not assessed and never a counterpart; on a boundary of a
    population with itself a row is never its own counterpart. With ``index="faiss-ivf"`` a
    FAISS index gives the candidates (:func:`~splitscope.relations.ann.ivf_embedding_search`,
    each re-checked exactly; its parameters are in ``params``).

    Returns
    -------
    dict
        ``flag`` (boolean array per query row in ``row`` order, ``<NA>`` = not assessed),
        ``columns`` (``embedding_best_cosine``, ``embedding_cosine_counterpart`` (row, -1),
        ``embedding_undefined``), ``sweep`` (:data:`EMBEDDING_SWEEP`), ``pairs`` (row-keyed
        pairs with cosine >= tau), ``undefined_query_rows``, ``params``.
    """
    vectors = np.asarray(embeddings)
    if vectors.ndim != 2 or len(vectors) != len(rows):
        raise InputError(f"embeddings must be one vector per manifest row: got shape "
                         f"{vectors.shape} for {len(rows)} rows")
    q = side(rows, boundary.query)
    r = q if boundary.within else side(rows, boundary.reference)
    at = pd.Index(rows["row"].to_numpy(np.int64))
    q_rows = q["row"].to_numpy(np.int64)
    r_rows = r["row"].to_numpy(np.int64)
    exclude = exclude_positions(q_rows, r_rows) if boundary.within else None
    search = embedding_search
    if index != "exact":
        from splitscope.relations.ann import ivf_embedding_search as search
    res = search(vectors[at.get_indexer(q_rows)], vectors[at.get_indexer(r_rows)], tau=tau,
                 exclude=exclude)
    assessed = np.isfinite(res.best_cosine)
    flag = pd.array([pd.NA] * len(q_rows), dtype="boolean")
    flag[assessed] = res.best_cosine[assessed] >= tau
    counterpart = np.where(res.best_index >= 0, r_rows[np.maximum(res.best_index, 0)]
                           if r_rows.size else -1, -1).astype(np.int64)
    sweep = res.sweep(EMBEDDING_SWEEP)
    sweep["rows"] = len(q_rows)
    paths = rows.set_index("row")["path"]
    qp = res.pairs["query"].to_numpy(np.int64)
    rp = res.pairs["reference"].to_numpy(np.int64)
    pairs = pd.DataFrame({
        "boundary": boundary.name, "row": q_rows[qp],
        "path": paths.reindex(q_rows[qp]).to_numpy(),
        "reference_row": r_rows[rp], "reference_path": paths.reindex(r_rows[rp]).to_numpy(),
        "cosine": res.pairs["cosine"].to_numpy(np.float32),
        "nearest": counterpart[qp] == r_rows[rp], "tau": tau})
    return {
        "flag": flag,
        "columns": {"embedding_best_cosine": res.best_cosine.astype(np.float32),
                    "embedding_cosine_counterpart": counterpart,
                    "embedding_undefined": res.query_undefined.copy()},
        "sweep": sweep,
        "pairs": pairs,
        "undefined_query_rows": int(res.query_undefined.sum()),
        "unmatched_query_rows": int((~assessed & ~res.query_undefined).sum()),
        "undefined_reference_rows": int(res.reference_undefined.sum()),
        "params": {"tau": tau, "counterpart_rule": "nearest", "similarity": "cosine",
                   "normalisation": res.params["normalisation"],
                   "pairs_total": res.params["pairs_total"],
                   "pairs_truncated": res.params["pairs_truncated"],
                   **search_params(res.params)},
    }


def embedding_source(embeddings, rows: pd.DataFrame) -> tuple[np.ndarray, dict]:
    """Load embeddings aligned with ``rows`` and describe their source.

    ``embeddings`` is what :func:`splitscope.features.embeddings.load_embeddings` reads: an (n, d)
    array or ``.npy`` file in manifest order, or a Parquet/CSV file or DataFrame with a ``path``
    column (the manifest's released path) and the vector. Rows without an embedding get a NaN
    line (not assessed, counted). Returns the matrix and the parameters recorded with the
    predicate: ``source`` (file name), ``source_sha256`` (file digest; None in memory),
    ``dimension``, ``values_sha256`` (digest of the aligned float32 matrix) and
    ``rows_without_embedding`` (all-NaN lines, including paths missing from the table).
    """
    from splitscope.features.embeddings import load_embeddings
    from splitscope.records.model import sha256_file

    if isinstance(embeddings, (str, Path)):
        path = Path(embeddings)
        if not path.is_file():
            raise InputError(f"embeddings file not found: {path}")
        source, digest = path.name, sha256_file(path)
    else:
        source = "in-memory " + ("table" if isinstance(embeddings, pd.DataFrame) else "array")
        digest = None
    matrix = np.ascontiguousarray(load_embeddings(embeddings, rows["path"], missing="nan"),
                                  dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        raise InputError(f"embeddings must be (n, d) with d > 0; got shape {matrix.shape}")
    return matrix, {"source": source, "source_sha256": digest,
                    "dimension": int(matrix.shape[1]),
                    "values_sha256": hashlib.sha256(matrix.tobytes()).hexdigest(),
                    "rows_without_embedding": int(np.isnan(matrix).all(axis=1).sum()),
                    "tau_note": "cosine thresholds are model-dependent: read tau with the "
                                "sweep"}
