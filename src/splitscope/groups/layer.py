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
    KEY_SOURCES,
    LAYER,
    PROPOSED_GROUP_KEY,
    RECOVERY,
    RESPLIT,
)
from splitscope.groups.predicates import METRICS as GROUP_METRICS
from splitscope.groups.predicates import ROLES as GROUP_ROLES
from splitscope.groups.proposed_keys import key_given, propose_group_key
from splitscope.groups.reading import FINDINGS as GROUP_FINDINGS
from splitscope.groups.reading import RULES as GROUP_RULES
from splitscope.groups.reading import SEGMENTS as GROUP_SEGMENTS
from splitscope.groups.reading import VERDICTS as GROUP_VERDICTS
from splitscope.groups.reading import proposed_sentence
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
    propose_key: bool = True,
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
    propose_key : bool
        With no group key given (:func:`splitscope.groups.proposed_keys.key_given`), look for
        one in the names (and a ``dicom_PatientID_digest`` column, as
        :func:`~splitscope.groups.proposed_keys.with_patient_digests` adds) and report the
        overlap under it as ``proposed`` (METHODS §3.6). The proposal changes nothing else:
        the overlap stays ``not applicable`` and no re-split is made.

    Returns
    -------
    LayerResult
        Records (layer ``groups``): per boundary ``group.overlap[…]`` and
        ``group.frame_gap[…]``, then ``group.resplit`` and ``group.recovery``; with no group
        key, ``group.overlap`` (not applicable) and, when one was proposed,
        ``group.proposed_key[…]`` per boundary. Tables ``group_overlap_<boundary>``,
        ``groups_<boundary>``, ``frame_gaps_<boundary>``, ``resplit``, ``resplit_folds``,
        ``group_mapping`` and ``proposed_group_overlap_<boundary>``.
    """
    if group_regex:
        from splitscope.manifest import apply_group_regex

        manifest = apply_group_regex(manifest, group_regex)
    inputs = release_inputs(manifest)
    manifest, key = _group_key(manifest, recovery, apply_recovery)
    has_groups = "group" in manifest.columns and manifest["group"].notna().any()
    bounds = boundaries_or_default(manifest, boundaries)
    result = LayerResult()
    proposal = None
    if propose_key and not has_groups and bounds and recovery is None \
            and not key_given(manifest):
        proposal = _propose(manifest, bounds)
    if not has_groups or not bounds:
        result.records.append(_overlap_not_applicable(manifest, key, has_groups, inputs,
                                                      proposal))
    if proposal is not None:
        result.extend(_proposed_overlaps(manifest, bounds, proposal, inputs))
    for b in bounds if has_groups else []:
        result.extend(_across_boundary(manifest, b, key, unresolved, n_resamples=n_resamples,
                                       seed=seed, inputs=inputs))
    if resplit and has_groups:
        result.extend(_resplit(manifest, bounds, resplit_fractions, k_folds, seed, inputs))
    if recovery is not None:
        result.extend(_recovery_record(recovery, inputs))
    return result


# ------------------------------------------------------------------ group keys and recovery


def _group_key(manifest: pd.DataFrame, recovery, apply_recovery: bool
               ) -> tuple[pd.DataFrame, dict]:
    """The manifest whose groups are measured, and how its group key was made: the release's
    own, or (with a recovery applied) that key with the recovered groups and frames filled in
    where a row has none (METHODS §3.4)."""
    key = manifest.attrs.get("group_key", {"kind": "column", "column": "group"})
    if recovery is None or not apply_recovery:
        return manifest, key
    manifest, filled = _apply_recovery(manifest, recovery.mapping)
    return manifest, {"kind": "recovered where missing", "base": key, "rows_filled": filled,
                      "rules": recovery.summary["rules"]}


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


def _overlap_not_applicable(manifest: pd.DataFrame, key: dict, has_groups: bool,
                            inputs: list, proposal=None) -> AuditRecord:
    """The overlap record when nothing can be measured: no row has a group key, or the
    release has no boundary. A key proposed from the names is named, not measured."""
    reason = _no_groups_reason(manifest, key) if not has_groups else (
        "no boundary: the release has no train/test or train/val split; name one with "
        "--query/--reference")
    if proposal is not None:
        c = proposal.candidate
        reason = ("no group key was given (no group column, group regex or mapping); a key "
                  f"proposed from {KEY_SOURCES[c.source]}, {proposal.regex or c.name}, is "
                  "reported beside it as group.proposed_key[<boundary>], unconfirmed: "
                  f"confirm it with {proposal.confirm}")
    return not_run_record(LAYER, "not applicable", reason, id="group.overlap",
                          title="Shared groups across boundaries", inputs=inputs,
                          predicate=GROUP_OVERLAP)


# ------------------------------------------------------------------- proposed keys (§3.6)


def _propose(manifest: pd.DataFrame, bounds):
    """The group key proposed from the names of the audited rows (None: none plausible)."""
    rows = np.unique(np.concatenate([np.r_[b.query.rows, b.reference.rows] for b in bounds]))
    return propose_group_key(manifest if rows.size == len(manifest)
                             else manifest[manifest["row"].isin(rows)])


def _proposed_overlaps(manifest: pd.DataFrame, bounds, proposal, inputs: list) -> LayerResult:
    """The overlap under the proposed key across each boundary whose query side it reaches,
    measured by :func:`~splitscope.groups.overlap.group_overlap` on a copy of the manifest
    that carries the proposed key (the manifest the layer measures and re-splits keeps
    none)."""
    from splitscope.groups.overlap import group_overlap

    read = [c for c in ("row", "path", "label", "source") if c in manifest.columns]
    keyed = manifest[read].assign(group=proposal.keys.reindex(manifest.index).astype("string"))
    out = LayerResult()
    for b in bounds:
        o = group_overlap(keyed, b)
        if o.summary["traceable_query_rows"] == 0:
            continue
        out.records.append(_proposed_record(b, proposal, o, inputs))
        out.tables[f"proposed_group_overlap_{slug(b.name)}"] = o.rows
    return out


def _proposed_record(b: Boundary, proposal, o, inputs: list) -> AuditRecord:
    """Query rows sharing a proposed group with the reference side, over the query rows the
    key reaches: status ``proposed``, read by no metric (METHODS §3.6)."""
    from splitscope.groups.proposed_keys import (
        MAX_LARGEST_SHARE,
        MAX_MEDIAN_SHARE,
        MIN_COVERAGE,
        MIN_REPEATED_SHARE,
    )

    s, sm, c, ps = slug(b.name), o.summary, proposal.candidate, proposal.summary
    n_t, n_q = sm["traceable_query_rows"], sm["query_rows"]
    said = proposed_sentence(b.query.name, b.reference.name, proposal.regex or c.name,
                             c.source, sm["affected_query_rows"], n_t, proposal.confirm)
    n_rt, n_r = sm["traceable_reference_rows"], sm["reference_rows"]
    support = o.rows[o.rows["traceable"]].groupby(
        o.rows["label"].fillna("<NA>"))["row"].size().astype(int).to_dict()
    return AuditRecord(
        id=f"group.proposed_key[{s}]", layer=LAYER, title=f"Proposed group key across {b.name}",
        boundary=b.to_dict(),
        predicate={"name": PROPOSED_GROUP_KEY, "params": {
            "regex": proposal.regex, "on": c.on, "source": c.source, "candidate": c.name,
            "groups": ps["groups"], "coverage": ps["coverage"], "rows": ps["rows"],
            "rows_covered": ps["rows_covered"],
            "median_rows_per_group": ps["median_rows_per_group"],
            "largest_group_rows": ps["largest_group_rows"],
            "repeated_share": ps["repeated_share"],
            "rule": {"min_coverage": MIN_COVERAGE, "min_repeated_share": MIN_REPEATED_SHARE,
                     "max_median_share": MAX_MEDIAN_SHARE,
                     "max_largest_share": MAX_LARGEST_SHARE}}},
        unit="query row", numerator=sm["affected_query_rows"], denominator=n_t,
        estimate=sm["rate"],
        coverage={"traceable": n_t, "total": n_q, "share": sm["coverage"],
                  "reference_traceable": n_rt, "reference_total": n_r,
                  "reference_share": sm["reference_coverage"]},
        class_support={str(k): int(v) for k, v in support.items()},
        uncertainty=Uncertainty(kind="none: a census under an unconfirmed key", level=None),
        scope=(f"{b.query.name} rows that carry the proposed key ({n_t} of {n_q}); rate "
               "conditional on that"),
        conclusion=(f"{said}. Coverage: {n_t:,} of {n_q:,} {b.query.name} rows and {n_rt:,} "
                    f"of {n_r:,} {b.reference.name} rows carry the key. The key was inferred "
                    f"from {KEY_SOURCES[c.source]}, not given: whether it identifies "
                    "patients, videos or lesions is unconfirmed, and this is not a measured "
                    "group overlap."),
        unresolved=("whether the proposed key identifies a patient, video or lesion (ids may "
                    "also be numbered per split or per class)"
                    + (f"; {n_q - n_t} of {n_q} query rows carry no key" if n_q - n_t else "")),
        status="proposed",
        reason=(f"a group key inferred from {KEY_SOURCES[c.source]}, not given; confirm it "
                f"with {proposal.confirm} to measure the group overlap"),
        inputs=inputs, outputs=[f"proposed_group_overlap_{s}"],
        details={"summary": sm, "confirm": proposal.confirm, "candidates": proposal.tried,
                 "shared_groups": o.shared[:200],
                 "shared_groups_listed": min(len(o.shared), 200)})


# ---------------------------------------------------------------------- overlap per boundary


def _across_boundary(manifest: pd.DataFrame, b: Boundary, key: dict, unresolved: str | None,
                     *, n_resamples: int, seed: int, inputs: list) -> LayerResult:
    """One boundary's shared groups and, once some query row has a group key, its frame
    gaps."""
    from splitscope.groups.overlap import group_overlap, group_resampling_interval

    s = slug(b.name)
    o = group_overlap(manifest, b)
    sens = group_resampling_interval(o.rows, n_resamples=n_resamples, seed=seed)
    sm = o.summary
    caveats = _overlap_caveats(unresolved, sm["query_rows"], sm["traceable_query_rows"])
    out = LayerResult()
    if sm["traceable_query_rows"] == 0:
        out.records.append(AuditRecord(
            id=f"group.overlap[{s}]", layer=LAYER,
            title=f"Shared groups across {b.name}", boundary=b.to_dict(),
            predicate={"name": GROUP_OVERLAP, "params": {"group_key": key}},
            unit="affected query row", numerator=0, denominator=0,
            coverage={"traceable": 0, "total": sm["query_rows"], "share": 0.0},
            status="not assessed", reason="no query row has a group key",
            unresolved="; ".join(caveats) or None, inputs=inputs))
        return out
    out.records.append(_overlap_record(b, key, o, sens, caveats, inputs))
    out.tables[f"group_overlap_{s}"] = o.rows
    out.tables[f"groups_{s}"] = o.groups
    return out.extend(_frame_gaps_across(manifest, b, sm, inputs))


def _overlap_caveats(unresolved: str | None, n_q: int, n_t: int) -> list[str]:
    """What the overlap cannot settle: the caller's caveat about the group key, and the query
    rows without one."""
    caveats = [unresolved] if unresolved else []
    if n_q - n_t:
        caveats.append(f"{n_q - n_t} of {n_q} query rows have no group key; whether they "
                       "share groups with the reference side is unknown")
    return caveats


def _overlap_conclusion(sm: dict) -> str:
    """The overlap in words, both ways, with the rate's condition on traceability."""
    n_t, n_q, n_a = sm["traceable_query_rows"], sm["query_rows"], sm["affected_query_rows"]
    return (
        f"{n_a} of {n_t} traceable query rows ({_pct(sm['rate'])}) belong to a group that "
        f"also occurs on the reference side ({sm['shared_groups']} shared of "
        f"{sm['query_groups']} query groups); the rate is conditional on traceability "
        f"(coverage {n_t}/{n_q} = {_pct(sm['coverage'])}). In the other direction "
        f"{sm['affected_reference_rows']} of {sm['traceable_reference_rows']} reference rows "
        "share a group with the query side.")


