"""``report.html``: one self-contained page rendered from an audit document (``audit.json``).

The page is rendered by Jinja2 with autoescaping on, so every name, label and path that came
from the input is text, never markup. Figures are small PNG data URIs (see
:mod:`splitscope.report.figures`); the gallery's thumbnails are read from the files named in
the document (relative to the release roots it records), downscaled (longest side
``thumb_px``) and JPEG-encoded, at most ``max_pairs`` pairs. Nothing is fetched from the
network: no scripts, fonts or style sheets from outside the file.
"""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from splitscope.records import roles as R
from splitscope.records.format import percent
from splitscope.records.paths import input_name
from splitscope.records.roles import Roles, has_role, is_transform_sensitivity, with_role
from splitscope.report import figures

TEMPLATE_DIR = Path(__file__).with_name("templates")
MAX_PAIRS = 60
THUMB_PX = 96
#: the example pairs under the first figure
EXAMPLES = 3

#: records by the name of the layer that wrote them
_PAIR_LAYERS = ("duplicates", "external")
_GROUP_LAYERS = ("groups",)
_PROVENANCE_LAYERS = ("provenance",)
_EVALUATION_LAYERS = ("evaluation", "experiments")
#: the provenance tables of a boundary, by the role their records play (records.roles)
_PROVENANCE_VIEWS = {"header": R.HEADER_PROBE, "image_stats": R.IMAGE_STATS_PROBE,
                     "partition": R.PARTITION}


# ---------------------------------------------------------------------------- formatting

def fmt_num(value: Any, digits: int = 4) -> str:
    """A number for a table cell: integers as integers, floats to ``digits`` significant
    digits, ``None`` as an em dash (never as 0)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if value.is_integer() and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:.{digits}g}"
    return str(value)


def fmt_estimate(record: Mapping[str, Any]) -> str:
    """The estimate of a record: a percentage with numerator and denominator for a rate, else
    the number itself."""
    est = record.get("estimate")
    num, den = record.get("numerator"), record.get("denominator")
    if num is not None and den and (est is None or abs(est - num / den) < 1e-9):
        return f"{100 * num / den:.3g}% ({fmt_num(num)} of {fmt_num(den)})"
    if est is not None and den:  # an estimate that is not numerator/denominator (AUC, BA)
        return f"{fmt_num(est)} (n = {fmt_num(den)})"
    if num is not None and den == 0:
        return f"{fmt_num(num)} of 0 (rate undefined)"
    if est is None:
        return "—" if record.get("status") == "completed" else "not measured"
    return fmt_num(est)


def fmt_interval(unc: Mapping[str, Any] | None) -> str:
    """``[low, high] (level, kind)`` or an em dash."""
    if not unc or unc.get("low") is None or unc.get("high") is None:
        return "—"
    level = unc.get("level")
    lvl = f"{100 * level:g}% " if level else ""
    return f"[{fmt_num(unc['low'])}, {fmt_num(unc['high'])}] {lvl}{unc.get('kind', '')}".strip()


def fmt_params(predicate: Mapping[str, Any] | None) -> str:
    """``name (k=v, ...)`` of a predicate or contrast."""
    if not predicate:
        return "—"
    params = predicate.get("params") or {}
    shown = [(k, v) for k, v in params.items() if not isinstance(v, (dict, list))][:8]
    inner = ", ".join(f"{k}={_compact(v)}" for k, v in shown)
    if len(shown) < len(params):
        more = f"… ({len(params) - len(shown)} more in audit.json)"
        inner = f"{inner}, {more}" if inner else more
    name = predicate.get("name") or ""
    return f"{name} ({inner})" if inner else name or "—"


def _compact(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 48 else text[:47] + "…"


def to_json(value: Any, limit: int = 4000) -> str:
    """Pretty JSON for a ``<pre>`` block, truncated to ``limit`` characters (the full value
    is in audit.json)."""
    text = json.dumps(value, indent=1, ensure_ascii=False, default=str)
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters in audit.json)"
    return text


# ---------------------------------------------------------------------------- thumbnails

def thumbnail_uri(file: str | None, size: int = THUMB_PX, opener=None) -> str | None:
    """A JPEG data URI of ``file`` downscaled so its longest side is ``size`` pixels, or
    ``None`` when the file cannot be read or decoded (the gallery then says so). ``opener``
    (default ``PIL.Image.open``) opens the key as an image, e.g. a table cell's or a listed
    URL's (the audit passes :func:`splitscope.features.sources.open_image`)."""
    if not file:
        return None
    try:
        from PIL import Image

        with (opener or Image.open)(file) as img:
            img.draft("RGB", (size, size))
            img = img.convert("L") if img.mode in ("I", "I;16", "F", "L", "LA", "1") else img.convert("RGB")
            img.thumbnail((size, size))
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=80)
    except Exception:  # noqa: BLE001 - unreadable, missing or undecodable: shown as "no thumbnail"
        return None
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


