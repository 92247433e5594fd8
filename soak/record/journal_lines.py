"""The models of the journal lines: ``requests.jsonl``, ``events.jsonl``, ``probes.jsonl``
and ``telemetry.jsonl`` (``snapshots.jsonl`` is :class:`~soak.record.snapshot.Snapshot`).

These are the readers' side of the journals and the source of their published JSON Schema
(``schema/*.schema.json``, :mod:`soak.record.schema`). The writers do not validate
through them: ``requests.jsonl`` is written on the measuring path, one ``orjson`` dict a
request (:func:`soak.record.journal.request_line`), and the watchers write plain dicts.
That a writer's lines are exactly these models is a test's work (a real run's every line,
unknown keys refused: ``tests/core/test_journal_lines.py``), so neither can drift silently.

- :class:`RequestLine`: one request, the keys ``request_line`` writes.
- :class:`~soak.record.events.Event` is an events line; its ``data`` stays an open
  mapping (each kind says what it wants). The kinds the after-the-run readers (recover,
  verify) rely on have a model of their ``data``, read with :func:`event_data`:
  :class:`PhaseData`, :class:`BarrierData`, :class:`ThresholdData`, :class:`FaultData`.
  Their other keys are allowed and kept.
- :data:`ProbeLine`: one probe attempt (:class:`probes.probe_record.ProbeResult`).
- :class:`TelemetryLine`: one watcher line, by its ``source``: :class:`EngineLine`,
  :class:`HostLine`, :class:`NvmlLine`, :class:`DcgmLine`.

Every line model refuses keys it does not declare (``extra="forbid"``), as
:class:`~soak.record.events.Event` and :class:`~soak.record.snapshot.Snapshot` do: a
reader of another version's lines reads them through :func:`soak.record.lenient.read`,
which leaves unknown keys out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
)

from loadgen.envelope import FailureClass
from probes.gpu_reading import GpuReading
from probes.nvml import NvmlReading
from probes.probe_record import ProbeResult
from probes.server_histogram import Histogram
from soak.record import lenient
from soak.record.events import Event
from soak.record.journal import read_jsonl
from soak.record.shape import AbsentUnlessSet
from soak.record.telemetry import ClientProcessSample, ServerProcessSample, SystemSample


class JournalLine(BaseModel):
    """A journal line's model: exactly the keys its writer writes."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    absent_unless_set: ClassVar[frozenset[str]] = frozenset()
    """Keys the writer leaves out of some lines (not *required* in the published schema)."""


# --- requests.jsonl ------------------------------------------------------------------------


