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

The drift and leak metrics (``drift.<figure>``, ``leak.<resource>``: :data:`TREND_METRICS`)
read the record's ``endurance`` and the snapshot's live ``endurance`` view; their figures
are :class:`soak.judge.trend_metrics.TrendFigure` (a value and whether the trend behind it
is significant), which ``soak.judge.thresholds.evaluate`` checks accordingly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from loadgen.live import ThroughputView
from loadgen.stats import LatencyStats
from soak.judge.limits import PERCENTILE_METHOD
from soak.judge.trend_metrics import (
    TrendFigure,
    is_trend_metric,
    ratio_figure,
    trend_figures,
    view_figures,
)
from soak.record.endurance import FIGURES, LEAKS, Endurance
from soak.record.models import LoadSummary
from soak.record.snapshot import Snapshot

Kind = Literal[
    "latency",
    "ratio",
    "count",
    "throughput",
    "mib",
    "celsius",
    "drift",
    "drift_points",
    "leak_mem",
    "leak_ratio",
    "leak_count",
]

Figure = float | TrendFigure | None
"""A metric's figure: a number, a trend figure (drift and leak metrics), or no data."""

UNITS: dict[Kind, dict[str, float]] = {
    "latency": {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6},
    "ratio": {"": 1.0, "%": 0.01},
    "count": {"": 1.0},
    "throughput": {"": 1.0},
    "mib": {"": 1.0},
    "celsius": {"": 1.0},
    "drift": {"%": 0.01},
    "drift_points": {"%": 0.01},
    # The project's MB is psutil's bytes / 2**20, so MB and MiB name the same size here.
    "leak_mem": {
        "KB/h": 1 / 1024,
        "KiB/h": 1 / 1024,
        "MB/h": 1.0,
        "MiB/h": 1.0,
        "GB/h": 1024.0,
        "GiB/h": 1024.0,
    },
    "leak_ratio": {"%/h": 0.01, "/h": 1.0},
    "leak_count": {"/h": 1.0},
}
"""The units each kind of metric takes, and their factor to the canonical unit."""
UNIT_HINTS: dict[Kind, str] = {
    "latency": "a latency; use s, ms or us (a bare number is seconds), e.g. 2s or 500ms",
    "ratio": "a ratio; use a bare fraction or %, e.g. 0.001 or 0.1%",
    "count": "a count; use a bare number",
    "throughput": "a rate per second; use a bare number",
    "mib": "MiB; use a bare number of MiB",
    "celsius": "°C; use a bare number of degrees",
    "drift": "a change from the baseline; use a signed %, e.g. -10% or +50%",
    "drift_points": "a ratio's change from the baseline in points; use a signed %, e.g. +1%",
    "leak_mem": (
        "a growth rate; use MB/h or GB/h (MiB/h, GiB/h: the same sizes here), e.g. 200MB/h"
    ),
    "leak_ratio": "a KV usage growth rate; use %/h (points per hour), e.g. 10%/h",
    "leak_count": "a count per hour; use /h, e.g. 100/h",
}
"""What each kind takes, in words for the parse errors."""
EXAMPLES: dict[Kind, str] = {
    "latency": "2s",
    "ratio": "0.1%",
    "drift": "-10%",
    "drift_points": "+1%",
    "leak_mem": "200MB/h",
    "leak_ratio": "10%/h",
    "leak_count": "100/h",
}
"""An example value per kind (the rest: a bare number)."""


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
a live figure and whether it needs GPU telemetry (the drift and leak metrics are apart,
in :data:`TREND_METRICS`)."""

_LEAK_KINDS: dict[str, Kind] = {
    "server_rss": "leak_mem",
    "gpu_mem": "leak_mem",
    "kv_usage": "leak_ratio",
    "client_rss": "leak_mem",
    "open_files": "leak_count",
}


def _drift_metric(figure: str) -> MetricInfo:
    info = FIGURES[figure]
    points = ratio_figure(info)
    return MetricInfo(
        f"drift.{figure}",
        "drift_points" if points else "drift",
        f"change of {info.words} from the baseline windows to the end "
        f"({'points' if points else '%'}), with a significant trend",
        telemetry=figure.startswith(("engine.", "gpu.", "server.")),
        needs_gpu_telemetry=figure.startswith("gpu."),
    )


def _leak_metric(resource: str) -> MetricInfo:
    figure = LEAKS[resource]
    return MetricInfo(
        f"leak.{resource}",
        _LEAK_KINDS[resource],
        f"growth of {FIGURES[figure].words} per hour that did not come back",
        telemetry=not figure.startswith("client."),
        needs_gpu_telemetry=figure.startswith("gpu."),
    )


TREND_METRICS: dict[str, MetricInfo] = {
    m.name: m for m in [_drift_metric(f) for f in FIGURES] + [_leak_metric(r) for r in LEAKS]
}
"""The drift and leak metrics, judged on the window series (``soak.judge.endurance``)."""


def describe_metrics() -> list[str]:
    """One line per known metric: name, kind and what it measures (for help texts), with
    ``[end only]`` (no live figure, no ``,abort``) or why it is not available."""
    width = max(len(name) for name in METRICS)
    return [f"{m.name:<{width}}  {m.kind:<10}  {m.description}{_note(m)}" for m in METRICS.values()]


def describe_trend_metrics() -> list[str]:
    """One line per drift and leak metric (for help texts), as :func:`describe_metrics`."""
    width = max(len(name) for name in TREND_METRICS)
    return [
        f"{m.name:<{width}}  {m.kind:<12}  {m.description}{_note(m)}"
        for m in TREND_METRICS.values()
    ]


def _note(m: MetricInfo) -> str:
    if m.needs_gpu_telemetry:
        return " [needs GPU telemetry: NVML or --dcgm URL]"
    return "" if m.live else " [end only: no live figure, so no ,abort]"


# --- metric figures ------------------------------------------------------------------


def metrics_from_snapshot(snapshot: Snapshot) -> dict[str, Figure]:
    """Live figures from ``snapshot.load.cumulative`` (1 % histogram percentiles) and
    ``snapshot.telemetry``; metrics without a live figure (``MetricInfo.no_live``: ttfb,
    first_content, engine.preemptions) are always None. The drift and leak figures come
    from ``snapshot.endurance`` once a trend can be judged."""
    out: dict[str, Figure] = dict.fromkeys(METRICS)
    view = snapshot.load.cumulative
    if view is not None:
        out |= metrics_from_view(view)
    engines = [e for e in _entries(snapshot.telemetry, "engines") if _ok(e)]
    gpus = _entries(snapshot.telemetry, "gpus")
    out["engine.max_waiting"] = _worst(engines, "waiting", max)
    out["engine.max_kv_usage"] = _worst(engines, "kv_usage", max)
    out["gpu.min_free_mib"] = _worst(gpus, "memory_free_mib", min)
    out["gpu.max_temp_c"] = _worst(gpus, "temperature_c", max)
    for name, info in METRICS.items():
        if not info.live:
            out[name] = None
    # Read leniently: a view-like object without the 1.2 section has no trend figures.
    out |= view_figures(getattr(snapshot, "endurance", None))
    return out


def metrics_from_view(view: ThroughputView) -> dict[str, Figure]:
    """The load metrics with a live figure from one cumulative view (the whole load's,
    or one workload class's: :func:`soak.judge.class_thresholds.class_live_metrics`)."""
    out: dict[str, Figure] = {}
    for base, stats in (
        ("ttft", view.ttft_s),
        ("e2e", view.e2e_s),
        ("itl", view.itl_s),
        ("tpot", view.tpot_s),
    ):
        out |= _latency_figures(base, stats)
    if not view.completed + view.failed:
        # Nothing has ended yet: no data, not 0 — ``output_tokens_per_s>50,abort`` must
        # not stop a load on its first tick, before its first answer could arrive.
        return out | dict.fromkeys(
            ("completed", "failed", "error_rate", "output_tokens_per_s", "requests_per_s")
        )
    out |= _load_counts(view.completed, view.failed)
    out["output_tokens_per_s"] = view.output_tokens_per_s
    out["requests_per_s"] = view.requests_per_s
    return out


def metrics_from_record(
    load: LoadSummary | None,
    telemetry: Mapping[str, Any],
    endurance: Endurance | None = None,
) -> dict[str, Figure]:
    """Final figures from the record: exact percentiles, counts over the whole load and
    the telemetry layer's summaries (nothing when the barrier never released), and the
    drift and leak figures of its ``endurance``."""
    out: dict[str, Figure] = dict.fromkeys(METRICS)
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
    out |= trend_figures(endurance)
    return out


def record_source(load: LoadSummary | None) -> str:
    """The ``source`` of states evaluated from a record, naming its percentile method."""
    method = load.ttft_s.method if load is not None else PERCENTILE_METHOD
    return f"record (exact, {method})"


def _latency_figures(base: str, stats: LatencyStats) -> dict[str, Figure]:
    return {f"{base}.{stat}": getattr(stats, stat) for stat in STATS}


def _load_counts(completed: int, failed: int) -> dict[str, Figure]:
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


CLASS_PREFIX = "class."
"""``class.<name>.<load metric>``: a load metric scoped to one workload class of a mix
(:mod:`soak.judge.class_thresholds`)."""


def class_scope(metric: str) -> tuple[str | None, str]:
    """``(class name, load metric)`` of a class-scoped metric; ``(None, metric)`` else."""
    if not metric.startswith(CLASS_PREFIX):
        return None, metric
    name, _, base = metric.removeprefix(CLASS_PREFIX).partition(".")
    return name, base


def why_no_data(metric: str) -> str:
    """Why a threshold's metric had no figure, in words for its reason."""
    name, metric = class_scope(metric)
    if name is not None:
        return f"class {name!r}: {why_no_data(metric)}"
    if is_trend_metric(metric):
        return (
            "the window series judged no trend for it: too short a run, or no source "
            "for the figure (see the record's endurance)"
        )
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
    metric = class_scope(metric)[1]
    if metric in TREND_METRICS:
        return _trend_value(metric, value)
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


def _trend_value(metric: str, value: float) -> str:
    kind = TREND_METRICS[metric].kind
    sign = "−" if value < 0 else "+"
    magnitude = abs(value)
    if kind == "drift":
        return f"{sign}{_num(magnitude * 100)} %"
    if kind == "drift_points":
        return f"{sign}{_num(magnitude * 100)} points"
    if kind == "leak_ratio":
        return f"{sign}{_num(magnitude * 100)} %/h"
    if kind == "leak_mem":
        return f"{sign}{_num(magnitude)} {'MiB' if metric == 'leak.gpu_mem' else 'MB'}/h"
    return f"{sign}{_num(magnitude)}/h"


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.3g}"
