"""The window series, made from samples: live from the snapshot tick, or from the journals.

One timeline: window ``i`` covers ``[origin + i·W, origin + (i+1)·W)`` in seconds since
the run's origin, where the *series origin* is the first whole second after the judged
load began (the barrier's release, or the warm-up's end). A request belongs to the window
in which it *ended* (a failure without an end: when it was sent); a telemetry sample to
the window of its ``t``.

The same accumulators make both series, so the live line and the recomputed one can
differ only where their inputs do: the live load figures come from 1 % histogram buckets
and the tick's samples, the recomputed ones (the record's, and ``verify``'s) from the
exact values in ``requests.jsonl``, ``telemetry.jsonl`` and ``snapshots.jsonl``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from loadgen.stats import PercentileMethod, percentile, summarize
from soak.record.endurance import WindowFigures, WindowGpu
from soak.record.journal import read_jsonl

LATE_LINE_S = 5.0
"""A request line may arrive this long after its window ended (lines are journaled in
finishing order, give or take a loop turn) before the window's percentiles are final."""


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


# --- from the journals -----------------------------------------------------------------


@dataclass
class _LoadBucket:
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    sanity: Counter[str] = field(default_factory=Counter)
    flagged: int = 0
    lat: dict[str, list[float]] = field(default_factory=lambda: {"ttft": [], "e2e": [], "tpot": []})
    itl: list[np.ndarray] = field(default_factory=list)
    stats: dict[str, tuple[float | None, float | None]] | None = None
    """p50/p99 per latency once final (its raw values then dropped)."""

    def add(self, line: dict[str, Any]) -> None:
        if not line.get("ok"):
            self.failed += 1
            self.failures[str(line.get("failure"))] += 1
            return
        self.completed += 1
        ot = line.get("output_tokens")
        self.output_tokens += ot or 0
        flags = line.get("sanity")
        if flags:
            self.flagged += 1
            self.sanity.update(str(f) for f in flags)
        if self.stats is not None:
            return  # a line later than LATE_LINE_S: counted, not in the percentiles
        ttft, e2e = line.get("ttft_s"), line.get("e2e_s")
        if ttft is not None:
            self.lat["ttft"].append(ttft)
        if e2e is not None:
            self.lat["e2e"].append(e2e)
        if ttft is not None and e2e is not None and ot and ot > 1:
            self.lat["tpot"].append((e2e - ttft) / (ot - 1))
        gaps = line.get("itl_us")
        if gaps:
            self.itl.append(np.asarray(gaps, dtype=np.float64) / 1e6)

    def finish(self, method: PercentileMethod) -> None:
        if self.stats is not None:
            return
        arrays = {k: np.asarray(v) for k, v in self.lat.items()}
        arrays["itl"] = np.concatenate(self.itl) if self.itl else np.empty(0)
        self.stats = {}
        for key, arr in arrays.items():
            s = summarize(arr, method)
            self.stats[key] = (s.p50, s.p99)
        self.lat = {"ttft": [], "e2e": [], "tpot": []}
        self.itl = []


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


def windows_from_journals(
    run_dir: Path, spec: SeriesSpec, method: PercentileMethod = "nearest-rank"
) -> tuple[list[WindowFigures], int]:
    """The series recomputed from ``requests.jsonl`` (load lines), ``telemetry.jsonl`` and
    the loop lag in ``snapshots.jsonl`` — the record's ``windows`` and ``verify``'s — and
    how many lines the warm-up journaled."""
    n = spec.count
    buckets = [_LoadBucket() for _ in range(n)]
    final_upto = 0  # windows below this index have final percentiles
    warmup = 0
    for line in read_jsonl(run_dir / "requests.jsonl"):
        phase = line.get("phase", "load")
        if phase == "warmup":
            warmup += 1
        if phase != "load" or line.get("cancelled"):
            continue
        t = line.get("end_s")
        if t is None:
            t = line.get("sent_s")
        if not isinstance(t, int | float):
            continue
        i = spec.index(float(t))
        if i is None:
            continue
        buckets[i].add(line)
        while final_upto < i and t > spec.origin_s + (final_upto + 1) * spec.window_s + LATE_LINE_S:
            buckets[final_upto].finish(method)
            final_upto += 1
    gauges = [GaugeWindow() for _ in range(n)]
    _telemetry_into(run_dir / "telemetry.jsonl", spec, gauges)
    for snap in read_jsonl(run_dir / "snapshots.jsonl"):
        t, client = snap.get("t"), snap.get("client")
        if not isinstance(client, dict) or not isinstance(t, int | float):
            continue
        i = spec.index(float(t) - 1e-9)  # a tick's figures are of the second before it
        if i is None:
            continue
        lag, behind = client.get("loop_lag_s"), client.get("behind_fraction_1s")
        if isinstance(lag, int | float):
            gauges[i].lags.append(float(lag))
        if isinstance(behind, int | float):
            gauges[i].behind.append(float(behind))
    out = []
    for i, (b, g) in enumerate(zip(buckets, gauges, strict=True)):
        b.finish(method)
        out.append(make_window(i, spec, b, g))
    return out, warmup


def make_window(i: int, spec: SeriesSpec, b: _LoadBucket, g: GaugeWindow) -> WindowFigures:
    """One recomputed window."""
    start = spec.origin_s + i * spec.window_s
    end = start + spec.window_s
    kind = window_kind(start, end, spec.issue_end_s)
    w = WindowFigures(i=i, start_s=start, end_s=end, kind=kind, source="journal")
    load_figures(
        w,
        completed=b.completed,
        failed=b.failed,
        output_tokens=b.output_tokens,
        failures=dict(b.failures),
        sanity=dict(b.sanity),
        flagged=b.flagged,
    )
    stats = b.stats or {}
    for key in ("ttft", "e2e", "itl", "tpot"):
        p50, p99 = stats.get(key, (None, None))
        setattr(w, f"{key}_p50", p50)
        setattr(w, f"{key}_p99", p99)
    g.apply(w)
    return w


def _telemetry_into(path: Path, spec: SeriesSpec, gauges: list[GaugeWindow]) -> None:
    """Engine, host and GPU samples of ``telemetry.jsonl`` into their windows."""
    last_preempt: dict[int, float] = {}
    for line in read_jsonl(path):
        t = line.get("t")
        if not isinstance(t, int | float):
            continue
        source = line.get("source")
        i = spec.index(float(t))
        if source == "engine":
            endpoint = line.get("endpoint")
            values = line.get("values")
            if not isinstance(endpoint, int) or not isinstance(values, dict) or line.get("error"):
                continue
            preempted = preemptions_since(last_preempt, endpoint, values.get("preemptions_total"))
            if i is not None:
                gauges[i].engine(endpoint, values, preempted)
        elif i is None:
            continue
        elif source == "host":
            host_sample_into(gauges[i], line)
        elif source in ("nvml", "dcgm"):
            for r in line.get("gpus") or []:
                if isinstance(r, dict):
                    gauges[i].gpu(gpu_key(r), r.get("memory_used_mib"), r.get("util_percent"))


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
