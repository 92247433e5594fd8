"""vLLM's Prometheus metrics for one replica, in a registry of its own.

Names, types, label names and buckets follow vLLM's v1 ``PrometheusStatLogger``: counters
are declared without ``_total`` (prometheus_client adds it and a ``_created`` sample),
every engine metric carries ``model_name`` and ``engine``, and ``vllm:cache_config_info``
carries the cache settings as labels. The inter-token-latency histogram is a custom
collector because every sequence of a decode step shares the same gap: one bucket update
per step instead of one ``observe`` per token keeps the simulator cheap.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


def build_1_2_5_buckets(max_value: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's token-count buckets)."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > max_value:
                return out
            out.append(float(v))
        exp += 1


class BatchedHistogram(Collector):
    """A histogram that accepts ``n`` equal observations at once."""

    def __init__(
        self, name: str, documentation: str, buckets: tuple[float, ...], labels: dict[str, str]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = list(buckets)
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.labels = labels
        self.created = time.time()

    def observe_many(self, value: float, n: int) -> None:
        """Record ``n`` observations of ``value``."""
        if n <= 0:
            return
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.sum += value * n

    def collect(self) -> Iterator[Metric]:
        """Yield the histogram with cumulative buckets."""
        fam = HistogramMetricFamily(self.name, self.documentation, labels=sorted(self.labels))
        acc = 0
        buckets = []
        for bound, c in zip([*self.bounds, float("inf")], self.counts, strict=True):
            acc += c
            buckets.append((_le(bound), float(acc)))
        values = [self.labels[k] for k in sorted(self.labels)]
        fam.add_metric(values, buckets, self.sum)
        yield fam


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


class _Series:
    """Declares the engine's series in one registry, each with the ``model_name`` and
    ``engine`` labels, and hands back the labelled child the scheduler updates."""

    def __init__(self, registry: CollectorRegistry, model: str, engine: str) -> None:
        self.registry = registry
        self.names = ["model_name", "engine"]
        self.values = (model, engine)

    def gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, self.names, registry=self.registry).labels(*self.values)

    def counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, self.names, registry=self.registry).labels(*self.values)

    def hist(self, name: str, doc: str, buckets: tuple[float, ...] | list[float]) -> Histogram:
        family = Histogram(name, doc, self.names, buckets=buckets, registry=self.registry)
        return family.labels(*self.values)


class EngineMetrics:
    """The ``/metrics`` registry of one replica (engine index 0).

    The series are registered in vLLM's order (the exposition lists them so): the batch's
    gauges and counters (:meth:`_batch_series`), then the per-request histograms
    (:meth:`_request_series`), then the cache configuration."""

    def __init__(
        self, model: str, max_model_len: int, cache_info: dict[str, str], engine: str = "0"
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        series = _Series(self.registry, model, engine)
        self._batch_series(series)
        self._request_series(series, max_model_len)
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            sorted(cache_info),
            registry=self.registry,
        )
        info.labels(**cache_info).set(1)

    def _batch_series(self, d: _Series) -> None:
        """Occupancy, KV and prefix cache, preemptions, tokens and finished requests."""
        self.running = d.gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = d.gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.kv_usage = d.gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self.prefix_queries = d.counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_hits = d.counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.preemptions = d.counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = d.counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = d.counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*d.names, "finished_reason"],
            registry=d.registry,
        )
        self.success = {r: success.labels(*d.values, r) for r in FINISH_REASONS}

    def _request_series(self, d: _Series, max_model_len: int) -> None:
        """Per-request token counts and latencies, and the batched inter-token latency."""
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.req_prompt_tokens = d.hist(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.req_gen_tokens = d.hist(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            token_buckets,
        )
        self.ttft = d.hist(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.e2e = d.hist(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.queue_time = d.hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.prefill_time = d.hist(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.decode_time = d.hist(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        model, engine = d.values
        self.itl = BatchedHistogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
            {"model_name": model, "engine": engine},
        )
        d.registry.register(self.itl)

    def render(self) -> bytes:
        """The Prometheus text exposition of this replica."""
        return generate_latest(self.registry)
