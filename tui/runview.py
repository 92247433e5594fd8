"""``RunView``: everything the panes draw at one moment, frozen.

The app builds a new one whenever a snapshot arrives (live) or the cursor moves (view)
and hands the same object to every pane; panes never reach back into the app's state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tui.fmt import dig, text
from tui.glyphs import UNICODE, Glyphs
from tui.reader import EventEntry, HistoryPoint, RunMeta

Mode = Literal["live", "view"]


@dataclass(frozen=True)
class Cursor:
    """Where the replay stands: snapshot ``index`` of ``total``."""

    index: int
    total: int


@dataclass(frozen=True)
class RunView:
    """One frame of the monitor."""

    mode: Mode
    snapshot: Mapping[str, Any] | None = None
    """The snapshot shown (None until the runner wrote its first one)."""
    history: Sequence[HistoryPoint] = ()
    """Chart points up to and including the snapshot shown, oldest first."""
    events: Sequence[EventEntry] = ()
    """Events up to the snapshot shown, oldest first."""
    record: Mapping[str, Any] | None = None
    """``record.json`` once the run is done (live: once it appeared)."""
    meta: RunMeta | None = None
    glyphs: Glyphs = UNICODE
    cursor: Cursor | None = None
    """Replay position (view mode only)."""
    notice: str | None = None
    """A line the operator must see: stopping, runner died, detached..."""
    notice_severity: Literal["info", "warning", "error"] = "info"
    paused: bool = False
    """Issuing was paused from here (or the snapshot says so)."""

    @property
    def status(self) -> str:
        """``running`` until the verdict, then PASSED/FAILED/INVALID/ABORTED."""
        if self.cursor is None and self.record is not None:
            return text(self.record, "status") or "running"
        return text(self.snapshot, "status") or "running"

    @property
    def reasons(self) -> list[Mapping[str, Any]]:
        """The verdict's reasons (from the snapshot shown, else the record when live)."""
        found = dig(self.snapshot, "reasons")
        if not found and self.cursor is None and self.record is not None:
            found = dig(self.record, "reasons")
        return [r for r in found or [] if isinstance(r, Mapping)]

    @property
    def telemetry(self) -> Mapping[str, Any]:
        """The snapshot's telemetry section (empty when there is none)."""
        t = dig(self.snapshot, "telemetry")
        return t if isinstance(t, Mapping) else {}
