"""Image-statistics probe (METHODS §4.5): can the label be predicted from plain intensity
statistics of the decoded image — brightness, spread, contrast, entropy, blur, borders, colour
stored for a grey image — without its anatomy?

The engine is the header-only probe's (:mod:`splitscope.provenance.header_probe`): the same
gradient-boosted trees, the same (a) within-pool group-aware cross-validation and (b) cross-split
fit on train / score on test, the same bootstrap intervals and permutation importances. Only the
feature matrix differs: the statistics columns of the scan
(:data:`splitscope.features.stats.STATS_COLUMNS`), as numbers, NaN where not computed. No
thumbnail pixel, hash or header field enters.

A high within-pool score means simple global statistics separate the classes: an acquisition
shortcut (one class scanned on other equipment, exposed, compressed or padded differently) —
or a disease that changes global intensity by itself, which the probe cannot tell apart.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from splitscope.errors import InputError
from splitscope.features.stats import STATS_COLUMNS
from splitscope.provenance.header_probe import (
    ProbeResult,
    cross_split_steps,
    header_probe_cross_split,
    header_probe_within_pool,
    within_pool_steps,
)

__all__ = ["IMAGE_STATS_FEATURES", "image_stats_cross_split_steps", "image_stats_feature_matrix",
           "image_stats_probe_cross_split", "image_stats_probe_within_pool",
           "image_stats_within_pool_steps"]

#: the probe's inputs: every intensity statistic of the scan
IMAGE_STATS_FEATURES: tuple[str, ...] = tuple(STATS_COLUMNS)


def image_stats_feature_matrix(table: pd.DataFrame, columns: list[str] | None = None
                               ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """float64 matrix of the image statistics of ``table`` (NaN where missing), with
    ``info`` as :func:`~splitscope.provenance.header_probe.header_feature_matrix` gives it
    (``features``, ``categorical``, ``dropped``: constant columns are dropped)."""
    columns = list(IMAGE_STATS_FEATURES if columns is None else columns)
    unknown = [c for c in columns if c not in IMAGE_STATS_FEATURES]
    if unknown:
        raise InputError(f"{', '.join(unknown)} not image statistics; use "
                         f"{', '.join(IMAGE_STATS_FEATURES)}")
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise InputError(f"image statistics {', '.join(missing)} missing: scan the release "
                         "again with this version (splitscope scan)")
    X = pd.DataFrame({c: pd.to_numeric(table[c].astype("Float64"), errors="coerce")
                      .astype("float64") for c in columns}, index=table.index)
    dropped = {c: "constant" for c in columns if X[c].nunique(dropna=False) <= 1}
    X = X[[c for c in columns if c not in dropped]]
    if len(X) and X.shape[1] == 0:
        dropped["*"] = "no image statistic varies"
    return X, {"features": list(X.columns), "categorical": [False] * X.shape[1],
               "dropped": dropped}


def _retag(result: ProbeResult) -> ProbeResult:
    result.params.pop("include_name_fields", None)
    result.params["features"] = "image statistics (" + ", ".join(IMAGE_STATS_FEATURES) + ")"
    return result


def image_stats_probe_within_pool(table: pd.DataFrame, *, columns: list[str] | None = None,
                                  **options: Any) -> ProbeResult:
    """(a) Within pool, on image statistics (METHODS §4.5); options as
    :func:`~splitscope.provenance.header_probe.header_probe_within_pool`."""
    return _retag(header_probe_within_pool(
        table, feature_matrix=lambda t: image_stats_feature_matrix(t, columns), **options))


def image_stats_probe_cross_split(train: pd.DataFrame, test: pd.DataFrame, *,
                                  columns: list[str] | None = None,
                                  **options: Any) -> ProbeResult:
    """(b) Cross split, on image statistics (METHODS §4.5); options as
    :func:`~splitscope.provenance.header_probe.header_probe_cross_split`."""
    return _retag(header_probe_cross_split(
        train, test, feature_matrix=lambda t: image_stats_feature_matrix(t, columns), **options))


def image_stats_within_pool_steps(table: pd.DataFrame, *, columns: list[str] | None = None,
                                  **options: Any):
    """:func:`image_stats_probe_within_pool` as a step generator (see
    :func:`~splitscope.provenance.header_probe.within_pool_steps`)."""
    return _retag((yield from within_pool_steps(
        table, feature_matrix=lambda t: image_stats_feature_matrix(t, columns), **options)))


def image_stats_cross_split_steps(train: pd.DataFrame, test: pd.DataFrame, *,
                                  columns: list[str] | None = None, **options: Any):
    """:func:`image_stats_probe_cross_split` as a step generator."""
    return _retag((yield from cross_split_steps(
        train, test, feature_matrix=lambda t: image_stats_feature_matrix(t, columns),
        **options)))
