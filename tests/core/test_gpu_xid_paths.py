"""One Xid, every path: NVML events, the DCGM gauge and the server log say the same.

An Xid delivered by local NVML once reached the record (``summary_entry``) but not the
snapshot (``view_entry`` read the reading's gauge, which NVML never sets), so the live GPU
pane showed ``FAULT 1`` where a DCGM source shows ``XID 31``. These tests drive the real
``NvmlWatch`` (stubbed ``pynvml`` functions, as in ``test_nvml.py``) and the real
``DcgmWatch`` through the shared ``GpuLedger`` and compare what each writes; and they pin
the one wording of an Xid soaktop has no words for.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from probes.dcgm import DcgmSample
from probes.gpu_reading import GpuReading
from probes.server_log import classify
from probes.xid import XID_MEANING, XID_UNKNOWN, xid_meaning
from soak.record.events import EventLog
from soak.record.gpu_telemetry import GpuView
from soak.record.journal import JsonlWriter
from soak.watch.gpu.dcgm import DcgmWatch
from soak.watch.gpu.nvml import NvmlWatch
from soak.watch.gpu.sources import gpu_entries
from tests.core.test_nvml import FakeGpu, FakeNvml
from tui.panes import gpus


def badges(entry: object) -> list[tuple[str, str]]:
    """The GPU pane's badges for a snapshot entry as its writer made it."""
    return gpus.badges(GpuView.model_validate(entry))


UNKNOWN = 999
"""An Xid code in ``--ignore-xid``'s range that soaktop's table does not know."""
H200 = "GPU 1 (NVIDIA H200)"


def quiet_nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """Two stubbed H200s with every event type and no other trouble: no ECC growth, no
    throttling, no lost GPU, so the only fault is the Xid a test posts."""
    gpus = [FakeGpu(i, "NVIDIA H200", not_supported=("retired_pages", "pcie")) for i in (0, 1)]
    for g in gpus:
        g.ecc = [0, 0, 0]
    fake = FakeNvml(gpus)
    fake.install(monkeypatch)
    return fake


async def nvml_after_xid(fake: FakeNvml, run_dir: Path, xid: int) -> tuple[NvmlWatch, EventLog]:
    """An open ``NvmlWatch`` that read once, got ``xid`` on GPU 1 as an NVML event, and
    read again (the caller stops it)."""
    origin = time.perf_counter_ns()
    events = EventLog(JsonlWriter(run_dir / "events.jsonl"), origin)
    watch = NvmlWatch(origin, JsonlWriter(run_dir / "telemetry.jsonl"), events)
    assert await watch.open()
    await watch.sample()
    fake.post(1, xid)
    for _ in range(300):  # the Xid thread delivers in its own time
        if watch.drain_events():
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the stubbed Xid event never arrived")
    await watch.sample()
    return watch, events


def dcgm_after_xid(run_dir: Path, xid: int) -> tuple[DcgmWatch, EventLog]:
    """A ``DcgmWatch`` whose exporter showed GPU 1's last-Xid gauge at 0, then at ``xid``
    (no ``err_msg``: soaktop's own words)."""
    origin = time.perf_counter_ns()
    events = EventLog(JsonlWriter(run_dir / "events.jsonl"), origin)
    watch = DcgmWatch(
        ["http://unused:9400"], origin, JsonlWriter(run_dir / "telemetry.jsonl"), events
    )

    def gpu(i: int, last: int) -> GpuReading:
        return GpuReading(host=None, index=i, uuid=f"GPU-{i}", name="NVIDIA H200", last_xid=last)

    for t, last in ((1.0, 0), (2.0, xid)):
        watch._take(0, DcgmSample(t=t, readings=[gpu(0, 0), gpu(1, last)]))
    return watch, events


def _gpu1(entries: list[dict[str, object]]) -> dict[str, Any]:
    (entry,) = [e for e in entries if e.get("index") == 1]
    return entry


