"""Pane contents built straight from a RunView (no app): words for every state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tui.glyphs import ASCII
from tui.panes import GatesPane, GpuPane, HeaderPane
from tui.reader import RunMeta
from tui.runview import RunView


def view(snapshot: dict[str, Any], **kw: Any) -> RunView:
    return RunView(mode="live", snapshot=snapshot, meta=RunMeta(run_dir=Path("r")), **kw)


def test_gates_canary_and_thresholds_in_words() -> None:
    snap = {
        "phase": "load",
        "gates": {
            "before": {"json": {"passed": 24, "total": 24, "done": 24, "failed": 0}},
            "canary": {"json": {"passed": 3, "total": 4, "done": 4, "failed": 1, "rounds": 2}},
        },
        "thresholds": [
            {"condition": "ttft.p99<2s", "state": "ok", "observed": 0.09},
            {"condition": "error_rate<0.1%", "state": "breached", "observed": 0.02},
            {"condition": "gpu.temp<85C", "state": "no_data", "observed": None},
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


def test_gpu_badges_for_ecc_throttle_and_missing_values() -> None:
    gpus = [
        {
            "index": 0,
            "status": "ok",
            "memory_used_mib": 10,
            "memory_total_mib": 80,
            "ecc_dbe_volatile": 2,
            "throttle": "hw_slowdown",
        },
        {"index": 1, "status": "ok"},
        {"index": 2, "status": "scrape failed", "error": "timeout"},
    ]
    text = GpuPane().build(view({"telemetry": {"gpus": gpus}}), 60, 6).plain
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
