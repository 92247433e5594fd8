"""The verdict: strongest effect wins, every finding stays in the reasons."""

from typing import Any

from probes.gates import GateFailure, SuiteGate
from soak.judge.facts import RunFacts
from soak.judge.verdict import decide
from soak.record.models import ClientHealth, LoadSummary, Status


def load(**kw: Any) -> LoadSummary:
    base = dict(requested_concurrency=8, workers_started=8, barrier_released=True, completed=100)
    merged = base | kw
    merged.setdefault(
        "issued", merged["completed"] + merged.get("failed", 0) + merged.get("cancelled", 0)
    )
    return LoadSummary(**merged)


def test_clean_run_passes_and_says_how_many_requests_were_clean():
    status, reasons = decide(RunFacts(load=load()))
    assert status is Status.PASSED
    assert [(r.code, r.effect) for r in reasons] == [("load_clean", "note")]
    assert reasons[0].message == f"load: 0 failures in {load().issued:,} requests"


def test_one_load_failure_fails_and_says_which_class():
    status, reasons = decide(
        RunFacts(load=load(completed=99, failed=1, failures_by_class={"http_5xx": 1}))
    )
    assert status is Status.FAILED
    assert reasons[0].code == "load_failures" and "1 http_5xx" in reasons[0].message


def test_failures_within_threshold_pass():
    status, _ = decide(
        RunFacts(load=load(failed=2, failures_by_class={"read_timeout": 2}), max_failures=2)
    )
    assert status is Status.PASSED


