"""Pane 3: TTFT, E2E, ITL and TPOT percentiles, cumulative and window; server TTFT."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.content import Content

from tui.fmt import dicts, mapping, num, secs, text
from tui.glyphs import Glyphs
from tui.panes.base import Pane, line, lines, muted
from tui.runview import RunView

METRICS = (("TTFT", "ttft_s"), ("E2E", "e2e_s"), ("ITL", "itl_s"), ("TPOT", "tpot_s"))
QUANTILES = ("p50", "p90", "p99", "max")
CELL = 6


def _cells(stats: Any, keys: tuple[str, ...], g: Glyphs) -> str:
    return "".join(f"{secs(num(stats, k), g):>{CELL}}" for k in keys)


def server_ttft(view: RunView) -> list[tuple[int | None, Mapping[str, Any]]]:
    """Per endpoint, the server's own TTFT estimate when its telemetry has one: live
    engine entries first, else the record's summary (after the run)."""
    found = []
    sources = [dicts(view.telemetry, "engines")]
    at_end = view.cursor is None or view.cursor.index == view.cursor.total - 1
    if view.record is not None and at_end:  # never show the end's figures mid-replay
        sources.append(dicts(view.record, "telemetry", "engines"))
    for engines in sources:
        for eng in engines:
            stats = eng.get("server_ttft_s")
            ep = num(eng, "endpoint")
            if isinstance(stats, Mapping) and num(stats, "p50") is not None:
                found.append((None if ep is None else int(ep), stats))
            elif num(eng, "server_ttft_s") is not None:
                found.append((None if ep is None else int(ep), {"p50": eng["server_ttft_s"]}))
        if found:
            break
    return found


class LatencyPane(Pane):
    """A percentile table; the window's columns join the cumulative ones when wide."""

    NUMBER = 3
    TITLE = "latency"

    def build(self, view: RunView, width: int, height: int) -> Content:
        g = view.glyphs
        load = mapping(view.snapshot, "load")
        cum, win = mapping(load, "cumulative"), mapping(load, "window")
        if not cum and not win:
            return lines([line(muted("no load yet: latencies appear once requests finish"))])
        wide = width >= 4 + 2 * CELL * len(QUANTILES) + 6
        # Narrow panes (a 60-column terminal) drop p90, then max; p99 always stays.
        quantiles = (
            QUANTILES if width >= 37 else ("p50", "p99", "max") if width >= 31 else ("p50", "p99")
        )
        heads = "".join(f"{q:>{CELL}}" for q in quantiles)
        if wide:
            out: list[Content | str] = [
                line(("cum ", "bold"), muted(heads), f" {g.sep} ", ("win", "bold"), muted(heads))
            ]
        else:
            out = [line(("cum ", "bold"), muted(heads), f" {g.sep}", muted(f"{'win p99':>7}"))]
        for label, key in METRICS:
            row = _cells(cum.get(key), quantiles, g)
            if wide:
                tail = "    " + _cells(win.get(key), QUANTILES, g)
            else:
                tail = f"{secs(num(win, key, 'p99'), g):>7}"
            out.append(line((f"{label:<4}", "bold"), row, f" {g.sep}", tail))
        servers = server_ttft(view)
        for ep, stats in servers:
            who = f"e{ep}" if ep is not None else ""
            out.append(
                line(
                    muted(f"srv TTFT {who} "),
                    f"p50 {secs(num(stats, 'p50'), g)}  p99 {secs(num(stats, 'p99'), g)}",
                )
            )
        if not servers:
            out.append(line(muted("server TTFT: no data from the engines")))
        n = num(cum, "ttft_s", "n")
        span = num(win, "span_s")
        if n is not None:
            method = text(cum, "ttft_s", "method")
            detail = f"n {int(n)}" + (f", window {span:.0f} s" if span else "")
            out.append(line(muted(detail + (f" ({method})" if method else ""))))
        return lines(out[:height])
