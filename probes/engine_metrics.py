"""Engine ``/metrics``: occupancy, KV usage and token counters in one vocabulary.

Parsed with ``prometheus_client``'s parser (never substring matching) in one pass; the
engine is recognised from the metric names present (``vllm:``, ``sglang:``, ``tgi_``,
``llamacpp:``) and its names are mapped through that engine's table (``ENGINES``). A key
the engine does not export is ``None``, never 0. Counter values are the server's totals;
deltas and resets are the caller's business (``soak.judge.reconcile``).

Several engines behind one endpoint (vLLM data parallel: the ``engine`` label; SGLang:
``dp_rank``) add up in ``values``; ``EngineSample.engines`` holds each engine's own.

Server-side latency histograms (TTFT, E2E, queue time) are kept as cumulative buckets;
``server_latency`` turns two samples into the window's delta histogram and estimates its
percentiles by interpolating inside buckets, as Prometheus' ``histogram_quantile`` does
(the bucket maths: :mod:`probes.server_histogram`).
Those are estimates, labelled so, and never the client's exact percentiles.

Names come from ``shared/docs/ENGINE_FACTS.md`` unless a comment says otherwise.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import httpx
from prometheus_client.parser import text_string_to_metric_families

from probes.neterrors import client_side
from probes.server_histogram import (
    HISTOGRAM_METHOD,
    Histogram,
    finite_bounds,
    histogram_delta,
    histogram_estimate,
    merge_buckets,
)

Combine = Literal["sum", "max", "mean"]
"""How the label sets (engines, ranks) of one key add up: counters and queue lengths sum,
KV usage is the fullest engine's, a ratio gauge is averaged (an unweighted mean)."""

VOCABULARY: dict[str, str] = {
    "running": "requests in the running batch",
    "waiting": "requests queued for the batch",
    "kv_usage": "KV cache in use, 0-1 (the fullest engine's)",
    "preemptions_total": "counter: requests preempted (SGLang: retracted)",
    "prompt_tokens_total": "counter: prompt tokens",
    "generation_tokens_total": "counter: generated tokens",
    "requests_finished_total": "counter: finished requests (finished_by_reason splits it)",
    "prefix_cache_hits_total": "counter: prefix-cache hits, in tokens",
    "prefix_cache_queries_total": "counter: prefix-cache lookups, in tokens",
    "prefix_cache_hit_rate": "gauge 0-1, only where the engine computes the ratio itself",
    "spec_decode_drafts_total": "counter: speculative drafts proposed",
    "spec_decode_draft_tokens_total": "counter: draft tokens proposed",
    "spec_decode_accepted_tokens_total": "counter: draft tokens accepted",
    "spec_accept_rate": "gauge 0-1, only where the engine computes the ratio itself",
    "token_slots": "KV cache capacity in tokens (summed over engines)",
}
"""Every key of ``EngineSample.values`` and what it means."""

_VLLM_SLOTS = "vllm:cache_config_info[num_gpu_blocks*block_size]"
"""A synthetic series name (brackets and ``*`` can never be in a metric name): the token
slots computed from each ``vllm:cache_config_info`` label set."""


class ReasonSource(NamedTuple):
    """Where ``finished_by_reason`` comes from: a series whose ``label`` holds the reason,
    or a series that counts one ``fixed`` reason."""

    sample: str
    label: str | None = None
    fixed: str | None = None


