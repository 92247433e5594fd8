"""The soak's drift and leak judgement where the operator looks, for every pane.

What is shown is what the runner wrote: the snapshot's ``endurance``
(:class:`~soak.record.endurance.EnduranceView`: each figure's change since the baseline
and its state, each resource's leak rate, the badge) and the window series
(``windows.jsonl``, :mod:`tui.windows`). Nothing here computes a statistic: the charts
only fit the windows to the pane's width.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content

from soak.record.endurance import FIGURES, LEAKS, EnduranceView, LeakNow
from tui.fmt import BADGE_STYLES, ENDURANCE_STYLES, change, clip, mmss, pct, rate, secs, signed
from tui.glyphs import Glyphs
from tui.panes.base import Part, fit, line, muted
from tui.runview import RunView
from tui.windows import Charted, TrendPoint, columns

CHANGE_CELLS = 6
"""A change column: a space and up to 5 characters (``▲420%``)."""


def change_part(view: RunView, figure: str) -> tuple[str, str] | None:
    """``▼31%`` for ``figure`` styled by its state; None when the runner judges no such
    figure (an older run, or before the load)."""
    now = view.figure(figure)
    if now is None:
        return None
    return (change(now.change, view.glyphs), ENDURANCE_STYLES[now.state])


def trend_rows(view: RunView, field: Charted, figure: str, width: int, rows: int) -> list[str]:
    """The whole run's windows of ``field`` as a chart ``rows`` high, the baseline of
    ``figure`` drawn as a level line when the chart has room for one."""
    now = view.figure(figure)
    level = now.baseline if now is not None else None
    return view.glyphs.chart(columns(view.windows, field, width), width, rows, level=level)


def span_words(points: Sequence[TrendPoint], width: int) -> str:
    """``whole run 1:50:00, 110 windows`` (what a trend chart spans), shorter when narrow."""
    first, last = points[0], points[-1]
    n = last.last - first.first + 1
    span = mmss(last.end_s - first.start_s)
    words = f"whole run {span}, {n} window{'s' if n != 1 else ''}"
    return words if len(words) <= width else f"run {span}, {n} win"


# --- leaks ---------------------------------------------------------------------------


def leak_rate(leak: LeakNow, g: Glyphs) -> str:
    """``+120MB``, ``+1.2GiB``, ``+3.0%`` (per hour: the caller says so once). A ratio's
    rate (KV usage) is read as a fraction per hour unless its unit says ``%``."""
    v = leak.rate_per_h
    if v is None:
        return g.missing
    unit = leak.unit.removesuffix("/h")
    info = FIGURES.get(LEAKS.get(leak.resource, ""))
    if unit.startswith("%"):
        return f"{signed(v, g)}%"
    if info is not None and info.kind == "ratio":
        return f"{signed(v * 100, g)}%"
    for small, big, step in (("MiB", "GiB", 1024.0), ("MB", "GB", 1000.0)):
        if unit == small and abs(v) >= step:
            return f"{signed(v / step, g)}{big}"
    return f"{signed(v, g)}{unit}"


def leak_line(view: RunView, shown: Sequence[tuple[str, str]], width: int) -> Content | None:
    """``leak/h srv +120MB cli +2.0MB KV +3.0%`` for the ``(resource, label)`` pairs the
    runner judges, each styled by its state; None when it judges none of them."""
    g = view.glyphs
    found = [(label, leak) for resource, label in shown if (leak := view.leak(resource))]
    if not found:
        return None
    parts: list[Part] = [muted("leak/h")]
    for label, leak in found:
        parts += [muted(f" {label} "), (leak_rate(leak, g), ENDURANCE_STYLES[leak.state])]
    return fit(line(*parts), width, g)


# --- the header ----------------------------------------------------------------------


def _hit(view: EnduranceView) -> str:
    """Which kind of threshold stands at the badge's state: DRIFT, LEAK or both."""
    kinds = [
        word
        for word, states in (
            ("DRIFT", [f.state for f in view.figures]),
            ("LEAK", [x.state for x in view.leaks]),
        )
        if view.badge in states
    ]
    return "+".join(kinds) or "ENDURANCE"


