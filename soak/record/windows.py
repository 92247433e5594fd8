"""The window series, made from samples: live from the snapshot tick, or from the journals.

One timeline: window ``i`` covers ``[origin + i·W, origin + (i+1)·W)`` in seconds since
the run's origin, where the *series origin* is the first whole second after the judged
load began (the barrier's release, or the warm-up's end). A request belongs to the window
in which it *ended* (a failure without an end: when it was sent); a telemetry sample to
the window of its ``t``.

The same accumulators make both series, so the live line and the recomputed one can
differ only where their inputs do: the live load figures come from 1 % histogram buckets
and the tick's samples, the recomputed ones (the record's, and ``verify``'s) from the
exact values in ``requests.jsonl``, ``telemetry.jsonl`` and ``snapshots.jsonl``
(:mod:`soak.record.window_journal`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from loadgen.stats import percentile
from soak.record.endurance import WindowFigures, WindowGpu


def series_origin(judged_start_s: float) -> float:
    """The first whole second at or after the judged load's start."""
    return float(math.ceil(judged_start_s - 1e-9))


WindowKind = Literal["load", "partial", "drain"]


def window_kind(start_s: float, end_s: float, issue_end_s: float | None) -> WindowKind:
    """``load`` (whole, inside the issue window), ``partial`` or ``drain``."""
    if issue_end_s is None or end_s <= issue_end_s + 1e-9:
        return "load"
    return "partial" if start_s < issue_end_s else "drain"


@dataclass
class _Mean:
    total: float = 0.0
    n: int = 0
    peak: float | None = None

    def add(self, v: float) -> None:
        self.total += v
        self.n += 1
        self.peak = v if self.peak is None or v > self.peak else self.peak

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None


@dataclass
class GaugeWindow:
    """One window's telemetry samples; :meth:`apply` writes their figures."""

    running: dict[int, _Mean] = field(default_factory=dict)
    waiting: dict[int, _Mean] = field(default_factory=dict)
    kv: dict[int, _Mean] = field(default_factory=dict)
    preemptions: dict[int, float] = field(default_factory=dict)
    server_rss: _Mean = field(default_factory=_Mean)
    server_cpu: _Mean = field(default_factory=_Mean)
    client_rss: _Mean = field(default_factory=_Mean)
    open_files: _Mean = field(default_factory=_Mean)
    gpu_used: dict[str, _Mean] = field(default_factory=dict)
    gpu_util: dict[str, _Mean] = field(default_factory=dict)
    lags: list[float] = field(default_factory=list)
    behind: list[float] = field(default_factory=list)
    """Each tick's behind share (``ClientView.behind_fraction_1s``)."""

    def engine(self, endpoint: int, values: dict[str, Any], preempted: float | None) -> None:
        """One scrape of one endpoint (``preempted``: preemptions since the last one)."""
        for key, into in (("running", self.running), ("waiting", self.waiting)):
            v = values.get(key)
            if isinstance(v, int | float):
                into.setdefault(endpoint, _Mean()).add(float(v))
        kv = values.get("kv_usage")
        if isinstance(kv, int | float):
            self.kv.setdefault(endpoint, _Mean()).add(float(kv))
        if preempted is not None:
            self.preemptions[endpoint] = self.preemptions.get(endpoint, 0.0) + preempted

    def host(
        self,
        servers: Iterable[tuple[float | None, float | None]],
        client_rss: float | None,
        open_files: float | None,
    ) -> None:
        """One host sample: each live server process's (RSS MB, CPU %), the client's."""
        rss = cpu = None
        for r, c in servers:
            if r is not None:
                rss = (rss or 0.0) + r
            if c is not None:
                cpu = (cpu or 0.0) + c
        for v, into in (
            (rss, self.server_rss),
            (cpu, self.server_cpu),
            (client_rss, self.client_rss),
            (open_files, self.open_files),
        ):
            if v is not None:
                into.add(float(v))

    def gpu(self, key: str, used_mib: float | None, util: float | None) -> None:
        """One GPU reading."""
        if used_mib is not None:
            self.gpu_used.setdefault(key, _Mean()).add(float(used_mib))
        if util is not None:
            self.gpu_util.setdefault(key, _Mean()).add(float(util))

    def apply(self, w: WindowFigures) -> None:
        """Write the window's telemetry figures (None where nothing was sampled)."""
        w.engine_running = _sum_means(self.running)
        w.engine_waiting = _sum_means(self.waiting)
        kv = [m.mean for m in self.kv.values() if m.mean is not None]
        w.engine_kv_usage = max(kv) if kv else None
        w.engine_preemptions = sum(self.preemptions.values()) if self.preemptions else None
        w.server_rss_mb = _round(self.server_rss.mean)
        w.server_cpu_percent = _round(self.server_cpu.mean)
        w.client_rss_mb = _round(self.client_rss.mean)
        w.client_open_files = _round(self.open_files.mean)
        if self.lags:
            w.loop_lag_p99_s = percentile(np.sort(np.asarray(self.lags)), 99, "nearest-rank")
        if self.behind:
            w.client_behind_fraction = round(sum(self.behind) / len(self.behind), 4)
        keys = sorted(set(self.gpu_used) | set(self.gpu_util))
        w.gpus = [
            WindowGpu(
                gpu=k,
                memory_used_mib=_round(self.gpu_used[k].mean) if k in self.gpu_used else None,
                memory_used_mib_max=self.gpu_used[k].peak if k in self.gpu_used else None,
                util_percent=_round(self.gpu_util[k].mean) if k in self.gpu_util else None,
            )
            for k in keys
        ]
        used = [g.memory_used_mib for g in w.gpus if g.memory_used_mib is not None]
        util = [g.util_percent for g in w.gpus if g.util_percent is not None]
        w.gpu_memory_used_mib = max(used) if used else None
        w.gpu_util_percent = max(util) if util else None


