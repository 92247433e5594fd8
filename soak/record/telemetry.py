"""The telemetry sections: the snapshot's live views and the record's summaries.

One model per entry a watcher writes (``soak.watch``: engine ``/metrics``, ``/health`` and
server logs, the host, the GPU sources; ``soak.judge.coverage``), under the names the
JSON has. The snapshot's ``telemetry`` (:class:`SnapshotTelemetry`) holds the latest
values; the record's (:class:`RecordTelemetry`) the summaries over the run. GPU entries
live in :mod:`soak.record.gpu_telemetry`. See :mod:`soak.record.shape` for which keys
are written when.
"""

from __future__ import annotations

from pydantic import Field

from probes.server_histogram import estimate_words
from soak.record.gpu_telemetry import GpuSourceStatus, GpuSummary, GpuView
from soak.record.shape import Section

# --- engine /metrics ---------------------------------------------------------------------


class HistogramBucket(Section):
    """The bucket that holds one estimated percentile: the estimate's resolution (schema
    1.3). Where inside it the percentile lies is an assumption of the interpolation."""

    lower: float = 0.0
    """Its lower bound, seconds: the bound below it; 0 for the first bucket (Prometheus'
    assumption), where the estimate only says "at most ``upper``"."""
    upper: float | None = None
    """Its upper bound (``le``), seconds; None for the +Inf bucket (the estimate is then
    the highest finite bound, a lower bound of the truth)."""


class ServerLatency(Section):
    """One server histogram (TTFT, E2E or queue time) over a window: percentiles by
    bucket interpolation (``probes.engine_metrics.server_latency``); None: nothing seen.
    Shown with their buckets (``probes.server_histogram.estimate_words``)."""

    absent_unless_set = frozenset({"note", "buckets"})

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None
    n: int = 0
    """Observations in the window."""
    method: str = ""
    note: str | None = None
    """A counter reset or the +Inf bucket shaped the numbers."""
    buckets: dict[str, HistogramBucket] = Field(default_factory=dict)
    """``p50``, ``p90``, ``p99`` → the bucket that holds it (schema 1.3; absent in older
    records and where no percentile was estimated)."""

    def shown(self, quantile: str) -> str:
        """One percentile with its resolution: ``≈ 4.93 s (histogram: 2.5–5 s bucket)``,
        ``≤ 0.3 s (first bucket)`` (``probes.server_histogram.estimate_words``)."""
        value = {"p50": self.p50, "p90": self.p90, "p99": self.p99}[quantile]
        b = self.buckets.get(quantile)
        return estimate_words(value, b.lower if b else None, b.upper if b else None)


class EngineView(Section):
    """``telemetry.engines[i]`` of a snapshot: the latest scrape of one endpoint.

    ``status`` is ``ok`` (then the time and every vocabulary value, None where the engine
    does not export it; ``probes.engine_metrics.VOCABULARY``), ``scrape failed`` (with
    ``error``) or ``no data yet``."""

    absent_unless_set = frozenset(
        {
            "error",
            "t",
            "running",
            "waiting",
            "kv_usage",
            "preemptions_total",
            "prompt_tokens_total",
            "generation_tokens_total",
            "requests_finished_total",
            "prefix_cache_hits_total",
            "prefix_cache_queries_total",
            "prefix_cache_hit_rate",
            "spec_decode_drafts_total",
            "spec_decode_draft_tokens_total",
            "spec_decode_accepted_tokens_total",
            "spec_accept_rate",
            "token_slots",
            "server_ttft_s",
        }
    )

    endpoint: int | None = None
    status: str | None = None
    error: str | None = None
    t: float | None = None
    """Seconds since the run's origin the scrape began."""
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    preemptions_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    requests_finished_total: float | None = None
    prefix_cache_hits_total: float | None = None
    prefix_cache_queries_total: float | None = None
    prefix_cache_hit_rate: float | None = None
    spec_decode_drafts_total: float | None = None
    spec_decode_draft_tokens_total: float | None = None
    spec_decode_accepted_tokens_total: float | None = None
    spec_accept_rate: float | None = None
    token_slots: float | None = None
    server_ttft_s: ServerLatency | None = None
    """The server's own TTFT estimate since the barrier (None: not exported)."""


class EngineRestart(Section):
    """Engine counters went down between two scrapes: the server restarted."""

    t: float | None = None
    """Seconds since the run's origin (the scrape that saw it)."""
    counters: list[str] = Field(default_factory=list)


