"""The ``soaktop compare --html`` page: the seed-000 table and one bar chart per figure.

The seed-000 table — each column headed by the run's name and the recipe facts it
differs in, every other difference and each run's caveats listed under it — each run's
drift and leak table when a record has a timeline (schema 1.2), then one bar chart each
for completed requests, output tokens/s, P99 TTFT and P99 E2E, one bar per run.
Bars of runs that did not measure what they meant to (INVALID, ABORTED) are grey,
hatched and labelled with the status, in their own legend entry: they never look like
a valid run's bar.
"""

from __future__ import annotations

from typing import Any

from soak.after.compare import Comparison, comparison_notes, under_table
from soak.after.endurance_table import has_timeline
from soak.after.report.bars import bar_layout, bundle, cell_table, page_stamp
from soak.after.report.charts import esc as label
from soak.after.report.endurance import endurance_tables
from soak.after.report.page import document
from soak.after.report.palette import (
    BARS_CSS,
    FAILED_COLOUR,
    FLAGGED_COLOUR,
    INK,
    MUTED,
    PASSED_COLOUR,
)
from soak.after.report.tables import esc, section

COMPARE_CHARTS: tuple[tuple[str, str, str, str], ...] = (
    ("completed", "Completed requests", "requests", "{:,}"),
    ("output_tokens_per_s", "Aggregate output tokens/s (drain included)", "tokens/s", "{:,.3f}"),
    ("p99_ttft_s", "P99 first-token latency (TTFT)", "seconds", "{:.3f} s"),
    ("p99_e2e_s", "P99 whole-request latency (E2E)", "seconds", "{:.3f} s"),
)
"""(figure key, title, y-axis title, value format): one bar chart each."""

_STATUS_BARS = {
    "PASSED": ("PASSED run", PASSED_COLOUR),
    "FAILED": ("FAILED run (measured; it failed a check)", FAILED_COLOUR),
}


def _run_tick(run_id: str, status: str, valid: bool) -> str:
    parts = [label(p) for p in run_id.split("__") if p] or [label(run_id)]
    word = label(status) if valid else f"{label(status)} — not valid"
    return "<br>".join(parts) + f"<br><b>{word}</b>"


def compare_figure(cmp: Comparison, key: str, title: str, unit: str, fmt: str) -> dict[str, Any]:
    """One figure's bars, one per run; runs that are not valid measurements get their own
    grey, hatched trace with the status written on each bar."""
    groups: dict[str, list[tuple[int, float, dict[str, Any]]]] = {}
    missing: list[int] = []
    for i, run in enumerate(cmp.data):
        v = (run.get("figures") or {}).get(key)
        if not isinstance(v, int | float) or isinstance(v, bool):
            missing.append(i)
            continue
        # valid means PASSED or FAILED (soak.after.compare.RunView.valid); anything else is flagged
        grp = run["status"] if run["valid"] and run["status"] in _STATUS_BARS else "flagged"
        groups.setdefault(grp, []).append((i, float(v), run))
    values = [v for pts in groups.values() for _, v, _ in pts]
    top = 1.25 * max(values) if values and max(values) > 0 else 1.0
    data = []
    for grp in ("PASSED", "FAILED", "flagged"):
        pts = groups.get(grp)
        if not pts:
            continue
        flagged = grp == "flagged"
        if flagged:
            name = "INVALID / ABORTED — not a valid measurement"
            colour = FLAGGED_COLOUR
        else:
            name, colour = _STATUS_BARS[grp]
        text = []
        for _, v, run in pts:
            shown = fmt.format(int(v) if fmt == "{:,}" else v)
            status = label(run["status_label"])
            text.append(f"{label(shown)}<br><b>{status}</b>" if flagged else label(shown))
        marker: dict[str, Any] = {"color": colour, "line": {"color": INK, "width": 0.5}}
        if flagged:
            marker["pattern"] = {"shape": "/", "fgcolor": MUTED, "size": 8, "solidity": 0.3}
            marker["line"] = {"color": MUTED, "width": 1.5}
        data.append(
            {
                "type": "bar",
                "name": label(name),
                "meta": grp,
                "x": [i for i, _, _ in pts],
                "y": [v for _, v, _ in pts],
                "width": 0.55,
                "text": text,
                "textposition": "outside",
                "cliponaxis": False,
                "textfont": {"size": 12, "color": MUTED if flagged else INK},
                "customdata": [
                    [label(r["run_id"]), label(r["status_label"]), label(r["verdict"])]
                    for _, _, r in pts
                ],
                "hovertemplate": "%{customdata[0]}<br>%{customdata[1]}: %{customdata[2]}<br>"
                + label(title)
                + ": %{text}<extra></extra>",
                "marker": marker,
                "opacity": 0.75 if flagged else 1.0,
            }
        )
    ticks = [_run_tick(r["run_id"], r["status_label"], r["valid"]) for r in cmp.data]
    layout = bar_layout(title, unit, ticks, top)
    layout["annotations"] = [
        {
            "x": i,
            "y": 0,
            "xref": "x",
            "yref": "y",
            "yanchor": "bottom",
            "showarrow": False,
            "font": {"size": 11, "color": MUTED},
            "text": label(f"no figure ({cmp.data[i]['status']})"),
        }
        for i in missing
    ]
    return {"data": data, "layout": layout}


