"""The REFORMS checklist (Kapoor et al., Science Advances 10, eadk3452, 2024) as data, and what
a finished audit document says of each of its 32 items.

:data:`ITEMS` holds the items with their numbering (``1a`` … ``8b``) and a short title of ours.
:func:`reforms_items` reads ``audit.json`` and gives each item one status:

- ``evidence found``: every layer the item draws on completed, and none of its records shows a
  problem; the records are listed;
- ``concern``: at least one record the item draws on shows a problem (copies or shared groups
  across a boundary, a probe or the partition classifier above chance, flagged rows, files that
  could not be read), whether or not its other layers ran;
- ``not assessed``: the audit could speak to it, but a layer it draws on did not run or did not
  complete (its records, if any, are still listed);
- ``not applicable to an automated audit``: the item asks for what only the study's authors can
  report (goals, code, justifications); never passed.

Records are found through the ``--fail-on`` metrics the layers declare (their layer and
predicate names) and, for the model's performance, through the predicate names a layer
declares for its score-card detail ``imbalance_metric``; never by words of record ids or titles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from splitscope.errors import InputError
from splitscope.records.metrics import Metric, above_chance, contrast_on, metric_records
from splitscope.records.paths import published_command
from splitscope.records.schema import SCHEMA_VERSION

__all__ = ["CITATION", "CONCERN", "EVIDENCE", "ITEMS", "MODULES", "NOT_APPLICABLE",
           "NOT_ASSESSED", "REFORMS_JSON", "REFORMS_MD", "STATUSES", "Item", "reforms_document",
           "reforms_items", "reforms_markdown", "write_reforms"]

REFORMS_JSON, REFORMS_MD = "reforms.json", "reforms.md"

CITATION = ("Kapoor S, Cantrell EM, Peng K, Pham TH, Bail CA, Gundersen OE, Hofman JM, "
            "Hullman J, Lones MA, Malik MM, Nanayakkara P, Poldrack RA, Raji ID, Roberts M, "
            "Salganik MJ, Serra-Garcia M, Stewart BM, Vandewiele G, Narayanan A. REFORMS: "
            "Consensus-based Recommendations for Machine-learning-based Science. Science "
            "Advances 10, eadk3452 (2024). doi:10.1126/sciadv.adk3452")

EVIDENCE, CONCERN = "evidence found", "concern"
NOT_ASSESSED, NOT_APPLICABLE = "not assessed", "not applicable to an automated audit"
STATUSES = (EVIDENCE, CONCERN, NOT_ASSESSED, NOT_APPLICABLE)

#: the checklist's eight modules, by number
MODULES: dict[int, str] = {
    1: "Study goals",
    2: "Computational reproducibility",
    3: "Data quality",
    4: "Data preprocessing",
    5: "Modeling",
    6: "Data leakage",
    7: "Metrics and uncertainty quantification",
    8: "Generalizability and limitations",
}


@dataclass(frozen=True)
class Item:
    """One checklist item: its module number, its id as numbered in the paper, a short title,
    and what an audit can cite for it: ``metrics`` (``--fail-on`` metric names whose layers must
    complete), ``optional`` (metrics cited when measured, whose layer may be absent),
    ``evaluation`` (the evaluation's metric records), ``scan`` (the scan's unreadable rows).
    An item with none of these is not applicable to an automated audit."""

    module: int
    id: str
    title: str
    metrics: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    evaluation: bool = False
    interval: bool = False
    scan: bool = False

    @property
    def auditable(self) -> bool:
        return bool(self.metrics or self.optional or self.evaluation or self.scan)


_COPIES = ("byte_identical_rate", "pixel_identical_rate", "ncc_rate")

ITEMS: tuple[Item, ...] = (
    Item(1, "1a", "Population the claim is about"),
    Item(1, "1b", "Why that population"),
    Item(1, "1c", "Why machine learning"),
    Item(2, "2a", "Dataset identified (link or DOI)"),
    Item(2, "2b", "Code identified (version, link or DOI)"),
    Item(2, "2c", "Computing environment"),
    Item(2, "2d", "Instructions to reproduce"),
    Item(2, "2e", "One script reproducing every result"),
    Item(3, "3a", "Data sources, collection and annotation"),
    Item(3, "3b", "Sampling frame"),
    Item(3, "3c", "Why the data suit the task"),
    Item(3, "3d", "Outcome variable and its statistics", metrics=("label_conflict_rate",)),
    Item(3, "3e", "Sample counts"),
    Item(3, "3f", "Missing data", metrics=("quality_flag_rate",), scan=True),
    Item(3, "3g", "Sample representative of the population"),
    Item(4, "4a", "Excluded samples and why"),
    Item(4, "4b", "Impossible or corrupt samples",
         metrics=("quality_flag_rate", "quality_label_v"), scan=True),
    Item(4, "4c", "Every transformation from raw data"),
    Item(5, "5a", "Models, features and loss"),
    Item(5, "5b", "Why these model types"),
    Item(5, "5c", "Evaluation design and splits"),
    Item(5, "5d", "How the reported model was chosen"),
    Item(5, "5e", "Hyperparameter tuning"),
    Item(5, "5f", "Fair baselines"),
    Item(6, "6a", "Test data kept out of training", metrics=_COPIES),
    Item(6, "6b", "Duplicates and dependencies across splits",
         metrics=(*_COPIES, "group_overlap_rate")),
    Item(6, "6c", "Legitimate features, no proxies for the outcome",
         metrics=("header_probe_ba", "image_stats_probe_ba"),
         optional=("attribution_outside_gap",)),
    Item(7, "7a", "Metrics used and why", evaluation=True),
    Item(7, "7b", "Uncertainty of each metric", evaluation=True, interval=True),
    Item(7, "7c", "Statistical tests and their assumptions"),
    Item(8, "8a", "Evidence of external validity", metrics=("partition_auc",),
         optional=("containment_rate",)),
    Item(8, "8b", "Where the findings should not hold"),
)

#: the score-card detail whose predicates are the model's performance metric records (the
#: evaluation's balanced accuracy)
_EVALUATION_DETAIL = "imbalance_metric"
_DONE = ("completed", "partial")


def reforms_items(doc: Mapping[str, Any], metrics: Mapping[str, Metric],
                  scorecard: Mapping[str, Mapping[str, Sequence[str]]] | None = None
                  ) -> list[dict[str, Any]]:
    """Each checklist item with its status, the reason, and the records (and scan figures) that
    support it. ``metrics``: the declared ``--fail-on`` metrics (``all_metrics()``);
    ``scorecard``: per layer, score-card detail → predicate names (``scorecard_measures()``)."""
    records = [r for r in doc.get("records") or () if isinstance(r, Mapping)]
    boundaries = [b["name"] for b in doc.get("boundaries") or () if b.get("name")]
    layers = {x.get("layer"): x for x in doc.get("layers") or ()}
    out = []
    for item in ITEMS:
        entry: dict[str, Any] = {"module": item.module, "module_title": MODULES[item.module],
                                 "id": item.id, "title": item.title}
        if not item.auditable:
            entry.update(status=NOT_APPLICABLE, reason="only the study's authors can report it",
                         records=[], figures=[])
        else:
            entry.update(_assess(item, doc, records, boundaries, layers, metrics,
                                 scorecard or {}))
        out.append(entry)
    return out


def _assess(item: Item, doc, records, boundaries, layers, metrics, scorecard) -> dict[str, Any]:
    cited: dict[str, dict[str, Any]] = {}
    concerns: list[str] = []
    missing: list[str] = []
    needed: dict[str, None] = {}  # layers that must complete, in order
    for name, required in [*((m, True) for m in item.metrics),
                           *((m, False) for m in item.optional)]:
        metric = metrics.get(name)
        if metric is None:
            if required:
                missing.append(f"metric {name} is not declared")
            continue
        found = metric_records(metric, records, boundaries)
        for r in found:
            cited.setdefault(str(r.get("id")), _cite(r, name))
            problem = _problem(metric, r)
            if problem:
                concerns.append(f"{r.get('id')}: {problem}")
        if required:
            needed.update(dict.fromkeys(metric.layers))
    missing += [_not_run(layer, layers) for layer in needed
                if not _ran(layer, layers, cited.values())]
    if item.evaluation:
        predicates = {p for detail in scorecard.values()
                      for p in detail.get(_EVALUATION_DETAIL, ())}
        owners = [name for name, detail in scorecard.items() if _EVALUATION_DETAIL in detail]
        found = [r for r in records if r.get("layer") in owners
                 and (r.get("predicate") or {}).get("name") in predicates
                 and r.get("status") in _DONE and r.get("estimate") is not None]
        for r in found:
            cited.setdefault(str(r.get("id")), _cite(r, None))
            if item.interval and _interval(r) is None:
                concerns.append(f"{r.get('id')}: no interval")
        if not found:
            missing += [_not_run(layer, layers) for layer in owners] or [
                "no layer declares evaluation records"]
    figures = []
    if item.scan:
        failures = ((doc.get("manifest") or {}).get("scan") or {}).get("failures") or {}
        rows = failures.get("rows")
        if rows and rows.get("denominator") is not None:
            figures.append({"what": "manifest rows that could not be read",
                            "source": "manifest.scan.failures.rows",
                            "numerator": rows.get("total"),
                            "denominator": rows.get("denominator"), "unit": rows.get("unit")})
            if rows.get("total"):
                concerns.append(f"{rows['total']} of {rows['denominator']} rows could not be read")
    missing = list(dict.fromkeys(m for m in missing if m))
    if concerns:
        status, reason = CONCERN, "; ".join(concerns)
    elif missing or not cited:
        status = NOT_ASSESSED
        reason = "; ".join(missing) or "no completed record speaks to it"
    else:
        status, reason = EVIDENCE, "every record it draws on completed and shows no problem"
    return {"status": status, "reason": reason, "records": list(cited.values()),
            "figures": figures}


def _ran(layer: str, layers: Mapping[str, Any], found) -> bool:
    """Whether ``layer`` completed (or partly) and wrote one of the records ``found``."""
    return (layers.get(layer) or {}).get("status") in _DONE and any(
        r.get("layer") == layer for r in found)


def _not_run(layer: str, layers: Mapping[str, Any]) -> str:
    x = layers.get(layer)
    if x is None:
        return f"layer {layer} did not run"
    if x.get("status") in _DONE:
        return f"layer {layer} wrote no completed record for it"
    return f"layer {layer}: {x.get('status')}" + (f" ({x['reason']})" if x.get("reason") else "")


def _interval(r: Mapping[str, Any]) -> dict[str, Any] | None:
    u = r.get("uncertainty") or {}
    if u.get("low") is None or u.get("high") is None:
        return None
    return {"low": u["low"], "high": u["high"], "level": u.get("level"), "kind": u.get("kind")}


def _cite(r: Mapping[str, Any], metric: str | None) -> dict[str, Any]:
    return {"id": r.get("id"), "layer": r.get("layer"),
            "predicate": (r.get("predicate") or {}).get("name"), "metric": metric,
            "boundary": (r.get("boundary") or {}).get("name"), "unit": r.get("unit"),
            "numerator": r.get("numerator"), "denominator": r.get("denominator"),
            "estimate": r.get("estimate"), "interval": _interval(r), "status": r.get("status")}


def _problem(metric: Metric, r: Mapping[str, Any]) -> str | None:
    """What the record shows wrong, in a few words, or None. A count (``numerator``) is a
    problem when above zero; a score (a probe, the partition classifier) when its interval lies
    above chance, the attribution contrast when it lies above zero; the quality association
    when it reaches the ``association_v`` its record names."""
    value = r.get(metric.field)
    params = (r.get("predicate") or {}).get("params") or {}
    if "association_v" in params:  # an association with the label, against its bound
        bound = params["association_v"]
        if value is not None and bound is not None and value >= bound:
            return f"Cramér's V {value:.3g} ≥ {bound}"
        return None
    if contrast_on(r) is not None:  # a contrast of two groups of a boundary's rows
        return "interval above zero" if above_chance(r, 0.0) else None
    if r.get("numerator") is not None:  # a count of affected rows
        return (f"{r['numerator']} of {r.get('denominator')} {r.get('unit') or 'rows'}"
                if r["numerator"] else None)
    chance = (r.get("details") or {}).get("chance", 0.5)  # a score with a chance level
    return f"interval above chance {chance}" if above_chance(r, chance) else None


def write_reforms(doc: Mapping[str, Any], out_dir: str | Path, metrics: Mapping[str, Metric],
                  scorecard: Mapping[str, Mapping[str, Sequence[str]]] | None = None
                  ) -> dict[str, Any]:
    """Write ``reforms.json`` and ``reforms.md`` of the audit document ``doc`` into
    ``out_dir``; returns the ``reforms.json`` document."""
    from splitscope.records.exports import write_json

    report = reforms_document(doc, metrics, scorecard)
    write_json(report, Path(out_dir) / REFORMS_JSON)
    (Path(out_dir) / REFORMS_MD).write_text(reforms_markdown(report), encoding="utf-8")
    return report


def reforms_document(doc: Mapping[str, Any], metrics: Mapping[str, Metric],
                     scorecard: Mapping[str, Mapping[str, Sequence[str]]] | None = None
                     ) -> dict[str, Any]:
    """``reforms.json``: the checklist's citation, the audit it was read from, the count of
    items by status and every item (:func:`reforms_items`). An audit document of another schema
    is an ``InputError``."""
    if doc.get("kind") != "splitscope-audit":
        raise InputError("not a splitscope audit document")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise InputError(f"an audit document of schema {doc.get('schema_version')}; this "
                         f"splitscope reads schema {SCHEMA_VERSION}: run the audit again")
    items = reforms_items(doc, metrics, scorecard)
    run = doc.get("run") or {}
    return {"kind": "splitscope-reforms", "checklist": {"name": "REFORMS", "citation": CITATION,
                                                        "items": len(ITEMS),
                                                        "modules": len(MODULES)},
            "audit": {"schema_version": doc.get("schema_version"),
                      "finished": run.get("finished"),
                      "command": published_command(run.get("command"))},
            "statuses": {s: sum(i["status"] == s for i in items) for s in STATUSES},
            "items": items}


def _figure(c: Mapping[str, Any]) -> str:
    if c.get("numerator") is not None and c.get("denominator") is not None:
        text = f"{c['numerator']} of {c['denominator']}"
    elif c.get("estimate") is not None:
        text = f"{c['estimate']:.3g}" + (f" (n = {c['denominator']})"
                                         if c.get("denominator") is not None else "")
    else:
        text = "measured"
    iv = c.get("interval")
    if iv:
        text += f" [{iv['low']:.3g}, {iv['high']:.3g}]"
    return text


def reforms_markdown(report: Mapping[str, Any]) -> str:
    """``reforms.md``: the items by module, each with its status, reason and cited figures."""
    lines = ["# REFORMS checklist: what the audit speaks to", "",
             f"Checklist: {report['checklist']['citation']}", "",
             f"Audit finished {report['audit'].get('finished') or 'at an unknown time'}.", "",
             ", ".join(f"{s}: {n}" for s, n in report["statuses"].items()), ""]
    for number, title in MODULES.items():
        lines += [f"## {number}. {title}", "", "| item | status | records |", "|---|---|---|"]
        for i in report["items"]:
            if i["module"] != number:
                continue
            cited = [f"`{c['id']}` {_figure(c)}" for c in i["records"]]
            cited += [f"{f['what']}: {f['numerator']} of {f['denominator']}"
                      for f in i["figures"]]
            status = i["status"] + (f" — {i['reason']}" if i["status"] in (CONCERN, NOT_ASSESSED)
                                    else "")
            lines.append(f"| {i['id']} {i['title']} | {_cell(status)} | "
                         f"{_cell('; '.join(cited)) or '—'} |")
        lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
