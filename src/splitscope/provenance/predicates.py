"""The provenance and quality layers' predicates (METHODS §4) by name, and the ``--fail-on``
metrics that read their records."""

from __future__ import annotations

from splitscope.provenance.quality import FLAGS
from splitscope.records import roles
from splitscope.records.metrics import Metric

#: the layers whose records these predicates name (record ``layer``)
LAYER, QUALITY_LAYER = "provenance", "quality"

#: the two probes' predicates, ``<probe> (<kind>)`` with kind ``within pool`` or ``cross split``
HEADER_PROBE, IMAGE_STATS_PROBE = "header-only probe", "image-statistics probe"
WITHIN_POOL, CROSS_SPLIT = "within pool", "cross split"
HEADER_PROBE_WITHIN, HEADER_PROBE_CROSS = (f"{HEADER_PROBE} ({k})" for k in (WITHIN_POOL,
                                                                           CROSS_SPLIT))
IMAGE_STATS_WITHIN, IMAGE_STATS_CROSS = (f"{IMAGE_STATS_PROBE} ({k})" for k in (WITHIN_POOL,
                                                                              CROSS_SPLIT))
HEADER_PROBES = (HEADER_PROBE_WITHIN, HEADER_PROBE_CROSS)
IMAGE_STATS_PROBES = (IMAGE_STATS_WITHIN, IMAGE_STATS_CROSS)
PARTITION = "partition classifier"
#: the source–label association (METHODS §4.3)
SOURCE_LABEL = "Cramér's V"
#: an image-quality flag's predicate is ``quality_<flag>``
QUALITY_PREFIX = "quality_"
QUALITY_FLAGS = tuple(f"{QUALITY_PREFIX}{f.name}" for f in FLAGS)
QUALITY_ASSOCIATION = "quality_flag_label_association"

METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("header_probe_ba", "balanced accuracy of the header-only probe (largest of within "
           "pool and cross split)", (LAYER,), HEADER_PROBES, unit=None, pool_wide=True),
    Metric("image_stats_probe_ba", "balanced accuracy of the image-statistics probe (largest "
           "of within pool and cross split): intensity statistics alone predicting the label",
           (LAYER,), IMAGE_STATS_PROBES, unit=None, pool_wide=True),
    Metric("partition_auc", "out-of-fold AUC of the partition classifier (train pool vs "
           "query)", (LAYER,), (PARTITION,), unit=None),
)}

QUALITY_METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("quality_label_v", "largest Cramér's V between an image-quality flag and the label",
           (QUALITY_LAYER,), (QUALITY_ASSOCIATION,), unit="row", pool_wide=True),
    Metric("quality_flag_rate", "largest share of the release's rows carrying one image-quality "
           "flag (dark, light, low contrast, blurry, low information, odd size, odd aspect, "
           "grey stored as colour, large border)", (QUALITY_LAYER,), QUALITY_FLAGS, unit="row",
           pool_wide=True),
)}

#: the score-card details (``splitscope.records.scorecard``) these records measure
SCORECARD: dict[str, tuple[str, ...]] = {
    "shift_check": (*HEADER_PROBES, *IMAGE_STATS_PROBES, PARTITION),
}

#: what its records are to the report (``splitscope.records.roles``): each boundary's probe
#: and partition tables and figures
ROLES: dict[str, tuple[str, ...]] = {
    roles.HEADER_PROBE: HEADER_PROBES,
    roles.IMAGE_STATS_PROBE: IMAGE_STATS_PROBES,
    roles.PARTITION: (PARTITION,),
}

#: the score the label probes report (a finding's figure names it)
PROBE_SCORE = "balanced accuracy"
