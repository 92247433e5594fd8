"""The ``soaktop decide --html`` page: bar charts of a decision, then its tables.

One bar group per cell: the original before, the candidate and the original restored side
by side, pooled median E2E (the decision statistic). The candidate bar is coloured by its
verdict (win / no win / inconclusive — grey and hatched, it never counts — from
:class:`~soak.after.decide_model.CellDecision`, never recomputed here), and each control
carries a dashed reference mark at
``control × (1 − min_gain)`` that reaches across the candidate bar: a win is a candidate
bar whose top is at or under *both* marks. The change against each control is written
above the group. A second chart shows the nearest-rank p50 of the same requests, labelled
as observed and not decided on. The restoration check (is the restored run the original?)
and what the candidate changed, the tables, reasons, caveats and engine facts follow.
"""

from __future__ import annotations

from typing import Any, Literal

from soak.after.decide_model import ROLE_TITLES, ROLES, CellDecision, Decision, fmt_gain
from soak.after.decide_render import engine_rows
from soak.after.report.bars import bar_layout, bundle, cell_table, page_stamp, plain_cells
from soak.after.report.charts import esc as label
from soak.after.report.page import document
from soak.after.report.palette import (
    BARS_CSS,
    BEFORE_COLOUR,
    FLAGGED_COLOUR,
    INK,
    MARK,
    MUTED,
    NO_DATA_BAR,
    NO_WIN_COLOUR,
    NO_WIN_TEXT,
    P50_CANDIDATE_COLOUR,
    RESTORED_COLOUR,
    WIN_COLOUR,
)
from soak.after.report.tables import esc, section

_MARK_DASH = {"before": "dash", "restored": "dot"}

# Bar geometry on the numeric x axis: cell i is centred on x = i.
_OFFSET = {"before": -0.27, "candidate": 0.0, "restored": 0.27}
_WIDTH = 0.25

Stat = Literal["e2e_median_s", "e2e_p50_nearest_s"]
Point = tuple[int, CellDecision, float]
"""(cell index, cell, value) of one bar."""


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
    points: list[Point],
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
    limit = f"{d.min_gain_pct:g}%"
    values = [
        v for c in d.cells for role in ROLES if (v := getattr(getattr(c, role), stat)) is not None
    ]
    top = 1.45 * max(values) if values else 1.0
    cand = _candidate_title(d)
    data: list[dict[str, Any]] = [
        _bar_trace(
            ROLE_TITLES["before"],
            "before",
            BEFORE_COLOUR,
            _points(d, stat, "before"),
            "before",
            "before",
        )
    ]
    if decided:
        data += _verdict_bars(d, stat, cand, limit)
    else:
        data.append(
            _bar_trace(
                cand,
                "candidate",
                P50_CANDIDATE_COLOUR,
                _points(d, stat, "candidate"),
                "candidate",
                "candidate",
            )
        )
    data.append(
        _bar_trace(
            ROLE_TITLES["restored"],
            "restored",
            RESTORED_COLOUR,
            _points(d, stat, "restored"),
            "restored",
            "restored",
        )
    )
    annotations: list[dict[str, Any]] = []
    if decided:
        data += [_reference_marks(d, role, limit) for role in ("before", "restored")]
        annotations = [_cell_note(i, c, limit, top) for i, c in enumerate(d.cells)]
    ticks = [
        label(c.label) + f"<br><span style='font-size:11px'>{c.verdict}</span>"
        if decided
        else label(c.label)
        for c in d.cells
    ]
    layout = bar_layout(*_figure_titles(decided, limit), ticks, top)
    layout["annotations"] = annotations
    layout["xaxis"]["title"] = {"text": "cell: actual input tokens / client concurrency"}
    return {"data": data, "layout": layout}