@dataclass(frozen=True)
class EngineTable:
    """How one engine's ``/metrics`` names map to the vocabulary."""

    engine: str
    """The name ``EngineSample.engine`` reports."""
    prefix: str
    """Metric-family prefix that identifies the engine."""
    values: dict[str, tuple[tuple[str, ...], Combine]]
    """Vocabulary key → (sample names, the first present wins; how label sets combine).
    Keys absent here are keys the engine does not export."""
    histograms: dict[str, tuple[str, ...]]
    """Latency key → histogram family names (the first present wins)."""
    reasons: tuple[ReasonSource, ...] = ()
    engine_label: str | None = None
    """The label that tells several engines behind one endpoint apart."""
    config_info: str | None = None
    """An info gauge whose labels are the cache configuration (``cache_config``)."""
    sums: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Synthetic series → the unlabelled series it adds up (only when all are exposed)."""


VLLM = EngineTable(
    engine="vllm",
    prefix="vllm:",
    values={
        "running": (("vllm:num_requests_running",), "sum"),
        "waiting": (("vllm:num_requests_waiting",), "sum"),
        "kv_usage": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), "max"),
        "preemptions_total": (("vllm:num_preemptions_total",), "sum"),
        "prompt_tokens_total": (("vllm:prompt_tokens_total",), "sum"),
        "generation_tokens_total": (("vllm:generation_tokens_total",), "sum"),
        "requests_finished_total": (("vllm:request_success_total",), "sum"),
        # gpu_prefix_cache_*: older v1 spelling, not in ENGINE_FACTS (seen in public
        # scrapers of pre-0.12 servers); the current name wins when both are exposed.
        "prefix_cache_hits_total": (
            ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
            "sum",
        ),
        "prefix_cache_queries_total": (
            ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
            "sum",
        ),
        "spec_decode_drafts_total": (("vllm:spec_decode_num_drafts_total",), "sum"),
        "spec_decode_draft_tokens_total": (("vllm:spec_decode_num_draft_tokens_total",), "sum"),
        "spec_decode_accepted_tokens_total": (
            ("vllm:spec_decode_num_accepted_tokens_total",),
            "sum",
        ),
        "token_slots": ((_VLLM_SLOTS,), "sum"),
    },
    # TTFT is observed when a request's first token is out, E2E and queue time when it
    # finishes.
    histograms={
        "ttft": ("vllm:time_to_first_token_seconds",),
        "e2e": ("vllm:e2e_request_latency_seconds",),
        "queue": ("vllm:request_queue_time_seconds",),
    },
    reasons=(ReasonSource("vllm:request_success_total", label="finished_reason"),),
    engine_label="engine",
    config_info="vllm:cache_config_info",
)

SGLANG = EngineTable(
    engine="sglang",
    prefix="sglang:",
    values={
        "running": (("sglang:num_running_reqs",), "sum"),
        "waiting": (("sglang:num_queue_reqs",), "sum"),
        "kv_usage": (("sglang:token_usage",), "max"),
        "preemptions_total": (("sglang:num_retracted_requests_total",), "sum"),
        "prompt_tokens_total": (("sglang:prompt_tokens_total",), "sum"),
        "generation_tokens_total": (("sglang:generation_tokens_total",), "sum"),
        # Counted when a request finishes, aborted ones included as far as SGLang's
        # tokenizer manager sees them finish; the abort counter below is subtracted by
        # reconciliation (finished_by_reason["abort"]).
        "requests_finished_total": (("sglang:num_requests_total",), "sum"),
        # The last prefill batch's hit rate (SGLang's decode-batch log writes 0 to it):
        # a moment's ratio, not a cumulative one (metrics/collector.py, scheduler mixin).
        "prefix_cache_hit_rate": (("sglang:cache_hit_rate",), "mean"),
        # 0 when speculative decoding is off: SGLang writes the gauge either way.
        "spec_accept_rate": (("sglang:spec_accept_rate",), "mean"),
        "token_slots": (("sglang:max_total_num_tokens",), "sum"),
    },
    # TTFT and E2E come from the tokenizer manager; queue time from each scheduler
    # (sglang/srt/metrics/collector.py: queue_time_seconds).
    histograms={
        "ttft": ("sglang:time_to_first_token_seconds",),
        "e2e": ("sglang:e2e_request_latency_seconds",),
        "queue": ("sglang:queue_time_seconds",),
    },
    reasons=(ReasonSource("sglang:num_aborted_requests_total", fixed="abort"),),
    # Scheduler series carry dp_rank under data parallelism; the tokenizer's counters
    # (tokens, requests) carry no rank, so they are endpoint totals only.
    engine_label="dp_rank",
)

TGI = EngineTable(
    engine="tgi",
    prefix="tgi_",
    values={
        "running": (("tgi_batch_current_size",), "sum"),
        "waiting": (("tgi_queue_size",), "sum"),
        # TGI's exporter writes counters without ``_total``; prometheus_client's parser
        # renames such a TYPE'd counter's sample to ``…_total``, an untyped one keeps its
        # name: both spellings are listed.
        "requests_finished_total": (("tgi_request_success_total", "tgi_request_success"), "sum"),
        # Histogram sums: generated tokens of successful requests (router/src/server.rs),
        # input tokens of every validated request (recorded before generation).
        "generation_tokens_total": (("tgi_request_generated_tokens_sum",), "sum"),
        "prompt_tokens_total": (("tgi_request_input_length_sum",), "sum"),
    },
    histograms={
        "e2e": ("tgi_request_duration",),
        "queue": ("tgi_request_queue_duration",),
    },
)

_LLAMACPP_PROMPT = "llamacpp:prompt_tokens_total+prompt_tokens_cached_total"
"""A synthetic series (``+`` can never be in a metric name): every prompt token a request
brought. llama-server's ``prompt_tokens_total`` excludes the tokens its slot's prompt cache
reused (``prompt_tokens_cached_total``), while its ``usage.prompt_tokens`` counts both:
checked against a real llama-server (tests/real_engine/test_llamacpp_facts.py)."""

LLAMACPP = EngineTable(
    engine="llamacpp",
    prefix="llamacpp:",
    values={
        "running": (("llamacpp:requests_processing",), "sum"),
        "waiting": (("llamacpp:requests_deferred",), "sum"),
        "kv_usage": (("llamacpp:kv_cache_usage_ratio",), "max"),  # older builds only
        # A build without the cached counter: its processed count alone (which also left
        # out cache hits, so a reconciliation there can fall short by the hits).
        "prompt_tokens_total": ((_LLAMACPP_PROMPT, "llamacpp:prompt_tokens_total"), "sum"),
        "generation_tokens_total": (("llamacpp:tokens_predicted_total",), "sum"),
        "prefix_cache_hits_total": (("llamacpp:prompt_tokens_cached_total",), "sum"),
        "prefix_cache_queries_total": ((_LLAMACPP_PROMPT,), "sum"),
    },
    histograms={},
    sums={
        _LLAMACPP_PROMPT: ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total")
    },
)

ENGINES: tuple[EngineTable, ...] = (VLLM, SGLANG, TGI, LLAMACPP)
"""Detection order: the first engine with a metric family under its prefix wins."""

VLLM_NAMES = VLLM.values
"""vLLM's table (kept for older imports)."""
VLLM_HISTOGRAMS = VLLM.histograms
"""vLLM's histogram names (kept for older imports)."""

