"""The group layer's predicates (METHODS §3) by name, and the ``--fail-on`` metrics that read
their records."""

from __future__ import annotations

from splitscope.records import roles
from splitscope.records.metrics import Metric

#: the layer whose records these predicates name (record ``layer``)
LAYER = "groups"

GROUP_OVERLAP = "group overlap"
FRAME_GAP = "nearest same-group reference frame"
RESPLIT = "stratified group-disjoint split"
RECOVERY = "identity recovery"

METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("group_overlap_rate", "share of traceable query rows whose group also occurs on "
           "the reference side", (LAYER,), (GROUP_OVERLAP,)),
)}

#: what its records are to the Croissant record (``splitscope.records.roles``): the re-split
#: is described as record sets and protocol, not as a finding
ROLES: dict[str, tuple[str, ...]] = {roles.RESPLIT: (RESPLIT,), roles.NOT_FINDING: (RESPLIT,)}
