"""Events: phases, barrier, failures, faults, marks, signals — the run's timeline.

An event is one line of ``events.jsonl`` and also travels in the next snapshot, so the
TUI's event pane and the record read the same objects. ``t`` is seconds since the run's
monotonic origin; ``wall`` is for humans and for lining up with server logs.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from soak.record.journal import JsonlWriter
from soak.record.redact import Redactor

Severity = Literal["info", "warning", "error", "critical"]
EventKind = Literal[
    "phase",  # a protocol phase began (data.phase)
    "identity",  # what the server said it is
    "barrier",  # workers started / released
    "warmup",  # the soak warm-up ended (its requests are journaled as phase warmup)
    "failure",  # a load request failed (data.class, data.request_id)
    "failures",  # aggregated failures beyond the per-class detail limit
    "warning",  # client health, missing usage, anything an operator should know
    "fault",  # GPU / engine fault (telemetry sources)
    "restart",  # an engine's counters went down: the server restarted
    "gate",  # a probe result (gates)
    "threshold",  # a threshold breached live, or one that stopped the load
    "health",  # endpoint health changed
    "mark",  # operator mark with a note
    "control",  # stop / abort / pause asked (signal or control file)
    "step",  # a load step began (stages, sweep, a live change): data.step is its LoadStep
    "verdict",  # the final status
    "shard",  # a load shard started (data.shard, data.pid) or was lost (--shards)
]


class Event(BaseModel):
    """One timeline entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    t: float
    """Seconds since the run's monotonic origin."""
    wall: str
    """UTC ISO-8601 wall time (labels only; never used for latencies)."""
    kind: EventKind
    severity: Severity = "info"
    message: str
    """Words an operator can act on."""
    data: dict[str, Any] = Field(default_factory=dict)


class EventLog:
    """Writes events to ``events.jsonl`` and keeps the ones not yet sent in a snapshot."""

    def __init__(
        self, writer: JsonlWriter, origin_ns: int, redactor: Redactor | None = None
    ) -> None:
        self.writer = writer
        self._origin_ns = origin_ns
        self._redactor = redactor if redactor is not None and redactor.active else None
        self._pending: list[Event] = []

    def emit(
        self, kind: EventKind, message: str, severity: Severity = "info", **data: Any
    ) -> Event:
        """Record an event now."""
        if self._redactor is not None:  # scrub values, never the serialized structure
            message, data = self._redactor.text(message), self._redactor.obj(data)
        ev = Event(
            t=(time.perf_counter_ns() - self._origin_ns) / 1e9,
            wall=datetime.now(UTC).isoformat(timespec="milliseconds"),
            kind=kind,
            severity=severity,
            message=message,
            data=data,
        )
        self.writer.write_raw(orjson.dumps(ev.model_dump(mode="json")))
        self._pending.append(ev)
        return ev

    def take_pending(self) -> list[Event]:
        """Events since the last call (they go into the next snapshot)."""
        out, self._pending = self._pending, []
        return out
