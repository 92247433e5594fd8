"""Local GPU telemetry through NVML: the reader, the Xid event thread and NvmlWatch.

Without a GPU, the real ``pynvml`` must say "unavailable" once and invent nothing. The
rest stubs functions of the real ``pynvml`` module (monkeypatch, tests only): two GPUs,
one with fields NVML does not support, one that is lost on its third read, and an event
set that delivers one Xid. ``test_real_gpu`` (marked ``gpu``) reads real GPUs where
there are some and is skipped, with its reason, elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import orjson
import psutil
import pynvml
import pytest

from probes.gpu_reading import GpuReading
from probes.nvml import LIBRARY_NOT_FOUND, NvmlReader, NvmlUnavailable
from probes.nvml_events import EVENT_DOUBLE_BIT_ECC, EVENT_XID, XidEventWatcher
from probes.xid import XID_MEANING
from soak.judge.thresholds import metrics_from_record, metrics_from_snapshot
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter, read_jsonl
from soak.watch.gpu.nvml import NvmlWatch

MIB = 1024 * 1024
NO_SUCH_PID = 4_194_305  # above Linux's largest pid_max


def _nvml_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("nvml")]


def _real_nvml_error() -> str | None:
    """Why the real NVML cannot be opened here; None when it can (a GPU is present)."""
    try:
        reader = NvmlReader(process_names=False)
        reader.open()
    except NvmlUnavailable as e:
        return str(e)
    reader.close()
    return None


def _watch(tmp_path: Path, **kw: Any) -> tuple[NvmlWatch, EventLog]:
    origin = time.perf_counter_ns()
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), origin)
    watch = NvmlWatch(origin, JsonlWriter(tmp_path / "telemetry.jsonl"), events, **kw)
    return watch, events


def _brief(events: EventLog) -> list[tuple[str, str, str]]:
    return [(e.kind, e.severity, e.message) for e in events.take_pending()]


# --- (a) this machine, the real pynvml ---------------------------------------------------


async def test_without_a_gpu_nvml_is_unavailable_once_and_nothing_is_invented(tmp_path):
    why = _real_nvml_error()
    if why is None:
        pytest.skip("a real NVIDIA GPU is present: the no-GPU path cannot be checked here")
    # one of the clear forms: no library (this machine), NVML's own words, or no GPU
    assert why == LIBRARY_NOT_FOUND or why.startswith("NVML init failed: ") or "no GPU" in why
    watch, events = _watch(tmp_path, interval_s=0.05)
    watch.start()
    assert await asyncio.wait_for(watch.ready(), 15) is False
    await asyncio.sleep(0.2)  # a watch that kept going would read or warn again by now
    assert _brief(events) == [("warning", "warning", f"GPU telemetry: NVML unavailable: {why}")]
    assert watch._task is not None and watch._task.done() and watch._task.exception() is None
    unavailable = {"source": "nvml", "status": "unavailable", "reason": why}
    assert watch.view() == [unavailable]
    assert watch.summary() == [unavailable]
    assert watch.identity() == [] and watch.fault_reasons() == []
    assert await watch.sample() is None and watch.drain_events() == 0
    await watch.stop()
    assert _brief(events) == []
    assert _nvml_threads() == []
    lines = list(read_jsonl(tmp_path / "telemetry.jsonl"))
    assert [(x["source"], x["status"], x["error"]) for x in lines] == [("nvml", "unavailable", why)]
    # nothing for the thresholds either: no data, not a made-up zero
    figures = metrics_from_record(None, {"gpus": watch.summary()})
    assert figures["gpu.min_free_mib"] is None and figures["gpu.max_temp_c"] is None


def test_event_type_constants_are_nvmls():
    assert EVENT_XID == pynvml.nvmlEventTypeXidCriticalError == 0x8
    assert EVENT_DOUBLE_BIT_ECC == pynvml.nvmlEventTypeDoubleBitEccError == 0x2


# --- (b) stubbed pynvml --------------------------------------------------------------------


class FakeGpu:
    """One stubbed GPU; the handle NVML calls receive."""

    def __init__(
        self,
        index: int,
        name: str,
        *,
        memory_v2: bool = True,
        not_supported: tuple[str, ...] = (),
        errors: dict[str, type[pynvml.NVMLError]] | None = None,
        lost_on_read: int | None = None,
        throttle: int = 0,
    ) -> None:
        self.index = index
        self.name = name
        self.uuid = f"GPU-{index:08d}-1111-2222-3333-444455556666"
        self.bus_id = f"00000000:{0x18 + index:02X}:00.0"
        self.memory_v2 = memory_v2
        self.not_supported = not_supported
        self.errors = errors or {}
        self.lost_on_read = lost_on_read
        self.throttle = throttle
        self.lost = False
        self.reads = 0
        self.calls: dict[str, int] = {}
        self.free_mib = [100_000.0, 90_000.0, 95_000.0]
        self.temps = [50, 61, 55]
        self.ecc = [0, 1, 1]

    def step(self) -> int:
        return min(self.reads, 3) - 1


class FakeNvml:
    """Stub state behind the monkeypatched ``pynvml`` functions."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.init_error: type[pynvml.NVMLError] | None = None
        self.missing: set[str] = set()
        """Function names that raise FunctionNotFound (an old driver)."""
        self.shutdowns = 0
        self.freed = 0
        self.waits = 0
        self.registered: list[tuple[int, int]] = []
        self._events: list[SimpleNamespace] = []
        self._lock = threading.Lock()

    def post(self, gpu: int, xid: int, event_type: int = EVENT_XID) -> None:
        """The next event wait returns this event."""
        ev = SimpleNamespace(device=self.gpus[gpu], eventType=event_type, eventData=xid)
        with self._lock:
            self._events.append(ev)

    def _dev(self, name: str, h: FakeGpu) -> FakeGpu:
        h.calls[name] = h.calls.get(name, 0) + 1
        if name in self.missing:
            raise pynvml.NVMLError_FunctionNotFound()
        if h.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if name in h.not_supported:
            raise pynvml.NVMLError_NotSupported()
        if name in h.errors:
            raise h.errors[name]()
        return h

    # -- system -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error()

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        if "nvmlSystemGetCudaDriverVersion_v2" in self.missing:
            raise pynvml.NVMLError_FunctionNotFound()
        return 12040

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 11080

    # -- devices ------------------------------------------------------------------------
    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return self._dev("name", h).name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return self._dev("uuid", h).uuid

    def nvmlDeviceGetPciInfo_v3(self, h: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(busId=self._dev("nvmlDeviceGetPciInfo_v3", h).bus_id.encode())

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(busId=self._dev("nvmlDeviceGetPciInfo", h).bus_id.encode())

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu, version: int | None = None) -> SimpleNamespace:
        if version:
            self._dev("memory_v2", h)
            if not h.memory_v2:
                raise pynvml.NVMLError_FunctionNotFound()
        else:
            self._dev("memory_v1", h)
        total, reserved = 143_771 * MIB, 512 * MIB
        # memory is read first, before the utilisation call counts the read
        free = int(h.free_mib[min(h.reads, 2)] * MIB)
        if version:
            return SimpleNamespace(
                total=total, reserved=reserved, free=free, used=total - reserved - free
            )
        return SimpleNamespace(total=total, free=free, used=total - free)

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> SimpleNamespace:
        h.reads += 1
        if h.lost_on_read is not None and h.reads >= h.lost_on_read:
            h.lost = True
        self._dev("util", h)
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._dev("temperature", h).temps[h.step()]

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._dev("power", h)
        return 312_500

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        self._dev("power_limit", h)
        return 700_000

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock: int) -> int:
        assert clock == pynvml.NVML_CLOCK_SM
        self._dev("clock", h)
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksEventReasons", h).throttle

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeGpu) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksThrottleReasons", h).throttle

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, kind: int, counter: int) -> int:
        assert kind == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        assert counter == pynvml.NVML_VOLATILE_ECC
        return self._dev("ecc", h).ecc[h.step()]

    def nvmlDeviceGetRemappedRows(self, h: FakeGpu) -> tuple[int, int, int, int]:
        self._dev("remapped_rows", h)
        return (3, 0, 0, 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: FakeGpu) -> int:
        self._dev("retired_pages", h)
        return 0

    def nvmlDeviceGetPcieReplayCounter(self, h: FakeGpu) -> int:
        self._dev("pcie", h)
        return 7

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[SimpleNamespace]:
        self._dev("processes", h)
        return [
            SimpleNamespace(pid=os.getpid(), usedGpuMemory=70_000 * MIB),
            SimpleNamespace(pid=NO_SUCH_PID, usedGpuMemory=None),
        ]

    # -- events -------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, h: FakeGpu, types: int, es: object) -> None:
        self._dev("events", h)
        self.registered.append((h.index, types))

    def nvmlEventSetWait_v2(self, es: object, timeout_ms: int) -> SimpleNamespace:
        if "nvmlEventSetWait_v2" in self.missing:
            raise pynvml.NVMLError_FunctionNotFound()
        return self.nvmlEventSetWait(es, timeout_ms)

    def nvmlEventSetWait(self, es: object, timeout_ms: int) -> SimpleNamespace:
        self.waits += 1
        with self._lock:
            if self._events:
                return self._events.pop(0)
        time.sleep(timeout_ms / 1000)  # NVML blocks for the whole timeout when idle
        raise pynvml.NVMLError_Timeout()

    def nvmlEventSetFree(self, es: object) -> None:
        self.freed += 1

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """GPU 0: a GeForce without power, ECC, row-remap, retired-page or event support,
    memory info v1 only. GPU 1: an H200 (no PCIe-replay permission) whose ECC count grows
    on the 2nd read and which is lost on the 3rd."""
    fake = FakeNvml(
        [
            FakeGpu(
                0,
                "NVIDIA GeForce RTX 4090",
                memory_v2=False,
                not_supported=("power", "ecc", "remapped_rows", "retired_pages", "events"),
                throttle=0x1,
            ),
            FakeGpu(
                1,
                "NVIDIA H200",
                not_supported=("retired_pages",),
                errors={"pcie": pynvml.NVMLError_NoPermission},
                lost_on_read=3,
                throttle=0x4 | 0x40,
            ),
        ]
    )
    fake.install(monkeypatch)
    return fake


