"""The record's and the snapshot's other typed sections: identity's parts, the
client-vs-server reconciliation, the faults timeline, threshold states and live gates.

Each is the JSON its writer produces (named beside each model); see
:mod:`soak.record.shape` for which keys are written when and why unknown keys are kept.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict

from soak.record.shape import Section
from soak.record.trace_facts import TraceFacts

# --- identity ----------------------------------------------------------------------------


class ServedModel(Section):
    """One ``/v1/models`` entry of an endpoint."""

    absent_unless_set = frozenset({"root"})
    written_by_this_version = absent_unless_set

    id: str | None = None
    max_model_len: int | None = None
    root: str | None = None
    """The model path or repository the server loaded (vLLM's ``root``; schema 1.3)."""


class RecordCaveat(Section):
    """One of the record's ``caveats``: a limit on what the run shows (schema 1.3)."""

    code: str
    """Stable machine name: ``prompt_pool_cycled``, ``closed_loop`` / ``open_loop``,
    ``drain_in_denominator``,
    ``one_run``, ``output_length_natural`` / ``output_length_fixed``, ``trace_replay``,
    ``concurrency_not_occupancy``, ``temperature_server_default``, ``warmup_excluded``,
    ``matrix_scout`` (``soak.judge.config_caveats``)."""
    message: str


class PromptPoolFacts(Section):
    """``identity.prompt_pool`` (``loadgen.prompts.PromptPool.describe``); empty when the
    run had no pool (a gates-only run)."""

    absent_unless_set = frozenset(
        {"source", "size", "sha256", "unique_prefix", "nominal_input_tokens_mean", "trace"}
    )

    source: str | None = None
    """``synthetic:128`` or ``FILE`` (``FILE:<redacted>`` with --redact)."""
    size: int | None = None
    sha256: str | None = None
    unique_prefix: bool | None = None
    nominal_input_tokens_mean: float | None = None
    trace: TraceFacts | None = None
    """A trace replay's file and calibration (``--arrival trace:FILE`` only)."""


class HostFacts(Section):
    """``identity.host``: where soaktop ran."""

    python: str | None = None
    platform: str | None = None
    event_loop: str | None = None
    """``uvloop`` or ``asyncio``: part of the client's measured CPU cost per token."""
    hostname: str | None = None
    """A pseudonym with --redact (runs of one machine stay comparable)."""


class RunClock(Section):
    """``identity.clock``: wall time at the run's monotonic origin, to line journals up
    with server logs."""

    wall_at_origin: float | None = None
    """Epoch seconds."""
    started_at: str | None = None


# --- reconciliation (soak.judge.reconcile) -----------------------------------------------


class CounterComparison(Section):
    """One counter of one window: what the client received against the server's delta."""

    absent_unless_set = frozenset({"difference", "difference_pct", "why"})

    status: str | None = None
    """``matched``, ``mismatched`` or ``unavailable`` (with ``why``)."""
    client: int = 0
    server: float | None = None
    difference: float | None = None
    """server - client."""
    difference_pct: float | None = None
    why: str | None = None


class CounterReset(Section):
    """A server restart inside the window (its counts from before it are gone)."""

    endpoint: int | None = None
    t_s: float | None = None
    at: str | None = None
    """The time in words (``at load+00:17:02``)."""


class ReconciledWindow(Section):
    """One window (before gates, load, after gates): the three counters and ``matched``
    (True: all matched; False: one mismatched; None: some could not be compared)."""

    absent_unless_set = frozenset(
        {
            "unavailable",
            "errors",
            "counter_resets",
            "note",
            "unfinished",
            "includes_canary_requests",
        }
    )

    window: str | None = None
    matched: bool | None = None
    unavailable: str | None = None
    """Why no counter of the window could be compared."""
    errors: dict[str, str] | None = None
    """``/metrics`` failures at the window's edges, by kind."""
    requests: CounterComparison | None = None
    prompt_tokens: CounterComparison | None = None
    generation_tokens: CounterComparison | None = None
    counter_resets: list[CounterReset] | list[str] | None = None
    """The restarts inside the window, or the counters that went down between its edges."""
    note: str | None = None
    unfinished: int | None = None
    """Requests that failed or were cut (the server may have counted work never seen)."""
    includes_canary_requests: int | None = None


class Reconciliation(Section):
    """The record's ``reconciliation``: ``matched`` over every window, and the windows
    (``before``, ``load``, ``after``); empty when no window had counters to compare."""

    absent_unless_set = frozenset({"matched", "before", "load", "after"})

    matched: bool | None = None
    before: ReconciledWindow | None = None
    load: ReconciledWindow | None = None
    after: ReconciledWindow | None = None


# --- faults (soak.record.faults) ---------------------------------------------------------


class Fault(Section):
    """``faults[i]``: a fault, restart or endpoint-down event of the run."""

    absent_unless_set = frozenset({"replica", "endpoint", "gpu", "xid", "ignored", "incident"})
    written_by_this_version = frozenset({"incident"})

    time_s: float | None = None
    """Seconds since the load's start (None when no load ran)."""
    t_s: float | None = None
    """Seconds since the run's origin."""
    source: str | None = None
    """``server log``, ``health``, ``engine metrics``, ``gpu (dcgm)``, ``gpu (nvml)``."""
    kind: str | None = None
    severity: str | None = None
    detail: str | None = None
    replica: int | None = None
    endpoint: int | None = None
    gpu: int | None = None
    xid: int | None = None
    ignored: bool | None = None
    """An Xid waived by --ignore-xid."""
    incident: int | None = None
    """Which distinct fault this report is (1, 2, …): one Xid seen by DCGM, NVML and the
    server log (its kernel line and the CUDA error it caused) is one fault with several
    reports, each kept (``soak.record.faults``; schema 1.3)."""


# --- thresholds and live gates -----------------------------------------------------------


class ThresholdState(Section):
    """A threshold checked against one set of figures (``soak.judge.thresholds``): live
    in each snapshot, final in the record."""

    model_config = ConfigDict(frozen=True)

    expr: str
    condition: str
    metric: str
    state: Literal["ok", "breached", "no_data"]
    observed: float | None
    limit: float
    source: str
    """Where the figure came from, e.g. ``live histogram (1 % buckets)``."""
    first_breach_s: float | None = None
    """Seconds since the run origin when it was first breached live (a ThresholdWatch)."""


class GateProgress(Section):
    """``gates.<phase>.<suite>`` of a snapshot: one suite's tasks so far."""

    absent_unless_set = frozenset({"rounds"})

    passed: int = 0
    total: int = 0
    """Tasks of the suite (planned; sent, for canaries)."""
    done: int = 0
    failed: int = 0
    rounds: int | None = None
    """Canary rounds that ran this suite."""
