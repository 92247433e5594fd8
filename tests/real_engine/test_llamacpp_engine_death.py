"""A real llama-server dies under a soak: the record must say FAILED, with classified failures.

llama.cpp has no crash a client can trigger on purpose (vLLM's seeded burst, see
test_vllm_engine_death), so the server is killed with SIGKILL mid-load, as the OOM killer
would: streams in flight are cut, and every request after it is refused. soaktop must judge
it as it judges vLLM's death: FAILED for ``load_failures``, failure classes from the
engine-death set only, ``/health`` seen going from ok to refused, nothing sent after the
death completing, and no reconciliation claimed over the dead server's counters.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.e2e.conftest import journal, record, soaktop, wait_for_phase
from tests.real_engine.conftest import (
    EXIT,
    LLAMA_ARGS,
    assert_reasons_match_journal,
    require_llama_server,
    soak_args,
)
from tests.real_engine.llama_server import llama_server

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(300)]

DEATH_CLASSES = {"http_5xx", "connect_error", "stream_cut", "error_event"}


def test_engine_killed_mid_load(tmp_path):
    require_llama_server()
    out = tmp_path / "runs"
    with llama_server(tmp_path, LLAMA_ARGS) as srv:
        soak = soaktop(
            *soak_args(
                srv,
                out,
                *("--concurrency", "4", "--duration", "20"),
                *("--max-tokens", "64", "--ignore-eos"),
            )
        )
        try:
            run_dir = wait_for_phase(out, "load", timeout=60)
            time.sleep(4)  # let the soak complete some requests first
            os.kill(srv.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            assert srv.wait_exit(10) == -signal.SIGKILL
            text, _ = soak.communicate(timeout=180)
        finally:
            if soak.poll() is None:
                soak.kill()
                soak.wait(10)
    print(f"soak finished {time.monotonic() - killed_at:.1f} s after the kill")

    rc = soak.returncode
    rec = record(run_dir)
    lines = journal(run_dir)
    load = rec["load"]
    print(
        f"soak exit {rc}: failures_by_class={load['failures_by_class']} "
        f"completed={load['completed']} issued={load['issued']}"
    )
    assert_reasons_match_journal(rec, lines)
    assert rec["status"] == "FAILED" and rc == EXIT["FAILED"], (rc, rec["reasons"], text[-2000:])
    assert rec["reasons"][0]["code"] == "load_failures", rec["reasons"]
    assert load["completed"] > 0  # the soak ran before the engine died
    by_class = load["failures_by_class"]
    assert by_class and set(by_class) <= DEATH_CLASSES, by_class
    failed = [r for r in lines if not r["ok"] and not r["cancelled"]]
    assert all(r["detail"] for r in failed)
    # After the kill the port is closed: connections are refused...
    assert by_class.get("connect_error", 0) > 0, by_class
    gone_s = min(r["sent_s"] for r in failed if r["failure"] == "connect_error")
    # ... and nothing sent after the server went away completed.
    assert max(r["sent_s"] for r in lines if r["ok"]) < gone_s
    # soaktop saw it from the server's side too: /health from ok to refused
    events = journal(run_dir, "events.jsonl")
    health = [e for e in events if e["kind"] == "health"]
    assert health and "(was ok)" in health[0]["message"], health
    codes = {r["code"] for r in rec["reasons"]}
    assert "health_outage" in codes, rec["reasons"]
    # The dead server's counters cannot be read at the end: no match is claimed.
    assert rec["reconciliation"]["load"]["matched"] is not True, rec["reconciliation"]["load"]
