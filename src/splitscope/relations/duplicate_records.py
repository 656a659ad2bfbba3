"""The duplicates layer's records (METHODS §1, §2, §6.1): one per predicate × boundary, the
copies inside each split, the deduplicated split, the comparison pairs and the transform
sensitivity, each with its title, unit, denominator and conclusion in words."""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, Population
from splitscope.features.options import FeatureParams
from splitscope.records import AuditRecord
from splitscope.records.ids import boundary_slug
from splitscope.relations.boundary_relations import BoundaryRelations
from splitscope.relations.identity import NO_BYTES_REASON, no_bytes, rate_breakdown, side
from splitscope.relations.near_predicates import (
    Settings,
    dihedral_base,
    near_predicate,
)
from splitscope.relations.predicates import (
    COMPARISON_PAIRS,
    DEDUP_SPLIT,
    EMBEDDING_PREDICATE,
    IDENTITY,
    IDENTITY_PREDICATES,
    LAYER,
    NEAR_DUPLICATE,
    NEEDS_BYTES,
    PIXEL_WITHIN,
    SHA256_WITHIN,
)

#: titles of the records of the predicates outside the near-duplicate table
TITLES = {
    "sha256": "Byte-identical copies (SHA-256, confirmed byte for byte)",
    "basename": "Basename matches (filename only)",
    "pixel_xxh128": "Decoded-pixel identity with different bytes (re-encodes)",
    EMBEDDING_PREDICATE: "Embedding cosine similarity, nearest counterpart (max cos ≥ τ)",
}


def title(pred: str) -> str:
    """A predicate's record title: the near-duplicate table's, else :data:`TITLES`, else its
    name in words."""
    found = near_predicate(pred)
    if found is not None:
        return found.title
    return TITLES.get(pred, pred.replace("_", " "))


def dedup_record(b: Boundary, dedup: pd.DataFrame, predicates, rows: pd.DataFrame
                  ) -> AuditRecord:
    """How many query rows the deduplicated split keeps (METHODS §5.6)."""
    mine = dedup[dedup["row"].isin(b.query.rows)]
    kept = int(mine["kept"].sum())
    q = rows[rows["row"].isin(b.query.rows)]
    arrays = bool(len(q)) and bool(no_bytes(q).all())  # copies inside: equal pixels
    within = PIXEL_WITHIN if arrays else SHA256_WITHIN
    return AuditRecord(
        id=f"{NEAR_DUPLICATE}.dedup_split.{boundary_slug(b)}",
        layer=LAYER, section=NEAR_DUPLICATE,
        title=f"Deduplicated {b.query.name} split",
        boundary=b.to_dict(),
        predicate={"name": DEDUP_SPLIT,
                   "params": {"removed_by": list(predicates) + [within]}},
        unit="row",
        numerator=kept,
        denominator=len(mine),
        scope=f"rows of {b.query.name} that no dedup predicate flags",
        conclusion=(f"{kept} of {len(mine)} rows of {b.query.name} remain after removing rows "
                    f"with a counterpart in {b.reference.name} under "
                    f"{', '.join(predicates)} and extra "
                    f"{'pixel-identical' if arrays else 'byte'} copies inside the split"),
        outputs=["dedup_splits"],
        details={"removed": len(mine) - kept},
    )


def within_record(copies: pd.DataFrame, pop: Population, arrays: bool = False,
                  assessed: int | None = None) -> AuditRecord:
    """Copies inside one population; ``assessed``: its rows with a digest. Where some lack
    one (unreadable or empty files) the record says how many it could assess and is
    ``partial`` (``not assessed`` when none): a zero found there is no measured zero."""
    rec = _within_record(copies, pop, arrays)
    if assessed is not None and assessed < pop.size:
        rec.coverage = {"assessed": int(assessed), "total": pop.size}
        rec.status = "not assessed" if assessed == 0 else "partial"
        rec.reason = (f"{pop.size - assessed} row(s) without a digest (unreadable or empty "
                      "files) are not assessed")
    return rec


