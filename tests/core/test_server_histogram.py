"""Server-side histogram estimates against the real vLLM capture: the interpolation is
Prometheus', and every estimate carries the bucket that holds it — its resolution.

Issue 15 saw server E2E p99 4.93 s beside a client p99 of 2.88 s, and a queue p50 of 0.15 s
beside its mean of 0.019 s. Both are vLLM's request-latency buckets (0.3, 0.5, 0.8, 1,
1.5, 2, 2.5, 5, 10 s, …: ``REQUEST_LATENCY_BUCKETS`` in vllm/v1/metrics/buckets.py,
0.32.0): a p50 inside the first bucket [0, 0.3] is 0.15 whatever the data, and a p99
inside (2.5, 5] reads near 5 when a third of the requests took just over 2.5 s.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from probes.engine_metrics import parse_metrics, server_latency
from probes.server_histogram import (
    Histogram,
    estimate_words,
    histogram_estimate,
    histogram_quantile,
    merge_buckets,
)
from soak.record.telemetry import ServerLatency
from tui.glyphs import ASCII, UNICODE
from tui.panes.latency import server_estimate

REAL = (Path(__file__).parents[1] / "fixtures" / "vllm_0.32_cpu_metrics.txt").read_text()
E2E = "vllm:e2e_request_latency_seconds"
VLLM_REQUEST_LATENCY_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
    *(120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)


def _with_e2e(cumulative: dict[float, float], total: float) -> str:
    """The real page with its E2E histogram's cumulative counts replaced (bounds kept)."""
    out = []
    for line in REAL.splitlines():
        m = re.match(rf'{re.escape(E2E)}_bucket\{{engine="0",le="([^"]+)",', line)
        if m:
            le = float(m.group(1))
            count = next((c for b, c in sorted(cumulative.items()) if le <= b), None)
            line = (
                line.rsplit(" ", 1)[0]
                + f" {count if count is not None else max(cumulative.values())}"
            )
        elif line.startswith(f"{E2E}_count{{"):
            line = line.rsplit(" ", 1)[0] + f" {max(cumulative.values())}"
        elif line.startswith(f"{E2E}_sum{{"):
            line = line.rsplit(" ", 1)[0] + f" {total}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_the_capture_has_vllms_request_latency_buckets() -> None:
    s = parse_metrics(REAL)
    for key in ("e2e", "queue"):
        bounds = sorted(float(le) for le in s.histograms[key].buckets)
        assert tuple(bounds[:-1]) == VLLM_REQUEST_LATENCY_BUCKETS and bounds[-1] == math.inf


def test_a_queue_p50_inside_the_first_bucket_is_its_resolution_not_a_measurement() -> None:
    # The capture's three queue times all lie in [0, 0.3] (sum 0.057 s: mean 0.019 s).
    est = server_latency(None, parse_metrics(REAL), "queue")
    assert est is not None and est["n"] == 3
    assert est["p50"] == pytest.approx(0.15)  # the bucket's middle, whatever the data
    assert est["buckets"] == {
        "p50": {"lower": 0.0, "upper": 0.3},
        "p90": {"lower": 0.0, "upper": 0.3},
        "p99": {"lower": 0.0, "upper": 0.3},
    }
    stats = ServerLatency.model_validate(est)
    assert stats.mean is not None and stats.mean < 0.03
    assert stats.shown("p50") == "≤ 0.3 s (first bucket)"


def test_an_e2e_p99_near_the_top_of_a_wide_bucket_says_which_bucket() -> None:
    # 100 requests: 64 at most 2.5 s, 36 just over it (client p99 ≈ 2.88 s). Prometheus'
    # interpolation spreads the 36 evenly over (2.5, 5]: p99 = 2.5 + 2.5 · 35/36.
    page = _with_e2e({2.0: 30, 2.5: 64, 5.0: 100, math.inf: 100}, total=240.0)
    est = server_latency(None, parse_metrics(page), "e2e")
    assert est is not None
    assert est["p99"] == pytest.approx(2.5 + 2.5 * 35 / 36)
    assert est["buckets"]["p99"] == {"lower": 2.5, "upper": 5.0}  # type: ignore[index]
    assert est["buckets"]["p50"] == {"lower": 2.0, "upper": 2.5}  # type: ignore[index]
    shown = ServerLatency.model_validate(est).shown("p99")
    assert shown == "≈ 4.93 s (histogram: 2.5–5 s bucket)"


def test_the_inf_bucket_is_a_lower_bound_and_says_so() -> None:
    page = _with_e2e({7680.0: 1, math.inf: 100}, total=1e6)
    est = server_latency(None, parse_metrics(page), "e2e")
    assert est is not None and est["p99"] == 7680.0
    assert est["buckets"]["p99"] == {"lower": 7680.0, "upper": None}  # type: ignore[index]
    stats = ServerLatency.model_validate_json(ServerLatency.model_validate(est).model_dump_json())
    assert stats.shown("p99") == "≥ 7680 s (above the highest bucket)"
    assert "lower bound of the true value" in str(stats.note)


