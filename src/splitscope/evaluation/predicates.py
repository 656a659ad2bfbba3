"""The evaluation and attribution layers' predicates (METHODS §5) by name, and the score-card
details their records measure."""

from __future__ import annotations

from splitscope.records import roles
from splitscope.records.metrics import Metric

#: the layers whose records these predicates name (record ``layer``)
LAYER, ATTRIBUTION_LAYER = "evaluation", "attribution"

SCOREABILITY = "scoreability"
BALANCED_ACCURACY = "balanced accuracy"
RESCORING = "rescoring"
THRESHOLD_TRANSFER = "threshold transfer"
TEMPERATURE_SCALING = "temperature scaling"
ATTRIBUTION_OUTSIDE = "attribution outside anatomy"

#: the score-card details (``splitscope.records.scorecard``) the evaluation layer's records
#: measure; ``uncertainty`` is also measured by any of its records with an interval
SCORECARD: dict[str, tuple[str, ...]] = {
    "evaluation_split": (BALANCED_ACCURACY, RESCORING),
    "threshold": (THRESHOLD_TRANSFER,),
    "imbalance_metric": (BALANCED_ACCURACY,),
    "calibration": (TEMPERATURE_SCALING,),
    "uncertainty": (),
}

#: the attribution layer's --fail-on metric (a contrast on the query rows of a boundary)
ATTRIBUTION_METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("attribution_outside_gap", "mean share of attribution mass outside the anatomy mask, "
           "rows leaked across the boundary minus clean rows", (ATTRIBUTION_LAYER,),
           (ATTRIBUTION_OUTSIDE,), unit="row"),)}

#: what its records are to the report (``splitscope.records.roles``): the scoreability record
#: counts entries, it is not a metric to chart
ROLES: dict[str, tuple[str, ...]] = {roles.NOT_CHARTED: (SCOREABILITY,)}
