"""What the run knows: who it is, its clock, its phases, why it stops, what went wrong.

One explicit object instead of a runner every part reached into: the protocol, the
controls, the load phases (steady or matrix), the snapshot tick and finalize each receive
the :class:`RunState` and the parts they need (:class:`RunParts`), and the fields each one
writes are named here with who writes them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.envelope import RequestResult
from loadgen.live import LiveLoadStats
from loadgen.prompts import PromptPool
from loadgen.workers import LoadGenerator
from probes.engine_metrics import EngineSample
from probes.host import LoopLagMonitor
from soak.judge.coverage import LoadWindow, gather
from soak.judge.thresholds import Threshold, ThresholdWatch
from soak.record.events import EventLog
from soak.record.faults import when as when_words
from soak.record.journal import JsonlWriter
from soak.record.matrix import CellResult, MatrixSummary
from soak.record.models import EndpointIdentity, LoadStep, PhaseSpan
from soak.record.redact import Redactor
from soak.record.step_figures import StepCounts
from soak.run.config import RunConfig
from soak.run.gate_session import GateSession
from soak.run.warmup import WarmupClock
from soak.watch.engine import EngineWatch
from soak.watch.gpu.dcgm import DcgmWatch
from soak.watch.gpu.nvml import NvmlWatch
from soak.watch.health import FaultWatch
from soak.watch.host import HostWatch


@dataclass
class MatrixBatch:
    """One batch of a matrix cell: a warm-up (``rep`` None) or a timed repetition."""

    cell: int
    rep: int | None
    requests: int
    results: list[RequestResult] = field(default_factory=list)
    """Its finished requests so far (appended by the batch as each one ends)."""


@dataclass
class RunState:
    """The facts of one run as it goes; the record is made from these and the journals."""

    config: RunConfig
    run_dir: Path
    run_id: str
    origin_ns: int
    """The run's monotonic origin (``perf_counter_ns``): every ``t`` counts from here."""
    started_at: str
    endpoints: list[EndpointIdentity]
    """What each endpoint said it was before the load (the preflight scrubs them)."""
    pool: PromptPool | None
    clock: dict[str, object]
    redactor: Redactor
    events: EventLog

    phase: str = "identity"
    phases: list[PhaseSpan] = field(
        default_factory=lambda: [PhaseSpan(name="identity", start_s=0.0)]
    )
    # -- stops (written by RunControls) --------------------------------------------------
    stop_asked: str | None = None
    """The first stop or abort, in words with its phase and time."""
    hard_stop: bool = False
    stopped_by_storage: bool = False
    storage_error: str | None = None
    """Why the run directory could not be written (disk full...), once it could not."""
    signals: int = 0
    # -- what went wrong (written by the protocol and the tick) --------------------------
    preflight_errors: list[str] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    before_blocked: bool = False
    threshold_abort: Threshold | None = None
    """The abort_on_fail threshold that stopped the load early, if one did."""
    # -- the load (written by the load phase: steady or matrix) --------------------------
    gen: LoadGenerator | None = None
    """The load generator issuing now (the matrix: the current batch's)."""
    shard_launcher: Any = None
    """``--ray``: how each shard is started (soak.run.ray_shards.RayShards, reserved
    before any load); None: shards are this runner's children."""
    request_phase: str = "load"
    """The ``phase`` written with each journaled request (the matrix: warmup, matrix)."""
    warmup: WarmupClock | None = None
    """The soak warm-up (``--warmup``): which load requests are journaled as ``warmup``."""
    released_at: str | None = None
    barrier_wait_s: float | None = None
    steps: list[LoadStep] = field(default_factory=list)
    """The load's steps so far (``--stages``, ``--sweep``, live changes): each appended
    with its span and target as it begins (``load`` None), the figures filled at finalize."""
    step_counts: list[StepCounts] = field(default_factory=list)
    """Each step's counters only the run knows (offered rate, held by the cap), set by
    the step driver when the load ends (``soak.run.load_steps``)."""
    class_pools: dict[str, PromptPool] = field(default_factory=dict)
    """A mix's classes with prompts of their own: their pools, built by the protocol
    before the load (``soak.run.mix_setup.class_pools``)."""
    matrix: MatrixSummary | None = None
    matrix_cells: list[CellResult] = field(default_factory=list)
    """The matrix's cells so far (filled as they finish; the record's come from here)."""
    matrix_start_ns: int | None = None
    """When the matrix's first batch began (its live figures count from there)."""
    matrix_batch: MatrixBatch | None = None
    """The matrix's batch issuing now (written by the matrix run; the snapshot tick counts
    its finished requests for the progress it shows)."""
    # -- engine counters around the windows (reconciliation) -----------------------------
    counters_before: list[EngineSample] | None = None
    counters_after: list[EngineSample] | None = None
    gate_counters: dict[str, tuple[list[EngineSample], list[EngineSample]]] = field(
        default_factory=dict
    )
    """Engine counters at the start and end of each gate phase."""

    def now_s(self) -> float:
        """Seconds since the run's monotonic origin."""
        return (time.perf_counter_ns() - self.origin_ns) / 1e9

    def load_start_s(self) -> float | None:
        """When the barrier released (seconds since the origin), None before; for the
        matrix, when its first timed repetition began (as ``soak.record.faults.load_start``)."""
        if self.config.matrix:
            reps = [r for c in self.matrix_cells for r in c.reps]
            return reps[0].start_s if reps else None
        st = self.gen.state if self.gen else None
        if st is None or st.barrier_released_ns is None:
            return None
        return (st.barrier_released_ns - self.origin_ns) / 1e9

    def when(self, t_s: float) -> str:
        """A run time in words for reasons: ``at load+00:17:02`` once the load began."""
        return when_words(t_s, self.load_start_s())

    def enter(self, phase: str, message: str, **data: Any) -> None:
        """Close the current phase and open ``phase`` (``data`` goes into its event)."""
        t = self.now_s()
        self.phases[-1].end_s = t
        self.phases.append(PhaseSpan(name=phase, start_s=t))
        self.phase = phase
        self.events.emit("phase", message, phase=phase, **data)

    @property
    def stop_reason_words(self) -> str | None:
        """The operator's or a signal's stop, for the verdict (a storage stop is its own
        reason, never "aborted by the operator")."""
        return None if self.stopped_by_storage else self.stop_asked

    @property
    def paused(self) -> bool:
        """Issuing is paused by the operator."""
        return self.gen is not None and self.gen.paused


