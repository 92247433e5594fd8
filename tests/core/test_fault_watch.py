"""The fault watch: server-log lines become fault events and verdict reasons."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from soak.judge.faults import fault_reasons
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter, read_jsonl
from soak.watch.health import FaultWatch

FATAL = (
    "(EngineCore_DP0 pid=41) ERROR 11-30 03:10:43 [core.py:710] "
    "EngineCore encountered a fatal error. /home/alice/models/llama-70b on gpu-node-17"
)


async def _watch(tmp_path: Path, keep_lines: bool) -> tuple[FaultWatch, list[dict[str, Any]]]:
    log = tmp_path / "server.log"
    log.write_text("INFO before the run: not read\n")
    origin = time.perf_counter_ns()
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), origin)
    watch = FaultWatch([], {}, events, lambda: 1.5, log_files=[log], keep_lines=keep_lines)
    await watch.start()
    with log.open("a") as fh:
        fh.write('INFO 127.0.0.1 - "POST /v1/chat/completions HTTP/1.1" 500\n')
        fh.write(FATAL + "\n")
        fh.write("(EngineCore_DP0 pid=41) ERROR [core.py:711] Traceback (most recent call last):\n")
    await watch.tick()
    await watch.stop()
    return watch, list(read_jsonl(tmp_path / "events.jsonl"))


async def test_fault_lines_become_events_and_fail_the_run(tmp_path):
    watch, events = await _watch(tmp_path, keep_lines=True)
    faults = [e for e in events if e["kind"] == "fault"]
    assert [e["data"]["fault"] for e in faults] == ["engine_dead", "traceback"]
    assert faults[0]["severity"] == "critical" and faults[0]["data"]["line"] == FATAL
    (src,) = watch.summary()["server_logs"]
    assert src["faults"] == {"engine_dead": 1, "traceback": 1} and src["lines"] == 3
    reasons = {r.code: r for r in fault_reasons(watch.summary())}
    assert reasons["server_fault"].effect == "failed"
    assert "engine core hit a fatal error at 1.5 s: " in reasons["server_fault"].message
    # with a load that began at 0.5 s, the time is the load's
    (relative, _) = fault_reasons(watch.summary(), load_start_s=0.5)
    assert "engine core hit a fatal error at load+00:00:01: " in relative.message
    assert reasons["server_log_error"].effect == "note"  # a traceback alone is not a fault


async def test_with_redact_the_raw_line_is_not_written(tmp_path):
    watch, events = await _watch(tmp_path, keep_lines=False)
    text = (tmp_path / "events.jsonl").read_text() + str(watch.summary())
    assert "alice" not in text and "gpu-node-17" not in text
    faults = [e for e in events if e["kind"] == "fault"]
    assert faults[0]["message"] == "server log 0: engine core hit a fatal error"
    assert faults[0]["data"]["line"] == "<line not kept: --redact>"


def test_a_slow_health_is_a_note_and_a_refused_one_fails():
    telemetry = {
        "health": [
            {"endpoint": 0, "checks": 60, "failures": 2, "failures_by_kind": {"timeout": 2}},
            {
                "endpoint": 1,
                "checks": 60,
                "failures": 9,
                "failures_by_kind": {"HTTP 503": 2, "connection refused": 7},
                "longest_outage_s": 8.0,
            },
        ]
    }
    slow, down = fault_reasons(telemetry)
    assert (slow.code, slow.effect) == ("health_slow", "note")
    assert (down.code, down.effect) == ("health_outage", "failed")
    assert "2× HTTP 503, 7× connection refused" in down.message and "8.0 s" in down.message
