"""HTML pages with bar charts: ``soaktop decide --html`` and ``soaktop compare --html``.

Both pages use the shell of ``soaktop report`` (:func:`soak.after.report.page.document`: inline
plotly.js from the ``plotly`` package, script-safe figure JSON, a Content-Security-Policy
that refuses every network request) and its escaping (:func:`soak.after.report.tables.esc` for
the HTML, :func:`soak.after.report.charts.esc` for plotly labels, which plotly renders as a
subset of HTML).

**decide.** One bar group per cell: the original before, the candidate and the original
restored side by side, pooled median E2E (the decision statistic). The candidate bar is
coloured by its verdict (win / no win, from :class:`~soak.after.decide.CellDecision`, never
recomputed here), and each control carries a dashed reference mark at
``control × (1 − min_gain)`` that reaches across the candidate bar: a win is a candidate
bar whose top is at or under *both* marks. The change against each control is written
above the group. A second chart shows the nearest-rank p50 of the same requests, labelled
as observed and not decided on. The tables, reasons, caveats and engine facts follow.

**compare.** The seed-000 table, then one bar chart each for completed requests, output
tokens/s, P99 TTFT and P99 E2E, one bar per run. Bars of runs that did not measure what
they meant to (INVALID, ABORTED) are grey, hatched and labelled with the status, in their
own legend entry: they never look like a valid run's bar.

The x axes are numeric (cell or run index, labelled with tick text) so the reference
marks can be drawn exactly across the candidate bar.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from soak import __version__
from soak.after.compare import Comparison, comparison_notes
from soak.after.decide import ROLE_TITLES, ROLES, CellDecision, Decision, fmt_gain
from soak.after.decide_render import engine_rows
from soak.after.report.charts import esc as label
from soak.after.report.page import document
from soak.after.report.palette import (
    BARS_CSS,
    BEFORE_COLOUR,
    FAILED_COLOUR,
    FLAGGED_COLOUR,
    INK,
    MARK,
    MUTED,
    NO_DATA_BAR,
    NO_WIN_COLOUR,
    NO_WIN_TEXT,
    P50_CANDIDATE_COLOUR,
    PAPER,
    PASSED_COLOUR,
    RESTORED_COLOUR,
    WIN_COLOUR,
)
from soak.after.report.tables import esc, section

# ---------------------------------------------------------------- shared


_MARK_DASH = {"before": "dash", "restored": "dot"}

# Bar geometry on the numeric x axis: cell i is centred on x = i.
_OFFSET = {"before": -0.27, "candidate": 0.0, "restored": 0.27}
_WIDTH = 0.25


def _cell_table(header: list[str], rows: list[list[tuple[str, str]]], cls: str = "") -> str:
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


def _plain(rows: list[list[str]]) -> list[list[tuple[str, str]]]:
    return [[(t, "") for t in r] for r in rows]


def _stamp() -> str:
    return f"page by soaktop {__version__} at {datetime.now(UTC).isoformat(timespec='seconds')}"


def _bundle(plotly_js: str | None) -> str:
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


def _layout(title: str, y_title: str, ticks: list[str], top: float) -> dict[str, Any]:
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


# ---------------------------------------------------------------- decide


Stat = Literal["e2e_median_s", "e2e_p50_nearest_s"]


def _sec(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _candidate_title(d: Decision) -> str:
    lab = d.arm("candidate").label
    return f"Candidate ({lab})" if lab else "Candidate"


def _arm_title(d: Decision, role: str) -> str:
    return _candidate_title(d) if role == "candidate" else ROLE_TITLES[role]


def _bar_trace(
    name: str,
    group: str,
    colour: str,
    points: list[tuple[int, CellDecision, float]],
    role: str,
    meta: str,
    showlegend: bool = True,
) -> dict[str, Any]:
    return {
        "type": "bar",
        "name": label(name),
        "legendgroup": group,
        "meta": meta,
        "showlegend": showlegend,
        "x": [i + _OFFSET[role] for i, _, _ in points],
        "y": [round(v, 6) for _, _, v in points],
        "width": _WIDTH,
        "text": [f"{v:.3f}" for _, _, v in points],
        "textposition": "inside",
        "insidetextanchor": "middle",
        "textfont": {"size": 11},
        "customdata": [[label(c.label), label(name)] for _, c, _ in points],
        "hovertemplate": "%{customdata[0]}<br>%{customdata[1]}: %{y:.3f} s<extra></extra>",
        "marker": {"color": colour, "line": {"color": INK, "width": 0.5}},
    }


def decide_figure(d: Decision, stat: Stat) -> dict[str, Any]:
    """The grouped bar chart of one statistic per cell (``e2e_median_s``: with the verdict
    colours, the reference marks and the change labels; ``e2e_p50_nearest_s``: the values
    only, labelled as not decided on)."""
    decided = stat == "e2e_median_s"
    keep = 1 - d.min_gain_pct / 100
    limit = f"{d.min_gain_pct:g}%"
    data: list[dict[str, Any]] = []
    values = [
        v for c in d.cells for role in ROLES if (v := getattr(getattr(c, role), stat)) is not None
    ]
    top = 1.45 * max(values) if values else 1.0

    def points(role: str, want: str | None = None) -> list[tuple[int, CellDecision, float]]:
        out = []
        for i, c in enumerate(d.cells):
            v = getattr(getattr(c, role), stat)
            if v is None or (want is not None and c.verdict != want):
                continue
            out.append((i, c, v))
        return out

    data.append(
        _bar_trace(
            ROLE_TITLES["before"], "before", BEFORE_COLOUR, points("before"), "before", "before"
        )
    )
    cand = _candidate_title(d)
    if decided:
        for verdict, colour, words in (
            ("win", WIN_COLOUR, f"win: at least {limit} below both controls"),
            ("no win", NO_WIN_COLOUR, "no win"),
        ):
            pts = points("candidate", verdict)
            if not pts:  # no empty legend entry: a retain page shows no "win" key
                continue
            trace = _bar_trace(
                f"{cand} — {words}", "candidate", colour, pts, "candidate", f"candidate {verdict}"
            )
            trace["marker"]["line"] = {
                "color": INK,
                "width": 1.5 if verdict == "win" else 0.5,
            }
            data.append(trace)
        # A candidate bar of a cell without a verdict (a control lacks data) is not a win.
        pts = points("candidate", "no data")
        if pts:
            data.append(
                _bar_trace(
                    f"{cand} — no verdict",
                    "candidate",
                    NO_DATA_BAR,
                    pts,
                    "candidate",
                    "candidate no data",
                )
            )
    else:
        data.append(
            _bar_trace(
                cand,
                "candidate",
                P50_CANDIDATE_COLOUR,
                points("candidate"),
                "candidate",
                "candidate",
            )
        )
    data.append(
        _bar_trace(
            ROLE_TITLES["restored"],
            "restored",
            RESTORED_COLOUR,
            points("restored"),
            "restored",
            "restored",
        )
    )

    annotations: list[dict[str, Any]] = []
    if decided:
        for role in ("before", "restored"):
            xs: list[float | None] = []
            ys: list[float | None] = []
            hover: list[str | None] = []
            for i, c in enumerate(d.cells):
                v = getattr(c, role).e2e_median_s
                if v is None:
                    continue
                lo, hi = (
                    (i + _OFFSET["before"] - _WIDTH / 2, i + _WIDTH / 2)
                    if role == "before"
                    else (i - _WIDTH / 2, i + _OFFSET["restored"] + _WIDTH / 2)
                )
                mark = round(v * keep, 6)
                xs += [lo, hi, None]
                ys += [mark, mark, None]
                text = f"{label(c.label)}: {limit} below {role} = {mark:.3f} s"
                hover += [text, text, None]
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": label(
                        f"{ROLE_TITLES[role]} × {keep:g} ({limit} lower: the bar to beat)"
                    ),
                    "legendgroup": f"mark {role}",
                    "meta": f"mark {role}",
                    "x": xs,
                    "y": ys,
                    "text": hover,
                    "hovertemplate": "%{text}<extra></extra>",
                    "line": {"color": MARK, "width": 3, "dash": _MARK_DASH[role]},
                }
            )
        for i, c in enumerate(d.cells):
            annotations.append(_cell_note(i, c, limit, top))
    ticks = [
        label(c.label) + f"<br><span style='font-size:11px'>{c.verdict}</span>"
        if decided
        else label(c.label)
        for c in d.cells
    ]
    if decided:
        title = (
            "Pooled median E2E per cell, both controls — the decision statistic "
            f"(a win: the candidate at or under both dashed marks, {limit} below each control)"
        )
        y_title = "median E2E, seconds (lower is better)"
    else:
        title = (
            "Nearest-rank p50 E2E per cell — an observed value of the same requests, "
            "a different aggregation; shown, not decided on"
        )
        y_title = "nearest-rank p50 E2E, seconds"
    layout = _layout(title, y_title, ticks, top)
    layout["annotations"] = annotations
    layout["xaxis"]["title"] = {"text": "cell: actual input tokens / client concurrency"}
    return {"data": data, "layout": layout}


def _cell_note(i: int, c: CellDecision, limit: str, top: float) -> dict[str, Any]:
    """The verdict and the change against each control, above the cell's bar group."""
    highest = max(
        (v for role in ROLES if (v := getattr(c, role).e2e_median_s) is not None), default=0.0
    )
    if c.verdict == "no data":
        lines = ["<b>no data</b>", label("a control or the candidate"), label("has no timings")]
    else:
        colour = WIN_COLOUR if c.win else NO_WIN_TEXT
        lines = [
            f"<b><span style='color:{colour}'>{label(c.verdict)}</span></b>",
            label(f"vs before: {fmt_gain(c.gain_vs_before_pct)}"),
            label(f"vs restored: {fmt_gain(c.gain_vs_restored_pct)}"),
        ]
        if not c.reliable and c.controls_apart_pct is not None:
            lines.append(label(f"controls {c.controls_apart_pct:.2f}% apart (caveat)"))
    return {
        "x": i,
        "y": min(highest * 1.02, top),
        "xref": "x",
        "yref": "y",
        "yanchor": "bottom",
        "showarrow": False,
        "align": "center",
        "font": {"size": 11},
        "text": "<br>".join(lines),
    }