async def test_an_nvml_xid_reaches_the_snapshot_like_a_dcgm_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = quiet_nvml(monkeypatch)
    nvml, _ = await nvml_after_xid(fake, tmp_path, 31)
    try:
        nvml_views = gpu_entries([nvml], "view")
        nvml_record = _gpu1(gpu_entries([nvml], "summary"))
    finally:
        await nvml.stop()
    (tmp_path / "dcgm").mkdir()
    dcgm, _ = dcgm_after_xid(tmp_path / "dcgm", 31)
    dcgm_views = gpu_entries([dcgm], "view")
    dcgm_record = _gpu1(gpu_entries([dcgm], "summary"))
    await dcgm.stop()
    nvml_view, dcgm_view = _gpu1(nvml_views), _gpu1(dcgm_views)

    # the snapshot says the Xid, as DCGM's does, and as the record says it
    assert (nvml_view["status"], nvml_view["last_xid"], nvml_view["faults"]) == ("ok", 31, 1)
    assert (dcgm_view["status"], dcgm_view["last_xid"], dcgm_view["faults"]) == ("ok", 31, 1)
    assert nvml_record["last_xid"] == dcgm_record["last_xid"] == 31
    # so the GPU pane badges both the same: the Xid, not an anonymous fault
    assert [word.strip() for word, _ in badges(nvml_view)] == ["XID 31"]
    assert badges(nvml_view) == badges(dcgm_view)
    # the GPU without an Xid: nothing to badge on either path (no Xid yet is None for
    # NVML, which has no gauge, and 0 for DCGM's gauge)
    (nvml0,) = [e for e in nvml_views if e["index"] == 0]
    (dcgm0,) = [e for e in dcgm_views if e["index"] == 0]
    assert (nvml0["last_xid"], dcgm0["last_xid"]) == (None, 0)
    assert badges(nvml0) == badges(dcgm0) == []


async def test_later_nvml_readings_keep_the_xid_on_screen(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The Xid is kept on the GPU, not on a reading: later readings (which carry no Xid
    from NVML) do not hide it."""
    fake = quiet_nvml(monkeypatch)
    nvml, _ = await nvml_after_xid(fake, tmp_path, 79)
    try:
        for _ in range(2):
            await nvml.sample()
        view = _gpu1(nvml.view())
    finally:
        await nvml.stop()
    assert (view["last_xid"], view["faults"]) == (79, 1)
    assert view["last_xid"] == _gpu1(nvml.summary())["last_xid"]


def test_the_unknown_xid_wording_is_one_sentence() -> None:
    assert UNKNOWN not in XID_MEANING
    assert XID_UNKNOWN == "not in soaktop's Xid table (see NVIDIA's Xid catalogue)"
    assert xid_meaning(UNKNOWN) == XID_UNKNOWN
    assert xid_meaning(31) == XID_MEANING[31] == "GPU memory page fault (illegal memory access)"
    # a DCGM exporter's own words come after soaktop's table, before the unknown wording
    assert xid_meaning(UNKNOWN, "Some exporter words") == "Some exporter words"
    assert xid_meaning(31, "GPU memory page fault") == XID_MEANING[31]


async def test_an_unknown_xid_is_worded_the_same_by_nvml_dcgm_and_the_server_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    said = f"Xid {UNKNOWN} — not in soaktop's Xid table (see NVIDIA's Xid catalogue)"
    fake = quiet_nvml(monkeypatch)
    nvml, nvml_events = await nvml_after_xid(fake, tmp_path, UNKNOWN)
    await nvml.stop()
    (tmp_path / "dcgm").mkdir()
    dcgm, dcgm_events = dcgm_after_xid(tmp_path / "dcgm", UNKNOWN)
    await dcgm.stop()

    sources: list[tuple[NvmlWatch | DcgmWatch, EventLog]] = [
        (nvml, nvml_events),
        (dcgm, dcgm_events),
    ]
    for watch, events in sources:
        (fault,) = [e for e in events.take_pending() if e.kind == "fault"]
        assert fault.message.endswith(f": {said}"), fault.message
        assert fault.data["meaning"] == XID_UNKNOWN
        (reason,) = watch.fault_reasons()
        assert f": {said}, " in reason.message
        (xe,) = _gpu1(watch.summary())["xid_events"]
        assert (xe["xid"], xe["meaning"]) == (UNKNOWN, XID_UNKNOWN)

    log = classify(f"[18756.5] NVRM: Xid (PCI:0000:3b:00): {UNKNOWN}, pid=8167, name=python")
    assert log is not None and log.kind == "xid"
    where = f"Xid {UNKNOWN} on PCI:0000:3b:00"
    assert log.summary == f"{where}: not in soaktop's Xid table (see NVIDIA's Xid catalogue)"
