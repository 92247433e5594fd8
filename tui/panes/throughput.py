"""Pane 2: output tokens/s and requests/s over time, the window and the cumulative run."""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content

from loadgen.live import ThroughputView
from tui.fmt import count, rate
from tui.panes.base import Pane, Part, line, lines, muted
from tui.runview import RunView


def _tokens(v: ThroughputView) -> float | None:
    return v.output_tokens_per_s


def _requests(v: ThroughputView) -> float | None:
    return v.requests_per_s


class ThroughputPane(Pane):
    """Two charts (window rates, one point per snapshot) with their current values."""

    NUMBER = 2
    TITLE = "throughput"

    def build(self, view: RunView, width: int, height: int) -> Content:
        g = view.glyphs
        load = view.snapshot.load if view.snapshot else None
        window, cumulative = (load.window, load.cumulative) if load else (None, None)
        tok = [p.output_tokens_per_s for p in view.history]
        req = [p.requests_per_s for p in view.history]
        peak_tok = max((v for v in tok if v is not None), default=None)
        peak_req = max((v for v in req if v is not None), default=None)

        short = width < 38  # a 60-column terminal: shorter labels, same numbers

        def head(
            label: str, value: Callable[[ThroughputView], float | None], peak: float | None
        ) -> Content:
            parts: list[Part] = [
                (f"{label.removeprefix('out '):<6}" if short else f"{label:<10}", "bold"),
                (f"{rate(value(window) if window else None, g):>6}", "bold $text-primary"),
                muted(" win "),
                f"{rate(value(cumulative) if cumulative else None, g):>6}",
                muted(" cum"),
            ]
            if width >= 44 and peak is not None:
                parts.append(muted(f"  peak {rate(peak, g)}"))
            return line(*parts)

        failed = load.failed if load else None
        footer = line(
            muted("done "),
            count(load.completed if load else None, g),
            muted(" failed " if short else "  failed "),
            (count(failed, g), "$text-error" if failed else ""),
            muted(" issued " if short else "  issued "),
            count(load.issued if load else None, g),
        )
        # Rows left for the two charts once the two headings and the footer are drawn.
        chart_rows = max(1, min(8, (height - 3) // 2))
        out: list[Content | str] = [head("out tok/s", _tokens, peak_tok)]
        out += [line((r, "$text-primary")) for r in g.chart(tok, width, chart_rows)]
        out.append(head("req/s", _requests, peak_req))
        out += [line((r, "$text-accent")) for r in g.chart(req, width, chart_rows)]
        out.append(footer)
        if all(v is None for v in tok):
            out[1] = line(muted("no load yet"))
        return lines(out[:height] if height >= 5 else out[:1] + out[-1:])
