"""How the evaluation and attribution layers (METHODS §5) read: their verdict sections, lines
from the finished document that the layers declare (``verdicts``) and the audit orders
(:mod:`splitscope.core.verdicts`)."""

from __future__ import annotations

from splitscope.evaluation.predicates import ATTRIBUTION_LAYER, BALANCED_ACCURACY, LAYER
from splitscope.records.format import count
from splitscope.records.metrics import Verdict

#: balanced-accuracy records named one per line in the verdicts (the others are counted)
SHOWN = 6


def _balanced_accuracy_lines(doc) -> list[str]:
    records = doc.get("records") or []
    evals = [r for r in records if r.get("layer") == LAYER
             and r.get("status") in ("completed", "partial") and r.get("estimate") is not None
             and (r.get("predicate") or {}).get("name") == BALANCED_ACCURACY]
    lines = []
    for r in evals[:SHOWN]:
        unc = r.get("uncertainty") or {}
        interval = (f" [{unc['low']:.3f}, {unc['high']:.3f}]"
                    if unc.get("low") is not None and unc.get("high") is not None else "")
        lines.append(f"{r.get('title') or r['id']}: {r['estimate']:.3f}{interval}"
                     f" (n = {count(r.get('denominator'))}).")
    if len(evals) > SHOWN:
        lines.append(f"… and {len(evals) - SHOWN} more balanced-accuracy records in audit.json.")
    return lines


def _attribution_lines(doc) -> list[str]:
    lines = []
    for r in doc.get("records") or []:
        if r.get("layer") != ATTRIBUTION_LAYER or r.get("status") not in ("completed", "partial") \
                or r.get("estimate") is None:
            continue
        det, unc = r.get("details") or {}, r.get("uncertainty") or {}
        ex, cl = det.get("exposed") or {}, det.get("clean") or {}
        where = ((r.get("predicate") or {}).get("params") or {}).get("boundary")
        interval = (f" [{unc['low']:+.3f}, {unc['high']:+.3f}]"
                    if unc.get("low") is not None and unc.get("high") is not None else "")
        lines.append(
            f"Attribution outside anatomy{f' ({where})' if where else ''}: leaked rows put "
            f"{ex.get('mean', float('nan')):.3f} of their attribution mass outside the mask, "
            f"clean rows {cl.get('mean', float('nan')):.3f} (n = {count(ex.get('assessed'))} "
            f"and {count(cl.get('assessed'))}); difference {r['estimate']:+.3f}{interval}.")
    return lines


#: the evaluation layer's verdict section
VERDICTS: tuple[Verdict, ...] = (Verdict("balanced_accuracy", _balanced_accuracy_lines,
                                                        rank=90),)
#: the attribution layer's verdict section
ATTRIBUTION_VERDICTS: tuple[Verdict, ...] = (Verdict("attribution", _attribution_lines,
                                                                  rank=110),)
