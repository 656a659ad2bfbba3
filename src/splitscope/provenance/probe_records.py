"""The records of the header-only and image-statistics probes (METHODS §4.2, §4.3, §4.5) and
of the source–label association (§4.4): what each probe fit, on which rows, how well, and
which fields carry it, in words."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.provenance.header_probe import FIT_MAX_ROWS
from splitscope.provenance.predicates import (
    CROSS_SPLIT,
    HEADER_PROBE,
    HEADER_PROBE_WITHIN,
    IMAGE_STATS_PROBE,
    IMAGE_STATS_WITHIN,
    LAYER,
    SOURCE_LABEL,
    WITHIN_POOL,
)
from splitscope.provenance.stats import Together
from splitscope.records import AuditRecord, LayerResult, Uncertainty, not_run_record
from splitscope.records.format import percent
from splitscope.records.ids import slug

#: a step generator (:func:`~splitscope.provenance.stats.run_steps`) returning a layer's part
Steps = Generator[Any, Any, LayerResult]


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not np.isfinite(x) else percent(x)


def caught(steps):
    """A step generator's return value and None, or None and the InputError it raised (the
    record then says why the check did not run)."""
    try:
        return (yield from steps), None
    except InputError as exc:
        return None, exc


def ba_uncertainty(ba: dict) -> Uncertainty:
    return Uncertainty(kind=ba["kind"], level=ba["level"], low=ba["low"], high=ba["high"],
                       detail={"undefined_resamples": ba["undefined_resamples"],
                               "seed": ba["seed"]})


#: the columns a probe reads besides its features: the label, the group key, the row identity
#: of its tables, and the keys of its stable order
#: (:data:`~splitscope.provenance.stats.STABLE_KEYS`)
PROBE_KEYS = ("row", "path", "label", "group", "sha256", "pixel_xxh128")


def probe_columns(table: pd.DataFrame, features) -> pd.DataFrame:
    """``table`` with only the columns a probe reads (:data:`PROBE_KEYS` and ``features``,
    those it has, in its order): the probe's row tables are copies of the pool and of each
    boundary's sides, and the scan's other columns (thumbnail positions, hashes, the other
    probe's features) would be copied into every one of them."""
    keep = set(PROBE_KEYS) | set(features)
    return table[[c for c in table.columns if c in keep]]


def _probe_records(out: LayerResult, rows, pool, bounds, *, name: str, title: str,
                   probe: str, predicate: str, within, cross, scored, inputs, features,
                   one_side_reason=None, single_field: bool = False) -> Steps:
    """Step generator (:func:`~splitscope.provenance.stats.run_steps`) of the within-pool
    record and one cross-split record per boundary of one probe (the header probe's protocol,
    METHODS §4.2 and §4.5), with their tables ``<name>_within_pool``, ``<name>_importance``
    (with ``single_field``, ``<name>_single_field``) and ``<name>_cross_<boundary>``; the
    within-pool folds and every cross split are run together.

    ``within(labelled)`` and ``cross(train, test)`` give the probe's step generators (whose
    :class:`~splitscope.errors.InputError` becomes a not-applicable record); ``scored(frame)`` marks the
    rows that have its features (labelled rows without them are counted as unscored);
    ``one_side_reason(b)``, when given, is why a boundary with an empty side is not
    applicable (else the probe itself says what it cannot fit). A record left when a part
    does not run names the predicate it would have measured (``<predicate> (<kind>)``).
    ``features``: the probe's feature columns; its row tables keep only those and
    :data:`PROBE_KEYS`, and are not referenced here once the probes hold them."""
    wid = f"provenance.{name}.within_pool"
    same = pool is rows
    rows = probe_columns(rows, features)
    pool = rows if same else probe_columns(pool, features)
    within_name, cross_name = f"{predicate} ({WITHIN_POOL})", f"{predicate} ({CROSS_SPLIT})"
    labelled = pool["label"].notna()
    within_rows = pool[labelled & scored(pool)]
    unscored = int((labelled & ~scored(pool)).sum())
    plan = []  # per boundary: (boundary, record id, unscored query rows) or a record
    steps = []  # the cross splits' step generators, the within pool's first
    labelled, ok = rows["label"].notna(), scored(rows)
    for b in bounds:
        rid = f"provenance.{name}.cross_split[{slug(b.name)}]"
        tr = rows[rows["row"].isin(b.reference.rows) & labelled & ok]
        in_query = rows["row"].isin(b.query.rows) & labelled
        te = rows[in_query & ok]
        if one_side_reason is not None and (tr.empty or te.empty):
            plan.append(not_run_record(LAYER, "not applicable", one_side_reason(b), id=rid, title=f"{title}: cross split", inputs=inputs, predicate=cross_name))
        else:
            plan.append((b, rid, int((in_query & ~ok).sum())))
            steps.append(caught(cross(tr, te)))
        tr = te = None
    steps.insert(0, caught(within(within_rows)))
    # the step generators hold their tables now (each reorders its own copy): none is kept
    # here while the folds run
    del rows, pool, within_rows, labelled, ok
    (wp, failed), *crossed = yield Together(steps)
    del steps
    if failed is not None:
        out.records.append(not_run_record(LAYER, "not applicable", str(failed), id=wid, title=title, inputs=inputs, predicate=within_name))
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
        b, rid, unscored_b = p
        cs, failed = next(results)
        if failed is not None:
            out.records.append(not_run_record(LAYER, "not applicable", str(failed), id=rid, title=f"{title}: cross split", inputs=inputs, predicate=cross_name))
            continue
        out.records.append(_probe_record(cs, rid, f"{title}: fit on {b.reference.name}, "
                                         f"score {b.query.name}", b, inputs, within=wp,
                                         probe=probe, unscored=unscored_b))
        out.tables[f"{name}_cross_{slug(b.name)}"] = cs.predictions
    return out


def _unready(has_label: bool, has_features: bool, no_features: str, wid: str, title: str,
             inputs, predicate: str) -> LayerResult:
    """A probe's part with the record saying why it cannot run (no labels: not applicable; no
    features: not assessed, ``no_features``), or an empty part when it can; ``predicate``: the
    within-pool predicate the record names."""
    out = LayerResult()
    if not has_label:
        out.records.append(not_run_record(LAYER, "not applicable", "no labels in the release",
                                          id=wid, title=title, inputs=inputs,
                                          predicate=predicate))
    elif not has_features:
        out.records.append(not_run_record(LAYER, "not assessed", no_features, id=wid,
                                          title=title, inputs=inputs, predicate=predicate))
    return out


def header_records(rows, pool, bounds, has_label, *, seed, n_resamples, folds, repeats,
                    include_name_fields, inputs, fit_max_rows=FIT_MAX_ROWS) -> Steps:
    from splitscope.manifest.rows import CONTENT_ARRAY, content_of
    from splitscope.provenance.header_probe import (
        cross_split_steps,
        header_columns,
        within_pool_steps,
    )

    title = "Header-only probe"
    wid = "provenance.header_probe.within_pool"
    out = _unready(has_label, any(c in rows.columns for c in header_columns()),
                   "no header features: scan the release first (splitscope scan)", wid, title,
                   inputs, HEADER_PROBE_WITHIN)
    if out.records:
        return out
    arrays = content_of(rows).eq(CONTENT_ARRAY).to_numpy(bool)
    if arrays.all():
        out.records.append(not_run_record(LAYER, "not applicable", "no file headers: the rows are pixel arrays (an .npz or in-memory arrays), which carry no encoded file to probe", id=wid, title=title, inputs=inputs, predicate=HEADER_PROBE_WITHIN))
        return out
    if arrays.any():  # only rows with file bytes have header fields
        rows = rows[~arrays]
        pool = pool[~content_of(pool).eq(CONTENT_ARRAY).to_numpy(bool)]
    opts = {"seed": seed, "n_resamples": n_resamples, "importance_repeats": repeats,
            "include_name_fields": include_name_fields, "fit_max_rows": fit_max_rows}
    return (yield from _probe_records(
        out, rows, pool, bounds, name="header_probe", title=title, probe="header", predicate=HEADER_PROBE,
        within=lambda t: within_pool_steps(t, folds=folds, **opts),
        cross=lambda tr, te: cross_split_steps(tr, te, **opts),
        scored=lambda t: pd.Series(True, index=t.index), inputs=inputs,
        features=header_columns(), single_field=True,
        one_side_reason=(lambda b: f"no file headers on one side of {b.name}: its rows are "
                         "pixel arrays") if arrays.any() else None))


def image_stats_records(rows, pool, bounds, has_label, *, seed, n_resamples, folds, repeats,
                         inputs, fit_max_rows=FIT_MAX_ROWS) -> Steps:
    """The image-statistics probe (METHODS §4.5): the header probe's protocol on intensity
    statistics."""
    from splitscope.provenance.image_stats_probe import (
        IMAGE_STATS_FEATURES,
        image_stats_cross_split_steps,
        image_stats_within_pool_steps,
    )

    title = "Image-statistics probe"
    wid = "provenance.image_stats_probe.within_pool"
    out = _unready(has_label, all(c in rows.columns for c in IMAGE_STATS_FEATURES),
                   "no image statistics: scan the release with this version (splitscope scan)",
                   wid, title, inputs, IMAGE_STATS_WITHIN)
    if out.records:
        return out
    opts = {"seed": seed, "n_resamples": n_resamples, "importance_repeats": repeats,
            "fit_max_rows": fit_max_rows}
    return (yield from _probe_records(
        out, rows, pool, bounds, name="image_stats_probe", title=title,
        probe="image statistics", predicate=IMAGE_STATS_PROBE,
        within=lambda t: image_stats_within_pool_steps(t, folds=folds, **opts),
        cross=lambda tr, te: image_stats_cross_split_steps(tr, te, **opts),
        scored=lambda t: t["intensity_mean"].notna(), inputs=inputs,
        features=IMAGE_STATS_FEATURES))


#: header fields that only measure the compressed size, which tracks image content
SIZE_FIELDS = ("file_size", "bytes_per_pixel")


def carried_by(r, top: list[str]) -> str:
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
                          f"accuracy {ci} vs chance {r.chance:.3f}; {carried_by(r, top)}")
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
        id=rid, layer=LAYER, title=title,
        boundary=b.to_dict() if b is not None else None,
        predicate={"name": f"{HEADER_PROBE if header else IMAGE_STATS_PROBE} ({r.kind})",
                   "params": {**r.params, "features": len(r.features),
                              "dropped": r.dropped,
                              **({} if header else {"statistics": r.params.get("features")})}},
        unit="row (case)", denominator=r.n_rows,
        coverage={"traceable": r.n_rows, "total": total,
                  "share": r.n_rows / total if total else None},
        class_support=r.class_support, estimate=ba["estimate"],
        uncertainty=ba_uncertainty(ba),
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


def association_record(pool, inputs) -> LayerResult:
    from splitscope.provenance.association import source_label_association

    out = LayerResult()
    rid, title = "provenance.source_label", "Source–label association"
    if "source" not in pool.columns or pool["source"].nunique() < 2:
        out.records.append(not_run_record(LAYER, "not applicable", "fewer than two sources in the release", id=rid, title=title, inputs=inputs))
        return out
    if "label" not in pool.columns or pool["label"].nunique() < 2:
        out.records.append(not_run_record(LAYER, "not applicable", "fewer than two labels in the release", id=rid, title=title, inputs=inputs))
        return out
    a = source_label_association(pool)
    dom = a.dominant.sort_values("dominant_share", ascending=False)
    out.records.append(AuditRecord(
        id=rid, layer=LAYER, title=title,
        predicate={"name": SOURCE_LABEL, "params": {"chi2": "Pearson, no continuity correction"}},
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
