"""Pane 3: TTFT, E2E, ITL and TPOT percentiles, cumulative and window; server TTFT.

In a soak with windows, each p99 shows its change since the baseline window (a ``drift``
column) and a TTFT p99 chart spans the whole run, ahead of the server's TTFT.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from textual.content import Content

from loadgen.live import ThroughputView
from loadgen.stats import LatencyStats
from soak.record.telemetry import EngineSummary, EngineView, ServerLatency
from tui.fmt import secs
from tui.glyphs import Glyphs
from tui.panes import matrix
from tui.panes.base import Pane, Part, line, lines, muted
from tui.panes.endurance import CHANGE_CELLS, change_part, trend_rows
from tui.runview import RunView

METRICS: tuple[tuple[str, Callable[[ThroughputView], LatencyStats]], ...] = (
    ("TTFT", lambda v: v.ttft_s),
    ("E2E", lambda v: v.e2e_s),
    ("ITL", lambda v: v.itl_s),
    ("TPOT", lambda v: v.tpot_s),
)
DRIFTS = {"TTFT": "ttft.p99", "E2E": "e2e.p99", "ITL": "itl.p99", "TPOT": "tpot.p99"}
"""The figure whose change since the baseline each row shows (its p99)."""
QUANTILES: dict[str, Callable[[LatencyStats], float | None]] = {
    "p50": lambda s: s.p50,
    "p90": lambda s: s.p90,
    "p99": lambda s: s.p99,
    "max": lambda s: s.max,
}
CELL = 6


def _cells(stats: LatencyStats | None, keys: Sequence[str], g: Glyphs) -> str:
    return "".join(
        f"{secs(QUANTILES[k](stats) if stats is not None else None, g):>{CELL}}" for k in keys
    )


def server_ttft(view: RunView) -> list[tuple[int | None, ServerLatency]]:
    """Per endpoint, the server's own TTFT estimate when its telemetry has one: live
    engine entries first, else the record's summary (after the run)."""
    found = []
    sources: list[Sequence[EngineView | EngineSummary]] = [view.telemetry.engines]
    at_end = view.cursor is None or view.cursor.index == view.cursor.total - 1
    if view.record is not None and at_end:  # never show the end's figures mid-replay
        sources.append(view.record.telemetry.engines)
    for engines in sources:
        for eng in engines:
            stats = eng.server_ttft_s
            if stats is not None and stats.p50 is not None:
                found.append((eng.endpoint, stats))
        if found:
            break
    return found


def server_estimate(stats: ServerLatency, quantile: str, g: Glyphs) -> str:
    """A server percentile as its histogram resolves it: the bucket that holds it
    (``2.5–5s``), ``≤0.3s`` inside the first bucket, ``≥7680s`` in the +Inf one; the bare
    estimate when the entry has no buckets (a record older than schema 1.3)."""
    value = {"p50": stats.p50, "p90": stats.p90, "p99": stats.p99}[quantile]
    b = stats.buckets.get(quantile)
    if b is None or value is None:
        return secs(value, g)
    at_most, at_least, dash = ("<=", ">=", "-") if g.ascii else ("≤", "≥", "–")
    if b.upper is None:
        return f"{at_least}{b.lower:g}s"
    if b.lower <= 0:
        return f"{at_most}{b.upper:g}s"
    return f"{b.lower:g}{dash}{b.upper:g}s"