def test_estimate_words_without_buckets_is_still_marked_an_estimate() -> None:
    assert estimate_words(2.375, None, None) == "≈ 2.38 s"
    assert estimate_words(None, 0.0, 0.3) == "—"
    old = ServerLatency(p50=2.375, p99=4.947, n=57)  # a record older than 1.3
    assert old.shown("p99") == "≈ 4.95 s" and "buckets" not in old.model_dump()


def test_interpolation_matches_prometheus_inside_and_at_the_edges() -> None:
    h = Histogram(buckets={"0.1": 2.0, "1.0": 6.0, "+Inf": 8.0}, sum=5.0, count=8)
    # rank 4 in (0.1, 1.0], 2 below, 4 inside → 0.1 + 0.9 · 2/4
    est = histogram_estimate(0.5, h)
    assert est is not None and est.value == pytest.approx(0.55)
    assert (est.lower, est.upper, est.capped) == (0.1, 1.0, False)
    first = histogram_estimate(0.1, h)  # rank 0.8 in the first bucket, lower bound 0
    assert first is not None and first.value == pytest.approx(0.04) and first.lower == 0.0
    top = histogram_estimate(0.99, h)
    assert top is not None and (top.value, top.capped, top.upper) == (1.0, True, None)
    value, capped = histogram_quantile(0.5, h) or (math.nan, True)
    assert value == pytest.approx(0.55) and not capped


def test_a_cumulative_count_that_goes_down_is_raised_as_prometheus_does() -> None:
    # A scrape that raced an observation: 1.0's count below 0.5's.
    h = Histogram(buckets={"0.5": 5.0, "1.0": 4.0, "2.0": 10.0, "+Inf": 10.0}, sum=9, count=10)
    est = histogram_estimate(0.45, h)  # rank 4.5 ≤ 5: inside (0, 0.5], not past it
    assert est is not None and est.upper == 0.5 and est.value == pytest.approx(0.45)
    est = histogram_estimate(0.6, h)  # rank 6: (1.0, 2.0] holds 5 from 5 (not 4)
    assert est is not None and est.value == pytest.approx(1.0 + 1.0 * 1 / 5)


def test_label_sets_merge_only_at_the_bounds_all_of_them_export() -> None:
    # Engine 1 lacks the 0.5 bound (another version's buckets): summing 0.5 over engine 0
    # alone would give 0.5 → 3 and 1.0 → 9, a cumulative read as "3 at most 0.5 s" of 10.
    merged = merge_buckets(
        [{"0.5": 3.0, "1.0": 4.0, "+Inf": 5.0}, {"1.0": 5.0, "2": 5.0, "+Inf": 5.0}]
    )
    assert merged == {"1.0": 9.0, "+Inf": 10.0}
    assert merge_buckets([{"1": 1.0, "+Inf": 2.0}, {"1.0": 2.0, "+Inf": 2.0}]) == {
        "1": 3.0,
        "+Inf": 4.0,
    }
    assert merge_buckets([]) == {}
    assert merge_buckets([{"x": 1.0, "+Inf": 1.0}, {"+Inf": 2.0}]) == {"+Inf": 3.0}
    text = "\n".join(
        [
            f"# TYPE {E2E} histogram",
            f'{E2E}_bucket{{engine="0",le="0.5"}} 3',
            f'{E2E}_bucket{{engine="0",le="1.0"}} 4',
            f'{E2E}_bucket{{engine="0",le="+Inf"}} 5',
            f'{E2E}_bucket{{engine="1",le="1.0"}} 5',
            f'{E2E}_bucket{{engine="1",le="+Inf"}} 5',
            f'{E2E}_count{{engine="0"}} 5',
            f'{E2E}_count{{engine="1"}} 5',
        ]
    )
    assert parse_metrics(text + "\n").histograms["e2e"].buckets == {"1.0": 9.0, "+Inf": 10.0}


def test_the_monitor_shows_the_bucket_not_a_false_precision() -> None:
    queue = ServerLatency.model_validate(server_latency(None, parse_metrics(REAL), "queue"))
    assert server_estimate(queue, "p50", UNICODE) == "≤0.3s"
    assert server_estimate(queue, "p50", ASCII) == "<=0.3s"
    page = _with_e2e({2.0: 30, 2.5: 64, 5.0: 100, math.inf: 100}, total=240.0)
    e2e = ServerLatency.model_validate(server_latency(None, parse_metrics(page), "e2e"))
    assert server_estimate(e2e, "p99", UNICODE) == "2.5–5s"
    assert server_estimate(e2e, "p99", ASCII) == "2.5-5s"
    assert server_estimate(ServerLatency(p50=0.15), "p50", UNICODE) == "150ms"  # pre-1.3
