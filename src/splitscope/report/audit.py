"""The one-command audit: every applicable layer on the released split, one audit document.

:func:`audit` scans the release (features cached in the workspace), audits its boundaries
(test → train, validation → train, and external corpus → audited training rows when an external
corpus is given) with every layer, and writes into ``out_dir``:

- ``audit.json`` — the source of truth (schema: ``splitscope/records/audit.schema.json``);
- ``report.html`` — one self-contained page rendered from ``audit.json``;
- ``lists/`` — each layer's row-keyed tables (contaminated-file lists, deduplicated splits,
  group mappings, pair tables) as CSV and Parquet, plus the manifest;
- ``artifacts.json`` — every output file with its size and SHA-256 (Croissant-style
  ``distribution`` of ``FileObject`` entries), so a published audit can be verified.

Layer outcomes
--------------
Every layer is recorded, never dropped. A layer whose module is not installed gives one
record with status ``not assessed`` and the import error; a layer that finds nothing to do
on the input (it raises :class:`~splitscope.errors.InputError`, e.g. no group keys, no
predictions) gives ``not applicable`` with its message; a layer that crashes gives
``not assessed`` with the exception text, the audit carries on with the other layers, and the
exit code is :data:`EXIT_LAYER_FAILED` (3) unless a ``--fail-on`` condition held (1).

Exit codes: 0 success; 1 a ``--fail-on`` condition held; 2 input error (raised as
``InputError`` before anything is written); 3 the audit was written but at least one layer
failed (see ``layers`` in audit.json).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib
import json
import os
import platform
import re
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from splitscope.boundary import (
    WITHIN_RELEASE,
    Boundary,
    Population,
    release_boundaries,
)
from splitscope.errors import InputError
from splitscope.records import AuditRecord, LayerResult, file_fingerprint, software_versions
from splitscope.records.exports import (
    artifact,
    export_frame,
    write_artifacts_manifest,
    write_json,
    write_tables,
)
from splitscope.records.model import sha256_file
from splitscope.records.schema import SCHEMA_VERSION, validation_errors
from splitscope.records.scorecard import score_card
from splitscope.relations.hashes import DEFAULT_RADIUS
from splitscope.relations.ncc import DEFAULT_TAU, SWEEP, ncc_sweep

EXIT_OK = 0
EXIT_FAIL_ON = 1
EXIT_INPUT_ERROR = 2
EXIT_LAYER_FAILED = 3

MAX_GALLERY_PAIRS = 60
#: The layers :func:`audit` runs, in order (names for ``layers=`` / ``--layers``).
LAYERS = ("duplicates", "groups", "provenance", "evaluation", "attribution", "external")


# ============================================================================ --fail-on

@dataclass(frozen=True)
class Metric:
    """A quantity ``--fail-on`` can gate on: which records it reads and how.

    A record is read when it is completed (or partial), not a negative control, in one of
    ``layers`` (prefix), and its predicate name is one of ``predicates`` (exact) or, when no
    record matches exactly, its id/predicate name contains every word of one ``words``
    alternative. ``field`` is the record field read (``estimate`` or ``numerator``); the value
    is the largest over the audited boundaries (the worst boundary).
    """

    name: str
    description: str
    layers: tuple[str, ...]
    predicates: tuple[str, ...] = ()
    words: tuple[tuple[str, ...], ...] = ()
    field: str = "estimate"
    unit: str | None = "affected query row"


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("byte_identical_rate", "share of query rows with a byte-identical (SHA-256) "
           "counterpart on the reference side", ("identity",), ("sha256",)),
    Metric("byte_identical_rows", "query rows with a byte-identical counterpart",
           ("identity",), ("sha256",), field="numerator"),
    Metric("pixel_identical_rate", "share of query rows whose decoded pixels equal a reference "
           "row's with different bytes (re-encodes)", ("identity",), ("pixel_sha256",)),
    Metric("basename_rate", "share of query rows whose basename occurs on the reference side",
           ("identity",), ("basename",)),
    Metric("ncc_rate", "share of query rows with a near-twin (best NCC ρ ≥ τ, nearest rule)",
           ("near_duplicate",), ("ncc_nearest",)),
    Metric("ncc_rows", "query rows with a near-twin (best NCC ρ ≥ τ, nearest rule)",
           ("near_duplicate",), ("ncc_nearest",), field="numerator"),
    Metric("phash_rate", "share of query rows passing the pHash/dHash screen rule (radius k)",
           ("near_duplicate",), ("hash_screen",)),
    Metric("group_overlap_rate", "share of traceable query rows whose group also occurs on "
           "the reference side", ("group",), ("group_overlap", "group overlap"), (("overlap",),)),
    Metric("header_probe_ba", "balanced accuracy of the header-only probe (largest of within "
           "pool and cross split)", ("provenance", "probe"), (), (("header",),), unit=None),
    Metric("partition_auc", "out-of-fold AUC of the partition classifier (train pool vs "
           "query)", ("provenance", "probe", "shift"), (),
           (("partition", "auc"), ("partition",)), unit=None),
    Metric("containment_rate", "share of external-corpus rows with a byte-identical or "
           "NCC ≥ τ counterpart in the audited training rows",
           ("identity", "near_duplicate", "containment"), ("containment_byte_or_ncc",),
           (("containment",),)),
    Metric("layers_not_assessed", "number of layers that could not run (missing module or "
           "failure)", (), field="layers", unit=None),
)}

_CONDITION = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=|==|!=|>|<)\s*([-+0-9.eE]+%?)\s*$")
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


@dataclass(frozen=True)
class Condition:
    """A parsed ``--fail-on`` condition ``metric op value``."""

    text: str
    metric: str
    op: str
    threshold: float


def metric_table() -> str:
    """The ``--fail-on`` metrics, one per line, for help texts and error messages."""
    return "\n".join(f"  {m.name:<22} {m.description}" for m in METRICS.values())


def parse_condition(text: str) -> Condition:
    """Parse ``metric op value`` (ops ``> >= < <= == !=``; a value may end in ``%``).

    Raises
    ------
    InputError
        When the text does not parse or names an unknown metric (the message lists them).
    """
    match = _CONDITION.match(text or "")
    if not match:
        raise InputError(
            f"--fail-on {text!r}: expected 'metric op value' with op one of > >= < <= == != "
            f"(e.g. 'ncc_rate>0.01'); metrics:\n{metric_table()}"
        )
    name, op, raw = match.groups()
    if name not in METRICS:
        raise InputError(f"--fail-on {text!r}: unknown metric {name!r}; valid metrics:\n"
                         f"{metric_table()}")
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError as exc:
        raise InputError(f"--fail-on {text!r}: {raw!r} is not a number") from exc
    return Condition(text=text.strip(), metric=name, op=op, threshold=value)


def _record_text(record: Mapping[str, Any]) -> str:
    pred = record.get("predicate") or {}
    return f"{record.get('id')} {pred.get('name')}".lower()


def _is_control(record: Mapping[str, Any]) -> bool:
    details = record.get("details") or {}
    return ("control" in str(record.get("id", "")).lower()
            or details.get("role") == "control"
            or (record.get("boundary") or {}).get("kind") == "control")


def metric_records(metric: Metric, records: Iterable[Mapping[str, Any]],
                   boundaries: Sequence[str] | None = None) -> list[Mapping[str, Any]]:
    """The completed records a metric reads (first matching word alternative wins)."""
    pool = [r for r in records
            if r.get("status") in ("completed", "partial")
            and str(r.get("layer", "")).lower().startswith(metric.layers)
            and not _is_control(r)
            and r.get(metric.field) is not None
            and (boundaries is None or (r.get("boundary") or {}).get("name") in boundaries)]
    pool = [r for r in pool if metric.unit is None or r.get("unit") in (None, metric.unit)]
    exact = [r for r in pool if (r.get("predicate") or {}).get("name") in metric.predicates]
    if exact:
        return exact
    for words in metric.words:
        hits = [r for r in pool if all(w in _record_text(r) for w in words)]
        if hits:
            return hits
    return []


def evaluate_conditions(conditions: Sequence[Condition], records: Sequence[Mapping[str, Any]],
                        layers: Sequence[Mapping[str, Any]] = (),
                        boundaries: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Evaluate each condition on the records: the metric's value is the largest over the
    audited boundaries. A metric no completed record measured has value ``None`` and its
    condition does not hold (it is shown as *not measured*; gate on
    ``layers_not_assessed>0`` to fail when a layer could not run)."""
    out = []
    for cond in conditions:
        metric = METRICS[cond.metric]
        if metric.field == "layers":
            value: float | None = float(sum(1 for l in layers if l.get("status") == "not assessed"))
            ids: list[str] = []
        else:
            hits = metric_records(metric, records, boundaries)
            values = [float(r[metric.field]) for r in hits]
            value = max(values) if values else None
            ids = [str(r["id"]) for r in hits]
        held = value is not None and _OPS[cond.op](value, cond.threshold)
        out.append({"condition": cond.text, "metric": cond.metric, "op": cond.op,
                    "threshold": cond.threshold, "value": value, "held": bool(held),
                    "records": ids})
    return out


