"""Live load control end to end (issue 16 §3): ``soaktop control RUN_DIR --rate R`` in the
middle of an open-loop run against the simulated engine leaves a second load step in the
record, the snapshots show the steps and the new target, and ``verify`` agrees."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import journal, record, run_args, run_soaktop, soaktop, wait_for_phase

pytestmark = pytest.mark.e2e


def _snapshots(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "snapshots.jsonl").read_text().splitlines() if x]


def test_control_rate_mid_run_makes_a_second_step(sim, tmp_path):
    out = tmp_path / "runs"
    flags = ("--arrival", "constant", "--rate", "10", "--duration", "12", "--max-tokens", "16")
    p = soaktop(*run_args(sim, out, *flags))
    run_dir = wait_for_phase(out, "load")
    time.sleep(4)
    rc, text = run_soaktop("control", str(run_dir), "--rate", "20", "--note", "e2e")
    assert rc == 0, text
    text, _ = p.communicate(timeout=90)
    assert (run_dir / "control.jsonl").read_text().count('"cmd":"set"') == 1
    rec = record(run_dir)
    steps = rec.get("steps") or []
    assert len(steps) == 2, (steps, text)
    first, second = steps
    assert first["rate_start"] == 10 and second["rate_start"] == 20
    assert second["origin"] == "live" and first["end_s"] == pytest.approx(second["start_s"])
    lines = [ln for ln in journal(run_dir) if ln.get("phase") == "load"]
    after = [ln for ln in lines if ln.get("step") == 1]
    assert after and all(ln["sent_s"] >= second["start_s"] - 0.01 for ln in after)
    # the monitor's figures: the snapshots carry the steps and the new target
    snaps = [s for s in _snapshots(run_dir) if s.get("steps")]
    assert snaps and snaps[-1]["steps"]["current"] == 1
    assert any(s.get("open_loop", {}).get("rate") == 20 for s in snaps)
    assert snaps[-1]["open_loop"]["offered_per_s"] is None  # a changed schedule: the target
    rc, verify_text = run_soaktop("verify", str(run_dir))
    assert rc == 0, verify_text


def test_control_of_a_finished_run_is_refused(sim, tmp_path):
    out = tmp_path / "runs"
    rc, text = run_soaktop(*run_args(sim, out, "--concurrency", "2", "--max-requests", "4"))
    assert rc == 0, text
    run_dir = next(d for d in out.iterdir() if d.is_dir())
    rc, text = run_soaktop("control", str(run_dir), "--concurrency", "4")
    assert rc == 2 and "is finished" in text
    assert not (run_dir / "control.jsonl").exists()


def test_control_concurrency_mid_run_makes_a_second_step(sim, tmp_path):
    out = tmp_path / "runs"
    flags = ("--concurrency", "4", "--duration", "10", "--max-tokens", "16")
    p = soaktop(*run_args(sim, out, *flags))
    run_dir = wait_for_phase(out, "load")
    time.sleep(3)
    rc, text = run_soaktop("control", str(run_dir), "--concurrency", "8")
    assert rc == 0, text
    text, _ = p.communicate(timeout=90)
    steps = record(run_dir).get("steps") or []
    assert [s["concurrency_start"] for s in steps] == [4, 8], (steps, text)
    snaps = [s for s in _snapshots(run_dir) if s.get("steps")]
    assert snaps[-1]["load"]["requested_concurrency"] == 8  # the monitor's "req 8"
    rc, verify_text = run_soaktop("verify", str(run_dir))
    assert rc == 0, verify_text
