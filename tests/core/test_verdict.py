"""The verdict: strongest effect wins, every finding stays in the reasons."""

from soak.record import ClientHealth, LoadSummary, Status
from soak.verdict import Findings, decide


def load(**kw) -> LoadSummary:
    base = dict(requested_concurrency=8, workers_started=8, barrier_released=True, completed=100)
    merged = base | kw
    merged.setdefault(
        "issued", merged["completed"] + merged.get("failed", 0) + merged.get("cancelled", 0)
    )
    return LoadSummary(**merged)


def test_clean_run_passes_and_says_how_many_requests_were_clean():
    status, reasons = decide(Findings(load=load()))
    assert status is Status.PASSED
    assert [(r.code, r.effect) for r in reasons] == [("load_clean", "note")]
    assert reasons[0].message == f"load: 0 failures in {load().issued:,} requests"


def test_one_load_failure_fails_and_says_which_class():
    status, reasons = decide(
        Findings(load=load(completed=99, failed=1, failures_by_class={"http_5xx": 1}))
    )
    assert status is Status.FAILED
    assert reasons[0].code == "load_failures" and "1 http_5xx" in reasons[0].message


def test_failures_within_threshold_pass():
    status, _ = decide(
        Findings(load=load(failed=2, failures_by_class={"read_timeout": 2}), max_failures=2)
    )
    assert status is Status.PASSED


def test_barrier_not_reached_is_invalid_with_the_cause():
    status, reasons = decide(
        Findings(
            load=load(
                workers_started=5,
                barrier_released=False,
                completed=0,
                issued=0,
                worker_start_failures={"OSError: [Errno 24] Too many open files": 3},
            )
        )
    )
    assert status is Status.INVALID
    assert "only 5 of 8 workers started" in reasons[0].message
    assert "Too many open files" in reasons[0].message


def test_overloaded_client_is_invalid_but_keeps_the_failure():
    status, reasons = decide(
        Findings(
            load=load(failed=1, failures_by_class={"http_5xx": 1}),
            health=ClientHealth(loop_lag_p99_s=1.2),
            max_loop_lag_s=0.5,
        )
    )
    assert status is Status.INVALID
    assert [r.code for r in reasons] == ["client_overloaded", "load_failures"]


def test_abort_wins_and_preflight_fails():
    assert decide(Findings(load=load(), aborted="SIGINT during load"))[0] is Status.ABORTED
    status, reasons = decide(Findings(preflight_errors=["endpoint x unreachable"]))
    assert status is Status.FAILED and reasons[0].message == "endpoint x unreachable"


def test_requests_cut_by_the_drain_deadline_fail_the_run():
    status, reasons = decide(Findings(load=load(cancelled=18, cancel_cause="drain deadline")))
    assert status is Status.FAILED
    assert (
        reasons[0].code == "drain_deadline" and "18 requests did not finish" in reasons[0].message
    )


def test_requests_cut_by_an_abort_are_a_note():
    status, reasons = decide(
        Findings(load=load(cancelled=3, cancel_cause="abort"), aborted="SIGINT during drain")
    )
    assert status is Status.ABORTED and reasons[-1].effect == "note"


def test_issued_that_do_not_add_up_make_the_run_invalid():
    status, reasons = decide(Findings(load=load(issued=105)))
    assert status is Status.INVALID
    assert "105 requests issued but 100 journaled" in reasons[0].message


def test_a_dead_worker_makes_the_run_invalid():
    status, reasons = decide(Findings(load=load(worker_errors={"OSError: disk full": 1})))
    assert status is Status.INVALID and "disk full" in reasons[0].message
