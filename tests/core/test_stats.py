"""Percentiles a user reads in the record, and the live histogram's promise (≤ 1 % high)."""

import numpy as np
import pytest

from loadgen.stats import LogHistogram, percentile, summarize


def test_nearest_rank_returns_an_observed_value():
    values = [0.5, 0.1, 0.4, 0.2, 0.3]  # sorted: .1 .2 .3 .4 .5
    s = summarize(values, "nearest-rank")
    assert (s.p50, s.p90, s.p99, s.max, s.n) == (0.3, 0.5, 0.5, 0.5, 5)
    assert s.mean == pytest.approx(0.3)
    assert s.method == "nearest-rank"


def test_nearest_rank_of_100_values_is_the_99th():
    arr = np.arange(1, 101, dtype=float)
    assert percentile(arr, 99, "nearest-rank") == 99.0
    assert percentile(arr, 50, "nearest-rank") == 50.0


def test_linear_matches_numpy():
    rng = np.random.default_rng(1)
    arr = np.sort(rng.exponential(size=997))
    assert summarize(arr, "linear").p99 == pytest.approx(np.percentile(arr, 99))


def test_no_values_is_none_not_zero():
    s = summarize([], "nearest-rank")
    assert s.n == 0 and s.p50 is None and s.max is None and s.mean is None


def test_log_histogram_within_one_percent_and_bounded():
    rng = np.random.default_rng(7)
    values = rng.lognormal(mean=-1.0, sigma=1.2, size=50_000)
    h = LogHistogram()
    for v in values[:25_000]:
        h.add(float(v))
    h.add_many(values[25_000:])
    exact = summarize(values, "nearest-rank")
    live = h.stats()
    assert live.n == exact.n and live.max == pytest.approx(exact.max)
    for q in ("p50", "p90", "p99"):
        e, a = getattr(exact, q), getattr(live, q)
        assert e <= a <= e * 1.0101, q
    assert live.method == "histogram-1pct"
    assert h.counts.nbytes < 64 * 1024  # constant, whatever the count