def badge(view: RunView, room: int) -> list[Part]:
    """The header's endurance badge in at most ``room`` cells: ``DRIFT BREACHED`` or
    ``LEAK close`` with the runner's words, ``endurance ok``, or ``endurance n/a`` with
    why (warm-up left, too few windows); nothing for a run without the judgement."""
    e = view.endurance
    if e is None:
        return []
    g = view.glyphs
    style = BADGE_STYLES[e.badge]
    if e.badge == "ok":
        return [("endurance ok", style)]
    if e.badge == "not_judged":
        if e.warmup_left_s:
            why = f"warm-up {mmss(e.warmup_left_s)} left"
        else:
            why = e.not_judged_why or f"{e.windows} windows so far"
        return [("endurance n/a", style), muted(f" ({clip(why, max(4, room - 16), g)})")]
    hit = _hit(e)
    if len(hit) + 11 > room:  # "DRIFT+LEAK": the first kind says enough when narrow
        hit = hit.split("+")[0]
    word = f" {hit} BREACHED " if e.badge == "breached" else f"{hit} close"
    parts: list[Part] = [(word, style)]
    if e.badge_words and room > len(word) + 5:
        parts.append(f" {_first_findings(e.badge_words, room - len(word) - 1, g)}")
    return parts


def _first_findings(words: str, room: int, g: Glyphs) -> str:
    """The runner's ``throughput -31%, TTFT p99 +900%`` cut between findings, not inside
    one (a number cut short misleads); the first one clipped when it alone is too long."""
    findings = words.split(", ")
    for n in range(len(findings), 0, -1):
        more = f", {g.ellipsis}" if n < len(findings) else ""
        shown = ", ".join(findings[:n]) + more
        if len(shown) <= room:
            return shown
    return clip(words, room, g)


def figure_value(figure: str, value: float | None, g: Glyphs) -> str:
    """A figure's value in its unit: ``2.12s``, ``4210``, ``31%``, ``1.2k MB``."""
    info = FIGURES.get(figure)
    if info is None or value is None:
        return g.missing if value is None else rate(value, g)
    if info.kind in ("latency", "seconds"):
        return secs(value, g)
    if info.kind == "ratio":
        return pct(value, g)
    if info.kind == "percent":
        return f"{value:.0f}%"
    return f"{rate(value, g)}{' ' + info.unit if info.kind == 'mib' else ''}"


_ORDER = {"breached": 0, "close": 1, "ok": 2, "no_data": 3}


def details(view: RunView, width: int) -> list[Content]:
    """The maximised header's endurance table: every figure baseline → now with its
    change, worst first, then every resource's leak rate."""
    e = view.endurance
    if e is None:
        return []
    g = view.glyphs
    judged = "judged" if e.judged else f"not judged: {e.not_judged_why or 'too few windows'}"
    out = [line(muted("endurance "), f"{e.windows} windows of {e.window_s} s, {judged}")]
    for f in sorted(e.figures, key=lambda f: _ORDER[f.state]):
        info = FIGURES.get(f.figure)
        name = info.words if info is not None else f.figure
        row = line(
            muted(f"  {clip(name, 18, g):<18} "),
            f"{figure_value(f.figure, f.baseline, g):>8} {g.arrow} ",
            f"{figure_value(f.figure, f.now, g):>8} ",
            (f"{change(f.change, g):>5}", ENDURANCE_STYLES[f.state]),
            muted(f" {f.state.replace('_', ' ')}"),
        )
        out.append(fit(row, width, g))
    for x in sorted(e.leaks, key=lambda x: _ORDER[x.state]):
        info = FIGURES.get(LEAKS.get(x.resource, ""))
        name = info.words if info is not None else x.resource
        row = line(
            muted(f"  leak {clip(name, 13, g):<13} "),
            (f"{leak_rate(x, g):>8}/h", ENDURANCE_STYLES[x.state]),
            muted(f" {x.state.replace('_', ' ')}"),
        )
        out.append(fit(row, width, g))
    return out
