"""The monitor's ``+`` / ``-`` keys: the next load target, sent as a ``set`` command.

An open loop steps its rate by ×1.25 (÷1.25 down), rounded to a figure an operator
reads (whole requests/s from 10 up, tenths from 1, hundredths below); a closed loop its
concurrency by ±max(1, 10 %). The monitor never changes the load itself: the command goes
to ``control.jsonl`` and the runner makes it a recorded load step at its next tick. Until
a snapshot can show the change, the target asked counts as the current one, so two quick
presses step twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from soak.record.snapshot import Snapshot

RATE_FACTOR = 1.25
RATE_MIN = 0.01
"""The lowest rate a key asks for (requests/s): ``-`` never reaches 0."""
CONCURRENCY_SHARE = 0.10


@dataclass(frozen=True)
class Asked:
    """A target sent: ``field`` is ``rate`` or ``concurrency``; at snapshot ``seq``."""

    field: str
    value: float
    seq: int

    def words(self) -> str:
        """``rate 25/s`` or ``concurrency 36``."""
        unit = "/s" if self.field == "rate" else ""
        return f"{self.field} {self.value:g}{unit}"


def stepped_rate(rate: float, direction: int) -> float:
    """``rate`` ×1.25 (``direction`` > 0) or ÷1.25, rounded; at least one rounding unit
    away from ``rate`` and never below :data:`RATE_MIN`."""
    raw = rate * RATE_FACTOR if direction > 0 else rate / RATE_FACTOR
    unit = 1.0 if raw >= 10 else 0.1 if raw >= 1 else 0.01
    new = round(round(raw / unit) * unit, 2)
    if new == rate:
        new = round(rate + (unit if direction > 0 else -unit), 2)
    return max(RATE_MIN, new)


def stepped_concurrency(concurrency: int, direction: int) -> int:
    """``concurrency`` ± max(1, 10 %), at least 1."""
    step = max(1, round(concurrency * CONCURRENCY_SHARE))
    return max(1, concurrency + (step if direction > 0 else -step))


def next_target(snap: Snapshot | None, asked: Asked | None, direction: int) -> Asked | str:
    """The target a key press asks for, or why there is none to ask (in words)."""
    if snap is None or snap.phase not in ("load", "paused"):
        return "no load is issuing: the rate and concurrency change only during the load"
    if snap.phase == "paused":  # the runner refuses it: a step begun in a pause measures it
        return "issuing is paused: resume (p) first, then change the load"
    if snap.matrix is not None:
        return "a matrix run's concurrency is each cell's: it cannot be changed live"
    pending = asked is not None and snap.seq <= asked.seq + 1
    if snap.open_loop is not None:
        target = snap.open_loop.rate
        if target is None:  # the runner would refuse it: say so here
            return "a trace replay's times are the trace's: its rate cannot be changed live"
        now = asked.value if pending and asked and asked.field == "rate" else target
        return Asked("rate", stepped_rate(now, direction), snap.seq)
    current = snap.load.requested_concurrency
    if pending and asked is not None and asked.field == "concurrency":
        current = int(asked.value)
    return Asked("concurrency", stepped_concurrency(current, direction), snap.seq)
