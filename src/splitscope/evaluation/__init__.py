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

Every name is imported on first use, so that the command line stays quick to start.
"""

from __future__ import annotations

from splitscope.lazy import lazy_names

_EXPORTS = {
    "Predictions": "splitscope.evaluation.predictions",
    "ReadOptions": "splitscope.evaluation.options",
    "RescoreResult": "splitscope.evaluation.rescore",
    "RunTable": "splitscope.evaluation.runs",
    "Truth": "splitscope.evaluation.predictions",
    "Verdict": "splitscope.evaluation.scoreability",
    "View": "splitscope.evaluation.views",
    "attribution_contrast": "splitscope.evaluation.attribution",
    "attribution_record": "splitscope.evaluation.attribution",
    "audit_predictions": "splitscope.evaluation.layer",
    "bootstrap_metrics": "splitscope.evaluation.uncertainty",
    "check_scoreability": "splitscope.evaluation.scoreability",
    "delong_test": "splitscope.evaluation.uncertainty",
    "delta_arch": "splitscope.evaluation.effects",
    "did_true_class_probability": "splitscope.evaluation.effects",
    "final_ranking": "splitscope.evaluation.rescore",
    "load_maps": "splitscope.evaluation.attribution",
    "official_view": "splitscope.evaluation.views",
    "outside_mask_share": "splitscope.evaluation.attribution",
    "paired_contrast": "splitscope.evaluation.contrasts",
    "protocol_effects": "splitscope.evaluation.effects",
    "read_predictions": "splitscope.evaluation.predictions",
    "read_run_table": "splitscope.evaluation.runs",
    "read_truth": "splitscope.evaluation.predictions",
    "rescore": "splitscope.evaluation.rescore",
    "score_predictions": "splitscope.evaluation.metrics",
    "training_pools": "splitscope.evaluation.pools",
    "view_aggregates": "splitscope.evaluation.aggregates",
    "view_from_list": "splitscope.evaluation.views",
    "view_where": "splitscope.evaluation.views",
}

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


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
