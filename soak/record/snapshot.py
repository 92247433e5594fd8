"""The once-a-second snapshot: everything the panes and the headless lines show.

The runner appends one to ``snapshots.jsonl`` per tick; the TUI and headless mode only
read these (they never compute statistics from raw requests). Sections for gates and
telemetry exist from the start and say "no data" (``None``/empty) until their layers run.

Each line carries ``schema_version`` (``MAJOR.MINOR``, the record's: 1.0 wrote the integer
1); the compatibility rule is the record's (:mod:`soak.record.models`). The JSON Schema of
a line is ``schema/snapshot.schema.json``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loadgen.live import ThroughputView
from loadgen.stats import LatencyStats
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


class ClientView(AbsentUnlessSet):
    """The runner's own health this tick."""

    model_config = ConfigDict(extra="forbid")
    absent_unless_set: ClassVar[frozenset[str]] = frozenset(
        {"behind_fraction", "behind_fraction_1s", "events_per_read"}
    )
    """The socket figures (``loadgen.read_health``) an older snapshot line lacks."""
    written_by_this_version: ClassVar[frozenset[str]] = absent_unless_set

    cpu_percent: float | None = None
    rss_mb: float | None = None
    threads: int | None = None
    open_files: int | None = None
    fd_limit: int | None = None
    loop_lag_s: float | None = None
    """Worst event-loop lateness during this tick."""
    behind_fraction: float | None = None
    """Over the live window: share of sampled socket reads that found bytes already
    queued (``loadgen.read_health``; None: not measured). Near 0 while the client keeps up."""
    behind_fraction_1s: float | None = None
    """The same since the previous tick that had enough samples to say (about a second;
    None when this tick had too few): what the ``client_behind`` rule counts."""
    events_per_read: float | None = None
    """Over the live window: token events per token-carrying read (1.0: one each)."""


class MatrixCellNow(BaseModel):
    """A finished matrix cell's pooled figures (the record's cell will hold the same)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    label: str
    """``~6000 / C4``."""
    e2e_median_s: float | None = None
    """Ordinary median of the E2E of every repetition's requests."""
    ttft_content_median_s: float | None = None
    """Median sent → first visible content."""
    completed: int = 0
    failed: int = 0
    input_tokens_mean: float | None = None
    """The server's prompt tokens, mean (the actual input beside the target)."""


class MatrixProgress(BaseModel):
    """Where a matrix run stands (schema 1.3; only a matrix run's snapshots carry it)."""

    model_config = ConfigDict(extra="forbid")

    cells: int
    """Cells in the matrix."""
    reps: int
    """Timed repetitions per cell (R)."""
    requests: int
    """Timed requests per repetition (K)."""
    phase: Literal["preparing", "warmup", "rep", "done"]
    """``preparing``: the cell's prompts are being built (nothing sent yet); ``warmup``:
    its untimed requests; ``rep``: repetition ``rep`` of ``reps``; ``done``: no cell left
    (every cell ran, or the run stopped first)."""
    cell: int | None = None
    """The current cell (0-based; None before the first)."""
    label: str | None = None
    input_tokens_target: int | None = None
    concurrency: int | None = None
    rep: int | None = None
    """The current repetition (1-based; None outside a repetition)."""
    batch_requests: int | None = None
    """Requests of the current batch: ``requests`` in a repetition, the warm-up's count."""
    batch_done: int = 0
    """Of them, completed so far."""
    batch_failed: int = 0
    """Of them, failed so far (cancelled ones are neither)."""
    finished: list[MatrixCellNow] = Field(default_factory=list)
    """Every cell finished so far, in order."""

    def where(self) -> str:
        """``cell 3/4 ~6000/C4 · rep 2/3 · 3/4 requests`` (what the monitor's header and
        the headless status line say), ``… · warm-up · 2/4 requests``, ``… · preparing
        prompts`` or ``matrix done · 4/4 cells``."""
        if self.phase == "done":
            return f"matrix done · {len(self.finished)}/{self.cells} cells"
        if self.cell is None:
            return f"matrix · preparing cell 1/{self.cells}"
        head = f"cell {self.cell + 1}/{self.cells} ~{self.input_tokens_target}/C{self.concurrency}"
        if self.phase == "preparing":
            return f"{head} · preparing prompts"
        step = "warm-up" if self.phase == "warmup" else f"rep {self.rep}/{self.reps}"
        failed = f", {self.batch_failed} failed" if self.batch_failed else ""
        return f"{head} · {step} · {self.batch_done}/{self.batch_requests} requests{failed}"

    def fraction(self) -> float:
        """How far the matrix is (0–1): finished cells, and of the current one its
        repetitions and the current repetition's requests (a warm-up counts as none)."""
        if self.phase == "done" or not self.cells:
            return 1.0
        if self.cell is None:
            return 0.0
        of_cell = 0.0
        if self.phase == "rep" and self.rep is not None:
            in_rep = (self.batch_done + self.batch_failed) / max(1, self.batch_requests or 1)
            of_cell = (self.rep - 1 + min(1.0, in_rep)) / self.reps
        return min(1.0, (self.cell + of_cell) / self.cells)


