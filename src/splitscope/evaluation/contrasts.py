"""Paired contrasts of two levels of a named condition (METHODS §5.12).

``A-B`` over a condition column (pool, policy, model, …): rows with condition A are matched to
rows with condition B on every other identity column (seed, and model, view, … when present);
per group of the reporting columns (by default every identity column except the condition and
the replicate columns such as ``seed``) and per metric, the paired differences A − B give:

- mean and SD (sample, ddof 1) over the pairs;
- the paired-t 95% interval, mean ± t₀.₉₇₅,ₙ₋₁·SD/√n (n ≥ 2);
- a percentile bootstrap interval of the mean over the pairs (seeds resampled with
  replacement, seeded) when n ≥ :data:`MIN_PAIRS_BOOTSTRAP`; with fewer pairs there are too few
  distinct resamples for percentiles to mean anything.

Rows of A without a partner in B (and the reverse) are counted and listed, never dropped
silently.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.evaluation.runs import RunTable, replicate_columns
from splitscope.evaluation.uncertainty import paired_t_interval, seed_bootstrap, seed_summary
from splitscope.options import RunOptions

MIN_PAIRS_BOOTSTRAP = 5


def parse_contrast(spec: str, levels_by_column: dict[str, set[str]]) -> tuple[str, str]:
    """Split ``A-B`` into its two levels. A level may itself hold ``-`` (``Source-only``): the
    split is the one whose two sides are both levels of one column."""
    text = spec.replace("−", "-").strip()
    cuts = [i for i, ch in enumerate(text) if ch == "-"]
    if not cuts:
        raise InputError(f"--contrast {spec!r}: write LEVEL_A-LEVEL_B (e.g. Removal-Full)")
    options = []
    for i in cuts:
        a, b = text[:i].strip(), text[i + 1:].strip()
        if a and b and any({a, b} <= lv for lv in levels_by_column.values()):
            options.append((a, b))
    if len(options) == 1:
        return options[0]
    if not options:
        listing = "; ".join(f"{c}: {', '.join(sorted(lv)[:12])}"
                            for c, lv in levels_by_column.items())
        raise InputError(f"--contrast {spec!r}: no identity column holds both levels; "
                         f"columns and levels: {listing}")
    raise InputError(f"--contrast {spec!r} can be read as {options}; rename a level")


def find_condition(run: RunTable, a: str, b: str, condition: str | None = None) -> str:
    """The condition column: the named one (it must hold both levels), else the one identity
    column holding both ``a`` and ``b``; none or several is an input error listing them."""
    levels = {c: set(run.table[c]) for c in run.identity}
    if condition is not None:
        if condition not in levels:
            raise InputError(f"--condition {condition!r} is not an identity column; identity "
                             f"columns: {', '.join(run.identity)}")
        missing = [x for x in (a, b) if x not in levels[condition]]
        if missing:
            raise InputError(f"condition {condition!r} has no level {missing}; levels: "
                             f"{', '.join(sorted(levels[condition]))}")
        return condition
    found = [c for c, lv in levels.items() if {a, b} <= lv]
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputError(f"no identity column holds both {a!r} and {b!r}; columns: "
                         f"{', '.join(run.identity)}")
    raise InputError(f"several columns hold both {a!r} and {b!r}: {', '.join(found)}; name "
                     f"one with --condition")


def paired_contrast(run: RunTable, spec: str, *, condition: str | None = None, by=None,
                    n_boot: int = RunOptions.resamples, seed: int = RunOptions.seed, level: float = 0.95
                    ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Contrast ``spec`` (``A-B``) per group and metric (see module docstring).

    Returns
    -------
    summary : DataFrame
        One row per (group, metric): ``contrast``, ``condition``, the ``by`` columns,
        ``metric``, ``pairs``, ``mean``, ``sd``, ``t_low``/``t_high`` (paired-t),
        ``boot_low``/``boot_high`` (seed bootstrap), ``interval`` and ``bootstrap`` (their
        kinds), ``paired_on``.
    pairs : DataFrame
        Every matched pair: the identity columns but the condition, ``metric``, the values
        of the first and second level and ``difference`` (first − second).
    info : dict
        Levels, condition, pairing and reporting columns, and the unpaired rows of each side.
    """
    levels = {c: set(run.table[c]) for c in run.identity}
    a, b = parse_contrast(spec, levels)
    cond = find_condition(run, a, b, condition)
    keys = [c for c in run.identity if c != cond]
    by = [c for c in keys if c not in replicate_columns(keys)] if by is None else list(by)
    unknown = [c for c in by if c not in keys]
    if unknown:
        raise InputError(f"--by {unknown}: not identity columns besides the condition "
                         f"({', '.join(keys)})")
    name = f"{a} − {b}"
    t = run.table
    side_a, side_b = t[t[cond] == a], t[t[cond] == b]
    for side, lv in ((side_a, a), (side_b, b)):
        dup = side.duplicated(keys, keep=False)
        if dup.any():
            raise InputError(f"{int(dup.sum())} rows of {cond}={lv!r} share their identity "
                             f"({', '.join(keys) or 'none'}); add the column that tells them "
                             f"apart (--identity)")
    if keys:
        merged = side_a.merge(side_b, on=keys, how="outer", suffixes=("_a", "_b"),
                              indicator=True)
    else:
        merged = pd.concat([side_a.add_suffix("_a").reset_index(drop=True),
                            side_b.add_suffix("_b").reset_index(drop=True)], axis=1)
        merged["_merge"] = "both"
    only_a = merged.loc[merged["_merge"] == "left_only", keys].to_dict(orient="records")
    only_b = merged.loc[merged["_merge"] == "right_only", keys].to_dict(orient="records")
    both = merged[merged["_merge"] == "both"]
    paired_on = [c for c in keys if c not in by]
    pair_rows, rows = [], []
    groups = both.groupby(by, sort=True, dropna=False) if by else [((), both)]
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        ident = dict(zip(by, key))
        for m in run.metrics:
            d = (g[f"{m}_a"] - g[f"{m}_b"]).to_numpy(dtype=float)
            ok = np.isfinite(d)
            for (_, r), diff, good in zip(g.iterrows(), d, ok):
                pair_rows.append({**{c: r[c] for c in keys}, "metric": m,
                                  "first": r[f"{m}_a"], "second": r[f"{m}_b"],
                                  "difference": diff if good else np.nan})
            rows.append({"contrast": name, "condition": cond, **ident, "metric": m,
                         **_summarize(d[ok], paired_on, n_boot, seed, level),
                         "pairs_missing_value": int((~ok).sum())})
    info = {"contrast": name, "spec": spec, "condition": cond, "first": a, "second": b,
            "paired_on": paired_on or ["row order"], "by": by,
            "unpaired_first": only_a, "unpaired_second": only_b,
            "unpaired": len(only_a) + len(only_b)}
    return pd.DataFrame(rows), pd.DataFrame(pair_rows), info


