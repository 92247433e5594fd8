"""The soak's window series as the monitor keeps it: one light point per closed window.

The runner writes one :class:`~soak.record.endurance.WindowFigures` line to
``windows.jsonl`` per closed window (default 60 s); the monitor charts the whole run from
them, never from raw requests. A point keeps only the charted figures. Live, the series
is bounded (:class:`TrendSeries`): past ``cap`` points, neighbours are merged in pairs and
later windows by the same stride, so a day-long run still charts end to end at an even
time resolution in a few hundred kilobytes. A replay keeps every window (its file is
read once) so the cursor can cut it at any snapshot.

No Textual here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from soak.record.endurance import WindowFigures
from tui.run_files import parse

WINDOWS_KEPT = 1000
"""Points a live series keeps at most (about 17 hours of 60 s windows at full detail)."""

Charted = Literal["output_tok_s", "req_s", "ttft_p99"]
"""The figures a point keeps (``WindowFigures`` field names)."""


@dataclass(frozen=True, slots=True)
class TrendPoint:
    """One window, or several merged (``first``..``last``), of the charted figures."""

    first: int
    last: int
    start_s: float
    end_s: float
    output_tok_s: float | None
    req_s: float | None
    ttft_p99: float | None

    @property
    def windows(self) -> int:
        """How many windows this point stands for."""
        return self.last - self.first + 1


def trend_point(w: WindowFigures) -> TrendPoint | None:
    """The point of one window; None for a drain window (after issuing ended: its rates
    fall by design, and the runner never judges it)."""
    if w.kind == "drain":
        return None
    return TrendPoint(w.i, w.i, w.start_s, w.end_s, w.output_tok_s, w.req_s, w.ttft_p99)


PLACED = frozenset({("i",), ("start_s",), ("end_s",)})
"""Where a window stands on the timeline: a line without them is skipped, never placed at
an invented 0."""


def read_window(raw: bytes) -> WindowFigures | None:
    """One ``windows.jsonl`` line (None: unreadable, of another major version, or not
    placed on the timeline)."""
    return parse(WindowFigures, raw, must_have=PLACED).value


def _mean(values: Iterable[tuple[float | None, int]]) -> float | None:
    """The mean of the values that are there, each weighted by its windows."""
    total = weight = 0.0
    for value, n in values:
        if value is not None:
            total += value * n
            weight += n
    return total / weight if weight else None


def merge(points: Sequence[TrendPoint]) -> TrendPoint:
    """Neighbouring points as one: each figure the window-weighted mean of those with a
    value (a mean of p99s: the line's level, which is what a drift moves)."""
    first, last = points[0], points[-1]
    return TrendPoint(
        first=first.first,
        last=last.last,
        start_s=first.start_s,
        end_s=last.end_s,
        output_tok_s=_mean((p.output_tok_s, p.windows) for p in points),
        req_s=_mean((p.req_s, p.windows) for p in points),
        ttft_p99=_mean((p.ttft_p99, p.windows) for p in points),
    )


class TrendSeries:
    """The live series, bounded: at most ``cap`` points, at an even stride of windows."""

    def __init__(self, cap: int = WINDOWS_KEPT) -> None:
        self.cap = max(2, cap)
        self.stride = 1
        """Windows per point; doubles each time the series fills up."""
        self._points: list[TrendPoint] = []
        self._pending: list[TrendPoint] = []
        """Windows not yet making up a whole stride (shown merged, as the newest point)."""

    def add(self, point: TrendPoint) -> None:
        """Append one window's point."""
        self._pending.append(point)
        if sum(p.windows for p in self._pending) < self.stride:
            return
        self._points.append(merge(self._pending))
        self._pending = []
        if len(self._points) >= self.cap:
            pairs = range(0, len(self._points) - 1, 2)
            merged = [merge(self._points[k : k + 2]) for k in pairs]
            self._pending = self._points[len(merged) * 2 :]  # an odd one out waits
            self._points = merged
            self.stride *= 2

    @property
    def points(self) -> tuple[TrendPoint, ...]:
        """Oldest first; the newest may stand for fewer windows than the stride."""
        tail = (merge(self._pending),) if self._pending else ()
        return (*self._points, *tail)


def columns(points: Sequence[TrendPoint], field: Charted, width: int) -> list[float | None]:
    """``field`` over the whole series in at most ``width`` columns: one per point while
    they fit, else each column the window-weighted mean of its share of the points."""
    if width <= 0 or not points:
        return []
    if len(points) <= width:
        return [getattr(p, field) for p in points]
    n = len(points)
    out = []
    for col in range(width):
        share = points[col * n // width : (col + 1) * n // width]
        out.append(_mean((getattr(p, field), p.windows) for p in share))
    return out
