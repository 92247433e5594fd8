"""The run record (``record.json``): the final, self-describing result of one run.

Its shape is a contract with ``soaktop verify``, ``compare``, ``decide``, ``report`` and
the TUI's replay, published as JSON Schema in ``schema/record.schema.json`` (and each
``snapshots.jsonl`` line's in ``schema/snapshot.schema.json``), generated from these
models by ``python -m soak.record.schema --write`` and kept current by a test.

**Versions and compatibility.** ``schema_version`` is ``"MAJOR.MINOR"``, in the record
and in every snapshot line.

- A *minor* version adds: a key, a section, a typed model where there was free-form
  JSON. What a key held before keeps its meaning.
- A *major* version changes what a key means, or removes one. A reader refuses a record
  of another major version (its words say which).
- **Readers accept their own minor version and every older one of the same major.** A
  key an older record lacks reads as its default (None, empty); the sections first typed
  in 1.1 keep keys they do not declare instead of refusing them
  (:mod:`soak.record.shape`), since 1.0 held them as free-form JSON. A newer minor's
  unknown *top-level* key is named as a schema problem: the strict readers (view,
  attach, verify, decide) refuse it, compare, runs and report read it through these
  models leniently (:mod:`soak.record.lenient`: it is left out, and named).
- The published schema describes records as this version writes them: a key it lists
  as required is always written by this version (an older record may lack it).

History: **1.0**, the previous release, wrote ``schema_version: 1`` (an integer; read as
``"1.0"``) and free-form telemetry, reconciliation, faults, thresholds and identity
host/gpus/clock/prompt pool. **1.1** types them (:mod:`soak.record.telemetry`,
:mod:`soak.record.gpu_telemetry`, :mod:`soak.record.sections`) without changing a key.
``config`` stays the free-form echo of ``config.json`` (``soak.run.config``'s model owns
its shape, in the room above this one). **1.2** adds the soak's timeline
(:mod:`soak.record.endurance`): the record's ``windows`` and ``endurance``, the
snapshot's ``endurance``, the load summary's response-sanity counts and the
``windows.jsonl`` journal; a 1.1 record reads them as empty. **1.3** adds the recipe
(:mod:`soak.record.recipe`): each endpoint's stated ``recipe`` facts and their
``recipe_sources``, ``/v1/models``' ``root``, the operator's ``identity.recipe`` and the
record's ``caveats`` (what follows from how the run was made); a 1.2 record reads them
as empty and is written back without them. **1.4** adds the load's ``steps`` (stages,
sweep steps, live changes) and its workload ``classes`` (a mix), each with its own
figures, and the journal's ``step`` and ``workload_class``; absent where a load has none.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loadgen.stats import LatencyStats
from probes.gates import SuiteGate
from soak.record.endurance import Endurance, WindowFigures
from soak.record.gpu_telemetry import GpuIdentity
from soak.record.matrix import MatrixSummary
from soak.record.recipe import Recipe
from soak.record.sections import (
    Fault,
    HostFacts,
    PromptPoolFacts,
    Reconciliation,
    RecordCaveat,
    RunClock,
    ServedModel,
    ThresholdState,
)
from soak.record.shape import AbsentUnlessSet
from soak.record.telemetry import RecordTelemetry

SCHEMA_VERSION = "1.4"
"""``MAJOR.MINOR`` of ``record.json`` and of each snapshot line (see the module docstring)."""


def read_schema_version(value: object) -> object:
    """A stored ``schema_version`` as ``"MAJOR.MINOR"``: 1.0 wrote the integer ``1``.

    A version of another major than this soaktop's is refused (ValueError): its keys may
    mean other things."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = f"{value}.0"
    if isinstance(value, str):
        major = value.split(".", 1)[0]
        if major != SCHEMA_VERSION.split(".", 1)[0]:
            raise ValueError(
                f"schema_version {value} is not readable by this soaktop (it reads "
                f"{SCHEMA_VERSION.split('.', 1)[0]}.x)"
            )
    return value


class Status(StrEnum):
    """Whole-run verdict (DESIGN.md §6)."""

    PASSED = "PASSED"
    FAILED = "FAILED"
    INVALID = "INVALID"
    ABORTED = "ABORTED"


