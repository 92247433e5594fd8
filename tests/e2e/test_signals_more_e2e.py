"""Signals the operator sends, as the README states them: a stop during the before-load
gates ends that phase promptly, and SIGHUP detaches ``run`` but stops the demo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from soak.cli.demo import simulated_engine
from tests.e2e.conftest import journal, record, run_args, run_soaktop, soaktop, wait_for_phase

pytestmark = pytest.mark.e2e


def test_one_sigint_during_the_before_gates_ends_them_promptly_and_runs_no_load(tmp_path):
    """A slow engine makes the before gates take minutes; one Ctrl-C ends them within the
    stop grace (5 s), counts the unsent tasks as not run and writes an ABORTED record."""
    slow = ["--decode-ms-base", "400", "--max-num-seqs", "8"]
    with simulated_engine(replicas=1, gpus_per_replica=1, extra_args=slow) as sim:
        out = tmp_path / "runs"
        p = soaktop(*run_args(sim, out, "--gates", "json,tools", "--duration", "5"))
        try:
            run_dir = wait_for_phase(out, "before_gates")
            time.sleep(1.5)  # probes are on the wire (each takes many seconds here)
            t0 = time.monotonic()
            p.send_signal(signal.SIGINT)
            text, _ = p.communicate(timeout=60)
            took = time.monotonic() - t0
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == 4, text
    assert took < 15, f"the stop took {took:.1f} s"
    rec = record(run_dir)
    assert rec["status"] == "ABORTED"
    assert rec["reasons"][0]["message"].startswith("SIGINT during before_gates"), rec["reasons"]
    before = rec["gates"]["before"]
    assert before["json"]["total"] == 24 and before["tools"]["total"] == 8
    not_run = before["json"]["not_run"] + before["tools"]["not_run"]
    assert not_run > 0 and before["json"]["not_run"] == 24 - len(
        [r for r in journal(run_dir, "probes.jsonl") if r["suite"] == "json"]
    )
    assert any(r["code"] == "gate_cut_short" for r in rec["reasons"]), rec["reasons"]
    assert "after" not in rec["gates"]
    assert not (rec.get("load") or {}).get("barrier_released")  # no load ran
    assert not any(r["phase"] == "load" for r in journal(run_dir))
    events = [e["message"] for e in journal(run_dir, "events.jsonl") if e["kind"] == "gate"]
    assert any("before-load gates cut short by a stop" in m for m in events), events
    assert run_soaktop("verify", str(run_dir))[0] == 0


def test_sighup_to_the_demo_stops_the_run_and_leaves_nothing_behind(tmp_path):
    """The demo's engine dies with its terminal, so a hang-up is a graceful stop (not a
    detach): drain, record, the engine's logs kept, its temp dir removed."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "runs"
    env = os.environ | {"PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp)}
    env.pop("SOAKTOP_KEEP_SIM_DIR", None)
    p = subprocess.Popen(
        [sys.executable, "-m", "soak", "demo", "--headless", "--duration", "60",
         "--concurrency", "4", "--max-tokens", "16", "--no-gates", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        run_dir = wait_for_phase(out, "load", timeout=60)
        time.sleep(1.0)
        p.send_signal(signal.SIGHUP)
        text, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 4, text
    assert "SIGHUP → stopping the run" in text
    rec = record(run_dir)
    assert rec["status"] == "ABORTED"
    assert rec["reasons"][0]["message"].startswith("SIGHUP during load"), rec["reasons"]
    assert rec["load"]["issue_s"] < 30
    assert (run_dir / "server_logs" / "replica0.log").exists()
    assert list(tmp.iterdir()) == []