# ---------------------------------------------------------------------------- view model

def _layer_of(record: Mapping[str, Any]) -> str:
    return str(record.get("layer") or "").lower()


def _provenance(record: Mapping[str, Any], roles: Roles | None) -> bool:
    """Whether a record belongs to the provenance part of a boundary's section: written by the
    provenance layer, or playing one of its tables' roles."""
    return _layer_of(record) in _PROVENANCE_LAYERS or any(
        has_role(record, role, roles) for role in _PROVENANCE_VIEWS.values())


def _estimate_items(records, label_of=None) -> list[dict[str, Any]]:
    items = []
    for r in records:
        if r.get("estimate") is None or r.get("status") not in ("completed", "partial"):
            continue
        unc = r.get("uncertainty") or {}
        items.append({"label": label_of(r) if label_of else (r.get("title") or r["id"]),
                      "estimate": r["estimate"], "low": unc.get("low"), "high": unc.get("high")})
    return items


def _safe_figure(fn, *args, **kwargs) -> dict[str, Any]:
    """Draw one figure; a failure becomes a visible note instead of a broken report."""
    try:
        return {"uri": fn(*args, **kwargs), "error": None}
    except Exception as exc:  # noqa: BLE001 - a figure never takes the whole report down
        return {"uri": None, "error": f"{type(exc).__name__}: {exc}"}


def _boundary_view(boundary: Mapping[str, Any], records: list[dict], audit: Mapping[str, Any],
                   images: dict[str, str | None], max_pairs: int, thumb_px: int,
                   opener=None, roles: Roles | None = None) -> dict[str, Any]:
    name = boundary["name"]
    mine = [r for r in records if (r.get("boundary") or {}).get("name") == name]
    conflicts = with_role(mine, R.LABEL_CONFLICT, roles)
    census = [r for r in mine if _layer_of(r) in _PAIR_LAYERS or r in conflicts]
    groups = [r for r in mine if _layer_of(r) in _GROUP_LAYERS]
    # pool-wide provenance findings (within-pool probe, internal partition control) sit
    # beside each boundary's cross-split ones, which they are compared with
    prov = [r for r in records if _provenance(r, roles)
            and ((r.get("boundary") or {}).get("name") == name or not r.get("boundary"))]
    tables = {key: with_role(prov, role, roles) for key, role in _PROVENANCE_VIEWS.items()}
    header, partition, image_stats = tables["header"], tables["partition"], tables["image_stats"]
    other_prov = [r for r in prov if r not in header and r not in partition
                  and r not in image_stats]
    other = [r for r in mine if r not in census and r not in groups and r not in prov]

    fig = (audit.get("figures") or {}).get(name) or {}
    view: dict[str, Any] = {"boundary": boundary, "census": census, "groups": groups,
                            "header": header, "partition": partition, "image_stats": image_stats,
                            "other_prov": other_prov,
                            "other": other, "tau": fig.get("tau")}
    if fig.get("distribution"):
        view["distribution"] = _safe_figure(figures.similarity_distribution, fig["distribution"],
                                            tau=fig.get("tau"))
    if fig.get("sweep"):
        view["sweep"] = _safe_figure(figures.threshold_sweep, fig["sweep"], tau=fig.get("tau"))
        view["sweep_rows"] = fig["sweep"]
    for key, recs, xlabel, ref in (
        ("header_fig", header, "balanced accuracy (header features only)", None),
        ("image_stats_fig", image_stats, "balanced accuracy (image statistics only)", None),
        ("partition_fig", partition, "estimate (AUC, d_A or balanced accuracy)", 0.5),
    ):
        items = _estimate_items(recs)
        if items:
            view[key] = _safe_figure(figures.interval_chart, items, xlabel=xlabel, reference=ref)
    view["per_class"] = per_class_table(census)
    view["conflicts"] = conflicts
    view["census"] = [r for r in census if r not in conflicts]
    pairs = [_located(g, audit) for g in (audit.get("gallery") or [])
             if g.get("boundary") == name][:max_pairs]
    given = (audit.get("options") or {}).get("inputs") or {}
    allowed = {"outside_root": bool(given.get("allow_outside_root")),
               "url": bool(given.get("allow_urls"))}
    for pair in pairs:
        for side in ("query", "reference"):
            row = pair.get(side) or {}
            file = row.get("file")
            if row.get("path_issue") and not allowed.get(row["path_issue"]):
                continue  # never read, never shown
            if file not in images:
                images[file] = thumbnail_uri(file, thumb_px, opener)
    view["gallery"] = pairs
    summary = fig.get("gallery") or {}
    view["gallery_summary"] = summary
    view["gallery_total"] = summary.get("flagged_pairs", sum(
        1 for g in (audit.get("gallery") or []) if g.get("boundary") == name))
    view["order"] = _ranked_parts(view, audit.get("findings") or [], name)
    return view


