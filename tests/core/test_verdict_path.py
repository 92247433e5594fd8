"""One verdict path: the facts the live watchers hold and the facts their journals hold
give the same reasons, through the one judge.

Each test drives a real watcher (or the GPU ledger every GPU source shares) writing a
real ``events.jsonl``, then judges twice: on what the watcher summed up (finalize's
facts) and on what the journal says (recover's and verify's facts).
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from typing import Any

from probes.engine_metrics import EngineSample
from probes.gpu_reading import GpuReading
from soak.judge.facts import RunFacts
from soak.judge.faults import (
    MAX_GPU_REASONS,
    fault_reasons,
    gpu_fault_events,
    gpu_fault_reasons,
    gpu_faults_judgeable,
    restart_reasons,
    telemetry_from_journals,
)
from soak.judge.limits import limits_from_config
from soak.judge.verdict import judge
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter, read_jsonl
from soak.record.models import Reason, Status
from soak.run.config import RunConfig
from soak.watch.engine import EngineWatch
from soak.watch.gpu.ledger import GpuLedger
from soak.watch.health import FaultWatch

FATAL = (
    "(EngineCore_DP0 pid=41) ERROR 11-30 03:10:43 [core.py:710] "
    "EngineCore encountered a fatal error."
)


def _events(path: Path) -> list[dict[str, Any]]:
    return list(read_jsonl(path))


def _reading(index: int, last_xid: int | None = None) -> GpuReading:
    return GpuReading(
        host="node-7", index=index, uuid=f"GPU-{index}", name="NVIDIA H200", last_xid=last_xid
    )


def test_gpu_fault_reasons_from_the_events_are_the_ledgers_own(tmp_path: Path) -> None:
    """finalize, recover and verify read GPU faults from events.jsonl: the same reasons,
    effects and cap as the sources' ledgers, in the order the runner starts them."""
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), time.perf_counter_ns())
    dcgm = GpuLedger("dcgm", events, ignore_xid=frozenset({45}))
    g = dcgm.add(0, _reading(0), at_start=True, where="DCGM exporter 0", tag={"url_index": 0})
    dcgm.reading(g, _reading(0, last_xid=13), 1.0)  # already set at start: a note
    dcgm.reading(g, _reading(0, last_xid=45), 2.0)  # waived: a note
    dcgm.reading(g, _reading(0, last_xid=31), 3.0)  # a new Xid: fails the run
    nvml = GpuLedger("nvml", events)
    n = nvml.add(1, _reading(1), at_start=True, where="NVML", tag={"source": "nvml"})
    for i in range(MAX_GPU_REASONS + 3):  # past the cap: three are counted, not listed
        nvml.xid_event(n, 79, 4.0 + i)
    lines = _events(tmp_path / "events.jsonl")
    assert gpu_faults_judgeable(lines)
    live = nvml.fault_reasons() + dcgm.fault_reasons()
    assert gpu_fault_reasons(gpu_fault_events(lines)) == live
    assert [r.effect for r in dcgm.fault_reasons()] == ["note", "note", "failed"]
    assert live[MAX_GPU_REASONS].message == "3 more GPU fault(s) not listed (see events.jsonl)"


def test_gpu_fault_events_of_an_older_writer_are_judged_by_severity(tmp_path: Path) -> None:
    older = [
        {
            "t": 1.0,
            "kind": "fault",
            "severity": "critical",
            "message": "GPU 0: Xid 31",
            "data": {"source": "dcgm", "fault": "xid"},
        },
    ]
    assert not gpu_faults_judgeable(older)
    assert gpu_fault_reasons(older) == [
        Reason(code="gpu_fault", effect="failed", message="GPU 0: Xid 31")
    ]


def _at(reasons: list[Reason]) -> list[tuple[str, str, str]]:
    # The watcher stamps a fault with its clock, the event log a few microseconds later.
    return [(r.code, r.effect, re.sub(r"at \d+\.\d s", "at T", r.message)) for r in reasons]


