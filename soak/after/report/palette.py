"""The HTML reports' colours (``soaktop report``, ``decide --html``, ``compare --html``).

Colour otherwise lives in ``themes/``, but the headless core must not import the Textual
layer, so the pages' palette is kept here, in one place: every colour the report modules
use is named below (light pages; status colours that match the monitor's words).
"""

INK = "#1d232b"
"""Text, outlines and the darkest marks."""
PAPER = "#ffffff"
"""Chart backgrounds."""
MUTED = "#6b7480"
"""Notes, "no data", hatch strokes."""
MARK = "#111827"
"""The dashed control × (1 − gain) marks of the decide page."""
NO_DATA_BAR = "#b0b6be"
NO_WIN_TEXT = "#9a3412"

PHASE_COLOURS = {
    "before_gates": "#5b8def",
    "load": "#43a047",
    "drain": "#fb8c00",
    "after_gates": "#8e24aa",
}
PHASE_FALLBACK = "#9e9e9e"
SEVERITY_COLOURS = {
    "critical": "#c62828",
    "error": "#e53935",
    "warning": "#f9a825",
    "info": "#546e7a",
}
SERIES_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
"""One per line of a chart, in order (plotly's own default cycle)."""

BASELINE_COLOUR = "#1565c0"
"""The baseline windows of the window series (what the drift is measured from)."""
END_COLOUR = "#ad1457"
"""The end windows of the window series (what the drift is measured to)."""
BEFORE_COLOUR = "#a9bfe0"
RESTORED_COLOUR = "#6f8fc0"
WIN_COLOUR = "#2e7d32"
NO_WIN_COLOUR = "#e08a00"
P50_CANDIDATE_COLOUR = "#7e57c2"
PASSED_COLOUR = "#2e7d32"
FAILED_COLOUR = "#c62828"
FLAGGED_COLOUR = "#c9ced6"
"""Bars of runs that are not valid measurements (INVALID, ABORTED): grey and hatched."""

PAGE_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
       color: #1d232b; background: #f4f5f7; }
header { background: #1d232b; color: #fff; padding: 16px 28px; }
header h1 { font-size: 18px; margin: 0 0 4px; word-break: break-all; }
header .meta { color: #b8c0cc; font-size: 13px; }
nav { padding: 8px 28px; background: #fff; border-bottom: 1px solid #dde1e6; }
nav a { margin-right: 14px; color: #2458b3; text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1500px; }
section { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; margin: 16px 0;
          padding: 12px 18px; }
h2 { font-size: 16px; margin: 4px 0 10px; }
h3 { font-size: 14px; margin: 14px 0 6px; }
table { border-collapse: collapse; margin: 4px 0 8px; font-size: 13px; }
th, td { border: 1px solid #e3e6ea; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f2f5; font-weight: 600; }
td { max-width: 900px; overflow-wrap: anywhere; }
table.numbers td { font-variant-numeric: tabular-nums; }
.status { display: inline-block; padding: 2px 10px; border-radius: 4px; font-weight: 700; }
.PASSED { background: #2e7d32; color: #fff; } .FAILED { background: #c62828; color: #fff; }
.INVALID { background: #ef6c00; color: #fff; } .ABORTED { background: #6d4c41; color: #fff; }
.unknown { background: #607d8b; color: #fff; }
.chart { min-height: 360px; border-top: 1px solid #eef0f3; }
.nodata { color: #6b7480; padding: 10px 0; border-top: 1px solid #eef0f3; }
.none, .note { color: #6b7480; } .problem { color: #b71c1c; }
.legend { color: #4b5563; font-size: 13px; }
ul.findings li { margin: 3px 0; font-weight: 600; }
"""

BARS_CSS = """
.headline { font-size: 17px; padding: 10px 14px; border-radius: 6px; margin: 4px 0 10px; }
.headline.promote { background: #e8f5e9; border-left: 6px solid #2e7d32; }
.headline.retain { background: #fff3e0; border-left: 6px solid #ef6c00; }
.rule { color: #374151; }
td.win { color: #1b5e20; font-weight: 700; } td.nowin { color: #9a3412; font-weight: 700; }
td.nodata { color: #6b7480; }
.flagged { color: #4b5563; background: repeating-linear-gradient(
  45deg, #f3f4f6, #f3f4f6 6px, #e5e7eb 6px, #e5e7eb 12px); }
.flag { display: inline-block; padding: 0 6px; border-radius: 3px; background: #6b7480;
        color: #fff; font-weight: 700; font-size: 12px; }
ul.reasons li, ul.caveats li { margin: 3px 0; }
code.code { color: #6b7480; }
"""
