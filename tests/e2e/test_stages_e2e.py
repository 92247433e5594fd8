"""Stages and live changes against the simulated engine (issue 16 §1 stages, §3, §5): one
LoadStep per step with its own figures, verify recomputes every step (and catches a
tampered one), recover rebuilds the steps from the events, and a live ``set`` mid-run
makes a new step."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from soak.cli.demo import SimHandle
from soak.run.control import send_control
from tests.e2e.conftest import (
    CLIENT_LAG,
    journal,
    only_run_dir,
    record,
    run_args,
    run_soaktop,
    soaktop,
    wait_for_phase,
)

pytestmark = pytest.mark.e2e


def _run(sim: SimHandle, tmp_path: Path, *flags: str) -> tuple[int, str, Path]:
    out = tmp_path / "runs"
    rc, text = run_soaktop(*run_args(sim, out, "--max-tokens", "8", *flags), timeout=120)
    return rc, text, only_run_dir(out)


def _invalid(rec: dict[str, Any]) -> set[str]:
    return {r["code"] for r in rec["reasons"] if r["effect"] == "invalid"}


def test_closed_loop_stages_record_one_step_each_and_verify_recomputes_them(sim, tmp_path):
    rc, text, run_dir = _run(sim, tmp_path, "--stages", "0s:1,3s:1,3s:4,1s:4")
    rec = record(run_dir)
    steps = rec["steps"]
    # The 0 s stage is a jump to 1 worker, not a step of no time (no figures to show).
    assert [s["label"] for s in steps] == [
        "stage 2: 1 → 1 workers over 3 s",
        "stage 3: 1 → 4 workers over 3 s",
        "stage 4: 4 → 4 workers over 1 s",
    ]
    assert rec["load"]["requested_concurrency"] == 4 and rec["config"]["duration_s"] == 7
    lines = [ln for ln in journal(run_dir) if ln["phase"] == "load"]
    # Every request carries its step; in the one-worker stage only worker 0 sent.
    assert {ln["step"] for ln in lines} == {0, 1, 2}
    assert {ln["worker"] for ln in lines if ln["step"] == 0} == {0}
    # The ramp adds worker n when its line reaches n (k6's ramping): the 4th at its end.
    assert {ln["worker"] for ln in lines if ln["step"] == 1} == {0, 1, 2}
    assert {ln["worker"] for ln in lines if ln["step"] == 2} == {0, 1, 2, 3}
    one, ramp = steps[0]["load"], steps[1]["load"]
    assert one["completed"] == sum(1 for ln in lines if ln["step"] == 0 and ln["ok"])
    assert ramp["requests_per_s"] > 1.5 * one["requests_per_s"], text
    # Parked workers are the plan, not a client that fell short of its concurrency.
    assert rec["client_health"]["in_flight_short_s"] < 1.0
    assert (rec["status"], rc) == ("PASSED", 0) or _invalid(rec) <= CLIENT_LAG, rec["reasons"]
    assert "stage 3: 1 → 4 workers" in text and "goodput req/s" in text
    rc_verify, words = run_soaktop("verify", str(run_dir))
    assert rc_verify == 0, words

    steps[1]["load"]["completed"] += 1  # a hand edit of one step's figure
    (run_dir / "record.json").write_bytes(orjson.dumps(rec))
    rc_verify, words = run_soaktop("verify", str(run_dir))
    assert rc_verify == 1 and "record.steps[1].load.completed" in words, words


def test_open_loop_stages_ramp_the_rate_and_each_step_holds_its_schedule(sim, tmp_path):
    _rc, text, run_dir = _run(
        sim, tmp_path, "--arrival", "constant", "--stages", "2s:20rps,3s:20rps"
    )
    rec = record(run_dir)
    ramp, hold = (s["load"] for s in rec["steps"])
    # The ramp from 0 to 20 req/s over 2 s offers 20 arrivals; the hold 20 a second.
    assert ramp["offered_rate"] == pytest.approx(10.0, rel=0.1)
    assert hold["offered_rate"] == pytest.approx(20.0, rel=0.05)
    for step in (ramp, hold):
        assert step["achieved_rate"] == pytest.approx(step["offered_rate"], rel=0.05), text
    assert rec["config"]["rate"] == 20 and "rate_not_achieved" not in _invalid(rec)
    assert rc_verify_ok(run_dir)


def rc_verify_ok(run_dir: Path) -> bool:
    rc, words = run_soaktop("verify", str(run_dir))
    assert rc == 0, words
    return True


def test_a_live_set_mid_run_makes_a_new_step_and_a_bad_one_is_refused(sim, tmp_path):
    out = tmp_path / "runs"
    p = soaktop(*run_args(sim, out, "--max-tokens", "8", "--concurrency", "2", "--duration", "5"))
    try:
        run_dir = wait_for_phase(out, "load")
        time.sleep(1.5)
        send_control(run_dir, "set", note="scout", concurrency=5)
        send_control(run_dir, "set", rate=30)  # a closed loop has no rate
        text, _ = p.communicate(timeout=60)
    finally:
        p.kill()
    rec = record(run_dir)
    start, live = rec["steps"]
    assert (start["origin"], start["label"]) == ("live", "start: concurrency 2")
    assert (live["origin"], live["label"]) == ("live", "live: concurrency 5 (scout)")
    assert live["start_s"] == start["end_s"] and live["concurrency_end"] == 5
    assert live["load"]["requests_per_s"] > 1.5 * start["load"]["requests_per_s"], text
    assert rec["load"]["workers_started"] == 5
    controls = [ev["message"] for ev in journal(run_dir, "events.jsonl") if ev["kind"] == "control"]
    assert "operator set concurrency 5 (scout)" in controls
    assert any("set ignored: this load is closed loop" in m for m in controls), controls
    assert rc_verify_ok(run_dir)


@pytest.mark.parametrize(
    "flags",
    [
        ("--stages", "0s:2,2s:2,2s:3"),
        ("--arrival", "constant", "--stages", "0s:10rps,2s:10rps,2s:20rps"),
    ],
    ids=["closed", "open"],
)
def test_recover_rebuilds_the_steps_from_the_events(sim, tmp_path, flags):
    _, _, run_dir = _run(sim, tmp_path, *flags)
    before = record(run_dir)
    (run_dir / "record.json").unlink()
    rc, words = run_soaktop("recover", str(run_dir))
    assert rc in (0, 1, 2, 3), words
    after = record(run_dir)
    assert [s["label"] for s in after["steps"]] == [s["label"] for s in before["steps"]]
    assert [s["load"]["completed"] for s in after["steps"]] == [
        s["load"]["completed"] for s in before["steps"]
    ]
    # An open loop's steps are offered what the runner offered them (the curve redrawn;
    # the spans from the events' times, rounded as the journal keeps them); the cap's
    # holds only the live run counted.
    offers = [s["load"].get("offered_rate") for s in after["steps"]]
    expected = [s["load"].get("offered_rate") for s in before["steps"]]
    assert offers == pytest.approx(expected, rel=1e-3)
    if "--arrival" in flags:
        assert all(o is not None for o in offers)
        assert all(s["load"]["held_by_cap"] is None for s in after["steps"])
    assert rc_verify_ok(run_dir)