@dataclass
class Journals:
    """The run directory's append-only journals (every line through the redactor, except
    ``requests.jsonl``'s, scrubbed per line on the request path)."""

    requests: JsonlWriter
    snapshots: JsonlWriter
    telemetry: JsonlWriter
    windows: JsonlWriter
    """``windows.jsonl``: one line per closed soak window (``soak.run.window_tick``)."""

    def all(self, events: EventLog) -> tuple[JsonlWriter, ...]:
        """Every journal, ``events.jsonl`` included (its writer lives in the event log)."""
        return (events.writer, self.requests, self.snapshots, self.telemetry, self.windows)


@dataclass
class Watchers:
    """The run's telemetry watchers. The host sampler is always there; the others start
    after the preflight (none for a run that never reached an endpoint)."""

    host: HostWatch
    engines: EngineWatch | None = None
    faults: FaultWatch | None = None
    gpu_sources: list[DcgmWatch | NvmlWatch] = field(default_factory=list)

    def polled(self) -> list[EngineWatch | FaultWatch | DcgmWatch | NvmlWatch]:
        """The watchers with a poll loop of their own (stopped at the end; their loop
        errors are soaktop failures of the run)."""
        return [w for w in (self.engines, self.faults, *self.gpu_sources) if w is not None]

    def coverage(self, now_s: float, min_expected: int = 1) -> dict[str, dict[str, Any]]:
        """Every source's coverage of the load window so far (empty before the barrier)."""
        return gather((*self.polled(), self.host), now_s, min_expected)


@dataclass
class RunParts:
    """What finalize and the snapshot tick read besides the state: the journals, the
    watchers, the gates, the live figures and the threshold watch."""

    state: RunState
    journals: Journals
    watchers: Watchers
    live: LiveLoadStats
    lag: LoopLagMonitor
    window: LoadWindow
    """The load's window (barrier release → end of drain): every source's coverage."""
    threshold_watch: ThresholdWatch
    gates: GateSession | None = None
