"""The facts of a run, as the verdict reads them, and the judgement made of them.

:class:`RunFacts` is everything the verdict depends on, gathered in one of three ways:
by finalize from the live run (``soak.run.finalize``), by ``soaktop recover`` from the
journals of a runner that died (``soak.after.recover``), and by ``soaktop verify`` from
the journals and the record (``soak.after.verify``). :func:`soak.judge.verdict.judge`
turns them into a :class:`Judgement`; the three differ only in how they gather.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from probes.gates import SuiteGate
from soak.judge.limits import (
    CLIENT_OVERLOAD_S,
    MAX_CLIENT_BEHIND,
    MAX_CLIENT_CPU_PERCENT,
    MAX_FAILURES,
    MAX_LOOP_LAG_S,
    MAX_SANITY_SHARE,
)
from soak.judge.thresholds import Threshold, ThresholdState
from soak.record.endurance import Endurance
from soak.record.matrix import MatrixSummary
from soak.record.models import (
    ClientHealth,
    LoadStep,
    LoadSummary,
    PhaseSpan,
    Reason,
    ShardInfo,
    Status,
    WorkloadClassFigures,
)


@dataclass
class RunFacts:
    """Everything the verdict depends on. Every field has the value of a run where that
    part found nothing, so a test (or a gatherer) names only what it has."""

    # -- limits (soak.judge.limits.limits_from_config: the run's config) ------------------
    max_failures: int = MAX_FAILURES
    max_loop_lag_s: float = MAX_LOOP_LAG_S
    client_overload_s: float = CLIENT_OVERLOAD_S
    """How long client CPU overload or in-flight shortfall may last before INVALID."""
    max_client_cpu_percent: float = MAX_CLIENT_CPU_PERCENT
    max_client_behind: float = MAX_CLIENT_BEHIND
    """Share of sampled reads finding bytes queued above which a second is "behind"."""
    require_telemetry: list[str] = field(default_factory=list)
    """``--require-telemetry`` kinds: a lost one FAILS the run."""
    reconcile_strict: bool = False
    """``--reconcile strict``: an unexplained counter mismatch is INVALID."""
    max_sanity_share: float = MAX_SANITY_SHARE
    """Share of completed load responses with a sanity flag above which the run FAILS."""

    # -- how the run went ------------------------------------------------------------------
    preflight_errors: list[str] = field(default_factory=list)
    aborted: str | None = None
    """Why the operator or a signal stopped the run, if they did (a full disk is not an
    abort: ``storage_error``)."""
    stopped: bool | None = None
    """A stop was asked for any reason, a full disk included (None: as ``aborted``)."""
    storage_error: str | None = None
    """Why the run directory could not be written, once it could not."""
    internal_errors: list[str] = field(default_factory=list)
    """soaktop's own failures (see runner.log)."""
    phases: list[PhaseSpan] = field(default_factory=list)
    """The protocol's phases: the operator's pauses are among them."""
    now_s: float | None = None
    """Seconds since the run's origin now: the end of a phase still open."""

    # -- the load ------------------------------------------------------------------------------
    load: LoadSummary | None = None
    matrix: MatrixSummary | None = None
    health: ClientHealth | None = None
    """The client's own health over the run (loop lag, CPU, in-flight shortfall)."""
    steps: Sequence[LoadStep] = ()
    """The load's steps with their figures (stages, sweep, live changes): each judged."""
    classes: Sequence[WorkloadClassFigures] = ()
    """A mix's classes with their figures (``--mix``): what ``class.<name>.*`` thresholds
    are checked against."""

    # -- gates -----------------------------------------------------------------------------
    gates: dict[str, dict[str, SuiteGate]] = field(default_factory=dict)
    """``{phase: {suite: SuiteGate}}`` from probes.jsonl."""
    gates_configured: list[str] = field(default_factory=list)
    """Suites the run was asked to gate on (empty: no gates)."""
    before_blocked: bool = False
    """The before-load gates failed, so no load was run."""
    force_load: bool = False

    # -- telemetry and faults --------------------------------------------------------------
    telemetry: Mapping[str, Any] = field(default_factory=dict)
    """The record's ``telemetry`` as JSON: engines (restarts), /health, server logs,
    coverage, GPU summaries (for a recovered run, what the journals hold of them)."""
    gpu_fault_events: Sequence[Mapping[str, Any]] = ()
    """The GPU sources' ``fault`` events from events.jsonl (each with its verdict words)."""
    reconciliation: Mapping[str, Any] = field(default_factory=dict)
    """The record's ``reconciliation`` as JSON (``soak.judge.reconcile``)."""

    # -- thresholds ------------------------------------------------------------------------
    thresholds: list[Threshold] = field(default_factory=list)
    threshold_live: Sequence[ThresholdState] = ()
    """The live watch's states (their first breaches)."""
    threshold_abort: Threshold | None = None
    """The ``abort`` threshold that stopped the load early, if one did."""

    # -- the timeline --------------------------------------------------------------------
    endurance: Endurance | None = None
    """The record's ``endurance``: drift and leak findings over the window series."""

    shards: Sequence[ShardInfo] = ()
    """A sharded run's shards (``record.shards``): a lost one is INVALID."""

    extra: list[Reason] = field(default_factory=list)
    """Reasons only the gatherer knows (recover's torn journal tails, ...)."""

    @property
    def was_stopped(self) -> bool:
        """A stop was asked (the operator, a signal or a full disk)."""
        return self.stopped if self.stopped is not None else self.aborted is not None


@dataclass(frozen=True)
class Judgement:
    """What :func:`soak.judge.verdict.judge` made of the facts."""

    status: Status
    reasons: list[Reason]
    """Strongest first."""
    thresholds: list[ThresholdState]
    """Each threshold's final state, from the record's figures, with its first live breach
    (the record's ``thresholds``)."""