_Series = list[tuple[dict[str, str], float]]


@dataclass(frozen=True)
class EngineSample:
    """One scrape of one endpoint. ``None``: the engine does not export it (not zero)."""

    t: float
    """Seconds since the run's monotonic origin."""
    engine: str | None
    """``"vllm"``, ``"sglang"``, ``"tgi"``, ``"llamacpp"``; None: no known engine."""
    values: dict[str, float | None]
    """Every ``VOCABULARY`` key, for the whole endpoint (all its engines together)."""
    finished_by_reason: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    """Why the scrape failed (then ``values`` is empty)."""
    histograms: dict[str, Histogram] = field(default_factory=dict)
    """Latency histograms by key (``ttft``, ``e2e``, ``queue``); absent: not exported."""
    cache_config: dict[str, str] = field(default_factory=dict)
    """vLLM's ``cache_config_info`` labels as exposed (its first engine's); else empty."""
    engines: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """Per engine behind the endpoint (vLLM ``engine``, SGLang ``dp_rank`` label value):
    the vocabulary from that engine's series only; None where it has none (SGLang's
    token and request counters carry no rank). Empty with a single engine."""


def detect_engine(families: Iterable[str]) -> EngineTable | None:
    """The table of the first engine (``ENGINES`` order) with a family under its prefix."""
    names = list(families)
    return next((e for e in ENGINES if any(n.startswith(e.prefix) for n in names)), None)