# ============================================================================ layers

@dataclass
class LayerOutcome:
    """What running one layer gave: its result, status, reason and time."""

    layer: str
    result: LayerResult
    status: str
    reason: str | None
    duration_s: float

    def summary(self) -> dict[str, Any]:
        return {"layer": self.layer, "status": self.status, "reason": self.reason,
                "records": len(self.result.records), "duration_s": round(self.duration_s, 4)}


def not_run_record(layer: str, status: str, reason: str, *, title: str | None = None,
                   boundary: Boundary | None = None, inputs: list | None = None) -> AuditRecord:
    """The record a layer leaves when it did not run: ``not assessed`` (could not run) or
    ``not applicable`` (nothing to measure on this input), with the reason."""
    slug = status.replace(" ", "_")
    bname = f".{_slug(boundary.name)}" if boundary is not None else ""
    return AuditRecord(
        id=f"{layer}{bname}.{slug}", layer=layer,
        title=title or f"{layer.replace('_', ' ')} layer {status}",
        boundary=boundary.to_dict() if boundary is not None else None,
        status=status, reason=reason, inputs=list(inputs or []),
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_") or "x"


def _import(module: str, name: str) -> Callable:
    return getattr(importlib.import_module(module), name)


def run_layer(layer: str, module: str, function: str, call: Callable[[Callable], Any], *,
              inputs: list | None = None) -> LayerOutcome:
    """Run one layer and never let it take the audit down.

    ``call(fn)`` invokes the layer's entry point. An import failure gives ``not assessed``;
    an :class:`InputError` gives ``not applicable`` with its message; any other exception
    gives ``not assessed`` with the exception text (and the traceback in the record's
    details). Records a layer returned with a status other than ``completed`` are kept as
    they are; the layer's own status is the worst of them.
    """
    started = time.perf_counter()
    try:
        fn = _import(module, function)
    except Exception as exc:  # noqa: BLE001 - the layer is not installed or does not import
        reason = f"{module}.{function} not available: {type(exc).__name__}: {exc}"
        rec = not_run_record(layer, "not assessed", reason, inputs=inputs)
        return LayerOutcome(layer, LayerResult([rec]), "not assessed", reason,
                            time.perf_counter() - started)
    try:
        result = call(fn)
    except InputError as exc:
        reason = str(exc)
        rec = not_run_record(layer, "not applicable", reason, inputs=inputs)
        return LayerOutcome(layer, LayerResult([rec]), "not applicable", reason,
                            time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001 - a failing layer is recorded, the audit goes on
        reason = f"layer error: {type(exc).__name__}: {exc}"
        rec = not_run_record(layer, "not assessed", reason, inputs=inputs)
        rec.details["traceback"] = traceback.format_exc(limit=8)
        return LayerOutcome(layer, LayerResult([rec]), "not assessed", reason,
                            time.perf_counter() - started)
    if result is None:
        result = LayerResult()
    if isinstance(result, (list, tuple)):
        result = LayerResult(list(result))
    statuses = [r.status for r in result.records]
    done = [s for s in statuses if s != "not applicable"]
    if not statuses:
        status, reason = "not applicable", "the layer returned no finding for this input"
        result.records.append(not_run_record(layer, status, reason, inputs=inputs))
    elif not done:
        status = "not applicable"
        reason = next((r.reason for r in result.records if r.reason), "nothing to measure")
    elif all(s == "completed" for s in done):
        # findings that do not apply to this input (e.g. one source only) are listed, not
        # counted against the layer
        status, reason = "completed", None
    elif any(s in ("completed", "partial") for s in done):
        status = "partial"
        reason = (f"{sum(s in ('partial', 'not assessed') for s in statuses)} of "
                  f"{len(statuses)} records partial or not assessed")
    else:
        status = "not assessed"
        reason = next((r.reason for r in result.records if r.reason), "no completed record")
    return LayerOutcome(layer, result, status, reason, time.perf_counter() - started)


# ============================================================================ inputs

def fingerprint_input(path: str | Path, role: str, manifest: pd.DataFrame | None) -> dict[str, Any]:
    """Fingerprint one input: the SHA-256 of a list file's bytes, or, for a folder, of its
    listing (one ``path<TAB>split<TAB>label`` line per row, release order), which names
    exactly what was read."""
    path = Path(path)
    rows = len(manifest) if manifest is not None else None
    if path.is_file():
        fp = file_fingerprint(path)
        return {"role": role, "path": str(path), "kind": "list", "sha256": fp["sha256"],
                "sha256_of": "the list file's bytes", "rows": rows}
    digest = hashlib.sha256()
    if manifest is not None:
        for p, s, lab in zip(manifest["path"].astype(str), manifest["split_released"].astype(str),
                             manifest["label"].astype(str)):
            digest.update(f"{p}\t{s}\t{lab}\n".encode("utf-8", "surrogateescape"))
    return {"role": role, "path": str(path), "kind": "folder", "sha256": digest.hexdigest(),
            "sha256_of": "the folder listing (path, split, label per row, release order)",
            "rows": rows}


def combine_scans(audited, other, *, other_corpus: str):
    """One scan over two releases (audited rows first, then ``other``'s), so a cross-corpus
    boundary can be searched with the same code as a within-corpus one. Rows of ``other`` are
    renumbered after the audited rows; thumbnails are concatenated in memory."""
    from splitscope.features.scanning import Scan

    m_a, m_b = audited.manifest, other.manifest.copy()
    m_b["corpus"] = pd.array([other_corpus] * len(m_b), dtype="string")
    manifest = pd.concat([m_a, m_b], ignore_index=True)
    manifest["row"] = pd.array(range(len(manifest)), dtype="int64")
    manifest.attrs = {"inputs": list(m_a.attrs.get("inputs", [])) + list(m_b.attrs.get("inputs", [])),
                      "excluded": list(m_a.attrs.get("excluded", [])) + list(m_b.attrs.get("excluded", []))}
    f_a, f_b = audited.features.copy(), other.features.copy()
    offset = len(audited.thumbnails)
    f_b["thumb_index"] = np.where(f_b["thumb_index"].to_numpy() >= 0,
                                  f_b["thumb_index"].to_numpy() + offset, -1)
    f_b = f_b[~f_b["file"].isin(set(f_a["file"]))]
    features = pd.concat([f_a, f_b], ignore_index=True).sort_values("file", kind="stable")
    features = features.reset_index(drop=True)
    thumbs = np.concatenate([np.asarray(audited.thumbnails), np.asarray(other.thumbnails)]) \
        if len(other.thumbnails) else np.asarray(audited.thumbnails)
    return Scan(manifest=manifest, features=features, thumbnails=thumbs, params=audited.params,
                workspace=audited.workspace, meta=dict(audited.meta))


# ============================================================================ figures data

def _boundary_rows(table: pd.DataFrame, boundary_name: str) -> pd.DataFrame:
    if "boundary" in table.columns:
        return table[table["boundary"].astype(str) == boundary_name]
    return table


def _find_column(table: pd.DataFrame, names: Sequence[str]) -> str | None:
    for n in names:
        if n in table.columns:
            return n
    return None


def best_rho_per_row(tables: Mapping[str, pd.DataFrame], boundary: Boundary) -> np.ndarray | None:
    """Each query row's best NCC ρ on ``boundary``, from a layer table that has one
    (a column ``best_rho``, one line per query row); ``None`` when no layer table has it."""
    for name in sorted(tables):
        table = tables[name]
        if not isinstance(table, pd.DataFrame):
            continue
        col = _find_column(table, ("best_rho", "ncc_best_rho", "nearest_rho"))
        if col is None:
            continue
        part = _boundary_rows(table, boundary.name)
        if "boundary" not in table.columns and len(part) != boundary.query.size:
            continue
        if "row" in part.columns:
            part = part[part["row"].isin(boundary.query.rows)]
        if len(part):
            return part[col].to_numpy(dtype=float)
    return None


def control_best_rho(control_table: pd.DataFrame | None) -> tuple[np.ndarray | None, str | None]:
    """Best ρ per control query row from the duplicates layer's ``control_query_flags`` table,
    and a label naming the control boundary; ``(None, None)`` without a control."""
    if control_table is None or control_table.empty or "ncc_best_rho" not in control_table:
        return None, None
    name = str(control_table["boundary"].iloc[0])
    return control_table["ncc_best_rho"].to_numpy(dtype=float), name


def distribution(best_rho: np.ndarray, label: str, role: str, lo: float = 0.5) -> dict[str, Any]:
    """Histogram of best ρ (bins of 0.01 from ``lo`` to 1, one bin below ``lo`` for the rest;
    flat rows, whose ρ is undefined, are counted apart)."""
    rho = np.asarray(best_rho, dtype=float)
    defined = rho[np.isfinite(rho)]
    edges = np.concatenate([[-1.0], np.round(np.arange(lo, 1.0001, 0.01), 4)])
    counts, _ = np.histogram(np.clip(defined, -1.0, 1.0), bins=edges)
    return {"label": label, "role": role, "edges": edges.tolist(), "counts": counts.tolist(),
            "undefined": int((~np.isfinite(rho)).sum()), "rows": int(rho.size)}


def sweep(best_rho: np.ndarray, label: str, role: str,
          thresholds: Sequence[float] = SWEEP) -> dict[str, Any]:
    """Share of query rows whose best ρ reaches each threshold (nearest rule, counted by
    :func:`splitscope.relations.ncc.ncc_sweep`); the denominator is every query row of the
    population (flat and failed rows included), as in the records' rates."""
    n = int(np.asarray(best_rho).size)
    points = [{"tau": float(r.tau), "numerator": int(r.affected), "denominator": n,
               "rate": (int(r.affected) / n) if n else None}
              for r in ncc_sweep(best_rho, thresholds).itertuples()]
    return {"label": label, "role": role, "points": points}


def gallery(tables: Mapping[str, pd.DataFrame], boundary: Boundary, rows: pd.DataFrame,
            limit: int = MAX_GALLERY_PAIRS) -> list[dict[str, Any]]:
    """The flagged pairs to show for ``boundary``: from layer pair tables (columns naming the
    query row and the reference row), highest similarity first, at most ``limit``; each with
    its measurements and both rows' path, label, split and file."""
    out: list[dict[str, Any]] = []
    seen: set[tuple[int, int]] = set()
    by_row = rows.set_index("row", drop=False)
    # pair tables (every measurement per pair) first, then other row-keyed tables
    for name in sorted(tables, key=lambda n: (0 if "pair" in n else 1, n)):
        table = tables[name]
        if not isinstance(table, pd.DataFrame) or not len(table):
            continue
        q_col = _find_column(table, ("query_row", "row"))
        r_col = _find_column(table, ("reference_row", "counterpart_row", "ref_row"))
        if q_col is None or r_col is None:
            continue
        part = _boundary_rows(table, boundary.name)
        part = part[part[q_col].isin(boundary.query.rows) & part[r_col].isin(boundary.reference.rows)]
        if not len(part):
            continue
        sort_col = _find_column(part, ("rho", "ncc_rho", "best_rho", "ssim"))
        if sort_col is not None:
            part = part.sort_values(sort_col, ascending=False, kind="stable", na_position="last")
        measure_cols = [c for c in part.columns if c in (
            "rho", "ncc_rho", "best_rho", "ssim", "d_p", "d_d", "phash_distance",
            "dhash_distance", "byte_identical", "pixel_identical", "variant")]
        if "rules" in part.columns:  # selected pairs that satisfy no rule are not flagged
            part = part[part["rules"].fillna("").astype(str) != ""]
        pred_col = _find_column(part, ("predicate", "rules", "rule", "kind"))
        for rec in part.head(limit * 2).to_dict("records"):
            key = (int(rec[q_col]), int(rec[r_col]))
            if key in seen:
                continue
            seen.add(key)
            out.append({
                "boundary": boundary.name,
                "table": name,
                "predicate": str(rec[pred_col]) if pred_col else name,
                "measurements": {c: _plain(rec[c]) for c in measure_cols},
                "query": _row_info(by_row, key[0]),
                "reference": _row_info(by_row, key[1]),
            })
            if len(out) >= limit:
                return out
    return out


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (np.generic,)):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _row_info(by_row: pd.DataFrame, row: int) -> dict[str, Any]:
    if row not in by_row.index:
        return {"row": row}
    r = by_row.loc[row]
    return {"row": int(row), **{c: (None if pd.isna(r[c]) else str(r[c]))
                                for c in ("path", "label", "split", "corpus", "file")
                                if c in by_row.columns}}


# ============================================================================ summary

def _population_phrase(pop: Mapping[str, Any]) -> str:
    name = str(pop.get("name"))
    if name == "release":
        return "the release"
    return f"the {name} split" if re.fullmatch(r"[A-Za-z0-9_-]+", name) else f"the {name} rows"


def _pct(num: float, den: float) -> str:
    return f"{100 * num / den:.3g}%" if den else "—"


def _find(records, metric: str, boundary: str) -> Mapping[str, Any] | None:
    """The record a metric reads on one boundary, whatever its status (so a verdict can say
    *not assessed* instead of staying silent)."""
    m = METRICS[metric]
    mine = [r for r in records if (r.get("boundary") or {}).get("name") == boundary
            and str(r.get("layer", "")).lower().startswith(m.layers) and not _is_control(r)]
    for r in mine:
        if (r.get("predicate") or {}).get("name") in m.predicates:
            return r
    for words in m.words:
        for r in mine:
            if all(w in _record_text(r) for w in words):
                return r
    return None


def _count_line(rec: Mapping[str, Any] | None, b: Mapping[str, Any], what: str,
                how: str) -> str:
    q = b["query"]
    ref = str(b["reference"]["name"])
    if q["name"] == ref:  # a release without a split, audited against itself
        ref = "another row of the same release" if ref == WITHIN_RELEASE else f"another {ref} row"
        q = {**q, "name": "release" if q["name"] == WITHIN_RELEASE else q["name"]}
    if rec is None:
        return (f"{_population_phrase(q).capitalize()}: {what} in {ref} not assessed "
                f"(no record).")
    if rec.get("status") not in ("completed", "partial"):
        return (f"{_population_phrase(q).capitalize()}: {what} in {ref} {rec.get('status')} — "
                f"{rec.get('reason')}")
    num, den = rec.get("numerator"), rec.get("denominator")
    if num is None or not den:
        return f"{_population_phrase(q).capitalize()}: {what} in {ref}: no rate (no rows)."
    if num:
        line = (f"{_pct(num, den)} of {_population_phrase(q)} ({int(num):,} of {int(den):,} "
                f"rows) has {what} in {ref} ({how})")
    else:  # a measured zero, said as one
        line = (f"None of {_population_phrase(q)} (0 of {int(den):,} rows, 0%) has {what} in "
                f"{ref} ({how})")
    if rec.get("status") == "partial":
        line += f"; partial: {rec.get('reason')}"
    control = (rec.get("details") or {}).get("control") or {}
    if control.get("rate") is not None:
        line += (f"; negative control {100 * control['rate']:.3g}% "
                 f"({control.get('numerator')} of {control.get('denominator')})")
        if control.get("unreliable"):
            line += " — predicate UNRELIABLE on this modality"
    return line + "."


def verdicts(doc: Mapping[str, Any]) -> list[str]:
    """One line per boundary a reader cannot misread (near-twin rate with numerator,
    denominator and predicate), then byte-identical, group-overlap, containment, balanced
    accuracy, header-probe and attribution lines."""
    records = doc.get("records") or []
    params = doc.get("params") or {}
    tau = params.get("tau", DEFAULT_TAU)
    geometry = f"{params.get('thumb_size', 96)}², {params.get('interpolation', 'bicubic')}"
    bounds = doc.get("boundaries") or []
    lines: list[str] = []
    for b in bounds:
        lines.append(_count_line(_find(records, "ncc_rate", b["name"]), b, "a near-twin",
                                 f"NCC ≥ {tau:g}, {geometry}"))
    for b in bounds:
        lines.append(_count_line(_find(records, "byte_identical_rate", b["name"]), b,
                                 "a byte-identical copy", "SHA-256, confirmed byte for byte"))
    for b in bounds:
        rec = _find(records, "group_overlap_rate", b["name"])
        if rec is None:
            continue
        if rec.get("status") not in ("completed", "partial") or not rec.get("denominator"):
            lines.append(f"Group overlap {b['name']}: {rec.get('status')} — "
                         f"{rec.get('reason') or 'no traceable query row'}")
            continue
        cov = rec.get("coverage") or {}
        traced = (f"; traceable {fmt_int(cov.get('traceable'))} of {fmt_int(cov.get('total'))} "
                  f"{b['query']['name']} rows") if cov.get("total") is not None else ""
        lines.append(
            f"{_pct(rec.get('numerator') or 0, rec['denominator'])} of traceable "
            f"{b['query']['name']} rows ({fmt_int(rec.get('numerator'))} of "
            f"{fmt_int(rec['denominator'])}) share a group with {b['reference']['name']}"
            f"{traced}.")
    for b in bounds:
        rec = _find(records, "containment_rate", b["name"])
        if rec is None or rec.get("status") not in ("completed", "partial"):
            continue
        kept = (rec.get("details") or {}).get("cleaned_external_rows")
        lines.append(
            f"Cross-corpus containment {b['name']}: {_pct(rec['numerator'], rec['denominator'])} "
            f"of {b['query']['name']} rows ({fmt_int(rec['numerator'])} of "
            f"{fmt_int(rec['denominator'])}) have a byte-identical or NCC ≥ {tau:g} counterpart "
            f"in {b['reference']['name']}" + (f"; cleaned external set: {kept} rows." if kept
                                               is not None else "."))
    if not any(l.startswith(("Group overlap", )) or "share a group" in l for l in lines):
        for r in records:
            if str(r.get("layer", "")).startswith("group") and "overlap" in _record_text(r) \
                    and r.get("status") not in ("completed", "partial"):
                lines.append(f"Group overlap: {r.get('status')} — {r.get('reason')}")
                break
    evals = [r for r in records if str(r.get("layer", "")).startswith("evaluation")
             and r.get("status") in ("completed", "partial") and r.get("estimate") is not None
             and "balanced accuracy" in str((r.get("predicate") or {}).get("name", "")).lower()]
    for r in evals[:6]:
        unc = r.get("uncertainty") or {}
        interval = (f" [{unc['low']:.3f}, {unc['high']:.3f}]"
                    if unc.get("low") is not None and unc.get("high") is not None else "")
        lines.append(f"{r.get('title') or r['id']}: {r['estimate']:.3f}{interval}"
                     f" (n = {fmt_int(r.get('denominator'))}).")
    if len(evals) > 6:
        lines.append(f"… and {len(evals) - 6} more balanced-accuracy records in audit.json.")
    names = {b["name"] for b in bounds}
    for r in records:
        if not str(r.get("layer", "")).startswith(("provenance", "probe")) or _is_control(r):
            continue
        if "header" not in _record_text(r) or r.get("estimate") is None:
            continue
        if r.get("status") not in ("completed", "partial"):
            continue
        bname = (r.get("boundary") or {}).get("name")
        if bname is not None and bname not in names:
            continue
        unc = r.get("uncertainty") or {}
        interval = (f", {100 * (unc.get('level') or 0.95):g}% interval [{unc['low']:.3f}, "
                    f"{unc['high']:.3f}]"
                    if unc.get("low") is not None and unc.get("high") is not None else "")
        chance = (r.get("details") or {}).get("chance")
        chance_txt = f", chance {chance:.3g}" if isinstance(chance, (int, float)) else ""
        lines.append(f"{r.get('title') or r['id']}{f' ({bname})' if bname else ''}: "
                     f"balanced accuracy {r['estimate']:.3f}{interval}{chance_txt}.")
    for r in records:
        if r.get("layer") != "attribution" or r.get("status") not in ("completed", "partial") \
                or r.get("estimate") is None:
            continue
        det, unc = r.get("details") or {}, r.get("uncertainty") or {}
        ex, cl = det.get("exposed") or {}, det.get("clean") or {}
        where = ((r.get("predicate") or {}).get("params") or {}).get("boundary")
        interval = (f" [{unc['low']:+.3f}, {unc['high']:+.3f}]"
                    if unc.get("low") is not None and unc.get("high") is not None else "")
        lines.append(
            f"Attribution outside anatomy{f' ({where})' if where else ''}: leaked rows put "
            f"{ex.get('mean', float('nan')):.3f} of their attribution mass outside the mask, "
            f"clean rows {cl.get('mean', float('nan')):.3f} (n = {fmt_int(ex.get('assessed'))} "
            f"and {fmt_int(cl.get('assessed'))}); difference {r['estimate']:+.3f}{interval}.")
    return lines


def fmt_int(value: Any) -> str:
    return "—" if value is None else f"{int(value):,}"


# ============================================================================ the audit

@dataclass
class AuditResult:
    """What :func:`audit` produced: the document (``audit.json``), where it was written, and
    the exit code the CLI returns."""

    document: dict[str, Any]
    out_dir: Path
    exit_code: int
    files: list[Path] = field(default_factory=list)

    @property
    def report(self) -> Path:
        return self.out_dir / "report.html"

    @property
    def audit_json(self) -> Path:
        return self.out_dir / "audit.json"


def _counts(series: pd.Series) -> dict[str, int]:
    return {str(k): int(v) for k, v in series.astype("string").fillna("<NA>")
            .value_counts(sort=False).sort_index().items()}


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _default_workspace(out_dir: Path) -> Path:
    return out_dir / "workspace"


def fingerprint_path(role: str, path: str | Path) -> dict[str, Any]:
    """Input fingerprint of a file (SHA-256 of its bytes) or a folder (SHA-256 over the relative
    path and SHA-256 of every file, sorted)."""
    path = Path(path)
    if path.is_file():
        return {"role": role, "path": str(path), "kind": "file",
                "sha256": sha256_file(path), "sha256_of": "the file's bytes", "rows": None}
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f.relative_to(path).as_posix().encode() + b"\0")
        digest.update(sha256_file(f).encode() + b"\n")
    return {"role": role, "path": str(path), "kind": "folder", "sha256": digest.hexdigest(),
            "sha256_of": "relative path and SHA-256 of every file, sorted", "rows": None}


