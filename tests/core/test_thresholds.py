"""Thresholds (``--threshold EXPR``): parsing, checks, live watch, and verdict reasons."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from loadgen.live import ThroughputView
from loadgen.stats import LIVE_METHOD, LatencyStats
from soak.judge.facts import RunFacts
from soak.judge.thresholds import (
    LIVE_SOURCE,
    METRICS,
    TREND_METRICS,
    ThresholdError,
    ThresholdState,
    ThresholdWatch,
    describe_metrics,
    describe_trend_metrics,
    evaluate,
    format_value,
    is_note,
    metrics_from_record,
    metrics_from_snapshot,
    parse_threshold,
    parse_thresholds,
    record_source,
    threshold_reasons,
)
from soak.judge.trend_metrics import TrendFigure
from soak.judge.verdict import decide
from soak.record.endurance import FIGURES, LEAKS, DriftFinding, Endurance, LeakFinding, Trend
from soak.record.models import LoadSummary, Status
from soak.record.snapshot import ClientView, LoadView, Snapshot
from soak.record.telemetry import SnapshotTelemetry

# --- parsing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "metric", "op", "value", "abort", "grace"),
    [
        ("ttft.p99<2s", "ttft.p99", "<", 2.0, False, 0.0),
        ("e2e.p99 < 20s", "e2e.p99", "<", 20.0, False, 0.0),
        ("itl.p50<=50ms", "itl.p50", "<=", 0.05, False, 0.0),
        ("tpot.mean<250us", "tpot.mean", "<", 0.00025, False, 0.0),
        ("ttfb.max<1.5", "ttfb.max", "<", 1.5, False, 0.0),
        ("error_rate==0", "error_rate", "==", 0.0, False, 0.0),
        ("error_rate<0.1%", "error_rate", "<", 0.001, False, 0.0),
        ("output_tokens_per_s>1000", "output_tokens_per_s", ">", 1000.0, False, 0.0),
        ("requests_per_s>=5", "requests_per_s", ">=", 5.0, False, 0.0),
        ("engine.max_waiting<=64", "engine.max_waiting", "<=", 64.0, False, 0.0),
        ("engine.preemptions==0", "engine.preemptions", "==", 0.0, False, 0.0),
        ("first_content.p99<3s", "first_content.p99", "<", 3.0, False, 0.0),
        ("engine.max_kv_usage<95%", "engine.max_kv_usage", "<", 0.95, False, 0.0),
        ("failed!=3", "failed", "!=", 3.0, False, 0.0),
        ("e2e.p99<20s,abort,grace=60s", "e2e.p99", "<", 20.0, True, 60.0),
        ("e2e.p99<20s, abort", "e2e.p99", "<", 20.0, True, 0.0),
        ("ttft.p99<2s,abort,grace=500ms", "ttft.p99", "<", 2.0, True, 0.5),
        ("ttft.p99<2s,abort,grace=2m", "ttft.p99", "<", 2.0, True, 120.0),
        ("ttft.p99<2s,abort,grace=1h", "ttft.p99", "<", 2.0, True, 3600.0),
        ("ttft.p99<2s,abort,grace=30", "ttft.p99", "<", 2.0, True, 30.0),
    ],
)
def test_examples_parse_to_canonical_units(expr, metric, op, value, abort, grace):
    t = parse_threshold(expr)
    assert (t.metric, t.op, t.abort_on_fail) == (metric, op, abort)
    assert t.value == pytest.approx(value)
    assert t.grace_s == pytest.approx(grace)
    assert t.expr == expr


def test_condition_is_the_comparison_as_written_without_spaces_or_options():
    assert parse_threshold("e2e.p99 < 20s , abort,grace=60s").condition == "e2e.p99<20s"


@pytest.mark.parametrize(
    ("expr", "fragments"),
    [
        (
            "ttft.p98<2s",
            [
                "threshold 'ttft.p98<2s': "
                "unknown statistic 'p98'; use one of p50, p90, p99, max, mean"
            ],
        ),
        ("ttft<2s", ["'ttft' needs a statistic", "ttft.p99", "p50, p90, p99, max, mean"]),
        ("latency.p99<2s", ["unknown metric 'latency.p99'", "known metrics:", "error_rate"]),
        ("ttfx.p99<2s", ["unknown metric 'ttfx.p99'", "did you mean 'ttft.p99'?"]),
        ("ttft.p99=<2s", ["unknown operator '=<'", "<, <=, >, >=, ==, !="]),
        ("ttft.p99=2s", ["unknown operator '='", "use one of <, <=, >, >=, ==, !="]),
        ("ttft.p99 2s", ["missing comparison after 'ttft.p99'", "<, <=, >, >=, ==, !="]),
        ("error_rate<2s", ["unit 's' does not fit error_rate", "ratio", "%"]),
        ("ttft.p99<2%", ["unit '%' does not fit ttft.p99", "s, ms or us"]),
        ("ttft.p99<2m", ["unit 'm' does not fit ttft.p99", "s, ms or us"]),
        ("engine.max_waiting<2s", ["unit 's' does not fit engine.max_waiting", "a count"]),
        ("ttft.p99<", ["missing value after '<'", "e.g. ttft.p99<2s"]),
        ("error_rate<", ["missing value after '<'", "e.g. error_rate<0.1%"]),
        ("ttft.p99<fast", ["value 'fast' is not a number", "s, ms or us"]),
        ("e2e.p99<20s,abort,grace=soon", ["grace 'soon' is not a duration", "ms, s, m or h"]),
        ("e2e.p99<20s,abort,grace=5d", ["grace '5d' is not a duration", "ms, s, m or h"]),
        ("e2e.p99<20s,abort,grace=-5s", ["grace '-5s' is not a duration"]),
        ("e2e.p99<20s,grace=60s", ["grace only delays an abort", "',abort'"]),
        ("e2e.p99<20s,stop", ["unknown option 'stop'", "abort", "grace=DURATION"]),
        ("", ["empty expression", "METRIC OP VALUE"]),
        ("<2s", ["must start with a metric name", "known metrics:"]),
    ],
)
def test_errors_name_the_expression_the_problem_and_what_is_allowed(expr, fragments):
    with pytest.raises(ThresholdError) as info:
        parse_threshold(expr)
    message = str(info.value)
    assert message.startswith(f"threshold {expr!r}: ")
    for fragment in fragments:
        assert fragment in message


def test_threshold_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse_threshold("nope")


def test_the_same_condition_twice_is_an_error():
    with pytest.raises(ThresholdError, match="given twice"):
        parse_thresholds(["ttft.p99<2s", "ttft.p99 < 2s,abort"])
    assert [t.metric for t in parse_thresholds(["ttft.p99<2s", "ttft.p90<1s"])] == [
        "ttft.p99",
        "ttft.p90",
    ]


def test_registry_covers_every_latency_and_statistic_and_describes_each_metric():
    for base in ("ttft", "e2e", "itl", "tpot", "ttfb", "first_content"):
        for stat in ("p50", "p90", "p99", "max", "mean"):
            assert METRICS[f"{base}.{stat}"].kind == "latency"
    assert METRICS["engine.preemptions"].telemetry
    # GPU metrics stay in the registry (flagged) so enabling them later is one line.
    assert METRICS["gpu.min_free_mib"].needs_gpu_telemetry
    assert METRICS["gpu.max_temp_c"].kind == "celsius"
    lines = describe_metrics()
    assert len(lines) == len(METRICS)
    assert any(
        line.startswith("error_rate") and "failed / (completed + failed)" in line for line in lines
    )


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("ttfb.p99<1s,abort", "soaktop keeps it only in the record"),
        ("first_content.max<5s,abort,grace=60s", "soaktop keeps it only in the record"),
        ("engine.preemptions==0,abort", "lifetime counter"),
    ],
)
def test_abort_on_a_metric_without_a_live_figure_is_refused(expr, why):
    with pytest.raises(ThresholdError) as info:
        parse_threshold(expr)
    message = str(info.value)
    assert message.startswith(f"threshold {expr!r}: ")
    assert "no live figure" in message and why in message
    assert "checked only at the end" in message and "drop ',abort'" in message
    # Without ,abort the same condition is fine: it is checked against the record.
    assert not parse_threshold(expr.split(",")[0]).abort_on_fail


@pytest.mark.parametrize(
    "expr", ["gpu.min_free_mib>2048", "gpu.max_temp_c<85", "gpu.max_temp_c<85,abort"]
)
def test_gpu_thresholds_are_refused_up_front_without_a_gpu_source(expr):
    with pytest.raises(ThresholdError) as info:
        parse_threshold(expr)
    assert str(info.value) == (
        f"threshold {expr!r}: gpu.* thresholds need a GPU telemetry source: keep NVML on "
        "(the default; --no-nvml turns it off) or give --dcgm URL (a DCGM exporter's /metrics)"
    )
    assert parse_threshold(expr, gpu_telemetry=True).metric == expr.split("<")[0].split(">")[0]


def test_every_live_metric_has_a_live_figure_and_no_other_does():
    telemetry = {
        "engines": [
            {
                "endpoint": 0,
                "status": "ok",
                "waiting": 3.0,
                "kv_usage": 0.5,
                "preemptions_total": 40.0,
                "preemptions": 2,
            }
        ],
        "gpus": [{"index": 0, "status": "ok", "memory_free_mib": 4096, "temperature_c": 71}],
    }
    m = metrics_from_snapshot(snapshot(view(), telemetry))
    for name, info in METRICS.items():
        if info.needs_gpu_telemetry:
            continue  # refused at parse time
        assert (m[name] is not None) == info.live, name
        if not info.live:
            assert info.no_live  # says why, for the parse error
    assert not METRICS["ttfb.p50"].live and not METRICS["engine.preemptions"].live
    assert METRICS["ttft.p99"].live and METRICS["engine.max_kv_usage"].live


def test_metric_descriptions_say_which_are_end_only_or_unavailable():
    lines = {line.split()[0]: line for line in describe_metrics()}
    assert "end only" in lines["ttfb.p99"] and "end only" in lines["engine.preemptions"]
    assert "needs GPU telemetry: NVML or --dcgm URL" in lines["gpu.min_free_mib"]
    assert "end only" not in lines["ttft.p99"]


# --- evaluation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "observed", "state"),
    [
        ("ttft.p99<2s", 1.99, "ok"),
        ("ttft.p99<2s", 2.0, "breached"),
        ("ttft.p99<=2s", 2.0, "ok"),
        ("ttft.p99<=2s", 2.01, "breached"),
        ("requests_per_s>5", 5.01, "ok"),
        ("requests_per_s>5", 5.0, "breached"),
        ("requests_per_s>=5", 5.0, "ok"),
        ("requests_per_s>=5", 4.99, "breached"),
        ("error_rate==0", 0.0, "ok"),
        ("error_rate==0", 0.01, "breached"),
        ("itl.p50==50ms", 0.05, "ok"),
        ("failed!=3", 2.0, "ok"),
        ("failed!=3", 3.0, "breached"),
    ],
)
def test_each_operator_is_the_condition_that_must_hold(expr, observed, state):
    t = parse_threshold(expr)
    [s] = evaluate([t], {t.metric: observed}, "test")
    assert s.state == state
    assert s.observed == observed
    assert s.limit == t.value
    assert s.source == "test"


@pytest.mark.parametrize("metrics", [{}, {"error_rate": None}, {"error_rate": math.nan}])
def test_no_data_is_never_ok(metrics):
    for expr in ("error_rate==0", "error_rate!=0", "error_rate<1", "error_rate>=0"):
        [s] = evaluate([parse_threshold(expr)], metrics, "test")
        assert s.state == "no_data"
        assert s.observed is None


# --- figures from a snapshot ---------------------------------------------------------


def live(p50: float, p90: float, p99: float, mx: float, mean: float, n: int = 100) -> LatencyStats:
    return LatencyStats(p50=p50, p90=p90, p99=p99, max=mx, mean=mean, method=LIVE_METHOD, n=n)


def snapshot(
    cumulative: ThroughputView | None, telemetry: dict[str, Any] | None = None
) -> Snapshot:
    return Snapshot(
        seq=30,
        t=42.0,
        wall="2025-01-01T00:00:42Z",
        run_id="run-1",
        phase="load",
        phase_elapsed_s=30.0,
        load=LoadView(requested_concurrency=8, cumulative=cumulative),
        client=ClientView(),
        telemetry=SnapshotTelemetry.model_validate(telemetry or {}),
    )


def view(completed: int = 98, failed: int = 2, **kw: Any) -> ThroughputView:
    base: dict[str, Any] = dict(
        span_s=30.0,
        completed=completed,
        failed=failed,
        output_tokens=30_000,
        requests_per_s=completed / 30.0,
        output_tokens_per_s=1000.0,
        ttft_s=live(0.2, 0.4, 0.81, 0.9, 0.25),
        e2e_s=live(5.0, 9.0, 23.4, 25.0, 6.0),
        itl_s=live(0.02, 0.03, 0.05, 0.2, 0.021, n=20_000),
        tpot_s=live(0.021, 0.031, 0.051, 0.06, 0.022),
    )
    return ThroughputView(**(base | kw))


def test_snapshot_figures_come_from_the_cumulative_live_histograms():
    m = metrics_from_snapshot(snapshot(view()))
    assert m["ttft.p99"] == 0.81
    assert m["e2e.max"] == 25.0
    assert m["itl.mean"] == 0.021
    assert m["tpot.p50"] == 0.021
    assert m["error_rate"] == pytest.approx(0.02)
    assert (m["completed"], m["failed"]) == (98, 2)
    assert m["output_tokens_per_s"] == 1000.0
    assert m["requests_per_s"] == pytest.approx(98 / 30)
    # Live views do not keep TTFB or first-content latencies: no data, not zero.
    assert m["ttfb.p99"] is None and m["first_content.p50"] is None


def test_snapshot_before_the_load_has_no_data_for_any_load_metric():
    m = metrics_from_snapshot(snapshot(None))
    assert set(m) == set(METRICS)
    assert all(v is None for v in m.values())
    states = evaluate([parse_threshold("failed==0")], m, LIVE_SOURCE)
    assert states[0].state == "no_data"


def test_error_rate_has_no_data_until_a_request_ends():
    empty = view(
        completed=0,
        failed=0,
        requests_per_s=0.0,
        ttft_s=LatencyStats(method=LIVE_METHOD),
        e2e_s=LatencyStats(method=LIVE_METHOD),
    )
    m = metrics_from_snapshot(snapshot(empty))
    assert m["error_rate"] is None
    assert m["ttft.p99"] is None
    # Nothing ended: every count and rate is no data, as a mix class's is — a rate floor
    # with ,abort stopped the load on its first tick, before an answer could arrive.
    for name in ("failed", "completed", "output_tokens_per_s", "requests_per_s"):
        assert m[name] is None, name
    states = evaluate([parse_threshold("output_tokens_per_s>50,abort")], m, LIVE_SOURCE)
    assert states[0].state == "no_data"
    ended = metrics_from_snapshot(snapshot(view(completed=0, failed=1, requests_per_s=0.5)))
    assert (ended["failed"], ended["completed"], ended["error_rate"]) == (1.0, 0.0, 1.0)


def test_snapshot_telemetry_takes_the_worst_endpoint_and_gpu():
    telemetry = {
        "engines": [
            {"endpoint": 0, "status": "ok", "waiting": 3.0, "kv_usage": 0.5, "preemptions": 1},
            {"endpoint": 1, "status": "ok", "waiting": 12.0, "kv_usage": 0.97, "preemptions": 2},
            {"endpoint": 2, "status": "scrape failed", "waiting": 999.0, "error": "timeout"},
            {"endpoint": 3, "status": "no data yet"},
        ],
        "gpus": [
            {"index": 0, "status": "ok", "memory_free_mib": 4096, "temperature_c": 71},
            {"index": 1, "status": "ok", "memory_free_mib": 1024, "temperature_c": 83},
        ],
    }
    m = metrics_from_snapshot(snapshot(view(), telemetry))
    assert m["engine.max_waiting"] == 12.0
    assert m["engine.max_kv_usage"] == 0.97
    # The live view carries the server's lifetime counter, not this run's preemptions.
    assert m["engine.preemptions"] is None
    assert m["gpu.min_free_mib"] == 1024.0
    assert m["gpu.max_temp_c"] == 83.0


def test_snapshot_without_telemetry_has_no_data_for_telemetry_metrics():
    engines_without_values = {"engines": [{"endpoint": 0, "status": "ok", "waiting": None}]}
    for telemetry in ({}, engines_without_values):
        m = metrics_from_snapshot(snapshot(view(), telemetry))
        for name in ("gpu.min_free_mib", "gpu.max_temp_c", "engine.max_waiting"):
            assert m[name] is None
        assert m["engine.preemptions"] is None
    # A GPU list that is not a list no longer reaches the figures: the snapshot refuses it.
    with pytest.raises(ValidationError):
        snapshot(view(), {"gpus": "not a list"})


# --- figures from the record ---------------------------------------------------------


def exact(
    p50: float, p90: float, p99: float, mx: float, mean: float, method: str = "nearest-rank"
) -> LatencyStats:
    return LatencyStats(p50=p50, p90=p90, p99=p99, max=mx, mean=mean, method=method, n=100)


def summary(**kw: Any) -> LoadSummary:
    base: dict[str, Any] = dict(
        requested_concurrency=8,
        workers_started=8,
        barrier_released=True,
        issued=100,
        completed=99,
        failed=1,
        output_tokens_per_s=812.5,
        requests_per_s=3.3,
        ttft_s=exact(0.2, 0.4, 0.8, 0.95, 0.25),
        e2e_s=exact(5.0, 9.0, 23.4, 25.0, 6.0),
        ttfb_s=exact(0.01, 0.02, 0.03, 0.04, 0.015),
        first_content_s=exact(0.3, 0.5, 0.9, 1.2, 0.35),
    )
    return LoadSummary(**(base | kw))


def test_record_figures_are_the_exact_summary():
    telemetry = {
        "engines": [
            {"endpoint": 0, "waiting_max": 4, "kv_usage_max": 0.6, "preemptions": 0},
            {"endpoint": 1, "waiting_max": 9, "kv_usage_max": 0.8, "preemptions": 5},
        ],
        "gpus": [{"min_free_mib": 900, "max_temp_c": 79}, {"min_free_mib": 3000, "max_temp_c": 85}],
    }
    m = metrics_from_record(summary(), telemetry)
    assert m["e2e.p99"] == 23.4
    assert m["ttfb.p90"] == 0.02
    assert m["first_content.max"] == 1.2
    assert m["itl.p99"] is None  # no ITL values in this summary: no data
    assert m["error_rate"] == pytest.approx(0.01)
    assert (m["completed"], m["failed"]) == (99, 1)
    assert m["output_tokens_per_s"] == 812.5
    assert m["requests_per_s"] == 3.3
    assert m["engine.max_waiting"] == 9
    assert m["engine.max_kv_usage"] == 0.8
    assert m["engine.preemptions"] == 5
    assert m["gpu.min_free_mib"] == 900
    assert m["gpu.max_temp_c"] == 85


def test_record_without_preemption_counts_has_no_preemption_data():
    m = metrics_from_record(summary(), {"engines": [{"waiting_max": 4, "kv_usage_max": 0.6}]})
    assert m["engine.preemptions"] is None
    assert m["engine.max_waiting"] == 4


def test_record_without_a_measured_load_has_no_data():
    for load in (None, summary(barrier_released=False, issued=0, completed=0, failed=0)):
        m = metrics_from_record(load, {})
        assert all(v is None for v in m.values())


def test_record_source_names_the_percentile_method():
    assert record_source(summary()) == "record (exact, nearest-rank)"
    linear = summary(ttft_s=exact(0.2, 0.4, 0.8, 0.95, 0.25, method="linear"))
    assert record_source(linear) == "record (exact, linear)"


# --- live watch ----------------------------------------------------------------------


def test_watch_remembers_the_first_live_breach_after_recovery():
    watch = ThresholdWatch([parse_threshold("ttft.p99<1s"), parse_threshold("error_rate==0")])
    watch.update({"ttft.p99": 0.5, "error_rate": 0.0}, t_s=10.0, load_elapsed_s=5.0)
    assert [s.state for s in watch.states] == ["ok", "ok"]
    assert [s.first_breach_s for s in watch.states] == [None, None]
    watch.update({"ttft.p99": 1.5, "error_rate": 0.0}, t_s=11.0, load_elapsed_s=6.0)
    watch.update({"ttft.p99": 1.7, "error_rate": None}, t_s=12.0, load_elapsed_s=7.0)
    states = watch.update({"ttft.p99": 0.7, "error_rate": 0.0}, t_s=13.0, load_elapsed_s=8.0)
    assert states[0].state == "ok"
    assert states[0].first_breach_s == 11.0
    assert states[1].first_breach_s is None  # no data is not a breach
    assert all(s.source == LIVE_SOURCE for s in states)


def test_abort_waits_for_the_grace_and_needs_a_breach_now():
    watch = ThresholdWatch(
        [parse_threshold("ttft.p99<1s"), parse_threshold("e2e.p99<20s,abort,grace=60s")]
    )
    assert watch.abort_due() is None
    watch.update({"ttft.p99": 5.0, "e2e.p99": 30.0}, t_s=35.0, load_elapsed_s=30.0)
    assert watch.abort_due() is None  # breached, but inside the grace
    watch.update({"ttft.p99": 5.0, "e2e.p99": 10.0}, t_s=70.0, load_elapsed_s=65.0)
    assert watch.abort_due() is None  # past the grace, but not breached now
    watch.update({"ttft.p99": 5.0, "e2e.p99": None}, t_s=71.0, load_elapsed_s=66.0)
    assert watch.abort_due() is None  # no data never aborts
    watch.update({"ttft.p99": 5.0, "e2e.p99": 30.0}, t_s=72.0, load_elapsed_s=67.0)
    aborting = watch.abort_due()
    assert aborting is not None and aborting.condition == "e2e.p99<20s"
    assert watch.states[1].first_breach_s == 35.0


def test_abort_without_grace_is_immediate_but_not_before_the_load():
    watch = ThresholdWatch([parse_threshold("error_rate<1%,abort")])
    watch.update({"error_rate": 0.5}, t_s=3.0, load_elapsed_s=None)
    assert watch.abort_due() is None
    watch.update({"error_rate": 0.5}, t_s=4.0, load_elapsed_s=0.0)
    assert watch.abort_due() is not None


# --- reasons -------------------------------------------------------------------------


def final(
    expr: str, observed: float | None, load: LoadSummary | None = None
) -> list[ThresholdState]:
    t = parse_threshold(expr)
    return evaluate([t], {t.metric: observed}, record_source(load or summary()))


def test_a_final_breach_fails_the_run_with_the_figure_and_its_source():
    [reason] = threshold_reasons(final("e2e.p99<20s", 23.4))
    assert reason.effect == "failed"
    assert reason.code == "threshold"
    assert reason.message == (
        "threshold e2e.p99<20s breached: 23.4 s, from the record (exact, nearest-rank)"
    )
    assert decide(RunFacts(load=summary(failed=0, issued=99), extra=[reason]))[0] is Status.FAILED


def test_latencies_under_a_second_read_in_ms_and_ratios_in_percent():
    [r1] = threshold_reasons(final("ttft.p99<500ms", 0.85))
    assert "breached: 850 ms," in r1.message
    [r2] = threshold_reasons(final("error_rate<0.1%", 0.0123))
    assert "breached: 1.23 %," in r2.message
    [r3] = threshold_reasons(final("output_tokens_per_s>1000", 812.4))
    assert "breached: 812 tok/s," in r3.message


def test_no_data_makes_the_run_invalid_and_says_why():
    [reason] = threshold_reasons(final("engine.max_kv_usage<95%", None))
    assert reason.effect == "invalid"
    assert reason.code == "threshold_no_data"
    assert "engine.max_kv_usage had no data" in reason.message
    assert "telemetry" in reason.message
    assert "no data is never ok" in reason.message
    assert decide(RunFacts(load=summary(failed=0, issued=99), extra=[reason]))[0] is Status.INVALID
    [latency] = threshold_reasons(final("itl.p99<50ms", None))
    assert "itl.p99 had no data" in latency.message


def test_a_threshold_that_holds_gives_no_reason():
    assert threshold_reasons(final("e2e.p99<30s", 23.4)) == []


def test_held_at_the_end_but_breached_live_is_a_note_with_the_time():
    watch = ThresholdWatch([parse_threshold("ttft.p99<1s")])
    watch.update({"ttft.p99": 1.4}, t_s=725.0, load_elapsed_s=720.0)
    watch.update({"ttft.p99": 0.6}, t_s=726.0, load_elapsed_s=721.0)
    [reason] = threshold_reasons(final("ttft.p99<1s", 0.62), watch.states)
    assert reason.effect == "note"
    assert "threshold ttft.p99<1s held at the end (620 ms" in reason.message
    assert "first breached live at 12 min 5 s" in reason.message
    assert decide(RunFacts(load=summary(failed=0, issued=99), extra=[reason]))[0] is Status.PASSED


def test_a_final_breach_also_says_when_it_was_first_breached_live():
    watch = ThresholdWatch([parse_threshold("e2e.p99<20s")])
    watch.update({"e2e.p99": 21.0}, t_s=42.0, load_elapsed_s=37.0)
    [reason] = threshold_reasons(final("e2e.p99<20s", 23.4), watch.states)
    assert reason.message.endswith("; first breached live at 42 s")


def test_an_abort_fails_the_run_once_and_says_the_load_was_stopped_early():
    t = parse_threshold("e2e.p99<20s,abort,grace=60s")
    other = parse_threshold("ttft.p99<2s")
    watch = ThresholdWatch([t, other])
    watch.update({"e2e.p99": 25.0, "ttft.p99": 0.5}, t_s=42.0, load_elapsed_s=61.0)
    assert watch.abort_due() == t
    finals = evaluate(
        [t, other], {"e2e.p99": 24.0, "ttft.p99": 3.0}, "record (exact, nearest-rank)"
    )
    reasons = threshold_reasons(finals, watch.states, abort=t)
    assert [(r.code, r.effect) for r in reasons] == [
        ("threshold_abort", "failed"),
        ("threshold", "failed"),
    ]
    assert reasons[0].message == (
        "threshold e2e.p99<20s breached at 42 s (25 s, live histogram (1 % buckets)): "
        "the load was stopped early (abort_on_fail, grace 60 s)"
    )
    assert "ttft.p99<2s breached: 3 s" in reasons[1].message


# --- drift and leak thresholds and note-tier ones --------------------------------------


@pytest.mark.parametrize(
    ("expr", "metric", "op", "value"),
    [
        ("drift.output_tok_s>-10%", "drift.output_tok_s", ">", -0.10),
        ("drift.ttft.p99<+50%", "drift.ttft.p99", "<", 0.50),
        ("drift.ttft.p99 < 50%", "drift.ttft.p99", "<", 0.50),
        ("drift.error_rate<+1%", "drift.error_rate", "<", 0.01),  # points, not relative
        ("drift.engine.kv_usage<+5%", "drift.engine.kv_usage", "<", 0.05),
        ("leak.server_rss<200MB/h", "leak.server_rss", "<", 200.0),
        ("leak.server_rss<1.5GB/h", "leak.server_rss", "<", 1536.0),
        ("leak.gpu_mem<1GiB/h", "leak.gpu_mem", "<", 1024.0),
        ("leak.gpu_mem<=512MiB/h", "leak.gpu_mem", "<=", 512.0),
        ("leak.kv_usage<10%/h", "leak.kv_usage", "<", 0.10),
        ("leak.kv_usage<0.1/h", "leak.kv_usage", "<", 0.10),
        ("leak.open_files<100/h", "leak.open_files", "<", 100.0),
        ("leak.client_rss<512KB/h", "leak.client_rss", "<", 0.5),
    ],
)
def test_drift_and_leak_thresholds_parse_to_canonical_units(expr, metric, op, value):
    t = parse_threshold(expr, gpu_telemetry=True)
    assert (t.metric, t.op) == (metric, op)
    assert t.value == pytest.approx(value)
    assert not t.note and t.origin == "given"


@pytest.mark.parametrize(
    ("expr", "fragments"),
    [
        ("drift.output_tok_s>-10", ["unit '' does not fit drift.output_tok_s", "signed %"]),
        ("drift.ttft.p99<+2s", ["unit 's' does not fit drift.ttft.p99", "e.g. -10% or +50%"]),
        ("drift.ttft_p99<+50%", ["unknown figure 'ttft_p99' after drift.", "'drift.ttft.p99'"]),
        ("drift<+5%", ["'drift' needs a figure", "output_tok_s"]),
        ("drift.throughput>-10%", ["unknown figure 'throughput'", "use one of output_tok_s"]),
        ("leak.server_rss<200MB", ["unit 'MB' does not fit leak.server_rss", "MB/h or GB/h"]),
        ("leak.rss<1GB/h", ["unknown resource 'rss' after leak.", "server_rss"]),
        ("leak<1GB/h", ["'leak' needs a resource", "server_rss, gpu_mem"]),
        ("leak.kv_usage<10%", ["unit '%' does not fit leak.kv_usage", "%/h"]),
        ("leak.open_files<100", ["unit '' does not fit leak.open_files", "/h"]),
        ("leak.open_files<", ["missing value after '<'", "e.g. leak.open_files<100/h"]),
        ("drift.output_tok_s>", ["missing value after '>'", "drift.output_tok_s>-10%"]),
        ("ttft.p99<2s,note,abort", ["note-tier threshold never stops the load"]),
        ("ttft.p99<2s,loud", ["unknown option 'loud'", "or note"]),
    ],
)
def test_drift_and_leak_errors_name_the_value_and_what_is_allowed(expr, fragments):
    with pytest.raises(ThresholdError) as info:
        parse_threshold(expr, gpu_telemetry=True)
    message = str(info.value)
    assert message.startswith(f"threshold {expr!r}: ")
    for fragment in fragments:
        assert fragment in message, message


def test_gpu_drift_and_leak_need_a_gpu_source_and_abort_is_allowed_on_trends():
    for expr in ("leak.gpu_mem<1GiB/h", "drift.gpu.util_percent>-10%"):
        with pytest.raises(ThresholdError, match="need a GPU telemetry source"):
            parse_threshold(expr)
    t = parse_threshold("drift.output_tok_s>-30%,abort,grace=10m")
    assert t.abort_on_fail and t.grace_s == 600.0
    assert TREND_METRICS["drift.output_tok_s"].live


def test_every_figure_and_resource_has_a_trend_metric_described():
    assert set(TREND_METRICS) == {f"drift.{f}" for f in FIGURES} | {f"leak.{r}" for r in LEAKS}
    assert TREND_METRICS["drift.error_rate"].kind == "drift_points"
    assert TREND_METRICS["drift.ttft.p99"].kind == "drift"
    lines = describe_trend_metrics()
    assert len(lines) == len(TREND_METRICS)
    assert any(line.startswith("leak.server_rss") and "per hour" in line for line in lines)


def test_a_trend_figure_breaches_only_when_its_trend_is_significant():
    t = parse_threshold("drift.output_tok_s>-10%")
    noise = TrendFigure(-0.25, False, "window series: no significant trend, Mann–Kendall p=0.4")
    real = TrendFigure(-0.25, True, "window series: a significant falling trend")
    small = TrendFigure(-0.05, True, "window series: a significant falling trend")
    none = TrendFigure(None, False, "window series: 4 windows of 60 s; a trend needs 8")
    states = [evaluate([t], {t.metric: f}, "ignored")[0] for f in (noise, real, small, none)]
    assert [s.state for s in states] == ["ok", "breached", "ok", "no_data"]
    assert states[0].source == noise.source and states[0].observed == -0.25
    assert states[3].source == none.source
    assert evaluate([t], {}, "record")[0].state == "no_data"


def test_a_note_tier_breach_or_lack_of_data_is_a_note():
    t = parse_threshold("ttft.p99<1s,note")
    assert t.note and is_note(t.expr) and not is_note("ttft.p99<1s")
    [breach] = threshold_reasons(evaluate([t], {"ttft.p99": 1.5}, "record"))
    assert (breach.code, breach.effect) == ("threshold", "note")
    [missing] = threshold_reasons(evaluate([t], {"ttft.p99": None}, "record"))
    assert (missing.code, missing.effect) == ("threshold_no_data", "note")


def test_drift_and_leak_figures_read_in_their_units():
    assert format_value("drift.output_tok_s", -0.312) == "−31.2 %"
    assert format_value("drift.error_rate", 0.015) == "+1.5 points"
    assert format_value("leak.server_rss", 310.0) == "+310 MB/h"
    assert format_value("leak.gpu_mem", 2048.0) == "+2048 MiB/h"
    assert format_value("leak.kv_usage", 0.3) == "+30 %/h"
    assert format_value("leak.open_files", 12.0) == "+12/h"


def test_record_figures_include_the_endurance_findings():
    e = Endurance(
        window_s=60,
        judged=True,
        drift=[
            DriftFinding(
                figure="output_tok_s",
                baseline=4000.0,
                end=3000.0,
                change=-0.25,
                state="drift",
                trend=Trend(n=60, mk_p=1e-6, direction="falling"),
            )
        ],
        leaks=[LeakFinding(resource="server_rss", rate_per_h=12.0, mk_p=0.4, state="stable")],
    )
    m = metrics_from_record(summary(), {}, e)
    tok, rss = m["drift.output_tok_s"], m["leak.server_rss"]
    assert isinstance(tok, TrendFigure) and tok.observed == -0.25 and tok.significant
    assert isinstance(rss, TrendFigure) and rss.observed == 12.0 and not rss.significant
    assert "no significant lasting growth, Mann–Kendall p=0.4" in rss.source
    assert "drift.ttft.p99" not in metrics_from_record(summary(), {}, None)
    short = Endurance(window_s=60, not_judged_why="3 windows of 60 s; a trend needs 8 (8 min)")
    short.drift = [DriftFinding(figure="output_tok_s")]
    [state] = evaluate(
        [parse_threshold("drift.output_tok_s>-10%")], metrics_from_record(None, {}, short), "r"
    )
    assert state.state == "no_data" and "a trend needs 8" in state.source
    [reason] = threshold_reasons([state])
    assert reason.code == "threshold_no_data" and "window series judged no trend" in reason.message
