"""The provenance layer (METHODS §4): what a file says without its anatomy.

:func:`audit_provenance` needs a scan (header fields, image statistics and thumbnails); it
reports the header-only probe, the image-statistics probe, the source–label association and the
partition classifier, as a :class:`splitscope.records.LayerResult` whose tables are keyed by
the manifest's ``row``. :func:`audit_quality` reports the image-quality flags (§4.6). A check
that cannot run on the input becomes a record with status ``not applicable`` (or ``not
assessed``) and the reason. :class:`ProvenanceLayer` and :class:`QualityLayer` run them in the
audit.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import pandas as pd

from splitscope.boundary import Boundary, boundaries_or_default
from splitscope.errors import InputError
from splitscope.provenance.header_probe import FIT_MAX_ROWS
from splitscope.provenance.predicates import METRICS as PROVENANCE_METRICS
from splitscope.provenance.predicates import QUALITY_METRICS
from splitscope.provenance.reading import RULES as PROVENANCE_RULES
from splitscope.provenance.reading import VERDICTS as PROVENANCE_VERDICTS
from splitscope.provenance.stats import Together, run_steps, single_threaded
from splitscope.records import AuditRecord, LayerResult, Uncertainty, not_run_record
from splitscope.records.format import percent
from splitscope.records.ids import slug
from splitscope.records.inputs import release_inputs

__all__ = ["ProvenanceLayer", "QualityLayer", "audit_provenance", "audit_quality"]

#: a step generator (:func:`~splitscope.provenance.stats.run_steps`) returning a layer's part
Steps = Generator[Any, Any, LayerResult]


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not np.isfinite(x) else percent(x)


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
    image_stats: bool = True,
    association: bool = True,
    partition: bool = True,
    embeddings: Any = None,
    classifier: str = "logistic",
    internal_share: float = 0.2,
    max_partition_rows: int | None = None,
    importance_repeats: int = 5,
    include_name_fields: bool = False,
    fit_max_rows: int | None = FIT_MAX_ROWS,
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
    fit_max_rows : int, optional
        Rows each model of the header and image-statistics probes and of the partition
        classifier is fit on at most (a seeded sample stratified by class, or by side, and
        spread over groups; every held-out row is still scored; recorded as ``fit_max_rows``
        and ``fit_rows``); ``None`` fits on all rows.
    embeddings : ndarray or path, optional
        Vectors for the partition classifier instead of the thumbnail features.
    """
    rows, sc = _scan_rows(scan)
    bounds = boundaries_or_default(rows, boundaries)
    inputs = release_inputs(rows)
    result = LayerResult()
    has_label = "label" in rows.columns and rows["label"].notna().any()
    if bounds:
        pool_ids = np.unique(np.concatenate([np.r_[b.query.rows, b.reference.rows]
                                             for b in bounds]))
        pool = rows[rows["row"].isin(pool_ids)]
    else:
        pool = rows
    # rows that name one file (with one label, on one side) count once (METHODS §4.7): the
    # probes and the partition classifier run on one row per file and side, and their
    # row tables are expanded to every row at the end
    distinct = _distinct_content(rows, pool, bounds) if embeddings is None else None
    census_pool = pool
    if distinct is not None:
        rows, pool = distinct["rows"], distinct["pool"]
    # the probes and the partition classifier are step generators run together, so that all
    # their fits share the worker processes (run_steps); records keep the order below
    steps: dict[str, Any] = {}
    if header:
        steps["header"] = _header_records(rows, pool, bounds, has_label, seed=seed,
                                          n_resamples=n_resamples, folds=folds,
                                          repeats=importance_repeats,
                                          include_name_fields=include_name_fields,
                                          inputs=inputs, fit_max_rows=fit_max_rows)
    if image_stats:
        steps["image_stats"] = _image_stats_records(rows, pool, bounds, has_label, seed=seed,
                                                    n_resamples=n_resamples, folds=folds,
                                                    repeats=importance_repeats, inputs=inputs,
                                                    fit_max_rows=fit_max_rows)
    if partition:
        steps["partition"] = _partition_records(
            rows, sc, bounds, embeddings, seed=seed, n_resamples=n_resamples, folds=folds,
            classifier=classifier, internal_share=internal_share, max_rows=max_partition_rows,
            inputs=inputs, fit_max_rows=fit_max_rows,
            distinct=None if distinct is None else distinct["side_ids"])
    with single_threaded(1):
        done = dict(zip(steps, run_steps(list(steps.values()))))
    if association:  # a census of the rows, not a fit
        done["association"] = _association_record(census_pool, inputs)
    for part in ("header", "image_stats", "association", "partition"):
        if part in done:
            result.extend(done[part])
    if distinct is not None:
        _expand_to_rows(result, distinct)
    return result