def test_reader_maps_units_words_and_degrades_each_field_on_its_own(nvml):
    reader = NvmlReader()
    reader.open()
    assert (reader.driver_version, reader.cuda_driver_version) == ("550.54.15", "12.4")
    assert [(d.index, d.name, d.pci_bus_id, d.memory_total_mib) for d in reader.devices] == [
        (0, "NVIDIA GeForce RTX 4090", "00000000:18:00.0", 143_771.0),
        (1, "NVIDIA H200", "00000000:19:00.0", 143_771.0),
    ]
    g0, g1 = reader.read()
    # GPU 1: everything but the PCIe replays (no permission) and retired pages
    assert isinstance(g1, GpuReading) and g1.host is None and g1.uuid == nvml.gpus[1].uuid
    assert (g1.memory_total_mib, g1.memory_free_mib, g1.memory_reserved_mib) == (
        143_771.0,
        100_000.0,
        512.0,
    )
    assert g1.memory_used_mib == 143_771 - 512 - 100_000
    assert (g1.util_percent, g1.temperature_c, g1.sm_clock_mhz) == (87.0, 50.0, 1980.0)
    assert (g1.power_w, g1.power_limit_w) == (312.5, 700.0)
    assert g1.throttle_reasons == 0x44 and g1.throttle == ("sw power cap", "hw thermal")
    assert g1.ecc_dbe_volatile == 0 and g1.last_xid is None
    assert (g1.remapped_rows_correctable, g1.remapped_rows_uncorrectable) == (3, 0)
    assert (g1.row_remap_pending, g1.row_remap_failure) == (False, False)
    assert g1.pcie_replays is None and g1.field_errors == {
        "pcie_replays": "Insufficient Permissions"
    }
    assert g1.retired_pages_pending is None and g1.not_supported == ("retired_pages_pending",)
    me, ghost = g1.processes or ()
    assert (me.pid, me.used_mib, me.name) == (os.getpid(), 70_000.0, psutil.Process().name())
    assert (ghost.pid, ghost.used_mib, ghost.name) == (NO_SUCH_PID, None, None)
    assert not g1.lost
    # GPU 0: the unsupported fields are None, the others are all there; memory v1
    assert (g0.power_w, g0.ecc_dbe_volatile, g0.remapped_rows_uncorrectable) == (None, None, None)
    assert (g0.row_remap_failure, g0.retired_pages_pending) == (None, None)
    assert set(g0.not_supported) == {
        "power_w",
        "ecc_dbe_volatile",
        "remapped_rows",
        "retired_pages_pending",
    }
    assert (g0.memory_total_mib, g0.memory_free_mib, g0.memory_used_mib) == (
        143_771.0,
        100_000.0,
        43_771.0,
    )
    assert g0.memory_reserved_mib is None  # v1 has no reservation figure
    assert (g0.power_limit_w, g0.temperature_c, g0.pcie_replays) == (700.0, 50.0, 7)
    assert g0.throttle == ("gpu idle",) and g0.field_errors == {}
    # memory v2 was tried once on GPU 0 (at open), then v1 only
    reader.read()
    assert nvml.gpus[0].calls["memory_v2"] == 1 and nvml.gpus[0].calls["memory_v1"] == 3
    assert nvml.gpus[1].calls.get("memory_v1", 0) == 0
    reader.close()
    reader.close()
    assert nvml.shutdowns == 1


