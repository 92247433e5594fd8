"""The conversation options of :class:`soak.run.config.RunConfig`, checked together.

``turns`` K ≥ 2 makes a load of sessions of K turns: on the closed loop every worker runs
them (:mod:`loadgen.conversation`); on an open loop at a rate (constant, poisson, gamma)
each arrival starts one and its later turns are due after their previous answer
(:mod:`loadgen.open_loop_sessions`; the rate is the sessions'). 1 (the default) is a load
of single requests. ``think_time_s`` is the wait between a turn's answer and the next turn
(0 allowed), given in seconds or as ``2s``, ``500ms``, ``1m``. What a conversation cannot
be combined with (the completions API, the matrix, a trace, a mix) is refused here, in
words naming the option, the value and why, so a run never silently drops what its
operator asked for.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Final

from pydantic import BeforeValidator, Field

if TYPE_CHECKING:
    from soak.run.config import RunConfig

MAX_TURNS: Final = 32
"""Most turns per session: each turn's figures take one pass over the journal at the end
of the run (and in ``verify``), and 32 turns of history outgrow most models' context."""
MAX_THINK_S: Final = 3600.0
"""Longest think time: an hour between two turns is a user who left."""
_THINK: Final = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m)?\s*$")
_UNIT_S: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}
THINK_WORDS: Final = (
    f"seconds from 0 to {MAX_THINK_S:g}: a number (2, 0.5) or with a unit (2s, 500ms, 1m)"
)


def parse_think_time(value: Any) -> Any:
    """``think_time_s`` as seconds: a number stays, ``2s``/``500ms``/``1m`` convert; a
    bad text raises naming what is allowed (anything else is pydantic's to refuse)."""
    if not isinstance(value, str):
        return value
    m = _THINK.match(value)
    if m is None:
        raise ValueError(f"think time {value!r} is not {THINK_WORDS}")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


ThinkTime = Annotated[
    Annotated[float, Field(ge=0, le=MAX_THINK_S)] | None, BeforeValidator(parse_think_time)
]
"""``RunConfig.think_time_s``: seconds, from a number or a text with its unit."""


def turns_problem(cfg: RunConfig) -> str | None:
    """What is wrong with the conversation options together, in words; None if nothing."""
    if cfg.turns == 1:
        if cfg.think_time_s is not None:
            return (
                f"think_time_s = {cfg.think_time_s:g} is the wait between a session's turns: "
                "give --turns K (K >= 2), or drop --think-time"
            )
        return None
    why = _combination_problem(cfg)
    return None if why is None else f"turns = {cfg.turns}: {why}"


def _combination_problem(cfg: RunConfig) -> str | None:
    if cfg.api != "chat":
        return (
            f"a conversation needs the chat API (its history is a list of messages); "
            f"api = {cfg.api!r} has none: use --api chat, or drop --turns"
        )
    if cfg.matrix is not None:
        return "the matrix profile sends single requests per cell: drop --turns or --matrix"
    if cfg.arrival == "trace":
        return (
            "a trace replays single requests (each arrival its own token counts, no "
            "history to follow): conversations take a closed loop (--concurrency N "
            "sessions at a time) or a rate (--arrival constant|poisson|gamma --rate R "
            "sessions/s); drop --turns or the trace"
        )
    if getattr(cfg, "mix", None) is not None:
        return "a mixed load (--mix) with conversations is not supported yet: drop one"
    return None
