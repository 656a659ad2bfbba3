"""Training-pool controls (METHODS §5.9).

From a manifest's training rows:

- **Full**: every training row.
- **Source-only**: Full minus one source (e.g. without KVASIR).
- **Removal**: Source-only (or Full, when no source is dropped) minus screen-positive rows
  (a flagged-row list: paths or manifest row ids).
- **Random**: a seeded sample of Full, without replacement, of the reference pool's size.
- **Class-count-matched**: a seeded sample of Full with exactly the reference pool's class
  counts; classes are drawn one after the other from one ``default_rng(seed)`` in the stated
  draw order (``class-name``: code-point order of the names; ``release``: order of first
  appearance in the manifest; ``size-desc``: largest class first, ties by name).
- **Within-class replacement**: the Removal pool with every removed row replaced by an
  unflagged row of the same class drawn (without replacement, same draw order rule) from the
  Full rows not already in the pool; a class with too few candidates keeps a shortfall, which
  is reported, never filled silently.

The *reference* pool the controls match is Removal when a flagged list is given, else
Source-only. Each pool reports rows, unique rows, class counts, source counts and minibatches
per epoch ``floor(rows / batch)`` (drop-last) or ``ceil`` without drop-last.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.boundary import select
from splitscope.errors import InputError
from splitscope.evaluation.predictions import path_keys
from splitscope.records.exports import write_csv

DRAW_ORDERS = ("class-name", "release", "size-desc")


@dataclass
class Pool:
    """Manifest ``row`` ids of one training pool (ascending, repeats allowed) and its rule."""

    name: str
    rows: np.ndarray
    definition: str
    params: dict = field(default_factory=dict)


@dataclass
class PoolsResult:
    pools: list[Pool]
    summary: pd.DataFrame  # one row per pool
    class_counts: pd.DataFrame  # pool × class
    source_counts: pd.DataFrame  # pool × source
    params: dict

    def lists(self, manifest: pd.DataFrame) -> dict[str, pd.DataFrame]:
        """Each pool as a row list (manifest ``row``, ``path``, ``label``, ``source``)."""
        m = manifest.set_index("row", drop=False)
        return {p.name: m.loc[p.rows, ["row", "path", "label", "source"]].reset_index(drop=True)
                for p in self.pools}

    def to_json(self) -> dict:
        return {"params": self.params,
                "pools": [_clean(r) for r in self.summary.to_dict(orient="records")],
                "class_counts": _clean(self.class_counts.to_dict(orient="index")),
                "source_counts": _clean(self.source_counts.to_dict(orient="index"))}

    def write(self, out_dir: str | Path, manifest: pd.DataFrame) -> list[Path]:
        """``pools.csv``, ``pool_class_counts.csv``, ``pool_source_counts.csv``,
        ``pools.json`` and one ``pool_<name>.csv`` row list per pool."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        written.append(write_csv(self.summary, out / "pools.csv"))
        written.append(write_csv(self.class_counts.reset_index(), out / "pool_class_counts.csv"))
        written.append(write_csv(self.source_counts.reset_index(),
                                 out / "pool_source_counts.csv"))
        for name, table in self.lists(manifest).items():
            written.append(write_csv(table, out / f"pool_{_slug(name)}.csv"))
        (out / "pools.json").write_text(json.dumps(self.to_json(), indent=2, sort_keys=True))
        written.append(out / "pools.json")
        return written


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name).strip("_").lower()


def _clean(v):
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


# --------------------------------------------------------------------------------------------
# pool rules