def _within_record(copies: pd.DataFrame, pop: Population, arrays: bool) -> AuditRecord:
    n_rows = int(copies["n_rows"].sum()) if len(copies) else 0
    excess = n_rows - len(copies)
    b = Boundary(pop, pop)
    conflicting = int((copies["label_relation"] == "conflicting").sum()) if len(copies) else 0
    if arrays:  # every row of the population is a pixel array: copies are equal pixels
        return AuditRecord(
            id=f"{IDENTITY}.within_pixel_copies.{boundary_slug(b)}", layer=LAYER,
            section=IDENTITY,
            title=f"Pixel-identical copies within {pop.name}", boundary=b.to_dict(),
            predicate={"name": PIXEL_WITHIN, "params": {}}, unit="affected row",
            numerator=n_rows, denominator=pop.size,
            scope=f"rows of {pop.name} whose decoded pixels equal another row's of {pop.name} "
                  "(pixel arrays: byte identity does not apply)",
            conclusion=(f"{len(copies)} pixel-identity group(s) hold {n_rows} rows; {excess} "
                        f"row(s) are extra copies; {conflicting} group(s) carry conflicting "
                        "labels") if len(copies)
            else "no pixel-identical copies inside the population",
            details={"groups": len(copies), "extra_copies": excess,
                     "label_conflicting_groups": conflicting,
                     "not_applicable": {SHA256_WITHIN: NO_BYTES_REASON}})
    return AuditRecord(
        id=f"{IDENTITY}.within_copies.{boundary_slug(b)}",
        layer=LAYER, section=IDENTITY,
        title=f"Byte-identical copies within {pop.name}",
        boundary=b.to_dict(),
        predicate={"name": SHA256_WITHIN, "params": {}},
        unit="affected row",
        numerator=n_rows,
        denominator=pop.size,
        scope=f"rows of {pop.name} sharing their bytes with another row of {pop.name}",
        conclusion=(f"{len(copies)} identity group(s) hold {n_rows} rows; {excess} row(s) are "
                    f"extra copies; {conflicting} group(s) carry conflicting labels")
        if len(copies) else "no byte-identical copies inside the population",
        details={"groups": len(copies), "extra_copies": excess,
                 "label_conflicting_groups": conflicting},
    )


def breakdowns(q: pd.DataFrame, hit_rows) -> dict:
    out = {}
    for by in ("source", "label"):
        if by in q.columns and q[by].notna().any():
            out[f"by_{by}"] = rate_breakdown(q, hit_rows, by).to_dict("records")
    return out


