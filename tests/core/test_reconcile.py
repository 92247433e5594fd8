"""Client vs server counters: matched, a real gap, a restarted server, a missing counter."""

from probes.engine_metrics import EngineSample
from soak.reconcile import overall, reconcile, reconcile_reasons
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
    assert rec["matched"] is True
    assert rec["generation_tokens"] == {
        "status": "matched",
        "client": 640,
        "server": 640.0,
        "difference": 0.0,
    }
    assert rec["requests"]["status"] == rec["prompt_tokens"]["status"] == "matched"
    assert reconcile_reasons(overall({"load": rec}), strict=True) == []


def test_aborted_requests_are_not_counted_as_completed():
    rec = reconcile([sample(0, 0, 0)], [sample(10, 500, 640, aborted=3)], load())
    assert rec["matched"] is True and rec["requests"]["server"] == 10


def test_a_gap_is_reported_with_both_numbers_and_explained_by_failures():
    rec = reconcile([sample(0, 0, 0)], [sample(11, 550, 700)], load(failed=1, issued=11))
    assert rec["matched"] is False
    assert {
        k: rec[k]["difference"] for k in ("requests", "prompt_tokens", "generation_tokens")
    } == {
        "requests": 1,
        "prompt_tokens": 50,
        "generation_tokens": 60,
    }
    assert rec["generation_tokens"]["status"] == "mismatched"
    assert rec["generation_tokens"]["difference_pct"] == 9.375
    assert "1 failed" in rec["note"]
    # explained by a failed request: even strict keeps it a note (the failure FAILS the run)
    (reason,) = reconcile_reasons({"load": rec}, strict=True)
    assert reason.effect == "note" and "1 failed" in reason.message


def test_an_unexplained_gap_is_a_note_or_with_strict_invalid():
    rec = reconcile([sample(0, 0, 0)], [sample(10, 500, 652)], load())
    assert rec["matched"] is False and rec["requests"]["status"] == "matched"
    assert rec["generation_tokens"] == {
        "status": "mismatched",
        "client": 640,
        "server": 652.0,
        "difference": 12.0,
        "difference_pct": 1.875,
    }
    (note,) = reconcile_reasons({"load": rec}, strict=False)
    assert note.effect == "note"
    assert note.message == (
        "load: the server's counters disagree with what the client received "
        "(generation tokens: server 652, client 640 (+12))"
    )
    (strict,) = reconcile_reasons({"load": rec}, strict=True)
    assert strict.effect == "invalid" and strict.code == "reconcile_mismatch"


def test_a_counter_that_went_down_is_a_restart_not_a_negative_delta():
    rec = reconcile([sample(500, 9000, 9000)], [sample(10, 500, 640)], load())
    assert rec["matched"] is None and rec["counter_resets"]
    gen = rec["generation_tokens"]
    assert gen["status"] == "unavailable" and "restarted" in gen["why"]
    assert gen["server"] == 640  # the count since the restart, shown, not compared


def test_no_counters_means_unknown_not_matched():
    rec = reconcile([sample(0, 0, 0, error="ConnectError")], [sample(10, 500, 640)], load())
    assert rec["matched"] is None and "failed" in rec["unavailable"]
    assert rec["requests"] == {
        "status": "unavailable",
        "client": 10,
        "server": None,
        "why": "/metrics failed on endpoint(s) [0]",
    }
    assert reconcile(None, None, load())["matched"] is None


def test_an_engine_without_a_counter_leaves_that_counter_unavailable_only():
    s0, s1 = sample(0, 0, 0), sample(10, 500, 640)
    s0.values["requests_finished_total"] = s1.values["requests_finished_total"] = None
    rec = reconcile([s0], [s1], load())
    assert rec["requests"]["status"] == "unavailable" and "exports no" in rec["requests"]["why"]
    assert rec["generation_tokens"]["status"] == "matched"
    assert rec["matched"] is None