def test_a_lost_gpu_is_a_reading_not_an_exception_and_is_not_asked_again(nvml):
    with NvmlReader(process_names=False) as reader:
        reader.read()
        reader.read()
        g0, g1 = reader.read()  # GPU 1's third read
        assert g1.lost and g1.lost_reason == "GPU is lost" and g1.name == "NVIDIA H200"
        assert (g1.memory_free_mib, g1.temperature_c, g1.processes) == (None, None, None)
        assert not g0.lost and g0.temperature_c == 55.0
        calls = dict(nvml.gpus[1].calls)
        _, again = reader.read()
        assert again.lost and nvml.gpus[1].calls == calls  # no NVML call for a lost GPU
    assert nvml.shutdowns == 1


def test_unavailable_messages(nvml):
    nvml.init_error = pynvml.NVMLError_DriverNotLoaded
    with pytest.raises(NvmlUnavailable, match=r"^NVML init failed: Driver Not Loaded$"):
        NvmlReader().open()
    nvml.init_error = pynvml.NVMLError_LibraryNotFound
    with pytest.raises(NvmlUnavailable) as e:
        NvmlReader().open()
    assert str(e.value) == LIBRARY_NOT_FOUND
    nvml.init_error = None
    nvml.gpus = []
    with pytest.raises(NvmlUnavailable, match="no GPU"):
        NvmlReader().open()
    assert nvml.shutdowns == 1  # opened, found nothing, shut down


