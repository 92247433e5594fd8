"""The monitor's handle on a runner: the child we started, or a pid from the run dir.

Both answer ``poll()`` (None while running) and ``signal()``; controls themselves go
through ``control.jsonl`` (``soak.run.control.send_control``), which works for either.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Protocol

import psutil

GONE = -1
"""``poll()`` of a runner that is not our child: it ended, its exit code is unknown."""


class RunnerLink(Protocol):
    """What the app needs of a runner process."""

    @property
    def pid(self) -> int | None:
        """The runner's pid, when known."""
        ...

    def poll(self) -> int | None:
        """None while the runner runs, else its exit code (``GONE`` when unknown)."""
        ...

    def signal(self, signum: int) -> None:
        """Send a signal (ignored once the runner ended)."""
        ...


def runner_alive(pid: int) -> bool:
    """Whether ``pid`` is a live soaktop runner (not a zombie, not a reused pid)."""
    try:
        proc = psutil.Process(pid)
        if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return "soak.run.runner" in " ".join(proc.cmdline())
    except psutil.AccessDenied:
        return True  # someone else's process we may not inspect: assume it lives
    except psutil.Error:
        return False


class PidRunner:
    """A runner started elsewhere (``soaktop attach``), known by ``runner.pid``."""

    def __init__(self, pid: int | None) -> None:
        self._pid = pid
        self._gone = False

    @classmethod
    def from_run_dir(cls, run_dir: Path) -> PidRunner:
        """The runner whose pid the run directory holds (None if unreadable)."""
        try:
            pid: int | None = int((run_dir / "runner.pid").read_text().strip())
        except (OSError, ValueError):
            pid = None
        return cls(pid)

    @property
    def pid(self) -> int | None:
        return self._pid

    def poll(self) -> int | None:
        if self._pid is None:
            return None  # cannot tell; the record's appearance ends the run instead
        if not self._gone and not runner_alive(self._pid):
            self._gone = True
        return GONE if self._gone else None

    def signal(self, signum: int) -> None:
        if self._pid is not None and not self._gone:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._pid, signum)
