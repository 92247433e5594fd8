"""k6-style thresholds: pass/fail conditions on run metrics (``--threshold EXPR``, repeatable).

An expression is ``METRIC OP VALUE[UNIT][,abort][,grace=DURATION]``, for example
``ttft.p99<2s``, ``error_rate<0.1%``, ``output_tokens_per_s>1000`` or
``e2e.p99<20s,abort,grace=60s``. The condition is what must hold: ``ttft.p99<2s`` is
breached when the p99 TTFT is 2 s or more.

Thresholds are checked twice, against two kinds of figures that are never mixed up:

- live, once a second, from the snapshot's cumulative view (1 % histogram buckets): a
  ``ThresholdWatch`` remembers when each one was first breached, and an ``abort``
  threshold stops the load once it is breached and its grace has passed (k6's
  ``abortOnFail`` / ``delayAbortEval``);
- at the end, from the record's exact figures: that decides the verdict.

A metric without a value is ``no_data``, never ok: a threshold nobody could check makes
the run INVALID, not PASSED. So what is known up front never to be checkable is refused
when parsed instead: ``,abort`` on a metric without a live figure (``ttfb.*``,
``first_content.*`` and ``engine.preemptions`` are checked only at the end, against the
record), and ``gpu.*`` thresholds when the run has no GPU telemetry source (``--dcgm``).

Telemetry keys read here (the telemetry layer writes them; absent keys mean no data):

- snapshot ``telemetry["engines"]``: list of dicts, one per endpoint, with ``waiting`` and
  ``kv_usage`` (0–1); entries whose ``status`` is present and not ``"ok"`` are skipped.
  (They also carry the server's lifetime ``preemptions_total``, which is not this run's
  count: ``engine.preemptions`` has no live figure.)
- snapshot ``telemetry["gpus"]``: list of dicts with ``memory_free_mib`` and
  ``temperature_c`` (the latest sample; for when GPU telemetry exists).
- record ``telemetry["engines"]``: list of dicts with ``waiting_max``, ``kv_usage_max`` and
  optionally ``preemptions`` (peaks / counts over the load).
- record ``telemetry["gpus"]``: list of dicts with ``min_free_mib`` and ``max_temp_c``.

Across endpoints and GPUs the worst one counts: the largest waiting queue, KV usage and
temperature, the smallest free memory; preemptions add up.
"""

from __future__ import annotations

import difflib
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict

from loadgen.stats import LatencyStats
from soak.record.models import LoadSummary, Reason
from soak.record.snapshot import Snapshot

Op = Literal["<", "<=", ">", ">=", "==", "!="]
Kind = Literal["latency", "ratio", "count", "throughput", "mib", "celsius"]

LIVE_SOURCE = "live histogram (1 % buckets)"
"""The ``source`` of states evaluated from a snapshot."""

OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": lambda a, b: math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12),
    "!=": lambda a, b: not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12),
}
"""``==``/``!=`` compare with a relative tolerance of 1e-9 so unit conversions
(``50ms`` vs 0.05 s) do not make equal values differ."""


class ThresholdError(ValueError):
    """An expression that cannot be parsed; ``str()`` is the operator's message."""


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


"""Whether soaktop samples GPUs (NVML/DCGM). Until it does, ``gpu.*`` thresholds are refused
at parse time: a long soak must not end INVALID for a threshold known up front to be
uncheckable. Turning GPU telemetry on is this one line."""

_NO_GPU_TELEMETRY = (
    "gpu.* thresholds need a GPU telemetry source: keep NVML on (the default; --no-nvml "
    "turns it off) or give --dcgm URL (a DCGM exporter's /metrics)"
)
_RECORD_ONLY = "soaktop keeps it only in the record, not in the live histograms"


_LATENCIES = {
    "ttft": "time to first token: request sent → first chunk with content, reasoning or tool call",
    "e2e": "end to end: request sent → end of the stream",
    "itl": "inter-token latency: gaps between content chunks",
    "tpot": "time per output token: (E2E − TTFT) / (output tokens − 1)",
    "ttfb": "time to first byte: request sent → response headers (record only, not live)",
    "first_content": "time to first visible content (record only, not live)",
}
_STATS = {
    "p50": "median",
    "p90": "90th percentile",
    "p99": "99th percentile",
    "max": "maximum",
    "mean": "mean",
}

_RECORD_ONLY_LATENCIES = frozenset({"ttfb", "first_content"})

_OTHER = (
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
    for base, desc in _LATENCIES.items()
    for stat, what in _STATS.items()
} | {m.name: m for m in _OTHER}
"""Every metric a threshold can name, with its kind (which units it takes), whether it has
a live figure and whether it needs GPU telemetry."""

