"""The group layer (METHODS §3): patients, videos or lesions shared across a boundary.

:func:`audit_groups` needs only a manifest (list files without images work); it reports group
overlap and frame gaps per boundary, group-disjoint re-splits and, when given, an identity
recovery, as a :class:`splitscope.records.LayerResult` whose tables are keyed by the
manifest's ``row`` and ``path``. The rules live in :mod:`~splitscope.groups.overlap`,
:mod:`~splitscope.groups.recovery` and :mod:`~splitscope.groups.resplit`; :class:`GroupsLayer`
runs it in the audit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, boundaries_or_default
from splitscope.errors import InputError
from splitscope.groups.predicates import (
    FRAME_GAP,
    GROUP_OVERLAP,
    LAYER,
    RECOVERY,
    RESPLIT,
)
from splitscope.groups.predicates import METRICS as GROUP_METRICS
from splitscope.groups.predicates import ROLES as GROUP_ROLES
from splitscope.groups.reading import FINDINGS as GROUP_FINDINGS
from splitscope.groups.reading import RULES as GROUP_RULES
from splitscope.groups.reading import SEGMENTS as GROUP_SEGMENTS
from splitscope.groups.reading import VERDICTS as GROUP_VERDICTS
from splitscope.options import RunOptions
from splitscope.records import AuditRecord, LayerResult, Uncertainty, not_run_record
from splitscope.records.format import percent
from splitscope.records.ids import slug
from splitscope.records.inputs import release_inputs
from splitscope.threads import blas_within_workers

__all__ = ["GroupsLayer", "audit_groups"]


def _no_groups_reason(manifest: pd.DataFrame, key: dict) -> str:
    """Why no row has a group key: no key was given, or the one given matched nothing."""
    if key.get("kind") == "regex":
        on = key.get("on", "basename")
        names = manifest[on] if on in manifest.columns else manifest["path"]
        examples = ", ".join(names.astype(str).head(3))
        return (f"the group regex {key.get('pattern')!r} matched none of the {len(manifest)} "
                f"rows' {on} (e.g. {examples}); its named group 'group' must match there")
    if key.get("kind") == "mapping":
        return f"the group mapping ({key.get('key')}) assigned a group to no row"
    return ("no group keys: the release has no group column and no group regex or mapping "
            "was given (e.g. --group-regex 'person(?P<group>\\d+)_')")


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not np.isfinite(x) else percent(x)


@blas_within_workers
def audit_groups(
    manifest: pd.DataFrame,
    boundaries: Sequence[Boundary] | None = None,
    *,
    group_regex: str | None = None,
    n_resamples: int = RunOptions.resamples,
    seed: int = RunOptions.seed,
    resplit: bool = True,
    resplit_fractions: Sequence[float] = (0.7, 0.15, 0.15),
    k_folds: int = 5,
    recovery: Any = None,
    apply_recovery: bool = True,
    unresolved: str | None = None,
    workers: int | None = None,
) -> LayerResult:
    """Group-layer records and tables (METHODS §3) from a manifest alone.

    Parameters
    ----------
    manifest : DataFrame
        With ``group`` (and ``frame``) filled, or pass ``group_regex``.
    boundaries : list of Boundary, optional
        Default: the release's test → train and val → train.
    group_regex : str, optional
        Applied with :func:`splitscope.manifest.apply_group_regex` before anything else.
    n_resamples, seed : int
        Group-resampling sensitivity of the census overlap rate (METHODS §5.5).
    resplit : bool
        Also produce group-disjoint train/val/test parts and ``k_folds`` folds over the
        labelled rows.
    recovery : Recovery, optional
        A finished :func:`splitscope.groups.recovery.recover_identity`; becomes a record
        and the ``group_mapping`` table.
    apply_recovery : bool
        Rows without a group key inherit the recovered group (and frame) before the overlap
        is measured (METHODS §3.4); the group key is then recorded as column + recovery.
    unresolved : str, optional
        A caveat about the group key that the evidence cannot settle (e.g. ids numbered per
        split); it is carried into every overlap record.
    workers : int, optional
        BLAS/OpenMP threads at most while the group resamples are counted (the run's
        ``workers``; default: the pools as they are).
    """
    from splitscope.groups.overlap import (
        frame_gap_summary,
        frame_gaps,
        group_overlap,
        group_resampling_interval,
    )

    if group_regex:
        from splitscope.manifest import apply_group_regex

        manifest = apply_group_regex(manifest, group_regex)
    inputs = release_inputs(manifest)
    result = LayerResult()
    key = manifest.attrs.get("group_key", {"kind": "column", "column": "group"})
    if recovery is not None and apply_recovery:
        manifest, filled = _apply_recovery(manifest, recovery.mapping)
        key = {"kind": "recovered where missing", "base": key, "rows_filled": filled,
               "rules": recovery.summary["rules"]}
    has_groups = "group" in manifest.columns and manifest["group"].notna().any()
    bounds = boundaries_or_default(manifest, boundaries)
    if not has_groups:
        result.records.append(not_run_record(
            LAYER, "not applicable", _no_groups_reason(manifest, key), id="group.overlap",
            title="Shared groups across boundaries", inputs=inputs, predicate=GROUP_OVERLAP))
    elif not bounds:
        result.records.append(not_run_record(LAYER, "not applicable", "no boundary: the release has no train/test or train/val split; name one with "
            "--query/--reference", id="group.overlap", title="Shared groups across boundaries", inputs=inputs,
            predicate=GROUP_OVERLAP))
    for b in bounds if has_groups else []:
        s = slug(b.name)
        o = group_overlap(manifest, b)
        sm = o.summary
        sens = group_resampling_interval(o.rows, n_resamples=n_resamples, seed=seed)
        n_t, n_q, n_a = sm["traceable_query_rows"], sm["query_rows"], sm["affected_query_rows"]
        untraceable = n_q - n_t
        unres = []
        if unresolved:
            unres.append(unresolved)
        if untraceable:
            unres.append(f"{untraceable} of {n_q} query rows have no group key; whether they "
                         "share groups with the reference side is unknown")
        if n_t == 0:
            result.records.append(AuditRecord(
                id=f"group.overlap[{s}]", layer=LAYER,
                title=f"Shared groups across {b.name}", boundary=b.to_dict(),
                predicate={"name": GROUP_OVERLAP, "params": {"group_key": key}},
                unit="affected query row", numerator=0, denominator=0,
                coverage={"traceable": 0, "total": n_q, "share": 0.0},
                status="not assessed", reason="no query row has a group key",
                unresolved="; ".join(unres) or None, inputs=inputs))
            continue
        support = o.rows[o.rows["traceable"]].groupby(
            o.rows["label"].fillna("<NA>"))["row"].size().astype(int).to_dict()
        conclusion = (
            f"{n_a} of {n_t} traceable query rows ({_pct(sm['rate'])}) belong to a group that "
            f"also occurs on the reference side ({sm['shared_groups']} shared of "
            f"{sm['query_groups']} query groups); the rate is conditional on traceability "
            f"(coverage {n_t}/{n_q} = {_pct(sm['coverage'])}). In the other direction "
            f"{sm['affected_reference_rows']} of {sm['traceable_reference_rows']} reference rows "
            "share a group with the query side.")
        rec = AuditRecord(
            id=f"group.overlap[{s}]", layer=LAYER, title=f"Shared groups across {b.name}",
            boundary=b.to_dict(),
            predicate={"name": GROUP_OVERLAP, "params": {"group_key": key}},
            unit="affected query row", numerator=n_a, denominator=n_t,
            coverage={"traceable": n_t, "total": n_q, "share": sm["coverage"]},
            class_support={str(k): int(v) for k, v in support.items()},
            estimate=sm["rate"],
            uncertainty=Uncertainty(
                kind=(f"group-resampling sensitivity of a census rate: {sens['resamples']} "
                      f"resamples of the {sens['groups']} traceable query groups with "
                      "replacement, pooled numerator over pooled denominator; not a sampling "
                      "interval"),
                level=0.95, low=sens["low"], high=sens["high"], detail=sens),
            scope=(f"query rows with a known group ({n_t} of {n_q}); rate conditional on "
                   "traceability"),
            conclusion=conclusion,
            unresolved="; ".join(unres) or "none",
            status="completed" if untraceable == 0 else "partial",
            reason=None if untraceable == 0 else
            f"{untraceable} untraceable query row(s) are outside the rate's denominator",
            inputs=inputs,
            outputs=[f"group_overlap_{s}", f"groups_{s}"],
            details={
                "summary": sm,
                "by_label": o.by_label.to_dict(orient="records"),
                "by_source": o.by_source.to_dict(orient="records"),
                "shared_groups": o.shared[:200],
                "shared_groups_listed": min(len(o.shared), 200),
            },
        )
        result.records.append(rec)
        result.tables[f"group_overlap_{s}"] = o.rows
        result.tables[f"groups_{s}"] = o.groups

        has_frames = ("frame" in manifest.columns and manifest["frame"].notna().any())
        if not has_frames:
            result.records.append(not_run_record(LAYER, "not applicable", "no frame index in the release (a group regex with a (?P<frame>…) group "
                "provides one)", id=f"group.frame_gap[{s}]", title=f"Frame-index gap across {b.name}", inputs=inputs))
            continue
        gaps = frame_gaps(manifest, b)
        gs = frame_gap_summary(gaps)
        if gs["rows_with_gap"] == 0:
            result.records.append(AuditRecord(
                id=f"group.frame_gap[{s}]", layer=LAYER,
                title=f"Frame-index gap across {b.name}", boundary=b.to_dict(),
                predicate={"name": FRAME_GAP, "params": {}},
                unit="affected query row", numerator=0, denominator=n_a,
                status="not applicable",
                reason="no query row has a same-group reference row with a frame index",
                inputs=inputs))
            continue
        result.records.append(AuditRecord(
            id=f"group.frame_gap[{s}]", layer=LAYER, title=f"Frame-index gap across {b.name}",
            boundary=b.to_dict(),
            predicate={"name": FRAME_GAP,
                       "params": {"distance": "|frame index difference|"}},
            unit="affected query row", numerator=gs["rows_with_gap"], denominator=n_a,
            coverage={"traceable": gs["rows_with_gap"], "total": n_q,
                      "share": gs["rows_with_gap"] / n_q},
            estimate=gs["median"],
            uncertainty=Uncertainty(
                kind="interquartile range of the per-row gaps (spread of a census, not a "
                     "confidence interval)", level=0.5, low=gs["q1"], high=gs["q3"]),
            scope=(f"query rows whose group has a reference row with a frame index "
                   f"({gs['rows_with_gap']} of {n_q})"),
            conclusion=(f"median gap {gs['median']:g} frames (IQR {gs['q1']:g}–{gs['q3']:g}, "
                        f"min {gs['min']}, max {gs['max']}) between an affected query row and "
                        "the nearest reference frame of its group; small gaps mean "
                        "near-identical neighbouring frames straddle the boundary"),
            unresolved=("frame indices measure capture order, not visual similarity; see the "
                        "near-duplicate layer for pixel evidence"),
            inputs=inputs, outputs=[f"frame_gaps_{s}"],
            details={"summary": gs}))
        result.tables[f"frame_gaps_{s}"] = gaps

    if resplit and has_groups:
        result.extend(_resplit(manifest, bounds, resplit_fractions, k_folds, seed, inputs))
    if recovery is not None:
        result.extend(_recovery_record(recovery, inputs))
    return result


def _resplit(manifest, bounds, fractions, k, seed, inputs) -> LayerResult:
    from splitscope.groups.resplit import class_balance, group_disjoint_split, group_kfold

    out = LayerResult()
    if bounds:
        rows = np.unique(np.concatenate([np.r_[b.query.rows, b.reference.rows] for b in bounds]))
        pool = manifest[manifest["row"].isin(rows)]
    else:
        pool = manifest
    labelled = pool[pool["label"].notna()] if "label" in pool.columns else pool.iloc[:0]
    if len(labelled) == 0:
        out.records.append(not_run_record(LAYER, "not applicable", "no labelled rows to stratify", id="group.resplit", title="Group-disjoint re-split", inputs=inputs))
        return out
    try:
        parts = group_disjoint_split(labelled, fractions, seed=seed)
        folds = group_kfold(labelled, k, seed=seed)
    except InputError as exc:
        out.records.append(not_run_record(LAYER, "not applicable", str(exc), id="group.resplit", title="Group-disjoint re-split", inputs=inputs))
        return out
    bal = class_balance(parts, "part")
    fbal = class_balance(folds, "fold")
    names = ("train", "val", "test")
    shares = bal.pivot(index="label", columns="part", values="share_of_class") \
        .reindex(columns=list(names)).fillna(0.0)
    spread = (shares - np.asarray(fractions, dtype=float)[None, :]).abs().max(axis=1)
    out.records.append(AuditRecord(
        id="group.resplit", layer=LAYER, title="Group-disjoint re-split",
        predicate={"name": RESPLIT,
                   "params": {"fractions": list(fractions), "k_folds": k, "seed": seed,
                              "parts_method": parts.attrs["method"],
                              "folds_method": folds.attrs["method"]}},
        unit="row", numerator=len(parts), denominator=len(pool),
        coverage={"traceable": int(len(parts) - parts.attrs["ungrouped_rows"]),
                  "total": len(parts), "share": 1 - parts.attrs["ungrouped_rows"] / len(parts)},
        class_support=parts["label"].value_counts().sort_index().astype(int).to_dict(),
        uncertainty=Uncertainty(kind="none: a seeded deterministic assignment", level=None),
        scope=f"labelled rows of the audited populations ({len(parts)} of {len(pool)})",
        conclusion=(f"{parts['group'].nunique()} groups assigned to "
                    f"{', '.join(n for n in names if n in set(parts['part']))} with no group in "
                    f"two parts; "
                    f"{parts.attrs['ungrouped_rows']} ungrouped rows treated as groups of one"),
        unresolved=("class balance is limited by group sizes: see details.class_balance "
                    "(largest deviation of a class's share from the target: "
                    f"{np.nanmax(spread.to_numpy()) if spread.notna().any() else float('nan'):.3f})"),
        status="completed", inputs=inputs, outputs=["resplit", "resplit_folds"],
        details={"class_balance": bal.to_dict(orient="records"),
                 "fold_balance": fbal.to_dict(orient="records")}))
    out.tables["resplit"] = parts
    out.tables["resplit_folds"] = folds
    return out


def _apply_recovery(manifest: pd.DataFrame, mapping: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Fill ``group`` (and ``frame``) of rows without one from a recovery mapping."""
    out = manifest.copy()
    out.attrs = dict(manifest.attrs)
    hit = mapping[mapping["recovered_group"].notna()].drop_duplicates("row")
    by_row = hit.set_index("row")
    rows = out["row"].astype("int64")
    missing = out["group"].isna() & rows.isin(by_row.index)
    out.loc[missing, "group"] = rows[missing].map(by_row["recovered_group"]).astype("string")
    if "frame" in out.columns:
        fill_frame = missing & out["frame"].isna()
        out.loc[fill_frame, "frame"] = rows[fill_frame].map(by_row["recovered_frame"]) \
            .astype("Int64")
    return out, int(missing.sum())


