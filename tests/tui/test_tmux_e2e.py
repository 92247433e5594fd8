"""End to end in a real pseudo-terminal: ``soaktop demo`` in an 80×24 tmux pane.

Starts the simulated engine and the runner through the console script's code path
(``python -m tui.entry``), reads the screen with ``tmux capture-pane``, quits with ``q``.
The load lasts a few seconds only (``DEMO_S``) and the probes run 16 at a time, to keep
the suite short: the gates before and after the load take most of the time.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tui.helpers import tmux_capture as _capture
from tests.tui.helpers import tmux_wait_for as _wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]
DEMO_S = int(os.environ.get("SOAKTOP_TMUX_DEMO_S", "6"))


def test_demo_in_an_80x24_terminal(tmp_path: Path) -> None:
    session = f"soaktop-e2e-{os.getpid()}"
    exit_file = tmp_path / "exit"
    command = (
        f"cd {shlex.quote(str(ROOT))} && LANG=C.UTF-8 {shlex.quote(sys.executable)} -m tui.entry "
        f"demo --duration {DEMO_S} --probe-concurrency 16 --out {shlex.quote(str(tmp_path))}; "
        f"echo $? > {shlex.quote(str(exit_file))}; sleep 60"
    )
    subprocess.run(
        ["tmux", "new-session", "-d", "-x", "80", "-y", "24", "-s", session, command], check=True
    )
    try:
        live = _wait_for(session, lambda s: "LIVE" in s and "load 00:" in s, 60)
        for title in (
            "2 throughput",
            "3 latency",
            "4 concurrency",
            "5 gates",
            "6 GPUs",
            "7 events",
        ):
            assert title in live
        assert "q Quit" in live and "s Stop" in live
        assert "Detach" not in live  # the demo's engine dies with this process
        done = _wait_for(session, lambda s: "run finished: PASSED" in s, 90)
        assert "after  json 24/24 PASS" in done
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 30
        while not exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert exit_file.read_text().strip() == "0"
        assert "PASSED  tiny-sim__demo__" in _capture(session)  # the report after the app
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)


def test_detach_in_the_monitor_exits_6_and_the_run_goes_on(tmp_path: Path) -> None:
    """``d`` in ``soaktop run``'s monitor: exit code 6 (not 0, which is PASSED), how to
    re-attach on the terminal, and the runner finishes the soak and writes its record."""
    from soak.cli.demo import simulated_engine

    session = f"soaktop-detach-{os.getpid()}"
    exit_file = tmp_path / "exit"
    out = tmp_path / "runs"
    with simulated_engine(replicas=1, gpus_per_replica=1) as sim:
        command = (
            f"cd {shlex.quote(str(ROOT))} && LANG=C.UTF-8 {shlex.quote(sys.executable)} "
            f"-m tui.entry run --endpoint {sim.urls[0]} --model {sim.model} --duration 8 "
            f"--concurrency 2 --max-tokens 8 --no-gates --out {shlex.quote(str(out))}; "
            f"echo $? > {shlex.quote(str(exit_file))}; sleep 60"
        )
        subprocess.run(
            ["tmux", "new-session", "-d", "-x", "80", "-y", "24", "-s", session, command],
            check=True,
        )
        try:
            _wait_for(session, lambda s: "LIVE" in s and "load 00:" in s, 60)
            subprocess.run(["tmux", "send-keys", "-t", session, "d"], check=True)
            deadline = time.monotonic() + 30
            while not exit_file.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert exit_file.read_text().strip() == "6"
            assert "detached; the run goes on" in _capture(session)
            (run_dir,) = out.iterdir()
            deadline = time.monotonic() + 60
            while not (run_dir / "record.json").exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert '"status": "PASSED"' in (run_dir / "record.json").read_text()
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], check=False)
