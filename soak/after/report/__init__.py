"""``soaktop report``: one run as a self-contained HTML page (charts over time + tables).

The charts are drawn by **plotly.js**, taken from the ``plotly`` pip package
(``plotly.offline.get_plotlyjs()``) and written inline into the page. Why this library:

- it ships inside a Python package, so the page is built offline with nothing vendored
  or fetched: one ``pip install plotly`` (MIT; it depends only on ``narwhals`` and
  ``packaging``);
- it is actively maintained (plotly.js and plotly.py release monthly) and its SVG line
  traces render without WebGL, in headless browsers and on remote desktops;
- hover, zoom and pan come built in; the page links the time axes of all charts.

The cost is size: the bundle is ~4.8 MB per page (plotly.js 4.x, minified), plus the
data (thinned to at most 1,500 points per line, so a multi-hour run adds well under a
megabyte). Alternatives weighed: bokeh (BSD, ~1 MB inline, but pulls pillow, tornado,
contourpy, PyYAML and xyzservices into the operator's venv); Vega-Lite through altair
(its JS for inline pages comes from vl-convert-python, a native wheel with an embedded JS
runtime); pyecharts (loads ECharts from a CDN: not offline); uPlot or Chart.js (small, but
no pip package ships them, so soaktop would vendor and maintain the JS itself).

After the charts over time comes the soak's timeline (:mod:`soak.after.report.endurance`):
the window series over the whole run, its baseline and end windows marked, and the drift
and leak table that ``soaktop compare`` shows too (:mod:`soak.after.endurance_table`).

Everything from the run (reasons, fault details, log lines, trace names) is HTML-escaped
(:mod:`soak.after.report.tables`, :mod:`soak.after.report.charts`), and the page carries a
Content-Security-Policy that blocks any network request (:mod:`soak.after.report.page`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from soak import __version__
from soak.after.compare import RunView, read_run, verdict_words
from soak.after.endurance_table import origin_of
from soak.after.record_view import config_value
from soak.after.report import tables
from soak.after.report.charts import figures
from soak.after.report.endurance import Clock, endurance_section, read_windows, window_charts
from soak.after.report.page import document
from soak.after.report.series import read_series
from soak.after.report.step_chart import step_curve
from soak.after.step_table import STEP_HEADER, step_rows, sweep_words
from soak.record.models import RunRecord


class ReportError(RuntimeError):
    """The report could not be built (the message says why)."""


def plotly_bundle() -> str:
    """plotly.js, minified, from the plotly package (raises :class:`ReportError` without
    it, naming the package to install)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as e:
        raise ReportError(
            "soaktop report draws its charts with plotly.js from the 'plotly' package, "
            "which is not installed (pip install plotly)"
        ) from e
    return str(get_plotlyjs())


