""""What this means": rules that read several records of one boundary together.

A single rate rarely says what a score on the audited split measures; two signals side by side
often do (a header probe at chance across the split while the partition classifier separates
the two sides means the sides were built differently). Each rule is one function over the
records of a boundary that returns a sentence or ``None``
(:class:`~splitscope.records.metrics.Rule`), written and declared by the layer whose records
it reads (a layer's ``rules``: ``relations/reading.py``, ``groups/reading.py``,
``provenance/reading.py``). This module only orders them: :data:`ORDER` first, then the rules
of any other registered layer in the layers' order. A rule reads only completed (or partial)
records and never invents a number: every figure it quotes comes from a record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from splitscope.groups.reading import RULES as GROUP_RULES
from splitscope.provenance.reading import RULES as PROVENANCE_RULES
from splitscope.records.metrics import Rule
from splitscope.relations.reading import RULES as RELATIONS_RULES

__all__ = ["ORDER", "RULES", "layer_rules", "meaning"]

#: the order a reader meets the method's rules in, per boundary: what makes every score
#: unreadable (label noise) first, what a clean result does not exclude last
ORDER = ("label_noise", "memorisation", "patients_straddle", "encoded_differently",
         "shortcut_transfers", "acquisition_shortcut", "hash_unreliable", "clean")

_BY_NAME = {r.name: r for r in (*RELATIONS_RULES, *GROUP_RULES, *PROVENANCE_RULES)}
#: the method's rules in :data:`ORDER` (documented in docs/method.md)
RULES: tuple[Rule, ...] = tuple(_BY_NAME[name] for name in ORDER)


def layer_rules() -> tuple[Rule, ...]:
    """:data:`RULES`, then the rules other registered layers declare (``rules``)."""
    from splitscope.audit.protocol import registered_layers

    known = {r.name for r in RULES}
    extra = [r for layer in registered_layers() for r in (getattr(layer, "rules", None) or ())
             if r.name not in known]
    return RULES + tuple(extra)


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
