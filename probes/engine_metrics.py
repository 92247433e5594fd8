"""Engine ``/metrics``: occupancy, KV usage and token counters in one vocabulary.

Parsed with ``prometheus_client``'s parser (never substring matching) and mapped from the
engine's own names. vLLM (current and pre-0.12 names) is mapped here; the table is where
SGLang, TGI and llama.cpp names join (telemetry issue). Counter values are the server's
totals; deltas and resets are the caller's business (``soak.reconcile``).

Server-side latency histograms (TTFT, E2E, queue time) are kept as cumulative buckets;
``server_latency`` turns two samples into the window's delta histogram and estimates its
percentiles by interpolating inside buckets, as Prometheus' ``histogram_quantile`` does.
Those are estimates, labelled so, and never the client's exact percentiles.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

# vocabulary key → (sample name, how several label sets combine)
VLLM_NAMES: dict[str, tuple[tuple[str, ...], str]] = {
    "running": (("vllm:num_requests_running",), "sum"),
    "waiting": (("vllm:num_requests_waiting",), "sum"),
    "kv_usage": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "max"),
    "preemptions_total": (("vllm:num_preemptions_total",), "sum"),
    "prompt_tokens_total": (("vllm:prompt_tokens_total",), "sum"),
    "generation_tokens_total": (("vllm:generation_tokens_total",), "sum"),
    "requests_finished_total": (("vllm:request_success_total",), "sum"),
}
"""Several engines behind one endpoint (the ``engine`` label) add up; KV usage is the
fullest engine's. Old names follow new ones: the first name present wins."""

VLLM_HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
}
"""Vocabulary key → histogram family names (the first present wins). vLLM observes TTFT
when a request's first token is out, E2E and queue time when it finishes."""

HISTOGRAM_METHOD = "server histogram estimate (bucket interpolation)"


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram as exposed, summed over the label sets of one endpoint."""

    buckets: dict[str, float]
    """Upper bound as exposed (``le``: "0.25", "+Inf") → observations at or below it."""
    sum: float
    count: float


@dataclass(frozen=True)
class EngineSample:
    """One scrape of one endpoint. ``None``: the engine does not export it (not zero)."""

    t: float
    """Seconds since the run's monotonic origin."""
    engine: str | None
    values: dict[str, float | None]
    finished_by_reason: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    """Why the scrape failed (then ``values`` is empty)."""
    histograms: dict[str, Histogram] = field(default_factory=dict)
    """Latency histograms by vocabulary key (``VLLM_HISTOGRAMS``); absent: not exported."""