def test_old_driver_fallbacks(nvml):
    nvml.missing = {
        "nvmlSystemGetCudaDriverVersion_v2",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetPciInfo_v3",
    }
    with NvmlReader(process_names=False) as reader:
        assert reader.cuda_driver_version == "11.8"
        assert [d.pci_bus_id for d in reader.devices] == ["00000000:18:00.0", "00000000:19:00.0"]
        _, g1 = reader.read()
        reader.read()
    assert g1.throttle == ("sw power cap", "hw thermal")
    # the new name is tried once (a driver-wide fact), then the old one for every read
    new = [g.calls.get("nvmlDeviceGetCurrentClocksEventReasons", 0) for g in nvml.gpus]
    old = [g.calls.get("nvmlDeviceGetCurrentClocksThrottleReasons", 0) for g in nvml.gpus]
    assert (sum(new), old) == (1, [2, 2])


def test_xid_watcher_delivers_one_event_and_stops_fast(nvml):
    nvml.missing = {"nvmlEventSetWait_v2"}  # and falls back to nvmlEventSetWait
    with NvmlReader() as reader:
        nvml.post(1, 79)
        w = XidEventWatcher(reader.devices, timeout_ms=200)
        w.start()
        assert w.ready.wait(2)
        assert w.registered == {1: EVENT_XID | EVENT_DOUBLE_BIT_ECC}
        assert w.not_supported == [0]  # GPU 0 supports no event type
        deadline = time.monotonic() + 2
        got: list[Any] = []
        while not got and time.monotonic() < deadline:
            got = w.drain()
            time.sleep(0.01)
        assert [(e.gpu, e.kind, e.data) for e in got] == [(1, "xid", 79)]
        time.sleep(0.5)  # idle (Timeout) waits
        assert w.drain() == [] and w.wait_errors == 0 and w.error is None
        begun = time.monotonic()
        assert w.stop()
        assert time.monotonic() - begun < 1.0
        assert not w.alive and nvml.freed == 1
    assert _nvml_threads() == []


