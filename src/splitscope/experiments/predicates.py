"""The experiments layer's predicates (controlled re-training, METHODS §5.9) by name, and the
score-card details its records measure."""

from __future__ import annotations

#: the layer whose records these predicates name (record ``layer``)
LAYER = "experiments"

CONTROLLED_RETRAINING = "controlled re-training"
VIEW_CONTRAST = "view contrast"
PAIRED_CONTRAST = "paired contrast"
#: fitted on each run's validation holdout: ``<rid>`` ``experiments.<name>``, predicate the
#: name in words
HOLDOUT_TEMPERATURE, HOLDOUT_THRESHOLD = "temperature scaling", "threshold youden"

#: the score-card details (``splitscope.records.scorecard``) these records measure; every
#: record of a re-training names its backbone and training policy; ``uncertainty`` is also
#: measured by any of its records with an interval
SCORECARD: dict[str, tuple[str, ...]] = {
    "training_policy": (CONTROLLED_RETRAINING, VIEW_CONTRAST, PAIRED_CONTRAST,
                        HOLDOUT_TEMPERATURE, HOLDOUT_THRESHOLD),
    "threshold": (HOLDOUT_THRESHOLD,),
    "calibration": (HOLDOUT_TEMPERATURE,),
    "uncertainty": (PAIRED_CONTRAST,),
}
