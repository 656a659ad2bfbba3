"""The provenance and quality layers' predicates (METHODS §4) by name, and the ``--fail-on``
metrics that read their records."""

from __future__ import annotations

from splitscope.records.metrics import Metric

QUALITY_ASSOCIATION = "quality_flag_label_association"

METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("header_probe_ba", "balanced accuracy of the header-only probe (largest of within "
           "pool and cross split)", ("provenance", "probe"), (), (("header",),), unit=None,
           pool_wide=True),
    Metric("image_stats_probe_ba", "balanced accuracy of the image-statistics probe (largest "
           "of within pool and cross split): intensity statistics alone predicting the label",
           ("provenance",), (), (("image_stats_probe",),), unit=None, pool_wide=True),
    Metric("partition_auc", "out-of-fold AUC of the partition classifier (train pool vs "
           "query)", ("provenance", "probe", "shift"), (),
           (("partition", "auc"), ("partition",)), unit=None),
)}

QUALITY_METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("quality_label_v", "largest Cramér's V between an image-quality flag and the label",
           ("quality",), (QUALITY_ASSOCIATION,), unit="row", pool_wide=True),
)}
