"""How the app ended: what the frontend turns into an exit code and a closing message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
