"""Evaluation views as row lists (METHODS §5.6).

A view is a subset of the truth rows with a name and a definition: *official* (every row),
*deduplicated* (minus query rows a named predicate flagged, e.g. a duplicate layer export),
*external* (another corpus minus rows contained in training), *source-removed* (minus one
source), *filtered* (minus rows matching a same-source training row by basename or exact pHash).
Every one is built from a list file (include or exclude) or a selector over truth columns;
list entries that match no truth row are counted, never dropped silently.

Averaging: *pooled* metrics are computed over all rows of the view; *equal-source* metrics are
the unweighted mean over sources of the metric computed within each source. Within a source
balanced accuracy uses the classes present in that source (the per-source class sets are
listed), so the equal-source figure is named ``..._present``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.boundary import select
from splitscope.errors import InputError
from splitscope.evaluation import metrics as M
from splitscope.evaluation.predictions import Truth, path_keys


@dataclass
class View:
    """Rows of the truth list that a score is computed on."""

    name: str
    mask: np.ndarray  # bool, one per truth row
    definition: str
    params: dict = field(default_factory=dict)

    @property
    def rows(self) -> np.ndarray:
        return np.flatnonzero(self.mask)

    @property
    def n(self) -> int:
        return int(self.mask.sum())

    def to_dict(self) -> dict:
        return {"name": self.name, "rows": self.n, "definition": self.definition,
                "params": self.params}


def official_view(truth: Truth, name: str = "official") -> View:
    """Every truth row."""
    return View(name, np.ones(len(truth), dtype=bool), "every row of the truth list",
                {"truth": truth.origin})


def view_where(truth: Truth, selector: str, name: str | None = None) -> View:
    """Rows matching a selector over the truth's columns (``source!=KVASIR``,
    ``source=SEE-AI&label=Normal``; see :func:`splitscope.boundary.select`)."""
    frame = truth.frame()
    pop = select(frame, selector)
    mask = np.isin(frame["row"].to_numpy(), pop.rows)
    return View(name or selector, mask, f"rows where {selector}", {"selector": selector})


def source_removed_view(truth: Truth, source: str, name: str | None = None) -> View:
    """Every row except those of one source."""
    if truth.source is None:
        raise InputError("the truth list has no source column; a source-removed view needs one")
    if source not in set(truth.source):
        raise InputError(f"source {source!r} not in the truth list; found: "
                         f"{sorted(set(map(str, truth.source)))}")
    view = view_where(truth, f"source!={source}", name or f"without {source}")
    view.definition = f"every row except source {source}"
    return view


def read_row_list(path: str | Path) -> pd.DataFrame:
    """A list file of rows (CSV/TSV/Parquet/XLSX) with a path column (``path``, ``image_path``,
    …) or a manifest ``row`` column."""
    from splitscope.manifest import read_table

    return read_table(Path(path))


def view_from_list(
    truth: Truth,
    list_file: str | Path | pd.DataFrame,
    mode: str = "exclude",
    name: str | None = None,
    path_mode: str = "exact",
    path_column: str | None = None,
    definition: str | None = None,
    where: str | None = None,
) -> View:
    """A view from a list of rows to exclude from, or include in, the truth list.

    Rows are matched by path key (``exact`` by default; see
    :mod:`splitscope.evaluation.predictions`) or, when the list has no path column but a
    ``row`` column, by the truth's row id. Entries matching no truth row are counted in
    ``params["unmatched_list_entries"]``. A list file is read with the project's CSV reader,
    which undoes the spreadsheet-formula guard of its writer (``'=…``); a DataFrame is taken
    as it is. ``where`` names the list in the view's definition (default: its path, or
    ``table`` for a DataFrame).
    """
    if mode not in ("exclude", "include"):
        raise InputError(f"view list mode {mode!r} not one of ('exclude', 'include')")
    where = where or ("table" if isinstance(list_file, pd.DataFrame) else str(list_file))
    table = list_file if isinstance(list_file, pd.DataFrame) else read_row_list(list_file)
    cols = {str(c).strip().lower(): c for c in table.columns}
    pcol = path_column or next((cols[a] for a in ("path", "image_path", "file_path", "filepath",
                                                   "file", "filename") if a in cols), None)
    if pcol is not None:
        if pcol not in table.columns:
            raise InputError(f"column {pcol!r} missing in view list {where}; found: "
                             f"{', '.join(map(str, table.columns))}")
        keys = path_keys(table[pcol].astype("string").to_numpy(dtype=object, na_value=None),
                         path_mode)
        tkeys = path_keys(truth.paths, path_mode)
        hit = pd.Series(tkeys, dtype="object").isin(set(keys)).to_numpy()
        unmatched = int((~pd.Series(keys, dtype="object").isin(set(tkeys))).sum())
        matched_by = f"path ({path_mode})"
    elif "row" in cols:
        ids = pd.to_numeric(table[cols["row"]], errors="coerce")
        if ids.isna().any():
            raise InputError(f"view list {where}: {int(ids.isna().sum())} non-numeric row ids")
        ids = ids.to_numpy(dtype=np.int64)
        hit = np.isin(truth.rows, ids)
        unmatched = int((~np.isin(ids, truth.rows)).sum())
        matched_by = "row id"
    else:
        raise InputError(f"view list {where} has neither a path nor a row column; found: "
                         f"{', '.join(map(str, table.columns))}")
    mask = ~hit if mode == "exclude" else hit
    name = name or f"{mode} {Path(where).stem}"
    return View(name, mask, definition or f"truth rows {'minus' if mode == 'exclude' else 'in'} "
                f"the {len(table):,} listed rows of {where}",
                {"list": where, "mode": mode, "matched_by": matched_by,
                 "list_entries": len(table), "rows_matched": int(hit.sum()),
                 "unmatched_list_entries": unmatched})


def parse_view(truth: Truth, spec: str, base: Path | None = None,
               path_mode: str = "exact") -> View:
    """A view from a command-line spec ``NAME=KIND:ARG``.

    Kinds: ``official``; ``where:SELECTOR`` (``non-KVASIR=where:source!=KVASIR``);
    ``exclude:FILE`` / ``include:FILE`` (a list of paths or row ids);
    ``without:SOURCE`` (source-removed).
    """
    if "=" not in spec:
        raise InputError(f"view spec {spec!r}: write NAME=KIND[:ARG], e.g. "
                         f"'non-KVASIR=where:source!=KVASIR' or 'filtered=exclude:list.csv'")
    name, rest = spec.split("=", 1)
    kind, _, arg = rest.partition(":")
    name, kind = name.strip(), kind.strip()
    if kind == "official":
        return official_view(truth, name)
    if kind == "where":
        return view_where(truth, arg, name)
    if kind == "without":
        return source_removed_view(truth, arg, name)
    if kind in ("exclude", "include"):
        p = Path(arg)
        if base is not None and not p.is_absolute() and not p.exists():
            p = base / p
        return view_from_list(truth, p, kind, name, path_mode=path_mode)
    raise InputError(f"view spec {spec!r}: unknown kind {kind!r}; use official, where, without, "
                     f"exclude or include")


# --------------------------------------------------------------------------------------------
# scoring a view, pooled and equal-source


def score_view(truth: Truth, scores: np.ndarray, view: View, score_kind: str = "score",
               equal_source: bool = True, per_class: bool = False) -> dict:
    """Pooled metrics of ``scores`` (aligned to ``truth``) on ``view``, plus equal-source
    averages when the truth has sources. Required classes are the task's classes."""
    rows = view.rows
    y = truth.labels[rows]
    s = scores[rows]
    out = {"view": view.name, "rows": int(rows.size)}
    if rows.size == 0:
        out["reason"] = "the view has no rows"
        return out
    out.update(M.score_predictions(y, s, truth.classes, score_kind, per_class=per_class))
    if equal_source and truth.source is not None:
        out.update(equal_source_scores(y, s, truth.classes, truth.source[rows]))
    return out