class RequestLine(JournalLine, AbsentUnlessSet):
    """One line of ``requests.jsonl`` (:func:`soak.record.journal.request_line`): times in
    seconds since the run's monotonic origin (``sent_s``, ``end_s``), durations in seconds
    from ``sent`` (``ttfb_s``, ``ttft_s``, ``first_content_s``, ``e2e_s``). ``None``: it
    did not happen, or the server did not say (never 0)."""

    absent_unless_set = frozenset(
        {
            "sanity",
            "intended_s",
            "workload_class",
            "step",
            "session",
            "turn",
            "answer_truncated",
            "queue_samples",
            "queue_hits",
            "queued_bytes_max",
            "shard",
        }
    )

    id: str
    phase: str
    """``load``, or a matrix cell's phase (``warmup``, ``rep``)."""
    worker: int
    prompt: int
    ok: bool
    sent_s: float
    end_s: float | None
    ttfb_s: float | None
    ttft_s: float | None
    first_content_s: float | None
    e2e_s: float | None
    status: int | None
    """HTTP status; None when no response arrived."""
    failure: FailureClass | None
    detail: str | None
    """The failure in words."""
    prompt_tokens: int | None
    output_tokens: int | None
    chunks: int
    finish: str | None
    cancelled: bool
    stale_retry: bool
    """Resent on a fresh connection after a stale pooled one failed."""
    itl_us: list[int]
    """Inter-token gaps in whole microseconds."""
    sanity: list[str] = Field(default_factory=list)
    """The sanity flags of a completed response (``loadgen.sanity.SanityFlag``); written
    only when there is one."""
    intended_s: float | None = None
    """Open loop only (``--arrival constant|poisson|gamma``): when the schedule meant the
    request to be sent, on the clock of ``sent_s``; ``sent_s`` − ``intended_s`` is the
    client's lateness. Absent from closed-loop lines."""
    workload_class: str | None = None
    """A mixed load only (``--mix``): the request's workload class name. Absent otherwise."""
    step: int | None = None
    """A load with steps only (``--stages``, ``--sweep``, live changes): the 0-based step
    the request was sent in (``record.steps[step]``). Absent otherwise."""
    session: int | None = None
    """A conversation load only (``--turns``): the session's number (0-based, in start
    order; ``loadgen.conversation``). Absent otherwise."""
    turn: int | None = None
    """A conversation load only: the turn within its session, 1-based (``record.turns``).
    Absent otherwise."""
    answer_truncated: bool = False
    """A conversation's answer past the client's 64 KiB bound (``loadgen.answer_text``):
    the next turn's history held only its head. Written only when true."""
    queue_samples: int | None = None
    """Receive-queue samples of the stream's reads (``loadgen.read_health``). Written, with
    the next two, only when a sample found bytes queued: a client that keeps up leaves the
    line as it was."""
    queue_hits: int | None = None
    """Samples that found bytes already waiting in the socket: this request's timings
    include the client's own queueing."""
    queued_bytes_max: int | None = None
    """The most bytes a sample found waiting."""
    shard: int | None = Field(None, ge=0)
    """A sharded run only (``--shards``): the 0-based shard that sent the request
    (``record.shards[shard]``). Absent otherwise."""


# --- events.jsonl: the data of the kinds recover and verify read ----------------------------


