"""A mixed load's live tallies per workload class (issue 16 §2): each class of the mix keeps
its own cumulative figures beside the load's, so class thresholds have a live figure; the
keys are the mix's classes only, and a load without a mix keeps none."""

from __future__ import annotations

from loadgen.envelope import FailureClass, RequestResult
from loadgen.live import LiveLoadStats

S = 1_000_000_000


def ok(cls: str | None, ttft_s: float, tokens: int = 5, sent_s: float = 0.0) -> RequestResult:
    sent = int(sent_s * S)
    return RequestResult(
        request_id="r",
        worker=0,
        prompt_id=0,
        sent_ns=sent,
        first_token_ns=sent + int(ttft_s * S),
        end_ns=sent + int((ttft_s + 0.04 * (tokens - 1)) * S),
        status=200,
        output_tokens=tokens,
        prompt_tokens=10,
        chunks=tokens,
        itl_ns=[int(0.04 * S)] * (tokens - 1),
        workload_class=cls,
    )


def failed(cls: str | None) -> RequestResult:
    return RequestResult(
        request_id="f",
        worker=0,
        prompt_id=0,
        sent_ns=0,
        status=200,
        failure=FailureClass.CONTRACT,
        workload_class=cls,
    )


def test_each_class_keeps_its_own_cumulative_figures_beside_the_load_s():
    live = LiveLoadStats(window_s=5, classes=("chat", "json"))
    for t in range(8):  # in time order, as the runner's loop records them
        live.record(ok("chat", 0.1, tokens=5, sent_s=t), now_s=t + 0.5)
        if t < 4:
            live.record(ok("json", 2.0, tokens=9, sent_s=t), now_s=t + 0.5)
            live.record(failed("json"), now_s=t + 0.5)
    by_class = live.class_cumulative(load_elapsed_s=8.0)
    assert list(by_class) == ["chat", "json"]  # the mix's order
    chat, json_ = by_class["chat"], by_class["json"]
    assert (chat.completed, chat.failed) == (8, 0)
    assert (json_.completed, json_.failed) == (4, 4)
    assert json_.failures_by_class == {"contract_error": 4}
    # the rates are over the load's elapsed time, as the record's class figures are
    assert chat.requests_per_s == 1.0 and json_.output_tokens_per_s == 4 * 9 / 8.0
    # each class's latencies are its own: chat's 0.1 s TTFT, json's 2 s
    assert chat.ttft_s.p99 is not None and chat.ttft_s.p99 < 0.2
    assert json_.ttft_s.p50 is not None and json_.ttft_s.p50 > 1.9
    assert (chat.ttft_s.n, chat.itl_s.n, json_.itl_s.n) == (8, 8 * 4, 4 * 8)
    assert chat.tpot_s.n == 8 and json_.e2e_s.n == 4
    # the load's view counts everything, as before
    cum = live.cumulative(8.0)
    assert (cum.completed, cum.failed) == (12, 4)
    assert cum.ttft_s.n == 12 and cum.itl_s.n == 8 * 4 + 4 * 8
    # the window (seconds 3 to 7) is the load's, not a class's
    win = live.window(now_s=8.0, load_start_s=0.0)
    assert (win.completed, win.failed) == (5 + 1, 1)


def test_only_the_mix_s_classes_are_tallied():
    live = LiveLoadStats(classes=("chat",))
    live.record(ok("chat", 0.1), now_s=0.5)
    live.record(ok("elsewhere", 0.1), now_s=0.5)  # not a class of the mix: no new key
    live.record(ok(None, 0.1), now_s=0.5)
    live.record(failed("elsewhere"), now_s=0.5)
    by_class = live.class_cumulative(1.0)
    assert list(by_class) == ["chat"]
    assert (by_class["chat"].completed, by_class["chat"].failed) == (1, 0)
    assert live.cumulative(1.0).completed == 3  # the load still counts them all


def test_a_class_with_no_request_yet_has_no_data_not_zero_latency():
    live = LiveLoadStats(classes=("chat", "long"))
    live.record(ok("chat", 0.1), now_s=0.5)
    long = live.class_cumulative(1.0)["long"]
    assert (long.completed, long.failed) == (0, 0)
    assert long.ttft_s.n == 0 and long.ttft_s.p99 is None


def test_a_load_without_a_mix_keeps_no_class_tallies():
    live = LiveLoadStats()
    live.record(ok("chat", 0.1), now_s=0.5)
    assert live.class_cumulative(1.0) == {}
    assert live.cumulative(1.0).completed == 1


def test_cancelled_requests_are_not_counted_for_their_class_either():
    live = LiveLoadStats(classes=("chat",))
    cancelled = RequestResult(
        request_id="c", worker=0, prompt_id=0, sent_ns=0, cancelled=True, workload_class="chat"
    )
    live.record(cancelled, now_s=0.5)
    chat = live.class_cumulative(1.0)["chat"]
    assert (chat.completed, chat.failed) == (0, 0)