async def test_watch_faults_view_summary_and_identity(nvml, tmp_path):
    watch, events = _watch(tmp_path)
    assert await watch.open()
    await watch.sample()
    for _ in range(100):  # the Xid thread registers in its own time
        if watch.drain_events() or watch._xids is None or watch._xids.ready.is_set():
            break
        await asyncio.sleep(0.01)
    watch.drain_events()
    h200, rtx = "GPU 1 (NVIDIA H200)", "GPU 0 (NVIDIA GeForce RTX 4090)"
    assert sorted(_brief(events)) == [
        (
            "warning",
            "warning",
            f"GPU telemetry: {rtx} does not deliver Xid events through NVML; "
            "its Xids only from the server log",
        ),
        (
            "warning",
            "warning",
            f"GPU telemetry: {h200}: NVML could not read pcie_replays: Insufficient Permissions",
        ),
    ]
    # the watch types its entries as objects; the tests read them as the JSON they become
    view: list[dict[str, Any]] = watch.view()
    assert [(v["index"], v["status"]) for v in view] == [(0, "ok"), (1, "ok")]
    assert view[0]["power_w"] is None and view[0]["memory_free_mib"] == 100_000.0
    assert view[1]["throttle"] == ["sw power cap", "hw thermal"]
    assert view[1]["memory_reserved_mib"] == 512.0 and view[1]["power_w"] == 312.5
    assert [p["pid"] for p in view[1]["processes"]] == [os.getpid(), NO_SUCH_PID]

    await watch.sample()  # GPU 1: one new uncorrectable ECC error
    assert _brief(events) == [
        ("fault", "critical", f"{h200}: 1 new uncorrectable ECC error(s) (volatile total 1)")
    ]
    nvml.post(1, 79)
    nvml.post(1, 0, EVENT_DOUBLE_BIT_ECC)  # the counter reports it: not a second fault
    for _ in range(300):
        if watch.drain_events():
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    watch.drain_events()
    evs = events.take_pending()
    assert [(e.kind, e.severity, e.message) for e in evs] == [
        ("fault", "critical", f"{h200}: Xid 79 — {XID_MEANING[79]}")
    ]
    assert XID_MEANING[79] == "GPU fell off the bus"
    assert evs[0].data["gpu"] == 1 and evs[0].data["xid"] == 79 and evs[0].data["source"] == "nvml"
    assert evs[0].data["meaning"] == XID_MEANING[79] and evs[0].data["name"] == "NVIDIA H200"

    await watch.sample()  # GPU 1 lost
    await watch.sample()  # and still lost: no second fault
    assert _brief(events) == [
        (
            "fault",
            "critical",
            f"{h200}: lost — NVML says 'GPU is lost' (fallen off the bus or needs a reset)",
        )
    ]
    view = watch.view()
    assert view[1] == {
        "source": "nvml",
        "index": 1,
        "name": "NVIDIA H200",
        "host": None,
        "status": "lost",
        "reason": "GPU is lost",
    }
    assert view[0]["status"] == "ok" and view[0]["temperature_c"] == 55.0

    s0, s1 = cast(list[dict[str, Any]], watch.summary())
    assert (s0["min_free_mib"], s0["max_temp_c"], s0["max_power_w"]) == (90_000.0, 61.0, None)
    assert (s0["ecc_new"], s0["remapped_rows_new"], s0["samples"]) == (None, None, 4)
    assert "power_w" in s0["not_supported"] and s0["throttle_seen"] == ["gpu idle"]
    assert (s1["min_free_mib"], s1["max_temp_c"], s1["max_power_w"]) == (90_000.0, 61.0, 312.5)
    assert (s1["ecc_new"], s1["status"], s1["samples"], s1["last_xid"]) == (1, "lost", 2, 79)
    assert [(x["xid"], x["already_set"]) for x in s1["xid_events"]] == [(79, False)]
    assert s1["pci_bus_id"] == "00000000:19:00.0" and s1["scrape_errors"] == 0
    figures = metrics_from_record(None, {"gpus": watch.summary()})
    assert (figures["gpu.min_free_mib"], figures["gpu.max_temp_c"]) == (90_000.0, 61.0)

    reasons = watch.fault_reasons()
    assert [(r.code, r.effect) for r in reasons] == [("gpu_fault", "failed")] * 3
    assert "Xid 79" in reasons[1].message and reasons[1].message.endswith("(NVML)")

    ident = watch.identity()
    assert ident[1] == {
        "source": "nvml",
        "index": 1,
        "name": "NVIDIA H200",
        "host": None,
        "uuid": nvml.gpus[1].uuid,
        "pci_bus_id": "00000000:19:00.0",
        "memory_total_mib": 143_771.0,
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
    }
    lines = list(read_jsonl(tmp_path / "telemetry.jsonl"))
    assert lines[0]["devices"][1]["name"] == "NVIDIA H200"
    reads = [x for x in lines if "gpus" in x]
    assert len(reads) == 4 and all(x["source"] == "nvml" for x in reads)
    assert reads[0]["gpus"][1]["throttle"] == ["sw power cap", "hw thermal"]
    assert reads[-1]["gpus"][1]["lost"] is True
    faults = [orjson.loads(x) for x in (tmp_path / "events.jsonl").read_bytes().splitlines()]
    assert sum(e["kind"] == "fault" for e in faults) == 3

    begun = time.monotonic()
    await watch.stop()
    assert time.monotonic() - begun < 1.5
    assert _nvml_threads() == [] and nvml.shutdowns == 1 and nvml.freed == 1