def _overlap_record(b: Boundary, key: dict, o, sens: dict, caveats: list[str],
                    inputs: list) -> AuditRecord:
    """The share of traceable query rows whose group also occurs on the reference side, with
    its group-resampling sensitivity (a census rate, so not a sampling interval)."""
    s, sm = slug(b.name), o.summary
    n_t, n_q = sm["traceable_query_rows"], sm["query_rows"]
    untraceable = n_q - n_t
    support = o.rows[o.rows["traceable"]].groupby(
        o.rows["label"].fillna("<NA>"))["row"].size().astype(int).to_dict()
    return AuditRecord(
        id=f"group.overlap[{s}]", layer=LAYER, title=f"Shared groups across {b.name}",
        boundary=b.to_dict(),
        predicate={"name": GROUP_OVERLAP, "params": {"group_key": key}},
        unit="affected query row", numerator=sm["affected_query_rows"], denominator=n_t,
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
        conclusion=_overlap_conclusion(sm),
        unresolved="; ".join(caveats) or "none",
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
        })


# ------------------------------------------------------------------------------- frame gaps


def _frame_gaps_across(manifest: pd.DataFrame, b: Boundary, sm: dict,
                       inputs: list) -> LayerResult:
    """How far, in frames, each affected query row is from its group's nearest reference
    frame; not applicable without frame indices or without a same-group reference frame."""
    from splitscope.groups.overlap import frame_gap_summary, frame_gaps

    s = slug(b.name)
    title = f"Frame-index gap across {b.name}"
    out = LayerResult()
    if not ("frame" in manifest.columns and manifest["frame"].notna().any()):
        out.records.append(not_run_record(
            LAYER, "not applicable", "no frame index in the release (a group regex with a "
            "(?P<frame>…) group provides one)", id=f"group.frame_gap[{s}]", title=title,
            inputs=inputs))
        return out
    gaps = frame_gaps(manifest, b)
    gs = frame_gap_summary(gaps)
    if gs["rows_with_gap"] == 0:
        out.records.append(AuditRecord(
            id=f"group.frame_gap[{s}]", layer=LAYER, title=title, boundary=b.to_dict(),
            predicate={"name": FRAME_GAP, "params": {}},
            unit="affected query row", numerator=0, denominator=sm["affected_query_rows"],
            status="not applicable",
            reason="no query row has a same-group reference row with a frame index",
            inputs=inputs))
        return out
    out.records.append(_frame_gap_record(b, gs, sm, inputs))
    out.tables[f"frame_gaps_{s}"] = gaps
    return out


