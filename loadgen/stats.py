"""Latency statistics: exact percentiles for the record, bounded histograms for live views.

Two kinds of numbers, never mixed up:
- The record's percentiles are exact, computed from every per-request value in the
  journal (``requests.jsonl``), with the method named (``nearest-rank`` by default: an
  observed value; ``linear`` to match numpy and ``vllm bench serve``).
- Live snapshot percentiles come from fixed-size log histograms (1 % relative bucket
  width), so memory stays bounded through a multi-hour run. They carry the method
  ``histogram-1pct`` so nobody mistakes them for exact values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

PercentileMethod = Literal["nearest-rank", "linear"]
LIVE_METHOD = "histogram-1pct"

_QUANTILES = (50.0, 90.0, 99.0)


class LatencyStats(BaseModel):
    """p50/p90/p99/max/mean of one latency, in seconds, with how they were computed.

    All values are ``None`` when ``n == 0``: missing is not zero.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    mean: float | None = None
    method: str = "nearest-rank"
    n: int = 0


def _rank(p: float, n: int) -> int:
    """The nearest-rank index (0-based) of the ``p``-th percentile of ``n`` values."""
    return max(1, math.ceil(p / 100.0 * n)) - 1


def percentile(sorted_values: np.ndarray, p: float, method: PercentileMethod) -> float:
    """The ``p``-th percentile (0 < p ≤ 100) of an ascending, non-empty array."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    if method == "nearest-rank":
        return float(sorted_values[_rank(p, n)])
    return float(np.percentile(sorted_values, p, method="linear"))


def summarize(values: Iterable[float] | np.ndarray, method: PercentileMethod) -> LatencyStats:
    """Exact summary of all ``values`` (seconds); ``values`` is left as it is."""
    src = values if isinstance(values, np.ndarray) else list(values)
    return summarize_owned(np.array(src, dtype=np.float64), method)  # a copy, ours


def summarize_owned(arr: np.ndarray, method: PercentileMethod, unit: float = 1.0) -> LatencyStats:
    """:func:`summarize` of an array the caller gives up (reordered in place) that holds
    values in ``1/unit`` seconds (``unit`` 1e6: whole µs in C ints, as the inter-token
    gaps are kept), the figures in seconds.

    The percentiles are order statistics, selected (``np.partition``: linear time) rather
    than sorted for (n log n) — the same values, as an order statistic does not depend on
    how the others are ordered; for a long soak's inter-token gaps (one per token:
    10⁸ in an hour at 30k tok/s) the sort was most of a record's cost. Nearest-rank
    selects in the array's own unit and converts the few values selected (``x / unit``
    is monotonic, so it is the same value as selecting among converted ones) — no
    float64 copy of 10⁸ gaps; the mean is the float64 sum over ``n``, then ``/ unit``
    (exact for whole µs: the sum of 10⁸ gaps is an integer far below 2⁵³), taken over the
    values in the order given, so every reader of the same journal gets the same bits.
    Linear interpolates in seconds: its values are converted first."""
    n = int(arr.size)
    if n == 0:
        return LatencyStats(method=method, n=0)
    if method == "nearest-rank":
        mean = float(arr.sum(dtype=np.float64)) / n
        ranks = [_rank(q, n) for q in _QUANTILES]
        arr.partition(sorted({*ranks, n - 1}))
        p50, p90, p99, top = (float(arr[r]) for r in (*ranks, n - 1))
        if unit != 1.0:
            mean, p50, p90, p99, top = (v / unit for v in (mean, p50, p90, p99, top))
    else:
        if unit != 1.0 or arr.dtype != np.float64:
            arr = arr.astype(np.float64)
            arr /= unit
        mean = float(arr.mean())
        qs = np.percentile(arr, _QUANTILES, method="linear", overwrite_input=True)
        p50, p90, p99 = (float(v) for v in qs)
        top = float(arr.max())
    return LatencyStats(p50=p50, p90=p90, p99=p99, max=top, mean=mean, method=method, n=n)


class LogHistogram:
    """Fixed-size histogram of positive values in buckets 1 % wide, 1 µs to ~3 hours.

    Memory is constant (~2,000 int64 counters) whatever the number of observations.
    Percentiles return the bucket's upper edge, so they overstate by at most 1 %.
    """

    _GROWTH = 1.01
    _MIN = 1e-6
    _LOG_G = math.log(_GROWTH)
    _N = int(math.log(1e4 / _MIN) / math.log(_GROWTH)) + 2

    __slots__ = ("counts", "max", "n", "total")

    def __init__(self) -> None:
        self.counts = np.zeros(self._N, dtype=np.int64)
        self.n = 0
        self.total = 0.0
        self.max: float | None = None

    @classmethod
    def _index(cls, v: float) -> int:
        if v <= cls._MIN:
            return 0
        return min(cls._N - 1, int(math.log(v / cls._MIN) / cls._LOG_G) + 1)

    def add(self, v: float) -> None:
        """Count one value (seconds)."""
        self.counts[self._index(v)] += 1
        self.n += 1
        self.total += v
        if self.max is None or v > self.max:
            self.max = v

    @classmethod
    def bucket_counts(cls, values: np.ndarray) -> np.ndarray:
        """Counts per bucket of ``values`` — compute once, add to several histograms."""
        clipped = np.maximum(values, cls._MIN)
        idx = np.minimum(cls._N - 1, (np.log(clipped / cls._MIN) / cls._LOG_G).astype(int) + 1)
        idx[values <= cls._MIN] = 0
        return np.bincount(idx, minlength=cls._N)

    def add_many(self, values: np.ndarray, counts: np.ndarray | None = None) -> None:
        """Count many values at once (e.g. one request's inter-token gaps).

        ``counts`` is ``bucket_counts(values)`` when the caller already has it.
        """
        if values.size == 0:
            return
        self.counts += self.bucket_counts(values) if counts is None else counts
        self.n += int(values.size)
        self.total += float(values.sum())
        vmax = float(values.max())
        if self.max is None or vmax > self.max:
            self.max = vmax

    def merge(self, other: LogHistogram) -> None:
        """Add ``other``'s counts into this histogram."""
        self.counts += other.counts
        self.n += other.n
        self.total += other.total
        if other.max is not None and (self.max is None or other.max > self.max):
            self.max = other.max

    def _upper_edge(self, idx: int) -> float:
        return self._MIN * self._GROWTH**idx

    def stats(self) -> LatencyStats:
        """Approximate p50/p90/p99 (bucket upper edge), exact max and mean."""
        if self.n == 0:
            return LatencyStats(method=LIVE_METHOD, n=0)
        cum = np.cumsum(self.counts)
        out = []
        for q in _QUANTILES:
            rank = max(1, math.ceil(q / 100.0 * self.n))
            idx = int(np.searchsorted(cum, rank))
            value = self._upper_edge(idx)
            out.append(min(value, self.max) if self.max is not None else value)
        return LatencyStats(
            p50=out[0],
            p90=out[1],
            p99=out[2],
            max=self.max,
            mean=self.total / self.n,
            method=LIVE_METHOD,
            n=self.n,
        )