def _sum_means(by_endpoint: dict[int, _Mean]) -> float | None:
    means = [m.mean for m in by_endpoint.values() if m.mean is not None]
    return round(sum(means), 3) if means else None


def _round(v: float | None, places: int = 3) -> float | None:
    return None if v is None else round(v, places)


def load_figures(
    w: WindowFigures,
    *,
    completed: int,
    failed: int,
    output_tokens: int,
    failures: dict[str, int],
    sanity: dict[str, int],
    flagged: int,
) -> None:
    """The window's counts and rates (its latency percentiles are set by the caller)."""
    span = w.end_s - w.start_s
    w.completed, w.failed, w.output_tokens = completed, failed, output_tokens
    w.output_tok_s = output_tokens / span if span > 0 else None
    w.req_s = completed / span if span > 0 else None
    ended = completed + failed
    w.error_rate = failed / ended if ended else None
    w.failures_by_class = dict(sorted(failures.items()))
    w.output_len = output_tokens / completed if completed else None
    w.sanity_by_flag = dict(sorted(sanity.items()))
    w.sanity_rate = flagged / completed if completed else None


@dataclass
class SeriesSpec:
    """Where the series lies on the run's timeline."""

    origin_s: float
    window_s: int
    issue_end_s: float | None
    end_s: float
    """The series ends with the window holding this time (the drain's end)."""

    def index(self, t: float) -> int | None:
        """The window of time ``t`` (None: before the origin or after the end — what
        comes after the drain, the after-load gates' samples, is not the load's)."""
        if t < self.origin_s or t > self.end_s:
            return None
        i = int((t - self.origin_s) // self.window_s)
        return i if i < self.count else None

    @property
    def count(self) -> int:
        return max(0, math.ceil((self.end_s - self.origin_s) / self.window_s - 1e-9))


def preemptions_since(last: dict[int, float], endpoint: int, total: object) -> float | None:
    """Preemptions since the endpoint's previous sample (a counter that went down — a
    restart — counts from zero); None for the first sample or no counter."""
    if not isinstance(total, int | float):
        return None
    prev = last.get(endpoint)
    last[endpoint] = float(total)
    if prev is None:
        return None
    return float(total) - prev if total >= prev else float(total)


def host_sample_into(g: GaugeWindow, line: dict[str, Any]) -> None:
    """One host line (a ``HostLine`` or a snapshot's ``telemetry.host``)."""
    servers = [
        (s.get("rss_mb"), s.get("cpu_percent"))
        for s in line.get("servers") or []
        if isinstance(s, dict) and s.get("status", "ok") == "ok"
    ]
    client = line.get("client") if isinstance(line.get("client"), dict) else {}
    assert isinstance(client, dict)
    g.host(servers, client.get("rss_mb"), client.get("open_files"))


def gpu_key(reading: dict[str, Any]) -> str:
    """``<host>/<index>`` for an exporter's GPU, the index alone for a local one."""
    host, index = reading.get("host"), reading.get("index")
    return f"{host}/{index}" if host else str(index)