def test_barrier_not_reached_is_invalid_with_the_cause():
    status, reasons = decide(
        RunFacts(
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
        RunFacts(
            load=load(failed=1, failures_by_class={"http_5xx": 1}),
            health=ClientHealth(loop_lag_p99_s=1.2),
            max_loop_lag_s=0.5,
        )
    )
    assert status is Status.INVALID
    assert [r.code for r in reasons] == ["client_overloaded", "load_failures"]


def test_abort_wins_and_preflight_fails():
    assert decide(RunFacts(load=load(), aborted="SIGINT during load"))[0] is Status.ABORTED
    status, reasons = decide(RunFacts(preflight_errors=["endpoint x unreachable"]))
    assert status is Status.FAILED and reasons[0].message == "endpoint x unreachable"


def test_requests_cut_by_the_drain_deadline_fail_the_run():
    status, reasons = decide(RunFacts(load=load(cancelled=18, cancel_cause="drain deadline")))
    assert status is Status.FAILED
    assert (
        reasons[0].code == "drain_deadline" and "18 requests did not finish" in reasons[0].message
    )


def test_requests_cut_by_an_abort_are_a_note():
    status, reasons = decide(
        RunFacts(load=load(cancelled=3, cancel_cause="abort"), aborted="SIGINT during drain")
    )
    assert status is Status.ABORTED and reasons[-1].effect == "note"


def test_issued_that_do_not_add_up_make_the_run_invalid():
    status, reasons = decide(RunFacts(load=load(issued=105)))
    assert status is Status.INVALID
    assert "105 requests issued but 100 journaled" in reasons[0].message


def test_a_dead_worker_makes_the_run_invalid():
    status, reasons = decide(RunFacts(load=load(worker_errors={"OSError: disk full": 1})))
    assert status is Status.INVALID and "disk full" in reasons[0].message


# -- contract gates ------------------------------------------------------------------------


def fail(label: str, reason: str, outcome: str = "availability", **kw: Any) -> GateFailure:
    return GateFailure(
        label=label,
        outcome=outcome,  # type: ignore[arg-type]
        reason=reason,
        request_id=f"run/after/{label}",
        t_s=kw.pop("t_s", 100.0),
        wall="2026-11-30T00:00:00+00:00",
        **kw,
    )


def clean_gates() -> dict[str, SuiteGate]:
    return {"json": SuiteGate(passed=24, total=24), "tools": SuiteGate(passed=8, total=8)}


def test_one_after_load_probe_500_fails_a_clean_run_in_the_seeds_words():
    after = clean_gates() | {
        "json": SuiteGate(
            passed=23, total=24, failures=[fail("json#7 (invoice)", "HTTP 500: boom")]
        )
    }
    status, reasons = decide(
        RunFacts(
            load=load(completed=64_507),
            gates={"before": clean_gates(), "after": after},
            gates_configured=["json", "tools"],
        )
    )
    assert status is Status.FAILED
    assert [r.message for r in reasons] == [
        "after-load json 23/24: json#7 (invoice) HTTP 500: boom (availability)",
        "load: 0 failures in 64,507 requests",
    ]


def test_failed_before_gates_without_a_load_say_why_no_load_ran():
    before = {
        "json": SuiteGate(
            passed=22,
            total=24,
            failures=[
                fail("json#3 (event)", "not strict JSON: raw control character", "contract"),
                fail("json#11 (recipe)", "not strict JSON: Expecting ','", "contract"),
            ],
        )
    }
    status, reasons = decide(
        RunFacts(gates={"before": before}, gates_configured=["json"], before_blocked=True)
    )
    assert status is Status.FAILED
    assert [r.code for r in reasons] == ["gate_failed", "before_gates_failed"]
    assert reasons[0].message.startswith("before-load json 22/24: json#3 (event) not strict")
    assert "; json#11 (recipe)" in reasons[0].message and "(contract)" in reasons[0].message
    assert "--force-load" in reasons[1].message


def test_a_long_failure_list_is_cut_and_counted():
    failures = [fail(f"json#{i} (t{i})", "HTTP 503") for i in range(1, 8)]
    after = {"json": SuiteGate(passed=17, total=24, failures=failures)}
    _, reasons = decide(RunFacts(load=load(), gates={"before": clean_gates(), "after": after}))
    msg = next(r.message for r in reasons if r.code == "gate_failed")
    assert "json#3 (t3)" in msg and "json#4 (t4)" not in msg and "+4 more" in msg


def test_a_canary_failure_fails_the_run_and_says_when():
    canary = {
        "json": SuiteGate(
            passed=5, total=6, rounds=3, failures=[fail("json#5 (x)", "HTTP 500", round=2, t_s=612)]
        )
    }
    status, reasons = decide(
        RunFacts(
            load=load(), gates={"before": clean_gates(), "canary": canary, "after": clean_gates()}
        )
    )
    assert status is Status.FAILED
    assert reasons[0].message == (
        "canary (during load) json 5/6: json#5 (x) round 2 at 612 s HTTP 500 (availability)"
    )


def test_a_probe_that_passed_only_on_retry_passes_with_a_note():
    after = clean_gates() | {
        "json": SuiteGate(
            passed=24, total=24, passed_on_retry=[fail("json#2 (a)", "HTTP 503", attempts=2)]
        )
    }
    status, reasons = decide(RunFacts(load=load(), gates={"before": clean_gates(), "after": after}))
    assert status is Status.PASSED
    retry = next(r for r in reasons if r.code == "gate_passed_on_retry")
    assert retry.effect == "note" and "after 1 retries; first attempt: HTTP 503" in retry.message


def test_configured_gates_that_did_not_run_are_said():
    _, reasons = decide(
        RunFacts(load=load(), gates={"before": clean_gates()}, gates_configured=["json", "tools"])
    )
    assert ("gates_not_run", "the after-load gates did not run") in [
        (r.code, r.message) for r in reasons
    ]


def test_force_load_is_recorded_beside_the_failed_before_gate():
    before = {"tools": SuiteGate(passed=7, total=8, failures=[fail("tools#2 (c)", "bad")])}
    status, reasons = decide(
        RunFacts(load=load(), gates={"before": before, "after": clean_gates()}, force_load=True)
    )
    assert status is Status.FAILED
    assert {"gate_failed", "force_load"} <= {r.code for r in reasons}


def test_an_abort_outranks_a_failed_gate_and_keeps_it():
    after = {"json": SuiteGate(passed=23, total=24, failures=[fail("json#1 (a)", "HTTP 500")])}
    status, reasons = decide(
        RunFacts(load=load(), aborted="SIGINT during after_gates", gates={"after": after})
    )
    assert status is Status.ABORTED
    assert [r.code for r in reasons][:2] == ["aborted", "gate_failed"]
