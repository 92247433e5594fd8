"""Time series for the report's charts, read from a run directory's journals.

Every series is ``(t, value)`` with ``t`` in seconds since the run's monotonic origin, the
clock that snapshots, telemetry and events share. Missing values stay ``None`` (a gap in
the line), never 0. Long runs are thinned with :func:`thin`, which keeps each bucket's
lowest and highest point so a one-second spike in a two-hour run still shows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from loadgen.stats import LatencyStats
from soak.after.record_view import read_leniently
from soak.record.events import Event
from soak.record.gpu_telemetry import GpuView
from soak.record.journal import read_jsonl
from soak.record.models import RunRecord
from soak.record.snapshot import Snapshot
from soak.record.telemetry import ClientProcessSample, EngineView, SystemSample

MAX_POINTS = 1500
"""Points per series on a chart; a two-hour run has 7,200 snapshots."""

Series = tuple[list[float], list[float | None]]

EVENT_KINDS = frozenset({"fault", "restart", "health", "gate", "mark", "threshold", "control"})
"""Events marked on the charts (health and gate results only when they went bad)."""


@dataclass
class RunSeries:
    """Everything the charts plot."""

    lines: dict[str, dict[str, Series]] = field(default_factory=lambda: defaultdict(dict))
    """chart id → trace name → (t, values)."""
    phases: list[tuple[str, float, float | None]] = field(default_factory=list)
    """(phase, start, end) on the same clock."""
    events: list[Event] = field(default_factory=list)
    """Marked events."""
    events_dropped: int = 0
    end_t: float | None = None


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


class TelemetryLine(BaseModel):
    """What the charts read of one ``telemetry.jsonl`` line (``soak.watch``: an engine
    scrape, a GPU source's read, a host tick); the other keys of a line are kept unread."""

    model_config = ConfigDict(extra="allow")

    source: str | None = None
    """``engine``, ``dcgm``, ``nvml`` or ``host``."""
    t: float | None = None
    endpoint: int | None = None
    error: Any = None
    """A failed scrape or read (its words); then the line has no values."""
    values: EngineView | None = None
    url_index: int | None = None
    gpus: list[GpuView] = Field(default_factory=list)
    client: ClientProcessSample | None = None
    system: SystemSample | None = None


class _Acc:
    """Collects named series for several charts."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, Series]] = defaultdict(dict)

    def add(self, chart: str, name: str, t: float, v: Any) -> None:
        xs, ys = self.data[chart].setdefault(name, ([], []))
        xs.append(t)
        ys.append(_num(v))


_Line = TypeVar("_Line", bound=BaseModel)


def _lines(path: Path, model: type[_Line]) -> list[_Line]:
    """A journal's lines as ``model``, read as leniently as the record (another soaktop
    version's line: :func:`~soak.after.record_view.read_leniently`); a line without its
    time, or with a value of the wrong type, is skipped."""
    out = []
    for raw in read_jsonl(path):
        line, _ = read_leniently(model, raw, must_have=frozenset({("t",)}))
        if line is not None:
            out.append(line)
    return out


def _snapshots(path: Path, acc: _Acc, phases: list[tuple[str, float]]) -> float | None:
    last_t = None
    for snap in _lines(path, Snapshot):
        t = _num(snap.t)
        if t is None:
            continue
        last_t = t
        if not phases or phases[-1][0] != snap.phase:
            phases.append((snap.phase, t))
        win = snap.load.window
        acc.add("throughput", "output tok/s", t, win.output_tokens_per_s if win else None)
        acc.add("throughput", "requests/s", t, win.requests_per_s if win else None)
        ttft = win.ttft_s if win else LatencyStats()
        e2e = win.e2e_s if win else LatencyStats()
        for q, ttft_q, e2e_q in (("p50", ttft.p50, e2e.p50), ("p99", ttft.p99, e2e.p99)):
            acc.add("ttft", f"TTFT {q}", t, ttft_q)
            acc.add("e2e", f"E2E {q}", t, e2e_q)
        acc.add("concurrency", "client in flight", t, snap.load.in_flight)
        # Engine and GPU values from the snapshot: used only when telemetry.jsonl is absent.
        for e in snap.telemetry.engines:
            _engine(acc, e.endpoint, _num(e.t) or t, e)
        for g in snap.telemetry.gpus:
            _gpu(acc, g, _num(g.t) or t, g.url_index)
    return last_t


def _engine(acc: _Acc, endpoint: int | None, t: float, values: EngineView) -> None:
    acc.add("concurrency", f"endpoint {endpoint} running", t, values.running)
    acc.add("concurrency", f"endpoint {endpoint} waiting", t, values.waiting)
    kv = _num(values.kv_usage)
    acc.add("kv", f"endpoint {endpoint}", t, None if kv is None else kv * 100)


def _gpu(acc: _Acc, g: GpuView, t: float, where: int | None) -> None:
    host = g.host or (f"exporter {where}" if where is not None else "local")
    name = f"GPU {g.index} · {host}"
    acc.add("gpu_memory", name, t, g.memory_used_mib)
    acc.add("gpu_temperature", name, t, g.temperature_c)
    acc.add("gpu_power", name, t, g.power_w)


def _telemetry(path: Path, acc: _Acc) -> None:
    for line in _lines(path, TelemetryLine):
        t = _num(line.t)
        if t is None:
            continue
        if line.source == "engine":
            # A failed scrape leaves a gap rather than a fake zero.
            values = EngineView() if line.error or line.values is None else line.values
            _engine(acc, line.endpoint, t, values)
        elif line.source in ("dcgm", "nvml"):
            for g in line.gpus:
                _gpu(acc, g, t, line.url_index)
        elif line.source == "host":
            client = line.client.cpu_percent if line.client else None
            acc.add("host", "soaktop CPU % (of one core)", t, client)
            acc.add("host", "host CPU %", t, line.system.cpu_percent if line.system else None)


def _marked(ev: Event) -> bool:
    if ev.kind not in EVENT_KINDS:
        return False
    return ev.kind not in ("health", "gate") or ev.severity in ("error", "critical")


def _record_phases(record: RunRecord | None) -> list[tuple[str, float, float | None]]:
    spans = record.phases if record is not None else []
    return [(p.name, p.start_s, _num(p.end_s)) for p in spans if _num(p.start_s) is not None]


def read_series(run_dir: Path, record: RunRecord | None = None) -> RunSeries:
    """The charts' series, phases and marked events of one run directory."""
    out = RunSeries()
    snap_acc, tel_acc = _Acc(), _Acc()
    starts: list[tuple[str, float]] = []
    out.end_t = _snapshots(run_dir / "snapshots.jsonl", snap_acc, starts)
    _telemetry(run_dir / "telemetry.jsonl", tel_acc)
    for chart, traces in snap_acc.data.items():
        out.lines[chart].update(traces)
    # telemetry.jsonl holds every scrape (finer than the snapshots): it wins per chart.
    for chart, traces in tel_acc.data.items():
        if chart == "concurrency":
            out.lines[chart] = {k: v for k, v in out.lines[chart].items() if "endpoint" not in k}
        else:
            out.lines[chart] = {}
        out.lines[chart].update(traces)
    events = [ev for ev in _lines(run_dir / "events.jsonl", Event) if _num(ev.t) is not None]
    if record is not None and record.phases:
        out.phases = _record_phases(record)
    else:  # a record without phases (older, or none yet): the snapshots' phase changes
        ends: list[float | None] = [s for _, s in starts[1:]]
        ends += [out.end_t] if starts else []
        out.phases = [(name, s, e) for (name, s), e in zip(starts, ends, strict=True)]
    marked = [ev for ev in events if _marked(ev)]
    marked.sort(key=lambda e: {"critical": 0, "error": 1, "warning": 2}.get(e.severity, 3))
    out.events = sorted(marked[:MAX_EVENTS], key=lambda e: e.t)
    out.events_dropped = max(0, len(marked) - MAX_EVENTS)
    if events:
        out.end_t = max(out.end_t or 0.0, max(e.t for e in events))
    for chart in out.lines:
        out.lines[chart] = {k: thin(*v) for k, v in sorted(out.lines[chart].items())}
    return out


MAX_EVENTS = 150
"""Events marked per chart; the most severe are kept, the count of the rest is shown."""


def thin(xs: list[float], ys: list[float | None], limit: int = MAX_POINTS) -> Series:
    """At most ``limit`` points: each bucket keeps its lowest and highest value (in time
    order), so spikes survive; gaps (None) survive too."""
    if len(xs) <= limit:
        return xs, ys
    size = math.ceil(len(xs) / (limit // 2))
    ox: list[float] = []
    oy: list[float | None] = []
    for i in range(0, len(xs), size):
        idx = range(i, min(i + size, len(xs)))
        real = [(y, j) for j in idx if (y := ys[j]) is not None]
        if not real:
            ox.append(xs[i])
            oy.append(None)
            continue
        for j in sorted({min(real)[1], max(real)[1]}):
            ox.append(xs[j])
            oy.append(ys[j])
    return ox, oy
