""""What this means": rules that read several records of one boundary together.

A single rate rarely says what a score on the audited split measures; two signals side by side
often do (a header probe at chance across the split while the partition classifier separates
the two sides means the sides were built differently). Each rule is one function over the
records of a boundary that returns a sentence or ``None``
(:class:`~splitscope.records.metrics.Rule`), written and declared by the layer whose records
it reads (a layer's ``rules``: ``relations/reading.py``, ``groups/reading.py``,
``provenance/reading.py``), with its place among them (``rank``). This module only orders
them. A rule reads only completed (or partial)
records and never invents a number: every figure it quotes comes from a record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from splitscope.core.protocol import declared
from splitscope.records.metrics import Rule

__all__ = ["layer_rules", "meaning"]


def layer_rules() -> tuple[Rule, ...]:
    """The rules the registered layers declare (``rules``), by ``rank`` (what makes every
    score unreadable, label noise, first; what a clean result does not exclude last)."""
    return tuple(declared("rules"))


def meaning(doc: Mapping[str, Any], rules: Sequence[Rule] | None = None) -> list[str]:
    """One "what this means" line per boundary and rule that speaks on it, in the order of
    ``rules`` (default :func:`layer_rules`), each naming its boundary."""
    records = doc.get("records") or []
    out = []
    for b in doc.get("boundaries") or []:
        for rule in rules if rules is not None else layer_rules():
            text = rule.says(b, records)
            if text:
                out.append(f"{b['name']}: {text[0].upper()}{text[1:]}.")
    return out