def _attribution_outcome(outcomes, manifest, split_boundaries, maps, masks,
                         record_inputs) -> LayerOutcome:
    """The attribution layer: rows the duplicates layer flags across the first split boundary
    versus the other query rows of that boundary (METHODS §5.10)."""
    from splitscope.relations.audit import DEDUP_PREDICATES

    def not_run(status: str, reason: str) -> LayerOutcome:
        return LayerOutcome("attribution", LayerResult([not_run_record(
            "attribution", status, reason, inputs=record_inputs)]), status, reason, 0.0)

    if maps is None:
        return not_run("not applicable", "no attribution maps and masks given "
                       "(--attribution-maps, --attribution-masks)")
    if not split_boundaries:
        return not_run("not applicable", "no split boundary (train/test) whose rows to compare")
    dup = next((o for o in outcomes if o.layer == "duplicates"), None)
    cont = dup.result.tables.get("contaminated") if dup is not None else None
    if dup is None or dup.status in ("not assessed", "not applicable") or cont is None:
        return not_run("not assessed", "needs the duplicates layer's flagged rows, and that "
                       "layer did not run")
    b = split_boundaries[0]
    groups = "group" if "group" in manifest.columns and manifest["group"].notna().any() else None

    def call(fn):
        on_b = cont[cont["boundary"].astype(str) == b.name]
        hit = on_b["predicate"].isin(DEDUP_PREDICATES).to_numpy(bool)
        exposed = np.unique(on_b.loc[hit, "row"].to_numpy(np.int64))
        preds = [p for p in DEDUP_PREDICATES if p in set(on_b["predicate"].astype(str))]
        name = f"leaked ({b.name}; {', '.join(preds) or 'no predicate flagged a row'})"
        return fn(manifest, maps, masks, exposed, rows=b.query.rows, group_column=groups,
                  exposed_name=name, inputs=record_inputs,
                  params={"boundary": b.name, "exposed_by": list(DEDUP_PREDICATES)})[0]

    return run_layer("attribution", "splitscope.evaluation.attribution", "audit_attribution",
                     call, inputs=record_inputs)