def _file_key(table: pd.DataFrame, *columns: str) -> pd.Series:
    """One key per file and ``columns`` (NA for a row without a file: a key of its own)."""
    key = table["file"].astype("string")
    for c in columns:
        key = key + "\0" + (table[c].astype("string").fillna("\0NA") if c in table
                              else "")
    return key


def _first_of(table: pd.DataFrame, key: pd.Series) -> np.ndarray:
    """Per row of ``table`` (in ``row`` order), the ``row`` of the first row with its key."""
    ids = table["row"].to_numpy(np.int64)
    codes = pd.factorize(key)[0]
    seen = codes >= 0
    _, first = np.unique(codes[seen], return_index=True)
    return np.where(seen, ids[seen][first][np.maximum(codes, 0)], ids)


def _distinct_content(rows: pd.DataFrame, pool: pd.DataFrame, bounds) -> dict | None:
    """One row per file for the probes (METHODS §4.7), or None when no two rows share one:
    ``pool`` one row per file and label (the within-pool probe), ``rows`` one per file,
    label and split (the cross splits and the partition classifier), each the file's first
    row; ``side_ids`` maps a side's rows to those; ``pool_rep`` and ``side_rep`` map every
    row to its first (for expanding the row tables). When a boundary's side does not hold
    all rows of its split that name a file, the rows are used as they are."""
    if "file" not in rows.columns or not rows["file"].duplicated().any():
        return None
    rows = rows.sort_values("row", kind="stable")
    side_rep = pd.Series(_first_of(rows, _file_key(rows, "label", "split")),
                         index=rows["row"].to_numpy(np.int64))
    pool = pool.sort_values("row", kind="stable")
    pool_rep = pd.Series(_first_of(pool, _file_key(pool, "label")),
                         index=pool["row"].to_numpy(np.int64))
    if (side_rep.index == side_rep.to_numpy()).all() and \
            (pool_rep.index == pool_rep.to_numpy()).all():
        return None
    members = side_rep.groupby(side_rep.to_numpy()).size()
    for b in bounds:
        for population in (b.query, b.reference):
            reps = np.unique(side_rep.reindex(population.rows).to_numpy())
            if int(members.reindex(reps).sum()) != population.size:
                return None  # a side splits the rows of one file: keep every row

    def side_ids(ids: np.ndarray) -> np.ndarray:
        return np.unique(side_rep.reindex(np.asarray(ids, np.int64)).to_numpy(np.int64))

    firsts = side_rep.index.to_numpy() == side_rep.to_numpy()
    return {"rows": rows[firsts], "pool": pool[pool_rep.index.to_numpy() == pool_rep.to_numpy()],
            "side_ids": side_ids, "side_rep": side_rep, "pool_rep": pool_rep,
            "paths": rows.set_index("row")["path"],
            "counts": {"rows": len(rows), "files_per_side": int(firsts.sum()),
                       "pool_rows": len(pool), "pool_files": len(pool_rep.unique())}}


