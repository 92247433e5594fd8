"""The record's ``endurance`` in words: the drift and leak table, and the compare cell.

``soaktop report`` (:mod:`soak.after.report.endurance`) and ``soaktop compare``
(:mod:`soak.after.compare`, its text and its page) show the same table, built here once:

- :func:`drift_rows`: per figure, first → last (the medians of the baseline and end
  windows), the change, the trend (Theil–Sen slope per hour with its 95 % interval and the
  Mann–Kendall p), since when, and the state;
- :func:`leak_rows`: per resource, first → last, the rate per hour with its interval and
  p, and the state;
- :func:`drift_cell`: the seed table's "Drift first → last" cell: ``throughput −31 %,
  TTFT p99 +420 %`` for the figures in drift (and the resources that leak), ``stable``
  when judged with none, ``not judged (4 windows)`` otherwise.

Nothing is judged here: every state and number is the record's (``soak.judge`` wrote
them). A record older than schema 1.2 has no ``endurance``: it reads as "no window
series", never as "stable". Changes of ratio figures (failure rate, flagged responses, KV
usage: values 0–1) are shown in percentage points, from the baseline and end medians.
"""

from __future__ import annotations

from dataclasses import dataclass

from soak.judge.trend_metrics import p_value_words
from soak.record.endurance import FIGURES, LEAKS, DriftFinding, Endurance, LeakFinding
from soak.record.faults import load_start, when
from soak.record.models import RunRecord
from soak.safe_text import safe_line

MINUS = "\u2212"
"""Negative changes are written with a real minus sign (−31 %), as the issue's words are."""

HEADLINE = ("output_tok_s", "ttft.p99", "e2e.p99")
"""Figures the short (text) table always shows, drifting or not, so "stable" is visible."""

CELL_ITEMS = 3
"""Findings named in the compare cell before ``+N more``."""

DRIFT_HEADER = ("figure", "first → last", "change", "trend per hour", "since", "state")
LEAK_HEADER = ("resource", "first → last", "rate per hour", "state")
NO_SERIES = "the record predates the window series (soaktop schema 1.2)"


def num(v: float | None) -> str:
    """A figure with 3–4 significant digits and thousands separators (``4,210``,
    ``0.396``); None as an em dash."""
    if v is None:
        return "—"
    a = abs(v)
    if a >= 100:
        text = f"{v:,.0f}"
    elif a >= 10:
        text = f"{v:.1f}"
    elif a >= 1:
        text = f"{v:.2f}"
    elif a == 0:
        text = "0"
    else:
        text = f"{v:.3g}"
    return text.replace("-", MINUS)


def signed(v: float) -> str:
    """``+420`` / ``−31``: a change always carries its sign."""
    return ("+" if v >= 0 else "") + num(v)


def signed_pct(v: float) -> str:
    """A change in percent (or points): whole from 10 up (``−31``), one decimal below
    (``+2.5``), with its sign."""
    text = f"{v:+.0f}" if abs(v) >= 10 else f"{v:+.1f}"
    return text.replace("-", MINUS)


def _is_ratio(figure: str) -> bool:
    info = FIGURES.get(figure)
    return info is not None and info.kind == "ratio"


def figure_label(figure: str) -> str:
    """``throughput``, ``TTFT p99``: the figure's words (its name when this version does
    not know it)."""
    info = FIGURES.get(figure)
    return info.words if info is not None else figure


def value(figure: str, v: float | None, unit: str = "") -> str:
    """One value of a figure with its unit: ``4,210 tok/s``, ``0.396 s``, ``45.0 %`` (a
    ratio, 0–1, as a percentage)."""
    if v is None:
        return "—"
    if _is_ratio(figure):
        return f"{v * 100:.1f} %"
    unit = unit or (FIGURES[figure].unit if figure in FIGURES else "")
    return f"{num(v)} {unit}".rstrip()


def change_words(f: DriftFinding) -> str | None:
    """``−31 %`` (relative), ``+2.5 pts`` for a ratio figure; None when there is none."""
    if _is_ratio(f.figure):
        if f.baseline is None or f.end is None:
            return None
        return f"{signed_pct((f.end - f.baseline) * 100)} pts"
    return None if f.change is None else f"{signed_pct(f.change * 100)} %"


def _p(p: float | None, step_p: float | None = None) -> str:
    return "" if p is None else p_value_words(p, step_p)