def predicate_records(rel: BoundaryRelations, rows: pd.DataFrame, tau: float, radius: int,
             geometry: dict, control_info: dict | None) -> list[AuditRecord]:
    b = rel.boundary
    q = side(rows, b.query)
    n_query = len(q)
    class_support = {str(k): int(v) for k, v in
                     q["label"].astype("string").fillna("<NA>").value_counts().sort_index()
                     .items()}
    out = []
    for pred in rel.predicates():
        flags = rel.flags[pred]
        hit = flags.fillna(False).to_numpy(bool)
        assessed = int(flags.notna().sum())
        hit_rows = rel.flags.loc[hit, "row"].to_numpy(np.int64)
        section = IDENTITY if pred in IDENTITY_PREDICATES else NEAR_DUPLICATE
        params = predicate_params(pred, tau, radius, geometry)
        details = breakdowns(q, hit_rows)
        details["not_assessed"] = n_query - assessed
        inputs = []
        if pred == EMBEDDING_PREDICATE:
            e = rel.embedding
            params = {k: v for k, v in e["params"].items() if k != "tau_note"}
            details.update({"sweep": e["sweep"].to_dict("records"),
                            "undefined_query_rows": e["undefined_query_rows"],
                            "unmatched_query_rows": e["unmatched_query_rows"],
                            "undefined_reference_rows": e["undefined_reference_rows"],
                            "note": e["params"].get("tau_note")})
            if e["params"].get("source_sha256"):
                inputs = [{"path": e["params"]["source"], "sha256": e["params"]["source_sha256"]}]
        if pred == "sha256":
            c = rel.census
            g = c.groups
            details.update({
                "identity_groups": len(g),
                "renamed_groups": int(g["renamed"].sum()) if len(g) else 0,
                "label_disjoint_groups": int((g["label_relation"].isin(
                    ["disjoint", "conflicting"])).sum()) if len(g) else 0,
                "label_intersecting_groups": int((g["label_relation"].isin(
                    ["intersecting", "consistent"])).sum()) if len(g) else 0,
                "renamed_rows": int(c.affected["renamed"].sum()) if len(c.affected) else 0,
                "confirmation": c.confirmation,
            })
        if pred == "basename":
            rel_counts = rel.basenames["relation"].value_counts().to_dict()
            details["relation_counts"] = {str(k): int(v) for k, v in rel_counts.items()}
        entry = near_predicate(pred)
        if entry is not None and entry.details is not None:
            details.update(entry.details(rel.near))
        if dihedral_base(pred) is not None:
            only = rel.near.flags.get(f"{pred}_only")
            details["dihedral_only_rows"] = int(np.asarray(only, bool).sum()) \
                if only is not None else None
            var = rel.near.flags.get(f"{pred}_variant")
            if var is not None:
                vc = pd.Series(var)[hit].value_counts().to_dict()
                details["variants"] = {str(k): int(v) for k, v in vc.items() if k}
        if rel.near.notes:
            details["notes"] = dict(rel.near.notes)
        conclusion = (f"{int(hit.sum())} of {n_query} query rows ({hit.sum() / n_query:.2%}) "
                      f"have a counterpart under {pred}" if n_query else "no query rows")
        if control_info is not None:
            crate = control_info["rates"].get(pred)
            details["control"] = {"boundary": control_info["boundary"],
                                  "corpus": control_info["corpus"], **(crate or {})} \
                if crate else {"status": "not assessed on the control"}
            if crate and crate["unreliable"]:
                conclusion += (f"; UNRELIABLE for this modality: it flags {crate['rate']:.2%} of "
                               f"the clean control (bound {crate['bound']:.0%})")
        status, reason = "completed", None
        inapplicable = int(no_bytes(q).sum()) if pred in NEEDS_BYTES else 0
        numerator: int | None = int(hit.sum())
        if inapplicable:
            details["not_applicable"] = inapplicable
            details["not_assessed"] = n_query - assessed - inapplicable
        if inapplicable and inapplicable == n_query:
            status, numerator = "not applicable", None
            reason = NO_BYTES_REASON
            conclusion = f"{pred} does not apply: {NO_BYTES_REASON}"
        elif assessed == 0:
            status = "not assessed"
            reason = "no query row could be assessed (unreadable files or no reference)"
        elif assessed < n_query:
            status, reason = "partial", f"{n_query - assessed} query row(s) not assessed"
            if inapplicable:
                reason = (f"{inapplicable} query row(s) are pixel arrays without file bytes "
                          f"(not applicable); {n_query - assessed - inapplicable} not assessed")
        out.append(AuditRecord(
            id=f"{section}.{pred}.{boundary_slug(b)}",
            layer=LAYER, section=section,
            title=title(pred),
            boundary=b.to_dict(),
            predicate={"name": pred, "params": params},
            unit="affected query row",
            numerator=numerator,
            denominator=n_query,
            coverage={"assessed": assessed, "total": n_query},
            class_support=class_support,
            scope=f"query rows of {b.query.name} with a counterpart in {b.reference.name}",
            conclusion=conclusion,
            unresolved=None if section == IDENTITY else
            "a near-duplicate predicate describes similarity, not the cause; see the control "
            "rate and the transform sensitivity",
            status=status,
            reason=reason,
            inputs=inputs,
            details=details,
        ))
    return out


def predicate_params(pred: str, tau: float, radius: int, geometry: dict) -> dict:
    """The parameters a near-duplicate predicate's records carry (its dihedral variant's
    too); none for the identity predicates."""
    if pred in IDENTITY_PREDICATES:
        return {}
    settings = Settings(tau, radius, geometry)
    base = dihedral_base(pred)
    entry = base if base is not None else near_predicate(pred)
    params: dict = {"dihedral": base is not None}
    if entry is not None:
        params.update(entry.params(settings))
    return params


