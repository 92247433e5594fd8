"""Reads a run directory the way the runner writes it: snapshots, events, record.

No Textual here. ``RunFollower`` tails a live run from the beginning (the whole history
on attach) and is polled off the UI loop; ``load_replay`` reads a finished run at once.
Both tolerate files that do not exist yet and a torn last line (the line being written).
``requests.jsonl`` is never read: the monitor shows the runner's own aggregates, and the
soak's window series from ``windows.jsonl`` (:mod:`tui.windows`; absent in older runs).

Every line is read through the model its writer used (:class:`Snapshot`,
:class:`~soak.record.events.Event`; ``record.json`` a ``RunRecord``), leniently
(:func:`tui.run_files.parse`): a line that validates only once its odd values are left
out is shown without them, one that cannot be read at all is skipped and counted
(``skipped``). The panes get the models, never the JSON.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from soak.record.events import Event
from soak.record.journal import LineTail
from soak.record.models import RunRecord, read_schema_version
from soak.record.snapshot import SNAPSHOT_SCHEMA_VERSION, Snapshot
from tui.run_files import RunMeta, parse, read_meta, read_record
from tui.windows import TrendPoint, TrendSeries, read_window, trend_point

__all__ = [
    "EventEntry",
    "EventFacts",
    "FollowUpdate",
    "HistoryPoint",
    "Replay",
    "RunFollower",
    "RunMeta",
    "TrendPoint",
    "chart_point",
    "event_entries",
    "history_point",
    "load_replay",
    "read_meta",
    "read_record",
]

HISTORY_POINTS = 3600
"""Chart points kept while following (an hour at one snapshot a second); the charts
show only the newest few dozen, so older ones are dropped to keep memory bounded."""


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """The values of one snapshot that the charts plot over time."""

    t: float
    output_tokens_per_s: float | None
    requests_per_s: float | None
    in_flight: float | None
    failed: float | None


def history_point(snap: Snapshot) -> HistoryPoint:
    """The charted values of a snapshot (window rates, not recomputed)."""
    window = snap.load.window
    return HistoryPoint(
        t=snap.t,
        output_tokens_per_s=window.output_tokens_per_s if window else None,
        requests_per_s=window.requests_per_s if window else None,
        in_flight=snap.load.in_flight,
        failed=snap.load.failed,
    )


class _ChartedWindow(BaseModel):
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None


class _ChartedLoad(BaseModel):
    in_flight: int = 0
    failed: int = 0
    window: _ChartedWindow | None = None


class ChartedLine(BaseModel):
    """The charted values of a snapshot line, read without the rest: the same keys as
    :class:`Snapshot` (``tests/tui/test_reader.py`` holds them to it), every other one
    skipped unparsed. A replay needs every line's chart point but shows one snapshot at a
    time: validating only these makes opening a two-hour run (7,200 lines) several
    times cheaper than validating each line whole."""

    schema_version: str = SNAPSHOT_SCHEMA_VERSION
    t: float
    load: _ChartedLoad

    @field_validator("schema_version", mode="before")
    @classmethod
    def _read_version(cls, value: object) -> object:
        return read_schema_version(value)

    def point(self) -> HistoryPoint:
        """As a chart point."""
        window = self.load.window
        return HistoryPoint(
            t=self.t,
            output_tokens_per_s=window.output_tokens_per_s if window else None,
            requests_per_s=window.requests_per_s if window else None,
            in_flight=self.load.in_flight,
            failed=self.load.failed,
        )


def chart_point(raw: bytes) -> HistoryPoint | None:
    """The chart point of one snapshot line; None when the line is no snapshot at all."""
    try:
        return ChartedLine.model_validate_json(raw).point()
    except ValidationError:
        snap = parse(Snapshot, raw).value  # odd values: what the whole line keeps of it
        return history_point(snap) if snap is not None else None


def read_snapshot(raw: bytes) -> Snapshot | None:
    """One snapshot line (None: unreadable)."""
    return parse(Snapshot, raw).value


def window_points(lines: Iterable[bytes]) -> tuple[list[TrendPoint], int]:
    """The chart points of these ``windows.jsonl`` lines (drain windows left out) and how
    many lines were unreadable (skipped)."""
    out: list[TrendPoint] = []
    skipped = 0
    for raw in lines:
        window = read_window(raw)
        if window is None:
            skipped += 1
        elif (point := trend_point(window)) is not None:
            out.append(point)
    return out, skipped


class EventFacts(BaseModel):
    """What the monitor reads of an event's free-form ``data``: each writer's own keys
    (the request sink's ``failure_class``, a gate's ``evidence``, the GPU ledger's
    ``fault``, ``source``/``url_index``/``gpu`` and ``ecc_new``); the rest is ignored."""

    model_config = ConfigDict(frozen=True)

    failure_class: str | None = Field(
        default=None, validation_alias=AliasChoices("failure_class", "class")
    )
    """The failure's class (``class`` in lines older writers wrote)."""
    evidence: str | None = None
    """The evidence file, relative to the run directory."""
    fault: str | None = None
    """A GPU fault's kind: ``xid``, ``ecc_uncorrectable``, ``row_remap``, ..."""
    source: str | None = None
    url_index: int | None = None
    gpu: int | None = None
    ecc_new: int | None = None
    """New uncorrectable ECC errors the fault counted (None: one, from an NVML event)."""


