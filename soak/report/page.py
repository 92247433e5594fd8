"""The page around the charts and tables: one self-contained HTML document.

Nothing is fetched: plotly.js, the figures, the CSS and the script that draws them are all
inline, and a Content-Security-Policy (``default-src 'none'``) makes the browser refuse
any request the page might still try — the report opens the same on an air-gapped host
as on a laptop. Figure JSON sits in a ``<script type="application/json">`` block with
``<``, ``>`` and ``&`` written as ``\\u003c``-style escapes, so no value can close it.
"""

from __future__ import annotations

import json
from typing import Any

from soak.report.tables import esc

CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:"
)
"""Inline scripts and styles only; data/blob images for plotly's PNG download button."""

CSS = """
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
"""

SCRIPT = """
(function () {
  var body = document.body;
  if (typeof Plotly === "undefined") {
    body.setAttribute("data-charts-error", "plotly.js did not load");
    return;
  }
  var figs = JSON.parse(document.getElementById("soak-figures").textContent);
  var ids = Object.keys(figs);
  var config = {displaylogo: false, responsive: true};
  var syncing = false;
  function sync(id, ev) {
    // Zooming one chart zooms them all: the time axis is the same clock everywhere.
    if (syncing) return;
    var upd;
    if (ev["xaxis.range[0]"] !== undefined) {
      upd = {"xaxis.range": [ev["xaxis.range[0]"], ev["xaxis.range[1]"]]};
    } else if (ev["xaxis.autorange"]) {
      upd = {"xaxis.autorange": true};
    } else {
      return;
    }
    syncing = true;
    var others = ids.filter(function (o) { return o !== id; });
    Promise.all(others.map(function (o) { return Plotly.relayout(o, upd); }))
      .then(function () { syncing = false; }, function () { syncing = false; });
  }
  Promise.all(ids.map(function (id) {
    var f = figs[id];
    return Plotly.newPlot(id, f.data, f.layout, config).then(function (gd) {
      gd.on("plotly_relayout", function (ev) { sync(id, ev); });
      return gd;
    });
  })).then(function () {
    body.setAttribute("data-charts-rendered", String(ids.length));
  }, function (err) {
    body.setAttribute("data-charts-error", String(err));
  });
})();
"""


def script_json(obj: Any) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``</script>``, no ``<!--``)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for ch, rep in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(ch, rep)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def document(
    *,
    title: str,
    status: str,
    meta: str,
    nav: list[tuple[str, str]],
    body: str,
    figs: Any,
    plotly_js: str,
) -> str:
    """The whole page. ``body`` is already-escaped HTML; ``title``, ``status``, ``meta`` and
    ``nav`` labels are escaped here."""
    cls = status if status in ("PASSED", "FAILED", "INVALID", "ABORTED") else "unknown"
    links = "".join(f'<a href="#{esc(a)}">{esc(label)}</a>' for a, label in nav)
    if "</script" in plotly_js.lower():  # never expected: it would end the element early
        raise ValueError("the plotly.js bundle contains '</script'")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} — soaktop report</title><style>{CSS}</style></head>"
        f'<body><header><h1><span class="status {cls}">{esc(status)}</span> {esc(title)}</h1>'
        f'<div class="meta">{esc(meta)}</div></header><nav>{links}</nav><main>{body}</main>'
        f'<script type="application/json" id="soak-figures">{script_json(figs)}</script>'
        f"<script>{plotly_js}</script><script>{SCRIPT}</script></body></html>\n"
    )