def trend_words(f: DriftFinding) -> str:
    """``falling −650 tok/s [−700, −600], p<0.001``: the slope per hour with its interval
    and p (ratio figures in points per hour)."""
    t = f.trend
    if t.slope_per_h is None:
        return t.direction if t.direction != "unknown" else "—"
    scale, unit = (100.0, "pts") if _is_ratio(f.figure) else (1.0, f.unit or _unit(f.figure))
    lo, hi = t.slope_lo_per_h, t.slope_hi_per_h
    band = f" [{num(lo * scale)}, {num(hi * scale)}]" if lo is not None and hi is not None else ""
    return _rate(t.direction, t.slope_per_h * scale, unit, band, t.mk_p, t.step_p)


def _rate(
    lead: str, rate: float, unit: str, band: str, p: float | None, step_p: float | None = None
) -> str:
    """``falling −650 tok/s [−700, −600], p<0.001`` (the parts that are there; a unit
    that starts with ``/`` or ``%`` is written against the number: ``+120/h``)."""
    attached = unit.startswith(("/", "%"))
    number = signed(rate) + (unit if attached else "")
    text = " ".join(x for x in (lead, number, "" if attached else unit) if x)
    return text + band + (f", {_p(p, step_p)}" if p is not None else "")


def _unit(figure: str) -> str:
    return FIGURES[figure].unit if figure in FIGURES else ""


def since_words(f: DriftFinding, origin: float | None) -> str:
    """``load+00:42:00 (engine restart)``: when the drift began and with what moment."""
    if f.since_s is None:
        return f.since_event or ""
    at = when(f.since_s, origin).removeprefix("at ")
    return f"{at} ({f.since_event})" if f.since_event else at


_STATE = {"no_data": "no data"}


@dataclass(frozen=True)
class Table:
    """A table of words: header and rows (escaped by whoever renders it)."""

    header: tuple[str, ...]
    rows: list[list[str]]


def drift_rows(e: Endurance, origin: float | None, *, short: bool = False) -> Table:
    """One row per drift finding with data, those in drift first (``short``: only those
    and the :data:`HEADLINE` figures)."""
    findings = [f for f in e.drift if f.state != "no_data"]
    if short:
        findings = [f for f in findings if f.state == "drift" or f.figure in HEADLINE]
    findings.sort(key=lambda f: f.state != "drift")  # stable: FIGURES order kept within
    rows = [
        [
            figure_label(f.figure),
            f"{value(f.figure, f.baseline, f.unit)} → {value(f.figure, f.end, f.unit)}",
            change_words(f) or "—",
            trend_words(f),
            since_words(f, origin) if f.state == "drift" else "",
            _STATE.get(f.state, f.state),
        ]
        for f in findings
    ]
    return Table(DRIFT_HEADER, rows)


def leak_rate(f: LeakFinding, *, full: bool = True) -> str:
    """``+212 MB/h [180, 240], p<0.001`` (``full``: with the interval and p); KV usage, a
    fraction of the cache, in percent of it per hour (``+30%/h``), as the grammar's
    ``leak.kv_usage<10%/h``."""
    if f.rate_per_h is None:
        return "—"
    ratio = _is_ratio(LEAKS.get(f.resource, ""))
    scale, unit = (100.0, "%/h") if ratio else (1.0, f.unit)
    lo, hi = f.rate_lo_per_h, f.rate_hi_per_h
    band = f" [{num(lo * scale)}, {num(hi * scale)}]" if lo is not None and hi is not None else ""
    if not full:
        return _rate("", f.rate_per_h * scale, unit, "", None)
    return _rate("", f.rate_per_h * scale, unit, band, f.mk_p, f.step_p)


def leak_label(resource: str) -> str:
    """``server RSS``: the words of the figure the resource is read from."""
    return figure_label(LEAKS[resource]) if resource in LEAKS else resource


def leak_rows(e: Endurance) -> Table:
    """One row per leak finding with data, leaks first."""
    findings = sorted((f for f in e.leaks if f.state != "no_data"), key=lambda f: f.state != "leak")
    rows = []
    for f in findings:
        figure = LEAKS.get(f.resource, f.resource)
        state = _STATE.get(f.state, f.state)
        if f.state == "stable" and f.returned:
            state = "stable (came back after its peak)"
        rows.append(
            [
                leak_label(f.resource),
                f"{value(figure, f.first)} → {value(figure, f.last)}",
                leak_rate(f),
                state,
            ]
        )
    return Table(LEAK_HEADER, rows)


def without_data(e: Endurance) -> str | None:
    """``no values for: open files; no leak rate for: open files`` (named, not tabled)."""
    figures = [figure_label(f.figure) for f in e.drift if f.state == "no_data"]
    leaks = [leak_label(f.resource) for f in e.leaks if f.state == "no_data"]
    parts = [f"no values for: {', '.join(figures)}"] if figures else []
    parts += [f"no leak rate for: {', '.join(leaks)}"] if leaks else []
    return "; ".join(parts) or None


