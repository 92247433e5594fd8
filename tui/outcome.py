"""How the app ended: what the frontend turns into an exit code and a closing message."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from soak.record.models import EXIT_STORAGE
from tui.runner_link import GONE


@dataclass(frozen=True)
class Outcome:
    """The app's return value."""

    kind: Literal["finished", "detached", "runner_died", "quit", "hangup"]
    exit_code: int | None = None
    """The record's exit code (``finished``)."""
    returncode: int | None = None
    """The runner's own exit status (``runner_died``), when known."""
    by_signal: bool = False
    """``detached`` by a signal (a hang-up; any signal to ``attach``), not by the operator's
    ``d``: the CLI exits 129 then, as headless mode does."""


def how_it_ended(returncode: int | None) -> str:
    """``signal 9``, ``exit code 1`` or ``it is gone`` (a runner that was not our child)."""
    if returncode is None or returncode == GONE:
        return "it is gone"
    return f"signal {-returncode}" if returncode < 0 else f"exit code {returncode}"


def runner_died_notice(returncode: int | None, run_dir: Path) -> str:
    """The notice for a runner that ended without a record: why, and how to finish it."""
    if returncode == EXIT_STORAGE:
        return (
            f"the runner could not write its run directory (disk full, quota or I/O "
            f"error; its log may say which) and no record fitted; free some space, "
            f"then: soaktop recover {run_dir}"
        )
    return (
        f"the runner ended ({how_it_ended(returncode)}) without writing a "
        f"record; its log: {run_dir / 'runner.log'} "
        f"(finish the record with: soaktop recover {run_dir})"
    )
