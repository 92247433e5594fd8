"""What the bar-chart pages share: ``soaktop decide --html`` (:mod:`.decide_page`) and
``soaktop compare --html`` (:mod:`.compare_page`).

Both pages use the shell of ``soaktop report`` (:func:`soak.after.report.page.document`: inline
plotly.js from the ``plotly`` package, script-safe figure JSON, a Content-Security-Policy
that refuses every network request) and its escaping (:func:`soak.after.report.tables.esc` for
the HTML, :func:`soak.after.report.charts.esc` for plotly labels, which plotly renders as a
subset of HTML).

The x axes are numeric (cell or run index, labelled with tick text) so the decide page's
reference marks can be drawn exactly across the candidate bar.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from soak import __version__
from soak.after.report.charts import esc as label
from soak.after.report.palette import PAPER
from soak.after.report.tables import esc


def cell_table(header: list[str], rows: list[list[tuple[str, str]]], cls: str = "") -> str:
    """A table whose cells are ``(text, class)``; every text is escaped."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{esc(c)}">{esc(t)}</td>' if c else f"<td>{esc(t)}</td>" for t, c in r
        )
        + "</tr>"
        for r in rows
    )
    if not body:
        return '<p class="none">none</p>'
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def plain_cells(rows: list[list[str]]) -> list[list[tuple[str, str]]]:
    """Rows of text as :func:`cell_table` cells without a class."""
    return [[(t, "") for t in r] for r in rows]


def page_stamp() -> str:
    """``page by soaktop X at <UTC time>``: what made the page, and when."""
    return f"page by soaktop {__version__} at {datetime.now(UTC).isoformat(timespec='seconds')}"


def bundle(plotly_js: str | None) -> str:
    """``plotly_js`` when given (tests pass a stub), else the plotly package's bundle."""
    if plotly_js is not None:
        return plotly_js
    from soak.after.report import plotly_bundle  # the package imports this module's siblings

    return plotly_bundle()


def write_page(path: Path, html: str) -> Path:
    """Write a page atomically (parents created) and return where it went."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)
    return path


def bar_layout(title: str, y_title: str, ticks: list[str], top: float) -> dict[str, Any]:
    """The plotly layout of a bar chart over a numeric x axis labelled with ``ticks``."""
    n = len(ticks)
    return {
        "title": {
            "text": label(title),
            "x": 0.01,
            "y": 0.98,
            "yanchor": "top",
            "font": {"size": 15},
        },
        "height": 500,
        "margin": {"l": 70, "r": 30, "t": 110, "b": 40},
        "xaxis": {
            "tickmode": "array",
            "tickvals": list(range(n)),
            "ticktext": ticks,
            "range": [-0.6, n - 0.4],
            "zeroline": False,
            "showgrid": False,
            "automargin": True,
        },
        "yaxis": {
            "title": {"text": label(y_title)},
            "range": [0, top if top > 0 else 1],
            "zeroline": True,
        },
        "barmode": "overlay",
        "bargap": 0,
        # Above the plot: tick labels of any height below it never run into the legend.
        "legend": {"orientation": "h", "x": 0, "y": 1.01, "yanchor": "bottom"},
        "hovermode": "closest",
        "annotations": [],
        "paper_bgcolor": PAPER,
        "plot_bgcolor": PAPER,
    }