def _expand_to_rows(result: LayerResult, distinct: dict) -> None:
    """Each row table of the probes and the partition classifier (keyed by ``row``) gets a
    line for every row of each file right after its first row's, and each record says that
    rows naming one file counted once."""
    for name, table in list(result.tables.items()):
        if "row" not in table.columns or name == "source_label":
            continue
        rep = distinct["pool_rep"] if name.endswith("_within_pool") else distinct["side_rep"]
        members = pd.DataFrame({"row": rep.index.to_numpy(np.int64),
                                "first": rep.to_numpy(np.int64)})
        order = pd.DataFrame({"first": table["row"].to_numpy(np.int64),
                              "_at": np.arange(len(table))})
        lines = order.merge(members, on="first", how="left", sort=False)
        lines = lines.sort_values(["_at", "row"], kind="stable")
        out = table.iloc[lines["_at"].to_numpy()].reset_index(drop=True)
        out["row"] = lines["row"].to_numpy(np.int64)
        if "path" in out.columns:
            out["path"] = pd.array(distinct["paths"].reindex(out["row"]).to_numpy(),
                                   dtype=table["path"].dtype)
        result.tables[name] = out
    note = {"rule": "rows naming the same file with the same label (and split, on a "
                    "boundary's side) count once: fitted and scored on the file's first row; "
                    "the row tables list every row", **distinct["counts"]}
    for record in result.records:
        if record.layer == "provenance" and record.id != "provenance.source_label" \
                and record.status in ("completed", "partial"):
            record.details = {**(record.details or {}), "distinct_files": note}


def _caught(steps):
    """A step generator's return value and None, or None and the InputError it raised (the
    record then says why the check did not run)."""
    try:
        return (yield from steps), None
    except InputError as exc:
        return None, exc


def _ba_uncertainty(ba: dict) -> Uncertainty:
    return Uncertainty(kind=ba["kind"], level=ba["level"], low=ba["low"], high=ba["high"],
                       detail={"undefined_resamples": ba["undefined_resamples"],
                               "seed": ba["seed"]})


def _probe_records(out: LayerResult, rows, pool, bounds, *, name: str, title: str,
                   probe: str, within, cross, scored, inputs, one_side_reason=None,
                   single_field: bool = False) -> Steps:
    """Step generator (:func:`~splitscope.provenance.stats.run_steps`) of the within-pool
    record and one cross-split record per boundary of one probe (the header probe's protocol,
    METHODS §4.2 and §4.5), with their tables ``<name>_within_pool``, ``<name>_importance``
    (with ``single_field``, ``<name>_single_field``) and ``<name>_cross_<boundary>``; the
    within-pool folds and every cross split are run together.

    ``within(labelled)`` and ``cross(train, test)`` give the probe's step generators (whose
    :class:`~splitscope.errors.InputError` becomes a not-applicable record); ``scored(frame)`` marks the
    rows that have its features (labelled rows without them are counted as unscored);
    ``one_side_reason(b)``, when given, is why a boundary with an empty side is not
    applicable (else the probe itself says what it cannot fit)."""
    wid = f"provenance.{name}.within_pool"
    labelled = pool["label"].notna()
    within_rows = pool[labelled & scored(pool)]
    unscored = int((labelled & ~scored(pool)).sum())
    plan = []  # per boundary: (boundary, record id, query rows, unscored, sides) or a record
    labelled, ok = rows["label"].notna(), scored(rows)
    for b in bounds:
        rid = f"provenance.{name}.cross_split[{slug(b.name)}]"
        tr = rows[rows["row"].isin(b.reference.rows) & labelled & ok]
        in_query = rows["row"].isin(b.query.rows) & labelled
        te = rows[in_query & ok]
        if one_side_reason is not None and (tr.empty or te.empty):
            plan.append(not_run_record("provenance", "not applicable", one_side_reason(b), id=rid, title=f"{title}: cross split", inputs=inputs))
        else:
            plan.append((b, rid, int((in_query & ~ok).sum()), tr, te))
    runs = [p for p in plan if isinstance(p, tuple)]
    (wp, failed), *crossed = yield Together(
        [_caught(within(within_rows)), *[_caught(cross(tr, te)) for *_, tr, te in runs]])
    if failed is not None:
        out.records.append(not_run_record("provenance", "not applicable", str(failed), id=wid, title=title, inputs=inputs))
        return out
    out.records.append(_probe_record(wp, wid, f"{title}: within pool", None, inputs,
                                     probe=probe, unscored=unscored))
    out.tables[f"{name}_within_pool"] = wp.predictions
    out.tables[f"{name}_importance"] = wp.importances
    if single_field and wp.single_field is not None:
        out.tables[f"{name}_single_field"] = wp.single_field
    results = iter(crossed)
    for p in plan:
        if not isinstance(p, tuple):
            out.records.append(p)
            continue
        b, rid, unscored_b, _, _ = p
        cs, failed = next(results)
        if failed is not None:
            out.records.append(not_run_record("provenance", "not applicable", str(failed), id=rid, title=f"{title}: cross split", inputs=inputs))
            continue
        out.records.append(_probe_record(cs, rid, f"{title}: fit on {b.reference.name}, "
                                         f"score {b.query.name}", b, inputs, within=wp,
                                         probe=probe, unscored=unscored_b))
        out.tables[f"{name}_cross_{slug(b.name)}"] = cs.predictions
    return out


