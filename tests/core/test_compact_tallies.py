"""The load tallies hold a long soak's exact samples compactly: what a run's record says
of its latencies is unchanged (every inter-token gap counted, exactly, for the whole load
and for each slice), and the memory a journal's read holds per request stays a fraction
of what lists of Python floats and per-request gap arrays cost (DESIGN.md §5)."""

from __future__ import annotations

import random
import tracemalloc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from loadgen.stats import LatencyStats, PercentileMethod, percentile, summarize, summarize_owned
from soak.record.summary import KeyedTallies, LoadTally, LoadTiming
from soak.record.tally_samples import ItlShare, gap_stats

METHODS: list[PercentileMethod] = ["nearest-rank", "linear"]


def _timing() -> LoadTiming:
    return LoadTiming(
        requested_concurrency=8, workers_started=8, barrier_released=True,
        issue_start_s=0.0, issue_end_s=100.0, drain_end_s=101.0,
    )  # fmt: skip


def _line(i: int, gaps: list[Any]) -> dict[str, Any]:
    ttft = 0.05 + (i % 97) / 1000.0
    return {
        "phase": "load",
        "ok": True,
        "sent_s": i * 0.01,
        "end_s": i * 0.01 + 1.0,
        "ttft_s": ttft,
        "e2e_s": ttft + 0.5,
        "ttfb_s": ttft / 2,
        "first_content_s": ttft + 0.001,
        "prompt_tokens": 20,
        "output_tokens": len(gaps) + 1,
        "chunks": len(gaps) + 1,
        "itl_us": gaps,
        "workload_class": "chat" if i % 3 else "long",
    }


def _tallied(lines: list[dict[str, Any]]) -> tuple[LoadTally, dict[str, LoadTally]]:
    """The whole load's tally and a class family's, sharing one read's gaps."""
    share = ItlShare()
    whole = LoadTally.for_timing(_timing(), share)
    classes = {n: LoadTally.for_timing(_timing(), share) for n in ("chat", "long")}
    route = KeyedTallies("workload_class", classes).offer
    for line in lines:
        whole.add(line)
        route(line)
    return whole, classes


@pytest.mark.parametrize("method", METHODS)
def test_every_gap_counts_exactly_in_the_load_and_its_slices(method: PercentileMethod) -> None:
    rng = random.Random(3)
    lines = [
        _line(i, [rng.randint(1, 90_000) for _ in range(rng.randint(0, 9))]) for i in range(600)
    ]
    # Midway, a stall past what 4 bytes hold and a fractional gap: no gap clipped or rounded.
    lines[300]["itl_us"] = [2**33, 1500.5, 7]
    whole, classes = _tallied(lines)

    def expected(keep: str | None) -> Any:
        gaps = [g for ln in lines if keep in (None, ln["workload_class"]) for g in ln["itl_us"]]
        return summarize(np.asarray(gaps, dtype=np.float64) / 1e6, method)

    got = whole.summary(_timing(), method).itl_s
    _same_gap_stats(got, expected(None))
    assert got.max == 2**33 / 1e6
    for name, tally in classes.items():
        _same_gap_stats(tally.summary(_timing(), method).itl_s, expected(name))
    # Summaries may be taken again (verify, then the record): the share is not consumed.
    assert whole.summary(_timing(), method).itl_s == got


@pytest.mark.parametrize("method", METHODS)
def test_selected_percentiles_are_the_sorted_ones(method: PercentileMethod) -> None:
    # Selection (np.partition) instead of a sort: the same order statistics, taken from
    # the sorted values the way the percentile's definition reads.
    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 99, 100, 1001):
        values = rng.gamma(2.0, 0.1, n)
        got = summarize_owned(values.copy(), method)
        ordered = np.sort(values)
        assert (got.p50, got.p90, got.p99) == tuple(
            percentile(ordered, q, method) for q in (50, 90, 99)
        )
        assert (got.max, got.n) == (ordered[-1], n)
        assert got.mean == pytest.approx(values.mean(), rel=1e-12)


@pytest.mark.parametrize("method", METHODS)
def test_gap_stats_in_micros_are_the_seconds_figures(method: PercentileMethod) -> None:
    # Gaps selected among as whole µs, only the picks converted: the same values as
    # selecting among the gaps converted to seconds first (x / 1e6 keeps the order).
    rng = np.random.default_rng(7)
    for n in (0, 1, 2, 99, 1001):
        us = rng.integers(1, 200_000, n, dtype=np.intc)
        _same_gap_stats(gap_stats(us.copy(), method), summarize(us / 1e6, method))


def _same_gap_stats(got: LatencyStats, want: LatencyStats) -> None:
    """The same figures; the mean to 1e-12 (nearest-rank's is the µs sum / n / 1e6, the
    reference's the mean of the seconds: two roundings apart)."""
    assert got.model_dump(exclude={"mean"}) == want.model_dump(exclude={"mean"})
    assert got.mean == pytest.approx(want.mean, rel=1e-12)


N_LINES = 20_000
GAPS = 31  # 32 tokens a request, the benchmark's (bench/finalize_cost.py)


def _stream() -> Iterator[dict[str, Any]]:
    for i in range(N_LINES):
        yield _line(i, [20_000 + (i + k) % 997 for k in range(GAPS)])


def test_a_read_holds_little_more_than_its_values_per_request() -> None:
    """Per request, the whole load's tally and one slice family's hold their 5 samples
    each at 8 bytes and the 31 gaps once at 4: about 220 bytes (a float list and a gaps
    array per request held over 600)."""
    share = ItlShare()
    whole = LoadTally.for_timing(_timing(), share)
    classes = {n: LoadTally.for_timing(_timing(), share) for n in ("chat", "long")}
    route = KeyedTallies("workload_class", classes).offer
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for line in _stream():
            whole.add(line)
            route(line)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.reset_peak()
        summary = whole.summary(_timing(), "nearest-rank")
        peak = tracemalloc.get_traced_memory()[1] - before - held
    finally:
        tracemalloc.stop()
    assert summary.itl_s.n == N_LINES * GAPS
    assert held / N_LINES < 300, f"{held / N_LINES:.0f} bytes held a request"
    # Summing up copies the gaps once, as float64 seconds: not once more to sort them.
    assert peak / (N_LINES * GAPS) < 12, f"{peak / (N_LINES * GAPS):.1f} bytes a gap at the end"
