"""The open-loop arrival options of :class:`soak.run.config.RunConfig`, checked together.

``arrival`` picks the load's shape: ``closed`` (the default: ``concurrency`` workers, each
sending when its last request ended) or an open-loop schedule (``constant``, ``poisson``,
``gamma``) at ``rate`` requests/s, capped at ``max_in_flight`` concurrent requests. The
options of one shape are refused with the other, in words naming the field, the value
and what is allowed, so a run never silently ignores what its operator asked for. The
one exception is ``concurrency``: it always has a value (its default, 32, reaches the
runner like any other), so it cannot be told from one given; in open loop it is not used
(the record's ``requested_concurrency`` is then the connections warmed at the barrier).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from soak.run.config import RunConfig

MAX_RATE = 100_000.0
"""Highest --rate: far beyond what one client process can send (tens of thousands a
second), so the bound only refuses typing errors."""
MAX_IN_FLIGHT_DEFAULT_CAP = 10_000
"""The default cap's ceiling: ten thousand sockets is beyond what one client should hold
open (file descriptors, local ports), yet far above any server's running batch."""
DEFAULT_CAP_SECONDS = 60.0
"""The default cap holds ``4 × rate × 60 s``: by Little's law a server answering in 60 s
(a long generation) has ``rate × 60`` requests in flight; four times that leaves room
for bursts, so the cap bounds a server that stopped answering, not a slow one."""


def arrival_problem(cfg: RunConfig) -> str | None:
    """What is wrong with the arrival options together, in words; None when nothing."""
    if cfg.arrival == "closed":
        extra = [
            f"{flag} {getattr(cfg, name)}"
            for name, flag in (
                ("rate", "--rate"),
                ("burstiness", "--burstiness"),
                ("max_in_flight", "--max-in-flight"),
                ("arrival_seed", "--arrival-seed"),
            )
            if getattr(cfg, name) is not None
        ]
        if extra:
            return (
                f"{', '.join(extra)} given with arrival = 'closed': these are open-loop "
                "options; add --arrival constant|poisson|gamma, or drop them"
            )
        return None
    if cfg.matrix is not None:
        return f"arrival = {cfg.arrival!r} with a matrix: the matrix is closed loop only"
    if cfg.rate is None:
        return (
            f"arrival = {cfg.arrival!r} needs rate (--rate R): requests per second, above 0 "
            f"and at most {MAX_RATE:,.0f}"
        )
    if cfg.arrival == "gamma" and cfg.burstiness is None:
        return (
            "arrival = 'gamma' needs burstiness (--burstiness CV): the coefficient of "
            "variation of the gaps, above 0 (1 is Poisson, 3 bursty)"
        )
    if cfg.arrival != "gamma" and cfg.burstiness is not None:
        return (
            f"burstiness = {cfg.burstiness} is for arrival = 'gamma', not {cfg.arrival!r}: "
            "use --arrival gamma, or drop --burstiness"
        )
    return None


def default_max_in_flight(rate: float) -> int:
    """The cap when ``max_in_flight`` is unset (see :data:`DEFAULT_CAP_SECONDS`)."""
    return max(64, min(MAX_IN_FLIGHT_DEFAULT_CAP, math.ceil(4 * rate * DEFAULT_CAP_SECONDS)))
