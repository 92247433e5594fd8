"""Pane contents built straight from a RunView (no app): words for every state."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from probes.gpu_reading import GpuReading
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter
from soak.watch.gpu.ledger import GpuLedger
from tests.tui.helpers import snapshot_of
from tui.glyphs import ASCII
from tui.panes import GatesPane, GpuPane, HeaderPane
from tui.reader import RunMeta, load_replay
from tui.runview import RunView


def view(snapshot: dict[str, Any], **kw: Any) -> RunView:
    return RunView(
        mode="live", snapshot=snapshot_of(snapshot), meta=RunMeta(run_dir=Path("r")), **kw
    )


def threshold(condition: str, state: str, observed: float | None) -> dict[str, Any]:
    """A live threshold state as the runner writes it."""
    metric, limit = condition.split("<")
    return {
        "expr": condition,
        "condition": condition,
        "metric": metric,
        "state": state,
        "observed": observed,
        "limit": float(limit.rstrip("sC%")),
        "source": "live histogram (1 % buckets)",
    }


def test_gates_canary_and_thresholds_in_words() -> None:
    snap = {
        "phase": "load",
        "gates": {
            "before": {"json": {"passed": 24, "total": 24, "done": 24, "failed": 0}},
            "canary": {"json": {"passed": 3, "total": 4, "done": 4, "failed": 1, "rounds": 2}},
        },
        "thresholds": [
            threshold("ttft.p99<2s", "ok", 0.09),
            threshold("error_rate<0.1%", "breached", 0.02),
            threshold("gpu.temp<85C", "no_data", None),
        ],
    }
    text = GatesPane().build(view(snap), 60, 10).plain
    lines = text.splitlines()
    assert lines[0].startswith("before json 24/24 PASS")
    assert lines[1].startswith("canary json 3/4 FAIL (2 rounds)")
    assert "thresholds 3 set, 1 breached" in text
    # breached first, then no data, then ok: the ones that matter survive clipping
    assert lines[3:6] == [
        "error_rate<0.1% BREACHED (observed 0.02)",
        "gpu.temp<85C no data (observed —)",
        "ttft.p99<2s ok (observed 0.09)",
    ]


def test_gates_running_phase_counts_what_is_done() -> None:
    snap = {
        "phase": "after_gates",
        "gates": {"after": {"json": {"passed": 3, "total": 24, "done": 3, "failed": 0}}},
    }
    assert "after  json 3/24 3 done" in GatesPane().build(view(snap), 60, 5).plain
    header = HeaderPane().build(view(snap), 80, 3).plain
    assert "after gates 3/24 probes" in header


def test_gpu_badges_for_ecc_throttle_and_missing_values(tmp_path: Path) -> None:
    # GPU 0 as the GPU ledger writes it: two new uncorrectable ECC errors between two
    # readings are a fault event (the entry itself has no ECC count), throttle reasons words.
    ledger = GpuLedger("nvml", EventLog(JsonlWriter(tmp_path / "events.jsonl"), 0))
    first = GpuReading(
        host=None,
        index=0,
        uuid=None,
        name=None,
        memory_used_mib=10,
        memory_total_mib=80,
        throttle=("hw slowdown",),
        ecc_dbe_volatile=0,
    )
    gpu0 = ledger.add(0, first, at_start=True, where="NVML", tag={"source": "nvml"})
    ledger.reading(gpu0, first, 1.0)
    ledger.reading(gpu0, replace(first, ecc_dbe_volatile=2), 2.0)
    events = load_replay(tmp_path).events
    assert [e.facts.ecc_new for e in events if e.event.kind == "fault"] == [2]
    gpus = [
        ledger.view_entry(gpu0),
        {"index": 1, "status": "ok"},
        {"index": 2, "status": "scrape failed", "error": "timeout"},
    ]
    text = GpuPane().build(view({"telemetry": {"gpus": gpus}}, events=events), 60, 6).plain
    rows = text.splitlines()
    assert "ECC 2" in rows[1] and "THROTTLE" in rows[1] and "12%" in rows[1]
    assert rows[2].startswith("1") and "—" in rows[2]  # no data, not zero
    assert rows[3].startswith("2   scrape failed")


def test_header_in_ascii_with_a_notice() -> None:
    snap = {
        "run_id": "r1",
        "phase": "load",
        "status": "running",
        "load": {"issue_elapsed_s": 30, "issue_total_s": 120, "failed": 2},
    }
    v = view(snap, glyphs=ASCII, notice="stop asked", paused=True)
    text = HeaderPane().build(v, 80, 4).plain
    assert text.isascii()
    assert "load 00:30 of 02:00" in text and "25%" in text
    assert "PAUSED" in text and "stop asked" in text and "2 failed requests" in text
