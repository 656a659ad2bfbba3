"""Image-quality flags (METHODS §4.6): per row, from the scan's intensity statistics.

Each flag is one rule over one score (:data:`FLAGS`); thresholds are in :class:`QualityParams`
and recorded with every record. Absolute rules read a statistic of the image itself; relative
rules compare a row with the release's own distribution (all rows of the audited release with
the score), so "odd" means odd *for this release*:

- relative rule on a log score s: d = s − median(s); σ̂ = 1.4826 · MAD(s); the row is flagged
  when |d| > max(z · σ̂, ln f) (one-sided for blur: d < −max(z · σ̂, ln f)); z = 3.5 by default
  and f a minimum factor, so that a release where nearly every image has one size (σ̂ = 0) flags
  only images at least f times off, never a rounding difference.

:func:`quality_table` is the per-row table (one row per manifest row: each flag and its score),
:func:`quality_rates` the rates per split × class, :func:`flag_label_association` Cramér's V of
each flag with the label (a flag whose rate differs strongly between classes is a shortcut a
model can use).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.provenance.options import QualityParams

__all__ = ["FLAGS", "NO_LABEL", "flag_label_association", "quality_flags", "quality_rates",
           "quality_table"]

#: the label shown for rows without one in the per split × class tables
NO_LABEL = "(no label)"
_MAD_SCALE = 1.4826  # MAD of a normal sample × 1.4826 = its standard deviation


@dataclass(frozen=True)
class Flag:
    """One quality flag: its name, what its score is, and the rule in words (filled with the
    parameters and, for relative rules, the release's cut-off)."""

    name: str
    score: str
    rule: str


FLAGS: tuple[Flag, ...] = (
    Flag("dark", "mean grey level", "mean grey level < {dark_mean:g}"),
    Flag("light", "mean grey level", "mean grey level > {light_mean:g}"),
    Flag("low_contrast", "p99 − p01 (grey levels)", "p99 − p01 < {low_contrast_range:g} grey "
         "levels"),
    Flag("blurry", "ln(sharpness / release median)", "sharpness below the release's median by "
         "more than max({robust_z:g} robust SD, ×{blur_factor:g}) (ln ratio < −{cut:.3g})"),
    Flag("low_information", "entropy (bits)", "histogram entropy < {low_information_bits:g} "
         "bits"),
    Flag("odd_size", "ln(area / release median)", "area off the release's median by more than "
         "max({robust_z:g} robust SD, ×{size_factor:g}) (|ln ratio| > {cut:.3g})"),
    Flag("odd_aspect", "ln(aspect / release median)", "aspect (width / height) off the "
         "release's median by more than max({robust_z:g} robust SD, ×{aspect_factor:g}) "
         "(|ln ratio| > {cut:.3g})"),
    Flag("grey_as_colour", "mean max−min channel difference", "colour image with mean "
         "max−min channel difference < {grey_colour_spread:g} grey level"),
    Flag("large_border", "share of area in uniform edge bands", "uniform edge bands cover "
         "≥ {border_share:.0%} of the area"),
)
_FLAG = {f.name: f for f in FLAGS}


def _numeric(rows: pd.DataFrame, col: str) -> pd.Series:
    if col not in rows.columns:
        return pd.Series(np.nan, index=rows.index, dtype="float64")
    return pd.to_numeric(rows[col].astype("Float64"), errors="coerce").astype("float64")


def _relative(score: pd.Series, z: float, factor: float) -> dict[str, float | None]:
    """Median, robust SD and cut-off of a relative rule over the defined values of a log
    score (the score is already centred on the median by the caller)."""
    v = score.dropna().to_numpy()
    if not len(v):
        return {"median": None, "robust_sd": None, "cut": float(np.log(factor))}
    med = float(np.median(v))
    sd = float(_MAD_SCALE * np.median(np.abs(v - med)))
    return {"median": med, "robust_sd": sd, "cut": max(z * sd, float(np.log(factor)))}


def quality_table(rows: pd.DataFrame, params: QualityParams | None = None
                  ) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """Per-row quality flags and scores (METHODS §4.6).

    Parameters
    ----------
    rows : DataFrame
        Manifest rows joined with the scan's features (``Scan.rows()``): ``row``, ``path``,
        ``split``, ``label``, the statistics of :data:`~splitscope.features.stats.STATS_COLUMNS`
        and the header ``width`` / ``height``.
    params : QualityParams, optional

    Returns
    -------
    table : DataFrame
        One line per row of ``rows``, in order: ``row``, ``path``, ``split``, ``label``, then
        per flag ``<flag>`` (boolean, ``<NA>`` where its score is undefined: the file was not
        decoded, or its header gave no size) and ``<flag>_score`` (float).
    rules : dict
        Per flag: ``rule`` (in words, with the thresholds), ``score`` and, for relative rules,
        the release's ``median``, ``robust_sd`` and ``cut`` of the log score.
    """
    params = params or QualityParams()
    missing = [c for c in ("row", "split", "intensity_mean") if c not in rows.columns]
    if missing:
        raise InputError(f"quality flags need column(s) {', '.join(missing)}: run them on a "
                         "scan of this version (Scan.rows()); found: "
                         f"{', '.join(map(str, rows.columns))}")
    p = params
    mean = _numeric(rows, "intensity_mean")
    contrast = _numeric(rows, "intensity_p99") - _numeric(rows, "intensity_p01")
    sharp = _numeric(rows, "sharpness")
    width, height = _numeric(rows, "width"), _numeric(rows, "height")
    ok_size = (width > 0) & (height > 0)
    log_area = np.log((width * height).where(ok_size))
    log_aspect = np.log((width / height).where(ok_size))
    log_sharp = np.log(sharp.where(sharp > 0))
    decoded = mean.notna()
    spread = _numeric(rows, "colour_spread")

    scores: dict[str, pd.Series] = {}
    flags: dict[str, pd.Series] = {}
    rules: dict[str, dict[str, Any]] = {}
    values = p.to_dict()

    def put(name: str, score: pd.Series, flag: pd.Series, extra: dict | None = None) -> None:
        extra = extra or {}
        scores[name] = score
        flags[name] = pd.array(flag.to_numpy(bool), dtype="boolean")
        flags[name][score.isna().to_numpy()] = pd.NA
        rules[name] = {"rule": _FLAG[name].rule.format(**values, cut=extra.get("cut", 0.0)),
                       "score": _FLAG[name].score, **extra}

    put("dark", mean, mean < p.dark_mean)
    put("light", mean, mean > p.light_mean)
    put("low_contrast", contrast, contrast < p.low_contrast_range)
    rel = _relative(log_sharp, p.robust_z, p.blur_factor)
    d = log_sharp - (rel["median"] if rel["median"] is not None else np.nan)
    put("blurry", d, d < -rel["cut"], rel)
    ent = _numeric(rows, "entropy_bits")
    put("low_information", ent, ent < p.low_information_bits)
    for name, logv, factor in (("odd_size", log_area, p.size_factor),
                               ("odd_aspect", log_aspect, p.aspect_factor)):
        rel = _relative(logv, p.robust_z, factor)
        d = logv - (rel["median"] if rel["median"] is not None else np.nan)
        put(name, d, d.abs() > rel["cut"], rel)
    # a decoded image without colour channels is assessed: it is not grey stored as colour
    put("grey_as_colour", spread, spread < p.grey_colour_spread)
    grey = pd.array((spread < p.grey_colour_spread).to_numpy(bool), dtype="boolean")
    grey[~decoded.to_numpy()] = pd.NA
    flags["grey_as_colour"] = grey
    border = _numeric(rows, "border_share")
    put("large_border", border, border >= p.border_share)

    out = pd.DataFrame({
        "row": rows["row"].to_numpy(np.int64),
        "path": (rows["path"] if "path" in rows else pd.Series(pd.NA, index=rows.index))
        .astype("string").to_numpy(),
        "split": rows["split"].astype("string").to_numpy(),
        "label": (rows["label"] if "label" in rows else pd.Series(pd.NA, index=rows.index))
        .astype("string").to_numpy(),
    })
    for f in FLAGS:
        out[f.name] = flags[f.name]
        out[f"{f.name}_score"] = scores[f.name].to_numpy(np.float64)
    return out, rules


def quality_flags(scan: Any, params: QualityParams | None = None) -> pd.DataFrame:
    """The per-row quality table of :func:`quality_table` for a scan (``Scan``) or its row
    table (``Scan.rows()``): one line per manifest row, keyed by ``row``; the rules with the
    release's cut-offs are in ``attrs["rules"]``."""
    rows = scan.rows() if hasattr(scan, "rows") else scan
    if not isinstance(rows, pd.DataFrame):
        raise InputError("quality_flags needs a Scan or a row table (Scan.rows())")
    table, rules = quality_table(rows, params)
    table.attrs["rules"] = rules
    return table


def _cells(table: pd.DataFrame) -> pd.DataFrame:
    t = table.copy()
    t["split"] = t["split"].fillna("(no split)")
    t["label"] = t["label"].fillna(NO_LABEL)
    return t


def quality_rates(table: pd.DataFrame) -> pd.DataFrame:
    """Rates per flag × split × class from :func:`quality_table`: ``flag``, ``split``,
    ``label``, ``rows`` (all rows of the cell), ``assessed`` (rows whose flag is defined: the
    denominator), ``flagged``, ``rate`` (flagged / assessed, NaN when none assessed)."""
    t = _cells(table)
    parts = []
    for f in FLAGS:
        col = t[f.name]
        g = pd.DataFrame({"split": t["split"], "label": t["label"],
                          "assessed": col.notna().to_numpy(),
                          "flagged": col.fillna(False).to_numpy(bool)})
        agg = g.groupby(["split", "label"], sort=True).agg(
            rows=("assessed", "size"), assessed=("assessed", "sum"),
            flagged=("flagged", "sum")).reset_index()
        agg.insert(0, "flag", f.name)
        parts.append(agg)
    out = pd.concat(parts, ignore_index=True)
    for c in ("rows", "assessed", "flagged"):
        out[c] = out[c].astype(np.int64)
    out["rate"] = np.where(out["assessed"] > 0, out["flagged"] / out["assessed"].clip(lower=1),
                           np.nan)
    return out


def flag_label_association(table: pd.DataFrame) -> pd.DataFrame:
    """Cramér's V of each flag (flagged vs not, assessed labelled rows) with the label:
    ``flag``, ``cramers_v`` (NaN when the flag or the label is constant), ``chi2``,
    ``p_value``, ``rows``, and ``rate_by_label`` (label → flagged / assessed)."""
    from splitscope.provenance.association import cramers_v

    out = []
    for f in FLAGS:
        sub = table[table[f.name].notna() & table["label"].notna()]
        flagged = sub[f.name].to_numpy(bool)
        ct = pd.crosstab(sub["label"].astype(str).to_numpy(), flagged)
        v, chi2, p, _ = cramers_v(ct.to_numpy()) if len(sub) else (np.nan,) * 3 + (0,)
        rates = {str(lab): float(np.mean(flagged[sub["label"].astype(str).to_numpy() == lab]))
                 for lab in sorted(sub["label"].astype(str).unique())}
        out.append({"flag": f.name, "cramers_v": v, "chi2": chi2, "p_value": p,
                    "rows": len(sub), "rate_by_label": rates})
    return pd.DataFrame(out)