#: the parts of a boundary's section, in the order they show when no finding ranks them
PARTS = ("conflicts", "duplicates", "groups", "header", "image_stats", "partition")
#: the records each part shows (by the boundary view's key)
_PART_RECORDS = {"conflicts": "conflicts", "duplicates": "census", "groups": "groups",
                 "header": "header", "image_stats": "image_stats", "partition": "partition"}


def _ranked_parts(view: Mapping[str, Any], measured, boundary: str) -> list[str]:
    """The parts of a boundary's section in the order of the audit's ranked findings (the
    part that shows a finding's record comes where the finding ranks), then the rest."""
    order: list[str] = []
    for m in measured:
        if not m.get("found") or m.get("boundary") != boundary:
            continue
        for part in PARTS:
            ids = {r.get("id") for r in view.get(_PART_RECORDS[part]) or []}
            if m.get("record") in ids and part not in order:
                order.append(part)
    return order + [p for p in PARTS if p not in order]


def _located(pair: Mapping[str, Any], audit: Mapping[str, Any]) -> dict[str, Any]:
    """A gallery pair whose sides' ``file`` (published relative to the release root) is where
    the file is on this machine, through the roots the document records
    (:func:`splitscope.records.paths.resolve_in`), for its thumbnails."""
    from splitscope.records.paths import resolve_in

    located = dict(pair)
    for side in ("query", "reference"):
        if isinstance(pair.get(side), Mapping):
            located[side] = {**pair[side], "file": resolve_in(audit, pair[side])}
    return located


def control_text(record: Mapping[str, Any], roles: Roles | None = None) -> str:
    """The census table's control cell: the predicate's flag rate on the negative control
    with its reliability mark, or why there is none (exact identity, a deduplicated split)."""
    if record.get("section") == "identity":
        return "— (exact identity needs no calibration)"
    if has_role(record, R.DEDUPLICATED_SPLIT, roles):
        return "— (rows removed by the predicates above)"
    control = (record.get("details") or {}).get("control")
    if not control:
        return "uncalibrated: no negative control given"
    if control.get("rate") is None or not control.get("denominator"):
        return str(control.get("status") or "not assessed on the control (no control row "
                   "could be assessed)")
    mark = "UNRELIABLE on this modality" if control.get("unreliable") else "reliable"
    return (f"{100 * control['rate']:.3g}% ({fmt_num(control.get('numerator'))} of "
            f"{fmt_num(control.get('denominator'))}) · {mark}")


