"""What a record is to the report and the Croissant record (its *roles*), declared by the layer
that writes it: role → the predicate names of its records that play it (a layer's ``roles``,
in its package's ``predicates.py``; the audit collects them with
:func:`splitscope.core.protocol.record_roles` and passes them in). The report and the
Croissant writer find records by these roles and by the shape of a record, never by words in
its id or title, so a new layer's records take a place in them without touching either.

Roles (each name below, the constant's value):

- ``header_probe``, ``image_stats_probe``, ``partition``: the report's provenance tables and
  figures of a boundary (with the pool-wide records beside each boundary's);
- ``label_conflict``: the report's label-conflict table; a shortcut or label problem
  (``rai:dataBiases``) in the Croissant record;
- ``not_charted``: left out of the report's evaluation chart (it counts entries, it is not a
  metric);
- ``deduplicated_split``: a deduplicated split (the report's census says it needs no
  calibration; the Croissant record's ``deduplicated-<split>`` record set and protocol line);
- ``resplit``: the group-disjoint re-split (the Croissant record's ``resplit`` record sets
  and protocol line);
- ``not_finding``: described as a record set or protocol in the Croissant record, not as a
  finding;
- ``proposed_group_overlap``: the overlap across a boundary under a group key inferred from
  the names (status ``proposed``, METHODS §3.6): never a measured overlap, so nothing that
  reads one (the ``group_overlap_rate`` metric, the deduplicated split, re-splits) reads it;
  the verdicts may name it as unconfirmed.

A record with ``details.pass_rates`` (a predicate's pass rate per transform, METHODS §2.7) is
a transform-sensitivity record wherever it comes from: the report's transform table, and no
finding in the Croissant record. A negative control's record says so itself
(``details.role == "control"`` or a boundary of kind ``control``): no metric reads it
(:func:`splitscope.records.metrics.is_control`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["DEDUPLICATED_SPLIT", "HEADER_PROBE", "IMAGE_STATS_PROBE", "LABEL_CONFLICT",
           "NOT_CHARTED", "NOT_FINDING", "PARTITION", "PROPOSED_GROUP_OVERLAP", "RESPLIT",
           "ROLES", "Roles", "has_role", "is_transform_sensitivity", "with_role"]

HEADER_PROBE = "header_probe"
IMAGE_STATS_PROBE = "image_stats_probe"
PARTITION = "partition"
LABEL_CONFLICT = "label_conflict"
NOT_CHARTED = "not_charted"
DEDUPLICATED_SPLIT = "deduplicated_split"
RESPLIT = "resplit"
NOT_FINDING = "not_finding"
PROPOSED_GROUP_OVERLAP = "proposed_group_overlap"
#: every role a layer may declare
ROLES = (HEADER_PROBE, IMAGE_STATS_PROBE, PARTITION, LABEL_CONFLICT, NOT_CHARTED,
         DEDUPLICATED_SPLIT, RESPLIT, NOT_FINDING, PROPOSED_GROUP_OVERLAP)

#: layer name → role → the predicate names of its records that play the role
Roles = Mapping[str, Mapping[str, Sequence[str]]]


def has_role(record: Mapping[str, Any], role: str, roles: Roles | None) -> bool:
    """Whether the layer that wrote ``record`` declares its predicate under ``role``."""
    named = ((roles or {}).get(str(record.get("layer"))) or {}).get(role) or ()
    return (record.get("predicate") or {}).get("name") in named


def with_role(records: Iterable[Mapping[str, Any]], role: str,
              roles: Roles | None) -> list[Mapping[str, Any]]:
    """The records that play ``role`` (:func:`has_role`), in document order."""
    return [r for r in records if has_role(r, role, roles)]


def is_transform_sensitivity(record: Mapping[str, Any]) -> bool:
    """Whether a record measures a predicate's pass rates under transforms (METHODS §2.7)."""
    return "pass_rates" in (record.get("details") or {})