def _runs_table(d: Decision) -> str:
    rows = [
        [
            _arm_title(d, a.role),
            a.run_id,
            a.status,
            a.model or "—",
            f"{a.completed}/{a.completed + a.failed}",
            a.run_dir or "—",
        ]
        for a in d.arms
    ]
    return _cell_table(
        ["Arm", "Run", "Status", "Model", "Timed requests completed", "Run directory"],
        _plain(rows),
    )


def _verdict_class(c: CellDecision) -> str:
    return {"win": "win", "no win": "nowin"}.get(c.verdict, "nodata")


def _input_head(d: Decision) -> str:
    return "Input" if any(" target/C" in c.label for c in d.cells) else "Actual input"


def _cells_tables(d: Decision) -> str:
    arms = [ROLE_TITLES["before"], _candidate_title(d), ROLE_TITLES["restored"]]
    median_rows = [
        [
            (c.label.split("/C")[0], ""),
            (str(c.concurrency), ""),
            *((_sec(getattr(c, r).e2e_median_s), "") for r in ROLES),
            (fmt_gain(c.gain_vs_before_pct), ""),
            (fmt_gain(c.gain_vs_restored_pct), ""),
            ("n/a" if c.controls_apart_pct is None else f"{c.controls_apart_pct:.2f}%", ""),
            (c.verdict, _verdict_class(c)),
        ]
        for c in d.cells
    ]
    p50_rows = [
        [
            c.label.split("/C")[0],
            str(c.concurrency),
            *(_sec(getattr(c, r).e2e_p50_nearest_s) for r in ROLES),
            "/".join(str(getattr(c, r).requests) for r in ROLES),
        ]
        for c in d.cells
    ]
    return (
        "<h3>Median end-to-end seconds (the decision statistic)</h3>"
        "<p>Ordinary median of every repetition's timed requests, pooled per cell; lower is "
        "better. The change is (control − candidate) / control: faster = the candidate is "
        "quicker.</p>"
        + _cell_table(
            [
                _input_head(d),
                "Concurrency",
                *arms,
                "vs before",
                "vs restored",
                "Controls apart",
                "Verdict",
            ],
            median_rows,
            "numbers",
        )
        + "<h3>Nearest-rank p50 seconds (shown, not decided on)</h3>"
        "<p>An observed value of the same pooled requests — a different aggregation from the "
        "median above.</p>"
        + _cell_table(
            [_input_head(d), "Concurrency", *arms, "Requests (b/c/r)"],
            _plain(p50_rows),
            "numbers",
        )
    )


