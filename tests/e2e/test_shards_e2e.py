"""``--shards N``: one closed loop over N load processes, one merged record (issue 17 §1)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.conftest import (
    journal,
    only_run_dir,
    record,
    run_args,
    run_soaktop,
    soaktop,
    wait_for_phase,
)

pytestmark = pytest.mark.e2e

LAG_ONLY = {"client_overloaded", "client_cpu_overloaded", "client_behind", "in_flight_short"}
"""Reasons a busy 2-core test machine may add to a healthy run: the client's own health."""


def _load_lines(run_dir: Path) -> list[dict[str, Any]]:
    return [line for line in journal(run_dir) if line["phase"] == "load"]


def test_two_shards_merge_into_one_verified_record(sim, tmp_path, monkeypatch):
    out = tmp_path / "runs"
    args = run_args(sim, out, "--shards", "2", "--concurrency", "8", "--duration", "3")
    rc, text = run_soaktop(*args, "--max-tokens", "16", timeout=90)
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    codes = {r["code"] for r in rec["reasons"] if r["effect"] != "note"}
    assert rec["status"] == "PASSED" or codes <= LAG_ONLY, (rec["reasons"], text)
    assert rc == (0 if rec["status"] == "PASSED" else 3), text
    shards = rec["shards"]
    assert [s["index"] for s in shards] == [0, 1]
    assert [s["workers"] for s in shards] == [4, 4]
    assert all(s["status"] == "done" and s["exit_code"] == 0 for s in shards), shards
    load = rec["load"]
    assert load["workers_started"] == 8 and load["barrier_released"]
    assert sum(s["requests"] for s in shards) == load["completed"] + load["failed"] > 16
    lines = _load_lines(run_dir)
    assert sorted({line["worker"] for line in lines}) == list(range(8))
    # Worker i*2+k is shard k's: each worker's requests all came from one shard.
    assert all(line["shard"] == line["worker"] % 2 for line in lines)
    ids = [line["id"] for line in lines]
    assert len(ids) == len(set(ids))
    assert {line["shard"] for line in lines} == {0, 1}
    assert all(abs(s["release_offset_s"]) < 0.5 for s in shards), shards
    assert run_soaktop("verify", str(run_dir))[0] == 0
    # verify and recover read the journal in byte ranges, by forked readers, as they read
    # a 1-hour run's gigabyte: the same verdict, and the same record, as one read.
    monkeypatch.setenv("SOAKTOP_READERS", "3")
    assert run_soaktop("verify", str(run_dir)) == run_soaktop("verify", str(run_dir))
    rc, said = run_soaktop("verify", str(run_dir))
    assert rc == 0 and "OK" in said, said
    recovered = []
    for readers in ("1", "3"):
        copy = tmp_path / f"readers{readers}" / run_dir.name
        shutil.copytree(run_dir, copy)
        (copy / "record.json").unlink()
        monkeypatch.setenv("SOAKTOP_READERS", readers)
        rc, said = run_soaktop("recover", str(copy))
        assert "wrote" in said, said
        recovered.append(json.loads((copy / "record.json").read_text()))
    assert recovered[0] == recovered[1]  # ended_at too: when the journals end, not "now"
    assert recovered[0]["load"]["completed"] == load["completed"]


def _is_shard(p: psutil.Process) -> bool:
    """A shard process (a child that is exiting, a zombie, is not one to wait for)."""
    try:
        return "soak.run.shard_main" in " ".join(p.cmdline())
    except psutil.Error:
        return False


