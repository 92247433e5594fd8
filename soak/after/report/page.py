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

from soak.after.report.palette import PAGE_CSS
from soak.after.report.tables import esc

CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data: blob:; font-src data:"
)
"""Inline scripts and styles only; data/blob images for plotly's PNG download button."""


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
        f"<title>{esc(title)} — soaktop report</title><style>{PAGE_CSS}</style></head>"
        f'<body><header><h1><span class="status {cls}">{esc(status)}</span> {esc(title)}</h1>'
        f'<div class="meta">{esc(meta)}</div></header><nav>{links}</nav><main>{body}</main>'
        f'<script type="application/json" id="soak-figures">{script_json(figs)}</script>'
        f"<script>{plotly_js}</script><script>{SCRIPT}</script></body></html>\n"
    )
