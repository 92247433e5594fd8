"""``RunView``: everything the panes draw at one moment, frozen.

The app builds a new one whenever a snapshot arrives (live) or the cursor moves (view)
and hands the same object to every pane; panes never reach back into the app's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from soak.record.endurance import EnduranceView, FigureNow, LeakNow
from soak.record.models import Reason, RunRecord
from soak.record.snapshot import MatrixProgress, Snapshot
from soak.record.telemetry import SnapshotTelemetry
from tui.glyphs import UNICODE, Glyphs
from tui.reader import EventEntry, HistoryPoint, RunMeta, TrendPoint

_NO_TELEMETRY = SnapshotTelemetry()
"""What a frame without a snapshot shows of telemetry: nothing (never changed)."""

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
    snapshot: Snapshot | None = None
    """The snapshot shown (None until the runner wrote its first one)."""
    history: Sequence[HistoryPoint] = ()
    """Chart points up to and including the snapshot shown, oldest first."""
    windows: Sequence[TrendPoint] = ()
    """The soak's windows closed by the snapshot shown, oldest first (``windows.jsonl``;
    none before the first closes, nor in runs older than schema 1.2)."""
    events: Sequence[EventEntry] = ()
    """Events up to the snapshot shown, oldest first."""
    record: RunRecord | None = None
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
    skipped_lines: int = 0
    """Journal lines the reader could not read at all (skipped, not shown)."""

    @property
    def status(self) -> str:
        """``running`` until the verdict, then PASSED/FAILED/INVALID/ABORTED."""
        if self.cursor is None and self.record is not None:
            return self.record.status.value
        return (self.snapshot.status if self.snapshot else None) or "running"

    @property
    def reasons(self) -> list[Reason]:
        """The verdict's reasons (from the snapshot shown, else the record when live)."""
        found = self.snapshot.reasons if self.snapshot else []
        if not found and self.cursor is None and self.record is not None:
            found = self.record.reasons
        return found

    @property
    def telemetry(self) -> SnapshotTelemetry:
        """The snapshot's telemetry section (empty when there is none)."""
        return self.snapshot.telemetry if self.snapshot else _NO_TELEMETRY

    @property
    def endurance(self) -> EnduranceView | None:
        """The drift and leak judgement so far (None: not in this snapshot, or no
        snapshot yet)."""
        return self.snapshot.endurance if self.snapshot else None

    @property
    def matrix(self) -> MatrixProgress | None:
        """A matrix run's progress in the snapshot shown (None: a soak, or no snapshot)."""
        return self.snapshot.matrix if self.snapshot else None

    def figure(self, name: str) -> FigureNow | None:
        """Figure ``name`` (a key of ``soak.record.endurance.FIGURES``) in the live
        judgement, when the runner wrote it."""
        view = self.endurance
        return next((f for f in view.figures if f.figure == name), None) if view else None

    def leak(self, resource: str) -> LeakNow | None:
        """Resource ``resource`` (a key of ``LEAKS``) in the live judgement."""
        view = self.endurance
        return next((x for x in view.leaks if x.resource == resource), None) if view else None