def _engine(d: Decision) -> str:
    out = ['<p class="note">Engine-reported; beside the decision, not part of it.</p>']
    changes = [
        ("Token slots, before → candidate", d.engine.token_slots_vs_before),
        ("Token slots, restored → candidate", d.engine.token_slots_vs_restored),
    ]
    items = "".join(f"<li>{esc(k)}: <b>{esc(v)}</b></li>" for k, v in changes if v)
    if items:
        out.append(f"<ul>{items}</ul>")
    rows = engine_rows(d)
    out.append(
        _cell_table(["Fact", *(_arm_title(d, a.role) for a in d.arms)], _plain(rows), "numbers")
    )
    return "".join(out)


def build_decide_page(d: Decision, plotly_js: str | None = None) -> str:
    """The ``soaktop decide --html`` page of a decision."""
    promote = d.decision == "promote"
    word = "Promote the candidate" if promote else "Retain the original"
    head = (
        f'<div class="headline {"promote" if promote else "retain"}"><b>{esc(word)}</b> — '
        f"{d.wins}/{d.cells_total} cells are material wins ({d.min_wins} needed)</div>"
        f'<p class="rule">{esc(d.rule)}</p>'
    )
    charts = (
        '<p class="legend">Each cell: the original before, the candidate and the original '
        "restored, side by side. The dashed marks sit at each control × "
        f"{1 - d.min_gain_pct / 100:g}; the candidate's bar is green when it reaches under "
        "both (a win), orange when it does not. Above each group: the verdict and the change "
        "against each control.</p>"
        '<div class="chart" id="chart-median"></div>'
        '<div class="chart" id="chart-p50"></div>'
    )
    reasons = "".join(f"<li>{esc(r)}</li>" for r in d.reasons)
    caveats = (
        "".join(
            f'<li>{esc(c.message)} <code class="code">[{esc(c.code)}]</code></li>'
            for c in d.caveats
        )
        or "<li>none detected</li>"
    )
    body = [
        f"<style>{BARS_CSS}</style>",
        section("Decision", head + _runs_table(d), "decision"),
        section("Charts", charts, "charts"),
        section("Cells", _cells_tables(d), "cells"),
        section("Reasons", f'<ul class="reasons">{reasons}</ul>', "reasons"),
        section("Caveats", f'<ul class="caveats">{caveats}</ul>', "caveats"),
        section("Engine facts", _engine(d), "engine"),
    ]
    figs = {
        "chart-median": decide_figure(d, "e2e_median_s"),
        "chart-p50": decide_figure(d, "e2e_p50_nearest_s"),
    }
    dirs = " · ".join(f"{a.role}: {a.run_dir or a.run_id}" for a in d.arms)
    return document(
        title=f"decide: {d.candidate_run_id}",
        status=d.decision,
        meta=f"{dirs} · {_stamp()}",
        nav=[
            ("decision", "Decision"),
            ("charts", "Charts"),
            ("cells", "Cells"),
            ("reasons", "Reasons"),
            ("caveats", "Caveats"),
            ("engine", "Engine facts"),
        ],
        body="".join(body),
        figs=figs,
        plotly_js=_bundle(plotly_js),
    )


