"""Multi-turn conversations on the closed loop: each worker runs sessions of K turns.

Issue 16 §2: a session's turn 1 sends a pool prompt; turn ``i + 1`` sends the whole
history so far — every user message and the assistant's *actual* answer to it (the
client hands the answer back, bounded: :mod:`loadgen.answer_text`) — plus a new user
message, the pool's next prompt. Each turn repeats the previous turn's prompt as its
prefix, so a soak exercises the server's prefix caching and its KV cache growing with the
conversation (the prompt tokens grow with the turn: the record's per-turn
``input_tokens_mean`` shows it).

- **Think time**: after a turn's answer ends, its worker waits ``think_time_s`` before
  sending the next turn (a user reading and typing); a stop ends the wait at once.
  Sessions follow each other with no wait (the next session is another user).
- **A failed turn ends its session** (a server that failed turn 3 has no answer to build
  turn 4 on); the worker starts a new session. A turn cut by soaktop (the drain deadline,
  an abort) ends it too. What each session became is recomputed from the journal, where
  every line carries its ``session`` and ``turn`` (``soak.record.turn_figures``).
- Request numbers (``seq``) are the closed loop's own: every turn is one request, so
  ``--max-requests`` counts turns, and turn ``n``'s new user message is ``pool.pick(n)``.

Only the chat API has a history (``messages``); the run's options refuse the completions
API with turns (``soak.run.config_turns``). The generator is
:class:`loadgen.workers.LoadGenerator` with its two hooks filled in — what a worker sends
next (:meth:`ConversationGenerator._plan_request`) and what it does between two requests
(:meth:`ConversationGenerator._between_requests`) — so the barrier, the issue window,
pause, the drain and any worker parking stay the closed loop's. A session's turns
(:class:`Session`) and what an answer does to it (:func:`take_answer`) are shared with
the open loop's sessions (:mod:`loadgen.open_loop_sessions`: each arrival starts one).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from loadgen.envelope import RequestResult
from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.request_source import PlannedRequest
from loadgen.workers import LoadGenerator, LoadPlan, LoadState, StreamingClient

__all__ = ["ConversationGenerator", "ConversationState", "HistoryBuilder", "Session", "take_answer"]


@dataclass
class ConversationState(LoadState):
    """The closed loop's counters, plus the sessions' (live; the record's figures are
    recomputed from the journal)."""

    sessions_started: int = 0
    sessions_completed: int = 0
    """Sessions whose every turn completed."""
    sessions_ended_early: Counter[int] = field(default_factory=Counter)
    """Sessions ended by a failed (or cut) turn, by that turn's index."""
    history_truncated: int = 0
    """Answers past the history bound whose head only went into the next turn."""
    sessions_parked: int = 0
    """Sessions left unfinished because a lower concurrency parked their worker."""


class HistoryBuilder:
    """Chat bodies for a conversation: the run's body shape with the history as its
    ``messages`` (every option of :class:`BodyBuilder` kept; never a per-request seed)."""

    def __init__(self, bodies: BodyBuilder) -> None:
        if bodies.api != "chat":
            raise ValueError(
                f"conversations need the chat API (a history of messages), not {bodies.api!r}"
            )
        template = orjson.loads(bodies.build(""))
        if not isinstance(template, dict):  # pragma: no cover - build() writes an object
            raise TypeError("BodyBuilder.build did not give a JSON object")
        self._template: dict[str, Any] = template
        self.path = bodies.path
        self.output_limit = bodies.output_limit

    def build(self, messages: list[dict[str, str]]) -> bytes:
        """The body sending ``messages`` (one ``orjson.dumps``, on the measuring loop)."""
        return orjson.dumps({**self._template, "messages": messages})


class Session:
    """One conversation in progress: a closed-loop worker's, or an open-loop arrival's
    (:mod:`loadgen.open_loop_sessions`)."""

    __slots__ = ("messages", "number", "turn")

    def __init__(self, number: int) -> None:
        self.number = number
        self.turn = 0
        """Turns sent so far (the turn in flight, once sent)."""
        self.messages: list[dict[str, str]] = []

    def next_turn(self, pool: PromptPool, seq: int, history: HistoryBuilder) -> PlannedRequest:
        """Turn ``self.turn + 1`` as request ``seq``: the history so far plus the pool's
        prompt ``seq`` as the new user message."""
        prompt = pool.pick(seq)
        self.messages.append({"role": "user", "content": pool.text_for(seq, prompt)})
        self.turn += 1
        return PlannedRequest(
            prompt.id,
            history.build(self.messages),
            history.output_limit,
            history.path,
            session=self.number,
            turn=self.turn,
        )


def take_answer(
    state: ConversationState, session: Session, result: RequestResult, turns: int
) -> bool:
    """Fold turn ``session.turn``'s result into its session: True when the session goes
    on (the answer joins its history), False when it ended here, counted in ``state`` (all
    ``turns`` done, or this turn failed: there is no answer to build on)."""
    if not result.ok or result.answer is None:
        state.sessions_ended_early[session.turn] += 1
        return False
    if result.answer_truncated:
        state.history_truncated += 1
    if session.turn >= turns:
        state.sessions_completed += 1
        return False
    session.messages.append({"role": "assistant", "content": result.answer})
    result.answer = None  # the history holds it now; the result goes nowhere with it
    return True


class ConversationGenerator(LoadGenerator):
    """A closed loop whose workers run sessions of ``turns`` turns (module doc)."""

    between_requests = True

    def __init__(
        self,
        plan: LoadPlan,
        client: StreamingClient,
        pool: PromptPool,
        bodies: BodyBuilder,
        on_result: Callable[[RequestResult], None],
        *,
        turns: int,
        think_time_s: float = 0.0,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        if turns < 2:
            raise ValueError(f"turns must be >= 2 for a conversation, got {turns}")
        if not think_time_s >= 0:
            raise ValueError(f"think_time_s must be >= 0 seconds, got {think_time_s}")
        super().__init__(plan, client, pool, bodies, on_result, clock_ns)
        self.state: ConversationState = ConversationState(requested=plan.concurrency)
        self.turns = turns
        self.think_time_s = think_time_s
        self._history = HistoryBuilder(bodies)
        self._sessions: dict[int, Session] = {}
        """The session in progress, by worker index."""

    def _plan_request(self, worker: int, seq: int) -> PlannedRequest:
        """The worker's next turn: a new session's first, or its session's next."""
        session = self._sessions.get(worker)
        if session is None:
            session = self._sessions[worker] = Session(self.state.sessions_started)
            self.state.sessions_started += 1
        return session.next_turn(self._pool, seq, self._history)

    async def _park(self, index: int) -> None:
        """A parked worker's user has left: its session ends here (the record counts it
        unfinished), so a park of any length never passes for think time."""
        if self._sessions.pop(index, None) is not None:
            self.state.sessions_parked += 1
        await super()._park(index)

    async def _between_requests(self, worker: int, result: RequestResult) -> None:
        """Add the answer to the history, or end the session; then think."""
        if not take_answer(self.state, self._sessions[worker], result, self.turns):
            del self._sessions[worker]
            return
        if self.think_time_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.think_time_s)