def _header_records(rows, pool, bounds, has_label, *, seed, n_resamples, folds, repeats,
                    include_name_fields, inputs, fit_max_rows=FIT_MAX_ROWS) -> Steps:
    from splitscope.manifest.build import CONTENT_ARRAY, content_of
    from splitscope.provenance.header_probe import (
        cross_split_steps,
        header_columns,
        within_pool_steps,
    )

    out = LayerResult()
    title = "Header-only probe"
    wid = "provenance.header_probe.within_pool"
    if not has_label:
        out.records.append(not_run_record("provenance", "not applicable", "no labels in the release", id=wid, title=title, inputs=inputs))
        return out
    if not any(c in rows.columns for c in header_columns()):
        out.records.append(not_run_record("provenance", "not assessed", "no header features: scan the release first (splitscope scan)", id=wid, title=title, inputs=inputs))
        return out
    arrays = content_of(rows).eq(CONTENT_ARRAY).to_numpy(bool)
    if arrays.all():
        out.records.append(not_run_record("provenance", "not applicable", "no file headers: the rows are pixel arrays (an .npz or in-memory arrays), which carry no encoded file to probe", id=wid, title=title, inputs=inputs))
        return out
    if arrays.any():  # only rows with file bytes have header fields
        rows = rows[~arrays]
        pool = pool[~content_of(pool).eq(CONTENT_ARRAY).to_numpy(bool)]
    opts = {"seed": seed, "n_resamples": n_resamples, "importance_repeats": repeats,
            "include_name_fields": include_name_fields, "fit_max_rows": fit_max_rows}
    return (yield from _probe_records(
        out, rows, pool, bounds, name="header_probe", title=title, probe="header",
        within=lambda t: within_pool_steps(t, folds=folds, **opts),
        cross=lambda tr, te: cross_split_steps(tr, te, **opts),
        scored=lambda t: pd.Series(True, index=t.index), inputs=inputs, single_field=True,
        one_side_reason=(lambda b: f"no file headers on one side of {b.name}: its rows are "
                         "pixel arrays") if arrays.any() else None))


def _image_stats_records(rows, pool, bounds, has_label, *, seed, n_resamples, folds, repeats,
                         inputs, fit_max_rows=FIT_MAX_ROWS) -> Steps:
    """The image-statistics probe (METHODS §4.5): the header probe's protocol on intensity
    statistics."""
    from splitscope.provenance.image_stats_probe import (
        IMAGE_STATS_FEATURES,
        image_stats_cross_split_steps,
        image_stats_within_pool_steps,
    )

    out = LayerResult()
    title = "Image-statistics probe"
    wid = "provenance.image_stats_probe.within_pool"
    if not has_label:
        out.records.append(not_run_record("provenance", "not applicable", "no labels in the release", id=wid, title=title, inputs=inputs))
        return out
    if not all(c in rows.columns for c in IMAGE_STATS_FEATURES):
        out.records.append(not_run_record("provenance", "not assessed", "no image statistics: scan the release with this version (splitscope scan)", id=wid, title=title, inputs=inputs))
        return out
    opts = {"seed": seed, "n_resamples": n_resamples, "importance_repeats": repeats,
            "fit_max_rows": fit_max_rows}
    return (yield from _probe_records(
        out, rows, pool, bounds, name="image_stats_probe", title=title,
        probe="image statistics",
        within=lambda t: image_stats_within_pool_steps(t, folds=folds, **opts),
        cross=lambda tr, te: image_stats_cross_split_steps(tr, te, **opts),
        scored=lambda t: t["intensity_mean"].notna(), inputs=inputs))