EXIT_CODES = {Status.PASSED: 0, Status.FAILED: 1, Status.INVALID: 3, Status.ABORTED: 4}
EXIT_USAGE = 2
EXIT_STORAGE = 5
"""The run directory could not be written (disk full, I/O error, quota): issuing stopped
and the record says why (or, before the first request, no run directory was left)."""
EXIT_DETACHED_OPERATOR = 6
"""The operator detached the monitor (``d``): the run goes on; ``soaktop attach DIR``
follows it again. Distinct from PASSED: nothing is known yet of the run's verdict."""
EXIT_DETACHED_SIGNAL = 128 + 1
"""The CLI detached on a signal (SIGHUP: the terminal went away; any signal to
``attach``), headless or in the monitor: the run goes on and writes its record."""


class Reason(BaseModel):
    """Why the verdict is what it is, in words an operator can act on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    """Stable machine name, e.g. ``load_failures``, ``barrier_not_reached``."""
    effect: Literal["failed", "invalid", "aborted", "note"]
    """What this reason does to the verdict."""
    message: str


class EndpointIdentity(AbsentUnlessSet):
    """What one endpoint (replica) said about itself before the load."""

    model_config = ConfigDict(extra="forbid")
    absent_unless_set: ClassVar[frozenset[str]] = frozenset({"recipe", "recipe_sources"})
    written_by_this_version: ClassVar[frozenset[str]] = absent_unless_set

    url: str
    reachable: bool
    error: str | None = None
    models: list[ServedModel] = Field(default_factory=list)
    """``/v1/models`` entries: id and max_model_len."""
    version: str | None = None
    engine: str | None = None
    """Detected from /metrics names (vllm, sglang, tgi, llamacpp) or /version."""
    cache_config: dict[str, str] = Field(default_factory=dict)
    """vllm:cache_config_info labels (block_size, num_gpu_blocks, ...): the engine's own
    names and string values, kept as it exposes them (open: each vLLM version has its own)."""
    token_slots: int | None = None
    """KV token slots = num_gpu_blocks × block_size."""
    recipe: dict[str, str] = Field(default_factory=dict)
    """What the endpoint stated about its configuration, under the canonical keys of
    ``soak.record.recipe.STATED_KEYS`` (``max_num_seqs``, ``tensor_parallel_size``, …),
    values as strings (schema 1.3)."""
    recipe_sources: list[str] = Field(default_factory=list)
    """Where those facts came from: ``/server_info``, ``/get_server_info``, ``/info``,
    ``/props``, ``/metrics vllm:cache_config_info`` (schema 1.3)."""


class Identity(AbsentUnlessSet):
    """Who was tested, with what, from where."""

    model_config = ConfigDict(extra="forbid")
    absent_unless_set: ClassVar[frozenset[str]] = frozenset({"recipe"})
    written_by_this_version: ClassVar[frozenset[str]] = absent_unless_set

    model: str
    model_served: bool
    engine: str
    endpoints: list[EndpointIdentity]
    config_sha256: str
    prompt_pool: PromptPoolFacts = Field(default_factory=PromptPoolFacts)
    soaktop_version: str
    host: HostFacts = Field(default_factory=HostFacts)
    gpus: list[GpuIdentity] = Field(default_factory=list)
    """NVML/DCGM identity (telemetry layer); empty when no GPU source ran."""
    clock: RunClock = Field(default_factory=RunClock)
    """Wall time at the monotonic origin, to line journals up with server logs."""
    recipe: Recipe = Field(default_factory=Recipe)
    """What the operator declared about the recipe (schema 1.3); what the servers stated
    is each endpoint's ``recipe``: ``soak.record.recipe.recipe_facts`` joins them."""


OPEN_LOOP_FIELDS = (
    "offered_rate",
    "achieved_rate",
    "lateness_s",
    "ttft_from_intended_s",
    "e2e_from_intended_s",
    "held_by_cap",
)
"""The load summary's open-loop figures (``--arrival constant|poisson|gamma`` only)."""