def parse_metrics(text: str, t: float = 0.0) -> EngineSample:
    """Map a Prometheus exposition text to the vocabulary."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    engine = None
    for fam in text_string_to_metric_families(text):
        if fam.name.startswith("vllm:"):
            engine = "vllm"
        for s in fam.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    values: dict[str, float | None] = {}
    for key, (names, how) in VLLM_NAMES.items():
        found = next((samples[n] for n in names if n in samples), None)
        if found is None:
            values[key] = None
            continue
        nums = [v for _, v in found]
        values[key] = max(nums) if how == "max" else sum(nums)
    by_reason: dict[str, float] = {}
    for labels, v in samples.get("vllm:request_success_total", []):
        reason = labels.get("finished_reason", "?")
        by_reason[reason] = by_reason.get(reason, 0.0) + v
    return EngineSample(
        t=t,
        engine=engine,
        values=values,
        finished_by_reason=by_reason,
        histograms=_histograms(samples),
    )


def _histograms(samples: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, Histogram]:
    out: dict[str, Histogram] = {}
    for key, names in VLLM_HISTOGRAMS.items():
        name = next((n for n in names if f"{n}_bucket" in samples), None)
        if name is None:
            continue
        buckets: dict[str, float] = {}
        for labels, v in samples[f"{name}_bucket"]:
            le = labels.get("le", "+Inf")
            buckets[le] = buckets.get(le, 0.0) + v
        out[key] = Histogram(
            buckets=buckets,
            sum=sum(v for _, v in samples.get(f"{name}_sum", [])),
            count=sum(v for _, v in samples.get(f"{name}_count", [])),
        )
    return out


def _bounds(h: Histogram) -> list[tuple[float, float]]:
    """(upper bound, cumulative count), ascending; equal bounds spelled apart are merged."""
    merged: dict[float, float] = {}
    for le, c in h.buckets.items():
        b = float(le)
        merged[b] = merged.get(b, 0.0) + c
    return sorted(merged.items())


def histogram_delta(before: Histogram | None, after: Histogram) -> tuple[Histogram, bool]:
    """What ``after`` observed since ``before``: (delta, reset). A count or bucket that went
    down means the server restarted (counter reset): then ``after`` alone is the delta."""
    if before is None:
        return after, False
    b = dict(_bounds(before))
    a = _bounds(after)
    if after.count < before.count or any(c < b.get(le, 0.0) for le, c in a):
        return after, True
    return (
        Histogram(
            buckets={str(le) if le != math.inf else "+Inf": c - b.get(le, 0.0) for le, c in a},
            sum=after.sum - before.sum,
            count=after.count - before.count,
        ),
        False,
    )


def histogram_quantile(q: float, h: Histogram) -> tuple[float, bool] | None:
    """The ``q``-quantile (0 ≤ q ≤ 1) by linear interpolation inside its bucket, as
    Prometheus' ``histogram_quantile``: (value, capped). ``capped``: it fell in the +Inf
    bucket, and the value is the highest finite bound (a lower bound of the truth). None
    without observations or without a +Inf bucket."""
    bounds = _bounds(h)
    if not bounds or bounds[-1][0] != math.inf or bounds[-1][1] <= 0:
        return None
    rank = q * bounds[-1][1]
    i = next(i for i, (_, c) in enumerate(bounds) if c >= rank)
    if i == len(bounds) - 1:  # the +Inf bucket
        return (bounds[-2][0] if len(bounds) > 1 else math.nan), True
    end, cum = bounds[i]
    if i == 0 and end <= 0:
        return end, False
    start, below = bounds[i - 1] if i > 0 else (0.0, 0.0)
    in_bucket = cum - below
    if in_bucket <= 0:  # q == 0 at an empty leading bucket
        return start, False
    return start + (end - start) * (rank - below) / in_bucket, False


def server_latency(
    before: EngineSample | None, after: EngineSample, key: str
) -> dict[str, object] | None:
    """p50/p90/p99/mean of one server histogram (``ttft``, ``e2e``, ``queue``) over the
    window between two samples, with ``n`` (observations in the window) and the method.
    None when the engine does not export that histogram; percentiles None when nothing was
    observed. A ``note`` says when a counter reset or the +Inf bucket shaped the numbers."""
    h_after = after.histograms.get(key)
    if h_after is None:
        return None
    h_before = before.histograms.get(key) if before is not None else None
    delta, reset = histogram_delta(h_before, h_after)
    n = round(delta.count)
    out: dict[str, object] = {"p50": None, "p90": None, "p99": None, "mean": None}
    notes: list[str] = []
    if reset:
        notes.append("counter reset during the window: counts since the restart only")
    capped: list[str] = []
    if n > 0:
        out["mean"] = delta.sum / delta.count
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            est = histogram_quantile(q, delta)
            if est is None:
                continue
            value, over = est
            out[name] = None if math.isnan(value) else value
            if over:
                capped.append(name)
    if capped:
        top = [le for le, _ in _bounds(delta) if le != math.inf]
        bound = f"{top[-1]:g} s" if top else "no finite bound"
        notes.append(
            f"{', '.join(capped)} above the highest finite bucket ({bound}): reported as "
            "that bound, a lower bound of the true value"
        )
    out |= {"n": n, "method": HISTOGRAM_METHOD}
    if notes:
        out["note"] = "; ".join(notes)
    return out


async def scrape(client: httpx.AsyncClient, base: str, origin_ns: int) -> EngineSample:
    """GET ``base/metrics`` once; a failure is a sample with ``error`` set, never a raise."""
    t = (time.perf_counter_ns() - origin_ns) / 1e9
    try:
        r = await client.get(f"{base}/metrics")
    except httpx.HTTPError as e:
        return EngineSample(t=t, engine=None, values={}, error=f"{type(e).__name__}: {e}")
    if r.status_code != 200:
        return EngineSample(t=t, engine=None, values={}, error=f"HTTP {r.status_code}")
    try:
        return parse_metrics(r.text, t)
    except ValueError as e:
        return EngineSample(t=t, engine=None, values={}, error=f"unparsable /metrics: {e}")