#: header fields that only measure the compressed size, which tracks image content
SIZE_FIELDS = ("file_size", "bytes_per_pixel")


def _carried_by(r, top: list[str]) -> str:
    """What carries a within-pool header signal, said without overclaiming: when only the
    compressed size carries it, the fields that vary and those constant are named, since a
    file's size follows its content and is no construction cue by itself."""
    varying = ", ".join(r.features) or "none"
    constant = sorted(k for k, v in r.dropped.items() if str(v).startswith("constant"))
    if top and all(f in SIZE_FIELDS for f in top):
        same = (f"; {', '.join(constant[:8])}{' …' if len(constant) > 8 else ''} are the same "
                "for every file") if constant else ""
        return (f"only the compressed size ({', '.join(top)}) carries it (fields that vary: "
                f"{varying}{same}); compressed size tracks image content, so this alone is no "
                "evidence of a construction shortcut")
    return (f"a construction shortcut, carried by {', '.join(top) or 'no single field'} "
            f"(fields that vary: {varying})")


def _probe_record(r, rid, title, b, inputs, within=None, probe="header",
                  unscored=0) -> AuditRecord:
    """The record of one probe evaluation; ``probe`` is ``header`` (§4.2) or ``image
    statistics`` (§4.5); ``unscored`` labelled rows had no features (not decoded)."""
    ba = r.balanced_accuracy
    correct = int((r.predictions["label"] == r.predictions["predicted"]).sum())
    top = r.top_features(5)
    above = ba["low"] is not None and ba["low"] > r.chance
    header = probe == "header"
    what = "header features" if header else "image statistics"
    model = "header-only model" if header else "image-statistics model"
    ci = f"{ba['estimate']:.3f} (95% CI {ba['low']:.3f}–{ba['high']:.3f})"
    if not r.features:
        conclusion = (f"no {'header field' if header else 'image statistic'} varies across "
                      f"these rows, so {'headers' if header else 'they'} carry no label signal "
                      "here; the model predicts the majority class (balanced accuracy "
                      f"{ba['estimate']:.3f}, chance {r.chance:.3f})")
    elif r.kind == "within pool":
        if not above:
            conclusion = (f"{what} do not predict the label above chance within the pool "
                          f"(balanced accuracy {ba['estimate']:.3f}, 95% CI {ba['low']:.3f}–"
                          f"{ba['high']:.3f}, chance {r.chance:.3f})")
        elif header:
            conclusion = (f"header features alone predict the label within the pool: balanced "
                          f"accuracy {ci} vs chance {r.chance:.3f}; {_carried_by(r, top)}")
        else:
            conclusion = (f"intensity statistics alone, without anatomy, predict the label "
                          f"within the pool: balanced accuracy {ci} vs chance {r.chance:.3f}, "
                          f"carried by {', '.join(top) or 'no single statistic'}: an "
                          "acquisition shortcut (exposure, processing, focus, padding differ "
                          "by class) unless the finding itself changes these statistics")
    else:
        w = within.balanced_accuracy["estimate"] if within is not None else None
        conclusion = (f"fit on the reference side, the {model} scores balanced "
                      f"accuracy {ci} on the query side vs chance {r.chance:.3f}"
                      + (f"; within pool it scores {w:.3f} — a gap of {w - ba['estimate']:+.3f} "
                         "(within ≫ cross means pooling and re-splitting would reward the "
                         "shortcut)" if w is not None else ""))
    total = r.n_rows + unscored
    return AuditRecord(
        id=rid, layer="provenance", title=title,
        boundary=b.to_dict() if b is not None else None,
        predicate={"name": f"{'header-only' if header else 'image-statistics'} probe "
                           f"({r.kind})",
                   "params": {**r.params, "features": len(r.features),
                              "dropped": r.dropped,
                              **({} if header else {"statistics": r.params.get("features")})}},
        unit="row (case)", denominator=r.n_rows,
        coverage={"traceable": r.n_rows, "total": total,
                  "share": r.n_rows / total if total else None},
        class_support=r.class_support, estimate=ba["estimate"],
        uncertainty=_ba_uncertainty(ba),
        scope=(f"{r.n_rows} labelled rows scored"
               + (f" ({unscored} labelled row(s) not decoded, so without statistics, left out)"
                  if unscored else "")
               + (f"; {'each fold' if r.kind == 'within pool' else 'the'} model fit on a "
                  f"seeded sample of at most {r.params['fit_max_rows']:,} training rows "
                  "(params.fit_rows)" if r.params.get("fit_sample") else "")
               + "; the estimate is balanced accuracy (mean recall over classes), which no "
               "single count over the rows gives"),
        conclusion=conclusion,
        unresolved=("permutation importance understates fields whose information another "
                    "field duplicates (e.g. a quality estimate and its table)" if header else
                    "global intensity statistics can also follow the finding itself (an "
                    "opacity brightens a radiograph); permutation importance understates "
                    "statistics that duplicate one another (mean and percentiles)"),
        status="completed",
        details={"chance": r.chance, "top_fields": top,
                 "importances": r.importances.head(20).to_dict(orient="records"),
                 "single_field": ([] if r.single_field is None else
                                  r.single_field.head(20).to_dict(orient="records")),
                 "accuracy": correct / r.n_rows if r.n_rows else None,
                 **({} if not unscored else {"unscored_rows": unscored})})