def _points(d: Decision, stat: Stat, role: str, want: str | None = None) -> list[Point]:
    """The bars of one arm: every cell with a value (only verdict ``want`` when given)."""
    out = []
    for i, c in enumerate(d.cells):
        v = getattr(getattr(c, role), stat)
        if v is None or (want is not None and c.verdict != want):
            continue
        out.append((i, c, v))
    return out


def _verdict_bars(d: Decision, stat: Stat, cand: str, limit: str) -> list[dict[str, Any]]:
    """The candidate's bars, one trace per verdict, coloured by it."""
    out = []
    for verdict, colour, words in (
        ("win", WIN_COLOUR, f"win: at least {limit} below both controls"),
        ("no win", NO_WIN_COLOUR, "no win"),
    ):
        pts = _points(d, stat, "candidate", verdict)
        if not pts:  # no empty legend entry: a retain page shows no "win" key
            continue
        trace = _bar_trace(
            f"{cand} — {words}", "candidate", colour, pts, "candidate", f"candidate {verdict}"
        )
        trace["marker"]["line"] = {
            "color": INK,
            "width": 1.5 if verdict == "win" else 0.5,
        }
        out.append(trace)
    # An inconclusive cell's bar, whatever its height, is not a win: grey and hatched.
    pts = _points(d, stat, "candidate", "inconclusive")
    if pts:
        trace = _bar_trace(
            f"{cand} — inconclusive (not counted)",
            "candidate",
            FLAGGED_COLOUR,
            pts,
            "candidate",
            "candidate inconclusive",
        )
        trace["marker"]["pattern"] = {"shape": "/", "fgcolor": MUTED, "size": 8, "solidity": 0.3}
        out.append(trace)
    # A candidate bar of a cell without a verdict (a control lacks data) is not a win.
    pts = _points(d, stat, "candidate", "no data")
    if pts:
        out.append(
            _bar_trace(
                f"{cand} — no verdict",
                "candidate",
                NO_DATA_BAR,
                pts,
                "candidate",
                "candidate no data",
            )
        )
    return out


def _reference_marks(d: Decision, role: str, limit: str) -> dict[str, Any]:
    """The dashed mark at ``control × (1 − min_gain)`` of one control, per cell, reaching
    from the control's bar across the candidate's."""
    keep = 1 - d.min_gain_pct / 100
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
    return {
        "type": "scatter",
        "mode": "lines",
        "name": label(f"{ROLE_TITLES[role]} × {keep:g} ({limit} lower: the bar to beat)"),
        "legendgroup": f"mark {role}",
        "meta": f"mark {role}",
        "x": xs,
        "y": ys,
        "text": hover,
        "hovertemplate": "%{text}<extra></extra>",
        "line": {"color": MARK, "width": 3, "dash": _MARK_DASH[role]},
    }


def _figure_titles(decided: bool, limit: str) -> tuple[str, str]:
    """(chart title, y-axis title) of the decided median chart or the p50 one."""
    if decided:
        return (
            "Pooled median E2E per cell, both controls — the decision statistic "
            f"(a win: the candidate at or under both dashed marks, {limit} below each control)",
            "median E2E, seconds (lower is better)",
        )
    return (
        "Nearest-rank p50 E2E per cell — an observed value of the same requests, "
        "a different aggregation; shown, not decided on",
        "nearest-rank p50 E2E, seconds",
    )


def _cell_note(i: int, c: CellDecision, limit: str, top: float) -> dict[str, Any]:
    """The verdict and the change against each control, above the cell's bar group."""
    highest = max(
        (v for role in ROLES if (v := getattr(c, role).e2e_median_s) is not None), default=0.0
    )
    if c.verdict == "no data":
        lines = ["<b>no data</b>", label("a control or the candidate"), label("has no timings")]
    else:
        colour = {"win": WIN_COLOUR, "inconclusive": MUTED}.get(c.verdict, NO_WIN_TEXT)
        lines = [
            f"<b><span style='color:{colour}'>{label(c.verdict)}</span></b>",
            label(f"vs before: {fmt_gain(c.gain_vs_before_pct)}"),
            label(f"vs restored: {fmt_gain(c.gain_vs_restored_pct)}"),
        ]
        lines += [label(_short_reason(c, code)) for code in c.inconclusive_reasons]
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


