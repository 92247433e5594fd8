"""The drift and leak metrics a threshold can name, what makes a trend count, and their
figures from the record's ``endurance`` and the snapshot's live view.

- ``drift.<figure>`` (a key of :data:`soak.record.endurance.FIGURES`): the change from the
  baseline windows to the end windows: relative for most figures (``-0.31`` is −31 %),
  in points for the ratio figures (``error_rate``, ``sanity_rate``, ``engine.kv_usage``:
  ``+0.01`` is one point), whose baseline is often 0;
- ``leak.<resource>`` (a key of :data:`soak.record.endurance.LEAKS`): the growth rate per
  hour, MB/h (the project's MB: 2²⁰ bytes, as psutil's figures are shown), MiB/h, a KV
  usage fraction per hour, or a count per hour.

A trend figure (:class:`TrendFigure`) carries, besides its value, whether the trend
behind it is *significant*: a threshold on it is breached only when its condition fails
**and** the trend is significant, so noise that happens to end low is not an alarm. A
drift is significant when Mann–Kendall's trend is significant (``Trend.direction``), goes
the way the change goes, and the change passes the figure kind's materiality floor
(:data:`DRIFT_FLOOR`): with many windows a tiny slope is "significant" and means nothing.
A leak is significant when its finding is a ``leak`` (``soak.judge.endurance``: rising,
material, not returned, not a start-up rise that levelled off). A bound tighter than a
floor therefore acts as the floor.
"""

from __future__ import annotations

from dataclasses import dataclass

from soak.record.endurance import (
    FIGURES,
    DriftFinding,
    Endurance,
    EnduranceView,
    FigureInfo,
    FigureKind,
    LeakFinding,
)

DRIFT_FLOOR: dict[FigureKind, float] = {
    "throughput": 0.05,
    "latency": 0.10,
    "ratio": 0.01,
    "count": 0.10,
    "mib": 0.05,
    "percent": 0.10,
    "seconds": 0.25,
}
"""The least change that can be a drift, per figure kind: a fraction of the baseline, or
points for ratios (0.01: one point)."""
ZERO_BASELINE_FLOOR: dict[FigureKind, float] = {
    "throughput": 1.0,
    "latency": 0.01,
    "ratio": 0.01,
    "count": 1.0,
    "mib": 16.0,
    "percent": 5.0,
    "seconds": 0.01,
}
"""The least absolute change that can be a drift when the baseline is 0 (no relative
change exists), in the figure's unit."""

LEAK_UNITS: dict[str, str] = {
    "server_rss": "MB/h",
    "gpu_mem": "MiB/h",
    "kv_usage": "/h",
    "client_rss": "MB/h",
    "open_files": "/h",
}
"""The unit of each resource's rate (kv_usage: a fraction of the cache per hour)."""
LEAK_FLOOR: dict[str, float] = {
    "server_rss": 16.0,
    "gpu_mem": 64.0,
    "kv_usage": 0.02,
    "client_rss": 16.0,
    "open_files": 4.0,
}
"""The least growth (end − baseline, in the figure's unit) that can be a leak."""
LEAK_RELATIVE_FLOOR = 0.02
"""...and for memory, the least growth as a share of the baseline (a 2 GB process
breathing by 30 MB is not leaking)."""

TREND_PREFIXES = ("drift.", "leak.")


def is_trend_metric(metric: str) -> bool:
    """A ``drift.*`` or ``leak.*`` metric (judged on the window series)."""
    return metric.startswith(TREND_PREFIXES)


def ratio_figure(info: FigureInfo) -> bool:
    """Its drift is in points, not relative (a ratio whose baseline is often 0)."""
    return info.kind == "ratio"


@dataclass(frozen=True)
class TrendFigure:
    """A drift or leak figure for a threshold: the value, whether the trend behind it is
    significant, and the words for the state's ``source``."""

    observed: float | None
    significant: bool
    source: str


def drift_change(info: FigureInfo, baseline: float | None, end: float | None) -> float | None:
    """The drift's value: points for ratio figures, else relative; None when the
    baseline is missing, or zero under a non-zero end (no relative change exists)."""
    if baseline is None or end is None:
        return None
    if ratio_figure(info):
        return end - baseline
    if baseline == 0:
        return 0.0 if end == 0 else None
    return (end - baseline) / abs(baseline)