def _labels(manifest: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    m = manifest.set_index("row")
    return m.loc[rows, "label"].astype("string").fillna("<NA>").to_numpy(dtype=object)


def class_order(manifest: pd.DataFrame, counts: dict[str, int], order: str) -> list[str]:
    """Classes in the stated draw order (see module docstring)."""
    if order not in DRAW_ORDERS:
        raise InputError(f"draw order {order!r} not one of {DRAW_ORDERS}")
    names = list(counts)
    if order == "class-name":
        return sorted(names)
    if order == "size-desc":
        return sorted(names, key=lambda c: (-counts[c], c))
    first = pd.unique(manifest["label"].astype("string").fillna("<NA>"))
    rank = {c: i for i, c in enumerate(first)}
    return sorted(names, key=lambda c: rank.get(c, len(rank)))


def full_pool(manifest: pd.DataFrame, train: str = "train") -> Pool:
    """Every row of the training population (a split name or selector)."""
    pop = select(manifest, train)
    if pop.size == 0:
        present = sorted(manifest["split"].dropna().unique().tolist())
        raise InputError(f"training population {train!r} has no rows (splits: {present})")
    return Pool("Full", pop.rows, f"every row where {train}", {"train": train})


def source_only_pool(manifest: pd.DataFrame, base: Pool, drop_source: str) -> Pool:
    """``base`` minus the rows of one source."""
    src = manifest.set_index("row").loc[base.rows, "source"].astype("string")
    if drop_source not in set(src.dropna()):
        raise InputError(f"source {drop_source!r} not in the training pool; found: "
                         f"{sorted(set(src.dropna()))}")
    keep = (src != drop_source).fillna(True).to_numpy()
    return Pool("Source-only", base.rows[keep], f"{base.name} without source {drop_source}",
                {"dropped_source": drop_source, "dropped_rows": int((~keep).sum())})


def flagged_rows(manifest: pd.DataFrame, flagged, path_mode: str = "exact") -> tuple[np.ndarray,
                                                                                      int]:
    """Manifest row ids of a flagged list (file or DataFrame with ``path`` or ``row``, or an
    array of row ids) and the number of list entries that matched no manifest row."""
    if isinstance(flagged, (np.ndarray, list, tuple)):
        ids = np.asarray(flagged, dtype=np.int64)
        return np.intersect1d(ids, manifest["row"].to_numpy()), int(
            (~np.isin(ids, manifest["row"].to_numpy())).sum())
    if not isinstance(flagged, pd.DataFrame):
        from splitscope.manifest import read_table
        flagged = read_table(Path(flagged))
    cols = {str(c).strip().lower(): c for c in flagged.columns}
    pcol = next((cols[a] for a in ("path", "image_path", "file_path", "filepath") if a in cols),
                None)
    if pcol is not None:
        keys = set(path_keys(flagged[pcol].astype("string").to_numpy(dtype=object), path_mode))
        mkeys = path_keys(manifest["path"].to_numpy(dtype=object), path_mode)
        hit = pd.Series(mkeys, dtype="object").isin(keys).to_numpy()
        unmatched = len(keys - set(mkeys))
        return manifest["row"].to_numpy()[hit], unmatched
    if "row" in cols:
        ids = pd.to_numeric(flagged[cols["row"]], errors="coerce").dropna().to_numpy(np.int64)
        return flagged_rows(manifest, ids)
    raise InputError(f"flagged list has neither a path nor a row column; found: "
                     f"{', '.join(map(str, flagged.columns))}")


def removal_pool(base: Pool, flagged: np.ndarray) -> Pool:
    """``base`` minus the flagged rows."""
    keep = ~np.isin(base.rows, flagged)
    return Pool("Removal", base.rows[keep], f"{base.name} minus screen-positive (flagged) rows",
                {"removed_rows": int((~keep).sum()), "flagged_rows": int(np.unique(flagged).size)})


def random_pool(base: Pool, size: int, seed: int = 0, name: str = "Random") -> Pool:
    """Seeded sample of ``base`` without replacement, of ``size`` rows."""
    if size > base.rows.size:
        raise InputError(f"random pool of {size} rows from {base.name} of {base.rows.size}")
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(base.rows, size=size, replace=False))
    return Pool(name, rows, f"seeded sample of {base.name} without replacement, size {size}",
                {"seed": seed, "size": size})


def class_matched_pool(manifest: pd.DataFrame, base: Pool, target: dict[str, int], seed: int = 0,
                       order: str = "class-name", name: str = "Class-matched") -> Pool:
    """Seeded sample of ``base`` with exactly the ``target`` class counts (see module
    docstring for the draw order)."""
    rng = np.random.default_rng(seed)
    labels = _labels(manifest, base.rows)
    drawn, shortfall = [], {}
    classes = class_order(manifest, target, order)
    for c in classes:
        cand = base.rows[labels == c]
        k = int(target[c])
        if k > cand.size:
            shortfall[c] = k - cand.size
            k = cand.size
        drawn.append(rng.choice(cand, size=k, replace=False))
    rows = np.sort(np.concatenate(drawn)) if drawn else np.array([], dtype=np.int64)
    return Pool(name, rows, f"seeded sample of {base.name} with the reference class counts",
                {"seed": seed, "draw_order": order, "class_order": classes,
                 "shortfall": shortfall})