async def test_started_watch_reads_periodically_and_stops_fast(nvml, tmp_path):
    nvml.gpus[1].lost_on_read = None
    watch, events = _watch(tmp_path, interval_s=0.05, xid_poll_s=0.02)
    watch.start()
    assert await watch.ready()
    nvml.post(1, 31)
    for _ in range(250):
        if watch.reads >= 4 and len(watch.fault_reasons()) == 2:
            break
        await asyncio.sleep(0.02)
    assert watch.reads >= 4
    faults = [e for e in events.take_pending() if e.kind == "fault"]
    assert sorted(e.message for e in faults) == [
        "GPU 1 (NVIDIA H200): 1 new uncorrectable ECC error(s) (volatile total 1)",
        f"GPU 1 (NVIDIA H200): Xid 31 — {XID_MEANING[31]}",
    ]
    begun = time.monotonic()
    await watch.stop()
    assert time.monotonic() - begun < 1.5
    assert _nvml_threads() == [] and nvml.shutdowns == 1
    reads = watch.reads
    await asyncio.sleep(0.15)
    assert watch.reads == reads  # nothing reads after stop
    view = watch.view()
    assert view[0]["status"] == "ok"  # the last values stay for the final snapshot
    # the Xid event is in the snapshot entry as in the record (the pane's "XID 31")
    assert view[1]["last_xid"] == watch.summary()[1]["last_xid"] == 31


async def test_a_failing_and_a_hung_read_withdraw_the_values(nvml, tmp_path, monkeypatch):
    watch, events = _watch(tmp_path, stall_warn_s=0.1)
    assert await watch.open()
    await watch.sample()
    events.take_pending()

    def broken(self: NvmlReader) -> list[Any]:
        raise RuntimeError("binding exploded")

    monkeypatch.setattr(NvmlReader, "read", broken)
    assert await watch.sample() is None and await watch.sample() is None
    assert _brief(events) == [
        ("warning", "warning", "GPU telemetry: NVML read failed: RuntimeError: binding exploded")
    ]
    assert [v["status"] for v in watch.view()] == ["read failed", "read failed"]
    assert "memory_free_mib" not in watch.view()[0]  # nothing stale
    monkeypatch.undo()
    nvml.install(monkeypatch)
    release = threading.Event()
    real_read = NvmlReader.read

    def slow(self: NvmlReader) -> list[Any]:
        release.wait(5)
        return real_read(self)

    monkeypatch.setattr(NvmlReader, "read", slow)
    task = asyncio.create_task(watch.sample())
    await asyncio.sleep(0.3)
    assert [v["status"] for v in watch.view()] == ["read stalled", "read stalled"]
    release.set()
    assert await task is not None
    got = [m for _, _, m in _brief(events)]
    assert got[0] == (
        "GPU telemetry: an NVML read has not returned after 0.1 s (driver hung?); "
        "GPU values withdrawn until it does"
    )
    assert re.fullmatch(r"GPU telemetry: the NVML read returned after 0\.\d s", got[1])
    assert got[2:] == [
        "GPU telemetry: NVML reads again after 2 failed read(s)",
        # the ECC count grew while reads failed: reported once they work again
        "GPU 1 (NVIDIA H200): 1 new uncorrectable ECC error(s) (volatile total 1)",
    ]
    assert watch.read_errors == 2 and watch.view()[0]["status"] == "ok"
    await watch.stop()
    assert _nvml_threads() == []


