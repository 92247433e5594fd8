"""Host telemetry and client self-health: samples, server processes, sustained overload."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from probes.host import HostSample
from soak.judge.facts import RunFacts
from soak.judge.verdict import decide
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter
from soak.record.models import ClientHealth
from soak.watch.host import HostWatch, check_server_pid


class _Cpu:
    """The runner's own sampler with a chosen CPU figure (the rest is real)."""

    def __init__(self, cpu: float) -> None:
        self.cpu = cpu

    def sample(self) -> HostSample:
        return HostSample(cpu_percent=self.cpu, rss_mb=50.0, threads=4, open_files=9, fd_limit=1024)


def _watch(tmp_path: Path, **kw: Any) -> tuple[HostWatch, EventLog]:
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), time.perf_counter_ns())
    return HostWatch(JsonlWriter(tmp_path / "telemetry.jsonl"), events, **kw), events


def test_each_tick_is_one_host_line_with_client_system_and_server(tmp_path):
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watch, events = _watch(tmp_path, server_pids=[server.pid])
        for t in (1.0, 2.0):
            watch.tick(t, measuring=True, issuing=True, in_flight=4, workers=4, backoffs=0)
        server.kill()
        server.wait()
        watch.tick(3.0, measuring=True, issuing=True, in_flight=4, workers=4, backoffs=0)
    finally:
        server.kill()
    lines = [orjson.loads(x) for x in (tmp_path / "telemetry.jsonl").read_bytes().splitlines()]
    assert [x["source"] for x in lines] == ["host"] * 3
    first = lines[0]
    assert first["client"]["rss_mb"] > 0 and first["client"]["threads"] >= 1
    assert first["system"]["mem_total_mib"] > 0 and first["system"]["cpus"] >= 1
    assert first["servers"][0]["pid"] == server.pid and first["servers"][0]["status"] == "ok"
    assert first["servers"][0]["rss_mb"] > 0
    # the server process died: a critical fault event once, and "exited" from then on
    assert lines[2]["servers"][0]["status"] == "exited"
    faults = [e for e in events.take_pending() if e.kind == "fault"]
    assert len(faults) == 1 and faults[0].severity == "critical"
    assert faults[0].data["fault"] == "server_process_exited" and faults[0].data["t_s"] == 3.0
    (srv,) = watch.summary()["servers"]
    assert srv["exited_at_s"] == 3.0 and srv["rss_mb_max"] > 0
    assert watch.view()["servers"][0]["status"] == "exited"


def test_a_pid_that_does_not_exist_is_refused_by_the_config_check():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert check_server_pid(p.pid) == "no such process on this host"
    assert check_server_pid(p.pid if False else __import__("os").getpid()) is None


def test_sustained_client_cpu_overload_makes_the_run_invalid(tmp_path):
    watch, _ = _watch(tmp_path, max_client_cpu_percent=90.0)
    watch.client = _Cpu(99.0)  # type: ignore[assignment]
    for t in range(13):  # 12 s above the limit while measuring
        watch.tick(float(t), measuring=True, issuing=True, in_flight=8, workers=8, backoffs=0)
    watch.client = _Cpu(20.0)  # type: ignore[assignment]
    watch.tick(13.0, measuring=True, issuing=True, in_flight=8, workers=8, backoffs=0)
    assert watch.cpu_streak.longest_s == 12.0
    assert watch.summary()["client_cpu_percent_max"] == 99.0
    health = ClientHealth(cpu_over_limit_s=12.0, in_flight_short_s=0.0)
    status, reasons = decide(
        RunFacts(health=health, client_overload_s=10.0, max_client_cpu_percent=90.0)
    )
    assert status.value == "INVALID"
    assert [r.message for r in reasons] == [
        "the client's CPU stayed above 90% of a core for 12 s (limit 10 s): it could not keep "
        "up, and its timings include its own queueing"
    ]
    # a burst shorter than the limit is not a verdict
    short = ClientHealth(cpu_over_limit_s=9.0)
    assert decide(RunFacts(health=short, client_overload_s=10.0))[0].value == "PASSED"


def test_in_flight_below_the_workers_counts_only_while_issuing_and_not_backing_off(tmp_path):
    watch, _ = _watch(tmp_path)
    tick = watch.tick
    tick(0.0, measuring=True, issuing=True, in_flight=5, workers=8, backoffs=0)
    tick(4.0, measuring=True, issuing=True, in_flight=3, workers=8, backoffs=0)
    # a failure back-off explains the shortfall: the streak breaks
    tick(5.0, measuring=True, issuing=True, in_flight=2, workers=8, backoffs=3)
    tick(6.0, measuring=True, issuing=True, in_flight=6, workers=8, backoffs=3)
    tick(8.0, measuring=True, issuing=True, in_flight=7, workers=8, backoffs=3)
    # the drain (not issuing) never counts
    tick(9.0, measuring=True, issuing=False, in_flight=1, workers=8, backoffs=3)
    tick(30.0, measuring=True, issuing=False, in_flight=0, workers=8, backoffs=3)
    assert watch.short_streak.longest_s == 4.0 and watch.short_min == 3
    health = ClientHealth(in_flight_short_s=12.0, in_flight_short_min=3)
    status, reasons = decide(RunFacts(health=health, client_overload_s=10.0))
    assert status.value == "INVALID" and reasons[0].code == "in_flight_short"
    assert "as few as 3" in reasons[0].message