def _summarize(d: np.ndarray, paired_on: list[str], n_boot: int, seed: int, level: float
               ) -> dict:
    s = seed_summary(d)
    unit = f"pairs matched on {', '.join(paired_on)}" if paired_on else "pairs"
    out = {"pairs": s["n"], "mean": s["mean"], "sd": s["sd"], "t_low": np.nan,
           "t_high": np.nan, "interval": f"not assessed: {s['n']} pair(s), a paired-t interval "
                                         f"needs 2", "boot_low": np.nan, "boot_high": np.nan,
           "bootstrap": f"not assessed: {s['n']} pair(s), the bootstrap needs "
                        f"{MIN_PAIRS_BOOTSTRAP}", "paired_on": ", ".join(paired_on)}
    if s["n"] >= 2:
        t = paired_t_interval(d, level=level, unit=unit)
        out.update(t_low=t["low"], t_high=t["high"], interval=t["kind"])
    if s["n"] >= MIN_PAIRS_BOOTSTRAP and n_boot:
        bs = seed_bootstrap(d, n_boot=n_boot, seed=seed, level=level)
        out.update(boot_low=bs["low"], boot_high=bs["high"], bootstrap=bs["kind"])
    return out


__all__ = ["MIN_PAIRS_BOOTSTRAP", "find_condition", "paired_contrast", "parse_contrast"]