class EventData(BaseModel):
    """An event's ``data``: the keys a reader relies on, typed; any other key is kept."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)


class PhaseData(EventData):
    """A ``phase`` event: the protocol phase that began."""

    phase: str = "?"


class BarrierData(EventData):
    """The ``barrier`` event: how many workers started before the release."""

    requested: int | None = None
    """The concurrency asked for (None: not said; the config's is meant)."""
    workers_started: int = 0
    failures: dict[str, int] = Field(default_factory=dict)
    """Worker start failures by their words."""


class ThresholdData(EventData):
    """A ``threshold`` event: which threshold (a live breach, or the abort: ``error``)."""

    expr: str | None = None


class FaultData(EventData):
    """A ``fault`` event: a server-log line, a server process that exited, or a GPU
    source's fault (which carries its verdict words, ``reason`` and ``effect``)."""

    source: str | None = None
    """``nvml`` or ``dcgm`` for a GPU fault; else None."""
    fault: str | None = None
    """The fault's kind (``xid``, ``server_process_exited``, a log pattern's name)."""
    t_s: float | None = None
    """When the source read it (else the event's ``t``)."""
    reason: str | None = None
    """A GPU fault's verdict words."""
    effect: Literal["failed", "note"] | None = None
    line: str | None = None
    """The server-log line."""


D = TypeVar("D", bound=EventData)


def event_data(ev: Event, model: type[D]) -> D:
    """``ev.data`` as ``model``: a key of the wrong type raises ``ValidationError`` (a
    ``ValueError``: the line is damaged); a key it lacks reads as its default."""
    return model.model_validate(ev.data)


class JournalLineError(ValueError):
    """A journal line that parses as JSON but holds a value of the wrong type: damage (a
    hand edit, a disk error), not another version's line."""


_ANOTHER_VERSION = lenient.VERSION_DIFFERENCES | {"literal_error"}
"""What another soaktop version's event differs by: keys added or dropped, and a word
(``kind``, ``severity``) this version does not know."""


def read_event(line: Mapping[str, Any]) -> Event | None:
    """One parsed ``events.jsonl`` line as an :class:`Event`, leniently: a key this
    version does not declare is left out and a missing one filled (``message``: ``""``),
    but a line without its time ``t`` or of a kind this version does not know is not
    read (None: skipped). Raises :class:`JournalLineError` for a value of the wrong type
    (a ``t`` that is not a number, a ``data`` that is not an object): the journal is
    damaged, and what is read past it cannot be said to be the run's."""
    read = lenient.read(
        Event, line, on_wrong_type="refuse", on_item_missing="fill", must_have=_EVENT_TIME
    )
    if read.value is not None or read.error is None:
        return read.value
    damage = [e for e in read.error.errors() if e["type"] not in _ANOTHER_VERSION]
    if damage:
        where = ".".join(map(str, damage[0]["loc"]))
        raise JournalLineError(f"events.jsonl: {where}: {damage[0]['msg']}")
    return None


_EVENT_TIME = frozenset({("t",)})


def read_events(path: Path) -> list[Event]:
    """Every event of an ``events.jsonl`` (:func:`read_event`; lines that are not JSON
    objects, and a torn last line, are skipped as :func:`~soak.record.journal.read_jsonl`
    skips them)."""
    return [ev for line in read_jsonl(path) if (ev := read_event(line)) is not None]


# --- probes.jsonl --------------------------------------------------------------------------

ProbeLine = ProbeResult
"""One line of ``probes.jsonl``: a probe attempt as ``soak.run.gate_session`` writes it
(``ProbeResult.model_dump``, the ``reason`` redacted when redaction is on)."""


# --- telemetry.jsonl -----------------------------------------------------------------------


class EngineLine(JournalLine):
    """An engine ``/metrics`` scrape (``soak.watch.engine``: ``probes.engine_metrics.
    EngineSample`` with its endpoint); a failed scrape has ``error`` and no values."""

    source: Literal["engine"]
    endpoint: int
    t: float
    engine: str | None
    values: dict[str, float | None]
    """Every ``probes.engine_metrics.VOCABULARY`` key (empty when the scrape failed)."""
    finished_by_reason: dict[str, float]
    error: str | None
    histograms: dict[str, Histogram]
    cache_config: dict[str, str]
    engines: dict[str, dict[str, float | None]]


class HostLine(JournalLine):
    """A host tick (``soak.watch.host``): soaktop's process, the host, the servers'."""

    absent_unless_set = frozenset({"servers"})

    source: Literal["host"]
    t: float
    client: ClientProcessSample
    system: SystemSample
    servers: list[ServerProcessSample] = Field(default_factory=list)
    """Only when server processes are watched (``--server-pid``)."""


class NvmlDeviceLine(JournalLine):
    """One GPU as NVML listed it when opened."""

    index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    memory_total_mib: float | None


class NvmlLine(JournalLine):
    """An NVML line (``soak.watch.gpu.nvml``): the devices when opened, a read's GPUs, a
    failed read's ``error``, or NVML unavailable (``status`` and ``error``)."""

    absent_unless_set = frozenset(
        {"driver_version", "cuda_driver_version", "devices", "gpus", "status", "error"}
    )

    source: Literal["nvml"]
    t: float
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    devices: list[NvmlDeviceLine] = Field(default_factory=list)
    gpus: list[NvmlReading] = Field(default_factory=list)
    status: Literal["unavailable"] | None = None
    error: str | None = None


class DcgmLine(JournalLine):
    """A DCGM exporter scrape (``soak.watch.gpu.dcgm``): its GPUs, or a failed scrape's
    ``error``."""

    absent_unless_set = frozenset({"gpus", "error"})

    source: Literal["dcgm"]
    url_index: int
    t: float
    gpus: list[GpuReading] = Field(default_factory=list)
    error: str | None = None


AnyTelemetryLine = Annotated[
    EngineLine | HostLine | NvmlLine | DcgmLine, Field(discriminator="source")
]


class TelemetryLine(RootModel[AnyTelemetryLine]):
    """One line of ``telemetry.jsonl``, the model its ``source`` names."""

    @classmethod
    def parse(cls, obj: Any) -> EngineLine | HostLine | NvmlLine | DcgmLine:
        """``obj`` (a parsed line) as its source's model; ``ValidationError`` if it is not."""
        return cls.model_validate(obj).root
