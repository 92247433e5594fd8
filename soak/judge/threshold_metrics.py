"""The metrics a threshold can name, and their figures: live from a snapshot, final from
the record, with the words each is shown in.

Telemetry keys read here (the telemetry layer writes them; absent keys mean no data):

- snapshot ``telemetry.engines``: one entry per endpoint, with ``waiting`` and
  ``kv_usage`` (0–1); entries whose ``status`` is present and not ``"ok"`` are skipped.
  (They also carry the server's lifetime ``preemptions_total``, which is not this run's
  count: ``engine.preemptions`` has no live figure.)
- snapshot ``telemetry.gpus``: entries with ``memory_free_mib`` and ``temperature_c``
  (the latest sample; for when GPU telemetry exists).
- record ``telemetry["engines"]``: list of dicts with ``waiting_max``, ``kv_usage_max`` and
  optionally ``preemptions`` (peaks / counts over the load).
- record ``telemetry["gpus"]``: list of dicts with ``min_free_mib`` and ``max_temp_c``.

Across endpoints and GPUs the worst one counts: the largest waiting queue, KV usage and
temperature, the smallest free memory; preemptions add up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from loadgen.stats import LatencyStats
from soak.judge.limits import PERCENTILE_METHOD
from soak.record.models import LoadSummary
from soak.record.snapshot import Snapshot

Kind = Literal["latency", "ratio", "count", "throughput", "mib", "celsius"]


@dataclass(frozen=True)
class MetricInfo:
    """One metric a threshold can name."""

    name: str
    kind: Kind
    description: str
    telemetry: bool = False
    """Only the telemetry layer (GPU / engine sources) provides it."""
    no_live: str | None = None
    """Why the snapshot has no live figure for it (None: it has one). Such a metric is
    checked only at the end, against the record, so ``,abort`` on it is refused."""
    needs_gpu_telemetry: bool = False
    """It needs a GPU telemetry source: refused when the run has none."""

    @property
    def live(self) -> bool:
        """The snapshot carries a live figure (an ``,abort`` can act on it)."""
        return self.no_live is None


NO_GPU_TELEMETRY = (
    "gpu.* thresholds need a GPU telemetry source: keep NVML on (the default; --no-nvml "
    "turns it off) or give --dcgm URL (a DCGM exporter's /metrics)"
)
_RECORD_ONLY = "soaktop keeps it only in the record, not in the live histograms"


LATENCIES = {
    "ttft": "time to first token: request sent → first chunk with content, reasoning or tool call",
    "e2e": "end to end: request sent → end of the stream",
    "itl": "inter-token latency: gaps between content chunks",
    "tpot": "time per output token: (E2E − TTFT) / (output tokens − 1)",
    "ttfb": "time to first byte: request sent → response headers (record only, not live)",
    "first_content": "time to first visible content (record only, not live)",
}
STATS = {
    "p50": "median",
    "p90": "90th percentile",
    "p99": "99th percentile",
    "max": "maximum",
    "mean": "mean",
}

_RECORD_ONLY_LATENCIES = frozenset({"ttfb", "first_content"})

OTHER_METRICS = (
    MetricInfo("error_rate", "ratio", "failed / (completed + failed) load requests"),
    MetricInfo("failed", "count", "load requests that failed"),
    MetricInfo("completed", "count", "load requests that completed"),
    MetricInfo("output_tokens_per_s", "throughput", "output tokens per second (drain included)"),
    MetricInfo("requests_per_s", "throughput", "completed requests per second (drain included)"),
    MetricInfo(
        "gpu.min_free_mib",
        "mib",
        "least free GPU memory on any GPU, MiB",
        telemetry=True,
        needs_gpu_telemetry=True,
    ),
    MetricInfo(
        "gpu.max_temp_c",
        "celsius",
        "hottest GPU temperature, °C",
        telemetry=True,
        needs_gpu_telemetry=True,
    ),
    MetricInfo("engine.max_waiting", "count", "longest engine waiting queue, requests", True),
    MetricInfo("engine.max_kv_usage", "ratio", "fullest engine KV cache, 0–1", True),
    MetricInfo(
        "engine.preemptions",
        "count",
        "engine preemptions during the load",
        telemetry=True,
        no_live="the live engine view carries the server's lifetime counter, not this run's count",
    ),
)

METRICS: dict[str, MetricInfo] = {
    f"{base}.{stat}": MetricInfo(
        f"{base}.{stat}",
        "latency",
        f"{what} of {desc}",
        no_live=_RECORD_ONLY if base in _RECORD_ONLY_LATENCIES else None,
    )
    for base, desc in LATENCIES.items()
    for stat, what in STATS.items()
} | {m.name: m for m in OTHER_METRICS}
"""Every metric a threshold can name, with its kind (which units it takes), whether it has
a live figure and whether it needs GPU telemetry."""


def describe_metrics() -> list[str]:
    """One line per known metric: name, kind and what it measures (for help texts), with
    ``[end only]`` (no live figure, no ``,abort``) or why it is not available."""
    width = max(len(name) for name in METRICS)
    return [f"{m.name:<{width}}  {m.kind:<10}  {m.description}{_note(m)}" for m in METRICS.values()]


def _note(m: MetricInfo) -> str:
    if m.needs_gpu_telemetry:
        return " [needs GPU telemetry: NVML or --dcgm URL]"
    return "" if m.live else " [end only: no live figure, so no ,abort]"


# --- metric figures ------------------------------------------------------------------


def metrics_from_snapshot(snapshot: Snapshot) -> dict[str, float | None]:
    """Live figures from ``snapshot.load.cumulative`` (1 % histogram percentiles) and
    ``snapshot.telemetry``; metrics without a live figure (``MetricInfo.no_live``: ttfb,
    first_content, engine.preemptions) are always None."""
    out: dict[str, float | None] = dict.fromkeys(METRICS)
    view = snapshot.load.cumulative
    if view is not None:
        for base, stats in (
            ("ttft", view.ttft_s),
            ("e2e", view.e2e_s),
            ("itl", view.itl_s),
            ("tpot", view.tpot_s),
        ):
            out |= _latency_figures(base, stats)
        out |= _load_counts(view.completed, view.failed)
        out["output_tokens_per_s"] = view.output_tokens_per_s
        out["requests_per_s"] = view.requests_per_s
    engines = [e for e in _entries(snapshot.telemetry, "engines") if _ok(e)]
    gpus = _entries(snapshot.telemetry, "gpus")
    out["engine.max_waiting"] = _worst(engines, "waiting", max)
    out["engine.max_kv_usage"] = _worst(engines, "kv_usage", max)
    out["gpu.min_free_mib"] = _worst(gpus, "memory_free_mib", min)
    out["gpu.max_temp_c"] = _worst(gpus, "temperature_c", max)
    for name, info in METRICS.items():
        if not info.live:
            out[name] = None
    return out


def metrics_from_record(
    load: LoadSummary | None, telemetry: Mapping[str, Any]
) -> dict[str, float | None]:
    """Final figures from the record: exact percentiles, counts over the whole load and
    the telemetry layer's summaries. Nothing when the barrier never released."""
    out: dict[str, float | None] = dict.fromkeys(METRICS)
    if load is not None and load.barrier_released:
        for base in LATENCIES:
            out |= _latency_figures(base, getattr(load, f"{base}_s"))
        out |= _load_counts(load.completed, load.failed)
        out["output_tokens_per_s"] = load.output_tokens_per_s
        out["requests_per_s"] = load.requests_per_s
    engines = _entries(telemetry, "engines")
    gpus = _entries(telemetry, "gpus")
    out["engine.max_waiting"] = _worst(engines, "waiting_max", max)
    out["engine.max_kv_usage"] = _worst(engines, "kv_usage_max", max)
    out["engine.preemptions"] = _worst(engines, "preemptions", sum)
    out["gpu.min_free_mib"] = _worst(gpus, "min_free_mib", min)
    out["gpu.max_temp_c"] = _worst(gpus, "max_temp_c", max)
    return out


