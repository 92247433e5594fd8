"""The report's endurance section: the window series over the whole run, and the drift and
leak table.

The series is the record's ``windows`` (recomputed from the journals at the end of the
run); a run without them in its record (one still running, or a crash before the record)
charts ``windows.jsonl``, the live lines, and says so. One chart per group of figures
(throughput, latency, failures and flagged responses, KV usage, memory, GPU memory), each
point a window at its middle, on the clock the other charts use (seconds since the run
started), so zooming one zooms them all. The baseline and end windows the drift is
measured between are shaded and labelled; the windows that are never judged (the partial
last one, the drain) are greyed; a drift's onset is a dotted line with its words on hover.

The table is :mod:`soak.after.endurance_table`'s, which ``soaktop compare`` shows too.
Everything from the run (a finding's words can quote a fault) is escaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soak.after.endurance_table import (
    NO_SERIES,
    Table,
    drift_rows,
    has_timeline,
    judgement_words,
    leak_rows,
    origin_of,
    policy_words,
    warmup_words,
    without_data,
)
from soak.after.record_view import read_leniently
from soak.after.report.charts import esc as label
from soak.after.report.charts import time_layout
from soak.after.report.palette import (
    BASELINE_COLOUR,
    END_COLOUR,
    MUTED,
    SERIES_COLOURS,
    SEVERITY_COLOURS,
)
from soak.after.report.series import MAX_POINTS, thin
from soak.after.report.tables import esc, table
from soak.record.endurance import FIGURES, Endurance, WindowFigures
from soak.record.journal import read_jsonl
from soak.record.models import RunRecord

ChartSpec = tuple[str, str, str, tuple[tuple[str, str, float, bool], ...]]
"""(chart id, title, y-axis title, traces: (name, WindowFigures field, scale, right axis))."""

WINDOW_CHARTS: tuple[ChartSpec, ...] = (
    (
        "win_throughput",
        "Throughput per window, whole run",
        "output tokens/s",
        (("output tok/s", "output_tok_s", 1.0, False), ("requests/s", "req_s", 1.0, True)),
    ),
    (
        "win_latency",
        "TTFT and E2E per window, whole run",
        "seconds",
        (
            ("TTFT p99", "ttft_p99", 1.0, False),
            ("E2E p99", "e2e_p99", 1.0, False),
            ("TTFT p50", "ttft_p50", 1.0, False),
            ("E2E p50", "e2e_p50", 1.0, False),
        ),
    ),
    (
        "win_quality",
        "Failed and flagged responses per window",
        "% of the window's requests",
        (
            ("failure rate", "error_rate", 100.0, False),
            ("flagged responses (HTTP 200)", "sanity_rate", 100.0, False),
        ),
    ),
    (
        "win_kv",
        "KV cache usage per window (the fullest endpoint)",
        "% of KV cache",
        (("KV usage", "engine_kv_usage", 100.0, False),),
    ),
    (
        "win_memory",
        "Server and client memory per window",
        "MB",
        (("server RSS", "server_rss_mb", 1.0, False), ("client RSS", "client_rss_mb", 1.0, False)),
    ),
    (
        "win_gpu",
        "GPU memory used per window (the fullest GPU)",
        "MiB",
        (("GPU memory used", "gpu_memory_used_mib", 1.0, False),),
    ),
)

_FIGURE_OF_FIELD = {info.field: name for name, info in FIGURES.items()}

Chart = tuple[str, str, dict[str, Any] | None, str]
"""(chart id, title, figure or None, why missing): as :func:`soak.after.report.charts.figures`."""


def read_windows(run_dir: Path, rec: RunRecord | None) -> tuple[list[WindowFigures], str]:
    """The window series and where it came from: the record's (exact), else the live
    lines of ``windows.jsonl`` (1 % buckets), else none."""
    if rec is not None and rec.windows:
        return list(rec.windows), "the record (recomputed from the journals)"
    out = []
    keys = frozenset({("i",), ("start_s",), ("end_s",)})
    for raw in read_jsonl(run_dir / "windows.jsonl"):
        line, _ = read_leniently(WindowFigures, raw, must_have=keys)
        if line is not None:
            out.append(line)
    return out, "windows.jsonl (the live lines, 1 % histogram buckets)"


def charted(windows: list[WindowFigures]) -> bool:
    """Worth a chart: at least one whole load window (a 4 s demo has none)."""
    return any(w.kind == "load" for w in windows)


def _rect(x0: float, x1: float, colour: str, opacity: float) -> dict[str, Any]:
    return {
        "type": "rect",
        "xref": "x",
        "yref": "paper",
        "x0": x0,
        "x1": x1,
        "y0": 0,
        "y1": 1,
        "fillcolor": colour,
        "opacity": opacity,
        "line": {"width": 0},
        "layer": "below",
    }


def _note(x: float, text: str, colour: str, hover: str | None = None) -> dict[str, Any]:
    note: dict[str, Any] = {
        "x": x,
        "y": 1,
        "xref": "x",
        "yref": "paper",
        "yanchor": "bottom",
        "showarrow": False,
        "text": text,
        "font": {"size": 10, "color": colour},
    }
    if hover is not None:
        note["hovertext"] = hover
    return note


def _span(windows: list[WindowFigures], first_last: list[int]) -> tuple[float, float] | None:
    if len(first_last) != 2:
        return None
    by_i = {w.i: w for w in windows}
    a, b = by_i.get(first_last[0]), by_i.get(first_last[1])
    return None if a is None or b is None else (a.start_s, b.end_s)


def marks(
    windows: list[WindowFigures],
    e: Endurance | None,
    fields: tuple[str, ...],
    load_from: float | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Shapes and labels: baseline and end windows, the windows never judged, the warm-up
    (from ``load_from``, the release), and the onset of each drift among ``fields``'
    figures."""
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    unjudged = [w for w in windows if w.kind != "load"]
    if unjudged:
        shapes.append(_rect(min(w.start_s for w in unjudged), windows[-1].end_s, MUTED, 0.12))
    if e is None:
        return shapes, notes
    for name, span, colour in (
        ("baseline", _span(windows, e.baseline), BASELINE_COLOUR),
        ("end", _span(windows, e.end), END_COLOUR),
    ):
        if span is not None:
            shapes.append(_rect(*span, colour, 0.16))
            notes.append(_note((span[0] + span[1]) / 2, name, colour))
    warm = e.warmup
    warm_end = warm.end_s if warm is not None else None
    if warm_end is not None and load_from is not None and warm_end > load_from:
        shapes.append(_rect(load_from, warm_end, MUTED, 0.12))
        notes.append(_note((load_from + warm_end) / 2, "warm-up", MUTED))
    figures = {_FIGURE_OF_FIELD.get(f) for f in fields}
    colour = SEVERITY_COLOURS["error"]
    for f in e.drift:
        if f.state != "drift" or f.since_s is None or f.figure not in figures:
            continue
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": f.since_s,
                "x1": f.since_s,
                "y0": 0,
                "y1": 1,
                "line": {"color": colour, "width": 1.5, "dash": "dot"},
            }
        )
        notes.append(_note(f.since_s, "▼", colour, label(f.words or f.figure)))
    return shapes, notes