class EnginePeaks(Section):
    """The peaks of one engine behind an endpoint (vLLM ``engine``, SGLang ``dp_rank``)."""

    engine_label: str | None = None
    running_max: float | None = None
    waiting_max: float | None = None
    kv_usage_max: float | None = None


class PrefixCache(Section):
    """Prefix-cache hits over the load's window: a counter delta, or the engine's gauge."""

    absent_unless_set = frozenset({"hits", "queries"})

    hits: float | None = None
    queries: float | None = None
    hit_rate: float | None = None
    method: str = ""


class SpecDecode(Section):
    """Speculative decoding over the load's window: a counter delta, or the engine's
    acceptance gauge."""

    absent_unless_set = frozenset(
        {"drafts", "draft_tokens", "accepted_tokens", "mean_acceptance_length"}
    )

    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    method: str = ""


class ClientTtft(Section):
    """The client's exact TTFT of the requests it sent to one endpoint."""

    n: int = 0
    p50: float | None = None
    p99: float | None = None


class TtftGap(Section):
    """Client TTFT minus the server's estimate: time the server's histogram does not see."""

    absent_unless_set = frozenset({"p50", "p99"})

    p50: float | None = None
    p99: float | None = None


class EngineSummary(Section):
    """``telemetry.engines[i]`` of the record: one endpoint over the load
    (``soak.watch.engine.EngineWatch.summary``; the client's TTFT beside the server's from
    ``soak.run.finalize``)."""

    absent_unless_set = frozenset({"per_engine", "client_ttft_s", "ttft_gap_s"})

    endpoint: int | None = None
    engine: str | None = None
    running_max: float | None = None
    running_mean: float | None = None
    waiting_max: float | None = None
    kv_usage_max: float | None = None
    token_slots: float | None = None
    cache_config: dict[str, str] = Field(default_factory=dict)
    """vLLM's ``cache_config_info`` labels as the engine exposes them (its own names)."""
    scrapes: int = 0
    scrape_errors: int = 0
    restarts: list[EngineRestart] = Field(default_factory=list)
    window_s: list[float] | None = None
    """[first, last] scrape of the load's window (seconds since the origin)."""
    preemptions: float | None = None
    prefix_cache: PrefixCache | None = None
    spec_decode: SpecDecode | None = None
    per_engine: list[EnginePeaks] = Field(default_factory=list)
    """Only when several engines share the endpoint."""
    server_ttft_s: ServerLatency | None = None
    server_e2e_s: ServerLatency | None = None
    server_queue_s: ServerLatency | None = None
    client_ttft_s: ClientTtft | None = None
    ttft_gap_s: TtftGap | None = None


# --- /health and server logs -------------------------------------------------------------


class HealthView(Section):
    """``telemetry.health[i]`` of a snapshot: one endpoint's latest /health check."""

    endpoint: int | None = None
    state: str | None = None
    """``ok`` or the error kind now; None before the first check."""
    ok: bool | None = None
    status: int | None = None
    """The last answer's HTTP status (None: no answer)."""
    latency_s: float | None = None
    down_for_s: float | None = None
    failures: int = 0


class HealthSummary(Section):
    """``telemetry.health[i]`` of the record: one endpoint's checks over the run."""

    absent_unless_set = frozenset({"client_errors", "client_errors_longest_s", "not_served"})

    endpoint: int | None = None
    checks: int = 0
    failures: int = 0
    outages: int = 0
    down_s: float = 0.0
    longest_outage_s: float = 0.0
    state: str | None = None
    failures_by_kind: dict[str, int] = Field(default_factory=dict)
    client_errors: dict[str, int] = Field(default_factory=dict)
    """Checks the client could not send, by kind (its own failure, not the server's)."""
    client_errors_longest_s: float | None = None
    not_served: str | None = None
    """``HTTP 404``: the endpoint serves no /health."""


class ServerLogView(Section):
    """``telemetry.server_logs[i]`` of a snapshot: fault lines per kind so far."""

    source: str | None = None
    replica: int | None = None
    faults: dict[str, int] = Field(default_factory=dict)


class FirstFault(Section):
    """The first log line of one fault kind."""

    t_s: float | None = None
    severity: str | None = None
    summary: str | None = None
    line: str | None = None
    """The line (scrubbed), or ``<line not kept: --redact>``."""


