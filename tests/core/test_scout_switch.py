"""The switch between a scout's arms: its log is scrubbed, nothing unscrubbed is left on
disk, a server the script leaves running does not hold the scout, a timeout stops it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from soak.run.scout_switch import SwitchError, run_command

KEY = "sk-live-0123456789abcdefSECRET"


def test_the_log_is_scrubbed_and_no_unscrubbed_copy_is_left_beside_it(tmp_path: Path) -> None:
    log = tmp_path / "switch-1-original.log"
    took = run_command(
        f"echo starting --api-key {KEY}; echo Authorization: Bearer {KEY}; echo done",
        log,
        time.monotonic() + 30,
        secrets=[KEY],
        title="switch 1: original",
    )
    assert took < 30
    text = log.read_text()
    assert "done" in text and "switch 1: original" in text
    assert KEY not in text
    assert [p.name for p in tmp_path.iterdir()] == [log.name]  # no raw copy beside it


def test_a_server_left_running_does_not_hold_the_switch(tmp_path: Path) -> None:
    """The script starts a 'server' in the background that keeps writing to the output
    the script had (no redirect of its own): the switch returns when the script does,
    and the server lives on (its next writes do not kill it)."""
    pidfile = tmp_path / "server.pid"
    cmd = f"(while true; do echo tick; sleep 0.1; done) & echo $! > {pidfile}; echo started"
    run_command(cmd, tmp_path / "switch.log", time.monotonic() + 30)
    pid = int(pidfile.read_text())
    try:
        time.sleep(0.5)
        os.kill(pid, 0)  # still alive after writing to the switch's output again
        assert "started" in (tmp_path / "switch.log").read_text()
    finally:
        os.kill(pid, signal.SIGKILL)


def test_a_switch_that_runs_too_long_is_stopped_and_said(tmp_path: Path) -> None:
    log = tmp_path / "switch.log"
    with pytest.raises(SwitchError, match="ran longer"):
        run_command("echo waiting; sleep 30", log, time.monotonic() + 1)
    assert "did not finish (stopped)" in log.read_text()


def test_a_failing_switch_names_its_exit_and_log(tmp_path: Path) -> None:
    log = tmp_path / "switch.log"
    with pytest.raises(SwitchError, match=r"exited with 3 .*switch\.log"):
        run_command("echo nope >&2; exit 3", log, time.monotonic() + 30)
    assert "nope" in log.read_text()
