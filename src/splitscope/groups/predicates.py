"""The group layer's predicates (METHODS §3) by name, and the ``--fail-on`` metrics that read
their records."""

from __future__ import annotations

from splitscope.records.metrics import Metric

GROUP_OVERLAP = "group_overlap"

METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("group_overlap_rate", "share of traceable query rows whose group also occurs on "
           "the reference side", ("group",), (GROUP_OVERLAP, "group overlap"), (("overlap",),)),
)}