def _association_record(pool, inputs) -> LayerResult:
    from splitscope.provenance.association import source_label_association

    out = LayerResult()
    rid, title = "provenance.source_label", "Source–label association"
    if "source" not in pool.columns or pool["source"].nunique() < 2:
        out.records.append(not_run_record("provenance", "not applicable", "fewer than two sources in the release", id=rid, title=title, inputs=inputs))
        return out
    if "label" not in pool.columns or pool["label"].nunique() < 2:
        out.records.append(not_run_record("provenance", "not applicable", "fewer than two labels in the release", id=rid, title=title, inputs=inputs))
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
                       internal_share, max_rows, inputs,
                       fit_max_rows=FIT_MAX_ROWS, distinct=None) -> Steps:
    """Step generator of the partition classifier's records, one per boundary and one per
    internal split of a reference side; the content features are computed by this call.
    ``distinct`` maps a side's rows to one row per file (METHODS §4.7)."""
    side_ids = distinct or (lambda ids: ids)
    from splitscope.provenance.partition import (
        content_features,
        internal_split,
        load_embeddings,
        partition_steps,
    )

    out = LayerResult()
    title = "Partition classifier"
    if not bounds:
        out.records.append(not_run_record("provenance", "not applicable", "no boundary (train/test split) to classify", id="provenance.partition", title=title, inputs=inputs))
        return _ready(out)
    if sc is None and embeddings is None:
        out.records.append(not_run_record("provenance", "not assessed", "no thumbnails (pass a scan) and no embeddings", id="provenance.partition", title=title, inputs=inputs))
        return _ready(out)
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

    def prepare(rid, name, q_ids, r_ids, b, internal=False):
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
        part_rows = rows.iloc[row_pos.get_indexer(ids[ok])]
        steps = partition_steps(X, is_test[ok], rows=part_rows,
                                groups=part_rows["group"].to_numpy() if "group" in part_rows
                                else None,
                                name=name, folds=folds, seed=seed, n_resamples=n_resamples,
                                classifier=classifier, fit_max_rows=fit_max_rows)
        return steps, (rid, name, ids, ok, sub, b, internal)

    def record(r, rid, name, ids, ok, sub, b, internal):
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
            unit="row (case)", denominator=r.n_test + r.n_train,
            coverage={"traceable": r.n_test + r.n_train - r.params["unscored_rows"],
                      "total": len(ids), "share": (len(ids) - unscored) / len(ids)},
            class_support={str(x.label): int(x.train_rows + x.test_rows)
                           for x in r.auc_by_class.itertuples()},
            estimate=auc["estimate"],
            uncertainty=Uncertainty(kind=auc["kind"], level=auc["level"], low=auc["low"],
                                    high=auc["high"]),
            scope=(f"{r.n_test} query-side and {r.n_train} reference-side rows with content "
                   f"features{'' if sub is None else f' (seeded subsample of {sub})'}; the "
                   "estimate is an AUC over rows classified"
                   + (f"; each fold's model fit on a seeded sample of at most "
                      f"{r.params['fit_max_rows']:,} training rows (params.fit_rows)"
                      if r.params.get("fit_sample") else "")),
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

    # features are computed here, in order, outside the fits' thread limit
    runs = [prepare(f"provenance.partition[{slug(b.name)}]", f"Partition classifier {b.name}",
                    side_ids(b.query.rows), side_ids(b.reference.rows), b) for b in bounds]
    refs = {b.reference.name: b for b in bounds}
    for name, b in refs.items():
        ref = side_ids(b.reference.rows)
        if len(ref) < 10:
            continue
        hold = internal_split(len(ref), internal_share, seed,
                              rows.iloc[row_pos.get_indexer(ref)])
        runs.append(prepare(f"provenance.partition.internal[{slug(name)}]",
                            f"Partition classifier internal split of {name}", ref[hold],
                            ref[~hold], None, internal=True))

    def steps():
        done = yield Together([_caught(steps) for steps, _ in runs])
        for (r, failed), (_, about) in zip(done, runs):
            if failed is not None:
                rid, name = about[:2]
                out.records.append(not_run_record("provenance", "not applicable", str(failed), id=rid, title=name, inputs=inputs))
            else:
                record(r, *about)
        return out

    return steps()