class LoadSummary(AbsentUnlessSet):
    """The load phase: recomputable from ``requests.jsonl`` plus the timing fields."""

    model_config = ConfigDict(extra="forbid")

    absent_unless_set: ClassVar[frozenset[str]] = frozenset(
        {"sanity_checked", "sanity_by_flag", "sanity_flagged", *OPEN_LOOP_FIELDS}
    )
    """Written only by a load that checked its responses (schema 1.2, not ``--no-sanity``):
    an older record, or an unchecked run, reads as ``sanity_checked`` False. The open-loop
    figures (schema 1.3) only by an open-loop load: a closed loop has no schedule."""

    requested_concurrency: int
    workers_started: int
    worker_start_failures: dict[str, int] = Field(default_factory=dict)
    barrier_released: bool
    barrier_released_at: str | None = None
    """UTC wall time the issue window opened."""
    barrier_wait_s: float | None = None
    issued: int = 0
    """Requests issued in the judged window (a soak warm-up's are journaled apart)."""
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    """In-flight requests soaktop cut (see ``cancel_cause``); journaled with partial timings."""
    cancel_cause: str | None = None
    """``drain deadline`` (the server did not finish them in time) or ``abort`` (operator)."""
    backoffs: int = 0
    """Pauses workers took after failures that came before any token (see config
    failure_backoff_max_s): the load was deliberately lighter than requested then."""
    worker_errors: dict[str, int] = Field(default_factory=dict)
    """Workers lost to an exception inside soaktop (the load ran with fewer workers)."""
    failures_by_class: dict[str, int] = Field(default_factory=dict)
    issue_start_s: float | None = None
    """Seconds since the run origin when the barrier released (the issue window opened)."""
    issue_end_s: float | None = None
    """Seconds since the run origin when issuing stopped."""
    issue_s: float | None = None
    """Issue window: barrier release → stop issuing."""
    drain_s: float | None = None
    elapsed_s: float | None = None
    """issue_s + drain_s: the throughput denominator."""
    stop_reason: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    usage_missing: int = 0
    """Successful requests without a usage block (their tokens are unknown, not estimated)."""
    usage_disagrees: int = 0
    """Successful requests that streamed more token-carrying chunks than
    ``usage.completion_tokens`` + 2 can explain (``loadgen.outcome.usage_disagrees``): the
    usage looks wrong. A note; the totals still use usage as reported."""
    usage_disagrees_example: str | None = None
    """The first such request: its id, chunks and completion tokens."""
    empty_answers: int = 0
    """Successful requests with no token-carrying chunk: the server said the generation
    finished after ≥ 1 completion token (a model that ends at once). Not failures, counted
    so that a server answering everything with nothing shows."""
    stale_connection_retries: int = 0
    """Requests resent once on a fresh connection: the pooled connection they were first
    written to had been closed by the server, before any response byte (see README)."""
    sanity_checked: bool = False
    """The load's responses were checked for sanity (``loadgen.sanity``; off with
    ``--no-sanity``, and in records older than the checks): without it the two counts
    below say nothing, not "0 degenerate"."""
    sanity_by_flag: dict[str, int] = Field(default_factory=dict)
    """Completed load responses per sanity flag (one response may have several)."""
    sanity_flagged: int = 0
    """Completed load responses with at least one sanity flag."""
    output_tokens_per_s: float | None = None
    """output_tokens / elapsed_s (drain included)."""
    output_tokens_per_s_issue_window: float | None = None
    """Output tokens of the judged requests that finished inside the issue window
    (``end_s`` ≤ ``issue_end_s``; a judged request is sent inside it, so each counted one
    lies wholly inside) ÷ ``issue_s``. A request still in flight when issuing stopped adds
    nothing, not even the tokens it had received by then: this counts requests finished in
    the window, not tokens received in it (the journal has no per-token counts)."""
    requests_per_s: float | None = None
    """completed / elapsed_s."""
    ttft_s: LatencyStats = Field(default_factory=LatencyStats)
    e2e_s: LatencyStats = Field(default_factory=LatencyStats)
    itl_s: LatencyStats = Field(default_factory=LatencyStats)
    tpot_s: LatencyStats = Field(default_factory=LatencyStats)
    ttfb_s: LatencyStats = Field(default_factory=LatencyStats)
    """Time to the response headers."""
    first_content_s: LatencyStats = Field(default_factory=LatencyStats)
    """Time to the first visible content (differs from TTFT for reasoning models)."""
    input_tokens_mean: float | None = None
    """Actual input tokens per request (server usage), beside the pool's nominal figure."""
    offered_rate: float | None = None
    """Open loop: the schedule's arrivals in the judged window ÷ ``issue_s`` (``--rate``
    is its mean; a Poisson count strays from it by chance)."""
    achieved_rate: float | None = None
    """Open loop: requests sent in the issue window ÷ ``issue_s``."""
    lateness_s: LatencyStats = Field(default_factory=LatencyStats)
    """Open loop: actual send − intended send (the client's, or the cap's, lateness)."""
    ttft_from_intended_s: LatencyStats = Field(default_factory=LatencyStats)
    """Open loop: intended send → first token, lateness included (no coordinated
    omission: a request the client sent late still counts from when it was due)."""
    e2e_from_intended_s: LatencyStats = Field(default_factory=LatencyStats)
    """Open loop: intended send → stream end."""
    held_by_cap: int | None = None
    """Open loop: arrivals that found ``max_in_flight`` requests in flight and waited."""


