"""The throughput–latency curve of a stepped load (issue 16 §4), as a plotly figure.

One point per step: its completed requests/s (x) against its TTFT and E2E p99 (y), and
its goodput on the same x scale as a third line, so the knee reads off the page — where
throughput stops growing and latency climbs. Each point's hover names the step (labels
are soaktop's own words, escaped all the same: plotly renders a subset of HTML).
"""

from __future__ import annotations

from typing import Any

from soak.after.report.charts import esc
from soak.after.report.palette import INK, PAPER, SERIES_COLOURS
from soak.record.models import RunRecord


def step_curve(rec: RunRecord) -> dict[str, Any] | None:
    """The figure, or None when fewer than two steps have figures (no curve to draw)."""
    measured = [s for s in rec.steps if s.load is not None and s.load.requests_per_s]
    if len(measured) < 2:
        return None
    xs = [s.load.requests_per_s for s in measured if s.load is not None]
    names = [esc(f"step {s.index}: {s.label}") for s in measured]
    lines: list[tuple[str, list[float | None], str]] = [
        ("TTFT p99", [s.load.ttft_s.p99 for s in measured if s.load is not None], "y"),
        ("E2E p99", [s.load.e2e_s.p99 for s in measured if s.load is not None], "y"),
        ("goodput", [s.goodput for s in measured], "y2"),
    ]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": name,
            "x": xs,
            "y": ys,
            "text": names,
            "hovertemplate": "%{text}<br>%{x:.2f} req/s: %{y:.3f}<extra>" + name + "</extra>",
            "yaxis": axis,
            "line": {"color": SERIES_COLOURS[i % len(SERIES_COLOURS)], "width": 2},
        }
        for i, (name, ys, axis) in enumerate(lines)
    ]
    notes = []
    knee = rec.sweep.knee_step if rec.sweep is not None else None
    for s, x in zip(measured, xs, strict=True):
        if s.index == knee and s.load is not None:
            notes.append(
                {
                    "x": x,
                    "y": s.load.e2e_s.p99,
                    "text": "knee",
                    "showarrow": True,
                    "arrowcolor": INK,
                    "font": {"color": INK},
                }
            )
    layout = {
        "title": {"text": "Throughput and latency per step", "x": 0.01, "font": {"size": 15}},
        "height": 360,
        "margin": {"l": 64, "r": 64, "t": 56, "b": 80},
        "xaxis": {"title": {"text": "completed requests/s in the step"}, "rangemode": "tozero"},
        "yaxis": {"title": {"text": "seconds (p99)"}, "rangemode": "tozero"},
        "yaxis2": {
            "title": {"text": "goodput req/s"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "showgrid": False,
        },
        "legend": {"orientation": "h", "y": -0.3, "yanchor": "top"},
        "annotations": notes,
        "paper_bgcolor": PAPER,
        "plot_bgcolor": PAPER,
    }
    return {"data": data, "layout": layout}
