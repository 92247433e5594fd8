"""What each load request sends: the body, its output limit, its workload class.

The generators (closed loop :mod:`loadgen.workers`, open loop :mod:`loadgen.open_loop`)
ask a :class:`RequestSource` for request ``n`` and send what it returns; they never build
bodies themselves. ``n`` is the send sequence in the closed loop and the arrival's index
in the schedule in the open loop (an arrival skipped by a pause keeps its index, so a
trace's arrival ``k`` always carries the trace's line ``k``).

- :class:`PoolSource`: today's load, a prompt pool cycled into one body shape.
- a trace's source (:mod:`loadgen.trace_source`): each arrival's own token counts;
- a mix's source (:mod:`loadgen.mix`): a weighted, seeded draw of a workload class.

A source runs on the measuring loop, once a request: it must be a few list steps and one
``orjson.dumps``, no I/O, no parsing of files (do that before the load starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from loadgen.prompts import BodyBuilder, PromptPool


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request as the generator sends it."""

    prompt_id: int
    body: bytes
    max_tokens: int | None
    """The output limit the body asks for (``RequestResult.max_tokens``): usage above it is
    impossible. None: not a whole number, the server decides."""
    path: str
    """The endpoint path (``/v1/chat/completions`` or ``/v1/completions``)."""
    workload_class: str | None = None
    """The mix's class name (``RequestResult.workload_class``); None outside a mix."""
    session: int | None = None
    """A conversation's session number (``RequestResult.session``); None outside one."""
    turn: int | None = None
    """The turn within that session, 1-based (``RequestResult.turn``); None outside one."""


class RequestSource(Protocol):
    """Hands out the request to send as number ``n`` (see the module's docstring)."""

    def request(self, n: int) -> PlannedRequest: ...


class PoolSource:
    """A prompt pool cycled through one :class:`BodyBuilder`: the load before mixes."""

    def __init__(self, pool: PromptPool, bodies: BodyBuilder) -> None:
        self._pool = pool
        self._bodies = bodies
        self._limit = bodies.output_limit
        self._path = bodies.path

    def request(self, n: int) -> PlannedRequest:
        """Prompt ``pool.pick(n)`` (with its unique prefix when the pool adds one)."""
        prompt = self._pool.pick(n)
        body = self._bodies.build(self._pool.text_for(n, prompt))
        return PlannedRequest(prompt.id, body, self._limit, self._path)
