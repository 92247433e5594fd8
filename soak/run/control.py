"""Operator controls through the run directory: ``control.jsonl``.

Anyone who can write to the run directory (the TUI, ``soaktop`` commands, a shell over a
new SSH session) can append ``{"cmd": CMD, "note": "..."}`` with CMD one of stop, abort,
pause, resume, mark; the runner reads new lines once per snapshot tick. Signals remain the
other channel; :class:`soak.run.stops.RunControls` turns both into the run's stop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soak.record.journal import JsonlTail, JsonlWriter


class ControlReader(JsonlTail):
    """Reads the commands appended to the control file since the last poll."""

    def poll(self) -> list[dict[str, Any]]:
        """New, complete command lines (malformed ones are skipped)."""
        return self.read_new()


def send_control(run_dir: Path, cmd: str, note: str = "") -> None:
    """Append one command for the runner of ``run_dir``; ``OSError`` if it cannot be written."""
    # A whole line or nothing: a full disk must not leave a torn command for the runner.
    writer = JsonlWriter(run_dir / "control.jsonl")
    writer.write({"cmd": cmd, "note": note})
    writer.close()
    if writer.error is not None:
        raise writer.error