class LatencyPane(Pane):
    """A percentile table; the window's columns join the cumulative ones when wide. In a
    matrix run, the matrix pane (:mod:`tui.panes.matrix`) in its place: the same key."""

    NUMBER = 3
    TITLE = "latency"

    def title_for(self, view: RunView | None) -> str:
        """``matrix`` while a matrix run's progress is shown, else ``latency``."""
        return "matrix" if view is not None and view.matrix is not None else self.TITLE

    def build(self, view: RunView, width: int, height: int) -> Content:
        g = view.glyphs
        if view.matrix is not None:  # pooled percentiles would mix the cells' inputs
            return matrix.build(view.matrix, g, width, height)
        load = view.snapshot.load if view.snapshot else None
        cum, win = (load.cumulative, load.window) if load else (None, None)
        if cum is None and win is None:
            return lines([line(muted("no load yet: latencies appear once requests finish"))])
        drifts = view.endurance is not None and bool(view.endurance.figures)
        room = width - (CHANGE_CELLS if drifts else 0)  # the drift column comes first
        wide = room >= 4 + 2 * CELL * len(QUANTILES) + 6
        # Narrow panes (a 60-column terminal) drop p90, then max, then (for the drift
        # column) p50; p99 always stays.
        choices = [tuple(QUANTILES), ("p50", "p99", "max"), ("p50", "p99")]
        choices += [("p99",)] if drifts else []
        quantiles = next((q for q in choices if 13 + CELL * len(q) <= room), choices[-1])
        heads = "".join(f"{q:>{CELL}}" for q in quantiles)
        drift_head = muted(f"{'drift':>{CHANGE_CELLS}}") if drifts else ""
        if wide:
            out: list[Content | str] = [
                line(
                    ("cum ", "bold"),
                    muted(heads),
                    f" {g.sep} ",
                    ("win", "bold"),
                    muted(heads),
                    drift_head,
                )
            ]
        else:
            out = [
                line(
                    ("cum ", "bold"),
                    muted(heads),
                    f" {g.sep}",
                    muted(f"{'win p99':>7}"),
                    drift_head,
                )
            ]
        for label, metric in METRICS:
            row = _cells(metric(cum) if cum else None, quantiles, g)
            if wide:
                tail = "    " + _cells(metric(win) if win else None, tuple(QUANTILES), g)
            else:
                tail = f"{secs(metric(win).p99 if win else None, g):>7}"
            drift = change_part(view, DRIFTS[label]) if drifts else None
            # right-aligned under "drift", in its state's style
            shown: list[Part] = (
                [] if drift is None else [" " * (CHANGE_CELLS - len(drift[0])), drift]
            )
            out.append(line((f"{label:<4}", "bold"), row, f" {g.sep}", tail, *shown))
        out += self._trend(view, width, height - len(out))
        out += self._server_and_method(view, cum, win)
        return lines(out[:height])

    def _trend(self, view: RunView, width: int, room: int) -> list[Content]:
        """The whole run's TTFT p99 from the windows: one row beside its label where
        there is no room for more (80×24), else a labelled chart above the server's TTFT
        and the method, which keep their two rows."""
        if not view.windows or room <= 0:
            return []
        rows = max(1, min(6, room - 2))
        label = "TTFT p99 "
        if rows == 1:
            spark = trend_rows(view, "ttft_p99", "ttft.p99", width - len(label), 1)[0]
            return [line(muted(label), (spark, "$text-warning"))]
        chart = trend_rows(view, "ttft_p99", "ttft.p99", width, rows - 1)
        head = line(muted(label + "whole run"))
        return [head, *(line((r, "$text-warning")) for r in chart)]

    def _server_and_method(
        self, view: RunView, cum: ThroughputView | None, win: ThroughputView | None
    ) -> list[Content]:
        g = view.glyphs
        out = []
        servers = server_ttft(view)
        for ep, stats in servers:
            who = f"e{ep}" if ep is not None else ""
            out.append(
                line(
                    muted(f"srv TTFT {who} "),
                    f"p50 {server_estimate(stats, 'p50', g)}  "
                    f"p99 {server_estimate(stats, 'p99', g)}",
                )
            )
        if not servers:
            out.append(line(muted("server TTFT: no data from the engines")))
        if cum is not None:
            method = cum.ttft_s.method
            span = win.span_s if win else None
            detail = f"n {cum.ttft_s.n}" + (f", window {span:.0f} s" if span else "")
            out.append(line(muted(detail + (f" ({method})" if method else ""))))
        return out
