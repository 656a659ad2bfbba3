"""Hand-made audit documents for renderer tests (no scan needed)."""

from __future__ import annotations

import numpy as np

from splitscope.boundary import Boundary, Population
from splitscope.core.conditions import evaluate_conditions, parse_condition
from splitscope.core.options import AuditOptions
from splitscope.core.protocol import record_roles, scorecard_measures
from splitscope.core.verdicts import opening
from splitscope.provenance.predicates import HEADER_PROBE_WITHIN, PARTITION
from splitscope.records import AuditRecord, Uncertainty
from splitscope.records.schema import SCHEMA_VERSION
from splitscope.records.scorecard import score_card
from splitscope.relations.rho_figures import distribution, sweep

EVIL = "<img src=x onerror=alert(1)>"
#: what the registered layers declare their records to be (passed to the renderer as the
#: audit passes it)
ROLES = record_roles()


def boundary(q="test", r="train", nq=200, nr=800) -> Boundary:
    return Boundary(Population(q, np.arange(nq)), Population(r, np.arange(nq, nq + nr)))


def records(b: Boundary | None = None, label: str = "NORMAL") -> list[AuditRecord]:
    b = b or boundary()
    bd = b.to_dict()
    return [
        AuditRecord(id="identity.test_train.byte", layer="duplicates", section="identity",
                    title="byte-identical copies", boundary=bd,
                    predicate={"name": "sha256 byte identity", "params": {"confirm": True}},
                    unit="affected query row", numerator=3, denominator=200,
                    class_support={label: 2, "PNEUMONIA": 1},
                    conclusion="3 test rows are byte copies of training rows"),
        AuditRecord(id="near_duplicate.test_train.ncc_nearest", layer="duplicates",
                    section="near_duplicate",
                    title="near-twins (NCC, nearest rule)", boundary=bd,
                    predicate={"name": "ncc nearest", "params": {"tau": 0.98, "thumb_size": 96}},
                    unit="affected query row", numerator=25, denominator=200),
        AuditRecord(id="group.test_train.overlap", layer="groups", title="patient overlap",
                    boundary=bd, predicate={"name": "group overlap", "params": {}},
                    unit="affected query row", numerator=10, denominator=150,
                    coverage={"traceable": 150, "total": 200}),
        AuditRecord(id="provenance.test_train.header_within", layer="provenance",
                    title="header probe within pool", boundary=bd,
                    predicate={"name": HEADER_PROBE_WITHIN, "params": {"folds": 5}},
                    estimate=0.81, uncertainty=Uncertainty("percentile bootstrap over cases",
                                                           0.95, 0.75, 0.86)),
        AuditRecord(id="provenance.test_train.partition_auc", layer="provenance",
                    title="partition classifier", boundary=bd,
                    predicate={"name": PARTITION, "params": {}},
                    estimate=0.55, uncertainty=Uncertainty("percentile bootstrap", 0.95, 0.5, 0.6)),
        AuditRecord(id="evaluation.not_applicable", layer="evaluation",
                    title="evaluation layer not applicable", status="not applicable",
                    reason="no saved predictions given (--predictions DIR)"),
    ]


def document(recs=None, b: Boundary | None = None, gallery=None, fail_on=()) -> dict:
    b = b or boundary()
    recs = recs if recs is not None else records(b)
    rd = [r.to_dict() for r in recs]
    rng = np.random.default_rng(0)
    rho = np.concatenate([rng.uniform(0.3, 0.97, 175), rng.uniform(0.98, 1.0, 25)])
    ctl = rng.uniform(0.2, 0.95, 300)
    layers = [{"layer": "duplicates", "status": "completed", "reason": None, "records": 2,
               "duration_s": 0.1},
              {"layer": "evaluation", "status": "not applicable",
               "reason": "no saved predictions given (--predictions DIR)", "records": 1,
               "duration_s": 0.0}]
    doc = {
        "schema_version": SCHEMA_VERSION, "kind": "splitscope-audit",
        "run": {"started": "2026-01-01T00:00:00Z", "finished": "2026-01-01T00:00:01Z",
                "duration_s": 1.0, "command": "splitscope audit x", "exit_code": 0},
        "inputs": [{"role": "audited", "path": "/data/x", "kind": "folder", "sha256": "0" * 64,
                    "rows": 1000}],
        "options": AuditOptions().to_dict(),
        "software": {"splitscope": "0.1.0"},
        "manifest": {"rows": 1000, "splits": {"test": 200, "train": 800}},
        "boundaries": [{**b.to_dict(), "kind": "released split"}],
        "layers": layers,
        "records": rd,
        "scorecard": score_card(rd, scorecard_measures()),
        "figures": {b.name: {"tau": 0.98,
                             "distribution": [distribution(rho, "audited", "audited"),
                                              distribution(ctl, "control", "control")],
                             "sweep": [sweep(rho, "audited", "audited"),
                                       sweep(ctl, "control", "control")]}},
        "gallery": gallery or [],
        "fail_on": evaluate_conditions([parse_condition(c) for c in fail_on], rd, layers),
        "artifacts": [],
    }
    doc["summary"] = opening(doc)  # also sets doc["findings"]
    return doc
