"""Engine ``/metrics``: occupancy, KV usage and token counters in one vocabulary.

Parsed with ``prometheus_client``'s parser (never substring matching) and mapped from the
engine's own names. vLLM (current and pre-0.12 names) is mapped here; the table is where
SGLang, TGI and llama.cpp names join (telemetry issue). Counter values are the server's
totals; deltas and resets are the caller's business (``soak.reconcile``).
"""

from __future__ import annotations

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
    return EngineSample(t=t, engine=engine, values=values, finished_by_reason=by_reason)


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
