"""Client vs server counters: matched, a real gap, a restarted server, a missing counter."""

from typing import Any

from probes.engine_metrics import EngineSample
from soak.judge.reconcile import overall, reconcile, reconcile_reasons
from soak.record.models import LoadSummary


def sample(
    requests: float, prompt: float, gen: float, aborted: float = 0.0, error: str | None = None
) -> EngineSample:
    values: dict[str, float | None] = {
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


def load(**kw: Any) -> LoadSummary:
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


def _at(s: EngineSample, t: float) -> EngineSample:
    import dataclasses

    return dataclasses.replace(s, t=t)


def test_a_restart_inside_the_window_makes_it_unavailable_with_the_restarts_time():
    """The server restarted early in the load and its counters grew back past the window's
    first sample: the deltas look like a (negative) mismatch, but they are not comparable."""
    before = [_at(sample(100, 5000, 6000), 10.0), _at(sample(0, 0, 0), 10.0)]
    after = [_at(sample(104, 5200, 6256), 40.0), _at(sample(3, 300, 384), 40.0)]
    restarts = [[{"t": 12.4, "counters": ["generation_tokens_total"]}], []]
    rec = reconcile(before, after, load(), restarts=restarts, load_start_s=10.0)
    assert rec["matched"] is None and "note" not in rec
    why = (
        "the server restarted in the window (endpoint 0 at load+00:00:02): its counters began again"
    )
    assert rec["unavailable"] == why
    for counter in ("requests", "prompt_tokens", "generation_tokens"):
        assert rec[counter]["status"] == "unavailable" and rec[counter]["why"] == why
    assert rec["counter_resets"] == [{"endpoint": 0, "t_s": 12.4, "at": "at load+00:00:02"}]
    assert reconcile_reasons(overall({"load": rec}), strict=True) == []
    # the same counters without the restart: a mismatch, as before
    assert reconcile(before, after, load(), restarts=[[], []])["matched"] is False


def test_a_restart_outside_the_window_leaves_it_alone():
    before, after = [_at(sample(0, 0, 0), 10.0)], [_at(sample(10, 500, 640), 40.0)]
    for t in (5.0, 10.0, 41.0):  # before, at the first sample (seen by it), after
        rec = reconcile(before, after, load(), restarts=[[{"t": t}]], load_start_s=10.0)
        assert rec["matched"] is True, t


def test_a_server_that_counted_less_is_never_explained_by_failed_requests():
    """Failed or cut requests only make the server count more than the client received;
    a server that counted less missed work, and the note says so."""
    rec = reconcile([sample(0, 0, 0)], [sample(9, 450, 600)], load(failed=2, issued=12))
    assert rec["matched"] is False and rec["generation_tokens"]["difference"] == -40
    assert rec["note"].startswith("the server counted less than the client received")
    assert "failed or cut requests: the server counted work" not in rec["note"]
    (reason,) = reconcile_reasons({"load": rec}, strict=True)
    assert reason.effect == "invalid"  # unexplained, even with failures in the run
    assert "the server counted less than the client received" in reason.message
    (note,) = reconcile_reasons({"load": rec}, strict=False)
    assert note.effect == "note"


def test_a_reset_seen_in_the_windows_own_samples_says_when():
    before, after = [_at(sample(500, 9000, 9000), 10.0)], [_at(sample(10, 500, 640), 40.0)]
    rec = reconcile(before, after, load(), load_start_s=10.0)
    why = rec["generation_tokens"]["why"]
    assert why == (
        "generation_tokens_total went down on endpoint 0 between load+00:00:00 and "
        "load+00:00:30: the server restarted in the window"
    )