def _recovery_record(rec, inputs) -> LayerResult:
    sm = rec.summary
    check = sm["matcher_check"]
    out = LayerResult()
    out.records.append(AuditRecord(
        id="group.recovery", layer=LAYER, title="Identity recovery from an upstream corpus",
        predicate={"name": RECOVERY, "params": {"rules": sm["rules"],
                                                          "tau": sm["tau"]}},
        unit="row", numerator=sm["matched"], denominator=sm["query_rows"],
        coverage={"traceable": sm["matched"], "total": sm["query_rows"],
                  "share": sm["matched"] / sm["query_rows"] if sm["query_rows"] else None},
        class_support=dict(zip(rec.by_class["label"].astype(str),
                               rec.by_class["matched"].astype(int))),
        uncertainty=Uncertainty(kind="none: a census of matches", level=None),
        scope=f"{sm['query_rows']} query rows against {sm['upstream_rows']} upstream rows",
        conclusion=(f"{sm['matched']} of {sm['query_rows']} rows inherit an upstream group "
                    f"({sm['matched_bytes']} by bytes, {sm['matched_ncc']} by NCC); "
                    f"{sm['ambiguous']} ambiguous; matcher check {check}"
                    + (f" (classes that cannot occur upstream: "
                       f"{', '.join(sm['impossible_classes'])})" if sm["impossible_classes"]
                       else "")),
        unresolved=("no class is known to be absent upstream, so the matcher is unchecked"
                    if check == "not assessed" else
                    "matches in classes absent upstream: the matcher is too loose" if check == "fail"
                    else "none"),
        status="completed", inputs=inputs, outputs=["group_mapping"],
        details={"summary": sm, "by_class": rec.by_class.to_dict(orient="records")}))
    out.tables["group_mapping"] = rec.mapping
    return out


