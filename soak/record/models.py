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

from probes.gates import SuiteGate
from soak.record.endurance import Endurance, WindowFigures
from soak.record.gpu_telemetry import GpuIdentity
from soak.record.load_slices import LoadStep as LoadStep
from soak.record.load_slices import SessionFigures as SessionFigures
from soak.record.load_slices import StepOrigin as StepOrigin
from soak.record.load_slices import SweepResult as SweepResult
from soak.record.load_slices import TurnFigures as TurnFigures
from soak.record.load_slices import WorkloadClassFigures as WorkloadClassFigures
from soak.record.load_summary import OPEN_LOOP_FIELDS as OPEN_LOOP_FIELDS
from soak.record.load_summary import LoadSummary as LoadSummary
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


class ClientHealth(AbsentUnlessSet):
    """Was the client able to hold the load? Measured, not assumed."""

    model_config = ConfigDict(extra="forbid")
    absent_unless_set: ClassVar[frozenset[str]] = frozenset(
        {
            "behind_fraction",
            "behind_samples",
            "behind_over_limit_s",
            "behind_fraction_in_streak",
            "events_per_read",
        }
    )
    """The socket figures (``loadgen.read_health``) a record older than them lacks."""
    written_by_this_version: ClassVar[frozenset[str]] = absent_unless_set

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
    behind_fraction: float | None = None
    """Share of the load's sampled socket reads (``loadgen.read_health``) that found bytes
    already waiting in the kernel's receive queue: the server had written more than the
    client had read. None: not measured (no stream long enough, or no socket to ask)."""
    behind_samples: int | None = None
    """How many reads were sampled over the load."""
    behind_over_limit_s: float | None = None
    """Longest stretch of the load with each second's behind share above
    ``max_client_behind`` (seconds with too few samples to say end a stretch)."""
    behind_fraction_in_streak: float | None = None
    """The mean of those seconds' shares over that stretch."""
    events_per_read: float | None = None
    """Token events per token-carrying read over the load: 1.0 when every read held one
    event, as a client that keeps up reads a paced server; more, the events piled up."""


class ShardInfo(BaseModel):
    """One load shard of a sharded run (``--shards N``: :mod:`soak.run.shards`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    index: int = Field(ge=0)
    """0-based; the journal's ``shard`` on each of its requests."""
    host: str
    """Where it ran: ``local`` (the coordinator's host; no pid: it means nothing later)."""
    workers: int = Field(ge=0)
    """Its share of the closed loop's workers (worker ``i`` of shard ``k`` of ``n`` is
    the run's worker ``i * n + k``)."""
    requests: int = Field(ge=0)
    """Its requests in ``requests.jsonl`` (``verify`` counts them again)."""
    release_offset_s: float | None = None
    """When it released its workers, from the coordinator's release (one host, one
    monotonic clock: no clock offset to measure); None: never released."""
    loop_lag_p99_s: float | None = None
    """Its event loop's lag, p99 of the per-second maxima over the load."""
    cpu_s: float | None = None
    """CPU seconds its process used (user + system): the client's cost, not in the
    coordinator's own ``client_health`` CPU figures."""
    status: Literal["done", "lost"]
    """``lost``: it exited before it reported its end; the run is INVALID (``shard_lost``)."""
    exit_code: int | None = None
    """Its process's exit status (negative: killed by that signal)."""
    lost_at_s: float | None = None
    """A lost shard: when the coordinator saw it go, on the run's timeline."""
    in_flight_at_loss: int | None = None
    """A lost shard: its requests in flight by its last heartbeat; none of them is in the
    journal."""
    lost_why: str | None = None
    """A lost shard on another host (``--ray``): what was lost (its host, its actor)."""
    node_id: str | None = None
    """``--ray``: the Ray node it ran on (``host`` is that node's address)."""
    clock_offset_ns: int | None = None
    """``--ray``: its host's monotonic clock minus the coordinator's at its start, ns
    (the fastest of several round trips); its results were shifted by it onto the run's
    timeline. None: one host, one clock."""
    clock_uncertainty_ns: int | None = None
    """``--ray``: half that fastest round trip: the offset is right within this."""
    clock_offset_end_ns: int | None = None
    """``--ray``: the offset measured again at its end (the drift is the difference)."""
    clock_uncertainty_end_ns: int | None = None
    """``--ray``: the end measurement's uncertainty."""
    journal_sha256: str | None = None
    """``--ray``: sha256 of everything it wrote, as its host journaled it."""
    journal_lines: int | None = None
    """``--ray``: the lines of that journal on its host."""
    journal_path: str | None = None
    """``--ray``: where that journal is on its host (to fetch it and check it again)."""
    received_sha256: str | None = None
    """``--ray``: sha256 of the bytes the coordinator received from it (equal to
    ``journal_sha256``, or the run is INVALID: ``shard_journal_mismatch``)."""
    received_lines: int | None = None
    """``--ray``: the lines the coordinator received from it."""


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
        {
            "windows",
            "endurance",
            "caveats",
            "steps",
            "classes",
            "turns",
            "sessions",
            "sweep",
            "shards",
        }
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
    turns: list[TurnFigures] = Field(default_factory=list)
    """A conversation load (``--turns``): each turn's figures (schema 1.4; else absent)."""
    sessions: SessionFigures | None = None
    """A conversation load: what its sessions became (schema 1.4; else absent)."""
    sweep: SweepResult | None = None
    """A sweep (``--sweep``): its SLO and knee; each step's goodput is in ``steps``
    (schema 1.4; else absent)."""
    shards: list[ShardInfo] = Field(default_factory=list)
    """A sharded run (``--shards N``): each load shard, its requests and its fate (absent
    for a run in one process)."""
    phases: list[PhaseSpan] = Field(default_factory=list)
    started_at: str
    """UTC wall time the run started (a recovered record: its first event's)."""
    ended_at: str
    """UTC wall time the run ended: when its record was written, or for a recovered
    record the last moment its journals show (the last event's or snapshot's)."""
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