def drift_material(info: FigureInfo, baseline: float | None, end: float | None) -> bool:
    """The change passes the kind's floor (:data:`DRIFT_FLOOR`, or the absolute
    :data:`ZERO_BASELINE_FLOOR` over a zero baseline)."""
    change = drift_change(info, baseline, end)
    if change is not None:
        return abs(change) >= DRIFT_FLOOR[info.kind] - 1e-12
    if baseline is None or end is None:
        return False
    return abs(end - baseline) >= ZERO_BASELINE_FLOOR[info.kind]


def drift_significant(f: DriftFinding) -> bool:
    """The finding's trend is significant, goes the way its change goes, and the change
    is material: a threshold on it can be breached."""
    if f.figure not in FIGURES or f.baseline is None or f.end is None:
        return False
    info = FIGURES[f.figure]
    way = {"rising": 1.0, "falling": -1.0}.get(f.trend.direction)
    if way is None or (f.end - f.baseline) * way <= 0:
        return False
    return drift_material(info, f.baseline, f.end)


def bad_way(f: DriftFinding) -> bool:
    """The trend goes the way that hurts (``FigureInfo.bad``)."""
    bad = FIGURES[f.figure].bad if f.figure in FIGURES else "up"
    return f.trend.direction == ("rising" if bad == "up" else "falling")


def p_value_words(p: float | None, step_p: float | None = None) -> str:
    """``p=0.41`` (``p<0.001`` when smaller; ``no test`` for none), and Pettitt's step
    test's p when it was asked (``soak.judge.trend``)."""
    if p is None:
        return "no test"
    words = "p<0.001" if p < 0.001 else f"p={p:.2g}"
    return words if step_p is None else f"{words}; one step: Pettitt p={step_p:.2g}"


def drift_source(f: DriftFinding, where: str = "window series") -> str:
    """The state's ``source`` for a drift figure: what the trend said."""
    if f.state == "no_data" or f.change is None:
        return f"{where}: {f.words or 'no data'}"
    p = p_value_words(f.trend.mk_p, f.trend.step_p)
    if drift_significant(f):
        return f"{where}: a significant {f.trend.direction} trend, Mann–Kendall {p}"
    if f.trend.direction in ("rising", "falling"):
        return f"{where}: a significant but immaterial trend, Mann–Kendall {p}"
    return f"{where}: no significant trend, Mann–Kendall {p}"


def leak_source(f: LeakFinding, where: str = "window series") -> str:
    """The state's ``source`` for a leak figure."""
    if f.state == "no_data" or f.rate_per_h is None:
        return f"{where}: {f.words or 'no data'}"
    p = p_value_words(f.mk_p, f.step_p)
    if f.state == "leak":
        return f"{where}: significant growth that did not come back, Mann–Kendall {p}"
    if f.returned:
        return f"{where}: it came back after its peak (not a leak), Mann–Kendall {p}"
    return f"{where}: no significant lasting growth, Mann–Kendall {p}"


def trend_figures(e: Endurance | None) -> dict[str, TrendFigure]:
    """The record's drift and leak figures by metric name (empty without ``endurance``);
    a run too short to judge gives each figure None, with the reason in its source."""
    if e is None:
        return {}
    out: dict[str, TrendFigure] = {}
    why = f"window series: {e.not_judged_why}" if not e.judged and e.not_judged_why else None
    for d in e.drift:
        source = why or drift_source(d)
        out[f"drift.{d.figure}"] = TrendFigure(
            observed=d.change if d.state != "no_data" else None,
            significant=drift_significant(d),
            source=source,
        )
    for leak in e.leaks:
        out[f"leak.{leak.resource}"] = TrendFigure(
            observed=leak.rate_per_h if leak.state != "no_data" else None,
            significant=leak.state == "leak",
            source=why or leak_source(leak),
        )
    return out


LIVE_TREND_SOURCE = "live window series (1 % buckets)"


def view_figures(view: EnduranceView | None) -> dict[str, TrendFigure]:
    """The live drift and leak figures from a snapshot's ``endurance`` (empty until a
    trend can be judged: the watch reads them as no data)."""
    if view is None or not view.judged:
        return {}
    out: dict[str, TrendFigure] = {}
    for fig in view.figures:
        out[f"drift.{fig.figure}"] = TrendFigure(
            observed=fig.change,
            significant=fig.significant,
            source=_live_words(fig.significant),
        )
    for leak in view.leaks:
        out[f"leak.{leak.resource}"] = TrendFigure(
            observed=leak.rate_per_h,
            significant=leak.significant,
            source=_live_words(leak.significant),
        )
    return out


def _live_words(significant: bool) -> str:
    what = "a significant trend" if significant else "no significant trend"
    return f"{LIVE_TREND_SOURCE}: {what}"
