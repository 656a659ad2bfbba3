"""Scoreability of a prediction file against a truth list (METHODS §5.7).

An entry is scoreable when, under the recorded path mode, (1) its paths align one to one with
the truth list (every truth path predicted, no path outside the list), (2) every class has a
column named exactly as the class, (3) those columns hold no missing, non-numeric or infinite
value, and (4) no path occurs twice. A failing entry gets every reason with its counts; nothing
is repaired. Notes are facts that do not block scoring (extra columns, a different column order,
paths that match only after the backslash → slash rule, a ``predicted_class`` column that
disagrees with the scores' argmax, scores that do not look like their declared kind, how the
file was read when that departs from a plain read). Every verdict carries the same keys.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from splitscope.evaluation.predictions import (
    Predictions,
    Truth,
    describe_paths,
    path_keys,
)

_PREDICTED_CLASS = ("predicted_class", "predicted", "prediction", "pred_class", "predicted_label")

#: every count of a verdict, present in every verdict (0 = checked, none found; None = the file
#: could not be read, so nothing was checked)
COUNT_KEYS = ("rows", "truth_rows", "class_columns_found", "missing_values",
              "non_numeric_values", "infinite_values", "duplicated_paths", "surplus_rows",
              "paths_not_in_truth", "not_in_truth_basename_unique_match",
              "not_in_truth_basename_several", "not_in_truth_basename_none",
              "truth_paths_without_prediction", "truth_keys_ambiguous_rows",
              "separator_only_matches", "predicted_class_disagreements",
              "score_rows_outside_unit_interval", "score_rows_not_summing_to_one",
              "probability_rows_invalid")
#: how the file was read (see :mod:`splitscope.evaluation.readers`), flattened as ``read_*``
READ_KEYS = ("sheet", "header_row", "title_rows_skipped", "sep", "decimal", "bom", "engine",
             "cache")
_SUM_TOL = 1e-3


@dataclass
class Verdict:
    """Scoreability of one entry: ``scoreable``, every blocking ``reason`` with its counts,
    non-blocking ``notes``, and the raw ``counts``; ``path_mode`` says which alignment rule was
    used (``exact`` unless the caller opted in to ``basename``)."""

    entry: str
    file: str | None
    scoreable: bool
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict = field(default_factory=dict)
    path_mode: str = "exact"
    score_kind: str = "score"
    read: dict = field(default_factory=dict)

    def __post_init__(self):
        measured = bool(self.counts)
        self.counts = {**{k: 0 if measured else None for k in COUNT_KEYS}, **self.counts}

    def to_dict(self) -> dict:
        return asdict(self)

    def row(self) -> dict:
        """Flat row for a verdict table: the same keys for every entry; ``reasons`` and
        ``notes`` are lists."""
        out = {"entry": self.entry, "file": self.file, "scoreable": self.scoreable,
               "reasons": list(self.reasons), "notes": list(self.notes),
               "path_mode": self.path_mode, "score_kind": self.score_kind}
        out.update(self.counts)
        out.update({f"read_{k}": self.read.get(k) for k in READ_KEYS})
        return out


def _fmt(n: int) -> str:
    return f"{n:,}"


def check_scoreability(pred: Predictions, truth: Truth, path_mode: str = "exact"
                       ) -> tuple[Verdict, np.ndarray | None]:
    """Verdict for ``pred`` against ``truth`` and, when scoreable, the scores aligned to the
    truth order (array ``(len(truth), n_classes)`` float64, columns in ``truth.classes`` order).

    Parameters
    ----------
    path_mode : {"exact", "basename"}
        ``exact`` (default) aligns full paths (backslash → slash only); ``basename`` is an
        explicit opt-in repair, recorded in the verdict.
    """
    table = pred.table
    classes = truth.classes
    reasons: list[str] = list(pred.problems)
    notes: list[str] = list(pred.read.get("notes", []))
    counts: dict = {"rows": len(table), "truth_rows": len(truth)}
    if path_mode != "exact":
        notes.append(f"path mode {path_mode!r} (opt-in normalization): rows aligned by "
                     f"{'file name' if path_mode == 'basename' else path_mode}, not full path")

    # ---- class columns, by exact name
    columns = [str(c) for c in table.columns]
    found: dict[str, str] = {}
    missing_cols, near_cols = [], []
    folded = {}
    for c in columns:
        folded.setdefault(" ".join(c.split()).casefold(), []).append(c)
    for cls in classes:
        if cls in columns:
            found[cls] = cls
            continue
        near = [c for c in folded.get(" ".join(cls.split()).casefold(), []) if c != cls]
        if near:
            near_cols.append(f"{cls!r} only as {near[0]!r}")
        else:
            missing_cols.append(cls)
    counts["class_columns_found"] = len(found)
    if near_cols:
        reasons.append(f"{len(near_cols)} class column(s) differ from the class name by "
                       f"case/whitespace only: {', '.join(near_cols)}")
    if missing_cols:
        reasons.append(f"{len(missing_cols)} class column(s) missing: {', '.join(missing_cols)}")
    extra = [c for c in columns if c not in found.values() and c != pred.path_column]
    if extra:
        notes.append(f"extra column(s) ignored: {', '.join(extra)}")
    present_order = [c for c in columns if c in found.values()]
    if len(found) == len(classes) and present_order != list(classes):
        notes.append("class columns in a different order than the truth (read by name)")

    # ---- values
    numeric = None
    if found:
        raw = table[[found[c] for c in classes if c in found]]
        conv = raw.apply(pd.to_numeric, errors="coerce")
        is_missing = raw.isna().to_numpy()
        conv_np = conv.to_numpy(dtype=float)
        nonnum = np.isnan(conv_np) & ~is_missing
        infinite = np.isinf(conv_np)
        counts["missing_values"] = int(is_missing.sum())
        counts["non_numeric_values"] = int(nonnum.sum())
        counts["infinite_values"] = int(infinite.sum())
        if is_missing.any():
            r = np.flatnonzero(is_missing.any(axis=1))
            reasons.append(f"{_fmt(int(is_missing.sum()))} missing value(s) in class columns "
                           f"({_fmt(r.size)} rows)")
        if nonnum.any():
            example = raw.to_numpy()[nonnum][0]
            reasons.append(f"{_fmt(int(nonnum.sum()))} non-numeric value(s) in class columns "
                           f"(e.g. {str(example)[:30]!r})")
        if infinite.any():
            reasons.append(f"{_fmt(int(infinite.sum()))} infinite value(s) in class columns")
        if len(found) == len(classes):
            numeric = conv_np

    # ---- paths
    if pred.path_column is None:
        reasons.append("no path column (looked for image_path, path, filename, …); found: "
                       + ", ".join(columns))
        counts.update(duplicated_paths=0, surplus_rows=0, paths_not_in_truth=len(table),
                      truth_paths_without_prediction=len(truth))
        keys = None
    else:
        raw_paths = table[pred.path_column].astype("string")
        keys = path_keys(raw_paths.to_numpy(dtype=object, na_value=None), path_mode)
        tkeys = path_keys(truth.paths, path_mode)
        no_path = raw_paths.isna().to_numpy()
        if no_path.any():
            reasons.append(f"{_fmt(int(no_path.sum()))} row(s) without a path")
        kser = pd.Series(keys, dtype="object")
        dup_mask = kser.duplicated(keep=False) & ~pd.Series(no_path)
        n_dup_paths = int(kser[dup_mask].nunique())
        n_surplus = int((kser.duplicated(keep="first") & ~pd.Series(no_path)).sum())
        counts["duplicated_paths"] = n_dup_paths
        counts["surplus_rows"] = n_surplus
        if n_dup_paths:
            reasons.append(f"{_fmt(n_dup_paths)} duplicated paths ({_fmt(n_surplus)} surplus rows)")
        tser = pd.Series(tkeys, dtype="object")
        if path_mode != "exact":
            amb = tser.duplicated(keep=False)
            counts["truth_keys_ambiguous_rows"] = int(amb.sum())
            if amb.any():
                reasons.append(f"path mode {path_mode!r}: {_fmt(int(tser[amb].nunique()))} truth "
                               f"keys shared by {_fmt(int(amb.sum()))} truth rows; those rows "
                               f"cannot be aligned")
        tset = set(tkeys)
        not_in = ~kser.isin(tset).to_numpy() & ~no_path
        counts["paths_not_in_truth"] = int(not_in.sum())
        if not_in.any():
            shapes = describe_paths(raw_paths.to_numpy(dtype=object, na_value=None)[not_in])
            shape_txt = ", ".join(f"{_fmt(v)} {k}" for k, v in shapes.items() if v)
            msg = f"{_fmt(int(not_in.sum()))} paths not in truth list: {shape_txt}"
            if path_mode == "exact":
                bkeys = path_keys(raw_paths.to_numpy(dtype=object, na_value=None)[not_in],
                                  "basename")
                tb = path_keys(truth.paths, "basename")
                tb_counts = pd.Series(tb).value_counts()
                match = pd.Series(bkeys).map(tb_counts).fillna(0).to_numpy()
                by_name = {"unique_match": int((match == 1).sum()),
                           "several": int((match > 1).sum()), "none": int((match == 0).sum())}
                for k, v in by_name.items():
                    counts[f"not_in_truth_basename_{k}"] = v
                msg += (f" ({_fmt(by_name['unique_match'])} match exactly one truth row by file "
                        f"name, {_fmt(by_name['several'])} match several, "
                        f"{_fmt(by_name['none'])} match none)")
            reasons.append(msg)
        pset = set(kser[~pd.Series(no_path)].tolist())
        unpredicted = ~tser.isin(pset).to_numpy()
        counts["truth_paths_without_prediction"] = int(unpredicted.sum())
        if unpredicted.any():
            reasons.append(f"{_fmt(int(unpredicted.sum()))} truth paths without a prediction")
        if path_mode == "exact":
            verbatim = pd.Series(raw_paths.to_numpy(dtype=object, na_value=None), dtype=object)
            # object-dtype membership: an Arrow string column's isin boxes every value
            sep_only = ~verbatim.isin(list(truth.paths)).to_numpy() & ~not_in & ~no_path
            counts["separator_only_matches"] = int(sep_only.sum())
            if sep_only.any():
                notes.append(f"{_fmt(int(sep_only.sum()))} paths match the truth only after "
                             f"backslash → slash (the manifest's separator rule)")

    # ---- informational checks on the scores
    if numeric is not None and len(table):
        pcls = next((c for c in columns if c.strip().casefold() in _PREDICTED_CLASS), None)
        if pcls is not None:
            arg = np.asarray(classes, dtype=object)[np.nanargmax(np.nan_to_num(numeric,
                                                                                nan=-np.inf),
                                                                  axis=1)]
            stated = table[pcls].astype("string").to_numpy(dtype=object, na_value=None)
            disagree = int((arg != stated).sum())
            counts["predicted_class_disagreements"] = disagree
            if disagree:
                notes.append(f"column {pcls!r} disagrees with the argmax of the class scores "
                             f"in {_fmt(disagree)} of {_fmt(len(table))} rows (not used)")
        notes += plausibility_notes(numeric, pred.score_kind, counts)

    scoreable = not reasons
    verdict = Verdict(entry=pred.name, file=pred.source, scoreable=scoreable, reasons=reasons,
                      notes=notes, counts=counts, path_mode=path_mode,
                      score_kind=pred.score_kind, read=pred.read)
    if not scoreable:
        return verdict, None
    lookup = pd.Series(np.arange(len(keys)), index=pd.Index(keys, dtype="object"))
    idx = lookup.loc[list(path_keys(truth.paths, path_mode))].to_numpy()
    return verdict, numeric[idx].astype(np.float64)


def plausibility_notes(scores: np.ndarray, score_kind: str, counts: dict) -> list[str]:
    """Notes on whether the numbers fit their declared kind (declared, never guessed, but
    never silent): rows outside [0, 1] and in-range rows not summing to 1 (±0.001) are counted
    in ``counts``; a note when they contradict the kind or the default ``score`` hides
    probabilities, a warning when declared logits look like probabilities."""
    n = len(scores)
    finite = np.isfinite(scores).all(axis=1)
    outside = finite & ((scores < 0) | (scores > 1)).any(axis=1)
    off_sum = finite & ~outside & ~np.isclose(scores.sum(axis=1), 1.0, atol=_SUM_TOL)
    counts["score_rows_outside_unit_interval"] = int(outside.sum())
    counts["score_rows_not_summing_to_one"] = int(off_sum.sum())
    bad = int((outside | off_sum | ~finite).sum())
    shape = (f"{_fmt(int(outside.sum()))} of {_fmt(n)} rows outside [0, 1], "
             f"{_fmt(int(off_sum.sum()))} not summing to 1 (±{_SUM_TOL})")
    if score_kind == "probability":
        counts["probability_rows_invalid"] = bad
        if bad:
            return [f"declared probabilities: {_fmt(bad)} rows outside [0, 1] or not summing "
                    f"to 1 (±{_SUM_TOL}); probability metrics are not assessed"]
        return []
    if score_kind == "score":
        if bad:
            return [f"scores (the default kind): {shape}; looks like logits / unnormalised "
                    f"scores; declare --score-kind (logit or score) to say which"]
        return [f"scores (the default kind): every row is in [0, 1] and sums to 1; if these "
                f"are probabilities, declare --score-kind probability for ECE, Brier and NLL"]
    if not bad and n:  # logit
        return [f"warning: declared logits, but every one of the {_fmt(n)} rows is in [0, 1] "
                f"and sums to 1: these look like probabilities; a softmax over them distorts "
                f"ECE, Brier and NLL"]
    return []
