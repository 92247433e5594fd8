"""The open-loop arrival options of :class:`soak.run.config.RunConfig`, checked together.

``arrival`` picks the load's shape: ``closed`` (the default: ``concurrency`` workers, each
sending when its last request ended) or an open-loop schedule (``constant``, ``poisson``,
``gamma``) at ``rate`` requests/s, capped at ``max_in_flight`` concurrent requests. The
options of one shape are refused with the other, in words naming the field, the value
and what is allowed, so a run never silently ignores what its operator asked for. The
one exception is ``concurrency``: it always has a value (its default, 32, reaches the
runner like any other), so it cannot be told from one given; in open loop it is not used
(the record's ``requested_concurrency`` is then the connections warmed at the barrier).

``arrival = "trace:FILE"`` replays a trace (:mod:`loadgen.traces`): it is stored as
``arrival = "trace"`` with ``trace_file``, the file is parsed here (a bad line is a config
error naming the file, line, field and value), and the run lasts the trace unless
``duration_s`` or ``max_requests`` is given (that shortens it). ``time_scale`` divides
the trace's times. A trace brings its own times and token counts, so ``rate``,
``burstiness``, ``arrival_seed`` and the prompt options are refused with it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

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


TRACE_PREFIX = "trace:"


def split_trace(data: Any) -> Any:
    """Before validation: ``arrival = "trace:FILE"`` → ``arrival = "trace"`` and
    ``trace_file = FILE``; without a ``duration_s`` the window is the trace's own."""
    if not isinstance(data, dict):
        return data
    arrival = data.get("arrival")
    if isinstance(arrival, str) and arrival.startswith(TRACE_PREFIX):
        data = dict(data, arrival="trace", trace_file=arrival[len(TRACE_PREFIX) :])
    if data.get("arrival") == "trace" and "duration_s" not in data:
        data = dict(data, duration_s=None)
    return data


def arrival_problem(cfg: RunConfig) -> str | None:
    """What is wrong with the arrival options together, in words; None when nothing."""
    if cfg.arrival == "trace":
        return trace_problem(cfg)
    if cfg.trace_file is not None:
        return (
            f"trace_file {str(cfg.trace_file)!r} given with arrival = {cfg.arrival!r}: "
            "give --arrival trace:FILE to replay a trace"
        )
    if cfg.time_scale is not None:
        return (
            f"time_scale = {cfg.time_scale} is for a trace replay, not arrival = "
            f"{cfg.arrival!r}: use --arrival trace:FILE, or drop --time-scale"
        )
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


def trace_problem(cfg: RunConfig) -> str | None:
    """A trace replay's options (``arrival = "trace"``), the file parsed: None when fine."""
    from loadgen.traces import TraceError, read_trace

    if cfg.trace_file is None:
        return "arrival = 'trace' needs a file: give --arrival trace:FILE"
    extra = [
        f"{flag} {getattr(cfg, name)}"
        for name, flag in (
            ("rate", "--rate"),
            ("burstiness", "--burstiness"),
            ("arrival_seed", "--arrival-seed"),
            ("prompts", "--prompts"),
            ("synthetic_input_tokens", "--synthetic-input-tokens"),
        )
        if getattr(cfg, name) is not None
    ] + (["--shared-prefix"] if cfg.shared_prefix else [])
    if extra:
        return (
            f"{', '.join(extra)} given with a trace replay: the trace sets the arrival "
            "times and each prompt's token counts (its shared prefixes too); drop them"
        )
    if cfg.matrix is not None:
        return "arrival = 'trace' with a matrix: the matrix is closed loop only"
    try:
        read_trace(cfg.trace_file)
    except TraceError as e:
        return str(e)
    return None


def trace_cap(arrival_offsets_s: list[float]) -> int:
    """The default cap of a replay: as :func:`default_max_in_flight` for the trace's
    busiest :data:`DEFAULT_CAP_SECONDS` (its arrivals there, per second), so a burst in
    the trace is not held back by a cap sized for its mean."""
    busiest = 0
    lo = 0
    for hi, t in enumerate(arrival_offsets_s):
        while t - arrival_offsets_s[lo] >= DEFAULT_CAP_SECONDS:
            lo += 1
        busiest = max(busiest, hi - lo + 1)
    return default_max_in_flight(busiest / DEFAULT_CAP_SECONDS)


def default_max_in_flight(rate: float) -> int:
    """The cap when ``max_in_flight`` is unset (see :data:`DEFAULT_CAP_SECONDS`)."""
    return max(64, min(MAX_IN_FLIGHT_DEFAULT_CAP, math.ceil(4 * rate * DEFAULT_CAP_SECONDS)))
