"""Rows that name one file count once in the probes and the partition classifier (METHODS
§4.7): one row per file for the fits (:func:`distinct_content`), and the row tables expanded
back to every row afterwards (:func:`expand_to_rows`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.provenance.predicates import LAYER, SOURCE_LABEL
from splitscope.records import LayerResult


def file_key(table: pd.DataFrame, *columns: str) -> pd.Series:
    """One key per file and ``columns`` (NA for a row without a file: a key of its own)."""
    key = table["file"].astype("string")
    for c in columns:
        key = key + "\0" + (table[c].astype("string").fillna("\0NA") if c in table
                              else "")
    return key


def first_of(table: pd.DataFrame, key: pd.Series) -> np.ndarray:
    """Per row of ``table`` (in ``row`` order), the ``row`` of the first row with its key."""
    ids = table["row"].to_numpy(np.int64)
    codes = pd.factorize(key)[0]
    seen = codes >= 0
    _, first = np.unique(codes[seen], return_index=True)
    return np.where(seen, ids[seen][first][np.maximum(codes, 0)], ids)


def distinct_content(rows: pd.DataFrame, pool: pd.DataFrame, bounds) -> dict | None:
    """One row per file for the probes (METHODS §4.7), or None when no two rows share one:
    ``pool`` one row per file and label (the within-pool probe), ``rows`` one per file,
    label and split (the cross splits and the partition classifier), each the file's first
    row; ``side_ids`` maps a side's rows to those; ``pool_rep`` and ``side_rep`` map every
    row to its first (for expanding the row tables). When a boundary's side does not hold
    all rows of its split that name a file, the rows are used as they are."""
    if "file" not in rows.columns or not rows["file"].duplicated().any():
        return None
    rows = rows.sort_values("row", kind="stable")
    side_rep = pd.Series(first_of(rows, file_key(rows, "label", "split")),
                         index=rows["row"].to_numpy(np.int64))
    pool = pool.sort_values("row", kind="stable")
    pool_rep = pd.Series(first_of(pool, file_key(pool, "label")),
                         index=pool["row"].to_numpy(np.int64))
    if (side_rep.index == side_rep.to_numpy()).all() and \
            (pool_rep.index == pool_rep.to_numpy()).all():
        return None
    members = side_rep.groupby(side_rep.to_numpy()).size()
    for b in bounds:
        for population in (b.query, b.reference):
            reps = np.unique(side_rep.reindex(population.rows).to_numpy())
            if int(members.reindex(reps).sum()) != population.size:
                return None  # a side splits the rows of one file: keep every row

    def side_ids(ids: np.ndarray) -> np.ndarray:
        return np.unique(side_rep.reindex(np.asarray(ids, np.int64)).to_numpy(np.int64))

    firsts = side_rep.index.to_numpy() == side_rep.to_numpy()
    return {"rows": rows[firsts], "pool": pool[pool_rep.index.to_numpy() == pool_rep.to_numpy()],
            "side_ids": side_ids, "side_rep": side_rep, "pool_rep": pool_rep,
            "paths": rows.set_index("row")["path"],
            "counts": {"rows": len(rows), "files_per_side": int(firsts.sum()),
                       "pool_rows": len(pool), "pool_files": len(pool_rep.unique())}}


def expand_to_rows(result: LayerResult, distinct: dict) -> None:
    """Each row table of the probes and the partition classifier (keyed by ``row``) gets a
    line for every row of each file right after its first row's, and each record says that
    rows naming one file counted once."""
    for name, table in list(result.tables.items()):
        if "row" not in table.columns or name == "source_label":
            continue
        rep = distinct["pool_rep"] if name.endswith("_within_pool") else distinct["side_rep"]
        members = pd.DataFrame({"row": rep.index.to_numpy(np.int64),
                                "first": rep.to_numpy(np.int64)})
        order = pd.DataFrame({"first": table["row"].to_numpy(np.int64),
                              "_at": np.arange(len(table))})
        lines = order.merge(members, on="first", how="left", sort=False)
        lines = lines.sort_values(["_at", "row"], kind="stable")
        out = table.iloc[lines["_at"].to_numpy()].reset_index(drop=True)
        out["row"] = lines["row"].to_numpy(np.int64)
        if "path" in out.columns:
            out["path"] = pd.array(distinct["paths"].reindex(out["row"]).to_numpy(),
                                   dtype=table["path"].dtype)
        result.tables[name] = out
    note = {"rule": "rows naming the same file with the same label (and split, on a "
                    "boundary's side) count once: fitted and scored on the file's first row; "
                    "the row tables list every row", **distinct["counts"]}
    for record in result.records:
        if record.layer == LAYER and record.predicate.get("name") != SOURCE_LABEL \
                and record.status in ("completed", "partial"):
            record.details = {**(record.details or {}), "distinct_files": note}
