"""``--shards N`` with an open loop: one arrival schedule split over N load processes, one
merged record that holds what one process would have sent (issue 17 §1)."""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from loadgen.arrivals import RateCurve, arrival_offsets, curve_offsets
from loadgen.trace_source import on_target
from loadgen.traces import load_trace
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
from tests.e2e.test_shards_e2e import _in_load, _runner_pid, _shard_pids

pytestmark = pytest.mark.e2e

SEED = 7
LAG_ONLY = CLIENT_LAG | {"in_flight_short"}
"""What a busy 2-core test machine may add to a healthy run: the client's own health."""


def _load(run_dir: Path) -> list[dict[str, Any]]:
    lines = [line for line in journal(run_dir) if line["phase"] == "load"]
    return sorted(lines, key=_number)


def _number(line: dict[str, Any]) -> int:
    return int(line["id"].rsplit("/", 1)[1])


@pytest.mark.parametrize("model", ["poisson", "constant"])
def test_two_shards_send_one_schedule_and_merge_into_one_verified_record(sim, tmp_path, model):
    out = tmp_path / "runs"
    flags = ("--arrival", model, "--rate", "40", "--arrival-seed", str(SEED))
    args = run_args(sim, out, "--shards", "2", *flags, "--duration", "3", "--max-tokens", "16")
    rc, text = run_soaktop(*args, timeout=90)
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    codes = {r["code"] for r in rec["reasons"] if r["effect"] != "note"}
    assert rec["status"] == "PASSED" or codes <= LAG_ONLY, (rec["reasons"], text)
    assert rc == (0 if rec["status"] == "PASSED" else 3), text
    shards, load = rec["shards"], rec["load"]
    assert [s["index"] for s in shards] == [0, 1]
    assert all(s["status"] == "done" and s["exit_code"] == 0 for s in shards), shards
    lines = _load(run_dir)
    assert sum(s["requests"] for s in shards) == load["completed"] + load["failed"] == len(lines)
    # The arrivals one process would send: numbers 0..n-1, at the seeded schedule's
    # instants from one origin (the coordinator's release), arrival g from shard g % 2.
    assert [_number(line) for line in lines] == list(range(len(lines)))
    want = list(itertools.islice(arrival_offsets(model, 40.0, None, SEED), len(lines)))
    origin = lines[0]["intended_s"]  # arrival 0 is due at the origin itself
    for line, at in zip(lines, want, strict=True):
        assert line["intended_s"] - origin == pytest.approx(at, abs=2e-6), line
    assert all(line["shard"] == _number(line) % 2 for line in lines)
    # ... and no arrival of the schedule within the window was left out.
    after = next(itertools.islice(arrival_offsets(model, 40.0, None, SEED), len(lines), None))
    assert after >= 3.0 - 0.01
    assert load["held_by_cap"] == 0
    assert load["achieved_rate"] == pytest.approx(load["offered_rate"], rel=0.03), load
    late = sorted(line["sent_s"] - line["intended_s"] for line in lines)
    assert late[len(late) // 2] < 0.01, late  # the shards keep the schedule's time
    assert run_soaktop("verify", str(run_dir))[0] == 0


def test_the_cap_splits_over_the_shards_and_its_holds_add_up(sim, tmp_path):
    out = tmp_path / "runs"
    flags = ("--arrival", "constant", "--rate", "60", "--max-in-flight", "4")
    args = run_args(sim, out, "--shards", "2", *flags, "--duration", "3", "--max-tokens", "64")
    run_soaktop(*args, timeout=90)
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    lines = _load(run_dir)

    def peak(mine: list[dict[str, Any]]) -> int:
        moments = sorted([(ln["sent_s"], 1) for ln in mine] + [(ln["end_s"], -1) for ln in mine])
        level = top = 0
        for _, step in moments:
            level += step
            top = max(top, level)
        return top

    # Each shard holds its share of the cap (2 of 4); the run never has more than 4 out.
    assert [peak([ln for ln in lines if ln["shard"] == k]) for k in (0, 1)] == [2, 2]
    assert peak(lines) <= 4
    # The live figure is the merged requests' peak (their journal's), not the shards'
    # peaks summed (4 here, whether or not their peaks ever met).
    snaps = [sn for sn in journal(run_dir, "snapshots.jsonl") if sn.get("open_loop")]
    assert snaps[-1]["open_loop"]["in_flight_peak"] == peak(lines), snaps[-1]["open_loop"]
    # 60 req/s of ~0.35 s streams need ~21 slots: most arrivals found their shard's full.
    assert rec["load"]["held_by_cap"] > len(lines) // 2, rec["load"]
    assert rec["load"]["achieved_rate"] < 0.8 * rec["load"]["offered_rate"]


def test_a_live_rate_change_and_a_pause_reach_every_shard(sim, tmp_path):
    out = tmp_path / "runs"
    flags = ("--arrival", "constant", "--rate", "10", "--max-tokens", "16")
    p = soaktop(*run_args(sim, out, "--shards", "2", *flags, "--duration", "7"))
    try:
        run_dir = wait_for_phase(out, "load")
        time.sleep(1.0)
        send_control(run_dir, "set", rate=50)
        time.sleep(2.0)
        send_control(run_dir, "pause")
        time.sleep(1.5)
        send_control(run_dir, "resume")
        text, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    lines = _load(run_dir)
    sent = sorted((ln["intended_s"], ln["shard"]) for ln in lines)
    gaps = [(b[0] - a[0], a[0]) for a, b in itertools.pairwise(sent)]
    # After the change, one schedule at 50/s: arrivals 20 ms apart, taken in turn. The
    # change holds from one instant a little ahead (soak.run.shards_open.RATE_LEAD_S),
    # which reaches both shards before it: only the gap across that instant is odd.
    fast = [g for g, _ in gaps if g < 0.03]
    odd = [g for g in fast[1:] if g != pytest.approx(0.02, abs=1e-4)]
    assert len(fast) > 40 and not odd, (odd, fast[:3], text)
    # The pause: one gap of about its length, and both shards issuing after it.
    pause_gap, paused_at = max(gaps)
    assert pause_gap > 0.8, gaps
    assert {k for t, k in sent if t > paused_at + pause_gap - 1e-9} == {0, 1}
    rec = record(run_dir)
    assert rec["load"]["achieved_rate"] == pytest.approx(rec["load"]["offered_rate"], rel=0.05)
    assert run_soaktop("verify", str(run_dir))[0] == 0


def test_a_killed_shard_of_an_open_loop_makes_the_run_invalid_and_names_it(sim, tmp_path):
    out = tmp_path / "runs"
    flags = ("--arrival", "poisson", "--rate", "30", "--max-tokens", "64")
    p = soaktop(*run_args(sim, out, "--shards", "2", *flags, "--duration", "6"))
    try:
        runner = _runner_pid(out)
        run_dir = only_run_dir(out)
        shards = _shard_pids(runner)
        _in_load(run_dir)
        time.sleep(1.0)
        events = journal(run_dir, "events.jsonl")
        started = {e["data"]["pid"]: e["data"]["shard"] for e in events if e["kind"] == "shard"}
        victim = max(shards)
        os.kill(victim, signal.SIGKILL)
        text, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, text
    rec = record(run_dir)
    assert rec["status"] == "INVALID"
    index = started[victim]
    lost = [r for r in rec["reasons"] if r["code"] == "shard_lost"]
    assert len(lost) == 1 and f"shard {index} " in lost[0]["message"], lost
    assert rec["shards"][index]["status"] == "lost"
    other = rec["shards"][1 - index]
    assert other["status"] == "done" and other["requests"] > 0
    assert not any(ln["cancelled"] for ln in journal(run_dir) if ln["shard"] != index)
    assert run_soaktop("verify", str(run_dir))[0] == 0


def test_open_loop_stages_follow_one_curve_across_the_shards(sim, tmp_path):
    out = tmp_path / "runs"
    flags = ("--arrival", "constant", "--stages", "2s:20rps,3s:20rps", "--max-tokens", "8")
    rc, text = run_soaktop(*run_args(sim, out, "--shards", "2", *flags), timeout=90)
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    ramp, hold = (s["load"] for s in rec["steps"])
    # As one process's (test_stages_e2e): the ramp offers 20 arrivals over 2 s, the hold 20/s.
    assert ramp["offered_rate"] == pytest.approx(10.0, rel=0.1)
    assert hold["offered_rate"] == pytest.approx(20.0, rel=0.05)
    for step in (ramp, hold):
        assert step["achieved_rate"] == pytest.approx(step["offered_rate"], rel=0.05), text
    # The curve's instants, one schedule, from both shards in turn.
    curve = RateCurve([(0.0, 0.0), (2.0, 20.0), (5.0, 20.0)])
    lines = _load(run_dir)
    want = list(itertools.islice(curve_offsets("constant", curve, None, 0), len(lines)))
    origin = rec["load"]["issue_start_s"]
    got = [line["intended_s"] - origin for line in lines]
    assert got == pytest.approx(want, abs=2e-6)
    assert {line["shard"] for line in lines} == {0, 1}
    assert run_soaktop("verify", str(run_dir))[0] == 0, rc


def test_a_rate_sweep_steps_every_shard_at_once(sim, tmp_path):
    out = tmp_path / "runs"
    flags = ("--arrival", "constant", "--sweep", "rate=5,40", "--step-duration", "3")
    args = run_args(sim, out, "--shards", "2", *flags, "--settle", "0.5", "--max-tokens", "8")
    rc, text = run_soaktop(*args, timeout=90)
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    low, high = (s["load"] for s in rec["steps"])
    assert low["offered_rate"] == pytest.approx(5.0, rel=0.1), text
    assert high["offered_rate"] == pytest.approx(40.0, rel=0.05), text
    for step in (low, high):
        assert step["achieved_rate"] == pytest.approx(step["offered_rate"], rel=0.05), text
    lines = _load(run_dir)
    assert [_number(line) for line in lines] == list(range(len(lines)))
    assert {line["shard"] for line in lines if line["step"] == 1} == {0, 1}
    assert run_soaktop("verify", str(run_dir))[0] == 0, rc


def test_a_trace_replay_splits_by_arrival_and_sends_each_line_once(sim, tmp_path):
    path = Path(__file__).resolve().parents[2] / "samples" / "traces" / "mooncake_sample.jsonl"
    trace = load_trace(path)
    out = tmp_path / "runs"
    flags = ("--arrival", f"trace:{path}", "--time-scale", "4", "--ignore-eos")
    rc, text = run_soaktop(*run_args(sim, out, "--shards", "2", *flags), timeout=120)
    run_dir = only_run_dir(out)
    rec, lines = record(run_dir), _load(run_dir)
    codes = {r["code"] for r in rec["reasons"] if r["effect"] != "note"}
    assert rec["status"] == "PASSED" or codes <= LAG_ONLY, (rec["reasons"], text)
    load = rec["load"]
    assert load["stop_reason"] == "trace replayed"  # both shards replayed their share
    assert [s["requests"] for s in rec["shards"]] == [len(trace.arrivals[k::2]) for k in (0, 1)]
    # Arrival k sends the trace's line k at its time, from shard k % 2, as one process.
    assert [line["prompt"] for line in lines] == list(range(len(trace.arrivals)))
    for line, arrival in zip(lines, trace.arrivals, strict=True):
        at = line["intended_s"] - load["issue_start_s"]
        assert at == pytest.approx(arrival.offset_s / 4, abs=2e-6)
        assert line["shard"] == line["prompt"] % 2
        assert line["output_tokens"] == arrival.output_tokens  # ignore_eos: all generated
        assert on_target(arrival.input_tokens, line["prompt_tokens"]), line
    assert load["offered_rate"] == pytest.approx(load["achieved_rate"], rel=0.05)
    assert run_soaktop("verify", str(run_dir))[0] == 0, rc