def _frame_gap_record(b: Boundary, gs: dict, sm: dict, inputs: list) -> AuditRecord:
    """The median frame gap with its interquartile range (the spread of a census)."""
    s, n_q = slug(b.name), sm["query_rows"]
    return AuditRecord(
        id=f"group.frame_gap[{s}]", layer=LAYER, title=f"Frame-index gap across {b.name}",
        boundary=b.to_dict(),
        predicate={"name": FRAME_GAP,
                   "params": {"distance": "|frame index difference|"}},
        unit="affected query row", numerator=gs["rows_with_gap"],
        denominator=sm["affected_query_rows"],
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
        details={"summary": gs})


# --------------------------------------------------------------------------------- re-split


def _resplit(manifest, bounds, fractions, k, seed, inputs) -> LayerResult:
    """Group-disjoint train/val/test parts and ``k`` folds over the labelled rows of the
    audited populations; not applicable when no such rows can be split."""
    from splitscope.groups.resplit import group_disjoint_split, group_kfold

    def not_applicable(reason: str) -> LayerResult:
        return LayerResult([not_run_record(LAYER, "not applicable", reason, id="group.resplit",
                                           title="Group-disjoint re-split", inputs=inputs)])

    pool = _audited_rows(manifest, bounds)
    labelled = pool[pool["label"].notna()] if "label" in pool.columns else pool.iloc[:0]
    if len(labelled) == 0:
        return not_applicable("no labelled rows to stratify")
    try:
        parts = group_disjoint_split(labelled, fractions, seed=seed)
        folds = group_kfold(labelled, k, seed=seed)
    except InputError as exc:
        return not_applicable(str(exc))
    return LayerResult([_resplit_record(parts, folds, len(pool), fractions, k, seed, inputs)],
                       {"resplit": parts, "resplit_folds": folds})


