"""Audit entry points of the group layer (METHODS §3) and the provenance layer (METHODS §4).

:func:`audit_groups` needs only a manifest (list files without images work); it reports group
overlap and frame gaps per boundary, group-disjoint re-splits and, when given, an identity
recovery. :func:`audit_provenance` needs a scan (header fields and thumbnails); it reports the
header-only probe, the source–label association and the partition classifier. Both return a
:class:`splitscope.records.LayerResult` whose tables are keyed by the manifest's ``row`` and
``path``; a check that cannot run on the input becomes a record with status
``not applicable`` (or ``not assessed``) and the reason.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, default_boundaries
from splitscope.errors import InputError
from splitscope.records import AuditRecord, LayerResult, Uncertainty, file_fingerprint

__all__ = ["audit_groups", "audit_provenance", "slug"]


def slug(name: str) -> str:
    """A file-name-safe key for a boundary name (``test → train`` → ``test_train``)."""
    return re.sub(r"[^0-9A-Za-z]+", "_", name.replace("→", " ")).strip("_").lower() or "all"


def _inputs(manifest: pd.DataFrame) -> list[dict[str, str]]:
    out = []
    for item in manifest.attrs.get("inputs", []):
        path = item.get("path")
        if item.get("kind") == "list" and path:
            try:
                out.append(file_fingerprint(path))
            except OSError:
                out.append({"path": str(path), "sha256": "unreadable"})
        elif path:
            # a folder has no single file to digest: the digest of its released path list
            # (the manifest rows of this input, in order) stands for it
            paths = manifest.loc[manifest["file"].astype("string").str.startswith(
                str(Path(path).resolve())).fillna(False), "path"].astype(str)
            digest = hashlib.sha256("\n".join(paths).encode("utf-8")).hexdigest()
            out.append({"path": str(path), "sha256": digest,
                        "sha256_of": "newline-joined released paths of the folder"})
    return out


def _boundaries(manifest: pd.DataFrame, boundaries: Sequence[Boundary] | None) -> list[Boundary]:
    return list(boundaries) if boundaries is not None else default_boundaries(manifest)


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


def _records_na(layer: str, rid: str, title: str, reason: str, status: str = "not applicable",
                inputs: list | None = None) -> AuditRecord:
    return AuditRecord(id=rid, layer=layer, title=title, status=status, reason=reason,
                       inputs=inputs or [])


# --------------------------------------------------------------------------------- groups


def audit_groups(
    manifest: pd.DataFrame,
    boundaries: Sequence[Boundary] | None = None,
    *,
    group_regex: str | None = None,
    n_resamples: int = 2000,
    seed: int = 0,
    resplit: bool = True,
    resplit_fractions: Sequence[float] = (0.7, 0.15, 0.15),
    k_folds: int = 5,
    recovery: Any = None,
    apply_recovery: bool = True,
    unresolved: str | None = None,
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
        A finished :func:`splitscope.relations.recovery.recover_identity`; becomes a record
        and the ``group_mapping`` table.
    apply_recovery : bool
        Rows without a group key inherit the recovered group (and frame) before the overlap
        is measured (METHODS §3.4); the group key is then recorded as column + recovery.
    unresolved : str, optional
        A caveat about the group key that the evidence cannot settle (e.g. ids numbered per
        split); it is carried into every overlap record.
    """
    from splitscope.relations.groups import (
        frame_gap_summary,
        frame_gaps,
        group_overlap,
        group_resampling_interval,
    )

    if group_regex:
        from splitscope.manifest import apply_group_regex

        manifest = apply_group_regex(manifest, group_regex)
    inputs = _inputs(manifest)
    result = LayerResult()
    key = manifest.attrs.get("group_key", {"kind": "column", "column": "group"})
    if recovery is not None and apply_recovery:
        manifest, filled = _apply_recovery(manifest, recovery.mapping)
        key = {"kind": "recovered where missing", "base": key, "rows_filled": filled,
               "rules": recovery.summary["rules"]}
    has_groups = "group" in manifest.columns and manifest["group"].notna().any()
    bounds = _boundaries(manifest, boundaries)
    if not has_groups:
        result.records.append(_records_na(
            "group", "group.overlap", "Shared groups across boundaries",
            "no group keys: the release has no group column and no group regex or mapping was "
            "given (e.g. --group-regex 'person(?P<group>\\d+)_')", inputs=inputs))
    elif not bounds:
        result.records.append(_records_na(
            "group", "group.overlap", "Shared groups across boundaries",
            "no boundary: the release has no train/test or train/val split; name one with "
            "--query/--reference", inputs=inputs))
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
                id=f"group.overlap[{s}]", layer="group",
                title=f"Shared groups across {b.name}", boundary=b.to_dict(),
                predicate={"name": "group overlap", "params": {"group_key": key}},
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
            id=f"group.overlap[{s}]", layer="group", title=f"Shared groups across {b.name}",
            boundary=b.to_dict(),
            predicate={"name": "group overlap", "params": {"group_key": key}},
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
            result.records.append(_records_na(
                "group", f"group.frame_gap[{s}]", f"Frame-index gap across {b.name}",
                "no frame index in the release (a group regex with a (?P<frame>…) group "
                "provides one)", inputs=inputs))
            continue
        gaps = frame_gaps(manifest, b)
        gs = frame_gap_summary(gaps)
        if gs["rows_with_gap"] == 0:
            result.records.append(AuditRecord(
                id=f"group.frame_gap[{s}]", layer="group",
                title=f"Frame-index gap across {b.name}", boundary=b.to_dict(),
                predicate={"name": "nearest same-group reference frame", "params": {}},
                unit="affected query row", numerator=0, denominator=n_a,
                status="not applicable",
                reason="no query row has a same-group reference row with a frame index",
                inputs=inputs))
            continue
        result.records.append(AuditRecord(
            id=f"group.frame_gap[{s}]", layer="group", title=f"Frame-index gap across {b.name}",
            boundary=b.to_dict(),
            predicate={"name": "nearest same-group reference frame",
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
    from splitscope.relations.resplit import class_balance, group_disjoint_split, group_kfold

    out = LayerResult()
    if bounds:
        rows = np.unique(np.concatenate([np.r_[b.query.rows, b.reference.rows] for b in bounds]))
        pool = manifest[manifest["row"].isin(rows)]
    else:
        pool = manifest
    labelled = pool[pool["label"].notna()] if "label" in pool.columns else pool.iloc[:0]
    if len(labelled) == 0:
        out.records.append(_records_na("group", "group.resplit", "Group-disjoint re-split",
                                       "no labelled rows to stratify", inputs=inputs))
        return out
    try:
        parts = group_disjoint_split(labelled, fractions, seed=seed)
        folds = group_kfold(labelled, k, seed=seed)
    except InputError as exc:
        out.records.append(_records_na("group", "group.resplit", "Group-disjoint re-split",
                                       str(exc), inputs=inputs))
        return out
    bal = class_balance(parts, "part")
    fbal = class_balance(folds, "fold")
    names = ("train", "val", "test")
    shares = bal.pivot(index="label", columns="part", values="share_of_class") \
        .reindex(columns=list(names)).fillna(0.0)
    spread = (shares - np.asarray(fractions, dtype=float)[None, :]).abs().max(axis=1)
    out.records.append(AuditRecord(
        id="group.resplit", layer="group", title="Group-disjoint re-split",
        predicate={"name": "stratified group-disjoint split",
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
                    f"{', '.join(map(str, parts['part'].unique()))} with no group in two parts; "
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
        id="group.recovery", layer="group", title="Identity recovery from an upstream corpus",
        predicate={"name": "identity recovery", "params": {"rules": sm["rules"],
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


# ----------------------------------------------------------------------------- provenance


def _scan_rows(scan: Any) -> tuple[pd.DataFrame, Any]:
    if isinstance(scan, pd.DataFrame):
        return scan, None
    if hasattr(scan, "rows"):
        return scan.rows(), scan
    raise InputError("audit_provenance needs a Scan (splitscope.features.scanning) or a row table")


def audit_provenance(
    scan: Any,
    boundaries: Sequence[Boundary] | None = None,
    *,
    seed: int = 0,
    n_resamples: int = 2000,
    folds: int = 5,
    header: bool = True,
    association: bool = True,
    partition: bool = True,
    embeddings: Any = None,
    classifier: str = "logistic",
    internal_share: float = 0.2,
    max_partition_rows: int | None = None,
    importance_repeats: int = 5,
    include_name_fields: bool = False,
) -> LayerResult:
    """Provenance-layer records and tables (METHODS §4).

    Parameters
    ----------
    scan : Scan or DataFrame
        A finished scan (header columns and thumbnails); a row table with header columns
        works for the header probe and the association (the partition classifier then needs
        ``embeddings``).
    boundaries : list of Boundary, optional
        Default: the release's test → train and val → train. The within-pool probe pools the
        rows of all boundaries (every labelled row when there is none).
    max_partition_rows : int, optional
        Seeded subsample of each boundary's rows for the partition classifier (stratified by
        side), recorded in the record; default all rows.
    embeddings : ndarray or path, optional
        Vectors for the partition classifier instead of the thumbnail features.
    """
    rows, sc = _scan_rows(scan)
    bounds = _boundaries(rows, boundaries)
    inputs = _inputs(rows)
    result = LayerResult()
    has_label = "label" in rows.columns and rows["label"].notna().any()
    if bounds:
        pool_ids = np.unique(np.concatenate([np.r_[b.query.rows, b.reference.rows]
                                             for b in bounds]))
        pool = rows[rows["row"].isin(pool_ids)]
    else:
        pool = rows
    if header:
        result.extend(_header_records(rows, pool, bounds, has_label, seed=seed,
                                      n_resamples=n_resamples, folds=folds,
                                      repeats=importance_repeats,
                                      include_name_fields=include_name_fields, inputs=inputs))
    if association:
        result.extend(_association_record(pool, inputs))
    if partition:
        result.extend(_partition_records(rows, sc, bounds, embeddings, seed=seed,
                                         n_resamples=n_resamples, folds=folds,
                                         classifier=classifier, internal_share=internal_share,
                                         max_rows=max_partition_rows, inputs=inputs))
    return result


def _ba_uncertainty(ba: dict) -> Uncertainty:
    return Uncertainty(kind=ba["kind"], level=ba["level"], low=ba["low"], high=ba["high"],
                       detail={"undefined_resamples": ba["undefined_resamples"],
                               "seed": ba["seed"]})


def _header_records(rows, pool, bounds, has_label, *, seed, n_resamples, folds, repeats,
                    include_name_fields, inputs) -> LayerResult:
    from splitscope.probes.header_probe import (
        header_columns,
        header_probe_cross_split,
        header_probe_within_pool,
    )

    out = LayerResult()
    title = "Header-only probe"
    if not has_label:
        out.records.append(_records_na("provenance", "provenance.header_probe.within_pool",
                                       title, "no labels in the release", inputs=inputs))
        return out
    if not any(c in rows.columns for c in header_columns()):
        out.records.append(_records_na(
            "provenance", "provenance.header_probe.within_pool", title,
            "no header features: scan the release first (splitscope scan)",
            status="not assessed", inputs=inputs))
        return out
    labelled = pool[pool["label"].notna()]
    try:
        wp = header_probe_within_pool(labelled, seed=seed, n_resamples=n_resamples, folds=folds,
                                      importance_repeats=repeats,
                                      include_name_fields=include_name_fields)
    except InputError as exc:
        out.records.append(_records_na("provenance", "provenance.header_probe.within_pool",
                                       title, str(exc), inputs=inputs))
        return out
    out.records.append(_probe_record(wp, "provenance.header_probe.within_pool",
                                     f"{title}: within pool", None, inputs))
    out.tables["header_probe_within_pool"] = wp.predictions
    out.tables["header_probe_importance"] = wp.importances
    if wp.single_field is not None:
        out.tables["header_probe_single_field"] = wp.single_field
    for b in bounds:
        s = slug(b.name)
        tr = rows[rows["row"].isin(b.reference.rows) & rows["label"].notna()]
        te = rows[rows["row"].isin(b.query.rows) & rows["label"].notna()]
        rid = f"provenance.header_probe.cross_split[{s}]"
        try:
            cs = header_probe_cross_split(tr, te, seed=seed, n_resamples=n_resamples,
                                          importance_repeats=repeats,
                                          include_name_fields=include_name_fields)
        except InputError as exc:
            out.records.append(_records_na("provenance", rid, f"{title}: cross split", str(exc),
                                           inputs=inputs))
            continue
        out.records.append(_probe_record(cs, rid, f"{title}: fit on {b.reference.name}, "
                                         f"score {b.query.name}", b, inputs, within=wp))
        out.tables[f"header_probe_cross_{s}"] = cs.predictions
    return out


def _probe_record(r, rid, title, b, inputs, within=None) -> AuditRecord:
    ba = r.balanced_accuracy
    correct = int((r.predictions["label"] == r.predictions["predicted"]).sum())
    top = r.top_features(5)
    above = ba["low"] is not None and ba["low"] > r.chance
    if not r.features:
        conclusion = ("no header field varies across these rows, so headers carry no label "
                      "signal here; the model predicts the majority class (balanced accuracy "
                      f"{ba['estimate']:.3f}, chance {r.chance:.3f})")
    elif r.kind == "within pool":
        conclusion = (f"header features alone predict the label within the pool: balanced "
                      f"accuracy {ba['estimate']:.3f} (95% CI {ba['low']:.3f}–{ba['high']:.3f}) "
                      f"vs chance {r.chance:.3f}; a construction shortcut, carried by "
                      f"{', '.join(top) or 'no single field'}" if above else
                      f"header features do not predict the label above chance within the pool "
                      f"(balanced accuracy {ba['estimate']:.3f}, 95% CI {ba['low']:.3f}–"
                      f"{ba['high']:.3f}, chance {r.chance:.3f})")
    else:
        w = within.balanced_accuracy["estimate"] if within is not None else None
        conclusion = (f"fit on the reference side, the header-only model scores balanced "
                      f"accuracy {ba['estimate']:.3f} (95% CI {ba['low']:.3f}–{ba['high']:.3f}) "
                      f"on the query side vs chance {r.chance:.3f}"
                      + (f"; within pool it scores {w:.3f} — a gap of {w - ba['estimate']:+.3f} "
                         "(within ≫ cross means pooling and re-splitting would reward the "
                         "shortcut)" if w is not None else ""))
    return AuditRecord(
        id=rid, layer="provenance", title=title,
        boundary=b.to_dict() if b is not None else None,
        predicate={"name": f"header-only probe ({r.kind})",
                   "params": {**r.params, "features": len(r.features),
                              "dropped": r.dropped}},
        unit="row (case)", numerator=correct, denominator=r.n_rows,
        coverage={"traceable": r.n_rows, "total": r.n_rows, "share": 1.0},
        class_support=r.class_support, estimate=ba["estimate"],
        uncertainty=_ba_uncertainty(ba),
        scope=(f"{r.n_rows} labelled rows; numerator/denominator are correct predictions / "
               "scored rows (accuracy), the estimate is balanced accuracy"),
        conclusion=conclusion,
        unresolved=("permutation importance understates fields whose information another "
                    "field duplicates (e.g. a quality estimate and its table)"),
        status="completed",
        details={"chance": r.chance, "top_fields": top,
                 "importances": r.importances.head(20).to_dict(orient="records"),
                 "single_field": ([] if r.single_field is None else
                                  r.single_field.head(20).to_dict(orient="records")),
                 "accuracy": correct / r.n_rows if r.n_rows else None},
        inputs=inputs)


def _association_record(pool, inputs) -> LayerResult:
    from splitscope.probes.association import source_label_association

    out = LayerResult()
    rid, title = "provenance.source_label", "Source–label association"
    if "source" not in pool.columns or pool["source"].nunique() < 2:
        out.records.append(_records_na("provenance", rid, title,
                                       "fewer than two sources in the release", inputs=inputs))
        return out
    if "label" not in pool.columns or pool["label"].nunique() < 2:
        out.records.append(_records_na("provenance", rid, title,
                                       "fewer than two labels in the release", inputs=inputs))
        return out
    a = source_label_association(pool)
    dom = a.dominant.sort_values("dominant_share", ascending=False)
    out.records.append(AuditRecord(
        id=rid, layer="provenance", title=title,
        predicate={"name": "Cramér's V", "params": {"chi2": "Pearson, no continuity correction"}},
        unit="row", numerator=a.n, denominator=a.n + a.rows_missing,
        coverage={"traceable": a.n, "total": a.n + a.rows_missing,
                  "share": a.n / (a.n + a.rows_missing)},
        class_support=dict(zip(a.dominant["label"].astype(str),
                               a.dominant["rows"].astype(int))),
        estimate=a.cramers_v,
        uncertainty=Uncertainty(kind="none: a descriptive statistic of the census "
                                     f"(χ² = {a.chi2:.1f}, dof {a.dof}, p = {a.p_value:.3g})",
                                level=None),
        scope=f"rows with both a source and a label ({a.n} of {a.n + a.rows_missing})",
        conclusion=(f"Cramér's V = {a.cramers_v:.3f} between source and label; "
                    + "; ".join(f"{r.label}: {100 * r.dominant_share:.0f}% from {r.dominant_source}"
                                for r in dom.head(5).itertuples())),
        unresolved="association is not causation: a source may differ in case mix legitimately",
        status="completed", inputs=inputs, details=a.to_dict()))
    out.tables["source_label"] = a.table.reset_index()
    return out


def _partition_records(rows, sc, bounds, embeddings, *, seed, n_resamples, folds, classifier,
                       internal_share, max_rows, inputs) -> LayerResult:
    from splitscope.probes.partition import (
        content_features,
        internal_split,
        load_embeddings,
        partition_classifier,
    )

    out = LayerResult()
    title = "Partition classifier"
    if not bounds:
        out.records.append(_records_na("provenance", "provenance.partition", title,
                                       "no boundary (train/test split) to classify",
                                       inputs=inputs))
        return out
    if sc is None and embeddings is None:
        out.records.append(_records_na("provenance", "provenance.partition", title,
                                       "no thumbnails (pass a scan) and no embeddings",
                                       status="not assessed", inputs=inputs))
        return out
    rng = np.random.default_rng(seed)
    emb = None
    if embeddings is not None:
        emb = load_embeddings(embeddings, None if isinstance(embeddings, np.ndarray)
                              else rows["path"])
        if len(emb) != len(rows):
            raise InputError(f"{len(emb)} embedding rows for {len(rows)} manifest rows")
    row_pos = pd.Index(rows["row"].to_numpy(np.int64))

    # content features of each thumbnail, computed once however many comparisons use it
    bank = {"at": np.full(0, -1, dtype=np.int64),
            "rows": content_features(sc.thumbnails[:0]) if sc is not None else None}

    def features_for(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if emb is not None:
            return emb[row_pos.get_indexer(ids)], np.ones(len(ids), bool)
        tidx = sc.thumb_index(ids)
        ok = tidx >= 0
        t = tidx[ok]
        if t.size and t.max() >= bank["at"].size:
            bank["at"] = np.r_[bank["at"], np.full(int(t.max()) + 1 - bank["at"].size, -1)]
        new = np.unique(t[bank["at"][t] < 0])
        if new.size:
            bank["at"][new] = len(bank["rows"]) + np.arange(new.size)
            bank["rows"] = np.concatenate([bank["rows"], content_features(sc.thumbnails[new])])
        return bank["rows"][bank["at"][t]], ok

    def run(rid, name, q_ids, r_ids, b, internal=False):
        ids = np.r_[q_ids, r_ids]
        is_test = np.r_[np.ones(len(q_ids), bool), np.zeros(len(r_ids), bool)]
        sub = None
        if max_rows is not None and len(ids) > max_rows:
            keep = np.zeros(len(ids), bool)
            for side in (True, False):  # stratified by side, seeded
                pos = np.flatnonzero(is_test == side)
                k = max(2, round(max_rows * len(pos) / len(ids)))
                keep[rng.choice(pos, size=min(k, len(pos)), replace=False)] = True
            ids, is_test = ids[keep], is_test[keep]
            sub = int(keep.sum())
        X, ok = features_for(ids)
        ids_ok, y = ids[ok], is_test[ok]
        part_rows = rows.iloc[row_pos.get_indexer(ids_ok)]
        try:
            r = partition_classifier(X, y, rows=part_rows,
                                     groups=part_rows["group"].to_numpy() if "group" in part_rows
                                     else None,
                                     name=name, folds=folds, seed=seed, n_resamples=n_resamples,
                                     classifier=classifier)
        except InputError as exc:
            out.records.append(_records_na("provenance", rid, name, str(exc), inputs=inputs))
            return None
        auc = r.auc
        ctl = r.control["auc"] if r.control else None
        unscored = int((~ok).sum()) + r.params["unscored_rows"]
        conclusion = (
            f"out-of-fold AUC {auc['estimate']:.3f} (95% CI {auc['low']:.3f}–{auc['high']:.3f}) "
            f"for telling {'the internal hold-out' if internal else 'query'} rows from "
            f"{'the rest of the reference side' if internal else 'the reference side'} by "
            f"image content; shuffled-partition control AUC "
            f"{ctl['estimate']:.3f}; proxy A-distance {r.d_a:.3f}")
        out.records.append(AuditRecord(
            id=rid, layer="provenance", title=name,
            boundary=b.to_dict() if b is not None else None,
            predicate={"name": "partition classifier", "params": {
                **r.params, "features": ("supplied embeddings" if emb is not None else
                                         "16×16 area-mean thumbnail + 32-bin histogram"),
                "subsample": sub, "internal_share": internal_share if internal else None}},
            unit="row (case)", numerator=r.n_test, denominator=r.n_test + r.n_train,
            coverage={"traceable": r.n_test + r.n_train - r.params["unscored_rows"],
                      "total": len(ids), "share": (len(ids) - unscored) / len(ids)},
            class_support={str(x.label): int(x.train_rows + x.test_rows)
                           for x in r.auc_by_class.itertuples()},
            estimate=auc["estimate"],
            uncertainty=Uncertainty(kind=auc["kind"], level=auc["level"], low=auc["low"],
                                    high=auc["high"]),
            scope=(f"{r.n_test} query-side and {r.n_train} reference-side rows with content "
                   f"features{'' if sub is None else f' (seeded subsample of {sub})'}; "
                   "numerator/denominator are query-side rows / rows classified"),
            conclusion=conclusion,
            unresolved=("a high AUC says the sides differ in content, not why (acquisition, "
                        "case mix, preprocessing)"),
            status="completed" if unscored == 0 else "partial",
            reason=None if unscored == 0 else f"{unscored} row(s) without features or folds",
            inputs=inputs, outputs=[f"partition_scores_{slug(name)}"],
            details={"auc_by_class": r.auc_by_class.to_dict(orient="records"),
                     "d_a": r.d_a, "balanced_error": r.balanced_error,
                     "shuffled_control": r.control}))
        out.tables[f"partition_scores_{slug(name)}"] = r.scores
        return r

    for b in bounds:
        s = slug(b.name)
        run(f"provenance.partition[{s}]", f"Partition classifier {b.name}",
            b.query.rows, b.reference.rows, b)
    refs = {b.reference.name: b for b in bounds}
    for name, b in refs.items():
        ref = b.reference.rows
        if len(ref) < 10:
            continue
        hold = internal_split(len(ref), internal_share, seed)
        run(f"provenance.partition.internal[{slug(name)}]",
            f"Partition classifier internal split of {name}", ref[hold], ref[~hold], None,
            internal=True)
    return out
