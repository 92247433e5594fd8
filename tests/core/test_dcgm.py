"""GPU telemetry from a dcgm-exporter: the parser, and DcgmWatch's events, view and record."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest

from probes.dcgm import DcgmSample, _metrics_url, parse_dcgm
from probes.gpu_reading import GpuReading, throttle_words
from probes.xid import XID_MEANING
from simengine.dcgm import DcgmExporter, fake_uuid
from soak.cli.demo import simulated_engine
from soak.judge.thresholds import metrics_from_record
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter, read_jsonl
from soak.watch.gpu.dcgm import DcgmWatch

pytestmark = pytest.mark.timeout(60)

UUID0 = "GPU-5e1d7a2c-9b0f-4c3e-8a61-0f2b7d9e4c11"
UUID1 = "GPU-a83f0b6e-21c4-47d9-b5e2-6c0d13f8a972"
_L0 = (
    f'gpu="0",UUID="{UUID0}",pci_bus_id="00000000:18:00.0",device="nvidia0",'
    'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-07",'
    'DCGM_FI_DRIVER_VERSION="550.127.08"'
)
_L1 = (
    f'gpu="1",UUID="{UUID1}",pci_bus_id="00000000:2A:00.0",device="nvidia1",'
    'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-07",'
    'DCGM_FI_DRIVER_VERSION="550.127.08",container="vllm",namespace="llm",pod="vllm-0"'
)


def _family(name: str, kind: str, help_: str, v0: float, v1: float, extra: str = "") -> str:
    e0, e1 = extra.split("|") if extra else ("", "")
    return (
        f"# HELP {name} {help_}\n# TYPE {name} {kind}\n"
        f"{name}{{{_L0}{e0}}} {v0}\n{name}{{{_L1}{e1}}} {v1}\n"
    )


# dcgm-exporter 3.3.x with its default counters file (etc/default-counters.csv): counters
# are declared without ``_total``; XID_ERRORS carries err_code/err_msg on newer builds.
DEFAULT_COUNTERS = "".join(
    (
        _family("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", 1980, 1755),
        _family("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", 2619, 2619),
        _family("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", 49, 52),
        _family("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", 41, 67),
        _family("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", 118.412, 689.9),
        _family(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
            2.1e10,
            3.4e10,
        ),
        _family(
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", 0, 3
        ),
        _family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", 0, 100),
        _family("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", 0, 61),
        _family(
            "DCGM_FI_DEV_XID_ERRORS",
            "gauge",
            "Value of the last XID error encountered.",
            0,
            31,
            ',err_code="0",err_msg="No Error"|,err_code="31",err_msg="GPU memory page fault"',
        ),
        _family("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", 80532, 6211),
        _family("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", 4, 74325),
        _family(
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for uncorrectable errors",
            0,
            1,
        ),
        _family(
            "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", 0, 0
        ),
    )
)


def test_default_counters_map_to_one_reading_per_gpu():
    gpus = parse_dcgm(DEFAULT_COUNTERS)
    assert [(g.host, g.index, g.uuid) for g in gpus] == [
        ("gpu-node-07", 0, UUID0),
        ("gpu-node-07", 1, UUID1),
    ]
    g0, g1 = gpus
    assert g1.name == "NVIDIA H100 80GB HBM3"
    assert (g1.memory_used_mib, g1.memory_free_mib) == (74325, 6211)
    assert (g1.util_percent, g1.temperature_c, g1.power_w, g1.sm_clock_mhz) == (
        100,
        67,
        689.9,
        1755,
    )
    # counters survive the parser's ``_total`` renaming
    assert g1.pcie_replays == 3 and g1.remapped_rows_uncorrectable == 1
    assert g1.row_remap_failure is False
    assert g1.last_xid == 31 and g1.xid_message == "GPU memory page fault"
    assert g0.last_xid == 0 and g0.xid_message is None
    # not in the default counters file: not supported, never invented
    for g in gpus:
        assert g.memory_total_mib is None  # no FB_TOTAL, no FB_RESERVED: not used + free
        assert g.power_limit_w is None
        assert g.throttle_reasons is None and g.throttle is None
        assert g.ecc_dbe_volatile is None and g.ecc_dbe_aggregate is None
        assert g.row_remap_pending is None


def test_optional_fields_throttle_words_mig_and_non_gpu_samples():
    text = (
        "# TYPE DCGM_FI_DEV_COUNT gauge\nDCGM_FI_DEV_COUNT 2\n"
        + _family("DCGM_FI_DEV_FB_USED", "gauge", "used", 1000, 0)
        + _family("DCGM_FI_DEV_FB_FREE", "gauge", "free", 79000, 0)
        + _family("DCGM_FI_DEV_FB_RESERVED", "gauge", "reserved", 559, 0)
        + _family("DCGM_FI_DEV_FB_TOTAL", "gauge", "total", 81559, 81559)
        + _family("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "gauge", "limit", 700, 650)
        + _family("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "mgmt", 999, 999)
        + _family("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "reasons", 0x44, 0)
        + _family("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "dbe vol", 0, 2)
        + _family("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter", "dbe agg", 1, 7)
        + _family("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "pending", 0, 1)
        + _family("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "failed", 0, 1)
    )
    g0, g1 = parse_dcgm(text)
    assert g0.memory_total_mib == 81559  # FB_TOTAL wins
    assert g0.power_limit_w == 700  # the enforced limit before the management one
    assert g0.throttle_reasons == 0x44 and g0.throttle == ("sw power cap", "hw thermal")
    assert g1.throttle == ()  # exported, nothing active
    assert (g1.ecc_dbe_volatile, g1.ecc_dbe_aggregate) == (2, 7)
    assert g1.row_remap_pending is True and g1.row_remap_failure is True

    # total from used + free + reserved; the pre-3.3 throttle name; MIG instances folded
    mig = '{gpu="0",UUID="GPU-m",modelName="NVIDIA A100-SXM4-80GB",Hostname="h",GPU_I_ID="%d"}'
    text = (
        "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
        f"DCGM_FI_DEV_FB_USED{mig % 1} 100\nDCGM_FI_DEV_FB_USED{mig % 2} 200\n"
        "# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
        f"DCGM_FI_DEV_FB_FREE{mig % 1} 9000\nDCGM_FI_DEV_FB_FREE{mig % 2} 9500\n"
        "# TYPE DCGM_FI_DEV_FB_RESERVED gauge\n"
        f"DCGM_FI_DEV_FB_RESERVED{mig % 1} 10\nDCGM_FI_DEV_FB_RESERVED{mig % 2} 10\n"
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        f"DCGM_FI_DEV_GPU_TEMP{mig % 1} 40\nDCGM_FI_DEV_GPU_TEMP{mig % 2} 41\n"
        "# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge\n"
        'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",UUID="GPU-m",Hostname="h"} 1\n'
    )
    (g,) = parse_dcgm(text)
    assert (g.memory_used_mib, g.memory_free_mib, g.memory_total_mib) == (300, 18500, 18820)
    assert g.temperature_c == 41 and g.throttle == ("gpu idle",)
    assert g.name == "NVIDIA A100-SXM4-80GB" and g.last_xid is None


def test_throttle_words_follow_nvml_bits():
    assert throttle_words(0) == ()
    assert throttle_words(0x1FF) == (
        "gpu idle",
        "applications clocks setting",
        "sw power cap",
        "hw slowdown",
        "sync boost",
        "sw thermal",
        "hw thermal",
        "hw power brake",
        "display clocks",
    )
    assert throttle_words(0x88) == ("hw slowdown", "hw power brake")
    assert throttle_words(0x500) == ("display clocks", "unknown 0x400")


def test_the_simulated_exporter_parses_like_the_real_one():
    exporter = DcgmExporter(0, 2, "sim-node", lambda: (0.5, 0.25, True))
    exporter.gpu(1).last_xid = 31
    g0, g1 = parse_dcgm(exporter.render().decode())
    assert (g0.host, g0.index, g0.uuid) == ("sim-node-0", 0, fake_uuid(0, 0))
    assert g1.name == "NVIDIA H200 (simulated)" and g1.uuid == fake_uuid(0, 1)
    assert (g0.last_xid, g1.last_xid) == (0, 31)
    assert g0.memory_used_mib is not None and g0.memory_free_mib is not None
    assert g0.memory_used_mib + g0.memory_free_mib == 143771
    assert g0.memory_total_mib is None  # the sim exports used and free only
    assert g0.util_percent is not None and g0.power_w is not None
    assert g0.temperature_c is not None and g0.sm_clock_mhz is not None
    assert g0.throttle is None and g0.ecc_dbe_volatile is None and g0.pcie_replays is None


def test_metrics_url_with_or_without_the_path():
    assert _metrics_url("http://n:9400") == "http://n:9400/metrics"
    assert _metrics_url("http://n:9400/metrics") == "http://n:9400/metrics"
    assert _metrics_url("http://n:9400/metrics/") == "http://n:9400/metrics"
    assert _metrics_url("n:9400/") == "http://n:9400/metrics"


# --- DcgmWatch ---------------------------------------------------------------------------


def _scrub_ids(v: Any) -> Any:
    """A stand-in redactor that drops GPU UUIDs and simulated hostnames."""
    if isinstance(v, str):
        return re.sub(r"sim-node-\d+", "<host>", re.sub(r"GPU-[0-9a-f-]{36}", "<uuid>", v))
    if isinstance(v, dict):
        return {k: _scrub_ids(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_scrub_ids(x) for x in v]
    return v


def _watch(tmp_path: Path, urls: list[str], **kw: Any) -> tuple[DcgmWatch, EventLog]:
    origin = time.perf_counter_ns()
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), origin)
    watch = DcgmWatch(urls, origin, JsonlWriter(tmp_path / "telemetry.jsonl"), events, **kw)
    return watch, events


@pytest.mark.e2e
async def test_xid_on_the_simulated_engine_is_one_fault_event(tmp_path):
    fault = '{"at_s": 0.5, "action": "xid", "xid": 31, "gpu": 1}'
    with simulated_engine(replicas=1, gpus_per_replica=2, extra_args=["--fault", fault]) as sim:
        replica = sim.ready["replicas"][0]
        watch, events = _watch(tmp_path, [replica["dcgm_url"]], interval_s=0.2, scrub=_scrub_ids)
        watch.start()
        try:
            for _ in range(100):
                if watch.scrapes[0]:
                    break
                await asyncio.sleep(0.05)
            async with httpx.AsyncClient(timeout=10) as client:
                r = await client.post(
                    f"{replica['url']}/v1/chat/completions",
                    headers={"X-Request-Id": "run-x/load/chat/1"},
                    json={
                        "model": sim.model,
                        "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 4,
                    },
                )
                assert r.status_code == 200
            seen: list[Any] = []
            for _ in range(100):
                seen += [e for e in events.take_pending() if e.kind == "fault"]
                if seen:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.6)  # a few more scrapes: the sticky gauge fires once
            seen += [e for e in events.take_pending() if e.kind == "fault"]
        finally:
            await watch.stop()

    assert len(seen) == 1, [e.message for e in seen]
    ev = seen[0]
    assert ev.severity == "critical"
    assert ev.message == (
        "GPU 1 (NVIDIA H200 (simulated), host <host>): "
        "Xid 31 — GPU memory page fault (illegal memory access)"
    )
    assert ev.data["gpu"] == 1 and ev.data["xid"] == 31 and ev.data["uuid"] == "<uuid>"

    # the watch types its entries as objects; the tests read them as the JSON they become
    summary: dict[Any, dict[str, Any]] = {s["index"]: s for s in watch.summary()}
    assert summary[0]["xid_events"] == []
    (xe,) = summary[1]["xid_events"]
    assert xe["xid"] == 31 and xe["meaning"] == XID_MEANING[31] and xe["already_set"] is False
    assert xe["t_s"] > 0 and summary[1]["samples"] >= 3
    assert summary[1]["uuid"] == "<uuid>" and summary[1]["host"] == "<host>"
    assert isinstance(summary[0]["min_free_mib"], float)
    assert isinstance(summary[0]["max_temp_c"], float)
    figures = metrics_from_record(None, {"gpus": watch.summary()})
    assert figures["gpu.min_free_mib"] is not None and figures["gpu.max_temp_c"] is not None

    (reason,) = watch.fault_reasons()
    assert reason.code == "gpu_fault" and reason.effect == "failed"
    assert "GPU 1" in reason.message and "Xid 31" in reason.message
    assert XID_MEANING[31] in reason.message and " at " in reason.message

    view = {v["index"]: v for v in watch.view()}
    assert view[1]["status"] == "ok" and view[1]["last_xid"] == 31
    assert view[0]["last_xid"] == 0 and isinstance(view[0]["memory_free_mib"], float)
    assert view[0]["throttle"] is None  # the sim does not export clock-event reasons

    lines = list(read_jsonl(tmp_path / "telemetry.jsonl"))
    assert lines and all(ln["source"] == "dcgm" and ln["url_index"] == 0 for ln in lines)
    assert [g["index"] for g in lines[-1]["gpus"]] == [0, 1]
    assert lines[-1]["gpus"][1]["last_xid"] == 31
    written = (tmp_path / "telemetry.jsonl").read_text() + (tmp_path / "events.jsonl").read_text()
    assert "sim-node" not in written and fake_uuid(0, 1) not in written


async def test_a_closed_port_is_one_warning_and_the_view_says_why(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    watch, events = _watch(tmp_path, [f"127.0.0.1:{port}"], interval_s=0.05)
    assert watch.view() == [{"url_index": 0, "status": "no data yet"}]
    watch.start()
    try:
        for _ in range(100):
            if watch.scrapes[0] >= 3:
                break
            await asyncio.sleep(0.05)
    finally:
        await watch.stop()
    assert watch.scrapes[0] >= 3 and watch.errors[0] == watch.scrapes[0]
    evs = events.take_pending()
    assert [(e.kind, e.severity) for e in evs] == [("warning", "warning")]
    assert evs[0].message.startswith("GPU telemetry: DCGM exporter 0 scrape failed: ")
    (v,) = watch.view()
    assert v["status"] == "scrape failed" and "Connect" in str(v["error"])
    (s0,) = watch.summary()
    assert s0["status"] == "no data" and s0["scrape_errors"] == watch.scrapes[0]
    assert watch.fault_reasons() == []
    line = next(read_jsonl(tmp_path / "telemetry.jsonl"))
    assert line["source"] == "dcgm" and "Connect" in line["error"]


def _exposition(xid: tuple[int, int], ecc: int = 0, rows: int = 0, fail: int = 0) -> str:
    return (
        _family("DCGM_FI_DEV_XID_ERRORS", "gauge", "last xid", *xid)
        + _family("DCGM_FI_DEV_FB_FREE", "gauge", "free", 1000, 2000)
        + _family("DCGM_FI_DEV_GPU_TEMP", "gauge", "temp", 40, 50)
        + _family("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "dbe", 0, ecc)
        + _family("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "rows", 0, rows)
        + _family("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "failed", 0, fail)
        + _family("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "reasons", 0x1, 0x40)
    )


def _only(text: str, gpu: int) -> str:
    keep = f'gpu="{gpu}"'
    return "".join(ln + "\n" for ln in text.splitlines() if ln.startswith("#") or keep in ln)


async def test_event_rules_baseline_changes_memory_faults_and_recovery(tmp_path):
    watch, events = _watch(tmp_path, ["http://unused:9400"])
    t = iter(range(1, 100))

    def take(text: str | None) -> list[tuple[str, str, str]]:
        s = (
            DcgmSample(t=float(next(t)), error="ConnectError: refused")
            if text is None
            else DcgmSample(t=float(next(t)), readings=parse_dcgm(text))
        )
        watch._take(0, s)
        return [(e.kind, e.severity, e.message) for e in events.take_pending()]

    label0 = "GPU 0 (NVIDIA H100 80GB HBM3, host gpu-node-07)"
    label1 = "GPU 1 (NVIDIA H100 80GB HBM3, host gpu-node-07)"
    # already set at the first reading: reported once, a note
    assert take(_exposition((13, 0))) == [
        ("fault", "warning", f"{label0}: Xid 13 — {XID_MEANING[13]} (already set at start)")
    ]
    assert take(_exposition((13, 0))) == []
    # new uncorrectable ECC errors and remapped rows, then a failed remap
    assert take(_exposition((13, 0), ecc=2, rows=1)) == [
        ("fault", "critical", f"{label1}: 2 new uncorrectable ECC error(s) (volatile total 2)"),
        (
            "fault",
            "critical",
            f"{label1}: 1 more row(s) remapped after uncorrectable memory errors (total 1)",
        ),
    ]
    assert take(_exposition((13, 0), ecc=2, rows=1, fail=1)) == [
        ("fault", "critical", f"{label1}: row remapping failed — the GPU needs service")
    ]
    # the exporter restarted (Xid back to 0) and GPU 1 dropped out of its output: a GPU
    # that falls off the bus takes its Xid gauge with it, so this alone must fail the run
    assert take(_only(_exposition((0, 0), ecc=2, rows=1, fail=1), 0)) == [
        (
            "fault",
            "critical",
            f"{label1}: no longer in DCGM exporter 0's output (GPU lost or exporter reconfigured)",
        )
    ]
    assert any(
        "no longer in DCGM" in r.message and r.effect == "failed" for r in watch.fault_reasons()
    )
    assert [v["status"] for v in watch.view()] == ["ok", "missing"]
    # scrape trouble: one warning per change
    assert take(None) == [
        (
            "warning",
            "warning",
            "GPU telemetry: DCGM exporter 0 scrape failed: ConnectError: refused",
        )
    ]
    assert take(None) == []
    assert [(v["index"], v["status"]) for v in watch.view()] == [
        (0, "scrape failed"),
        (1, "scrape failed"),
    ]
    assert "memory_free_mib" not in watch.view()[0]  # nothing stale
    assert take(_exposition((13, 0), ecc=2, rows=1, fail=1)) == [
        (
            "warning",
            "info",
            "GPU telemetry: DCGM exporter 0 answers again after 2 failed scrape(s)",
        ),
        # after the reset to 0, the same Xid number is a new one
        ("fault", "critical", f"{label0}: Xid 13 — {XID_MEANING[13]}"),
        ("warning", "info", f"{label1}: back in DCGM exporter 0's output"),
    ]

    reasons = watch.fault_reasons()
    assert [r.effect for r in reasons] == ["note"] + ["failed"] * 5  # the drop-out is one
    assert all(r.code == "gpu_fault" for r in reasons)
    assert "not counted as a run fault" in reasons[0].message
    assert reasons[-1].message.endswith("at 8.0 s (DCGM exporter 0)")

    s0, s1 = cast(list[dict[str, Any]], watch.summary())
    assert [(x["xid"], x["already_set"]) for x in s0["xid_events"]] == [(13, True), (13, False)]
    assert s0["throttle_seen"] == ["gpu idle"] and s1["throttle_seen"] == ["hw thermal"]
    # readings at 1, 2, 3, 4, 5 and 8 s, each reason held until the next reading
    assert s0["throttle_s"] == {"gpu idle": 7.0}
    assert (s1["ecc_new"], s1["remapped_rows_new"], s1["remap_failed"]) == (2, 1, True)
    assert (s0["min_free_mib"], s0["max_temp_c"], s0["samples"]) == (1000, 40, 6)
    assert s0["max_power_w"] is None and s0["max_used_mib"] is None  # not exported
    v0 = watch.view()[0]
    assert v0["throttle"] == ["gpu idle"] and v0["last_xid"] == 13 and v0["faults"] == 2
    events_file = [orjson.loads(x) for x in (tmp_path / "events.jsonl").read_bytes().splitlines()]
    # one fault event per reason above (the GPU dropping out is one of them)
    assert sum(e["kind"] == "fault" for e in events_file) == len(reasons) == 6
    await watch.stop()


async def test_an_ignored_xid_is_recorded_as_a_note_not_a_failure(tmp_path):
    watch, events = _watch(
        tmp_path, ["http://unused:9400"], ignore_xid=[45], when=lambda t: f"at load+{t:.0f}s"
    )
    for i, xid in enumerate(((0, 0), (45, 0), (45, 31))):
        watch._take(0, DcgmSample(t=float(i), readings=parse_dcgm(_exposition(xid))))
    faults = [(e.severity, e.message) for e in events.take_pending() if e.kind == "fault"]
    label0 = "GPU 0 (NVIDIA H100 80GB HBM3, host gpu-node-07)"
    label1 = "GPU 1 (NVIDIA H100 80GB HBM3, host gpu-node-07)"
    assert faults == [
        ("warning", f"{label0}: Xid 45 — {XID_MEANING[45]} (ignored: --ignore-xid)"),
        ("critical", f"{label1}: Xid 31 — {XID_MEANING[31]}"),
    ]
    reasons = [(r.effect, r.message) for r in watch.fault_reasons()]
    assert reasons == [
        (
            "note",
            f"{label0}: Xid 45 — {XID_MEANING[45]}, at load+1s (DCGM exporter 0); "
            "waived by --ignore-xid",
        ),
        ("failed", f"{label1}: Xid 31 — {XID_MEANING[31]}, at load+2s (DCGM exporter 0)"),
    ]
    # still in the record's Xid list: waived, not forgotten
    gpu0: dict[str, Any] = watch.summary()[0]
    assert [x["xid"] for x in gpu0["xid_events"]] == [45]
    await watch.stop()


async def test_an_xid_sequence_gives_exactly_these_events_reasons_and_entries(tmp_path):
    """DcgmWatch's output shapes (now built by the shared GpuLedger), as literal values: a
    baseline Xid is a note, a repeat is nothing, a reset to 0 only moves the baseline and
    later changes are faults. Key order counts too (it is the order written)."""
    watch, events = _watch(tmp_path, ["http://unused:9400"])
    h100 = "NVIDIA H100 80GB HBM3"

    def gpu(i: int, xid: int) -> GpuReading:
        return GpuReading(
            host="gpu-node-07",
            index=i,
            uuid=f"GPU-{i}",
            name=h100,
            memory_free_mib=1000.0 - 10 * i,
            temperature_c=40.0 + i,
            power_w=300.0 if i else None,
            throttle=("gpu idle",) if i == 0 else ("hw thermal",),
            last_xid=xid,
        )

    for n, (x0, x1) in enumerate([(13, 0), (13, 0), (0, 0), (13, 31), (43, 31)]):
        watch._take(0, DcgmSample(t=n + 1.0, readings=[gpu(0, x0), gpu(1, x1)]))

    def ident(i: int) -> dict[str, Any]:
        return {"url_index": 0, "index": i, "name": h100, "host": "gpu-node-07"}

    def xid(i: int, x: int, meaning: str, t: float, already: bool) -> dict[str, Any]:
        reason, effect = verdict_words[(i, x, t)]  # the verdict's words travel with the event
        return {
            "source": "dcgm",
            "url_index": 0,
            "gpu": i,
            "name": h100,
            "host": "gpu-node-07",
            "uuid": f"GPU-{i}",
            "fault": "xid",
            "reason": reason,
            "effect": effect,
            "xid": x,
            "meaning": meaning,
            "t_s": t,
            "already_set": already,
        }

    gpu0 = f"GPU 0 ({h100}, host gpu-node-07)"
    gpu1 = f"GPU 1 ({h100}, host gpu-node-07)"
    x13, x31 = "graphics engine exception", "GPU memory page fault (illegal memory access)"
    x43 = "channel stopped after an application fault"
    verdict_words = {
        (0, 13, 1.0): (
            f"{gpu0}: Xid 13 — {x13} was already set at start "
            "(DCGM exporter 0; time unknown, not counted as a run fault)",
            "note",
        ),
        (0, 13, 4.0): (f"{gpu0}: Xid 13 — {x13}, at 4.0 s (DCGM exporter 0)", "failed"),
        (1, 31, 4.0): (f"{gpu1}: Xid 31 — {x31}, at 4.0 s (DCGM exporter 0)", "failed"),
        (0, 43, 5.0): (f"{gpu0}: Xid 43 — {x43}, at 5.0 s (DCGM exporter 0)", "failed"),
    }
    expected_events = [
        (
            "fault",
            "warning",
            f"{gpu0}: Xid 13 — {x13} (already set at start)",
            xid(0, 13, x13, 1.0, True),
        ),
        ("fault", "critical", f"{gpu0}: Xid 13 — {x13}", xid(0, 13, x13, 4.0, False)),
        ("fault", "critical", f"{gpu1}: Xid 31 — {x31}", xid(1, 31, x31, 4.0, False)),
        ("fault", "critical", f"{gpu0}: Xid 43 — {x43}", xid(0, 43, x43, 5.0, False)),
    ]
    evs = events.take_pending()
    assert [(e.kind, e.severity, e.message, e.data) for e in evs] == expected_events
    assert [list(e.data) for e in evs] == [list(x[3]) for x in expected_events]
    assert [(r.code, r.effect, r.message) for r in watch.fault_reasons()] == [
        (
            "gpu_fault",
            "note",
            f"{gpu0}: Xid 13 — {x13} was already set at start "
            "(DCGM exporter 0; time unknown, not counted as a run fault)",
        ),
        (
            "gpu_fault",
            "failed",
            f"{gpu0}: Xid 13 — {x13}, at 4.0 s (DCGM exporter 0)",
        ),
        (
            "gpu_fault",
            "failed",
            f"{gpu1}: Xid 31 — {x31}, at 4.0 s (DCGM exporter 0)",
        ),
        (
            "gpu_fault",
            "failed",
            f"{gpu0}: Xid 43 — {x43}, at 5.0 s (DCGM exporter 0)",
        ),
    ]

    def summary(i: int, last: int, xids: list[tuple[float, int, str, bool]]) -> dict[str, Any]:
        return ident(i) | {
            "uuid": f"GPU-{i}",
            "min_free_mib": 1000.0 - 10 * i,
            "max_used_mib": None,
            "max_temp_c": 40.0 + i,
            "max_power_w": 300.0 if i else None,
            "last_xid": last,
            "xid_events": [
                {"t_s": t, "xid": x, "meaning": m, "already_set": a} for t, x, m, a in xids
            ],
            "xid_events_dropped": 0,
            "ecc_new": None,
            "remapped_rows_new": None,
            "remap_failed": None,
            "throttle_seen": ["hw thermal" if i else "gpu idle"],
            "throttle_s": {"hw thermal" if i else "gpu idle": 4.0},
            "samples": 5,
            "scrape_errors": 0,
        }

    expected_summary = [
        summary(0, 43, [(1.0, 13, x13, True), (4.0, 13, x13, False), (5.0, 43, x43, False)]),
        summary(1, 31, [(4.0, 31, x31, False)]),
    ]
    assert watch.summary() == expected_summary
    assert [list(s) for s in watch.summary()] == [list(s) for s in expected_summary]

    def view(i: int, last: int, faults: int) -> dict[str, Any]:
        return ident(i) | {
            "status": "ok",
            "t": 5.0,
            "memory_free_mib": 1000.0 - 10 * i,
            "memory_used_mib": None,
            "memory_total_mib": None,
            "util_percent": None,
            "temperature_c": 40.0 + i,
            "power_w": 300.0 if i else None,
            "power_limit_w": None,
            "sm_clock_mhz": None,
            "throttle": ["hw thermal" if i else "gpu idle"],
            "last_xid": last,
            "faults": faults,
        }

    expected_view = [view(0, 43, 3), view(1, 31, 1)]
    assert watch.view() == expected_view
    assert [list(v) for v in watch.view()] == [list(v) for v in expected_view]
    expected_identity = [ident(i) | {"uuid": f"GPU-{i}", "source": "dcgm"} for i in (0, 1)]
    assert watch.identity() == expected_identity
    assert [list(v) for v in watch.identity()] == [list(v) for v in expected_identity]
    await watch.stop()