def audit(
    inputs: str | Path | Sequence[str | Path],
    *,
    control: str | Path | None = None,
    external: str | Path | None = None,
    predictions: str | Path | None = None,
    group_regex: str | None = None,
    out_dir: str | Path = "splitscope-audit",
    workspace: str | Path | None = None,
    tau: float = DEFAULT_TAU,
    radius: int = DEFAULT_RADIUS,
    thumb_size: int = 96,
    mode: str = "exact",
    interpolation: str = "bicubic",
    dihedral: bool = False,
    transforms: int = 50,
    fail_on: Sequence[str | Condition] = (),
    workers: int | None = None,
    progress: bool | None = None,
    max_pairs: int = MAX_GALLERY_PAIRS,
    command: str | None = None,
    layers: Sequence[str] | None = None,
    score_kind: str = "score",
    attribution_maps: str | Path | None = None,
    attribution_masks: str | Path | None = None,
) -> AuditResult:
    """Audit a release with every applicable layer and write the audit's outputs.

    Parameters
    ----------
    inputs : folder or list file (or several)
        The audited release; its released split gives the boundaries test → train and
        val → train.
    control : folder or list file, optional
        A release known to be clean (a negative control): the same predicates run on its own
        test → train boundary, and its flag rate is reported beside the audited one.
    external : folder or list file, optional
        Another corpus: the boundary *external → audited training rows* (cross-corpus
        containment) is audited too.
    predictions : folder or file, optional
        Saved predictions for the evaluation layer; without it the evaluation layer is
        recorded ``not applicable``.
    group_regex : str, optional
        Named-group regex over the basename giving the group (patient, video) and frame.
    out_dir : path-like
        Where ``audit.json``, ``report.html``, ``lists/`` and ``artifacts.json`` go.
    workspace : path-like, optional
        Feature cache (default ``OUT_DIR/workspace``); reused across runs. Control and external
        corpora are cached in sibling folders ``<workspace>-control`` / ``-external``.
    tau, radius : float, int
        NCC threshold and Hamming radius of the hash rules (METHODS §2).
    thumb_size, mode, interpolation : optional
        Thumbnail geometry (part of every pixel predicate).
    dihedral : bool
        Also match rotated/flipped copies (METHODS §2.8).
    transforms : int
        Reference images in the seeded transform-sensitivity sample (METHODS §2.7); 0 skips it.
    fail_on : sequence of str
        Conditions ``metric op value`` (see :data:`METRICS`); any that holds gives exit code 1.
    score_kind : {"score", "probability", "logit"}
        What the saved prediction scores are (declared, never guessed); probability metrics
        (ECE, Brier, NLL) and the reliability diagram need ``probability`` or ``logit``.
    layers : sequence of str, optional
        Run only these layers (``duplicates``, ``groups``, ``provenance``, ``evaluation``,
        ``attribution``, ``external``); the others are recorded ``not assessed`` with reason
        "not requested".
    attribution_maps, attribution_masks : path-like, optional
        Supplied attribution maps and body/organ masks (METHODS §5.10; formats of
        :func:`splitscope.evaluation.attribution.load_maps`). With both, the attribution layer
        compares the share of attribution mass outside the mask on the query rows of the first
        split boundary (test → train): rows the duplicates layer flags across it (the
        predicates of the deduplicated view) versus the others, with a cluster bootstrap over
        groups when the manifest has them. Without them the layer is ``not applicable``.

    Returns
    -------
    AuditResult
    """
    conditions = [c if isinstance(c, Condition) else parse_condition(c) for c in fail_on]
    if not 0 < float(tau) <= 1:
        raise InputError(f"tau must be in (0, 1]; got {tau}")
    inputs_list = [inputs] if isinstance(inputs, (str, Path)) else list(inputs)
    if (attribution_maps is None) != (attribution_masks is None):
        raise InputError("attribution maps and masks go together: give both or neither")
    for item in inputs_list + [p for p in (control, external, predictions, attribution_maps,
                                            attribution_masks) if p is not None]:
        if not Path(item).exists():
            raise InputError(f"input not found: {item}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    workspace = Path(workspace) if workspace is not None else _default_workspace(out_dir)
    started_wall, started = _now(), time.perf_counter()
    wanted = set(layers) if layers is not None else None
    if wanted is not None and wanted - set(LAYERS):
        raise InputError(f"unknown layer(s) {sorted(wanted - set(LAYERS))}; choose from "
                         f"{', '.join(LAYERS)}")

    from splitscope.features.scanning import scan as run_scan

    scan_opts = {"thumb_size": thumb_size, "mode": mode, "interpolation": interpolation,
                 "workers": workers, "progress": progress}
    t = time.perf_counter()
    audited_scan = run_scan(inputs_list, workspace, group_regex=group_regex, **scan_opts)
    scan_seconds = time.perf_counter() - t
    manifest = audited_scan.manifest
    boundaries = release_boundaries(manifest)
    input_fps = [fingerprint_input(p, "audited", manifest if len(inputs_list) == 1 else
                                   manifest[manifest["corpus"] == _corpus_of(p, manifest)])
                 for p in inputs_list]

    control_scan = external_scan = None
    if control is not None:
        control_scan = run_scan(control, Path(f"{workspace}-control"), **scan_opts)
        input_fps.append(fingerprint_input(control, "control", control_scan.manifest))
    if external is not None:
        external_scan = run_scan(external, Path(f"{workspace}-external"), **scan_opts)
        input_fps.append(fingerprint_input(external, "external", external_scan.manifest))
    for role, given in (("predictions", predictions), ("attribution maps", attribution_maps),
                        ("attribution masks", attribution_masks)):
        if given is not None:
            input_fps.append(fingerprint_path(role, given))
    record_inputs = [{"path": i["path"], "sha256": i["sha256"]} for i in input_fps]

    outcomes: list[LayerOutcome] = []

    def skip(layer: str) -> bool:
        if wanted is None or layer in wanted:
            return False
        reason = "not requested (layers= option)"
        outcomes.append(LayerOutcome(layer, LayerResult([not_run_record(
            layer, "not assessed", reason, inputs=record_inputs)]), "not assessed", reason, 0.0))
        return True

    lists_dir = out_dir / "lists"
    if lists_dir.is_dir() and ((out_dir / "audit.json").is_file()
                               or (out_dir / "artifacts.json").is_file()):
        shutil.rmtree(lists_dir)  # an earlier audit's lists: never mixed with this run's
    lists_dir.mkdir(parents=True, exist_ok=True)
    # group overlap, cross-split probes and the partition classifier compare two sides; a
    # release audited against itself has none (its within-pool probe still runs)
    split_boundaries = [b for b in boundaries if not b.within]

    if not skip("duplicates"):
        control_arg = control_scan
        outcomes.append(run_layer(
            "duplicates", "splitscope.relations.audit", "audit_duplicates",
            lambda fn: fn(audited_scan, boundaries, control=control_arg, tau=tau,
                             radius=radius, dihedral=dihedral, out_dir=lists_dir,
                             artifacts_manifest=False, transform_sample=transforms),
            inputs=record_inputs))
    if not skip("groups"):
        outcomes.append(run_layer(
            "groups", "splitscope.probes.audit", "audit_groups",
            lambda fn: fn(manifest, split_boundaries),
            inputs=record_inputs))
    if not skip("provenance"):
        outcomes.append(run_layer(
            "provenance", "splitscope.probes.audit", "audit_provenance",
            lambda fn: fn(audited_scan, split_boundaries), inputs=record_inputs))
    if not skip("evaluation"):
        if predictions is None:
            reason = "no saved predictions given (--predictions DIR)"
            outcomes.append(LayerOutcome("evaluation", LayerResult([not_run_record(
                "evaluation", "not applicable", reason, inputs=record_inputs)]),
                "not applicable", reason, 0.0))
        else:
            views = []
            removed = lists_dir / "dedup" / "test_removed.csv"
            if removed.is_file():  # the duplicates layer's deduplicated test split
                views.append(f"deduplicated=exclude:{removed}")
            outcomes.append(run_layer(
                "evaluation", "splitscope.evaluation.audit", "audit_predictions",
                lambda fn: fn(manifest, predictions, views=views,
                                 score_kind=score_kind),
                inputs=record_inputs))
    if not skip("attribution"):
        outcomes.append(_attribution_outcome(
            outcomes, manifest, split_boundaries, attribution_maps, attribution_masks,
            record_inputs))
    external_boundary = None
    if not skip("external"):
        if external_scan is None:
            reason = "no external corpus given (--external ROOT)"
            outcomes.append(LayerOutcome("external", LayerResult([not_run_record(
                "external", "not applicable", reason, title="cross-corpus containment "
                "not applicable", inputs=record_inputs)]), "not applicable", reason, 0.0))
        else:
            ext_name = f"external:{Path(external).name}"
            combined = combine_scans(audited_scan, external_scan, other_corpus=ext_name)
            n_a = len(manifest)
            rows_all = combined.manifest["row"].to_numpy(dtype=np.int64)
            train = manifest.index[manifest["split"].astype("string") == "train"].to_numpy()
            ref_rows = manifest["row"].to_numpy(dtype=np.int64)[train] if len(train) else \
                manifest["row"].to_numpy(dtype=np.int64)
            ref_name = "train" if len(train) else "audited corpus"
            external_boundary = Boundary(Population(ext_name, np.sort(rows_all[n_a:])),
                                         Population(ref_name, np.sort(ref_rows)))
            external_dir = lists_dir / "external"
            external_dir.mkdir(parents=True, exist_ok=True)
            export_frame(combined.manifest).to_csv(external_dir / "manifest.csv", index=False)
            outcome = run_layer(
                "external", "splitscope.relations.audit", "audit_duplicates",
                lambda fn: fn(combined, [external_boundary], control=None, tau=tau,
                                 radius=radius, dihedral=dihedral, out_dir=external_dir,
                                 artifacts_manifest=False),
                inputs=record_inputs)
            # only the cross-corpus boundary's findings: copies inside each split are the
            # duplicates layer's (and the row ids of these tables are those of
            # lists/external/manifest.csv: audited rows first, then the external corpus)
            kept = [r for r in outcome.result.records
                    if (r.boundary or {}).get("name") == external_boundary.name
                    or r.status != "completed"]
            for rec in kept:
                if rec.boundary is not None:
                    rec.boundary = {**rec.boundary, "kind": "cross-corpus"}
            outcome.result.records = kept
            outcome.result.tables = {f"external/{k}": v for k, v in outcome.result.tables.items()}
            outcomes.append(outcome)

    # ---------------------------------------------------------------- assemble
    all_boundaries = list(boundaries) + ([external_boundary] if external_boundary else [])
    records = [r for o in outcomes for r in o.result.records]
    hex64 = re.compile(r"^[0-9a-f]{64}$")
    for r in records:  # every record names what was read, by SHA-256
        given = list(r.inputs or [])
        if not given or not all(hex64.match(str(i.get("sha256", ""))) for i in given):
            if given:
                r.details = {**r.details, "inputs_as_given": given}
            r.inputs = list(record_inputs)
    tables: dict[str, Any] = {}
    for o in outcomes:
        for name, table in o.result.tables.items():
            key = name if name not in tables else f"{o.layer}_{name}"
            tables[key] = table
    scan_for_figures = audited_scan if external_scan is None else \
        combine_scans(audited_scan, external_scan, other_corpus=f"external:{Path(external).name}")
    rows_for_gallery = scan_for_figures.rows()

    figures: dict[str, Any] = {}
    gallery_items: list[dict[str, Any]] = []
    # the figures draw what the duplicates layer measured; nothing is searched again here
    control_rho, control_name = control_best_rho(tables.get("control_query_flags"))
    for b in all_boundaries:
        fig: dict[str, Any] = {"tau": float(tau)}
        rho = best_rho_per_row({n: t for n, t in tables.items() if "control" not in n}, b)
        if rho is not None:
            fig["distribution"] = [distribution(rho, f"{b.name} (audited)", "audited")]
            fig["sweep"] = [sweep(rho, f"{b.name} (audited)", "audited")]
            if control_rho is not None:
                label = f"negative control {control_name}"
                fig["distribution"].append(distribution(control_rho, label, "control"))
                fig["sweep"].append(sweep(control_rho, label, "control"))
        figures[b.name] = fig
        gallery_items.extend(gallery({n: t for n, t in tables.items() if "control" not in n},
                                     b, rows_for_gallery, max_pairs))

    export_problems: list[str] = []
    written = write_tables(tables, lists_dir, problems=export_problems, keep_existing=True)
    manifest_out = lists_dir / "manifest.csv"
    export_frame(manifest).to_csv(manifest_out, index=False)
    written.append(manifest_out)
    written.extend(p for p in lists_dir.rglob("*") if p.is_file() and p not in written)

    layer_summaries = [o.summary() for o in outcomes]
    record_dicts = [r.to_dict() for r in records]
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "splitscope-audit",
        "run": {"started": started_wall, "finished": None, "duration_s": 0.0,
                "command": command, "exit_code": None,
                "host": {"platform": platform.platform(), "python": sys.version.split()[0],
                         "cpus": os.cpu_count()},
                "scan_seconds": round(scan_seconds, 3)},
        "inputs": input_fps,
        "params": {"tau": float(tau), "radius": int(radius), "thumb_size": int(thumb_size),
                   "mode": mode, "interpolation": interpolation, "dihedral": bool(dihedral),
                   "group_regex": group_regex, "sweep": list(SWEEP),
                   "max_gallery_pairs": int(max_pairs), "workspace": str(workspace),
                   "feature_params": _feature_params(audited_scan),
                   "layers": sorted(wanted) if wanted is not None else "all"},
        "software": dict(software_versions()),
        "manifest": {"rows": len(manifest), "splits": _counts(manifest["split"]),
                     "labels": _counts(manifest["label"]),
                     "corpora": _counts(manifest["corpus"]),
                     "excluded": len(manifest.attrs.get("excluded", []) or []),
                     "scan": _scan_summary(audited_scan)},
        "boundaries": [{**b.to_dict(), "kind": "cross-corpus" if b is external_boundary
                        else "released split"} for b in all_boundaries],
        "layers": layer_summaries,
        "records": record_dicts,
        "scorecard": score_card(record_dicts),
        "figures": figures,
        "gallery": gallery_items,
        "fail_on": [],
        "artifacts": [artifact(p, out_dir) for p in sorted(set(written))],
    }
    doc["fail_on"] = evaluate_conditions(conditions, record_dicts, layer_summaries,
                                         [b.name for b in all_boundaries])
    held = any(c["held"] for c in doc["fail_on"])
    crashed = any(str(l.get("reason") or "").startswith("layer error") for l in layer_summaries)
    exit_code = EXIT_FAIL_ON if held else (EXIT_LAYER_FAILED if crashed else EXIT_OK)
    doc["summary"] = {"verdicts": verdicts(doc), "lines": _summary_notes(doc) + export_problems}
    doc["run"]["finished"] = _now()
    doc["run"]["duration_s"] = round(time.perf_counter() - started, 3)
    doc["run"]["exit_code"] = exit_code

    errors = validation_errors(doc)
    if errors:  # the document is still written; the problem is visible, never silent
        doc["summary"]["lines"].append(
            f"audit.json does not fully match its schema ({len(errors)} problem(s)), first: "
            f"{errors[0]}")
        print("warning: audit.json schema problems:\n  " + "\n  ".join(errors[:10]),
              file=sys.stderr)

    from splitscope.report.html import render_report

    audit_json = out_dir / "audit.json"
    write_json(doc, audit_json)
    report = render_report(doc, out_dir / "report.html", max_pairs=max_pairs)
    files = [audit_json, report] + [out_dir / a["path"] for a in doc["artifacts"]]
    files.append(write_artifacts_manifest(out_dir, files))
    return AuditResult(document=doc, out_dir=out_dir, exit_code=exit_code, files=files)