StepOrigin = Literal["stage", "sweep", "live"]
"""Where a load step came from: a ``--stages`` stage, a ``--sweep`` step, or a live change
of rate or concurrency (the monitor's keys, ``soaktop control``)."""


class LoadStep(AbsentUnlessSet):
    """One step of a load whose target changes during the run (schema 1.4): its span, its
    target, and the figures of the requests sent in it (journal lines ``step == index``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    index: int
    """0-based, in time order; the journal lines' ``step``."""
    origin: StepOrigin
    label: str
    """In words: ``stage 2: 10 → 40 req/s over 120 s``, ``rate=20``, ``live: concurrency 48``."""
    start_s: float
    """Seconds since the run origin: the step's first moment (the previous one's end)."""
    end_s: float | None = None
    """The next step's start, or the issue window's end (None while the step runs)."""
    rate_start: float | None = None
    """Open loop: the target rate (requests/s) at the step's start."""
    rate_end: float | None = None
    """Open loop: the target at its end (differs from ``rate_start`` on a linear ramp)."""
    concurrency_start: int | None = None
    """Closed loop: the target concurrency at the step's start."""
    concurrency_end: int | None = None
    """Closed loop: the target at its end (a ramp adds or parks workers along it)."""
    settle_s: float = 0.0
    """The head of the step left out of its figures (a sweep's settle time): its requests
    are journaled with the step and judged nowhere but the whole load's figures."""
    load: LoadSummary | None = None
    """The step's figures (:func:`soak.record.summary.summarize_load` sliced to the step
    after its settle); None while it runs."""


class WorkloadClassFigures(BaseModel):
    """One class of a mixed load (``--mix``, schema 1.4): its share and its own figures
    (journal lines ``workload_class == name``); the classes' counts sum to the load's."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    weight: float
    """The class's weight as the mix file gave it (its share is weight ÷ the sum)."""
    load: LoadSummary


class ClientHealth(BaseModel):
    """Was the client able to hold the load? Measured, not assumed."""

    model_config = ConfigDict(extra="forbid")

    loop_lag_p99_s: float | None = None
    loop_lag_max_s: float | None = None
    cpu_percent_max: float | None = None
    """Runner process CPU, percent of one core (100 = one core saturated)."""
    rss_mb_max: float | None = None
    threads_max: int | None = None
    open_files_max: int | None = None
    fd_limit: int | None = None
    cpu_over_limit_s: float | None = None
    """Longest stretch of the load with the runner's CPU above ``max_client_cpu_percent``."""
    in_flight_short_s: float | None = None
    """Longest stretch of the issue window with fewer requests in flight than workers
    started (failure back-offs excluded): the load was lighter than requested then."""
    in_flight_short_min: int | None = None
    """Fewest requests in flight during such a stretch."""


class PhaseSpan(BaseModel):
    """One protocol phase on the monotonic timeline."""

    model_config = ConfigDict(extra="forbid")

    name: str
    start_s: float
    end_s: float | None = None


