"""The verdict: strongest effect wins, every finding stays in the reasons."""

from soak.record import ClientHealth, LoadSummary, Status
from soak.verdict import Findings, decide


def load(**kw) -> LoadSummary:
    base = dict(
        requested_concurrency=8, workers_started=8, barrier_released=True, issued=100, completed=100
    )
    return LoadSummary(**(base | kw))


def test_clean_run_passes():
    assert decide(Findings(load=load())) == (Status.PASSED, [])


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
