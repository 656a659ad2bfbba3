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
    internal split of a reference side. ``distinct`` maps a side's rows to one row per file
    (METHODS §4.7).

    Nothing is computed before its first step: the content features are computed then, inside
    the layer's shared folder and after the probes before it have let their matrices go,
    into one bank of every row some comparison uses; each comparison holds an index into it."""
    side_ids = distinct or (lambda ids: ids)
    from splitscope.features.embeddings import load_embeddings
    from splitscope.provenance.partition import FeatureRows, internal_split, partition_steps

    out = LayerResult()
    title = "Partition classifier"
    if not bounds:
        out.records.append(not_run_record(LAYER, "not applicable", "no boundary (train/test split) to classify", id="provenance.partition", title=title, inputs=inputs, predicate=PARTITION))
        return out
    if sc is None and embeddings is None:
        out.records.append(not_run_record(LAYER, "not assessed", "no thumbnails (pass a scan) and no embeddings", id="provenance.partition", title=title, inputs=inputs, predicate=PARTITION))
        return out
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

    def sample(q_ids, r_ids):
        """The comparison's rows, a seeded subsample stratified by side above ``max_rows``."""
        ids = np.r_[q_ids, r_ids]
        is_test = np.r_[np.ones(len(q_ids), bool), np.zeros(len(r_ids), bool)]
        if max_rows is None or len(ids) <= max_rows:
            return ids, is_test, None
        keep = np.zeros(len(ids), bool)
        for side in (True, False):
            pos = np.flatnonzero(is_test == side)
            k = max(2, round(max_rows * len(pos) / len(ids)))
            keep[rng.choice(pos, size=min(k, len(pos)), replace=False)] = True
        return ids[keep], is_test[keep], int(keep.sum())

    plans = [(f"provenance.partition[{slug(b.name)}]", f"Partition classifier {b.name}",
              *sample(side_ids(b.query.rows), side_ids(b.reference.rows)), b, False)
             for b in bounds]
    refs = {b.reference.name: b for b in bounds}
    for name, b in refs.items():
        ref = side_ids(b.reference.rows)
        if len(ref) < 10:
            continue
        hold = internal_split(len(ref), internal_share, seed,
                              rows.iloc[row_pos.get_indexer(ref)])
        plans.append((f"provenance.partition.internal[{slug(name)}]",
                      f"Partition classifier internal split of {name}",
                      *sample(ref[hold], ref[~hold]), None, True))
    # where each comparison's rows sit: embedding rows, or thumbnails in the store (-1: none)
    keys = [row_pos.get_indexer(ids) if emb is not None else sc.thumb_index(ids)
            for _, _, ids, *_ in plans]
    bank, at = _feature_bank(keys, emb, sc)
    runs = []
    for (rid, name, ids, is_test, sub, b, internal), key, where in zip(plans, keys, at):
        ok = key >= 0
        part_rows = rows.iloc[row_pos.get_indexer(ids[ok])]
        steps = partition_steps(FeatureRows(bank, where[ok]), is_test[ok], rows=part_rows,
                                groups=part_rows["group"].to_numpy() if "group" in part_rows
                                else None,
                                name=name, folds=folds, seed=seed, n_resamples=n_resamples,
                                classifier=classifier, fit_max_rows=fit_max_rows)
        runs.append((steps, (rid, name, ids, ok, sub, b, internal)))
    supplied = emb is not None
    del bank, at, keys, emb

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
                **r.params, "features": ("supplied embeddings" if supplied else
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

    done = yield Together([caught(steps) for steps, _ in runs])
    for (r, failed), (_, about) in zip(done, runs):
        if failed is not None:
            rid, name = about[:2]
            out.records.append(not_run_record(LAYER, "not applicable", str(failed), id=rid, title=name, inputs=inputs, predicate=PARTITION))
        else:
            record(r, *about)
    return out


def _feature_bank(keys: list[np.ndarray], emb, sc) -> tuple[np.ndarray, list[np.ndarray]]:
    """One feature matrix of every row the comparisons use (``keys``: embedding rows, or
    store positions of thumbnails, -1 for none), each row once, and each comparison's rows in
    it (-1 where its key is). Content features are computed a block of thumbnails at a time,
    read in store order, straight into the bank, a shared array inside ``shared_arrays``."""
    from splitscope.provenance.partition import content_features, shared_features
    from splitscope.provenance.stats import shared_empty

    used = np.unique(np.concatenate([k[k >= 0] for k in keys]))
    if emb is not None:
        bank = shared_features(emb, used)
    else:
        width = content_features(sc.thumbnails[:0]).shape[1]
        bank = shared_empty((len(used), width), np.float32)
        for i in range(0, len(used), THUMB_BLOCK):
            thumbs = sc.read_thumbnails(used[i:i + THUMB_BLOCK])
            bank[i:i + THUMB_BLOCK] = content_features(thumbs)
    at = [np.where(k >= 0, np.searchsorted(used, k), -1) for k in keys]
    return bank, at