_NO_FACTS = EventFacts()


@dataclass(frozen=True, slots=True)
class EventEntry:
    """One line of ``events.jsonl``; ``n`` is its line number (a stable key)."""

    n: int
    event: Event
    facts: EventFacts = _NO_FACTS

    @classmethod
    def of(cls, n: int, event: Event) -> EventEntry:
        """Number ``event`` and read the facts the panes need from its data, once."""
        if not event.data:
            return cls(n, event)
        return cls(n, event, parse(EventFacts, event.data).value or _NO_FACTS)


def event_entries(lines: Iterable[bytes], first_n: int = 0) -> tuple[list[EventEntry], int]:
    """The events of these lines, numbered from ``first_n``, and how many lines were
    unreadable (skipped)."""
    out: list[EventEntry] = []
    skipped = 0
    for raw in lines:
        event = parse(Event, raw).value
        if event is None:
            skipped += 1
            continue
        out.append(EventEntry.of(first_n + len(out), event))
    return out, skipped


@dataclass(frozen=True)
class FollowUpdate:
    """What one poll found: the newest snapshot and the chart points of every new one,
    new events, and the record / meta the first time they were seen."""

    snapshot: Snapshot | None
    points: tuple[HistoryPoint, ...]
    events: tuple[EventEntry, ...]
    record: RunRecord | None
    meta: RunMeta | None
    skipped: int = 0
    """Lines skipped so far (snapshots, events and windows that could not be read)."""
    windows: tuple[TrendPoint, ...] = ()
    """Points of the windows that closed since the last poll."""

    @property
    def empty(self) -> bool:
        """Nothing new."""
        return (
            self.snapshot is None and not self.events and self.record is None and self.meta is None
        )


