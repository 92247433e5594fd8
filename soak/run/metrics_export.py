"""soaktop's own live figures in Prometheus exposition (``--metrics-port PORT``), so Grafana
can chart a soak beside the engine's own ``/metrics``.

**Off the measuring loop.** The runner's snapshot tick already builds one
:class:`~soak.record.snapshot.Snapshot` a second; it hands each finished one to
:meth:`MetricsExport.publish` (one attribute assignment, no per-request work). A scrape
is answered by ``prometheus_client``'s own HTTP server thread, whose custom collector
(:class:`SnapshotCollector`) turns the latest snapshot into metric families: a slow or
hostile scraper costs that thread, never the event loop that times the requests. A
snapshot is never changed once published (the next tick builds a new one), so the
thread reads a consistent second.

**Names** follow Prometheus's conventions: ``soaktop_`` first, the base unit in the name
(``_seconds``, ``_bytes``, ``_ratio``), ``_total`` on counters. Latencies are summaries
(``soaktop_ttft_seconds{quantile="0.99"}``): as a Prometheus summary's quantiles are
over a sliding window, these are over the runner's live window (``window_s``, 10 s by
default), while ``_count`` and ``_sum`` run over the whole load. The same quantiles over
the whole load are ``soaktop_load_ttft_seconds{quantile=…}`` gauges. A figure the
snapshot does not have (no request finished yet) is left out, never written as 0.

**Where it listens.** ``127.0.0.1`` unless ``--metrics-host`` names another address
(the CLI warns: the figures then reach anyone who can reach that port). Label values
that came from a server (a model id inside the run id, a failure class) pass
:func:`soak.safe_text.safe_line`; the exposition format escapes quotes and backslashes.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry

from loadgen.stats import LatencyStats
from soak.record.snapshot import Snapshot
from soak.safe_text import safe_line

LATENCIES = (
    ("ttft", "time to first token"),
    ("e2e", "whole request"),
    ("itl", "inter-token"),
    ("tpot", "time per output token"),
)
QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))
STATES = ("ok", "close", "breached", "no_data")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_problem(host: str) -> str | None:
    """Why ``host`` cannot be the metrics endpoint's address, in words (None: it can). An
    IP address or ``localhost`` only: a name would be resolved when the run starts."""
    if host == "localhost":
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return (
            f"{safe_line(host)!r} is not an IP address; allowed: an IPv4 or IPv6 address "
            "(127.0.0.1, ::1, 0.0.0.0 for every interface) or localhost"
        )
    return None


def _label(value: object) -> str:
    return safe_line(value)[:200]


def _gauge(name: str, doc: str, value: float | None, unit: str = "") -> Iterator[Metric]:
    if value is not None:
        yield GaugeMetricFamily(name, doc, value=value, unit=unit)


def _run(snap: Snapshot) -> Iterator[Metric]:
    info = GaugeMetricFamily(
        "soaktop_run_info",
        "The run: its id, phase and status (always 1)",
        labels=["run_id", "phase", "status"],
    )
    info.add_metric([_label(snap.run_id), _label(snap.phase), _label(snap.status)], 1)
    yield info
    yield from _gauge(
        "soaktop_phase_elapsed_seconds", "Seconds into the current phase", snap.phase_elapsed_s
    )
    yield from _gauge(
        "soaktop_run_elapsed_seconds", "Seconds since the run's monotonic origin", snap.t
    )


def _load(snap: Snapshot) -> Iterator[Metric]:
    load = snap.load
    yield GaugeMetricFamily(
        "soaktop_in_flight_requests", "Load requests in flight", value=load.in_flight
    )
    yield GaugeMetricFamily(
        "soaktop_workers_started", "Workers that proved a connection", value=load.workers_started
    )
    yield GaugeMetricFamily(
        "soaktop_requested_concurrency",
        "Concurrency the load asks for now",
        value=load.requested_concurrency,
    )
    if load.cumulative is None:  # no load released yet (or a matrix's next cell): see _counters
        return
    yield from _counters(snap)
    yield from _rates(snap)


def _counters(snap: Snapshot) -> Iterator[Metric]:
    """The load's counters, only once it has figures: an empty load view (before the load,
    a matrix's cell not yet released) written as 0 then the total again would read to
    Prometheus as a reset, and rate() would count the whole total twice."""
    load = snap.load
    req = CounterMetricFamily(
        "soaktop_requests", "Load requests finished, by outcome", labels=["outcome"]
    )
    for outcome, n in (
        ("completed", load.completed),
        ("failed", load.failed),
        ("cancelled", load.cancelled),
    ):
        req.add_metric([outcome], n)
    yield req
    yield CounterMetricFamily("soaktop_requests_issued", "Load requests sent", value=load.issued)
    fails = CounterMetricFamily(
        "soaktop_request_failures", "Failed load requests, by failure class", labels=["class"]
    )
    for cls, n in sorted(load.failures_by_class.items()):
        fails.add_metric([_label(cls)], n)
    yield fails
    if load.cumulative is not None:
        yield CounterMetricFamily(
            "soaktop_output_tokens",
            "Output tokens of completed load requests",
            value=load.cumulative.output_tokens,
        )


def _rates(snap: Snapshot) -> Iterator[Metric]:
    views = (("window", snap.load.window), ("load", snap.load.cumulative))
    tok = GaugeMetricFamily(
        "soaktop_output_tokens_per_second",
        "Output tokens per second over the live window or the whole load",
        labels=["span"],
    )
    rps = GaugeMetricFamily(
        "soaktop_requests_per_second",
        "Completed requests per second over the live window or the whole load",
        labels=["span"],
    )
    for span, view in views:
        if view is not None and view.output_tokens_per_s is not None:
            tok.add_metric([span], view.output_tokens_per_s)
        if view is not None and view.requests_per_s is not None:
            rps.add_metric([span], view.requests_per_s)
    yield tok
    yield rps


def _quantiles(stats: LatencyStats) -> Iterator[tuple[str, float]]:
    for q, attr in QUANTILES:
        if (v := getattr(stats, attr)) is not None:
            yield q, v


def _latencies(snap: Snapshot) -> Iterator[Metric]:
    window, cum = snap.load.window, snap.load.cumulative
    if cum is None:  # _count is a counter: left out as _counters' are, never 0
        return
    for key, words in LATENCIES:
        live = getattr(window, f"{key}_s") if window is not None else LatencyStats()
        whole: LatencyStats = getattr(cum, f"{key}_s")
        name = f"soaktop_{key}_seconds"
        summary = SummaryMetricFamily(
            name,
            f"Client-measured {words} latency: quantiles over the live window, "
            "count and sum over the whole load",
            count_value=whole.n,
            sum_value=(whole.mean or 0.0) * whole.n,
        )
        for q, v in _quantiles(live):
            summary.add_sample(name, {"quantile": q}, v)
        yield summary
        over_load = GaugeMetricFamily(
            f"soaktop_load_{key}_seconds",
            f"Client-measured {words} latency quantiles over the whole load",
            labels=["quantile"],
        )
        for q, v in _quantiles(whole):
            over_load.add_metric([q], v)
        if whole.max is not None:
            over_load.add_metric(["1"], whole.max)
        yield over_load


def _client(snap: Snapshot) -> Iterator[Metric]:
    c = snap.client
    cpu = None if c.cpu_percent is None else c.cpu_percent / 100
    yield from _gauge("soaktop_client_cpu_ratio", "The runner's CPU, share of one core", cpu)
    rss = None if c.rss_mb is None else c.rss_mb * 2**20
    yield from _gauge("soaktop_client_resident_memory_bytes", "The runner's resident memory", rss)
    yield from _gauge(
        "soaktop_client_loop_lag_seconds",
        "Worst event-loop lateness in the last tick",
        c.loop_lag_s,
    )
    yield from _gauge(
        "soaktop_client_behind_ratio",
        "Share of sampled socket reads that found bytes already queued (live window)",
        c.behind_fraction,
    )


def _gates(snap: Snapshot) -> Iterator[Metric]:
    tasks = GaugeMetricFamily(
        "soaktop_gate_tasks",
        "Contract gate tasks so far, by phase, suite and state (planned: the suite's size)",
        labels=["phase", "suite", "state"],
    )
    for phase, suites in sorted(snap.gates.items()):
        for suite, g in sorted(suites.items()):
            for state, n in (
                ("passed", g.passed),
                ("failed", g.failed),
                ("done", g.done),
                ("planned", g.total),
            ):
                tasks.add_metric([_label(phase), _label(suite), state], n)
    yield tasks
    th = GaugeMetricFamily(
        "soaktop_threshold_state",
        "Each threshold's live state (1 for the state it is in)",
        labels=["threshold", "state"],
    )
    observed = GaugeMetricFamily(
        "soaktop_threshold_observed", "Each threshold's live observed figure", labels=["threshold"]
    )
    for t in snap.thresholds:
        for state in ("ok", "breached", "no_data"):
            th.add_metric([_label(t.expr), state], 1.0 if t.state == state else 0.0)
        if t.observed is not None:
            observed.add_metric([_label(t.expr)], t.observed)
    yield th
    yield observed


def _drift(snap: Snapshot) -> Iterator[Metric]:
    e = snap.endurance
    if e is None:
        return
    yield GaugeMetricFamily("soaktop_soak_windows", "Soak windows closed so far", value=e.windows)
    change = GaugeMetricFamily(
        "soaktop_drift_change_ratio",
        "Each figure's change from its baseline: relative, or in points of a share",
        labels=["figure"],
    )
    state = GaugeMetricFamily(
        "soaktop_drift_state",
        "Each drift figure's state (1 for the state it is in)",
        labels=["figure", "state"],
    )
    for f in e.figures:
        if f.change is not None:
            change.add_metric([_label(f.figure)], f.change)
        for s in STATES:
            state.add_metric([_label(f.figure), s], 1.0 if f.state == s else 0.0)
    leak = GaugeMetricFamily(
        "soaktop_leak_rate_per_hour",
        "Each resource's growth per hour (in its unit)",
        labels=["resource", "unit"],
    )
    for k in e.leaks:
        if k.rate_per_h is not None:
            leak.add_metric([_label(k.resource), _label(k.unit)], k.rate_per_h)
    yield from (change, state, leak)


def families(snap: Snapshot) -> list[Metric]:
    """Every metric family of one snapshot (what a scrape returns)."""
    out: list[Metric] = []
    for part in (_run, _load, _latencies, _client, _gates, _drift):
        out += part(snap)
    return out


class SnapshotCollector(Collector):
    """A collector that reads the latest published snapshot (none yet: no families)."""

    def __init__(self, export: MetricsExport) -> None:
        self._export = export

    def collect(self) -> Iterable[Metric]:
        """Called on the HTTP server's thread, once per scrape."""
        snap = self._export.latest
        return families(snap) if snap is not None else []


