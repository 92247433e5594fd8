"""Messages from the reader worker to the app.

A ``SnapshotTick`` carries the newest snapshot and the chart history; when the app is
busy, an unprocessed tick is replaced by the next one instead of queueing (the screen
only ever needs the latest). Events and the end of the run are never dropped.
"""

from __future__ import annotations

from textual.message import Message

from soak.record.models import RunRecord
from soak.record.snapshot import Snapshot
from tui.reader import EventEntry, HistoryPoint, RunMeta, TrendPoint


class SnapshotTick(Message):
    """The newest snapshot, the chart points up to it, how many journal lines the reader
    could not read so far, and the window series so far."""

    def __init__(
        self,
        snapshot: Snapshot,
        history: tuple[HistoryPoint, ...],
        skipped: int = 0,
        windows: tuple[TrendPoint, ...] = (),
    ) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.history = history
        self.skipped = skipped
        self.windows = windows

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotTick)


class EventsArrived(Message):
    """New lines of events.jsonl, oldest first."""

    def __init__(self, events: tuple[EventEntry, ...]) -> None:
        super().__init__()
        self.events = events


class MetaFound(Message):
    """The run's target (config.json / identity.json) became readable."""

    def __init__(self, meta: RunMeta) -> None:
        super().__init__()
        self.meta = meta


class RunEnded(Message):
    """record.json appeared: the run is over and its verdict final."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__()
        self.record = record


class RunnerDied(Message):
    """The runner process is gone and left no record."""

    def __init__(self, returncode: int | None) -> None:
        super().__init__()
        self.returncode = returncode