def per_source_scores(y, scores, classes, sources) -> pd.DataFrame:
    """Metrics within each source: rows, accuracy, present-class balanced accuracy, macro AUC
    (classes with positives and negatives in that source), their mean, the classes present."""
    rows = []
    src = pd.Series(np.asarray(sources, dtype=object), dtype="object").fillna("<NA>")
    src = src.astype(str).to_numpy()
    k = len(classes)
    for name in sorted(set(src)):
        m = src == name
        yy, ss = y[m], scores[m]
        pred = M.predict(ss)
        bap = M.balanced_accuracy_present(yy, pred, k)
        mauc, skipped = M.macro_auroc(yy, ss, classes)
        present = [str(classes[c]) for c in np.flatnonzero(M.class_support(yy, k))]
        rows.append({"source": name, "rows": int(m.sum()), "accuracy": M.accuracy(yy, pred),
                     "balanced_accuracy_present": bap, "macro_auc": mauc,
                     "organizer_score_present": (mauc + bap) / 2.0,
                     "classes_present": ", ".join(present),
                     "auc_skipped": ", ".join(skipped)})
    return pd.DataFrame(rows)


def equal_source_scores(y, scores, classes, sources) -> dict:
    """Unweighted means over sources of the per-source metrics (see :func:`per_source_scores`);
    sources where a metric is undefined are left out of its mean and counted."""
    table = per_source_scores(y, scores, classes, sources)
    out = {"sources": len(table)}
    for col in ("accuracy", "balanced_accuracy_present", "macro_auc", "organizer_score_present"):
        v = table[col].to_numpy(dtype=float)
        out[f"equal_source_{col}"] = float(np.nanmean(v)) if np.isfinite(v).any() else np.nan
        out[f"equal_source_{col}_sources"] = int(np.isfinite(v).sum())
    out["per_source"] = table.to_dict(orient="records")
    return out