class RunRecord(AbsentUnlessSet):
    """record.json."""

    model_config = ConfigDict(extra="forbid")

    absent_unless_set: ClassVar[frozenset[str]] = frozenset(
        {"windows", "endurance", "caveats", "steps", "classes"}
    )
    """Keys a record older than 1.2 lacks: written back only when given, so reading and
    writing an older record invents nothing."""
    written_by_this_version: ClassVar[frozenset[str]] = frozenset(
        {"windows", "endurance", "caveats"}
    )
    """Finalize and recover always give them (an empty series, a null judgement);
    ``steps`` and ``classes`` only for a load that has them."""

    schema_version: str = SCHEMA_VERSION
    """``MAJOR.MINOR``; 1.0 records hold the integer 1 (read as ``"1.0"``)."""
    run_id: str
    status: Status
    reasons: list[Reason] = Field(default_factory=list)
    exit_code: int
    config: dict[str, Any]
    """The run's configuration as ``config.json`` holds it (``soak.run.config``'s
    ``public_dict``). Left open here: its model lives in the room above, and a record
    must load whatever options the soaktop that wrote it had."""
    identity: Identity | None = None
    load: LoadSummary | None = None
    matrix: MatrixSummary | None = None
    """The matrix profile's cells and repetitions (``soak.record.matrix``); None for a soak."""
    gates: dict[str, dict[str, SuiteGate]] = Field(default_factory=dict)
    """``gates.<phase>.<suite>`` (``probes.gates.SuiteGate``), phases before, canary,
    after; recomputed from ``probes.jsonl``."""
    thresholds: list[ThresholdState] = Field(default_factory=list)
    """Each threshold's final state from the record's exact figures, with its first live
    breach."""
    telemetry: RecordTelemetry = Field(default_factory=RecordTelemetry)
    """Per-source summaries (GPU, engine, host) from the telemetry layer, and ``coverage``:
    each source's answered / expected samples over the load window (``soak.judge.coverage``)."""
    reconciliation: Reconciliation = Field(default_factory=Reconciliation)
    """Client vs server counter deltas per window (``before``, ``load``, ``after``) and
    ``matched`` over all of them (``soak.judge.reconcile``)."""
    faults: list[Fault] = Field(default_factory=list)
    """Every fault, restart and endpoint-down event of the run (``soak.record.faults``):
    ``time_s`` relative to the load start, ``source``, ``kind``, ``detail``."""
    client_health: ClientHealth = Field(default_factory=ClientHealth)
    windows: list[WindowFigures] = Field(default_factory=list)
    """The load cut into windows on one timeline, recomputed from the journals (schema
    1.2; :mod:`soak.record.endurance`)."""
    caveats: list[RecordCaveat] = Field(default_factory=list)
    """What follows from how the run was made and limits what it shows (fixed prompt pool
    cycled, closed loop, drain in the denominator, one run per recipe, …): schema 1.3,
    ``soak.judge.config_caveats``."""
    endurance: Endurance | None = None
    """The run judged on its timeline: drift, leaks, the policy (schema 1.2)."""
    steps: list[LoadStep] = Field(default_factory=list)
    """A load whose target changed (``--stages``, ``--sweep``, live changes): one entry per
    step, each with its own figures (schema 1.4; absent for a load without steps)."""
    classes: list[WorkloadClassFigures] = Field(default_factory=list)
    """A mixed load (``--mix``): each workload class's figures (schema 1.4; absent for a
    load of one class)."""
    phases: list[PhaseSpan] = Field(default_factory=list)
    started_at: str
    ended_at: str
    recovered: bool = False
    """True when ``soaktop recover`` wrote this record from the journals."""
    files: dict[str, str] = Field(default_factory=dict)
    """Journal name → sha256, computed after the journals were closed."""

    @field_validator("schema_version", mode="before")
    @classmethod
    def _read_version(cls, value: object) -> object:
        return read_schema_version(value)


STORAGE_CODES = frozenset({"storage_error", "record_truncated"})
"""Reasons that say the run directory could not be written (exit 5)."""


def exit_code_for(status: Status, reasons: list[Reason]) -> int:
    """The exit code a verdict implies: by status, except that a run whose directory could
    not be written (a journal, or the full record) exits ``EXIT_STORAGE`` (5)."""
    if any(r.code in STORAGE_CODES for r in reasons):
        return EXIT_STORAGE
    return EXIT_CODES[status]


def write_atomic(path: Path, data: bytes) -> None:
    """Write a file so readers see the old or the new content, never half of it.

    A failed write (disk full) raises and leaves no half temporary file behind."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def write_record(run_dir: Path, record: RunRecord) -> None:
    """record.json, atomically."""
    write_atomic(run_dir / "record.json", record.model_dump_json(indent=2).encode() + b"\n")


def load_record(run_dir: Path) -> RunRecord:
    """Read and validate record.json."""
    return RunRecord.model_validate_json((run_dir / "record.json").read_bytes())