class RunFollower:
    """Tails a run directory another process writes; each ``poll`` returns what is new.

    Not thread-safe: one poller at a time (the app serialises its polls).
    """

    def __init__(self, run_dir: Path, history_points: int = HISTORY_POINTS) -> None:
        self.run_dir = run_dir
        self._snapshots = LineTail(run_dir / "snapshots.jsonl")
        self._events = LineTail(run_dir / "events.jsonl")
        self._windows = LineTail(run_dir / "windows.jsonl")
        self._event_n = 0
        self._history: deque[HistoryPoint] = deque(maxlen=history_points)
        self._series = TrendSeries()
        self.record: RunRecord | None = None
        self.meta: RunMeta | None = None
        self.skipped = 0
        """Lines that could not be read at all, so far."""

    @property
    def history(self) -> tuple[HistoryPoint, ...]:
        """Chart points so far (bounded), oldest first."""
        return tuple(self._history)

    @property
    def windows(self) -> tuple[TrendPoint, ...]:
        """The window series so far (bounded: :class:`~tui.windows.TrendSeries`)."""
        return self._series.points

    def poll(self) -> FollowUpdate:
        """Read what was appended since the last poll."""
        snap, points = self._new_snapshots()
        events = self._new_events()
        windows = self._new_windows()
        meta = None
        if self.meta is None or self.meta.endpoints is None:
            found = read_meta(self.run_dir)
            if found is not None and found != self.meta:
                self.meta = meta = found
        record = None
        if self.record is None:
            record = self.record = read_record(self.run_dir)
            if record is not None:
                # The record is written after the last snapshot and event: read once more
                # so lines that landed after this poll's first read are not left behind.
                more_snap, more_points = self._new_snapshots()
                snap = more_snap or snap
                points += more_points
                events += self._new_events()
                windows += self._new_windows()
        return FollowUpdate(
            snapshot=snap,
            points=tuple(points),
            events=tuple(events),
            record=record,
            meta=meta,
            skipped=self.skipped,
            windows=tuple(windows),
        )

    def _new_snapshots(self) -> tuple[Snapshot | None, list[HistoryPoint]]:
        """The newest readable snapshot of the new lines (validated whole: the one shown)
        and every new line's chart point."""
        lines, points = [], []
        for raw in self._snapshots.read_new_lines():
            point = chart_point(raw)
            if point is None:
                self.skipped += 1
                continue
            lines.append(raw)
            points.append(point)
        self._history.extend(points)
        for raw in reversed(lines):
            if (snap := read_snapshot(raw)) is not None:
                return snap, points
        return None, points

    def _new_events(self) -> list[EventEntry]:
        out, skipped = event_entries(self._events.read_new_lines(), self._event_n)
        self._event_n += len(out)
        self.skipped += skipped
        return out

    def _new_windows(self) -> list[TrendPoint]:
        out, skipped = window_points(self._windows.read_new_lines())
        for point in out:
            self._series.add(point)
        self.skipped += skipped
        return out


@dataclass(frozen=True)
class Replay:
    """A whole run read at once, for ``view``: snapshot lines are kept as bytes and
    validated when the cursor lands on them (a two-hour run has 7,200 of them; their
    chart points are read at once)."""

    run_dir: Path
    lines: tuple[bytes, ...]
    points: tuple[HistoryPoint, ...]
    events: tuple[EventEntry, ...]
    record: RunRecord | None
    meta: RunMeta | None
    skipped: int = 0
    """Lines that could not be read at all (snapshots, events and windows)."""
    windows: tuple[TrendPoint, ...] = ()
    """Every window of ``windows.jsonl`` (none in runs older than schema 1.2)."""

    def __len__(self) -> int:
        return len(self.lines)

    def snapshot(self, i: int) -> Snapshot | None:
        """The ``i``-th snapshot (0-based); None when its line cannot be read whole."""
        return read_snapshot(self.lines[i])

    def times(self) -> Sequence[float]:
        """Each snapshot's ``t``."""
        return [p.t for p in self.points]


def load_replay(run_dir: Path) -> Replay:
    """Read every complete snapshot and event of a run directory."""
    lines: list[bytes] = []
    points: list[HistoryPoint] = []
    skipped = 0
    for raw in _complete_lines(run_dir / "snapshots.jsonl"):
        point = chart_point(raw)
        if point is None:
            skipped += 1
            continue
        lines.append(raw)
        points.append(point)
    events, skipped_events = event_entries(_complete_lines(run_dir / "events.jsonl"))
    windows, skipped_windows = window_points(_complete_lines(run_dir / "windows.jsonl"))
    return Replay(
        run_dir=run_dir,
        lines=tuple(lines),
        points=tuple(points),
        events=tuple(events),
        record=read_record(run_dir),
        meta=read_meta(run_dir),
        skipped=skipped + skipped_events + skipped_windows,
        windows=tuple(windows),
    )


def _complete_lines(path: Path) -> list[bytes]:
    """Every complete, non-blank line; a torn last line (a crash mid-write) is left out."""
    out: list[bytes] = []
    with contextlib.suppress(FileNotFoundError), path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break  # the line being written when the writer died
            if raw.strip():
                out.append(raw.rstrip(b"\r\n"))
    return out