def _audited_rows(manifest: pd.DataFrame, bounds) -> pd.DataFrame:
    """The manifest rows on either side of some boundary (every row without a boundary)."""
    if not bounds:
        return manifest
    rows = np.unique(np.concatenate([np.r_[b.query.rows, b.reference.rows] for b in bounds]))
    return manifest[manifest["row"].isin(rows)]


def _resplit_record(parts: pd.DataFrame, folds: pd.DataFrame, n_pool: int, fractions, k: int,
                    seed: int, inputs: list) -> AuditRecord:
    """The re-split's parts and folds with their class balance, and the largest deviation of
    a class's share of a part from the target fraction (group sizes limit the balance)."""
    from splitscope.groups.resplit import class_balance

    bal = class_balance(parts, "part")
    fbal = class_balance(folds, "fold")
    names = ("train", "val", "test")
    shares = bal.pivot(index="label", columns="part", values="share_of_class") \
        .reindex(columns=list(names)).fillna(0.0)
    spread = (shares - np.asarray(fractions, dtype=float)[None, :]).abs().max(axis=1)
    worst = np.nanmax(spread.to_numpy()) if spread.notna().any() else float("nan")
    ungrouped = parts.attrs["ungrouped_rows"]
    return AuditRecord(
        id="group.resplit", layer=LAYER, title="Group-disjoint re-split",
        predicate={"name": RESPLIT,
                   "params": {"fractions": list(fractions), "k_folds": k, "seed": seed,
                              "parts_method": parts.attrs["method"],
                              "folds_method": folds.attrs["method"]}},
        unit="row", numerator=len(parts), denominator=n_pool,
        coverage={"traceable": int(len(parts) - ungrouped),
                  "total": len(parts), "share": 1 - ungrouped / len(parts)},
        class_support=parts["label"].value_counts().sort_index().astype(int).to_dict(),
        uncertainty=Uncertainty(kind="none: a seeded deterministic assignment", level=None),
        scope=f"labelled rows of the audited populations ({len(parts)} of {n_pool})",
        conclusion=(f"{parts['group'].nunique()} groups assigned to "
                    f"{', '.join(n for n in names if n in set(parts['part']))} with no group in "
                    f"two parts; {ungrouped} ungrouped rows treated as groups of one"),
        unresolved=("class balance is limited by group sizes: see details.class_balance "
                    f"(largest deviation of a class's share from the target: {worst:.3f})"),
        status="completed", inputs=inputs, outputs=["resplit", "resplit_folds"],
        details={"class_balance": bal.to_dict(orient="records"),
                 "fold_balance": fbal.to_dict(orient="records")})


# ---------------------------------------------------------------------- the recovery record


def _recovery_record(rec, inputs) -> LayerResult:
    """How many rows inherit an upstream group, by which rule, and whether the matcher passes
    its check on classes that cannot occur upstream."""
    sm = rec.summary
    check = sm["matcher_check"]
    out = LayerResult()
    out.records.append(AuditRecord(
        id="group.recovery", layer=LAYER, title="Identity recovery from an upstream corpus",
        predicate={"name": RECOVERY, "params": {"rules": sm["rules"], "tau": sm["tau"]}},
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
                    "matches in classes absent upstream: the matcher is too loose"
                    if check == "fail" else "none"),
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
        from splitscope.groups.proposed_keys import with_patient_digests

        run = context.options.run
        manifest = context.manifest
        if not key_given(manifest):  # a DICOM PatientID may be a proposed key (§3.6)
            manifest = with_patient_digests(manifest, context.scan)
        return audit_groups(manifest, context.split_boundaries,
                            n_resamples=run.resamples, seed=run.seed, workers=run.workers)


#: the layers of this package (see :mod:`splitscope.core.protocol`)
LAYERS = [GroupsLayer()]
