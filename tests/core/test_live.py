"""The live window forgets old seconds; the cumulative view never does."""

from loadgen.envelope import FailureClass, RequestResult
from loadgen.live import LiveLoadStats, request_latencies

S = 1_000_000_000


def ok(sent_s: float, ttft_s: float, e2e_s: float, tokens: int) -> RequestResult:
    sent = int(sent_s * S)
    return RequestResult(
        request_id="r",
        worker=0,
        prompt_id=0,
        sent_ns=sent,
        first_token_ns=sent + int(ttft_s * S),
        end_ns=sent + int(e2e_s * S),
        status=200,
        output_tokens=tokens,
        prompt_tokens=10,
        chunks=tokens,
        itl_ns=[int(0.01 * S)] * (tokens - 1),
    )


def test_tpot_is_decode_time_per_later_token():
    lat = request_latencies(ok(0, 0.5, 1.5, 11))
    assert lat["ttft"] == 0.5 and lat["e2e"] == 1.5
    tpot = lat["tpot"]
    assert tpot is not None and abs(tpot - 0.1) < 1e-9


def test_window_drops_old_requests_cumulative_keeps_them():
    live = LiveLoadStats(window_s=5)
    for t in range(20):
        live.record(ok(t, 0.1, 0.5, 10), now_s=t + 0.5)
    failed = RequestResult(
        request_id="f", worker=0, prompt_id=0, sent_ns=0, status=500, failure=FailureClass.HTTP_5XX
    )
    live.record(failed, now_s=19.5)
    win = live.window(now_s=20.0, load_start_s=0.0)
    cum = live.cumulative(load_elapsed_s=20.0)
    assert win.completed == 5 and cum.completed == 20
    assert cum.failed == 1 and cum.failures_by_class == {"http_5xx": 1}
    assert win.output_tokens_per_s == 10.0  # 5 requests × 10 tokens / 5 s
    assert cum.ttft_s.n == 20 and cum.itl_s.n == 20 * 9


def test_cancelled_requests_are_not_counted_as_failures():
    live = LiveLoadStats()
    live.record(RequestResult(request_id="c", worker=0, prompt_id=0, sent_ns=0, cancelled=True), 1)
    assert live.cumulative(1.0).failed == 0


def test_window_right_after_the_barrier_is_not_understated():
    live = LiveLoadStats(window_s=10)
    # steady 100 req/s from a barrier released at t = 5.3 s
    for i in range(int(5.3 * 100), 8 * 100):
        t = i / 100
        live.record(ok(t, 0.01, 0.02, 2), now_s=t)
    win = live.window(now_s=8.2, load_start_s=5.3)  # counts seconds 5 (from 5.3), 6 and 7
    assert win.span_s == 8 - 5.3
    assert win.requests_per_s is not None and abs(win.requests_per_s - 100) < 1