def record_source(load: LoadSummary | None) -> str:
    """The ``source`` of states evaluated from a record, naming its percentile method."""
    method = load.ttft_s.method if load is not None else PERCENTILE_METHOD
    return f"record (exact, {method})"


def _latency_figures(base: str, stats: LatencyStats) -> dict[str, float | None]:
    return {f"{base}.{stat}": getattr(stats, stat) for stat in STATS}


def _load_counts(completed: int, failed: int) -> dict[str, float | None]:
    total = completed + failed
    return {
        "completed": float(completed),
        "failed": float(failed),
        "error_rate": failed / total if total else None,
    }


def _field(entry: object, key: str, default: object = None) -> object:
    """One key of a telemetry entry: the JSON (a record's telemetry) or its typed model
    (a snapshot's, ``soak.record.telemetry``)."""
    if isinstance(entry, Mapping):
        return entry.get(key, default)
    return getattr(entry, key, default)


def _entries(telemetry: object, key: str) -> list[object]:
    items = _field(telemetry, key)
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, Mapping | BaseModel)]


def _ok(engine: object) -> bool:
    """An engine entry with a reading (a present ``status`` that is not ``ok`` has none)."""
    return _field(engine, "status", "ok") == "ok"


def _worst(items: list[object], key: str, how: Callable[[list[float]], float]) -> float | None:
    values = [
        float(v)
        for v in (_field(i, key) for i in items)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    ]
    return how(values) if values else None


def why_no_data(metric: str) -> str:
    """Why a threshold's metric had no figure, in words for its reason."""
    info = METRICS.get(metric)
    if info is not None and info.telemetry:
        return "no GPU or engine telemetry source reported it"
    if metric == "error_rate":
        return "no load request completed or failed"
    if metric.endswith("_per_s"):
        return "the load has no elapsed time"
    if metric in ("completed", "failed"):
        return "no load was measured"
    return "no request produced this latency"


# --- formatting ----------------------------------------------------------------------


def format_duration(seconds: float) -> str:
    """Readable duration: ms under 1 s, s under 2 min, then min/h."""
    if seconds < 1:
        return f"{_num(seconds * 1000)} ms"
    if seconds < 120:
        return f"{_num(seconds)} s"
    if seconds < 7200:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s} s" if s else f"{m} min"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m} min" if m else f"{h} h"


def format_value(metric: str, value: float | None) -> str:
    """A metric's figure in its own units (latencies in ms/s, ratios in %)."""
    if value is None:
        return "no data"
    kind = METRICS[metric].kind if metric in METRICS else "count"
    if kind == "latency":
        return f"{_num(value * 1000)} ms" if abs(value) < 1 else f"{_num(value)} s"
    if kind == "ratio":
        return f"{_num(value * 100)} %"
    suffix = {
        "count": "",
        "throughput": " tok/s" if metric.startswith("output_tokens") else " req/s",
        "mib": " MiB",
        "celsius": " °C",
    }[kind]
    return f"{_num(value)}{suffix}"


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"
