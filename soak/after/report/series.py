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
from typing import Any

from soak.record.journal import read_jsonl

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
    events: list[dict[str, Any]] = field(default_factory=list)
    """Marked events: t, kind, severity, message."""
    events_dropped: int = 0
    end_t: float | None = None


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


class _Acc:
    """Collects named series for several charts."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, Series]] = defaultdict(dict)

    def add(self, chart: str, name: str, t: float, v: Any) -> None:
        xs, ys = self.data[chart].setdefault(name, ([], []))
        xs.append(t)
        ys.append(_num(v))


def _snapshots(path: Path, acc: _Acc, phases: list[tuple[str, float]]) -> float | None:
    last_t = None
    for snap in read_jsonl(path):
        t = _num(snap.get("t"))
        if t is None:
            continue
        last_t = t
        phase = snap.get("phase")
        if isinstance(phase, str) and (not phases or phases[-1][0] != phase):
            phases.append((phase, t))
        load = snap.get("load") or {}
        win = load.get("window") or {}
        acc.add("throughput", "output tok/s", t, win.get("output_tokens_per_s"))
        acc.add("throughput", "requests/s", t, win.get("requests_per_s"))
        for q in ("p50", "p99"):
            acc.add("ttft", f"TTFT {q}", t, _get(win, "ttft_s", q))
            acc.add("e2e", f"E2E {q}", t, _get(win, "e2e_s", q))
        acc.add("concurrency", "client in flight", t, load.get("in_flight"))
        # Engine and GPU values from the snapshot: used only when telemetry.jsonl is absent.
        tel = snap.get("telemetry") or {}
        for e in tel.get("engines") or []:
            _engine(acc, e.get("endpoint"), _num(e.get("t")) or t, e)
        for g in tel.get("gpus") or []:
            _gpu(acc, g, _num(g.get("t")) or t, g.get("url_index"))
    return last_t


def _engine(acc: _Acc, endpoint: Any, t: float, values: dict[str, Any]) -> None:
    acc.add("concurrency", f"endpoint {endpoint} running", t, values.get("running"))
    acc.add("concurrency", f"endpoint {endpoint} waiting", t, values.get("waiting"))
    kv = _num(values.get("kv_usage"))
    acc.add("kv", f"endpoint {endpoint}", t, None if kv is None else kv * 100)


def _gpu(acc: _Acc, g: dict[str, Any], t: float, where: Any) -> None:
    host = g.get("host") or (f"exporter {where}" if where is not None else "local")
    name = f"GPU {g.get('index')} · {host}"
    acc.add("gpu_memory", name, t, g.get("memory_used_mib"))
    acc.add("gpu_temperature", name, t, g.get("temperature_c"))
    acc.add("gpu_power", name, t, g.get("power_w"))


def _telemetry(path: Path, acc: _Acc) -> None:
    for line in read_jsonl(path):
        t = _num(line.get("t"))
        if t is None:
            continue
        source = line.get("source")
        if source == "engine":
            # A failed scrape leaves a gap rather than a fake zero.
            values = {} if line.get("error") else line.get("values") or {}
            _engine(acc, line.get("endpoint"), t, values)
        elif source in ("dcgm", "nvml"):
            for g in line.get("gpus") or []:
                if isinstance(g, dict):
                    _gpu(acc, g, t, line.get("url_index"))
        elif source == "host":
            acc.add("host", "soaktop CPU % (of one core)", t, _get(line, "client", "cpu_percent"))
            acc.add("host", "host CPU %", t, _get(line, "system", "cpu_percent"))


def _marked(ev: dict[str, Any]) -> bool:
    kind = ev.get("kind")
    if kind not in EVENT_KINDS:
        return False
    return kind not in ("health", "gate") or ev.get("severity") in ("error", "critical")


def read_series(run_dir: Path, record: dict[str, Any] | None = None) -> RunSeries:
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
    events = [ev for ev in read_jsonl(run_dir / "events.jsonl") if _num(ev.get("t")) is not None]
    spans = (record or {}).get("phases") or []
    if spans:
        out.phases = [
            (str(p.get("name")), float(p["start_s"]), _num(p.get("end_s")))
            for p in spans
            if isinstance(p, dict) and _num(p.get("start_s")) is not None
        ]
    else:  # a record without phases (older, or none yet): the snapshots' phase changes
        ends: list[float | None] = [s for _, s in starts[1:]]
        ends += [out.end_t] if starts else []
        out.phases = [(name, s, e) for (name, s), e in zip(starts, ends, strict=True)]
    marked = [ev for ev in events if _marked(ev)]
    marked.sort(key=lambda e: {"critical": 0, "error": 1, "warning": 2}.get(e["severity"], 3))
    out.events = sorted(marked[:MAX_EVENTS], key=lambda e: e["t"])
    out.events_dropped = max(0, len(marked) - MAX_EVENTS)
    if events:
        out.end_t = max(out.end_t or 0.0, max(float(e["t"]) for e in events))
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