class OpenLoopNow(BaseModel):
    """An open-loop load's schedule against what the client sent (schema 1.4; only an
    open-loop run's snapshots carry it). Rates are per second over the last window and
    over the whole load so far."""

    model_config = ConfigDict(extra="forbid")

    arrival: str
    """The arrival model: constant, poisson, gamma, or trace (a replay)."""
    rate: float | None
    """The schedule's target now, requests/s (``--rate``, or the step's); None for a
    trace replay, whose times are the trace's."""
    max_in_flight: int
    """The cap on requests in flight."""
    in_flight: int = 0
    in_flight_peak: int = 0
    held_by_cap: int = 0
    """Arrivals so far that found the cap full and waited for a slot (sent late)."""
    skipped_paused: int = 0
    """Arrivals so far whose time fell in an operator's pause (not sent)."""
    offered_window_per_s: float | None = None
    """The schedule's arrivals due in the last window ÷ its span (None: the schedule was
    changed live, so it cannot be redrawn from the config: ``rate`` says the target)."""
    achieved_window_per_s: float | None = None
    """Requests sent in the last window ÷ its span."""
    offered_per_s: float | None = None
    """The schedule's arrivals due since the window opened ÷ the time since."""
    achieved_per_s: float | None = None
    """Requests sent since the window opened ÷ the time since."""
    lateness_window_s: LatencyStats = Field(default_factory=LatencyStats)
    """Sent − intended of the requests that finished in the last window."""
    lateness_s: LatencyStats = Field(default_factory=LatencyStats)
    """Sent − intended of every request finished so far."""


class StepNow(BaseModel):
    """One step of a load whose target changes (the record's ``LoadStep``, so far)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    label: str
    origin: str
    """stage, sweep or live."""
    start_s: float
    rate: float | None = None
    """Open loop: the step's target (at its end, for a ramp)."""
    concurrency: int | None = None
    """Closed loop: the step's target (at its end, for a ramp)."""
    completed: int = 0
    """Requests of this step completed so far (settle included)."""


class StepsNow(BaseModel):
    """Where a stepped load stands (schema 1.4; only a run with steps carries it)."""

    model_config = ConfigDict(extra="forbid")

    current: int
    """The running step's index (the last one once the load ended)."""
    planned: int | None = None
    """Steps a sweep or stages plan (None: open-ended, live steps)."""
    settle_left_s: float | None = None
    """Of the current step's settle time, what is left (None: settled, or none)."""
    steps: list[StepNow] = Field(default_factory=list)

    def where(self) -> str:
        """``step 3/5 rate=20 · settle 4 s left`` (the monitor's header) or, once
        settled, ``step 3/5 rate=20 · 812 done``."""
        step = next((s for s in self.steps if s.index == self.current), None)
        of = f"/{self.planned}" if self.planned else ""
        head = f"step {self.current + 1}{of}"
        if step is None:
            return head
        head += f" {step.label}"
        if self.settle_left_s is not None and self.settle_left_s > 0:
            return f"{head} · settle {self.settle_left_s:.0f} s left"
        return f"{head} · {step.completed} done"

    def fraction(self) -> float | None:
        """How far the planned steps are (0–1; None when open-ended)."""
        if not self.planned:
            return None
        return min(1.0, self.current / self.planned)


class ShardNow(BaseModel):
    """One load shard of a sharded run, as its last heartbeat left it (``--shards N``;
    schema 1.4: only a sharded run's snapshots carry ``shards``)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    """0-based, as ``record.shards[i].index`` and the journal's ``shard``."""
    status: Literal["starting", "running", "done", "lost"]
    workers: int
    """Its share of the closed loop's workers."""
    in_flight: int | None = None
    """By its last heartbeat (None: none yet)."""
    requests: int = 0
    """Finished requests the coordinator has received from it."""
    loop_lag_p99_s: float | None = None
    """Its event loop's lag: the worst of its last heartbeat's interval (None: not loading)."""
    behind_fraction: float | None = None
    """Of its socket samples over about the last 10 s, the share that found bytes
    already queued (None: too few samples to say)."""
    last_heartbeat_age_s: float | None = None
    """Seconds since the coordinator last heard from it (None: never)."""
    warning: str | None = None
    """Why a running shard looks unhealthy, in words (``lag 310 ms``, ``behind 40%``,
    ``silent 6 s``); None when it looks well (a lost one says so by its status)."""


class Snapshot(AbsentUnlessSet):
    """One line of snapshots.jsonl."""

    model_config = ConfigDict(extra="forbid")

    absent_unless_set: ClassVar[frozenset[str]] = frozenset(
        {"endurance", "matrix", "open_loop", "steps", "shards"}
    )
    """``endurance``: written once the first soak window closed (never by a 1.1 writer);
    ``matrix``: only by a matrix run (never in a soak's snapshots); ``open_loop``: only by
    an open-loop run once its window opened; ``steps``: only by a run with load steps;
    ``shards``: only by a sharded run."""

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
    matrix: MatrixProgress | None = None
    """A matrix run's progress: the cell, the repetition, its requests and the finished
    cells' medians (schema 1.3)."""
    open_loop: OpenLoopNow | None = None
    """An open-loop run's schedule against what was sent, lateness, the cap (schema 1.4)."""
    steps: StepsNow | None = None
    """A stepped load's current step and each step's progress (schema 1.4)."""
    shards: list[ShardNow] | None = None
    """A sharded run's shards, each as its last heartbeat left it (schema 1.4)."""
    events: list[Event] = Field(default_factory=list)
    """Events since the previous snapshot."""
    status: str = "running"
    """``running`` until the verdict, then PASSED/FAILED/INVALID/ABORTED."""
    reasons: list[Reason] = Field(default_factory=list)

    @field_validator("schema_version", mode="before")
    @classmethod
    def _read_version(cls, value: object) -> object:
        return read_schema_version(value)
