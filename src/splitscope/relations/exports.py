"""Exports of the identity and near-duplicate layer (METHODS §6.3), keyed by the manifest's
``row`` (plus ``path``).

- ``contaminated``: one line per (boundary, predicate, flagged query row) with its counterpart,
  for the copy and near-twin predicates (bytes, pixels, NCC ≥ τ, a supplied embedding);
- ``screened``: the same for the screens that are no evidence alone (hash rules, file names:
  uncalibrated on a modality until a negative control shows them reliable);
- ``pairs``: the pair table with every measurement (d_p, d_d, ρ, SSIM, rules, counterpart rule,
  variant, geometry);
- ``dedup_splits``: every manifest row, ``kept`` or removed, and why;
- ``identity_groups``, ``within_copies``, ``query_flags``.

:func:`write_exports` writes them as CSV and Parquet, one contaminated list per predicate and
boundary, kept/removed lists per split, and ``artifacts.json`` naming every file with its
SHA-256 so a released audit can be verified.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from splitscope.records.exports import (
    file_stem,
    write_artifacts_manifest,
    write_table,
    write_tables,
)
from splitscope.relations.near_predicates import dihedral_base, near_predicate
from splitscope.relations.predicates import EMBEDDING_PREDICATE


def measure_of(pred: str) -> str:
    """The per-row column holding the value behind a predicate's flag ("" when none): the
    near-duplicate table's ``measure`` (its dihedral variant's for a variant)."""
    if pred == EMBEDDING_PREDICATE:
        return "embedding_best_cosine"
    base = dihedral_base(pred)
    if base is not None:
        return base.dihedral.measure or ""
    entry = near_predicate(pred)
    return (entry.measure or "") if entry is not None else ""


def contaminated_table(relations, rows: pd.DataFrame) -> pd.DataFrame:
    """Long table of flagged query rows: ``boundary, predicate, row, path, split, label,
    source, counterpart_row, counterpart_path, measure, value, variant``."""
    by_row = rows.set_index("row")
    parts = []
    for rel in relations:
        near = rel.near.flags.set_index("row")
        for pred in rel.predicates():
            hit = rel.flags[pred].fillna(False).to_numpy(bool)
            r = rel.flags.loc[hit, "row"].to_numpy(np.int64)
            if r.size == 0:
                continue
            if pred == "sha256":
                cp = rel.census.affected.set_index("row")["counterpart_row"].reindex(r)
                value = pd.Series([np.nan] * r.size)
            elif pred == "pixel_xxh128":
                cp = rel.pixels.set_index("row")["counterpart_row"].reindex(r)
                value = pd.Series([np.nan] * r.size)
            elif pred == "basename":
                ref = by_row.loc[by_row.index.isin(rel.boundary.reference.rows)]
                first = (ref.reset_index().sort_values("row")
                         .drop_duplicates("basename").set_index("basename")["row"])
                names = by_row["basename"].reindex(r)
                if rel.boundary.within:
                    cp = pd.Series([np.nan] * r.size)
                else:
                    cp = first.reindex(names.to_numpy())
                value = pd.Series([np.nan] * r.size)
            else:
                cp = near[f"{pred}_counterpart"].reindex(r) if f"{pred}_counterpart" in near \
                    else pd.Series([np.nan] * r.size)
                m = measure_of(pred)
                value = near[m].reindex(r) if m and m in near else pd.Series([np.nan] * r.size)
            cpv = pd.to_numeric(pd.Series(np.asarray(cp, dtype=object)),
                                errors="coerce").to_numpy()
            cpv = np.where(np.isfinite(cpv) & (cpv >= 0), cpv, np.nan)
            variant = near[f"{pred}_variant"].reindex(r).to_numpy() \
                if f"{pred}_variant" in near else np.full(r.size, "identity", object)
            parts.append(pd.DataFrame({
                "boundary": rel.boundary.name, "predicate": pred, "row": r,
                "path": by_row["path"].reindex(r).to_numpy(),
                "split": by_row["split"].reindex(r).to_numpy(),
                "label": by_row["label"].reindex(r).to_numpy(),
                "source": by_row["source"].reindex(r).to_numpy(),
                "counterpart_row": pd.array([pd.NA if np.isnan(v) else int(v) for v in cpv],
                                            dtype="Int64"),
                "counterpart_path": by_row["path"].reindex(
                    np.where(np.isnan(cpv), -1, cpv).astype(np.int64)).to_numpy(),
                "measure": measure_of(pred),
                "value": pd.to_numeric(pd.Series(np.asarray(value, dtype=object)),
                                       errors="coerce").to_numpy(np.float64),
                "variant": variant,
            }))
    cols = ["boundary", "predicate", "row", "path", "split", "label", "source",
            "counterpart_row", "counterpart_path", "measure", "value", "variant"]
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]


def pair_table(relations) -> pd.DataFrame:
    """All boundaries' pair tables, one after another."""
    parts = [rel.near.pairs for rel in relations if len(rel.near.pairs)]
    if not parts:
        return relations[0].near.pairs.iloc[0:0] if relations else pd.DataFrame()
    out = pd.concat(parts, ignore_index=True)
    return out.rename(columns={"query_row": "row", "query_path": "path"})


