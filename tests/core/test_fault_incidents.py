"""One Xid, one fault: the reports of every source that saw it are one fault, each kept.

Xid 31 on GPU 1 reaches soaktop up to four ways: an NVML event, a change of DCGM's
``DCGM_FI_DEV_XID_ERRORS`` gauge, the kernel's ``NVRM: Xid`` line and the CUDA error the
engine logs. The monitor's banner once counted every ``fault`` event ("3 faults" for the
xid-mid-run demo); the record listed them with nothing to say they were one. These tests
drive the real sources (stubbed ``pynvml``, a DCGM page through the exporter parser, a
server log through the fault watch) into one events journal, as a run does.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from probes.dcgm import dcgm_sample, parse_dcgm
from soak.record.events import EventLog
from soak.record.faults import SAME_FAULT_S, distinct_faults, faults_from_events
from soak.record.journal import JsonlWriter, read_jsonl
from soak.watch.gpu.dcgm import DcgmWatch
from soak.watch.gpu.nvml import NvmlWatch
from soak.watch.health import FaultWatch
from tests.core.test_gpu_xid_paths import quiet_nvml

# What the simulated engine's replica writes for Xid 31 (simengine.replica.xid), as a
# real vLLM node's log shows it: the engine's CUDA error, then the kernel's line.
CUDA_LINE = (
    "(EngineCore_DP0 pid=8167) ERROR 11-30 05:34:28 [dump_input.py:79] torch.AcceleratorError:"
    " CUDA error: an illegal memory access was encountered"
)
KERNEL_LINE = (
    "[18756.564319] NVRM: Xid (PCI:0000:2a:00): 31, pid=8167, name=VLLM::EngineCore0, "
    "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted"
)


def dcgm_page(uuid: str, last_xid: int) -> str:
    """A dcgm-exporter page of two GPUs; GPU 1 (``uuid``) shows ``last_xid``."""
    rows = ["# TYPE DCGM_FI_DEV_XID_ERRORS gauge"]
    for i, (u, xid) in enumerate((("GPU-zero", 0), (uuid, last_xid))):
        labels = f'gpu="{i}",UUID="{u}",device="nvidia{i}",modelName="NVIDIA H200"'
        rows.append(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {xid}")
    return "\n".join(rows) + "\n"


async def _one_xid_everywhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    """Xid 31 on GPU 1 through NVML, DCGM and the server log of replica 1: the fault
    events."""
    fake = quiet_nvml(monkeypatch)
    origin = time.perf_counter_ns()
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), origin)
    telemetry = JsonlWriter(tmp_path / "telemetry.jsonl")
    nvml = NvmlWatch(origin, telemetry, events)
    dcgm = DcgmWatch(["http://unused:9400"], origin, telemetry, events)
    files = [tmp_path / "replica0.log", tmp_path / "replica1.log"]
    for f in files:
        f.write_text("")
    # Two replicas, one log each (so each line names its replica); nothing listens there:
    # the /health checks of the last round fail, and only the fault events are kept.
    closed = ["http://127.0.0.1:9/v1"] * 2
    logs = FaultWatch(closed, {}, events, lambda: 2.5, log_files=files)
    logs.poll_logs()  # the followers start at the logs' ends
    assert await nvml.open()
    try:
        await nvml.sample()
        uuid = fake.gpus[1].uuid
        dcgm._take(0, dcgm_sample(1.0, parse_dcgm(dcgm_page(uuid, 0))))
        fake.post(1, 31)
        for _ in range(300):  # the Xid thread delivers in its own time
            if nvml.drain_events():
                break
            await asyncio.sleep(0.01)
        dcgm._take(0, dcgm_sample(2.0, parse_dcgm(dcgm_page(uuid, 31))))
        files[1].write_text(f"{CUDA_LINE}\n{KERNEL_LINE}\n")
        logs.poll_logs()
    finally:
        await nvml.stop()
        await logs.stop()
    return [e for e in read_jsonl(tmp_path / "events.jsonl") if e["kind"] == "fault"]


async def test_one_xid_seen_by_nvml_dcgm_and_the_log_is_one_fault_with_four_reports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    events = await _one_xid_everywhere(monkeypatch, tmp_path)
    # every source reported it: the triple (quadruple with NVML) the banner counted
    assert sorted(e["data"].get("source") or e["data"]["fault"] for e in events) == [
        "cuda_illegal_memory_access",
        "dcgm",
        "nvml",
        "xid",
    ]
    assert distinct_faults(events) == (1, 4)
    faults = faults_from_events(events, load_start_s=0.0)
    assert [f["incident"] for f in faults] == [1, 1, 1, 1]
    # each source's evidence kept: the GPU and Xid of the GPU sources, the log's replica
    assert {f["source"] for f in faults} == {"gpu (nvml)", "gpu (dcgm)", "server log"}
    assert [f.get("xid") for f in faults if f["source"].startswith("gpu")] == [31, 31]
    assert all(f["replica"] == 1 for f in faults if f["source"] == "server log")


def _ev(t: float, message: str, **data: Any) -> dict[str, Any]:
    return {"t": t, "kind": "fault", "severity": "critical", "message": message, "data": data}


def _gpu(t: float, gpu: int, xid: int, uuid: str | None = None, **more: Any) -> dict[str, Any]:
    data = {"source": "dcgm", "gpu": gpu, "uuid": uuid, "xid": xid, "fault": "xid", "t_s": t}
    return _ev(t, f"GPU {gpu}: Xid {xid}", **(data | more))


def _log(t: float, replica: int, summary: str, fault: str) -> dict[str, Any]:
    return _ev(t, f"endpoint {replica} log: {summary}", fault=fault, replica=replica, line="…")


def _incidents(events: list[dict[str, Any]]) -> list[int]:
    return [f["incident"] for f in faults_from_events(events, None)]


def test_two_gpus_with_the_same_xid_at_once_are_two_faults() -> None:
    events = [_gpu(10.0, 0, 79, "GPU-a"), _gpu(10.2, 1, 79, "GPU-b")]
    assert _incidents(events) == [1, 2]
    assert distinct_faults(events) == (2, 2)


def test_the_same_xid_on_one_gpu_long_apart_is_two_faults() -> None:
    events = [_gpu(10.0, 1, 31), _gpu(10.0 + SAME_FAULT_S + 5, 1, 31)]
    assert _incidents(events) == [1, 2]


def test_two_exporters_gpu_1_each_are_two_gpus_without_uuids() -> None:
    events = [_gpu(10.0, 1, 31, url_index=0), _gpu(10.5, 1, 31, url_index=1)]
    assert _incidents(events) == [1, 2]
    nvml = _gpu(10.6, 1, 31, source="nvml")  # NVML names no exporter: either one
    assert _incidents([*events, nvml]) == [1, 2, 1]


def test_a_cuda_error_joins_the_nearest_xid_of_its_replica_and_others_stand_alone() -> None:
    kernel = "Xid 31 on PCI:0000:2a:00: GPU memory page fault (illegal memory access)"
    events = [
        _log(9.0, 1, "CUDA illegal memory access", "cuda_illegal_memory_access"),  # before
        _gpu(10.0, 1, 31),
        _log(11.0, 1, kernel, "xid"),
        _log(11.5, 0, "CUDA illegal memory access", "cuda_illegal_memory_access"),
        _log(12.0, 1, "CUDA out of memory", "cuda_oom"),  # not an Xid's consequence
        _log(40.0, 1, "CUDA error: unspecified launch failure", "cuda_error"),  # far
    ]
    # replica 0's CUDA error is not the Xid replica 1's kernel line reported
    assert _incidents(events) == [1, 1, 1, 2, 3, 4]
    assert distinct_faults(events) == (4, 6)


def test_kernel_lines_of_two_replicas_are_two_faults() -> None:
    events = [
        _log(10.0, 0, "Xid 79 on PCI:0000:18:00: GPU has fallen off the bus", "xid"),
        _log(10.1, 1, "Xid 79 on PCI:0000:2a:00: GPU has fallen off the bus", "xid"),
    ]
    assert _incidents(events) == [1, 2]


def test_restarts_and_outages_keep_their_own_numbers_and_are_not_banner_faults() -> None:
    events = [
        _gpu(10.0, 1, 31),
        {"t": 11.0, "kind": "restart", "message": "restarted", "data": {"endpoint": 1}},
        {"t": 12.0, "kind": "health", "severity": "error", "message": "down", "data": {}},
    ]
    assert _incidents(events) == [1, 2, 3]
    assert distinct_faults(events) == (1, 1)
    # a record older than schema 1.3 numbers none: verify recomputes it that way
    assert all("incident" not in f for f in faults_from_events(events, None, incidents=False))