def parse_metrics(text: str, t: float = 0.0) -> EngineSample:
    """Map a Prometheus exposition text to the vocabulary (see ``VOCABULARY``)."""
    samples: dict[str, _Series] = {}
    families: list[str] = []
    for fam in text_string_to_metric_families(text):
        families.append(fam.name)
        for s in fam.samples:
            # float(): the parser keeps "25" an int (TGI, llama.cpp write integers)
            samples.setdefault(s.name, []).append((s.labels, float(s.value)))
    table = detect_engine(families)
    if table is None:
        return EngineSample(t=t, engine=None, values=dict.fromkeys(VOCABULARY))
    cache_config: dict[str, str] = {}
    info = samples.get(table.config_info) if table.config_info else None
    if info:
        cache_config = dict(info[0][0])
        slots = [(labels, n) for labels, _ in info if (n := _token_slots(labels)) is not None]
        if slots:
            samples[_VLLM_SLOTS] = slots
    for name, parts in table.sums.items():
        if all(p in samples for p in parts):
            samples[name] = [({}, sum(v for p in parts for _, v in samples[p]))]
    by_reason: dict[str, float] = {}
    for src in table.reasons:
        for labels, v in samples.get(src.sample, ()):
            reason = src.fixed or labels.get(src.label or "", "?")
            by_reason[reason] = by_reason.get(reason, 0.0) + v
    return EngineSample(
        t=t,
        engine=table.engine,
        values=_vocabulary(table, samples),
        finished_by_reason=by_reason,
        histograms=_histograms(table, samples),
        cache_config=cache_config,
        engines={e: _vocabulary(table, samples, only=e) for e in _engine_ids(table, samples)},
    )


def _token_slots(labels: dict[str, str]) -> float | None:
    """num_gpu_blocks × block_size of one cache_config_info label set; None when either
    is missing or not a number (vLLM writes "None" for unset settings)."""
    try:
        return float(int(labels["num_gpu_blocks"]) * int(labels["block_size"]))
    except (KeyError, ValueError):
        return None


def _vocabulary(
    table: EngineTable, samples: dict[str, _Series], only: str | None = None
) -> dict[str, float | None]:
    """Every vocabulary key from the table; ``only``: that engine's label sets alone."""
    out: dict[str, float | None] = {}
    for key in VOCABULARY:
        names, how = table.values.get(key, ((), "sum"))
        found = next((samples[n] for n in names if n in samples), [])
        if only is not None:
            label = table.engine_label or ""
            found = [(labels, v) for labels, v in found if labels.get(label) == only]
        nums = [v for _, v in found]
        if not nums:
            out[key] = None
        elif how == "max":
            out[key] = max(nums)
        elif how == "mean":
            out[key] = sum(nums) / len(nums)
        else:
            out[key] = sum(nums)
    return out


def _engine_ids(table: EngineTable, samples: dict[str, _Series]) -> list[str]:
    """The engine label's values over the mapped series; empty unless there are two+."""
    if table.engine_label is None:
        return []
    ids = {
        labels[table.engine_label]
        for names, _ in table.values.values()
        for n in names
        for labels, _ in samples.get(n, ())
        if table.engine_label in labels
    }
    if len(ids) < 2:
        return []
    return sorted(ids, key=lambda e: (0, int(e), e) if e.isdigit() else (1, 0, e))


def _histograms(table: EngineTable, samples: dict[str, _Series]) -> dict[str, Histogram]:
    """Each latency histogram with its buckets summed over every label set (engines,
    ranks, methods): percentiles need the merged histogram, never averaged ones (summed at
    the bounds every label set exports: ``merge_buckets``)."""
    out: dict[str, Histogram] = {}
    for key, names in table.histograms.items():
        name = next((n for n in names if f"{n}_bucket" in samples), None)
        if name is None:
            continue
        per_set: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
        for labels, v in samples[f"{name}_bucket"]:
            rest = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
            per_set.setdefault(rest, {})[labels.get("le", "+Inf")] = v
        out[key] = Histogram(
            buckets=merge_buckets(per_set.values()),
            sum=sum(v for _, v in samples.get(f"{name}_sum", [])),
            count=sum(v for _, v in samples.get(f"{name}_count", [])),
        )
    return out


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
    buckets: dict[str, dict[str, float | None]] = {}
    if n > 0:
        out["mean"] = delta.sum / delta.count
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            est = histogram_estimate(q, delta)
            if est is None:
                continue
            out[name] = None if math.isnan(est.value) else est.value
            if est.capped:
                capped.append(name)
            if not math.isnan(est.value):  # the estimate's resolution: its bucket
                buckets[name] = {"lower": est.lower, "upper": est.upper}
    if capped:
        top = finite_bounds(delta)
        bound = f"{top[-1]:g} s" if top else "no finite bound"
        notes.append(
            f"{', '.join(capped)} above the highest finite bucket ({bound}): reported as "
            "that bound, a lower bound of the true value"
        )
    out |= {"n": n, "method": HISTOGRAM_METHOD}
    if buckets:
        out["buckets"] = buckets
    if notes:
        out["note"] = "; ".join(notes)
    return out


