"""Pane 2: output tokens/s and requests/s over time, the window and the cumulative run.

Once the soak's first window closed, each figure shows its change since the baseline
window and the charts span the whole run, one column per window (fitted to the width);
before that, and in runs without windows, they plot the last snapshots' window rates.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content

from loadgen.live import ThroughputView
from tui.fmt import count, rate
from tui.panes.base import Pane, Part, line, lines, muted
from tui.panes.endurance import CHANGE_CELLS, change_part, span_words, trend_rows
from tui.runview import RunView
from tui.windows import Charted


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
            label: str,
            value: Callable[[ThroughputView], float | None],
            peak: float | None,
            figure: str,
        ) -> Content:
            parts: list[Part] = [
                (f"{label.removeprefix('out '):<6}" if short else f"{label:<10}", "bold"),
                (f"{rate(value(window) if window else None, g):>6}", "bold $text-primary"),
                muted(" win "),
            ]
            drift = change_part(view, figure)
            if drift is None or not short:  # narrow, the drift takes the cumulative's place
                cum = rate(value(cumulative) if cumulative else None, g)
                parts += [f"{cum:>6}", muted(" cum"), " " if drift is not None else ""]
            if drift is not None:
                parts.append(drift)
            room = 44 + (CHANGE_CELLS if drift is not None else 0)
            if width >= room and peak is not None:
                parts.append(muted(f"  peak {rate(peak, g)}"))
            return line(*parts)

        failed = load.failed if load else None
        # A matrix issues per batch: its issued count is the batch's, not the run's, and
        # would read as fewer than done (pane 3 says the batch's requests).
        issued: list[Part] = (
            []
            if view.matrix is not None
            else [
                muted(" issued " if short else "  issued "),
                count(load.issued if load else None, g),
            ]
        )
        footer = line(
            muted("done "),
            count(load.completed if load else None, g),
            muted(" failed " if short else "  failed "),
            (count(failed, g), "$text-error" if failed else ""),
            *issued,
        )
        # The whole run once windows closed: a caption says so when there is a row for it.
        caption = (
            line(muted(span_words(view.windows, width))) if view.windows and height >= 6 else None
        )
        # Rows left for the two charts once the two headings and the footer are drawn.
        chart_rows = max(1, min(8, (height - 3 - (caption is not None)) // 2))

        def chart(history: list[float | None], field: Charted, figure: str) -> list[str]:
            if view.windows:
                return trend_rows(view, field, figure, width, chart_rows)
            return g.chart(history, width, chart_rows)

        out: list[Content | str] = [head("out tok/s", _tokens, peak_tok, "output_tok_s")]
        out += [line((r, "$text-primary")) for r in chart(tok, "output_tok_s", "output_tok_s")]
        out.append(head("req/s", _requests, peak_req, "req_s"))
        out += [line((r, "$text-accent")) for r in chart(req, "req_s", "req_s")]
        if caption is not None:
            out.append(caption)
        out.append(footer)
        if all(v is None for v in tok) and not view.windows:
            out[1] = line(muted("no load yet"))
        return lines(out[:height] if height >= 5 else out[:1] + out[-1:])
