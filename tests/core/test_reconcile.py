"""Client vs server counters: matched, a real gap, a restarted server, a missing counter."""

from probes.engine_metrics import EngineSample
from soak.reconcile import reconcile
from soak.record import LoadSummary


def sample(requests, prompt, gen, aborted=0.0, error=None) -> EngineSample:
    values = {
        "requests_finished_total": requests + aborted,
        "prompt_tokens_total": prompt,
        "generation_tokens_total": gen,
    }
    return EngineSample(
        t=0,
        engine="vllm",
        values=values,
        finished_by_reason={"length": requests, "abort": aborted},
        error=error,
    )


def load(**kw) -> LoadSummary:
    base = dict(
        requested_concurrency=2,
        workers_started=2,
        barrier_released=True,
        completed=10,
        issued=10,
        prompt_tokens=500,
        output_tokens=640,
    )
    return LoadSummary(**(base | kw))


def test_two_replicas_add_up_to_what_the_client_received():
    before = [sample(100, 1000, 2000), sample(50, 700, 900)]
    after = [sample(106, 1300, 2384), sample(54, 900, 1156)]
    rec = reconcile(before, after, load())
    assert rec["matched"] is True and rec["server"]["generation_tokens"] == 640


def test_aborted_requests_are_not_counted_as_completed():
    rec = reconcile([sample(0, 0, 0)], [sample(10, 500, 640, aborted=3)], load())
    assert rec["matched"] is True and rec["server"]["requests"] == 10


def test_a_gap_is_reported_with_both_numbers_and_explained_by_failures():
    rec = reconcile([sample(0, 0, 0)], [sample(11, 550, 700)], load(failed=1, issued=11))
    assert rec["matched"] is False
    assert rec["differences"] == {"requests": 1, "prompt_tokens": 50, "generation_tokens": 60}
    assert "1 failed" in rec["note"]


def test_a_counter_that_went_down_is_a_restart_not_a_negative_delta():
    rec = reconcile([sample(500, 9000, 9000)], [sample(10, 500, 640)], load())
    assert rec["matched"] is False and rec["counter_resets"]
    assert rec["server"]["generation_tokens"] == 640


def test_no_counters_means_unknown_not_matched():
    rec = reconcile([sample(0, 0, 0, error="ConnectError")], [sample(10, 500, 640)], load())
    assert rec["matched"] is None and "failed" in rec["unavailable"]
    assert reconcile(None, None, load())["matched"] is None