def _shard_pids(runner_pid: int, timeout: float = 30) -> list[int]:
    """The runner's shard children (``python -m soak.run.shard_main``), once both run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shards = [p.pid for p in psutil.Process(runner_pid).children() if _is_shard(p)]
        if len(shards) == 2:
            return shards
        time.sleep(0.1)
    raise AssertionError("the shards never started")


def _runner_pid(out: Path, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = list(out.glob("*/runner.pid"))
        if pids and (text := pids[0].read_text().strip()):
            return int(text)
        time.sleep(0.05)
    raise AssertionError("no runner started")


def _in_load(run_dir: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.get("kind") == "phase" and e["data"].get("phase") == "load"
               for e in journal(run_dir, "events.jsonl")):  # fmt: skip
            return
        time.sleep(0.05)
    raise AssertionError("the load never began")


def test_a_killed_shard_makes_the_run_invalid_and_names_it(sim, tmp_path):
    out = tmp_path / "runs"
    args = run_args(sim, out, "--shards", "2", "--concurrency", "8", "--duration", "6")
    p = soaktop(*args, "--max-tokens", "64")
    try:
        runner = _runner_pid(out)
        run_dir = only_run_dir(out)
        shards = _shard_pids(runner)
        _in_load(run_dir)
        time.sleep(1.0)
        # The shard with the higher pid is shard 1 (they start in index order).
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
    lost = [r for r in rec["reasons"] if r["code"] == "shard_lost"]
    index = started[victim]
    assert (
        len(lost) == 1
        and f"shard {index} (the {index + 1}{'st' if index == 0 else 'nd'} of 2) lost (exit -9)"
        in lost[0]["message"]
    ), lost
    assert "not in the journal" in lost[0]["message"]
    gone = rec["shards"][index]
    assert gone["status"] == "lost" and gone["exit_code"] == -9
    other = rec["shards"][1 - index]
    assert other["status"] == "done" and other["requests"] > 0
    # The other shard drained: stopped gracefully, nothing of it cut.
    assert not any(line["cancelled"] for line in journal(run_dir) if line["shard"] != index)
    assert run_soaktop("verify", str(run_dir))[0] == 0


def test_an_open_loop_cap_too_small_to_split_is_refused_in_words(sim, tmp_path):
    out = tmp_path / "runs"
    args = run_args(sim, out, "--shards", "2", "--arrival", "poisson", "--rate", "5")
    rc, text = run_soaktop(*args, "--max-in-flight", "1", "--duration", "2", timeout=60)
    assert rc == 2, text
    assert "max_in_flight = 1 gives a shard no request slot" in text
    assert not out.exists() or not any(out.iterdir())


def test_a_live_concurrency_raise_reaches_every_shard(sim, tmp_path):
    out = tmp_path / "runs"
    flags = ("--shards", "2", "--concurrency", "4", "--duration", "5", "--max-tokens", "16")
    p = soaktop(*run_args(sim, out, *flags))
    try:
        run_dir = wait_for_phase(out, "load")
        time.sleep(1.5)
        rc, text = run_soaktop("control", str(run_dir), "--concurrency", "8")
        assert rc == 0, text
        text, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    rec = record(run_dir)
    assert [s["concurrency_start"] for s in rec.get("steps") or []] == [4, 8], text
    lines = _load_lines(run_dir)
    late = {line["worker"] for line in lines if line.get("step") == 1}
    assert late == set(range(8))  # the new workers 4..7: two in each shard
    assert all(line["shard"] == line["worker"] % 2 for line in lines)
    assert sum(s["requests"] for s in rec["shards"]) == len(journal(run_dir))
    rc, verify_text = run_soaktop("verify", str(run_dir))
    assert rc == 0, verify_text


def test_shards_do_not_outlive_a_killed_runner(sim, tmp_path):
    out = tmp_path / "runs"
    args = run_args(sim, out, "--shards", "2", "--concurrency", "4", "--duration", "30")
    p = soaktop(*args, "--max-tokens", "16")
    try:
        runner = _runner_pid(out)
        shards = _shard_pids(runner)
        _in_load(only_run_dir(out))
        time.sleep(2)  # requests finish and are journaled
        os.kill(runner, signal.SIGKILL)  # no graceful stop: the pipes close
        _, alive = psutil.wait_procs([psutil.Process(pid) for pid in shards], timeout=15)
        assert not alive, alive  # each shard read end of input, aborted and exited
    finally:
        p.kill()
        p.communicate(timeout=30)
    # The runner died before its record: recover rebuilds it from the one merged journal.
    run_dir = only_run_dir(out)
    rc, text = run_soaktop("recover", str(run_dir))
    assert rc in (0, 3), text  # the journals' verdict (a cut load may be INVALID)
    assert {line["shard"] for line in journal(run_dir)} == {0, 1}
    rc, text = run_soaktop("verify", str(run_dir))
    assert rc == 0, text


def test_max_requests_is_split_and_ends_the_window_for_all(sim, tmp_path):
    out = tmp_path / "runs"
    flags = ("--shards", "2", "--concurrency", "4", "--max-requests", "21", "--max-tokens", "8")
    rc, text = run_soaktop(*run_args(sim, out, *flags, "--duration", "60"), timeout=60)
    run_dir = only_run_dir(out)
    rec = record(run_dir)
    assert rc == 0 and rec["load"]["stop_reason"] == "request count reached", text
    numbers = sorted(int(line["id"].rsplit("/", 1)[1]) for line in _load_lines(run_dir))
    assert numbers == list(range(21))  # the single process's request numbers, once each
    assert [s["requests"] for s in rec["shards"]] == [11, 10]
    assert run_soaktop("verify", str(run_dir))[0] == 0


SECRET = "sk-shardtest-5f0c1e9a7b3d"
"""An API key no file of the run, no shard's argv and no shard's environment may hold."""


def test_the_api_key_reaches_the_shards_on_a_pipe_only(sim, tmp_path, monkeypatch):
    monkeypatch.setenv("SOAK_SHARD_TEST_KEY", SECRET)  # the runner reads it; shards must not
    out = tmp_path / "runs"
    flags = ("--shards", "2", "--concurrency", "4", "--duration", "3", "--max-tokens", "8")
    args = run_args(sim, out, *flags, "--api-key-env", "SOAK_SHARD_TEST_KEY")
    p = soaktop(*args)
    try:
        runner = _runner_pid(out)
        procs = [psutil.Process(pid) for pid in _shard_pids(runner)]
        seen = [(p.cmdline(), p.environ()) for p in procs]
        text, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    for argv, env in seen:
        assert not any(SECRET in a for a in argv), argv
        assert not any(SECRET in v for v in env.values()), "a shard's environment holds the key"
    run_dir = only_run_dir(out)
    assert record(run_dir)["shards"], text
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in text


@pytest.mark.parametrize("to_group", [False, True], ids=["runner", "process-group"])
def test_sigterm_stops_a_sharded_run_gracefully_with_every_shards_results(sim, tmp_path, to_group):
    # systemd's stop (and `kill -TERM -PGID`) sends SIGTERM to every process of the run:
    # a shard must leave its ending to the coordinator, not die of it and be "lost".
    out = tmp_path / "runs"
    flags = ("--shards", "2", "--concurrency", "4", "--duration", "30", "--max-tokens", "16")
    p = soaktop(*run_args(sim, out, *flags))
    try:
        runner = _runner_pid(out)
        _shard_pids(runner)
        run_dir = only_run_dir(out)
        _in_load(run_dir)
        time.sleep(1.5)
        if to_group:
            os.killpg(os.getpgid(runner), signal.SIGTERM)
        else:
            os.kill(runner, signal.SIGTERM)
        text, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    rec = record(run_dir)
    assert not any(r["code"] == "shard_lost" for r in rec["reasons"]), rec["reasons"]
    assert [s["status"] for s in rec["shards"]] == ["done", "done"], rec["shards"]
    assert all(s["requests"] > 0 for s in rec["shards"]), rec["shards"]
    assert sum(s["requests"] for s in rec["shards"]) == len(journal(run_dir)), text
    assert run_soaktop("verify", str(run_dir))[0] == 0


def test_each_shard_lets_its_workers_go_in_slices_and_says_so(sim, tmp_path):
    out = tmp_path / "runs"
    args = run_args(sim, out, "--shards", "2", "--concurrency", "260", "--duration", "2")
    run_soaktop(*args, "--max-tokens", "8", timeout=120)
    run_dir = only_run_dir(out)
    assert record(run_dir)["load"]["workers_started"] == 260
    said = {
        e["data"]["shard"]: e
        for e in journal(run_dir, "events.jsonl")
        if e["kind"] == "shard" and "let go" in e["message"]
    }
    assert sorted(said) == [0, 1], said
    for k, ev in said.items():  # 130 workers a shard: 64 + 64 + 2, one slice a loop turn
        assert ev["data"]["release_turns"] == 3 and ev["data"]["release_s"] > 0
        assert ev["message"].startswith(
            f"shard {k} (the {('1st', '2nd')[k]} of 2): 130 workers let go in 3 loop turns"
        )
