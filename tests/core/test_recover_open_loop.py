"""``soaktop recover`` of an open-loop run rebuilds its open-loop figures (offered and
achieved rate, lateness, latency from the intended send, held_by_cap) as the runner
would have written them, and ``soaktop verify`` of the recovered record passes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from soak.cli.demo import SimHandle, simulated_engine
from tests.e2e.conftest import (
    journal,
    only_run_dir,
    record,
    run_args,
    run_soaktop,
    soaktop,
    wait_for_phase,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def sim() -> Iterator[SimHandle]:
    with simulated_engine(
        replicas=1, gpus_per_replica=1, extra_args=["--decode-ms-base", "5"]
    ) as h:
        yield h


@pytest.fixture(scope="module")
def finished(sim: SimHandle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One open-loop run the runner finished itself (its record is the reference)."""
    out = tmp_path_factory.mktemp("runs")
    flags = ("--arrival", "poisson", "--rate", "20", "--duration", "8", "--max-tokens", "16")
    rc, text = run_soaktop(*run_args(sim, out, *flags), timeout=120)
    assert rc in (0, 3), text  # INVALID only for a loaded machine's client lag
    return only_run_dir(out)


def _as_if_the_runner_died(finished: Path, target: Path) -> Path:
    shutil.copytree(finished, target)
    for name in ("record.json", "summary.csv"):
        (target / name).unlink()
    return target


def _recover(run_dir: Path) -> dict[str, Any]:
    rc, text = run_soaktop("recover", str(run_dir))
    assert rc == 0 and "ABORTED" in text, text  # recover itself succeeded
    rc, text = run_soaktop("verify", str(run_dir))
    assert rc == 0, text
    return record(run_dir)


def test_recovered_open_loop_figures_match_the_runners(finished: Path, tmp_path: Path) -> None:
    ran = record(finished)["load"]
    rec = _recover(_as_if_the_runner_died(finished, tmp_path / "run"))
    load = rec["load"]
    assert rec["recovered"] is True and rec["status"] == "ABORTED"
    # The window comes from the phase events, not the runner's clock: within a tick.
    assert load["offered_rate"] == pytest.approx(ran["offered_rate"], rel=0.05)
    assert load["achieved_rate"] == pytest.approx(ran["achieved_rate"], rel=0.05)
    assert load["lateness_s"]["n"] == pytest.approx(ran["lateness_s"]["n"], abs=2)
    assert load["e2e_from_intended_s"]["n"] == pytest.approx(ran["e2e_from_intended_s"]["n"], abs=2)
    assert load["held_by_cap"] == ran["held_by_cap"] == 0
    notes = [r["message"] for r in rec["reasons"] if r["code"] == "open_loop_recovered"]
    assert notes and "as of the last snapshot" in notes[0]


def test_without_the_snapshots_counters_held_by_cap_is_unknown(
    finished: Path, tmp_path: Path
) -> None:
    run_dir = _as_if_the_runner_died(finished, tmp_path / "run")
    snaps = [json.loads(x) for x in (run_dir / "snapshots.jsonl").read_text().splitlines()]
    assert any("open_loop" in s for s in snaps)  # the runner writes them (schema 1.4)
    older = [{k: v for k, v in s.items() if k != "open_loop"} for s in snaps]
    (run_dir / "snapshots.jsonl").write_text("".join(json.dumps(s) + "\n" for s in older))
    rec = _recover(run_dir)
    assert rec["load"]["held_by_cap"] is None and rec["load"]["offered_rate"] > 0
    notes = [r["message"] for r in rec["reasons"] if r["code"] == "open_loop_recovered"]
    assert notes and "held_by_cap is not known" in notes[0]


def test_kill_9_mid_open_loop_then_recover(sim: SimHandle, tmp_path: Path) -> None:
    import psutil

    out = tmp_path / "runs"
    flags = ("--arrival", "constant", "--rate", "10", "--duration", "60", "--max-tokens", "16")
    p = soaktop(*run_args(sim, out, *flags))
    run_dir = wait_for_phase(out, "load")
    time.sleep(3)
    os.kill(int((run_dir / "runner.pid").read_text()), signal.SIGKILL)
    p.communicate(timeout=30)
    psutil.wait_procs([], timeout=1)
    rec = _recover(run_dir)
    sent = [ln for ln in journal(run_dir) if ln.get("phase") == "load"]
    load = rec["load"]
    assert load["offered_rate"] == pytest.approx(10.0, rel=0.1)  # a constant schedule
    assert load["lateness_s"]["n"] == len(sent) > 0
    assert load["held_by_cap"] == 0