def _ready(value):
    """A step generator with nothing to run: it returns ``value``."""
    return value
    yield  # makes this function a generator


def audit_quality(scan: Any, params: Any = None) -> LayerResult:
    """Image-quality records and the per-row list ``quality`` (METHODS §4.6): one record per
    flag (rate over the assessed rows, with every split × class cell in ``details`` and in the
    conclusion) and one record of each flag's association with the label.

    Parameters
    ----------
    scan : Scan or DataFrame
        A finished scan, or its row table (``Scan.rows()``).
    params : QualityParams, optional
        Thresholds (default :class:`splitscope.provenance.quality.QualityParams`).
    """
    from splitscope.provenance.quality import (
        FLAGS,
        QualityParams,
        flag_label_association,
        quality_rates,
        quality_table,
    )

    rows, _ = _scan_rows(scan)
    inputs = release_inputs(rows)
    params = params or QualityParams()
    out = LayerResult()
    if "intensity_mean" not in rows.columns:
        out.records.append(not_run_record("quality", "not assessed", "no image statistics: scan the release with this version (splitscope scan)", id="quality.flags", title="Image quality flags", inputs=inputs))
        return out
    table, rules = quality_table(rows, params)
    rates = quality_rates(table)
    out.tables["quality"] = table
    labels = table["label"].astype("string")
    for f in FLAGS:
        col = table[f.name]
        assessed = int(col.notna().sum())
        flagged = int(col.fillna(False).sum())
        rule = rules[f.name]["rule"]
        cells = rates[rates["flag"] == f.name]
        said = "; ".join(
            f"{percent(c.rate)} of {c.split}/{c.label} ({c.flagged:,} of {c.assessed:,} rows)"
            if c.assessed else f"{c.split}/{c.label}: no row assessed"
            for c in cells.itertuples())
        rid = f"quality.{f.name}"
        status = "completed" if assessed == len(table) else "partial"
        if not assessed:
            out.records.append(not_run_record("quality", "not applicable", f"no row has the score of this flag ({f.score})", id=rid, title=f"Image quality: {f.name.replace('_', ' ')}", inputs=inputs))
            continue
        out.records.append(AuditRecord(
            id=rid, layer="quality", title=f"Image quality: {f.name.replace('_', ' ')} ({rule})",
            predicate={"name": f"quality_{f.name}",
                       "params": {**params.to_dict(), **{k: v for k, v in rules[f.name].items()
                                                        if k != "rule"}, "rule": rule}},
            unit="row", numerator=flagged, denominator=assessed,
            coverage={"traceable": assessed, "total": len(table),
                      "share": assessed / len(table) if len(table) else None},
            class_support={str(k): int(v) for k, v in
                           labels.fillna("(no label)").value_counts().sort_index().items()},
            scope=(f"every row of the release whose score is defined ({assessed:,} of "
                   f"{len(table):,}); rates per split × class in details.by_split_class"),
            conclusion=f"{flagged:,} of {assessed:,} rows are {f.name.replace('_', ' ')} "
                       f"({rule}): {said}",
            unresolved=("a flag describes the stored image, not whether it is unusable for "
                        "diagnosis; thresholds are stated, not tuned to this release"),
            status=status,
            reason=None if status == "completed" else
            f"{len(table) - assessed:,} row(s) without the score (not decoded, or no size)",
            inputs=inputs, outputs=["quality"],
            details={"score": f.score, "by_split_class": cells.drop(columns="flag")
                     .to_dict(orient="records")}))
    out.records.append(_quality_association_record(table, params, inputs,
                                                    flag_label_association))
    return out