async def test_a_hung_nvml_init_is_unavailable_and_closed_when_it_returns(
    nvml, tmp_path, monkeypatch
):
    release = threading.Event()
    real_init = nvml.nvmlInit

    def hung_init() -> None:
        release.wait(5)
        real_init()

    monkeypatch.setattr(pynvml, "nvmlInit", hung_init)
    watch, events = _watch(tmp_path, open_timeout_s=0.2)
    watch.start()
    assert await watch.ready() is False
    assert _brief(events) == [
        (
            "warning",
            "warning",
            "GPU telemetry: NVML unavailable: NVML did not answer within 0.2 s (driver hung?)",
        )
    ]
    assert watch.summary()[0]["status"] == "unavailable"
    release.set()  # nvmlInit returns late: the open thread shuts NVML down itself
    for _ in range(200):
        if nvml.shutdowns:
            break
        await asyncio.sleep(0.01)
    assert nvml.shutdowns == 1
    await watch.stop()
    assert _brief(events) == [] and _nvml_threads() == []


async def test_snapshot_entries_feed_the_live_thresholds(nvml, tmp_path):
    watch, _ = _watch(tmp_path)
    await watch.open()
    await watch.sample()
    view = watch.view()
    await watch.stop()
    snap = SimpleNamespace(load=SimpleNamespace(cumulative=None), telemetry={"gpus": view})
    figures = metrics_from_snapshot(snap)  # type: ignore[arg-type]
    assert (figures["gpu.min_free_mib"], figures["gpu.max_temp_c"]) == (100_000.0, 50.0)
    orjson.dumps(view)  # a snapshot can carry it as is


# --- a real GPU ---------------------------------------------------------------------------


@pytest.mark.gpu
async def test_real_gpu(tmp_path):
    why = _real_nvml_error()
    if why is not None:
        pytest.skip(f"needs a real NVIDIA GPU; NVML here: {why}")
    with NvmlReader() as reader:
        assert reader.driver_version and reader.devices
        assert reader.cuda_driver_version is None or reader.cuda_driver_version[0].isdigit()
        readings = reader.read()
        assert len(readings) == len(reader.devices)
        print(f"\nNVML: driver {reader.driver_version}, CUDA {reader.cuda_driver_version}")
        for r in readings:
            print(
                f"  GPU {r.index} {r.name}: {r.memory_used_mib}/{r.memory_total_mib} MiB used, "
                f"{r.temperature_c} C, {r.power_w} W, util {r.util_percent} %, "
                f"throttle {r.throttle}, not supported: {sorted(r.field_errors)}"
            )
        for r in readings:
            assert r.name and r.name.startswith(("NVIDIA", "Tesla", "Quadro", "GeForce"))
            assert r.uuid and r.uuid.startswith(("GPU-", "MIG-"))
            assert not r.lost, r.lost_reason
            assert r.memory_total_mib is not None and 1024 < r.memory_total_mib < 2_000_000
            assert r.memory_free_mib is not None and r.memory_used_mib is not None
            assert r.memory_free_mib + r.memory_used_mib <= r.memory_total_mib + 1
            assert r.temperature_c is None or 0 < r.temperature_c < 120
            assert r.power_w is None or 0 < r.power_w < 2000
            assert r.util_percent is None or 0 <= r.util_percent <= 100
            assert r.throttle is None or isinstance(r.throttle, tuple)
            # only a permission can be missing (a container); NVML itself must answer
            assert set(r.field_errors.values()) <= {"Insufficient Permissions"}, r.field_errors
        w = XidEventWatcher(reader.devices)
        w.start()
        assert w.ready.wait(5)
        begun = time.monotonic()
        assert w.stop()
        assert time.monotonic() - begun < 1.5
    watch, events = _watch(tmp_path, interval_s=0.2)
    watch.start()
    assert await watch.ready()
    await asyncio.sleep(0.5)
    view = watch.view()
    assert view and all(v["status"] == "ok" for v in view), view
    await watch.stop()
    assert not [e for e in events.take_pending() if e.severity == "critical"]
    s: list[dict[str, Any]] = watch.summary()
    assert all(x["samples"] >= 1 and x["max_temp_c"] is not None for x in s), s
    assert _nvml_threads() == []
