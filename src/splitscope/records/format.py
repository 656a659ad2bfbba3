"""How numbers read in verdicts, rules and tables: one spelling of a share and a count."""

from __future__ import annotations

from typing import Any

__all__ = ["count", "percent", "percent_of"]


def percent(share: float) -> str:
    """A share as a percentage, three significant digits (``0.0123`` → ``1.23%``)."""
    return f"{100 * share:.3g}%"


def percent_of(numerator: float, denominator: float) -> str:
    """``numerator / denominator`` as :func:`percent`; ``—`` when there is no denominator."""
    return percent(numerator / denominator) if denominator else "—"


def count(value: Any) -> str:
    """A count with thousands separators; ``—`` when not measured."""
    return "—" if value is None else f"{int(value):,}"
