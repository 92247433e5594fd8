"""The report's charts as plotly.js figure JSON (``{"data": [...], "layout": {...}}``).

Figures are plain dicts handed to ``Plotly.newPlot`` in the page; the Python plotly
package is used only for its bundled plotly.js. Every text that came from the run (trace
names, event messages) is HTML-escaped here, because plotly.js renders a subset of HTML
in labels and hover text: a server log line must show as text, never as markup.
"""

from __future__ import annotations

import html
from typing import Any

from soak.after.report.palette import (
    INK,
    PAPER,
    PHASE_COLOURS,
    PHASE_FALLBACK,
    SERIES_COLOURS,
    SEVERITY_COLOURS,
)
from soak.after.report.series import RunSeries, Series
from soak.safe_text import safe_text

# (chart id, title, y-axis title, why a missing chart is missing)
CHARTS: tuple[tuple[str, str, str, str], ...] = (
    ("throughput", "Throughput per window", "output tokens/s", "no snapshots.jsonl"),
    ("ttft", "First-token latency (TTFT) per window", "seconds", "no snapshots.jsonl"),
    ("e2e", "Whole-request latency (E2E) per window", "seconds", "no snapshots.jsonl"),
    (
        "concurrency",
        "Client requests in flight vs engine running / waiting",
        "requests",
        "no snapshots or engine metrics",
    ),
    ("kv", "KV cache usage per endpoint", "% of KV cache", "no engine metrics (/metrics)"),
    ("gpu_memory", "GPU memory used", "MiB", "no GPU telemetry (NVML or DCGM) in this run"),
    ("gpu_temperature", "GPU temperature", "°C", "no GPU telemetry (NVML or DCGM) in this run"),
    ("gpu_power", "GPU power", "W", "no GPU telemetry (NVML or DCGM) in this run"),
    ("host", "Client and host CPU", "percent", "no host samples (a run older than them)"),
)

_RIGHT_AXIS = {"requests/s"}
"""Traces drawn against a second y axis (their scale differs by orders of magnitude)."""


def esc(text: Any) -> str:
    """Text for plotly labels: HTML-escaped, so markup in a log line shows as text, and
    control characters shown as escapes (:func:`~soak.safe_text.safe_text`)."""
    return html.escape(safe_text(str(text)), quote=True)


def _round(v: float | None) -> float | None:
    return None if v is None else float(f"{v:.5g}")


def _has_data(traces: dict[str, Series]) -> bool:
    return any(v is not None for _, ys in traces.values() for v in ys)


def _wrap(text: str, width: int = 90) -> str:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + len(w) + 1 > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}".strip()
    return "<br>".join(esc(x) for x in [*lines, cur][:8])


def decorations(series: RunSeries) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Phase bands and event lines (shapes) with their labels (annotations)."""
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    total = max((series.end_t or 0.0), 1.0)
    for name, start, end in series.phases:
        stop = end if end is not None else series.end_t
        if stop is None or stop <= start:
            continue
        colour = PHASE_COLOURS.get(name, PHASE_FALLBACK)
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": start,
                "x1": stop,
                "y0": 0,
                "y1": 1,
                "fillcolor": colour,
                "opacity": 0.1,
                "line": {"width": 0},
                "layer": "below",
            }
        )
        if (stop - start) / total >= 0.04:  # a label on a sliver would cover its neighbours
            notes.append(
                {
                    "x": (start + stop) / 2,
                    "y": 1,
                    "xref": "x",
                    "yref": "paper",
                    "yanchor": "bottom",
                    "showarrow": False,
                    "text": esc(name.replace("_", " ")),
                    "font": {"size": 10, "color": colour},
                }
            )
    for ev in series.events:
        colour = SEVERITY_COLOURS.get(ev.severity, SEVERITY_COLOURS["info"])
        t = ev.t
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": t,
                "x1": t,
                "y0": 0,
                "y1": 1,
                "line": {"color": colour, "width": 1.5, "dash": "dot"},
            }
        )
        notes.append(
            {
                "x": t,
                "y": 0.98,
                "xref": "x",
                "yref": "paper",
                "yanchor": "top",
                "showarrow": False,
                "text": "▼",
                "font": {"size": 12, "color": colour},
                "hovertext": f"<b>{esc(ev.kind)}</b> at {t:.1f} s<br>" + _wrap(ev.message),
            }
        )
    return shapes, notes


def figure(chart: str, title: str, unit: str, series: RunSeries) -> dict[str, Any] | None:
    """One chart's figure, or None when the run has no data for it."""
    traces = series.lines.get(chart) or {}
    if not _has_data(traces):
        return None
    data = []
    colours: dict[str, str] = {}
    for name, (xs, ys) in traces.items():
        # An endpoint's running and waiting lines share its colour (waiting is dotted).
        key = name.rsplit(" ", 1)[0] if name.endswith(("running", "waiting")) else name
        colour = colours.setdefault(key, SERIES_COLOURS[len(colours) % len(SERIES_COLOURS)])
        if name == "client in flight":
            colour = INK
        trace: dict[str, Any] = {
            "type": "scatter",
            "mode": "lines",
            "name": esc(name),
            "x": [round(x, 3) for x in xs],
            "y": [_round(y) for y in ys],
            "connectgaps": False,
            "line": {
                "width": 2.5 if name == "client in flight" else 1.5,
                "dash": "dot" if name.endswith("waiting") else "solid",
                "color": colour,
            },
        }
        if name in _RIGHT_AXIS:
            trace["yaxis"] = "y2"
        data.append(trace)
    shapes, notes = decorations(series)
    layout = time_layout(esc(title), esc(unit), 360, shapes, notes, data)
    if series.end_t:
        layout["xaxis"]["range"] = [0, series.end_t]
    return {"data": data, "layout": layout}


def figures(
    series: RunSeries, window_s: Any = None
) -> list[tuple[str, str, dict[str, Any] | None, str]]:
    """(chart id, title, figure or None, why missing) for every chart, in page order;
    ``window_s`` (the config's sliding window) names the window in the titles."""
    span = f"{window_s:g} s window" if isinstance(window_s, int | float) else "window"
    out = []
    for cid, title, unit, why in CHARTS:
        title = title.replace("per window", f"per {span}")
        out.append((cid, title, figure(cid, title, unit, series), why))
    return out


def time_layout(
    title: str,
    unit: str,
    height: int,
    shapes: list[Any],
    notes: list[Any],
    data: list[dict[str, Any]],
) -> dict[str, Any]:
    """The layout of a chart over the run's clock (``title`` and ``unit`` escaped), with
    the requests/s axis on the right when a trace of ``data`` is drawn against it."""
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0.01, "font": {"size": 15}},
        "height": height,
        "margin": {"l": 64, "r": 64, "t": 56, "b": 80},
        "xaxis": {"title": {"text": "seconds since the run started"}, "zeroline": False},
        "yaxis": {"title": {"text": unit}, "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": -0.3, "yanchor": "top"},
        "hovermode": "x unified",
        "shapes": shapes,
        "annotations": notes,
        "paper_bgcolor": PAPER,
        "plot_bgcolor": PAPER,
    }
    if any("yaxis" in t for t in data):
        layout["yaxis2"] = {
            "title": {"text": "requests/s"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "showgrid": False,
            "tickmode": "auto",
        }
    return layout