def within_class_replacement_pool(manifest: pd.DataFrame, full: Pool, before: Pool,
                                  reduced: Pool, flagged: np.ndarray, seed: int = 0,
                                  order: str = "class-name") -> Pool:
    """``reduced`` plus, per class, as many unflagged Full rows outside ``reduced`` as the
    class lost between ``before`` and ``reduced`` (seeded, without replacement)."""
    lost = pd.Series(_labels(manifest, before.rows)).value_counts() - pd.Series(
        _labels(manifest, reduced.rows)).value_counts().reindex(
        pd.Series(_labels(manifest, before.rows)).unique(), fill_value=0)
    lost = {str(c): int(v) for c, v in lost.items() if v > 0}
    cand_rows = full.rows[~np.isin(full.rows, reduced.rows) & ~np.isin(full.rows, flagged)]
    cand_labels = _labels(manifest, cand_rows)
    rng = np.random.default_rng(seed)
    added, shortfall = [], {}
    classes = class_order(manifest, lost, order)
    for c in classes:
        cand = cand_rows[cand_labels == c]
        k = lost[c]
        if k > cand.size:
            shortfall[c] = k - cand.size
            k = cand.size
        added.append(rng.choice(cand, size=k, replace=False))
    extra = np.concatenate(added) if added else np.array([], dtype=np.int64)
    rows = np.sort(np.concatenate([reduced.rows, extra]))
    return Pool("Within-class replacement", rows,
                f"{reduced.name} with each removed row replaced by an unflagged row of the same "
                f"class from {full.name} outside the pool",
                {"seed": seed, "draw_order": order, "class_order": classes,
                 "replaced": {c: lost[c] - shortfall.get(c, 0) for c in lost},
                 "shortfall": shortfall})


def pool_counts(manifest: pd.DataFrame, pool: Pool, batch_size: int = 128,
                drop_last: bool = True) -> dict:
    """Rows, unique rows, class counts, source counts and minibatches per epoch."""
    if batch_size < 1:
        raise InputError(f"batch size must be ≥ 1, got {batch_size}")
    m = manifest.set_index("row").loc[pool.rows]
    n = int(pool.rows.size)
    batches = n // batch_size if drop_last else math.ceil(n / batch_size)
    return {"pool": pool.name, "rows": n, "unique_rows": int(np.unique(pool.rows).size),
            "minibatches_per_epoch": int(batches), "batch_size": batch_size,
            "drop_last": drop_last,
            "class_counts": m["label"].astype("string").fillna("<NA>").value_counts()
            .sort_index().to_dict(),
            "source_counts": m["source"].astype("string").fillna("<NA>").value_counts()
            .sort_index().to_dict(),
            "definition": pool.definition, "params": pool.params}


def training_pools(
    manifest: pd.DataFrame,
    *,
    train: str = "train",
    drop_source: str | None = None,
    flagged=None,
    seed: int = 0,
    batch_size: int = 128,
    drop_last: bool = True,
    draw_order: str = "class-name",
) -> PoolsResult:
    """Every pool of the module docstring that the inputs allow.

    Parameters
    ----------
    manifest : DataFrame
        A manifest (``row``, ``path``, ``split``, ``label``, ``source``).
    train : str
        Selector of the training population (default ``train``).
    drop_source : str, optional
        Source dropped for the Source-only pool.
    flagged : path, DataFrame or array, optional
        Screen-positive rows for the Removal pool (paths or row ids).
    """
    if draw_order not in DRAW_ORDERS:
        raise InputError(f"draw order {draw_order!r} not one of {DRAW_ORDERS}")
    full = full_pool(manifest, train)
    pools = [full]
    before = full
    if drop_source is not None:
        before = source_only_pool(manifest, full, drop_source)
        pools.append(before)
    reference = before
    flagged_ids = np.array([], dtype=np.int64)
    params = {"train": train, "drop_source": drop_source, "seed": seed,
              "batch_size": batch_size, "drop_last": drop_last, "draw_order": draw_order}
    if flagged is not None:
        flagged_ids, unmatched = flagged_rows(manifest, flagged)
        params["flagged_rows"] = int(flagged_ids.size)
        params["flagged_unmatched_entries"] = unmatched
        reference = removal_pool(before, flagged_ids)
        pools.append(reference)
    params["reference_pool"] = reference.name
    if reference is not full:
        pools.append(random_pool(full, reference.rows.size, seed))
        target = pd.Series(_labels(manifest, reference.rows)).value_counts().to_dict()
        pools.append(class_matched_pool(manifest, full, {str(k): int(v) for k, v in
                                                         target.items()}, seed, draw_order))
    if flagged is not None:
        pools.append(within_class_replacement_pool(manifest, full, before, reference,
                                                   flagged_ids, seed, draw_order))
    info = [pool_counts(manifest, p, batch_size, drop_last) for p in pools]
    summary = pd.DataFrame([{k: v for k, v in d.items()
                             if k not in ("class_counts", "source_counts", "params")}
                            for d in info])
    cc = pd.DataFrame({d["pool"]: d["class_counts"] for d in info}).fillna(0).astype(int).T
    sc = pd.DataFrame({d["pool"]: d["source_counts"] for d in info}).fillna(0).astype(int).T
    params["pool_params"] = {p.name: p.params for p in pools}
    return PoolsResult(pools, summary, cc, sc, params)
