"""What a ``--fail-on`` metric reads (:class:`Metric`): declared once, by the audit for the
method's metrics (:data:`splitscope.audit.conditions.METRICS`) or by a layer next to the
records it writes (its ``metrics``), and read the same way by the conditions."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Metric"]


@dataclass(frozen=True)
class Metric:
    """A quantity ``--fail-on`` can gate on: which records it reads and how.

    A record is read when it is completed (or partial), not a negative control, in one of
    ``layers`` (prefix), and its predicate name is one of ``predicates`` (exact) or, when no
    record matches exactly, its id/predicate name contains every word of one ``words``
    alternative. ``field`` is the record field read (``estimate`` or ``numerator``); the value
    is the largest over the audited boundaries (the worst boundary) and, when ``pool_wide``,
    the records that describe the whole pool (no boundary, e.g. the within-pool probe).
    ``control`` marks a pixel predicate whose reliability a negative control measures: the
    outcome then says whether the records read were calibrated and found reliable.
    """

    name: str
    description: str
    layers: tuple[str, ...]
    predicates: tuple[str, ...] = ()
    words: tuple[tuple[str, ...], ...] = ()
    field: str = "estimate"
    unit: str | None = "affected query row"
    pool_wide: bool = False
    control: bool = False

    def reads(self) -> str:
        """What the metric reads and how it aggregates, in words (for ``--help``)."""
        if self.field == "layers":
            return "count of layers 'not assessed'"
        which = ", ".join(self.predicates) or " or ".join(" ".join(w) for w in self.words)
        where = "the boundaries and the whole pool" if self.pool_wide else "the boundaries"
        return f"{self.field} of the {which} records, largest over {where}"

    def help_line(self) -> str:
        return f"{self.name}: {self.description} [{self.reads()}]"