class ServerLogSummary(ServerLogView):
    """``telemetry.server_logs[i]`` of the record: lines read, fault counts and the first
    line of each kind."""

    lines: int = 0
    first: dict[str, FirstFault] = Field(default_factory=dict)


# --- the host ----------------------------------------------------------------------------


class ClientProcessSample(Section):
    """The runner's own process at one tick."""

    cpu_percent: float | None = None
    rss_mb: float | None = None
    threads: int | None = None
    open_files: int | None = None
    fd_limit: int | None = None


class SystemSample(Section):
    """The host as a whole at one tick."""

    cpu_percent: float | None = None
    cpus: int | None = None
    mem_available_mib: int | None = None
    mem_total_mib: int | None = None
    load1: float | None = None


class ServerProcessSample(Section):
    """One ``--server-pid`` process at one tick (figures only while it lives)."""

    absent_unless_set = frozenset({"cpu_percent", "rss_mb", "threads"})

    pid: int | None = None
    name: str | None = None
    status: str | None = None
    """``ok`` or ``exited``."""
    cpu_percent: float | None = None
    rss_mb: float | None = None
    threads: int | None = None


class HostView(Section):
    """``telemetry.host`` of a snapshot: the latest host line (empty before the first)."""

    absent_unless_set = frozenset({"t", "client", "system", "servers"})

    t: float | None = None
    client: ClientProcessSample | None = None
    system: SystemSample | None = None
    servers: list[ServerProcessSample] = Field(default_factory=list)


class ServerProcessSummary(Section):
    """One ``--server-pid`` process over the load."""

    pid: int | None = None
    name: str | None = None
    cpu_percent_mean: float | None = None
    cpu_percent_max: float | None = None
    rss_mb_max: float | None = None
    exited_at_s: float | None = None


class HostSummary(Section):
    """``telemetry.host`` of the record: the runner's CPU over the load and the server
    processes'."""

    absent_unless_set = frozenset({"servers"})

    client_cpu_percent_mean: float | None = None
    client_cpu_percent_max: float | None = None
    cpus: int | None = None
    servers: list[ServerProcessSummary] = Field(default_factory=list)


# --- coverage ----------------------------------------------------------------------------


class CoverageEntry(Section):
    """One key's samples over the load window (``soak.judge.coverage.Coverage``)."""

    absent_unless_set = frozenset({"failures", "lines_read"})

    answered: int = 0
    expected: int = 0
    share: float | None = None
    """answered / expected, rounded to 3 places; None when nothing was expected."""
    lost: bool = False
    why: str | None = None
    """The commonest reason a sample was not answered."""
    failures: dict[str, int] = Field(default_factory=dict)
    lines_read: int | None = None
    """Server logs only."""


CoverageBySource = dict[str, dict[str, CoverageEntry]]
"""``{source: {key: entry}}``: source ``engine_metrics``, ``health``, ``server_log``,
``dcgm``, ``nvml``, ``host``; key the endpoint, log, exporter or ``host``."""


# --- the sections ------------------------------------------------------------------------


class SnapshotTelemetry(Section):
    """A snapshot's ``telemetry``: what each watcher that runs shows now."""

    absent_unless_set = frozenset({"engines", "gpus", "health", "server_logs", "host", "coverage"})

    engines: list[EngineView] = Field(default_factory=list)
    gpus: list[GpuView] = Field(default_factory=list)
    health: list[HealthView] = Field(default_factory=list)
    server_logs: list[ServerLogView] = Field(default_factory=list)
    host: HostView | None = None
    coverage: CoverageBySource = Field(default_factory=dict)
    """Once the load window opened."""


class RecordTelemetry(Section):
    """The record's ``telemetry``: each watcher's summary over the run. Empty when the
    record had to be written without it (``record_truncated``) or was recovered."""

    absent_unless_set = frozenset(
        {"engines", "health", "server_logs", "host", "gpus", "gpu_sources", "coverage"}
    )

    engines: list[EngineSummary] = Field(default_factory=list)
    health: list[HealthSummary] = Field(default_factory=list)
    server_logs: list[ServerLogSummary] = Field(default_factory=list)
    host: HostSummary | None = None
    gpus: list[GpuSummary] = Field(default_factory=list)
    gpu_sources: list[GpuSourceStatus] = Field(default_factory=list)
    """One line per GPU source: which ran, and why one showed no GPU."""
    coverage: CoverageBySource = Field(default_factory=dict)
    """Once a load window opened."""