def per_class_table(census: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Affected query rows / query rows per class (columns) and predicate (rows), from the
    census records' ``by_label`` breakdowns."""
    classes: list[str] = []
    rows = []
    for r in census:
        by = (r.get("details") or {}).get("by_label")
        if not by or r.get("status") not in ("completed", "partial"):
            continue
        cells = {str(x["label"]): x for x in by}
        for c in cells:
            if c not in classes:
                classes.append(c)
        rows.append({"title": r.get("title") or r["id"], "cells": cells})
    classes.sort()
    return {"classes": classes, "rows": [
        {"title": row["title"], "cells": [
            (f"{row['cells'][c]['affected']:,} / {row['cells'][c]['rows']:,} "
             f"({100 * row['cells'][c]['rate']:.3g}%)") if c in row["cells"] else "—"
            for c in classes]} for row in rows]}


def quality_view(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The image-quality records (METHODS §4.6) and one table: flag (rows) × split/class
    (columns), each cell ``rate (flagged of assessed)``, from ``details.by_split_class``."""
    found = [r for r in records if _layer_of(r) == "quality"]
    flags = [r for r in found if (r.get("details") or {}).get("by_split_class")
             and r.get("status") in ("completed", "partial")]
    columns: list[tuple[str, str]] = []
    for r in flags:
        for c in r["details"]["by_split_class"]:
            key = (str(c["split"]), str(c["label"]))
            if key not in columns:
                columns.append(key)
    columns.sort()
    rows = []
    for r in flags:
        cells = {(str(c["split"]), str(c["label"])): c for c in r["details"]["by_split_class"]}
        rows.append({"title": r.get("title") or r["id"], "id": r["id"], "cells": [
            (f"{percent(cells[k]['rate'])} ({cells[k]['flagged']:,} of "
             f"{cells[k]['assessed']:,})" if cells.get(k) and cells[k].get("assessed")
             else "—") for k in columns]})
    return {"records": found, "columns": [f"{s}/{lab}" for s, lab in columns], "rows": rows,
            "others": [r for r in found if r not in flags]}


def _evaluation_view(records: list[dict], audit: Mapping[str, Any],
                     roles: Roles | None = None) -> dict[str, Any]:
    evals = [r for r in records if _layer_of(r) in _EVALUATION_LAYERS]
    view: dict[str, Any] = {"records": evals}
    charted = [r for r in evals if not has_role(r, R.NOT_CHARTED, roles)][:40]
    items = _estimate_items(charted, label_of=lambda r: r.get("title") or r["id"])
    if items:
        view["metrics_fig"] = _safe_figure(figures.interval_chart, items, xlabel="metric value")
    reliability = []
    for r in evals:
        bins = (r.get("details") or {}).get("reliability")
        if bins and len(reliability) < 6:
            reliability.append({"record": r, **_safe_figure(figures.reliability_diagram, bins,
                                                            label=r.get("title") or r["id"])})
    view["reliability"] = reliability
    return view


def _transform_view(records: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Transform-sensitivity records (METHODS §2.7, those with ``details.pass_rates``) as one
    table: transform × predicate, each cell ``passed/assessed``."""
    found = [r for r in records if is_transform_sensitivity(r)]
    predicates = [r["predicate"]["name"] for r in found]
    transforms: list[str] = []
    for r in found:
        for t in (r.get("details") or {}).get("pass_rates") or {}:
            if t not in transforms:
                transforms.append(t)
    rows = []
    for t in transforms:
        cells = []
        for r in found:
            cell = ((r.get("details") or {}).get("pass_rates") or {}).get(t)
            cells.append(f"{cell['passed']}/{cell['assessed']}" if cell else "—")
        rows.append({"transform": t, "cells": cells})
    return {"records": found, "predicates": predicates, "rows": rows}


def report_context(audit: Mapping[str, Any], *, roles: Roles | None = None,
                   max_pairs: int = MAX_PAIRS, thumb_px: int = THUMB_PX,
                   opener=None) -> dict[str, Any]:
    """Everything the template shows, derived from the audit document (plus the gallery's
    thumbnails, read from the files it names through ``opener``); ``roles``: what the layers
    declare their records to be (:mod:`splitscope.records.roles`; the audit passes
    :func:`splitscope.core.protocol.record_roles`), which places them in the views."""
    records = list(audit.get("records") or [])
    images: dict[str, str | None] = {}
    boundaries = [_boundary_view(b, records, audit, images, max_pairs, thumb_px, opener, roles)
                  for b in audit.get("boundaries") or []]
    named = {b["name"] for b in audit.get("boundaries") or []}
    unbounded = [r for r in records
                 if (r.get("boundary") or {}).get("name") not in named
                 and not _layer_of(r) in _EVALUATION_LAYERS
                 and not (boundaries and not r.get("boundary") and _provenance(r, roles))]
    transforms = _transform_view(records)
    quality = quality_view(records)
    unbounded = [r for r in unbounded if r not in transforms["records"]
                 and r not in quality["records"]]
    made_of = [f["composition"] for f in (audit.get("figures") or {}).values()
               if isinstance(f, Mapping) and f.get("composition")]
    composition = {"bars": made_of, **(_safe_figure(figures.composition_bars, made_of)
                                        if made_of else {})}
    measured = list(audit.get("findings") or [])
    panel = ({"items": [m for m in measured if m.get("panel")],
              **_safe_figure(figures.findings_panel, measured)}
             if any(m.get("panel") for m in measured) else {})
    status_counts: dict[str, int] = {}
    for r in records:
        status_counts[r.get("status", "?")] = status_counts.get(r.get("status", "?"), 0) + 1
    examples = [p for b in boundaries for p in b.get("gallery") or []][:EXAMPLES]
    return {
        "audit": audit,
        "examples": examples,
        "title": "splitscope audit — " + ", ".join(
            input_name(i["path"]) for i in audit.get("inputs") or []
            if i.get("role") == "audited"),
        "boundaries": boundaries,
        "composition": composition,
        "panel": panel,
        "evaluation": _evaluation_view(records, audit, roles),
        "unbounded": unbounded,
        "transforms": transforms,
        "quality": quality,
        "records": records,
        "status_counts": status_counts,
        "images": images,
        "max_pairs": max_pairs,
    }


def _environment(roles: Roles | None = None) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=True,  # every value from the input is text, never markup
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(num=fmt_num, estimate=fmt_estimate, interval=fmt_interval,
                       params=fmt_params, pretty=to_json,
                       control=lambda record: control_text(record, roles))
    return env


def render_html(audit: Mapping[str, Any], *, roles: Roles | None = None, **options) -> str:
    """The report as an HTML string (see :func:`render_report`)."""
    return _environment(roles).get_template("report.html.j2").render(
        **report_context(audit, roles=roles, **options))


def render_report(audit: Mapping[str, Any], path: str | Path, *, roles: Roles | None = None,
                  max_pairs: int = MAX_PAIRS, thumb_px: int = THUMB_PX, opener=None) -> Path:
    """Write ``report.html`` for an audit document.

    Parameters
    ----------
    audit : mapping
        The audit document (the content of ``audit.json``).
    path : path-like
        Where to write the page.
    roles : mapping, optional
        Per layer name, per role, the predicates of its records that play it
        (:mod:`splitscope.records.roles`; the audit passes those of its registered layers,
        :func:`splitscope.core.protocol.record_roles`). None: no record plays any, and the
        probe, partition, label-conflict and deduplicated-split records are shown among the
        others.
    max_pairs : int
        At most this many flagged pairs per boundary in the gallery (the full pair tables are
        in ``lists/``); keeps the page small.
    thumb_px : int
        Longest side of a gallery thumbnail, in pixels.
    opener : callable, optional
        ``opener(file) -> PIL image`` for the gallery's thumbnails (default ``Image.open``;
        the audit passes one that also reads table cells and arrays).

    Returns
    -------
    pathlib.Path
        The written file.
    """
    from splitscope.records.exports import replacing

    path = Path(path)
    page = render_html(audit, roles=roles, max_pairs=max_pairs, thumb_px=thumb_px,
                       opener=opener)
    with replacing(path) as tmp:
        tmp.write_text(page, encoding="utf-8")
    return path