class MetricsExport:
    """The exposition endpoint of one run: listens from :meth:`start` to :meth:`stop`."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.latest: Snapshot | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(self))
        self._server: Any = None

    def start(self) -> None:
        """Listen (raises OSError when the address cannot be bound: a port in use)."""
        self._server, _thread = start_http_server(self.port, self.host, registry=self.registry)

    def publish(self, snap: Snapshot) -> None:
        """The snapshot the next scrape shows (the tick calls it after each write)."""
        self.latest = snap

    def stop(self) -> None:
        """Stop listening (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def url(self) -> str:
        """``http://HOST:PORT/metrics`` (IPv6 hosts bracketed)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"


class MetricsExportError(RuntimeError):
    """The metrics endpoint cannot listen where it was asked (the message says why)."""


def exposure_warning(host: str, port: int) -> str | None:
    """The warning for an endpoint beyond loopback (None on loopback)."""
    if is_loopback(host):
        return None
    return (
        f"--metrics-host {host}: the live figures on port {port} can be read by anyone who "
        "can reach this host's address (no authentication); use 127.0.0.1 unless a "
        "Prometheus on another machine must scrape it"
    )


def start_export(host: str, port: int | None) -> MetricsExport | None:
    """Start the endpoint when a port was asked for (None: none was). Beyond loopback, the
    warning goes to stderr: before the runner's handshake that is the operator's screen."""
    if port is None:
        return None
    export = MetricsExport(host, port)
    try:
        export.start()
    except OSError as e:
        raise MetricsExportError(
            f"--metrics-port {port}: cannot listen on {export.url()}: {e.strerror or e}; "
            "choose a free port (nothing was run)"
        ) from None
    if (warning := exposure_warning(host, port)) is not None:
        import sys

        print(f"soaktop: warning: {warning}", file=sys.stderr, flush=True)
    return export
