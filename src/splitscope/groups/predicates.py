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
#: the overlap under a group key inferred from the names (METHODS §3.6, status ``proposed``):
#: no metric reads it, so a gate on ``group_overlap_rate`` still finds nothing measured
PROPOSED_GROUP_KEY = "proposed group key"
#: where a proposed key was found (its record's ``predicate.params.source``), in words
KEY_SOURCES = {"file name": "the file names", "folder": "the folder names",
               "DICOM PatientID": "the DICOM PatientID"}

METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("group_overlap_rate", "share of traceable query rows whose group also occurs on "
           "the reference side", (LAYER,), (GROUP_OVERLAP,)),
)}

#: what its records are to the Croissant record (``splitscope.records.roles``): the re-split
#: is described as record sets and protocol, not as a finding; the overlap under a proposed
#: key is unconfirmed
ROLES: dict[str, tuple[str, ...]] = {roles.RESPLIT: (RESPLIT,), roles.NOT_FINDING: (RESPLIT,),
                                     roles.PROPOSED_GROUP_OVERLAP: (PROPOSED_GROUP_KEY,)}
