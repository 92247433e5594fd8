"""The replay's time cursor over a finished run (no Textual here).

The cursor stands on one snapshot; what is shown is that snapshot, the chart points up to
it, the windows closed by its time and the events up to its time (all of the windows and
events on the last snapshot).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from soak.record.snapshot import Snapshot
from tui.reader import EventEntry, HistoryPoint, Replay, TrendPoint


@dataclass(frozen=True)
class Frame:
    """What the cursor shows."""

    index: int
    total: int
    snapshot: Snapshot | None
    """None when its line cannot be read whole (its chart point could)."""
    history: Sequence[HistoryPoint]
    events: Sequence[EventEntry]
    windows: Sequence[TrendPoint] = ()


class ReplayCursor:
    """Moves over a ``Replay``; every move returns whether the position changed."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        self._times = [p.t for p in replay.points]
        self._event_times = [e.event.t for e in replay.events]
        self._window_ends = [w.end_s for w in replay.windows]
        self.index = max(0, len(replay) - 1)  # a replay opens on the verdict

    def __len__(self) -> int:
        return len(self.replay)

    def frame(self) -> Frame | None:
        """The snapshot under the cursor and what goes with it (None: no snapshots)."""
        if not len(self.replay):
            return None
        i = self.index
        last = i == len(self.replay) - 1
        shown = (
            len(self._event_times)
            if last
            else bisect.bisect_right(self._event_times, self._times[i])
        )
        return Frame(
            index=i,
            total=len(self.replay),
            snapshot=self.replay.snapshot(i),
            history=self.replay.points[: i + 1],
            events=self.replay.events[:shown],
            windows=self.replay.windows[: self._windows_closed(i, last)],
        )

    def _windows_closed(self, i: int, last: bool) -> int:
        """How many windows had closed by snapshot ``i`` (all of them on the last)."""
        if last:
            return len(self._window_ends)
        return bisect.bisect_right(self._window_ends, self._times[i])

    def move_to(self, index: int) -> bool:
        """To snapshot ``index`` (clamped)."""
        if not len(self.replay):
            return False
        index = max(0, min(len(self.replay) - 1, index))
        moved, self.index = index != self.index, index
        return moved

    def step(self, delta: int) -> bool:
        """Back (negative) or forward by snapshots."""
        return self.move_to(self.index + delta)

    def edge(self, end: bool) -> bool:
        """The first or the last snapshot."""
        return self.move_to(len(self.replay) - 1 if end else 0)

    def jump_event(self, direction: int) -> bool | None:
        """To the snapshot that first shows the next (or previous) event; None when there
        is no event that way."""
        if not len(self.replay):
            return None
        i = self.index
        if direction > 0:
            k = bisect.bisect_right(self._event_times, self._times[i])
            if k >= len(self._event_times):
                return None
        else:
            # Events shown first by this snapshot are "here"; the previous one is older.
            before = self._times[i - 1] if i > 0 else float("-inf")
            k = bisect.bisect_right(self._event_times, before) - 1
            if k < 0:
                return None
        return self.move_to(bisect.bisect_left(self._times, self._event_times[k]))
