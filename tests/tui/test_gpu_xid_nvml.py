"""The GPU pane after an Xid from local NVML: ``XID 31`` on the GPU's row, as for DCGM.

The snapshot's GPU entries are not hand-written: the real ``NvmlWatch`` (stubbed
``pynvml`` functions) takes an Xid 31 event, and its entries go through the runner's own
path (``gpu_entries`` → ``Snapshot`` → JSON) into a copy of the xid-mid-run fixture in
place of its DCGM entries. So the pane sees the shape the writer produces, no other.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from soak.record.gpu_telemetry import GpuView
from soak.record.snapshot import Snapshot
from soak.watch.gpu.sources import gpu_entries
from tests.core.test_gpu_xid_paths import nvml_after_xid, quiet_nvml
from tests.tui.helpers import XID, LiveRun, live_app
from tui.panes import GpuPane

AFTER_XID = 10
"""The fixture's snapshot just after its Xid (16 s into the run)."""


async def test_an_nvml_xid_shows_as_xid_31_not_fault_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = quiet_nvml(monkeypatch)
    (tmp_path / "nvml").mkdir()
    watch, _ = await nvml_after_xid(fake, tmp_path / "nvml", 31)
    try:
        entries = gpu_entries([watch], "view")
    finally:
        await watch.stop()
    run = LiveRun(XID, tmp_path / "run")
    snap = Snapshot.model_validate(run.snaps[AFTER_XID])
    snap.telemetry.gpus = [GpuView.model_validate(e) for e in entries]
    run.snaps[AFTER_XID] = orjson.loads(orjson.dumps(snap.model_dump(mode="json")))
    run.write_until(AFTER_XID)

    for size in ((80, 24), (160, 48)):
        app = live_app(run.dir)
        async with app.run_test(size=size) as pilot:
            await app.poll_now()
            await pilot.pause()
            pane = app.screen.query_one(GpuPane).plain_text
        rows = [r for r in pane.splitlines() if r[:1].isdigit()]
        assert [r.split()[0] for r in rows] == ["0", "1"], pane  # NVML: no exporter prefix
        assert "XID 31" in rows[1] and "XID" not in rows[0], pane
        assert "FAULT" not in pane, pane
