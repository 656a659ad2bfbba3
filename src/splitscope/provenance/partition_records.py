"""The partition classifier's records (METHODS §4.5): how well the content features tell a
boundary's query side from its reference side, per boundary and per internal split."""

from __future__ import annotations

import numpy as np
import pandas as pd

from splitscope.errors import InputError
from splitscope.provenance.header_probe import FIT_MAX_ROWS
from splitscope.provenance.predicates import LAYER, PARTITION
from splitscope.provenance.probe_records import Steps, caught, probe_columns
from splitscope.provenance.stats import Together
from splitscope.records import AuditRecord, LayerResult, Uncertainty, not_run_record
from splitscope.records.ids import slug

THUMB_BLOCK = 4096  # thumbnails read from the store at a time for content features (~37 MiB)


def partition_records(rows, sc, bounds, embeddings, *, seed, n_resamples, folds, classifier,
                       internal_share, max_rows, inputs,
                       fit_max_rows=FIT_MAX_ROWS, distinct=None) -> Steps:
    """Step generator of the partition classifier's records, one per boundary and one per
    internal split of a reference side; the content features are computed by this call.
    ``distinct`` maps a side's rows to one row per file (METHODS §4.7)."""
    side_ids = distinct or (lambda ids: ids)
    from splitscope.features.embeddings import load_embeddings
    from splitscope.provenance.partition import content_features, internal_split, partition_steps

    out = LayerResult()
    title = "Partition classifier"
    if not bounds:
        out.records.append(not_run_record(LAYER, "not applicable", "no boundary (train/test split) to classify", id="provenance.partition", title=title, inputs=inputs, predicate=PARTITION))
        return _ready(out)
    if sc is None and embeddings is None:
        out.records.append(not_run_record(LAYER, "not assessed", "no thumbnails (pass a scan) and no embeddings", id="provenance.partition", title=title, inputs=inputs, predicate=PARTITION))
        return _ready(out)
    rng = np.random.default_rng(seed)
    emb = None
    if embeddings is not None:
        emb = load_embeddings(embeddings, None if isinstance(embeddings, np.ndarray)
                              else rows["path"])
        if len(emb) != len(rows):
            raise InputError(f"{len(emb)} embedding rows for {len(rows)} manifest rows")
    # each comparison copies its rows (in its stable order): only the columns the classifier
    # reads, not the scan's header fields and statistics
    rows = probe_columns(rows, ())
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
            # read a block of thumbnails at a time: a fancy index of the memory-mapped store
            # would load every new thumbnail at once (9 KiB a row)
            bank["rows"] = np.concatenate([bank["rows"], *(
                content_features(sc.read_thumbnails(new[i:i + THUMB_BLOCK]))
                for i in range(0, new.size, THUMB_BLOCK))])
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
            id=rid, layer=LAYER, title=name,
            boundary=b.to_dict() if b is not None else None,
            predicate={"name": PARTITION, "params": {
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
    # each comparison holds its own rows' features now: the bank (288 float32 a thumbnail)
    # is not kept while the folds run
    bank["rows"] = bank["at"] = None

    def steps():
        done = yield Together([caught(steps) for steps, _ in runs])
        for (r, failed), (_, about) in zip(done, runs):
            if failed is not None:
                rid, name = about[:2]
                out.records.append(not_run_record(LAYER, "not applicable", str(failed), id=rid, title=name, inputs=inputs, predicate=PARTITION))
            else:
                record(r, *about)
        return out

    return steps()


def _ready(value):
    """A step generator with nothing to run: it returns ``value``."""
    return value
    yield  # makes this function a generator

