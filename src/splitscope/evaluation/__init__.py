"""Evaluation sensitivity on saved predictions (METHODS §5).

Readers and scoreability (:mod:`.readers`, :mod:`.predictions`, :mod:`.scoreability`), metrics
(:mod:`.metrics`),
thresholds (:mod:`.thresholds`), temperature scaling (:mod:`.calibration`), uncertainty
(:mod:`.uncertainty`), evaluation views (:mod:`.views`), re-scoring of entries
(:mod:`.rescore`) and its per-view aggregates (:mod:`.aggregates`), run tables (:mod:`.runs`),
protocol effects (:mod:`.effects`), paired contrasts (:mod:`.contrasts`), training-pool
controls (:mod:`.pools`),
attribution outside anatomy on supplied maps (:mod:`.attribution`) and the layer's audit entry
point (:mod:`.audit`).
"""

from splitscope.evaluation.aggregates import view_aggregates
from splitscope.evaluation.attribution import (
    attribution_contrast,
    attribution_record,
    load_maps,
    outside_mask_share,
)
from splitscope.evaluation.contrasts import paired_contrast
from splitscope.evaluation.effects import (
    delta_arch,
    did_true_class_probability,
    protocol_effects,
)
from splitscope.evaluation.layer import audit_predictions
from splitscope.evaluation.metrics import score_predictions
from splitscope.evaluation.pools import training_pools
from splitscope.evaluation.predictions import (
    Predictions,
    Truth,
    read_predictions,
    read_truth,
)
from splitscope.evaluation.readers import ReadOptions
from splitscope.evaluation.rescore import RescoreResult, final_ranking, rescore
from splitscope.evaluation.runs import RunTable, read_run_table
from splitscope.evaluation.scoreability import Verdict, check_scoreability
from splitscope.evaluation.uncertainty import bootstrap_metrics, delong_test
from splitscope.evaluation.views import View, official_view, view_from_list, view_where

__all__ = [
    "Predictions",
    "ReadOptions",
    "RescoreResult",
    "RunTable",
    "Truth",
    "Verdict",
    "View",
    "attribution_contrast",
    "attribution_record",
    "audit_predictions",
    "bootstrap_metrics",
    "check_scoreability",
    "delong_test",
    "delta_arch",
    "did_true_class_probability",
    "final_ranking",
    "load_maps",
    "official_view",
    "outside_mask_share",
    "paired_contrast",
    "protocol_effects",
    "read_predictions",
    "read_run_table",
    "read_truth",
    "rescore",
    "score_predictions",
    "training_pools",
    "view_aggregates",
    "view_from_list",
    "view_where",
]
