"""Findings: what a layer declares it can find on a boundary, and how one is measured.

A layer declares each finding once (:class:`Finding`): its name, its tier, a plain sentence
and what to do, and how its size is read from the layer's records on a boundary — a share of
the evaluated rows (a ``--fail-on`` metric's worst record: rows affected of a denominator), or
a score above a baseline (a probe's balanced accuracy against chance, with its interval).
:mod:`splitscope.core.verdict` measures every declared finding on every boundary and ranks
them by one rule; nothing here knows a layer.

A measured finding is a plain dict (it goes into ``audit.json``): ``finding``, ``boundary``,
``tier``, ``kind`` (``share`` or ``score``), ``found``, ``size`` (the ranking key: the share,
or the interval's lower bound above the baseline), ``estimate`` with ``low``/``high`` and
what the interval is (``interval``), ``baseline`` (chance, or 0 for a share),
``numerator``/``denominator`` where
counted, ``record``, ``phrase`` (the finding in a few words with its figures), ``sentence``
and ``action``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from splitscope.records.format import count, percent_of

__all__ = ["CONFLICT", "EVIDENCE", "INDICATION", "TIERS", "Finding", "scored", "shared",
           "wilson"]

#: a copy under another label: every score on the split is unreadable (always ranked first)
CONFLICT = "conflict"
#: measured contamination or shortcut (copies, shared groups, a header-only probe)
EVIDENCE = "evidence"
#: a signal that needs confirming (a proposed key, image statistics, a train/test shift)
INDICATION = "indication"
#: the tiers in the order the verdict ranks them
TIERS = (CONFLICT, EVIDENCE, INDICATION)


@dataclass(frozen=True)
class Finding:
    """One finding a layer can make on a boundary.

    ``metric``: the ``--fail-on`` metric whose worst record on the boundary gives the size as
    a share of rows (when ``measure`` is not given). ``measure(doc, boundary)`` otherwise
    returns the measured fields (:func:`shared`, :func:`scored`) or ``None`` when the layer's
    records say nothing on that boundary. ``says`` (the plain sentence), ``phrase`` (a few
    words for the verdict line) and ``action`` are formatted with the measured fields and
    ``query``/``reference`` (the boundary's sides). ``panel``: drawn as a point with its
    interval in the first figure. The texts may quote the audit's options groups too
    (``{search[tau]:g}``). ``rank`` orders equal sizes within a tier.
    """

    name: str
    says: str
    action: str
    phrase: str = "{name} {share}"
    metric: str | None = None
    tier: str = EVIDENCE
    measure: Callable[[Mapping[str, Any], Mapping[str, Any]], dict | None] | None = None
    panel: bool = False
    rank: float = 1000.0

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"finding {self.name!r}: tier {self.tier!r} is not one of {TIERS}")
        if (self.metric is None) == (self.measure is None):
            raise ValueError(f"finding {self.name!r}: give a metric or a measure, not both")

    def written(self, fields: Mapping[str, Any], boundary: Mapping[str, Any],
                options: Mapping[str, Any] | None = None) -> dict:
        """``fields`` completed into a measured finding on ``boundary`` (module notes); the
        texts may also quote the audit's ``options`` groups (``{search[tau]:g}``)."""
        out = {"finding": self.name, "boundary": boundary["name"], "tier": self.tier,
               "metric": self.metric, "panel": self.panel, **fields}
        words = {**(options or {}), **_words(out), "name": self.name,
                 "query": boundary["query"]["name"], "reference": boundary["reference"]["name"]}
        for key, template in (("phrase", self.phrase), ("sentence", self.says),
                              ("action", self.action)):
            out[key] = template.format(**words)
        return out


def wilson(numerator: int, denominator: int, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of ``numerator`` of ``denominator`` (scipy's)."""
    from scipy.stats import binomtest

    ci = binomtest(int(numerator), int(denominator)).proportion_ci(level, method="wilson")
    return float(ci.low), float(ci.high)


def shared(record: Mapping[str, Any], **extra: Any) -> dict | None:
    """The fields of a share finding from its record (``numerator`` of ``denominator`` rows;
    found when the numerator is above 0), with a 95% Wilson interval; ``None`` without a
    denominator."""
    num, den = record.get("numerator"), record.get("denominator")
    if num is None or not den:
        return None
    low, high = wilson(num, den)
    return {"kind": "share", "found": num > 0, "size": num / den, "estimate": num / den,
            "low": low, "high": high, "interval": "95% Wilson interval", "baseline": 0.0,
            "numerator": int(num), "denominator": int(den), "record": record.get("id"),
            **extra}


def scored(record: Mapping[str, Any] | None, what: str, baseline: float | None = None,
           **extra: Any) -> dict | None:
    """The fields of a score finding from its record (``what``: the score's name, e.g. the
    probe's balanced accuracy): the estimate against ``baseline``
    (default the record's ``details.chance``); found when the interval's lower bound lies
    above it, and sized by that margin. ``None`` when not measured or without an interval."""
    if record is None or record.get("status") not in ("completed", "partial"):
        return None
    unc = record.get("uncertainty") or {}
    ref = baseline if baseline is not None else (record.get("details") or {}).get("chance")
    est, low, high = record.get("estimate"), unc.get("low"), unc.get("high")
    if None in (est, low, high, ref):
        return None
    level = unc.get("level") or 0.95
    kind = str(unc.get("kind") or "").split(",")[0]
    return {"kind": "score", "found": bool(low > ref), "size": float(low - ref),
            "estimate": float(est), "low": float(low), "high": float(high),
            "interval": f"{100 * level:g}% interval" + (f": {kind}" if kind else ""),
            "baseline": float(ref), "what": what, "numerator": None,
            "denominator": record.get("denominator"), "record": record.get("id"), **extra}


def _words(m: Mapping[str, Any]) -> dict[str, str]:
    """The measured figures as the sentences quote them."""
    words = {k: v for k, v in m.items() if isinstance(v, str)}
    if m.get("kind") == "share":
        words.update(share=f"{percent_of(m['numerator'], m['denominator'])} "
                           f"({count(m['numerator'])} of {count(m['denominator'])})",
                     numerator=count(m["numerator"]), denominator=count(m["denominator"]),
                     percent=percent_of(m["numerator"], m["denominator"]))
    elif m.get("kind") == "score":
        words.update(share=f"{m['what']} {m['estimate']:.3f} [{m['low']:.3f}, "
                           f"{m['high']:.3f}], chance {m['baseline']:.3g}",
                     estimate=f"{m['estimate']:.3f}", low=f"{m['low']:.3f}",
                     high=f"{m['high']:.3f}", baseline=f"{m['baseline']:.3g}")
    return words