_UNITS: dict[Kind, dict[str, float]] = {
    "latency": {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6},
    "ratio": {"": 1.0, "%": 0.01},
    "count": {"": 1.0},
    "throughput": {"": 1.0},
    "mib": {"": 1.0},
    "celsius": {"": 1.0},
}
_UNIT_HINTS: dict[Kind, str] = {
    "latency": "a latency; use s, ms or us (a bare number is seconds), e.g. 2s or 500ms",
    "ratio": "a ratio; use a bare fraction or %, e.g. 0.001 or 0.1%",
    "count": "a count; use a bare number",
    "throughput": "a rate per second; use a bare number",
    "mib": "MiB; use a bare number of MiB",
    "celsius": "°C; use a bare number of degrees",
}
_DURATION_UNITS = {"": 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

_NUMBER = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(\S*)$")
_METRIC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*")


class Threshold(BaseModel):
    """One parsed threshold; ``value`` is in canonical units (seconds, fractions)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expr: str
    """The expression as given."""
    condition: str
    """The comparison as written, without spaces or options, e.g. ``e2e.p99<20s``."""
    metric: str
    op: Op
    value: float
    abort_on_fail: bool = False
    grace_s: float = 0.0
    """With ``abort``: load seconds before a breach may stop the load."""


class ThresholdState(BaseModel):
    """A threshold checked against one set of figures."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    expr: str
    condition: str
    metric: str
    state: Literal["ok", "breached", "no_data"]
    observed: float | None
    limit: float
    source: str
    """Where the figure came from, e.g. ``live histogram (1 % buckets)``."""
    first_breach_s: float | None = None
    """Seconds since the run origin when it was first breached live (a ThresholdWatch)."""


# --- parsing -------------------------------------------------------------------------


def describe_metrics() -> list[str]:
    """One line per known metric: name, kind and what it measures (for help texts), with
    ``[end only]`` (no live figure, no ``,abort``) or why it is not available."""
    width = max(len(name) for name in METRICS)
    return [f"{m.name:<{width}}  {m.kind:<10}  {m.description}{_note(m)}" for m in METRICS.values()]


def _note(m: MetricInfo) -> str:
    if m.needs_gpu_telemetry:
        return " [needs GPU telemetry: NVML or --dcgm URL]"
    return "" if m.live else " [end only: no live figure, so no ,abort]"


def parse_threshold(text: str, *, gpu_telemetry: bool = False) -> Threshold:
    """Parse ``METRIC OP VALUE[UNIT][,abort][,grace=DURATION]``; raise ThresholdError.

    ``gpu_telemetry``: the run has a GPU source, so ``gpu.*`` metrics can have data."""
    head, *options = text.split(",")
    metric, op, rest = _split_condition(text, head)
    info = _metric_info(text, metric)
    if info.needs_gpu_telemetry and not gpu_telemetry:
        raise _fail(text, _NO_GPU_TELEMETRY)
    value = _parse_value(text, info, op, rest)
    abort, grace_s = _parse_options(text, options)
    if abort and info.no_live is not None:
        raise _fail(
            text,
            f"{metric} has no live figure ({info.no_live}): it is checked only at the end, "
            "against the record, so ',abort' could never fire; drop ',abort'",
        )
    return Threshold(
        expr=text,
        condition=re.sub(r"\s+", "", head),
        metric=metric,
        op=op,
        value=value,
        abort_on_fail=abort,
        grace_s=grace_s,
    )


def parse_thresholds(texts: Sequence[str], *, gpu_telemetry: bool = False) -> list[Threshold]:
    """Parse several expressions (``--threshold`` given repeatedly); duplicates are errors."""
    out: list[Threshold] = []
    for text in texts:
        t = parse_threshold(text, gpu_telemetry=gpu_telemetry)
        if any(o.condition == t.condition for o in out):
            raise ThresholdError(f"threshold {text!r}: given twice; give each condition once")
        out.append(t)
    return out


def _fail(text: str, why: str) -> ThresholdError:
    return ThresholdError(f"threshold {text!r}: {why}")


def _split_condition(text: str, head: str) -> tuple[str, Op, str]:
    if not head.strip():
        raise _fail(text, "empty expression; write METRIC OP VALUE, e.g. ttft.p99<2s")
    m = _METRIC.match(head)
    if m is None:
        raise _fail(text, f"it must start with a metric name; {_known_metrics()}")
    metric, rest = m.group(1), head[m.end() :]
    op_match = re.match(r"[<>=!]+", rest)
    allowed = ", ".join(OPS)
    if op_match is None:
        raise _fail(text, f"missing comparison after {metric!r}; use one of {allowed}")
    op = op_match.group(0)
    if op not in OPS:
        raise _fail(text, f"unknown operator {op!r}; use one of {allowed}")
    return metric, cast(Op, op), rest[op_match.end() :].strip()


def _known_metrics() -> str:
    others = ", ".join(m.name for m in _OTHER)
    return f"known metrics: {'|'.join(_LATENCIES)}.{{{','.join(_STATS)}}}, {others}"


def _metric_info(text: str, metric: str) -> MetricInfo:
    if metric in METRICS:
        return METRICS[metric]
    base, _, stat = metric.partition(".")
    stats = ", ".join(_STATS)
    if base in _LATENCIES and not stat:
        raise _fail(text, f"{base!r} needs a statistic, e.g. {base}.p99; use one of {stats}")
    if base in _LATENCIES:
        raise _fail(text, f"unknown statistic {stat!r}; use one of {stats}")
    close = difflib.get_close_matches(metric, list(METRICS), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise _fail(text, f"unknown metric {metric!r}; {hint}{_known_metrics()}")


def _parse_value(text: str, info: MetricInfo, op: str, raw: str) -> float:
    if not raw:
        example = "2s" if info.kind == "latency" else "0.1%" if info.kind == "ratio" else "10"
        raise _fail(text, f"missing value after {op!r}, e.g. {info.name}{op}{example}")
    m = _NUMBER.match(raw)
    if m is None:
        raise _fail(text, f"value {raw!r} is not a number; {info.name} is {_UNIT_HINTS[info.kind]}")
    number, unit = float(m.group(1)), m.group(2)
    factors = _UNITS[info.kind]
    if unit not in factors:
        raise _fail(
            text, f"unit {unit!r} does not fit {info.name}, which is {_UNIT_HINTS[info.kind]}"
        )
    return number * factors[unit]


def _parse_options(text: str, options: list[str]) -> tuple[bool, float]:
    abort, grace_s, grace_given = False, 0.0, False
    for raw in (o.strip() for o in options):
        if raw == "abort":
            abort = True
        elif raw.startswith("grace="):
            grace_s, grace_given = _parse_duration(text, raw.removeprefix("grace=").strip()), True
        else:
            raise _fail(
                text, f"unknown option {raw!r}; use abort and/or grace=DURATION (e.g. grace=60s)"
            )
    if grace_given and not abort:
        raise _fail(text, "grace only delays an abort; add ',abort' or drop the grace")
    return abort, grace_s


def _parse_duration(text: str, raw: str) -> float:
    m = _NUMBER.match(raw)
    if m is None or m.group(2) not in _DURATION_UNITS or float(m.group(1)) < 0:
        raise _fail(
            text,
            f"grace {raw!r} is not a duration; use a number ≥ 0 with ms, s, m or h, e.g. grace=60s",
        )
    return float(m.group(1)) * _DURATION_UNITS[m.group(2)]


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
    engines = [e for e in _dicts(snapshot.telemetry, "engines") if e.get("status", "ok") == "ok"]
    gpus = _dicts(snapshot.telemetry, "gpus")
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
        for base in _LATENCIES:
            out |= _latency_figures(base, getattr(load, f"{base}_s"))
        out |= _load_counts(load.completed, load.failed)
        out["output_tokens_per_s"] = load.output_tokens_per_s
        out["requests_per_s"] = load.requests_per_s
    engines = _dicts(telemetry, "engines")
    gpus = _dicts(telemetry, "gpus")
    out["engine.max_waiting"] = _worst(engines, "waiting_max", max)
    out["engine.max_kv_usage"] = _worst(engines, "kv_usage_max", max)
    out["engine.preemptions"] = _worst(engines, "preemptions", sum)
    out["gpu.min_free_mib"] = _worst(gpus, "min_free_mib", min)
    out["gpu.max_temp_c"] = _worst(gpus, "max_temp_c", max)
    return out


def record_source(load: LoadSummary | None) -> str:
    """The ``source`` of states evaluated from a record, naming its percentile method."""
    method = load.ttft_s.method if load is not None else "nearest-rank"
    return f"record (exact, {method})"


def _latency_figures(base: str, stats: LatencyStats) -> dict[str, float | None]:
    return {f"{base}.{stat}": getattr(stats, stat) for stat in _STATS}


def _load_counts(completed: int, failed: int) -> dict[str, float | None]:
    total = completed + failed
    return {
        "completed": float(completed),
        "failed": float(failed),
        "error_rate": failed / total if total else None,
    }


def _dicts(telemetry: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = telemetry.get(key)
    if not isinstance(items, list):
        return []
    return [i for i in items if isinstance(i, Mapping)]


def _worst(
    items: list[Mapping[str, Any]], key: str, how: Callable[[list[float]], float]
) -> float | None:
    values = [
        float(v)
        for v in (i.get(key) for i in items)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    ]
    return how(values) if values else None


# --- evaluation ----------------------------------------------------------------------


def evaluate(
    thresholds: Sequence[Threshold], metrics: Mapping[str, float | None], source: str
) -> list[ThresholdState]:
    """Check each threshold against ``metrics``; a missing or None figure is ``no_data``."""
    return [_check(t, metrics.get(t.metric), source) for t in thresholds]


def _check(t: Threshold, observed: float | None, source: str) -> ThresholdState:
    if observed is None or math.isnan(observed):
        state: Literal["ok", "breached", "no_data"] = "no_data"
        observed = None
    else:
        state = "ok" if OPS[t.op](observed, t.value) else "breached"
    return ThresholdState(
        expr=t.expr,
        condition=t.condition,
        metric=t.metric,
        state=state,
        observed=observed,
        limit=t.value,
        source=source,
    )


class ThresholdWatch:
    """Live checks, once per snapshot: remembers first breaches and decides aborts."""

    def __init__(self, thresholds: Sequence[Threshold], source: str = LIVE_SOURCE) -> None:
        self.thresholds = list(thresholds)
        self.source = source
        self.states: list[ThresholdState] = []
        """The latest states, each with its first live breach (pass to threshold_reasons)."""
        self._first: list[float | None] = [None] * len(self.thresholds)
        self._load_elapsed_s: float | None = None

    def update(
        self, metrics: Mapping[str, float | None], t_s: float, load_elapsed_s: float | None
    ) -> list[ThresholdState]:
        """Check the thresholds now; ``t_s`` is seconds since the run origin and
        ``load_elapsed_s`` seconds since the barrier released (None before the load)."""
        self._load_elapsed_s = load_elapsed_s
        states = evaluate(self.thresholds, metrics, self.source)
        for i, s in enumerate(states):
            if s.state == "breached" and self._first[i] is None:
                self._first[i] = t_s
        self.states = [
            s.model_copy(update={"first_breach_s": f})
            for s, f in zip(states, self._first, strict=True)
        ]
        return self.states

    def abort_due(self) -> Threshold | None:
        """The first ``abort`` threshold breached now whose grace has passed, or None."""
        elapsed = self._load_elapsed_s
        if elapsed is None:
            return None
        for t, s in zip(self.thresholds, self.states, strict=True):
            if t.abort_on_fail and s.state == "breached" and elapsed >= t.grace_s:
                return t
        return None


# --- reasons -------------------------------------------------------------------------


def threshold_reasons(
    final_states: Sequence[ThresholdState],
    live_breaches: Sequence[ThresholdState] = (),
    abort: Threshold | None = None,
) -> list[Reason]:
    """Verdict reasons: a breach FAILS, no data is INVALID, a live-only breach is a note.

    ``final_states`` come from the record; ``live_breaches`` are a ThresholdWatch's
    states (their ``first_breach_s``); ``abort`` is the threshold that stopped the load.
    """
    live = {s.expr: s for s in live_breaches}
    out: list[Reason] = []
    if abort is not None:
        out.append(_abort_reason(abort, live.get(abort.expr)))
    for s in final_states:
        if abort is not None and s.expr == abort.expr:
            continue
        reason = _final_reason(s, live.get(s.expr))
        if reason is not None:
            out.append(reason)
    return out


def _final_reason(s: ThresholdState, live: ThresholdState | None) -> Reason | None:
    first = live.first_breach_s if live is not None else None
    if s.state == "breached":
        when = f"; first breached live at {format_duration(first)}" if first is not None else ""
        return Reason(
            code="threshold",
            effect="failed",
            message=(
                f"threshold {s.condition} breached: {format_value(s.metric, s.observed)}, "
                f"from the {s.source}{when}"
            ),
        )
    if s.state == "no_data":
        return Reason(
            code="threshold_no_data",
            effect="invalid",
            message=(
                f"threshold {s.condition} could not be checked: {s.metric} had no data "
                f"({_why_no_data(s.metric)}); no data is never ok, so the run cannot pass it"
            ),
        )
    if first is None:
        return None
    return Reason(
        code="threshold_breached_live",
        effect="note",
        message=(
            f"threshold {s.condition} held at the end ({format_value(s.metric, s.observed)}, "
            f"from the {s.source}) but was first breached live at {format_duration(first)}: "
            "part of the run was worse than the final figure shows"
        ),
    )


def _abort_reason(t: Threshold, live: ThresholdState | None) -> Reason:
    when = ""
    if live is not None and live.first_breach_s is not None:
        when = f" at {format_duration(live.first_breach_s)}"
    seen = ""
    if live is not None and live.observed is not None:
        seen = f" ({format_value(t.metric, live.observed)}, {live.source})"
    grace = f", grace {format_duration(t.grace_s)}" if t.grace_s else ""
    return Reason(
        code="threshold_abort",
        effect="failed",
        message=(
            f"threshold {t.condition} breached{when}{seen}: the load was stopped early "
            f"(abort_on_fail{grace})"
        ),
    )


def _why_no_data(metric: str) -> str:
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