def _corpus_of(path: str | Path, manifest: pd.DataFrame) -> str:
    name = Path(path).name if Path(path).is_dir() else Path(path).stem
    return name


def _feature_params(scan) -> dict[str, Any]:
    params = getattr(scan, "params", None)
    if params is not None and hasattr(params, "to_dict"):
        try:
            return dict(params.to_dict())
        except (TypeError, ValueError, AttributeError):
            return {}
    return {}


def _scan_summary(scan) -> dict[str, Any]:
    try:
        s = scan.summary()
    except Exception as exc:  # noqa: BLE001 - the summary is informative only
        return {"error": f"{type(exc).__name__}: {exc}"}
    keep = ("rows", "unique_files", "rows_without_file", "features_ok", "thumbnails",
            "flat_thumbnails", "failures", "extracted", "reused", "seconds")
    return json.loads(json.dumps({k: s.get(k) for k in keep}, default=str))


def _summary_notes(doc: Mapping[str, Any]) -> list[str]:
    """Layers that did not complete (with the reason) and the --fail-on outcomes."""
    notes = []
    for l in doc["layers"]:
        if l["status"] != "completed":
            notes.append(f"Layer {l['layer']}: {l['status']} — {l.get('reason')}")
    for c in doc.get("fail_on") or []:
        value = "not measured" if c["value"] is None else f"{c['value']:.4g}"
        notes.append(f"--fail-on {c['condition']}: value {value} → "
                     f"{'HELD (exit 1)' if c['held'] else 'not held'}")
    return notes