def _span(first_last: list[int]) -> str:
    if len(first_last) != 2:
        return "—"
    a, b = first_last
    return f"window {a}" if a == b else f"windows {a}–{b}"


def judgement_words(e: Endurance) -> str:
    """``judged on 24 windows of 60 s: baseline windows 1–4, end windows 20–23`` or
    ``not judged: 4 windows of 60 s; a trend needs 6``."""
    if not e.judged:
        why = e.not_judged_why or f"{_windows(e.judged_windows)} of {e.window_s} s"
        return f"not judged: {why}"
    return (
        f"judged on {_windows(e.judged_windows)} of {e.window_s} s: baseline {_span(e.baseline)}"
        f", end {_span(e.end)}"
    )


def _windows(n: int) -> str:
    return f"{n} window" if n == 1 else f"{n} windows"


def policy_words(e: Endurance) -> str:
    """``policy (default): drift.output_tok_s>-10%, ...``; ``no drift or leak policy``."""
    if e.policy_source == "none" or not e.policy:
        return "no drift or leak policy applied"
    return f"policy ({e.policy_source}): " + ", ".join(e.policy)


def warmup_words(e: Endurance, origin: float | None) -> str | None:
    """``warm-up 60s: 412 requests, ended load+00:01:00`` (its requests are not judged)."""
    w = e.warmup
    if w is None:
        return None
    end = (
        "the load ended first"
        if w.end_s is None
        else "ended " + when(w.end_s, origin).removeprefix("at ")
    )
    return f"warm-up {w.spec}: {w.requests:,} requests, {end} (not judged)"


def origin_of(rec: RunRecord) -> float | None:
    """The time the table's "since" is measured from (the load's release)."""
    return load_start(rec.load, rec.matrix)


def has_timeline(rec: RunRecord | None, fields: frozenset[str]) -> bool:
    """The record is one of schema 1.2 or later (it has the window series' keys)."""
    return rec is not None and bool({"windows", "endurance"} & fields)


def drift_cell(rec: RunRecord | None) -> str:
    """The seed table's "Drift first → last" cell of one run."""
    if rec is None:
        return "—"
    e = rec.endurance
    if e is None:
        return "not judged (no window series)" if not rec.windows else "not judged"
    if not e.judged:
        return f"not judged ({_windows(e.judged_windows)})"
    items = [
        f"{figure_label(f.figure)} {change_words(f) or 'drift'}"
        for f in e.drift
        if f.state == "drift"
    ]
    items += [
        f"{leak_label(f.resource)} {leak_rate(f, full=False)}"
        if f.rate_per_h is not None
        else f"{leak_label(f.resource)} leak"
        for f in e.leaks
        if f.state == "leak"
    ]
    if items:
        more = len(items) - CELL_ITEMS
        return ", ".join(items[:CELL_ITEMS]) + (f" (+{more} more)" if more > 0 else "")
    if any(f.state == "stable" for f in e.drift) or any(f.state == "stable" for f in e.leaks):
        return "stable"
    return "no data"


def _aligned(table: Table, indent: str = "  ") -> list[str]:
    cells = [[safe_line(c) for c in r] for r in (table.header, *table.rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(table.header))]
    return [
        (indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))).rstrip()
        for r in cells
    ]


def endurance_text(run_id: str, rec: RunRecord | None) -> list[str]:
    """One run's drift and leak table as aligned text lines (compare's text output)."""
    head = f"Drift and leaks: {safe_line(run_id)}"
    if rec is None:
        return [head, "  no readable record"]
    e = rec.endurance
    if e is None:
        return [head, f"  {NO_SERIES if not rec.windows else 'not judged'}"]
    origin = origin_of(rec)
    lines = [head, f"  {judgement_words(e)}"]
    if (warm := warmup_words(e, origin)) is not None:
        lines.append(f"  {warm}")
    if not e.judged:
        return lines
    lines.append(f"  {safe_line(policy_words(e))}")
    drift = drift_rows(e, origin, short=True)
    if drift.rows:
        lines += _aligned(drift)
    rest = sum(1 for f in e.drift if f.state == "stable") - sum(
        1 for r in drift.rows if r[-1] == "stable"
    )
    if rest > 0:
        more = "1 more figure" if rest == 1 else f"{rest} more figures"
        lines.append(f"  {more} stable (soaktop report shows every one)")
    leaks = leak_rows(e)
    if leaks.rows:
        lines += _aligned(leaks)
    return lines
