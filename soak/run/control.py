"""Operator controls through the run directory: ``control.jsonl``.

Anyone who can write to the run directory (the TUI, ``soaktop`` commands, a shell over a
new SSH session) can append ``{"cmd": CMD, "note": "..."}`` with CMD one of stop, abort,
pause, resume, mark, or set with ``"rate": R`` (open loop) or ``"concurrency": N`` (closed
loop: a live load step); the runner reads new lines once per snapshot tick. Signals remain the
other channel; :class:`soak.run.stops.RunControls` turns both into the run's stop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil

from soak.record.journal import JsonlTail, JsonlWriter


class ControlReader(JsonlTail):
    """Reads the commands appended to the control file since the last poll."""

    def poll(self) -> list[dict[str, Any]]:
        """New, complete command lines (malformed ones are skipped)."""
        return self.read_new()


def send_control(run_dir: Path, cmd: str, note: str = "", **fields: float | int) -> None:
    """Append one command for the runner of ``run_dir`` (``fields``: its arguments, e.g.
    ``rate=30`` for ``set``); ``OSError`` if it cannot be written."""
    # A whole line or nothing: a full disk must not leave a torn command for the runner.
    writer = JsonlWriter(run_dir / "control.jsonl")
    writer.write({"cmd": cmd, **fields, "note": note})
    writer.close()
    if writer.error is not None:
        raise writer.error


def live_runner_pid(run_dir: Path) -> int | None:
    """The pid in ``run_dir/runner.pid`` if that process is still this run's live runner
    (not a zombie, not a reused pid): None when it ended or the file is unreadable."""
    try:
        pid = int((run_dir / "runner.pid").read_text().strip())
        proc = psutil.Process(pid)
        alive = proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
        return pid if alive and "soak.run.runner" in " ".join(proc.cmdline()) else None
    except (OSError, ValueError, psutil.Error):
        return None