def _trace(name: str, windows: list[WindowFigures], field: str, scale: float) -> dict[str, Any]:
    """One line, a point per window at its middle; a series longer than a chart can show
    (a day at ``--window 1``) is thinned as the other charts are, keeping the extremes."""
    xs = [round((w.start_s + w.end_s) / 2, 3) for w in windows]
    ys: list[float | None] = []
    for w in windows:
        v = getattr(w, field)
        ys.append(None if v is None else float(f"{float(v) * scale:.5g}"))
    trace: dict[str, Any] = {
        "type": "scatter",
        "mode": "lines+markers",
        "name": label(name),
        "connectgaps": False,
        "marker": {"size": 4},
        "line": {"width": 1.5},
    }
    if len(windows) > MAX_POINTS:
        xs, ys = thin(xs, ys)
        trace["mode"] = "lines"
    else:  # hover names the window
        trace["text"] = [label(f"window {w.i} ({w.kind})") for w in windows]
    return trace | {"x": xs, "y": ys}


@dataclass(frozen=True)
class Clock:
    """Where the series sits on the run's clock: the x axis's end and the release."""

    end_t: float | None = None
    """The last moment any journal saw (the x axis runs to it)."""
    load_from: float | None = None
    """The barrier release (the warm-up is shaded from it)."""


