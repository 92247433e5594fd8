"""Reads a run directory the way the runner writes it: snapshots, events, record.

No Textual here. ``RunFollower`` tails a live run from the beginning (the whole history
on attach) and is polled off the UI loop; ``load_replay`` reads a finished run at once.
Both tolerate files that do not exist yet and a torn last line (the line being written).
``requests.jsonl`` is never read: the monitor shows the runner's own aggregates.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from soak.record.journal import JsonlTail, read_jsonl
from tui.fmt import dicts, mapping, num, text

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


def history_point(snap: Mapping[str, Any]) -> HistoryPoint:
    """Pick the charted values out of a snapshot (window rates, not recomputed)."""
    return HistoryPoint(
        t=num(snap, "t") or 0.0,
        output_tokens_per_s=num(snap, "load", "window", "output_tokens_per_s"),
        requests_per_s=num(snap, "load", "window", "requests_per_s"),
        in_flight=num(snap, "load", "in_flight"),
        failed=num(snap, "load", "failed"),
    )


@dataclass(frozen=True, slots=True)
class EventEntry:
    """One line of ``events.jsonl``; ``n`` is its line number (a stable key)."""

    n: int
    t: float
    wall: str
    kind: str
    severity: str
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, n: int, obj: Mapping[str, Any]) -> EventEntry:
        """Read an event line defensively (unknown keys ignored, missing ones blank)."""
        return cls(
            n=n,
            t=num(obj, "t") or 0.0,
            wall=text(obj, "wall") or "",
            kind=text(obj, "kind") or "event",
            severity=text(obj, "severity") or "info",
            message=text(obj, "message") or "",
            data=mapping(obj, "data"),
        )


@dataclass(frozen=True)
class RunMeta:
    """What the run is aimed at, from ``config.json`` / ``identity.json`` (may be empty)."""

    run_dir: Path
    model: str | None = None
    endpoints: int | None = None
    engine: str | None = None
    concurrency: int | None = None
    duration_s: float | None = None

    @property
    def target(self) -> str:
        """``2 endpoints · tiny-sim`` (what is known)."""
        parts = []
        if self.endpoints is not None:
            parts.append(f"{self.endpoints} endpoint{'s' if self.endpoints != 1 else ''}")
        if self.model:
            parts.append(self.model)
        if self.engine:
            parts.append(self.engine)
        return " / ".join(parts) if parts else "target unknown"


def read_meta(run_dir: Path) -> RunMeta | None:
    """The run's target from its config (written at start) and identity, None before."""
    config = _read_json(run_dir / "config.json")
    identity = _read_json(run_dir / "identity.json")
    if config is None and identity is None:
        return None
    cfg = config or {}
    ident = identity or {}
    endpoints = cfg.get("endpoints")
    n_endpoints = len(endpoints) if isinstance(endpoints, list) else None
    if n_endpoints is None and dicts(ident, "endpoints"):
        n_endpoints = len(dicts(ident, "endpoints"))
    conc = num(cfg, "concurrency")
    return RunMeta(
        run_dir=run_dir,
        model=text(ident, "model") or text(cfg, "model"),
        endpoints=n_endpoints,
        engine=text(ident, "engine") or text(cfg, "engine"),
        concurrency=int(conc) if conc is not None else None,
        duration_s=num(cfg, "duration_s"),
    )


def read_record(run_dir: Path) -> dict[str, Any] | None:
    """``record.json`` as a dict once it exists (it is written atomically), else None."""
    return _read_json(run_dir / "record.json")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


@dataclass(frozen=True)
class FollowUpdate:
    """What one poll found: new snapshots (the newest and their chart points), new
    events, and the record / meta the first time they were seen."""

    snapshot: dict[str, Any] | None
    points: tuple[HistoryPoint, ...]
    events: tuple[EventEntry, ...]
    record: dict[str, Any] | None
    meta: RunMeta | None

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
        self._snapshots = JsonlTail(run_dir / "snapshots.jsonl")
        self._events = JsonlTail(run_dir / "events.jsonl")
        self._event_n = 0
        self._history: deque[HistoryPoint] = deque(maxlen=history_points)
        self.record: dict[str, Any] | None = None
        self.meta: RunMeta | None = None

    @property
    def history(self) -> tuple[HistoryPoint, ...]:
        """Chart points so far (bounded), oldest first."""
        return tuple(self._history)

    def poll(self) -> FollowUpdate:
        """Read what was appended since the last poll."""
        snaps, points = self._new_snapshots()
        events = self._new_events()
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
                more_snaps, more_points = self._new_snapshots()
                snaps += more_snaps
                points += more_points
                events += self._new_events()
        return FollowUpdate(
            snapshot=snaps[-1] if snaps else None,
            points=tuple(points),
            events=tuple(events),
            record=record,
            meta=meta,
        )

    def _new_snapshots(self) -> tuple[list[dict[str, Any]], list[HistoryPoint]]:
        snaps = self._snapshots.read_new()
        points = [history_point(s) for s in snaps]
        self._history.extend(points)
        return snaps, points

    def _new_events(self) -> list[EventEntry]:
        out = []
        for obj in self._events.read_new():
            out.append(EventEntry.parse(self._event_n, obj))
            self._event_n += 1
        return out


@dataclass(frozen=True)
class Replay:
    """A whole run read at once, for ``view``: snapshot lines are kept as bytes and
    parsed when the cursor lands on them (a two-hour run has 7,200 of them)."""

    run_dir: Path
    lines: tuple[bytes, ...]
    points: tuple[HistoryPoint, ...]
    events: tuple[EventEntry, ...]
    record: dict[str, Any] | None
    meta: RunMeta | None

    def __len__(self) -> int:
        return len(self.lines)

    def snapshot(self, i: int) -> dict[str, Any]:
        """The ``i``-th snapshot (0-based) as a dict."""
        obj = orjson.loads(self.lines[i])
        return obj if isinstance(obj, dict) else {}

    def times(self) -> Sequence[float]:
        """Each snapshot's ``t``."""
        return [p.t for p in self.points]


def load_replay(run_dir: Path) -> Replay:
    """Read every complete snapshot and event of a run directory."""
    lines: list[bytes] = []
    points: list[HistoryPoint] = []
    path = run_dir / "snapshots.jsonl"
    with contextlib.suppress(FileNotFoundError), path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break  # torn last line
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                lines.append(raw.rstrip(b"\n"))
                points.append(history_point(obj))
    events = tuple(
        EventEntry.parse(n, obj) for n, obj in enumerate(read_jsonl(run_dir / "events.jsonl"))
    )
    return Replay(
        run_dir=run_dir,
        lines=tuple(lines),
        points=tuple(points),
        events=events,
        record=read_record(run_dir),
        meta=read_meta(run_dir),
    )
