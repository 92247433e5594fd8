"""Class thresholds checked live (issue 16 §2): ``class.<name>.<metric>`` reads the class's
live tally, so it has a live figure, takes ``,abort`` and stops the load when that class
breaks, while the other classes' thresholds hold."""

from __future__ import annotations

import pytest

from loadgen.envelope import FailureClass, RequestResult
from loadgen.live import LiveLoadStats
from soak.judge.class_thresholds import LOAD_METRICS, class_live_metrics, threshold_classes
from soak.judge.thresholds import (
    ThresholdError,
    ThresholdWatch,
    parse_threshold,
    parse_thresholds,
    threshold_reasons,
)

S = 1_000_000_000
CLASSES = ("chat", "json")


def ok(cls: str, ttft_s: float = 0.1) -> RequestResult:
    return RequestResult(
        request_id="r",
        worker=0,
        prompt_id=0,
        sent_ns=0,
        first_token_ns=int(ttft_s * S),
        end_ns=int((ttft_s + 0.2) * S),
        status=200,
        output_tokens=5,
        chunks=5,
        itl_ns=[int(0.05 * S)] * 4,
        workload_class=cls,
    )


def broken(cls: str) -> RequestResult:
    return RequestResult(
        request_id="f",
        worker=0,
        prompt_id=0,
        sent_ns=0,
        status=200,
        failure=FailureClass.CONTRACT,
        workload_class=cls,
    )


def mixed_live(json_failures: int) -> LiveLoadStats:
    live = LiveLoadStats(classes=CLASSES)
    for _ in range(20):
        live.record(ok("chat"), now_s=0.5)
    for i in range(10):
        live.record(broken("json") if i < json_failures else ok("json", 1.5), now_s=0.5)
    return live


def test_a_class_metric_takes_abort_where_its_base_metric_has_a_live_figure():
    t = parse_threshold("class.json.error_rate<0.05,abort,grace=5s", classes=CLASSES)
    assert t.abort_on_fail and t.grace_s == 5.0 and t.metric == "class.json.error_rate"
    assert parse_threshold("class.chat.ttft.p99<2s,abort", classes=CLASSES).abort_on_fail
    # ttfb and first_content have no live figure for the load, so none for a class either
    with pytest.raises(ThresholdError, match="has no live figure"):
        parse_threshold("class.json.ttfb.p99<1s,abort", classes=CLASSES)
    with pytest.raises(ThresholdError, match="has no live figure"):
        parse_threshold("class.json.first_content.max<1s,abort", classes=CLASSES)


def test_class_live_metrics_are_each_class_s_own_figures():
    figures = class_live_metrics(mixed_live(json_failures=4).class_cumulative(10.0))
    assert figures["class.json.error_rate"] == 0.4
    assert figures["class.chat.error_rate"] == 0.0
    assert figures["class.json.failed"] == 4.0 and figures["class.json.completed"] == 6.0
    assert figures["class.chat.requests_per_s"] == 2.0
    chat_p99, json_p50 = figures["class.chat.ttft.p99"], figures["class.json.ttft.p50"]
    assert isinstance(chat_p99, float) and chat_p99 < 0.2
    assert isinstance(json_p50, float) and json_p50 > 1.4
    assert figures["class.json.itl.p50"] is not None
    assert figures["class.json.ttfb.p99"] is None  # end-only, as the load's
    # every load metric of every class has a key: a missing one would read as no data
    assert set(figures) == {f"class.{c}.{m}" for c in CLASSES for m in LOAD_METRICS}


def test_a_load_without_a_mix_has_no_class_figures():
    assert class_live_metrics(LiveLoadStats().class_cumulative(1.0)) == {}


def test_a_breached_class_threshold_aborts_and_the_other_class_s_holds():
    thresholds = parse_thresholds(
        ["class.json.error_rate<0.05,abort", "class.chat.error_rate<0.05,abort"], classes=CLASSES
    )
    watch = ThresholdWatch(thresholds)
    watch.update(class_live_metrics(mixed_live(0).class_cumulative(5.0)), 5.0, 3.0)
    assert [s.state for s in watch.states] == ["ok", "ok"]
    assert watch.abort_due() is None
    watch.update(class_live_metrics(mixed_live(3).class_cumulative(6.0)), 6.0, 4.0)
    assert [s.state for s in watch.states] == ["breached", "ok"]
    assert watch.states[0].observed == 0.3 and watch.states[0].first_breach_s == 6.0
    due = watch.abort_due()
    assert due is not None and due.metric == "class.json.error_rate"
    (reason,) = threshold_reasons([], watch.states, due)
    assert reason.code == "threshold_abort" and reason.effect == "failed"
    assert reason.message.startswith("threshold class.json.error_rate<0.05 breached at 6 s (30 %")
    assert "stopped early" in reason.message


def test_a_class_threshold_before_its_first_request_has_no_data_and_no_abort():
    thresholds = parse_thresholds(["class.json.error_rate<0.05,abort"], classes=CLASSES)
    watch = ThresholdWatch(thresholds)
    live = LiveLoadStats(classes=CLASSES)
    live.record(ok("chat"), now_s=0.5)
    watch.update(class_live_metrics(live.class_cumulative(1.0)), 1.0, 1.0)
    assert watch.states[0].state == "no_data" and watch.abort_due() is None


def test_a_class_without_a_finished_request_has_no_data_never_zero():
    """Before json's first request ends, its counts and rates are no data, not 0: a
    ``failed==0`` is not yet ok, and a rate floor with ,abort does not stop the load."""
    thresholds = parse_thresholds(
        [
            "class.json.failed==0",
            "class.json.output_tokens_per_s>1,abort",
            "class.json.requests_per_s>1,abort",
        ],
        classes=CLASSES,
    )
    watch = ThresholdWatch(thresholds)
    live = LiveLoadStats(classes=CLASSES)
    live.record(ok("chat"), now_s=0.5)
    figures = class_live_metrics(live.class_cumulative(2.0))
    assert {m: v for m, v in figures.items() if m.startswith("class.json.")} == dict.fromkeys(
        f"class.json.{m}" for m in LOAD_METRICS
    )
    assert figures["class.chat.failed"] == 0.0 and figures["class.chat.requests_per_s"] == 0.5
    watch.update(figures, 2.0, 2.0)
    assert [s.state for s in watch.states] == ["no_data"] * 3
    assert watch.abort_due() is None
    live.record(ok("json"), now_s=2.5)  # its first: figures from then on (5 tokens in 3 s)
    watch.update(class_live_metrics(live.class_cumulative(3.0)), 3.0, 3.0)
    assert [s.state for s in watch.states] == ["ok", "ok", "breached"]


def test_only_the_classes_a_threshold_names_are_built_each_tick():
    names = tuple(f"c{i}" for i in range(64))
    live = LiveLoadStats(classes=names)
    for name in names:
        live.record(ok(name), now_s=0.5)
    wanted = threshold_classes(["class.c7.error_rate", "ttft.p99", "class.c3.ttft.p99"])
    assert wanted == ("c7", "c3")
    views = live.class_cumulative(1.0, wanted)
    assert list(views) == ["c7", "c3"]
    assert set(class_live_metrics(views)) == {
        f"class.{c}.{m}" for c in wanted for m in LOAD_METRICS
    }
    assert live.class_cumulative(1.0, ("nope",)) == {}  # refused at parse; harmless here