def _short_reason(c: CellDecision, code: str) -> str:
    """Why an inconclusive cell cannot decide, short enough to sit above its bars."""
    if code == "controls_disagree":
        return f"controls {c.controls_apart_pct:.2f}% apart"
    if code == "output_length_differs":
        b, cand, r = (getattr(c, role).output_tokens_mean or 0.0 for role in ROLES)
        return f"output {cand:,.0f} vs {b:,.0f} / {r:,.0f} tokens"
    return "too few samples"


def _restoration(d: Decision) -> str:
    """Is the restored run the original, what blocks promotion, what the candidate changed."""
    rest = d.restoration
    items = [f"<li><b>{esc(rest.summary)}</b></li>"]
    if d.promotion_blocked:
        items.append(f"<li>Promotion blocked: {esc(d.promotion_blocked)}</li>")
    changes = "; ".join(d.candidate_changes) or "no stated or declared recipe fact differs"
    items.append(f"<li>Candidate against the original: {esc(changes)}</li>")
    return f'<ul class="restoration">{"".join(items)}</ul>'


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
    return cell_table(
        ["Arm", "Run", "Status", "Model", "Timed requests completed", "Run directory"],
        plain_cells(rows),
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
        + cell_table(
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
        + cell_table(
            [_input_head(d), "Concurrency", *arms, "Requests (b/c/r)"],
            plain_cells(p50_rows),
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
        cell_table(["Fact", *(_arm_title(d, a.role) for a in d.arms)], plain_cells(rows), "numbers")
    )
    return "".join(out)


def build_decide_page(d: Decision, plotly_js: str | None = None) -> str:
    """The ``soaktop decide --html`` page of a decision."""
    promote = d.decision == "promote"
    word = "Promote the candidate" if promote else "Retain the original"
    head = (
        f'<div class="headline {"promote" if promote else "retain"}"><b>{esc(word)}</b> — '
        f"{esc(d.card)}</div>"
        f'<p class="rule">{esc(d.rule)}</p>'
    )
    charts = (
        '<p class="legend">Each cell: the original before, the candidate and the original '
        "restored, side by side. The dashed marks sit at each control × "
        f"{1 - d.min_gain_pct / 100:g}; the candidate's bar is green when it reaches under "
        "both (a win), orange when it does not, grey and hatched when the cell is "
        "inconclusive (never a win, whatever its height). Above each group: the verdict, the "
        "change against each control and why a cell is inconclusive.</p>"
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
    limits = "".join(
        f'<li>{esc(c.message)} <code class="code">[{esc(c.code)}]</code></li>'
        for c in d.run_caveats
    )
    body = [
        f"<style>{BARS_CSS}</style>",
        section("Decision", head + _runs_table(d), "decision"),
        section("Restoration and recipe", _restoration(d), "restoration"),
        section("Charts", charts, "charts"),
        section("Cells", _cells_tables(d), "cells"),
        section("Reasons", f'<ul class="reasons">{reasons}</ul>', "reasons"),
        section("Caveats", f'<ul class="caveats">{caveats}</ul>', "caveats"),
        *(
            [section("What the runs cannot show", f'<ul class="caveats">{limits}</ul>', "limits")]
            if limits
            else []
        ),
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
        meta=f"{dirs} · {page_stamp()}",
        nav=[
            ("decision", "Decision"),
            ("restoration", "Restoration"),
            ("charts", "Charts"),
            ("cells", "Cells"),
            ("reasons", "Reasons"),
            ("caveats", "Caveats"),
            ("engine", "Engine facts"),
        ],
        body="".join(body),
        figs=figs,
        plotly_js=bundle(plotly_js),
    )