async def test_server_log_faults_from_the_journal_are_the_watchers_reasons(tmp_path: Path) -> None:
    """recover rebuilds the log faults from their events, counted as the last snapshot
    counted them (the watcher writes only the first few of each kind as events)."""
    log = tmp_path / "server.log"
    log.write_text("")
    origin = time.perf_counter_ns()
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), origin)
    now = lambda: (time.perf_counter_ns() - origin) / 1e9  # noqa: E731 - the run's clock
    watch = FaultWatch([], {}, events, now, log_files=[log])
    await watch.start()
    with log.open("a") as fh:
        fh.write((FATAL + "\n") * 8)
        fh.write("(EngineCore_DP0 pid=41) ERROR [core.py:711] Traceback (most recent call last):\n")
    await watch.tick()
    snapshot = {"telemetry": watch.view()}
    await watch.stop()
    lines = _events(tmp_path / "events.jsonl")
    live = fault_reasons(watch.summary())
    assert [r.code for r in live] == ["server_fault", "server_log_error"]
    assert "(+7 more)" in live[0].message
    assert _at(fault_reasons(telemetry_from_journals(lines, snapshot))) == _at(live)
    without = fault_reasons(telemetry_from_journals(lines, None))  # the events alone
    assert "(+4 more)" in without[0].message and without[0].effect == "failed"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_health_outage_from_the_journal_fails_the_run_as_finalize_does(
    tmp_path: Path,
) -> None:
    origin = time.perf_counter_ns()
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), origin)
    now = lambda: (time.perf_counter_ns() - origin) / 1e9  # noqa: E731 - the run's clock
    watch = FaultWatch([f"http://127.0.0.1:{_closed_port()}"], {}, events, now)
    for _ in range(3):
        await watch.check_health()
    snapshot = {"telemetry": watch.view()}
    await watch.stop()
    (live,) = fault_reasons(watch.summary())
    (journal,) = fault_reasons(
        telemetry_from_journals(_events(tmp_path / "events.jsonl"), snapshot)
    )
    assert (journal.code, journal.effect) == (live.code, live.effect) == ("health_outage", "failed")
    # the journals do not count the checks: "failed 4 checks", not "failed 4 of 4 checks"
    assert re.search(r"failed \d+ checks \(", journal.message), journal.message


def _sample(t: float, gen: float) -> EngineSample:
    values: dict[str, float | None] = {
        "requests_finished_total": gen / 10,
        "prompt_tokens_total": gen,
        "generation_tokens_total": gen,
    }
    return EngineSample(t=t, engine="vllm", values=values)


async def test_restarts_from_the_journal_are_the_watchers_reasons(tmp_path: Path) -> None:
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), time.perf_counter_ns())
    watch = EngineWatch(["http://x"], {}, 0, JsonlWriter(tmp_path / "t.jsonl"), events=events)
    for t, gen in ((1.0, 50), (2.0, 80), (3.0, 10), (4.0, 40), (5.5, 5)):
        watch._take(0, _sample(t, gen))
    await watch.stop()
    live = restart_reasons({"engines": watch.summary()}, 1.0)
    journal = restart_reasons(
        telemetry_from_journals(_events(tmp_path / "events.jsonl"), None), 1.0
    )
    assert journal == live and "restarted 2 times" in live[0].message


def test_the_judge_of_empty_facts_passes_and_orders_by_effect() -> None:
    assert judge(RunFacts()).status is Status.PASSED
    verdict = judge(
        RunFacts(
            aborted="SIGINT during load at 3.0 s",
            storage_error="disk full writing events.jsonl at 2.0 s",
            internal_errors=["ValueError: x"],
            extra=[Reason(code="journal_torn_tail", effect="note", message="torn")],
        )
    )
    assert verdict.status is Status.ABORTED
    assert [r.code for r in verdict.reasons] == [
        "aborted",
        "storage_error",
        "internal_error",
        "journal_torn_tail",
    ]


def test_the_limits_default_once_for_the_runner_recover_and_verify() -> None:
    """The runner's config, and a config.json from a soaktop that wrote none of the keys,
    judge against the same limits."""
    config = RunConfig.model_validate({"model": "m", "endpoints": ["http://127.0.0.1:1"]})
    assert limits_from_config(config.public_dict()) == limits_from_config({})