def comparison_records(rel: BoundaryRelations, rows: pd.DataFrame, thumbs, tau: float,
                        geometry: dict, seed: int) -> tuple[list[AuditRecord], pd.DataFrame | None]:
    """Same-modality comparison pairs (METHODS §2.6) for NCC-flagged pairs inside groups with
    frame indices; nothing when the release has no groups or frames."""
    from splitscope.relations.controls import comparison_pairs, median_difference
    from splitscope.relations.ncc import pair_rho
    from splitscope.relations.ssim import ssim_pairs

    if "group" not in rows or "frame" not in rows:
        return [], None
    q = side(rows, rel.boundary.query)
    if not (q["group"].notna() & q["frame"].notna()).any():
        return [], None
    pairs = rel.near.pairs
    flagged = pairs[pairs["rules"].astype(str).str.contains("ncc") & (pairs["variant"] ==
                                                                      "identity")]
    table = comparison_pairs(rows, flagged, reference_rows=rel.boundary.reference.rows)
    if "thumb_index" in rows:
        has = rows.set_index("row")["thumb_index"]
        ok = (has.reindex(table["query_row"]).to_numpy() >= 0) & \
             (has.reindex(table["reference_row"]).to_numpy() >= 0)
        table = table[ok].reset_index(drop=True)
    if len(table):
        a = np.asarray(thumbs(table["query_row"].to_numpy(np.int64)))
        b = np.asarray(thumbs(table["reference_row"].to_numpy(np.int64)))
        idx = np.arange(len(table))
        table["rho"] = pair_rho(a, b, idx, idx)
        table["ssim"] = ssim_pairs(a, b)
    else:
        table["rho"] = pd.Series(dtype=float)
        table["ssim"] = pd.Series(dtype=float)
    table.insert(0, "boundary", rel.boundary.name)
    results = {f"{m}_{c}": median_difference(table, measure=m, control=c, seed=seed)
               for m in ("rho", "ssim") for c in ("adjacent", "distant")}
    main = results["ssim_adjacent"]
    status = "completed" if main["status"] == "completed" else "not assessed"
    rec = AuditRecord(
        id=f"{NEAR_DUPLICATE}.comparison_pairs.{boundary_slug(rel.boundary)}",
        layer=LAYER, section=NEAR_DUPLICATE,
        title="Flagged pairs vs same-group comparison pairs (adjacent and distant frames)",
        boundary=rel.boundary.to_dict(),
        predicate={"name": COMPARISON_PAIRS, "params": {"tau": tau, "distant_gap": 500,
                                                          **geometry}},
        unit="pair",
        numerator=int((table["kind"] == "flagged").sum()) if len(table) else 0,
        denominator=None,
        status=status,
        reason=None if status == "completed" else main.get("reason"),
        conclusion=(f"median SSIM of flagged pairs minus adjacent controls: "
                    f"{main['difference']:.3f}") if main["status"] == "completed" else None,
        details={"contrasts": results},
    )
    return [rec], table


def transform_records(rows: pd.DataFrame, bounds, n: int, seed: int, tau: float, radius: int,
                       geometry: dict) -> tuple[list[AuditRecord], pd.DataFrame | None]:
    """Transform sensitivity (METHODS §2.7) on a seeded sample of reference-side images."""
    from splitscope.relations.transforms import transform_sensitivity

    ref_rows = np.unique(np.concatenate([b.reference.rows for b in bounds]))
    sub = rows[rows["row"].isin(ref_rows)]
    if "status" in sub:
        sub = sub[sub["status"].astype("string") == "ok"]
    files = sub["file"].dropna().astype(str).tolist()
    if not files:  # every reference file unreadable (empty, say): nothing to transform
        reason = "no reference-side image file could be read, so none can be transformed"
        return [AuditRecord(
            id=f"{NEAR_DUPLICATE}.transform_sensitivity", layer=LAYER, section=NEAR_DUPLICATE,
            title="Transform sensitivity", unit="transformed image",
            predicate={"name": "transform_sensitivity", "params": {"sample": n, "seed": seed}},
            status="not applicable", reason=reason, conclusion=f"not measured: {reason}",
        )], None
    summary, _ = transform_sensitivity(files, n=n, seed=seed, tau=tau, radius=radius,
                                       thumb_size=int(geometry.get("thumb_size",
                                                                   FeatureParams.thumb_size)),
                                       interpolation=str(geometry.get(
                                           "interpolation", FeatureParams.interpolation)))
    recs = []
    for pred, part in summary.groupby("predicate", sort=False):
        rates = {r["transform"]: {"passed": int(r["passed"]), "assessed": int(r["assessed"]),
                                  "pass_rate": r["pass_rate"]} for _, r in part.iterrows()}
        recs.append(AuditRecord(
            id=f"{NEAR_DUPLICATE}.transform_sensitivity.{pred}",
            layer=LAYER, section=NEAR_DUPLICATE,
            title=f"Transform sensitivity of {pred}",
            predicate={"name": pred, "params": predicate_params(pred, tau, radius, geometry)},
            unit="transformed image",
            scope="a seeded sample of reference-side images; describes the tested transforms, "
                  "not recall",
            details={"pass_rates": rates, "sample": summary.attrs.get("sample"),
                     "skipped": summary.attrs.get("skipped")},
        ))
    return recs, summary