# ---------------------------------------------------------------- compare

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
            text.append(
                f"{label(shown)}<br><b>{label(run['status'])}</b>" if flagged else label(shown)
            )
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
                    [label(r["run_id"]), label(r["status"]), label(r["verdict"])] for _, _, r in pts
                ],
                "hovertemplate": "%{customdata[0]}<br>%{customdata[1]}: %{customdata[2]}<br>"
                + label(title)
                + ": %{text}<extra></extra>",
                "marker": marker,
                "opacity": 0.75 if flagged else 1.0,
            }
        )
    ticks = [_run_tick(r["run_id"], r["status"], r["valid"]) for r in cmp.data]
    layout = _layout(title, unit, ticks, top)
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
        f'<th class="flagged">{esc(v.run_id)}<br><span class="flag">{esc(v.status)}</span></th>'
        if bad
        else f'<th>{esc(v.run_id)}<br><span class="status {esc(v.status)}">'
        f"{esc(v.status)}</span></th>"
        for v, bad in zip(cmp.runs, flags, strict=True)
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


def build_compare_page(cmp: Comparison, plotly_js: str | None = None) -> str:
    """The ``soaktop compare --html`` page of a comparison."""
    verdicts = _cell_table(
        ["Run", "Status", "Whole-run verdict", "Directory"],
        [
            [
                (r["run_id"], ""),
                (r["status"], "" if r["valid"] else "flagged"),
                (r["verdict"], "" if r["valid"] else "flagged"),
                (r["path"], ""),
            ]
            for r in cmp.data
        ],
    )
    hint = " (greyed and hatched in the charts)"
    notes = "".join(f"<li>{esc(n)}</li>" for n in comparison_notes(cmp, hint))
    table = _compare_table(cmp) + (f'<ul class="caveats">{notes}</ul>' if notes else "")
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
        section("Charts", charts, "charts"),
    ]
    figs = {f"chart-{k}": compare_figure(cmp, k, t, u, f) for k, t, u, f in COMPARE_CHARTS}
    statuses = {v.status for v in cmp.runs}
    return document(
        title=f"compare: {len(cmp.runs)} runs",
        status=statuses.pop() if len(statuses) == 1 else "compare",
        meta=" · ".join(str(v.path) for v in cmp.runs) + f" · {_stamp()}",
        nav=[("verdicts", "Verdicts"), ("table", "Side by side"), ("charts", "Charts")],
        body="".join(body),
        figs=figs,
        plotly_js=_bundle(plotly_js),
    )
