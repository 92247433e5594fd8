"""The once-a-second snapshot: everything the panes and the headless lines show.

The runner appends one to ``snapshots.jsonl`` per tick; the TUI and headless mode only
read these (they never compute statistics from raw requests). Sections for gates and
telemetry exist from the start and say "no data" (``None``/empty) until their layers run.

Each line carries ``schema_version`` (``MAJOR.MINOR``, the record's: 1.0 wrote the integer
1); the compatibility rule is the record's (:mod:`soak.record.models`). The JSON Schema of
a line is ``schema/snapshot.schema.json``.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loadgen.live import ThroughputView
from soak.record.endurance import EnduranceView
from soak.record.events import Event
from soak.record.models import SCHEMA_VERSION, Reason, read_schema_version
from soak.record.sections import GateProgress, ThresholdState
from soak.record.shape import AbsentUnlessSet
from soak.record.telemetry import SnapshotTelemetry

SNAPSHOT_SCHEMA_VERSION = SCHEMA_VERSION
"""Snapshot lines and the record share one version."""


class LoadView(BaseModel):
    """Load state: requested vs started vs in flight, counts, window and cumulative."""

    model_config = ConfigDict(extra="forbid")

    requested_concurrency: int
    workers_started: int = 0
    in_flight: int = 0
    issued: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    issue_elapsed_s: float | None = None
    issue_total_s: float | None = None
    """The planned issue window (None when the load ends by request count)."""
    window: ThroughputView | None = None
    cumulative: ThroughputView | None = None


class ClientView(BaseModel):
    """The runner's own health this tick."""

    model_config = ConfigDict(extra="forbid")

    cpu_percent: float | None = None
    rss_mb: float | None = None
    threads: int | None = None
    open_files: int | None = None
    fd_limit: int | None = None
    loop_lag_s: float | None = None
    """Worst event-loop lateness during this tick."""


class Snapshot(AbsentUnlessSet):
    """One line of snapshots.jsonl."""

    model_config = ConfigDict(extra="forbid")

    absent_unless_set: ClassVar[frozenset[str]] = frozenset({"endurance"})
    """Written once the first soak window closed (never by a 1.1 writer)."""

    schema_version: str = SNAPSHOT_SCHEMA_VERSION
    """``MAJOR.MINOR``; 1.0 lines hold the integer 1 (read as ``"1.0"``)."""
    seq: int
    t: float
    """Seconds since the run's monotonic origin."""
    wall: str
    run_id: str
    phase: str
    """identity, barrier, load, drain, finalize, done (gates add before_gates/after_gates)."""
    phase_elapsed_s: float
    load: LoadView
    client: ClientView
    gates: dict[str, dict[str, GateProgress]] = Field(default_factory=dict)
    """``{phase: {suite: progress}}`` so far."""
    thresholds: list[ThresholdState] = Field(default_factory=list)
    """Each threshold's live state: ok, breached or no_data, from the live histograms."""
    telemetry: SnapshotTelemetry = Field(default_factory=SnapshotTelemetry)
    endurance: EnduranceView | None = None
    """The drift and leak judgement so far, once the load began (schema 1.2)."""
    events: list[Event] = Field(default_factory=list)
    """Events since the previous snapshot."""
    status: str = "running"
    """``running`` until the verdict, then PASSED/FAILED/INVALID/ABORTED."""
    reasons: list[Reason] = Field(default_factory=list)

    @field_validator("schema_version", mode="before")
    @classmethod
    def _read_version(cls, value: object) -> object:
        return read_schema_version(value)