def window_figure(
    windows: list[WindowFigures], e: Endurance | None, spec: ChartSpec, clock: Clock
) -> dict[str, Any] | None:
    """One chart of the series, or None when no window has a value for it."""
    _, title, unit, traces = spec
    data = []
    for k, (name, field, scale, right) in enumerate(traces):
        if all(getattr(w, field) is None for w in windows):
            continue
        trace = _trace(name, windows, field, scale)
        trace["line"]["color"] = SERIES_COLOURS[k % len(SERIES_COLOURS)]
        if name.endswith("p50"):
            trace["line"]["dash"] = "dot"
        if right:
            trace["yaxis"] = "y2"
        data.append(trace)
    if not data:
        return None
    shapes, notes = marks(windows, e, tuple(t[1] for t in traces), clock.load_from)
    layout = time_layout(label(title), label(unit), 340, shapes, notes, data)
    layout["xaxis"]["range"] = [0, max(clock.end_t or 0.0, windows[-1].end_s)]
    return {"data": data, "layout": layout}


def window_charts(
    windows: list[WindowFigures], e: Endurance | None, clock: Clock | None = None
) -> list[Chart]:
    """Every chart of the series in page order (none when :func:`charted` says no)."""
    if not charted(windows):
        return []
    width = e.window_s if e is not None else round(windows[0].end_s - windows[0].start_s)
    out = []
    for spec in WINDOW_CHARTS:
        title = spec[1].replace("per window", f"per {width:g} s window")
        fig = window_figure(windows, e, (spec[0], title, *spec[2:]), clock or Clock())
        out.append((spec[0], title, fig, "no window has a value for it"))
    return out


def _html_table(t: Table) -> str:
    return table(t.header, t.rows, "numbers")


def endurance_tables(rec: RunRecord | None, fields: frozenset[str]) -> str:
    """The drift and leak table of one record as HTML (what compare's page shows per run);
    ``fields``: the record's own top-level keys (an older record has no ``endurance``)."""
    if rec is None:
        return '<p class="none">no readable record</p>'
    e = rec.endurance
    if e is None:
        why = NO_SERIES if not has_timeline(rec, fields) else "the record holds no judgement"
        return f'<p class="none">not judged: {esc(why)}</p>'
    origin = origin_of(rec)
    parts = [f"<p><b>{esc(judgement_words(e))}</b></p>"]
    if (warm := warmup_words(e, origin)) is not None:
        parts.append(f'<p class="note">{esc(warm)}</p>')
    if not e.judged:
        return "".join(parts)
    parts.append(f'<p class="note">{esc(policy_words(e))}</p>')
    said = [f.words for f in e.drift if f.state == "drift" and f.words]
    said += [f.words for f in e.leaks if f.state == "leak" and f.words]
    if said:
        parts.append('<ul class="findings">' + "".join(f"<li>{esc(w)}</li>" for w in said))
        parts.append("</ul>")
    parts += ["<h3>Drift: first → last</h3>", _html_table(drift_rows(e, origin))]
    parts += ["<h3>Leaks: rate per hour</h3>", _html_table(leak_rows(e))]
    if (missing := without_data(e)) is not None:
        parts.append(f'<p class="none">{esc(missing)}</p>')
    return "".join(parts)


def endurance_section(
    rec: RunRecord | None,
    fields: frozenset[str],
    windows: list[WindowFigures],
    source: str,
    charts: list[Chart],
) -> str:
    """The section's body: what the series is, its charts, then the table."""
    if not windows:
        if rec is None or not has_timeline(rec, fields):
            what = NO_SERIES if rec is not None else "no window series: no record, no windows.jsonl"
            return f'<p class="none">{esc(what)}</p>'
        head = '<p class="none">no window series: the load was shorter than one window</p>'
    else:
        whole = sum(w.kind == "load" for w in windows)
        head = (
            f'<p class="legend">{len(windows)} windows from {esc(source)}, {whole} of them whole '
            "load windows. Shaded: the baseline and end windows the drift is measured between; "
            "grey: windows never judged (the last, partial one and the drain); ▼ and dotted "
            "lines: where a drift began (hover for its words).</p>"
        )
        if not charts:
            head += '<p class="none">no whole load window: nothing to chart</p>'
    divs = "".join(f'<div class="chart" id="chart-{cid}"></div>' for cid, _, f, _ in charts if f)
    empty = [title for _, title, f, _ in charts if f is None]
    if empty:
        divs += f'<p class="none">no values in the series for: {esc(", ".join(empty))}</p>'
    return head + divs + endurance_tables(rec, fields)