def query_flags_table(relations, rows: pd.DataFrame) -> pd.DataFrame:
    """Per boundary and query row: one column per predicate (``<NA>`` = not assessed)."""
    parts = []
    for rel in relations:
        f = rel.flags.copy()
        extra = [c for c in rel.near.flags.columns if c not in f.columns and c != "path"]
        f = f.merge(rel.near.flags[["row", *extra]], on="row", how="left")
        aff = rel.census.affected
        if len(aff):
            f = f.merge(aff[["row", "counterpart_row"]].rename(
                columns={"counterpart_row": "sha256_counterpart"}), on="row", how="left")
        f.insert(0, "boundary", rel.boundary.name)
        f.insert(2, "path", rows.set_index("row")["path"].reindex(f["row"]).to_numpy())
        parts.append(_nullable_flags(f))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _nullable_flags(f: pd.DataFrame) -> pd.DataFrame:
    """Flag columns holding True/False and missing values as objects become ``boolean`` (so
    Parquet and CSV keep them booleans with ``<NA>``, not strings)."""
    for c in f.columns:
        if f[c].dtype == object:
            values = f[c].dropna()
            if len(values) and values.map(lambda v: isinstance(v, (bool, np.bool_))).all():
                f[c] = f[c].astype("boolean")
    return f


def identity_group_table(relations) -> pd.DataFrame:
    """Crossing SHA-256 groups of every boundary."""
    parts = []
    for rel in relations:
        g = rel.census.groups.copy()
        g.insert(0, "boundary", rel.boundary.name)
        parts.append(g)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def dedup_splits(rows: pd.DataFrame, relations, within: pd.DataFrame,
                 predicates) -> pd.DataFrame:
    """Every manifest row with ``kept`` and, when removed, ``removed_by`` (why).

    A query row is removed when a predicate in ``predicates`` flags it on any boundary
    (``<predicate> (<boundary>) ~ row <counterpart>``); inside one split, every byte-identical
    copy after the first row of its group is removed (``sha256_within``; for pixel arrays,
    which have no bytes, every pixel-identical copy: ``pixel_xxh128_within``). Reference rows
    are kept unless they are such a within-split copy.
    """
    reasons: dict[int, list[str]] = {}
    for rel in relations:
        near = rel.near.flags.set_index("row")
        for pred in predicates:
            if pred not in rel.flags:
                continue
            hit = rel.flags[pred].fillna(False).to_numpy(bool)
            if pred == "sha256":
                counterpart = rel.census.affected.set_index("row")["counterpart_row"]
            elif pred == "pixel_xxh128":
                counterpart = rel.pixels.set_index("row")["counterpart_row"]
            else:
                counterpart = near.get(f"{pred}_counterpart")  # None when not recorded
            for r in rel.flags.loc[hit, "row"].to_numpy(np.int64):
                cp = counterpart.get(r) if counterpart is not None else None
                reasons.setdefault(int(r), []).append(
                    f"{pred} ({rel.boundary.name}) ~ row {cp}")
    if within is not None and len(within):
        for _, g in within.iterrows():
            members = [int(x) for x in str(g["rows"]).split()]
            key = "sha256" if pd.notna(g.get("sha256")) else "pixel_xxh128"
            for r in members[1:]:
                reasons.setdefault(r, []).append(
                    f"{key}_within ({g['population']}) ~ row {members[0]}")
    out = rows[["row", "path", "split", "label"]].copy()
    out["kept"] = ~out["row"].isin(list(reasons))
    out["removed_by"] = pd.array(["; ".join(dict.fromkeys(reasons.get(int(r), [])))
                                  or pd.NA for r in out["row"]], dtype="string")
    return out.reset_index(drop=True)


def write_exports(result, out_dir, *, artifacts_manifest: bool = True) -> list[Path]:
    """Write the layer's tables under ``out_dir`` and return the paths written.

    Every table as ``<name>.csv`` and ``<name>.parquet``; the contaminated and the screened
    rows once more as one CSV per predicate and boundary
    (``contaminated/<predicate>__<boundary>.csv``, ``screened/…``); the
    deduplicated splits as kept/removed CSVs per split (``dedup/<split>_kept.csv``). With
    ``artifacts_manifest`` (default) ``artifacts.json`` lists them with their SHA-256 (the
    audit writes one manifest for its whole folder instead). Each record's ``outputs`` names
    the files, relative to ``out_dir``."""
    out = Path(out_dir)
    t = result.tables
    written = write_tables(t, out)
    for name in ("contaminated", "screened"):
        flagged = t.get(name)
        if not isinstance(flagged, pd.DataFrame) or not len(flagged):
            continue
        for (b, pred), part in flagged.groupby(["boundary", "predicate"], sort=True):
            stem = (out / name / f"{file_stem(pred, subfolders=False)}__"
                    f"{file_stem(b, subfolders=False)}")
            written += write_table(part, stem, parquet=False)
    dd = t.get("dedup_splits")
    if isinstance(dd, pd.DataFrame) and len(dd):
        for split, part in dd.groupby(dd["split"].astype("string").fillna("<NA>"), sort=True):
            for kind, sub in (("kept", part[part["kept"]]), ("removed", part[~part["kept"]])):
                stem = out / "dedup" / f"{file_stem(str(split), subfolders=False)}_{kind}"
                written += write_table(sub, stem, parquet=False)
    if artifacts_manifest:
        written.append(write_artifacts_manifest(out, written))
    names = [p.relative_to(out).as_posix() for p in written]
    for rec in result.records:
        rec.outputs = names
    return written