def _quality_association_record(table, params, inputs, association) -> AuditRecord:
    rid, title = "quality.flag_label_association", "Image quality flags × label (Cramér's V)"
    if table["label"].dropna().nunique() < 2:
        return not_run_record("quality", "not applicable", "fewer than two labels in the release", id=rid, title=title, inputs=inputs)
    assoc = association(table)
    v = assoc["cramers_v"].astype(float)
    measured = assoc[np.isfinite(v)]
    rows = int(assoc["rows"].max()) if len(assoc) else 0
    if measured.empty:
        best, conclusion = None, ("no flag varies across the labelled rows, so no flag can "
                                  "tell the classes apart")
    else:
        best = float(measured["cramers_v"].max())
        strong = measured[measured["cramers_v"] >= params.association_v] \
            .sort_values("cramers_v", ascending=False)
        if strong.empty:
            top = measured.loc[measured["cramers_v"].idxmax()]
            conclusion = (f"no flag's rate differs strongly between classes (largest Cramér's "
                          f"V {top['cramers_v']:.3f}, {top['flag']}; shortcut hint from V ≥ "
                          f"{params.association_v:g})")
        else:
            conclusion = "; ".join(
                f"{r.flag} differs strongly between classes (Cramér's V {r.cramers_v:.3f}: "
                + ", ".join(f"{percent(x)} of {lab}" for lab, x in r.rate_by_label.items())
                + ")" for r in strong.itertuples()) + (
                "; a model can use such a flag as a shortcut: check whether the class "
                "difference is the finding or how the images were made")
    return AuditRecord(
        id=rid, layer="quality", title=title,
        predicate={"name": "quality_flag_label_association",
                   "params": {"statistic": "Cramér's V, Pearson χ² without continuity "
                              "correction", "association_v": params.association_v}},
        unit="row", denominator=rows,
        coverage={"traceable": rows, "total": len(table),
                  "share": rows / len(table) if len(table) else None},
        estimate=best,
        uncertainty=Uncertainty(kind="none: a descriptive statistic of the census", level=None),
        scope="labelled rows whose flag is defined, per flag; the estimate is the largest V",
        conclusion=conclusion,
        unresolved="association is not causation: a class may legitimately differ in quality",
        status="completed", inputs=inputs, outputs=["quality"],
        details={"flags": assoc.to_dict(orient="records")})


class QualityLayer:
    """Image-quality flags per split × class, and their association with the label
    (METHODS §4.6)."""

    name = "quality"
    order = 35
    metrics = tuple(QUALITY_METRICS.values())  # --fail-on (splitscope.audit.conditions)
    title = "Image quality flags"

    def run(self, context) -> LayerResult:
        return audit_quality(context.scan, context.options.quality)


class ProvenanceLayer:
    """Header-only probe, source–label association and partition classifier on the
    boundaries between two sides; the within-pool probe always (METHODS §4)."""

    name = "provenance"
    order = 30
    metrics = tuple(PROVENANCE_METRICS.values())  # --fail-on (splitscope.audit.conditions)
    rules = PROVENANCE_RULES  # "what this means" (splitscope.audit.meaning)
    verdicts = PROVENANCE_VERDICTS  # verdict lines (splitscope.audit.verdicts)

    def run(self, context) -> LayerResult:
        run = context.options.run
        return audit_provenance(context.scan, context.split_boundaries, seed=run.seed,
                                n_resamples=run.resamples,
                                folds=context.options.provenance.folds)


#: the layers of this package (see :mod:`splitscope.audit.protocol`)
LAYERS = [ProvenanceLayer(), QualityLayer()]
