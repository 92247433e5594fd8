"""A mixed load: each request drawn from one of several workload classes, by weight.

``--mix FILE`` (:mod:`soak.run.config_mix`) declares the classes — short chat, long
context, strict JSON, tool calls, reasoning — each with a weight and its own request
fields. :class:`MixSource` is the :class:`~loadgen.request_source.RequestSource` both
generators ask for request ``n``: it draws ``n``'s class, then builds that class's body
from the class's own prompt pool and :class:`~loadgen.prompts.BodyBuilder`, and names the
class on the request (``PlannedRequest.workload_class``, journaled, so every figure can be
kept per class).

The draw is a pure function of ``(seed, n)``: blocks of :data:`BLOCK` uniform numbers from
a numpy generator seeded with ``(seed, block)``, turned into class indices by one
``searchsorted`` on the cumulative weights. Two runs with the same seed send the same
class as request ``n`` whatever the order requests are asked for in, and an arrival
skipped by a pause changes nobody else's class. Per request that is a ``divmod``, a list
index and the body's ``orjson.dumps`` — the block is drawn once every 4,096 requests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from loadgen.answer_contract import AnswerContract
from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.request_source import PlannedRequest

__all__ = ["BLOCK", "MixSource", "WorkloadClass"]

BLOCK: Final = 4096
"""Class draws made at once (one numpy call, ~40 µs): a block covers 4,096 requests."""


@dataclass(frozen=True)
class WorkloadClass:
    """One class of a mix, ready to send: its pool and body shape, built before the load."""

    name: str
    weight: float
    """Its share is weight ÷ the sum of the mix's weights."""
    pool: PromptPool
    bodies: BodyBuilder
    contract: AnswerContract | None = None
    """What each answer must be (``contract_error`` otherwise); None: no contract."""


class MixSource:
    """Request ``n`` of a mix: a seeded, weighted draw of its class (module docstring)."""

    def __init__(self, classes: Sequence[WorkloadClass], seed: int) -> None:
        if not classes:
            raise ValueError("a mix needs at least one workload class")
        for c in classes:
            if not (math.isfinite(c.weight) and c.weight > 0):
                raise ValueError(
                    f"class {c.name!r}: weight {c.weight!r} is not allowed; give a finite "
                    "number above 0"
                )
        weights = np.asarray([c.weight for c in classes], dtype=np.float64)
        self.classes = tuple(classes)
        self._seed = seed
        self._cumulative = np.cumsum(weights / weights.sum())
        self._cumulative[-1] = 1.0  # rounding must never leave a draw past the last class
        # Per class, what request() reads: (pool, builder, limit, path, name).
        self._plans = tuple(
            (c.pool, c.bodies, c.bodies.output_limit, c.bodies.path, c.name) for c in classes
        )
        self._block_no = -1
        self._block: list[int] = []

    def class_of(self, n: int) -> int:
        """The index (into ``classes``) of request ``n``'s class."""
        block_no, i = divmod(n, BLOCK)
        if block_no != self._block_no:
            self._block = self._draw(block_no)
            self._block_no = block_no
        return self._block[i]

    def _draw(self, block_no: int) -> list[int]:
        rng = np.random.default_rng([self._seed, block_no])
        # u < 1.0 == the last cumulative weight: every pick is a class index.
        picks: list[int] = np.searchsorted(
            self._cumulative, rng.random(BLOCK), side="right"
        ).tolist()
        return picks

    def request(self, n: int) -> PlannedRequest:
        """Request ``n``: its class's prompt ``pool.pick(n)`` in that class's body."""
        pool, bodies, limit, path, name = self._plans[self.class_of(n)]
        prompt = pool.pick(n)
        body = bodies.build(pool.text_for(n, prompt))
        return PlannedRequest(prompt.id, body, limit, path, workload_class=name)

    def contracts(self) -> dict[str, AnswerContract]:
        """The classes' answer contracts by class name (for the stream client)."""
        return {c.name: c.contract for c in self.classes if c.contract is not None}