@dataclass(frozen=True)
class Page:
    """A ``/metrics`` page as fetched, before parsing (bytes cross a process cheaply)."""

    t: float
    """Seconds since the run's monotonic origin, taken before the GET."""
    body: bytes


PAGE_CAP_BYTES = 8 * 1024 * 1024
"""The most of a ``/metrics`` page read (decoded): a real vLLM page is ~20–60 KB, a DCGM
exporter's for 8 GPUs ~100 KB; more is a hostile or broken server, not parsed."""
OVER_CAP = f"a /metrics page over {PAGE_CAP_BYTES // (1024 * 1024)} MiB: not parsed"
_INFLATED = ("gzip", "x-gzip", "deflate")


async def get_page(client: httpx.AsyncClient, url: str) -> bytes | str:
    """GET a ``/metrics`` page: its bytes, or why not (``HTTP 404``, ``OVER_CAP``, an
    encoding). Identity is asked for and the body read as it streams, at most
    ``PAGE_CAP_BYTES``: a huge page or a gzip bomb costs a bounded read on the loop, never
    a gigabyte decoded in one step (a server that gzips anyway is inflated in steps, within
    the same cap). httpx's errors propagate."""
    async with client.stream("GET", url, headers={"Accept-Encoding": "identity"}) as r:
        if r.status_code != 200:
            return f"HTTP {r.status_code}"
        encoding = r.headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity", *_INFLATED):
            return (
                f"a /metrics page in Content-Encoding {encoding[:40]!r}: not parsed "
                "(allowed: identity, gzip, deflate)"
            )
        if r.is_stream_consumed:  # a test's mock response, built already read
            return r.content if len(r.content) <= PAGE_CAP_BYTES else OVER_CAP
        inflate = zlib.decompressobj(wbits=47) if encoding in _INFLATED else None  # gzip|zlib
        body = bytearray()
        async for raw in r.aiter_raw():
            try:
                chunk = (
                    raw
                    if inflate is None
                    else inflate.decompress(raw, PAGE_CAP_BYTES + 1 - len(body))
                )
            except zlib.error as e:
                return f"a /metrics page in Content-Encoding {encoding!r} that does not decode: {e}"
            body += chunk
            if len(body) > PAGE_CAP_BYTES or (inflate is not None and inflate.unconsumed_tail):
                return OVER_CAP
        return bytes(body)


async def fetch(client: httpx.AsyncClient, base: str, origin_ns: int) -> Page | EngineSample:
    """GET ``base/metrics`` once (``get_page``: bounded in size): the page, or a sample
    with ``error`` set (never a raise)."""
    t = (time.perf_counter_ns() - origin_ns) / 1e9
    try:
        got = await get_page(client, f"{base}/metrics")
    except (httpx.HTTPError, OSError) as e:  # a socket that cannot be made escapes bare
        error = client_side(e) or (f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
        return EngineSample(t=t, engine=None, values={}, error=error)
    if isinstance(got, str):
        return EngineSample(t=t, engine=None, values={}, error=got)
    return Page(t=t, body=got)


def parse_page(body: bytes, t: float) -> EngineSample:
    """A fetched page as a sample; text the parser trips on is a sample with ``error``.
    The exposition format is UTF-8 by definition: other bytes are replaced, not fatal."""
    try:
        return parse_metrics(body.decode("utf-8", errors="replace"), t)
    except Exception as e:  # untrusted text: whatever the parser trips on is the server's
        return EngineSample(t=t, engine=None, values={}, error=f"unparsable /metrics: {e}"[:300])


async def scrape(client: httpx.AsyncClient, base: str, origin_ns: int) -> EngineSample:
    """GET ``base/metrics`` once and parse it here, on the caller's loop (``fetch`` +
    ``parse_page``); a failure is a sample with ``error`` set, never a raise."""
    got = await fetch(client, base, origin_ns)
    return got if isinstance(got, EngineSample) else parse_page(got.body, got.t)