def build_report(run_dir: Path, plotly_js: str | None = None) -> str:
    """The HTML page of one run directory (:class:`~soak.after.compare.NotARunDir` if it is
    not one)."""
    view = read_run(run_dir)
    bundle = plotly_bundle() if plotly_js is None else plotly_js
    rec = view.record
    series = read_series(run_dir, rec)
    charts = figures(series, config_value(rec, "window_s") if rec is not None else None)
    body = [_verdict(view)]
    if rec is not None:
        body.append(tables.section("Caveats", tables.caveats(rec), "caveats"))
    chart_html = []
    for cid, title, fig, why in charts:
        if fig is None:
            chart_html.append(f'<div class="nodata"><b>{tables.esc(title)}</b>: {why}</div>')
        else:
            chart_html.append(f'<div class="chart" id="chart-{cid}"></div>')
    legend = (
        '<p class="legend">Shaded bands: protocol phases. ▼ and dotted lines: faults, '
        "restarts, endpoint outages, thresholds, controls and marks (hover for details)."
    )
    if series.events_dropped:
        legend += f" {series.events_dropped} less severe events are not marked."
    body.append(tables.section("Over time", legend + "</p>" + "".join(chart_html), "charts"))
    windows, source = read_windows(run_dir, rec)
    clock = Clock(series.end_t, origin_of(rec) if rec is not None else None)
    win_charts = window_charts(windows, rec.endurance if rec is not None else None, clock)
    timeline = endurance_section(rec, view.fields, windows, source, win_charts)
    body.append(tables.section("Drift and leaks", timeline, "endurance"))
    curve = step_curve(rec) if rec is not None else None
    if rec is not None:
        body += [
            tables.section("Load", tables.load_summary(rec), "load"),
            *([tables.section("Steps", step_section(rec, curve), "steps")] if rec.steps else []),
            tables.section("Gates", tables.gates(rec), "gates"),
            tables.section("Thresholds", tables.thresholds(rec), "thresholds"),
            tables.section("Reconciliation", tables.reconciliation(rec), "reconciliation"),
            tables.section("Faults", tables.faults(rec, view.fields, run_dir), "faults"),
            tables.section("Engines", tables.engines(rec), "engines"),
            tables.section("Identity", tables.identity(rec) + tables.config(rec), "identity"),
        ]
    nav = [
        ("verdict", "Verdict"),
        *([("caveats", "Caveats")] if rec is not None else []),
        ("charts", "Over time"),
        ("endurance", "Drift and leaks"),
        ("load", "Load"),
        *([("steps", "Steps")] if rec is not None and rec.steps else []),
        *((a, a.capitalize()) for a in ("gates", "thresholds", "reconciliation")),
        *((a, a.capitalize()) for a in ("faults", "engines", "identity")),
    ]
    figs = {f"chart-{cid}": fig for cid, _, fig, _ in [*charts, *win_charts] if fig is not None}
    if curve is not None:
        figs["chart-steps-curve"] = curve
    # A --redact run's page names its directory, never the path that holds it.
    redacted = rec is not None and config_value(rec, "redact")
    shown = view.path.name if redacted else view.path
    started, ended = (rec.started_at, rec.ended_at) if rec is not None else ("", "")
    meta = (
        f"{shown} · started {started or '—'} · ended {ended or '—'}"
        f" · report by soaktop {__version__} at "
        f"{datetime.now(UTC).isoformat(timespec='seconds')}"
    )
    return document(
        title=view.run_id,
        status=view.status,
        meta=meta,
        nav=nav if rec is not None else nav[:3],
        body="".join(body),
        figs=figs,
        plotly_js=bundle,
    )


def step_section(rec: RunRecord, curve: dict[str, object] | None) -> str:
    """A stepped load's throughput–latency table per step, the knee marked, and its curve
    (when two steps or more have figures)."""
    words = sweep_words(rec)
    note = f"<p>{tables.esc(words)}</p>" if words else ""
    chart = '<div class="chart" id="chart-steps-curve"></div>' if curve is not None else ""
    return tables.table(STEP_HEADER, step_rows(rec), "steps") + note + chart


def _verdict(view: RunView) -> str:
    rec = view.record
    words = verdict_words(view)
    if not view.valid and view.record is not None:  # INVALID + FAILED: both, in words
        words = f"{view.label}: {words}"
    parts = [f"<p><b>{tables.esc(words)}</b></p>"]
    if rec is None:
        parts.append(
            f'<p class="problem">{tables.esc(view.path)} has no readable record '
            f"({tables.esc(view.status)}): the charts come from its journals only.</p>"
        )
    else:
        if rec.recovered:
            parts.append('<p class="note">written by soaktop recover from the journals</p>')
        parts.append(tables.verdict(rec))
    if view.problems:
        items = "".join(f"<li>{tables.esc(p)}</li>" for p in view.problems)
        head = (
            "record.json cannot be read"
            if rec is None
            else "record.json does not match this soaktop's record schema; what it lacks "
            "reads as empty, what it adds is left out"
        )
        parts.append(f'<p class="problem">{head}:</p><ul>{items}</ul>')
    return tables.section("Verdict", "".join(parts), "verdict")


def write_report(run_dir: Path, out: Path | None = None) -> Path:
    """Write the page (default ``RUN/report.html``) and return where it went."""
    html = build_report(run_dir)
    path = out if out is not None else run_dir / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)
    return path
