"""Figures of the HTML report, drawn with matplotlib (Agg) from the data in ``audit.json``
and embedded as small PNG data URIs, so the report is one self-contained file that renders
offline. Every figure function takes plain lists/dicts (what ``audit.json`` holds) and returns
a ``data:image/png;base64,...`` string.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from splitscope.records.format import percent

_DPI = 80
_AUDITED = "#c0392b"
_CONTROL = "#2c7fb8"


def _figure(width: float = 6.0, height: float = 3.0):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), dpi=_DPI)
    return plt, fig, ax


def _data_uri(plt, fig) -> str:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _short(text: Any, n: int = 40) -> str:
    text = str(text)
    return text if len(text) <= n else text[: n - 1] + "…"


def similarity_distribution(histograms: Sequence[Mapping[str, Any]], *,
                            tau: float | None = None, xlabel: str = "best NCC ρ per query row") -> str:
    """Histograms of each query row's best similarity, audited boundary beside its negative
    control, as shares of each population's rows (so populations of different size compare).

    Parameters
    ----------
    histograms : sequence of mapping
        Each with ``label``, ``edges`` (n+1 bin edges), ``counts`` (n) and ``role``
        (``audited`` or ``control``).
    tau : float, optional
        The decision threshold, drawn as a vertical line.
    """
    plt, fig, ax = _figure()
    for h in histograms:
        edges = np.asarray(h["edges"], dtype=float)
        counts = np.asarray(h["counts"], dtype=float)
        total = counts.sum()
        share = counts / total if total else counts
        # the first bin gathers everything below the plotted range: said in the legend
        below = share[0] if len(share) > 1 and edges[1] - edges[0] > 0.05 else None
        if below is not None:
            share, edges = share[1:], edges[1:]
        color = _CONTROL if h.get("role") == "control" else _AUDITED
        extra = f", {percent(below)} below {edges[0]:g}" if below is not None else ""
        ax.stairs(share, edges, label=f"{_short(h['label'])} (n={int(total)}{extra})",
                  color=color, fill=h.get("role") != "control",
                  alpha=0.45 if h.get("role") != "control" else 1, linewidth=1.5)
    if tau is not None:
        ax.axvline(tau, color="black", linestyle="--", linewidth=1, label=f"τ = {tau:g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of query rows")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.legend(fontsize=8, loc="upper left")
    return _data_uri(plt, fig)


def sweep_ylim(top_percent: float) -> tuple[float, float]:
    """The sweep's y-range in %: from 0, so that a one-row change does not look like a cliff,
    to a little above the highest rate (at least 1 %, at most 100 %)."""
    return 0.0, min(100.0, max(1.0, 1.1 * float(top_percent)))


def threshold_sweep(sweeps: Sequence[Mapping[str, Any]], *, tau: float | None = None) -> str:
    """Share of query rows flagged at each threshold, one line per population (audited and
    control). Each sweep has ``label``, ``role`` and ``points`` [{``tau``, ``rate``}]."""
    plt, fig, ax = _figure()
    top = 0.0
    for s in sweeps:
        pts = [p for p in s["points"] if p.get("rate") is not None]
        if not pts:
            continue
        x = [p["tau"] for p in pts]
        y = [100 * p["rate"] for p in pts]
        top = max(top, *y)
        color = _CONTROL if s.get("role") == "control" else _AUDITED
        ax.plot(x, y, marker="o", color=color, label=_short(s["label"]))
    if tau is not None:
        ax.axvline(tau, color="black", linestyle="--", linewidth=1)
    ax.set_ylim(*sweep_ylim(top))
    ax.set_xlabel("threshold τ (NCC ρ ≥ τ)")
    ax.set_ylabel("% of query rows flagged")
    ax.legend(fontsize=8)
    return _data_uri(plt, fig)


def interval_chart(items: Sequence[Mapping[str, Any]], *, xlabel: str,
                   reference: float | None = None, xlim: tuple[float, float] | None = None) -> str:
    """Horizontal point-and-interval chart: one line per item (``label``, ``estimate``,
    optional ``low``/``high``). ``reference`` draws a vertical line (e.g. chance level)."""
    items = [i for i in items if i.get("estimate") is not None]
    plt, fig, ax = _figure(6.0, max(1.4, 0.45 * len(items) + 0.9))
    for k, item in enumerate(items):
        est = float(item["estimate"])
        low, high = item.get("low"), item.get("high")
        if low is not None and high is not None:
            ax.errorbar(est, k, xerr=[[est - float(low)], [float(high) - est]], fmt="o",
                        color=_AUDITED, capsize=3)
        else:
            ax.plot(est, k, "o", color=_AUDITED)
    ax.set_yticks(range(len(items)), [_short(i["label"], 48) for i in items], fontsize=8)
    ax.invert_yaxis()
    if reference is not None:
        ax.axvline(reference, color="grey", linestyle=":", linewidth=1)
    if xlim is not None:
        ax.set_xlim(*xlim)
    ax.set_xlabel(xlabel)
    return _data_uri(plt, fig)


def findings_panel(measured: Sequence[Mapping[str, Any]]) -> str:
    """The scalar findings beside the composition bar: one line per finding the layers draw
    (``panel``), its estimate as a point with its interval, against its own baseline (chance
    for a probe, a tick at 0 for a share) drawn as a grey tick; found ones in red, others in
    grey, each labelled with its figure."""
    items = [m for m in measured if m.get("panel") and m.get("estimate") is not None]
    several = len({m["boundary"] for m in items}) > 1
    plt, fig, ax = _figure(5.2, max(1.4, 0.42 * len(items) + 0.9))
    for k, m in enumerate(items):
        est, low, high = float(m["estimate"]), float(m["low"]), float(m["high"])
        colour = _AUDITED if m["found"] else "#888888"
        ax.errorbar(est, k, xerr=[[est - low], [high - est]], fmt="o", color=colour,
                    capsize=3, markersize=5)
        ax.plot([m["baseline"]] * 2, [k - 0.35, k + 0.35], color="black", linewidth=1.2)
        text = (f"{percent(est)} ({m['numerator']:,} of {m['denominator']:,})"
                if m["kind"] == "share" else f"{est:.3f} (chance {m['baseline']:.3g})")
        ax.text(1.02, k, text, va="center", fontsize=7.5, color=colour,
                transform=ax.get_yaxis_transform())
    ax.set_yticks(range(len(items)),
                  [_short(f"{m['finding']} ({m['boundary']})" if several else m["finding"], 34)
                   for m in items], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("estimate, 95% interval; black tick: chance or 0", fontsize=8)
    return _data_uri(plt, fig)


#: how the figure names a category where its name says more than it measured: a row in none of
#: the categories is free of copies and shared groups, not of every finding (see the panel)
COMPOSITION_LABELS = {"clean": "none of these"}
#: colours of the composition categories, strongest evidence darkest
_COMPOSITION_COLOURS = {"byte copy": "#7f0000", "pixel-identical": "#c0392b",
                        "near twin": "#e67e22", "shared group": "#f1c40f",
                        "clean": "#7fb77e", "not assessed": "#cccccc"}


def composition_bars(compositions: Sequence[Mapping[str, Any]]) -> str:
    """One horizontal stacked bar per evaluated split: its rows by category (byte copy,
    pixel-identical, near twin, shared group, clean, not assessed), each segment labelled
    with its row count, as a share of the split's rows."""
    plt, fig, ax = _figure(7.0, max(1.3, 0.55 * len(compositions) + 0.9))
    seen = set()
    for k, comp in enumerate(compositions):
        total = max(int(comp["rows"]), 1)
        start = 0.0
        for cat in comp["categories"]:
            n = int(cat["rows"])
            if not n:
                continue
            width = n / total
            name = cat["category"]
            ax.barh(k, width, left=start, color=_COMPOSITION_COLOURS.get(name, "#999999"),
                    edgecolor="white",
                    label=None if name in seen else COMPOSITION_LABELS.get(name, name))
            seen.add(name)
            if width > 0.06:
                ax.text(start + width / 2, k, f"{n:,}", ha="center", va="center", fontsize=8,
                        color="white" if name in ("byte copy", "pixel-identical") else "black")
            start += width
    ax.set_yticks(range(len(compositions)),
                  [_short(f"{c['boundary']} ({int(c['rows']):,} rows)", 40)
                   for c in compositions], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the evaluated split's rows")
    ax.legend(fontsize=7, ncol=6, loc="lower center", bbox_to_anchor=(0.5, 1.0),
              frameon=False)
    return _data_uri(plt, fig)


def reliability_diagram(bins: Sequence[Mapping[str, Any]], *, label: str = "") -> str:
    """Reliability diagram: mean confidence vs accuracy per bin (``confidence``, ``accuracy``,
    ``count``), with the diagonal of perfect calibration."""
    plt, fig, ax = _figure(4.0, 4.0)
    pts = [b for b in bins if b.get("count")]
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    if pts:
        conf = [b["confidence"] for b in pts]
        acc = [b["accuracy"] for b in pts]
        size = np.asarray([b["count"] for b in pts], dtype=float)
        ax.scatter(conf, acc, s=20 + 180 * size / size.max(), color=_AUDITED, alpha=0.7)
        ax.plot(conf, acc, color=_AUDITED, linewidth=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean confidence")
    ax.set_ylabel("accuracy")
    if label:
        ax.set_title(_short(label, 50), fontsize=9)
    return _data_uri(plt, fig)