class GroupsLayer:
    """Shared groups and frame gaps on the boundaries between two sides, group-disjoint
    re-splits (METHODS §3)."""

    name = "groups"
    order = 20
    metrics = tuple(GROUP_METRICS.values())  # --fail-on (splitscope.core.conditions)
    rules = GROUP_RULES  # "what this means" (splitscope.core.meaning)
    verdicts = GROUP_VERDICTS  # verdict lines (splitscope.core.verdicts)
    findings = GROUP_FINDINGS  # the verdicts' opening line (splitscope.core.verdicts)
    composition = GROUP_SEGMENTS  # the composition figure (splitscope.core.composition)
    roles = GROUP_ROLES  # its records in the Croissant record (splitscope.records.roles)

    def issue_columns(self, ids, tables, rows):
        """``group_shared`` (the row's group also has rows on the other side of a boundary)
        and ``group_reference_rows``, from its ``group_overlap_*`` tables."""
        import pandas as pd

        groups = [t for n, t in tables.items() if n.startswith("group_overlap") and len(t)]
        if not groups:
            return None
        g = pd.concat(groups, ignore_index=True)
        per = g.groupby("row").agg(group_shared=("affected", "any"),
                                   group_reference_rows=("reference_rows_same_group", "max"))
        per = per.reindex(ids)
        return pd.DataFrame({"group_shared": per["group_shared"].astype("boolean"),
                             "group_reference_rows": per["group_reference_rows"]
                             .astype("Int64")}, index=ids)

    def run(self, context) -> LayerResult:
        run = context.options.run
        return audit_groups(context.manifest, context.split_boundaries,
                            n_resamples=run.resamples, seed=run.seed, workers=run.workers)


#: the layers of this package (see :mod:`splitscope.core.protocol`)
LAYERS = [GroupsLayer()]
