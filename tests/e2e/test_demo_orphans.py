"""``kill -9`` of ``soaktop demo`` leaves nothing behind: no engine, no temp dir, a record.

The demo starts two processes (the simulated engine and the runner, each in its own
session so a terminal's Ctrl-C is the CLI's to handle). Both hold the read end of a pipe
whose write end only the demo holds: when the kernel closes it, the engine stops and
removes its temporary directory, and the runner aborts and writes an ABORTED record.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import record, run_soaktop, wait_for_phase

pytestmark = pytest.mark.e2e


def _children(pid: int, timeout: float = 30) -> tuple[psutil.Process, psutil.Process]:
    """The demo's own simulated engine and runner (never another test's processes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        kids = psutil.Process(pid).children(recursive=True)
        sims = [k for k in kids if "simengine" in " ".join(k.cmdline())]
        runners = [k for k in kids if "soak.run.runner" in " ".join(k.cmdline())]
        if sims and runners:
            return sims[0], runners[0]
        time.sleep(0.1)
    raise AssertionError("the demo's engine and runner did not both start")


def _gone(proc: psutil.Process, timeout: float) -> bool:
    try:
        proc.wait(timeout)
    except psutil.TimeoutExpired:
        return False
    return True


def test_kill_9_of_the_demo_takes_its_engine_and_runner_along_and_leaves_a_record(tmp_path):
    tmp = tmp_path / "tmp"  # the demo's temp dir lands here, so the test sees only its own
    tmp.mkdir()
    out = tmp_path / "runs"
    env = os.environ | {"PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp)}
    env.pop("SOAKTOP_KEEP_SIM_DIR", None)
    demo = subprocess.Popen(
        [sys.executable, "-m", "soak", "demo", "--headless", "--duration", "60",
         "--concurrency", "4", "--max-tokens", "16", "--no-gates", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )  # fmt: skip
    try:
        sim, runner = _children(demo.pid)
        (sim_dir,) = list(tmp.iterdir())
        assert sim_dir.name.startswith("soaktop-sim-")
        run_dir = wait_for_phase(out, "load", timeout=60)
        time.sleep(1.0)  # some requests finish
        os.kill(demo.pid, signal.SIGKILL)
        demo.wait(10)
        # the runner aborts at once; the engine serves its grace (3 s) first, then stops
        assert _gone(runner, 20), "the runner outlived the demo"
        assert _gone(sim, 10), "the simulated engine outlived the demo"
        assert not sim_dir.exists(), list(sim_dir.iterdir())
        assert list(tmp.iterdir()) == []
    finally:
        if demo.poll() is None:
            demo.kill()
    rec = record(run_dir)
    assert rec["status"] == "ABORTED" and rec["exit_code"] == 4
    first = rec["reasons"][0]["message"]
    assert first.startswith("the soaktop demo that started this run ended"), first
    # the runner stopped before its engine did: nothing blames the server
    assert [r for r in rec["reasons"] if r["effect"] == "failed"] == [], rec["reasons"]
    assert rec["load"]["issue_s"] < 30  # cut at once, not run on against a dead engine
    # the demo never copied its engine's logs: its end took them along
    assert not (run_dir / "server_logs").exists()
    rc, text = run_soaktop("verify", str(run_dir))
    assert rc == 0, text


def test_the_simulated_engine_stops_when_its_parent_pipe_closes(tmp_path):
    """``--parent-fd``: end-of-file on the parent's pipe stops the engine, which then
    removes its ``--log-dir`` (``--remove-log-dir``)."""
    r, w = os.pipe()
    log_dir = tmp_path / "sim"
    ready = log_dir / "ready.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "simengine", "--replicas", "1", "--gpus-per-replica", "1",
         "--log-dir", str(log_dir), "--ready-file", str(ready), "--parent-fd", str(r),
         "--remove-log-dir"],
        pass_fds=(r,),
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(r)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "engine did not start"
            time.sleep(0.05)
        time.sleep(0.5)
        assert proc.poll() is None  # an open pipe keeps it serving
        os.close(w)
        assert proc.wait(5) == 0
        assert not log_dir.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_bad_parent_fd_is_a_usage_error(tmp_path):
    p = subprocess.run(
        [sys.executable, "-m", "simengine", "--parent-fd", "987"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 2
    assert "--parent-fd 987: not an open file descriptor" in p.stderr


def test_the_demo_temp_dir_is_gone_after_a_normal_run(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = os.environ | {"TMPDIR": str(tmp)}
    env.pop("SOAKTOP_KEEP_SIM_DIR", None)
    p = subprocess.run(
        [sys.executable, "-m", "soak", "demo", "--headless", "--duration", "2",
         "--concurrency", "2", "--max-tokens", "8", "--no-gates", "--out",
         str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert list(tmp.iterdir()) == []
    (run_dir,) = list((tmp_path / "runs").iterdir())
    assert sorted(f.name for f in (run_dir / "server_logs").iterdir()) == [
        "replica0.log",
        "replica1.log",
    ]


def test_a_runner_still_going_when_the_engine_block_ends_aborts_before_the_engine_stops(
    tmp_path,
):
    """The monitor's hang-up path: the demo leaves its engine block while its runner
    still runs. The runner is told first (the lifeline closes) and writes its record while
    the engine still serves, so nothing in it blames the server."""
    from soak.cli.demo import simulated_engine
    from soak.run.config_load import load_config
    from soak.run.spawn import start_runner

    out = tmp_path / "runs"
    with simulated_engine(
        replicas=1, gpus_per_replica=1, extra_args=["--decode-ms-base", "5"]
    ) as sim:
        cfg = load_config(
            {"endpoints": sim.urls, "model": sim.model, "duration_s": 60.0, "concurrency": 2,
             "max_tokens": 8, "gates": [], "nvml": False, "out": str(out), "headless": True},
            environ={},
        )  # fmt: skip
        handle = start_runner(cfg)
        wait_for_phase(out, "load", timeout=60)
        time.sleep(1.0)
        t0 = time.monotonic()
    assert handle.poll() is not None, "the block ended before its runner did"
    assert time.monotonic() - t0 < 30
    rec = record(handle.run_dir)
    assert rec["status"] == "ABORTED" and rec["load"]["completed"] > 0
    assert rec["reasons"][0]["message"].startswith("the soaktop demo that started this run")
    assert [r for r in rec["reasons"] if r["effect"] == "failed"] == [], rec["reasons"]