def _compare_table(cmp: Comparison) -> str:
    flags = [not v.valid for v in cmp.runs]
    head = "<th>Measurement</th>" + "".join(
        f'<th class="flagged">{esc(h)}<br><span class="flag">{esc(v.label)}</span></th>'
        if bad
        else f'<th>{esc(h)}<br><span class="status {esc(v.status)}">{esc(v.label)}</span></th>'
        for v, h, bad in zip(cmp.runs, cmp.headers.headers, flags, strict=True)
    )
    body = "".join(
        f"<tr><th>{esc(row[0])}</th>"
        + "".join(
            f'<td class="flagged">{esc(c)}</td>' if bad else f"<td>{esc(c)}</td>"
            for c, bad in zip(row[1:], flags, strict=True)
        )
        + "</tr>"
        for row in cmp.rows
    )
    return (
        f'<table class="numbers seed"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


def _under_table(cmp: Comparison) -> str:
    """Every difference the headers do not name (or "same recipe"), then the caveats."""
    return "".join(
        f'<h3>{esc(heading)}</h3><ul class="differences">'
        + "".join(f"<li>{esc(i)}</li>" for i in items)
        + "</ul>"
        for heading, items in under_table(cmp)
    )


def _endurance(cmp: Comparison) -> str:
    """Each run's drift and leak table, under its run id (flagged runs say so)."""
    parts = []
    for v in cmp.runs:
        flag = "" if v.valid else f' <span class="flag">{esc(v.label)}</span>'
        parts.append(f"<h3>{esc(v.run_id)}{flag}</h3>" + endurance_tables(v.record, v.fields))
    return "".join(parts)


def build_compare_page(cmp: Comparison, plotly_js: str | None = None) -> str:
    """The ``soaktop compare --html`` page of a comparison."""
    verdicts = cell_table(
        ["Run", "Status", "Whole-run verdict", "Directory"],
        [
            [
                (r["run_id"], ""),
                (r["status_label"], "" if r["valid"] else "flagged"),
                (r["verdict"], "" if r["valid"] else "flagged"),
                (r["path"], ""),
            ]
            for r in cmp.data
        ],
    )
    hint = " (greyed and hatched in the charts)"
    notes = "".join(f"<li>{esc(n)}</li>" for n in comparison_notes(cmp, hint))
    table = (
        _compare_table(cmp)
        + _under_table(cmp)
        + (f'<ul class="caveats">{notes}</ul>' if notes else "")
    )
    charts = (
        '<p class="legend">One bar per run, in the order given. Grey, hatched bars marked '
        "INVALID or ABORTED come from runs that did not measure what they meant to: they "
        "are shown, never comparable with the others.</p>"
        + "".join(f'<div class="chart" id="chart-{k}"></div>' for k, *_ in COMPARE_CHARTS)
    )
    body = [
        f"<style>{BARS_CSS}</style>",
        section("Verdicts", verdicts, "verdicts"),
        section("Side by side", table, "table"),
    ]
    nav = [("verdicts", "Verdicts"), ("table", "Side by side"), ("charts", "Charts")]
    if any(has_timeline(v.record, v.fields) for v in cmp.runs):
        body.append(section("Drift and leaks", _endurance(cmp), "endurance"))
        nav.insert(2, ("endurance", "Drift and leaks"))
    body.append(section("Charts", charts, "charts"))
    figs = {f"chart-{k}": compare_figure(cmp, k, t, u, f) for k, t, u, f in COMPARE_CHARTS}
    statuses = {v.status for v in cmp.runs}
    return document(
        title=f"compare: {len(cmp.runs)} runs",
        status=statuses.pop() if len(statuses) == 1 else "compare",
        meta=" · ".join(str(v.path) for v in cmp.runs) + f" · {page_stamp()}",
        nav=nav,
        body="".join(body),
        figs=figs,
        plotly_js=bundle(plotly_js),
    )
