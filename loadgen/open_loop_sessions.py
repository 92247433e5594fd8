"""Multi-turn sessions on the open loop: each arrival starts a conversation (issue 16 §2).

Production traffic is users arriving — a Poisson stream, say — who then hold a
conversation. Here each arrival of the schedule (:mod:`loadgen.arrivals`) starts a session
of ``turns`` turns (:class:`loadgen.conversation.Session`: turn ``i + 1`` sends the history
with the assistant's actual answers, as on the closed loop):

- **Turn 1 is the arrival**: its intended time is the schedule's.
- **Turn i + 1 is due at turn i's end + think time**, and that instant is its
  ``intended_ns``: its lateness (sent − intended) and its latency from the intended send
  measure whatever held it (a busy client, the cap), exactly as an arrival's do.
- One scheduler sends both, each at its intended time (due turns wait in a heap).
  **A turn already due goes before an arrival due**, however much older the arrival:
  its user is in a conversation, there first. That only decides anything when both
  wait — at the cap (``max_in_flight`` holds both alike: whichever finds it full waits
  for a slot, counted in ``held_by_cap``). Earliest-intended-first would hand every slot
  of an overloaded run to the arrivals' backlog (always older than a turn just due): no
  session would reach turn 2, and every one begun would hold its history until the
  run's end, memory without bound over hours. This way sessions finish, live sessions
  stay those in flight or thinking, and the overload shows as the arrivals' lateness
  (the schedule is lazy: a backlog of it costs nothing).
- **Pause**: an arrival due in a pause is skipped, as in the plain open loop (the operator
  withheld it). A turn due in a pause is not dropped — its session would end for the
  operator's sake — but sent at the resume *with its intended time moved to the resume*:
  the pause is the operator's, recorded, not the client's lateness (kept, one pause would
  read as a client late by the pause's length and void the run's rate figures). A turn
  due before a pause and still held at the cap when it began keeps the lateness it had,
  not the pause's length: its intended time moves by the pause.
- **Stop**: no turn is sent once the issue window has ended (or stop was asked); a session
  whose next turn was not sent by then is unfinished, as on the closed loop. A failed turn
  ends its session (there is no answer to build on), counted in ``sessions_ended_early``.

The offered rate is the session arrival rate: the record's ``achieved_rate`` counts only
turn 1s (:mod:`soak.record.summary`), while lateness and the latencies from the intended
send take every turn. Every request carries its ``session`` and ``turn``, so the record's
per-turn figures and session counts (:mod:`soak.record.turn_figures`) are the closed
loop's. ``seq`` is the send order over arrivals and turns alike: ``--max-requests``
counts turns, and a turn's new user message is ``pool.pick(seq)``.

Cost on the measuring loop, per later turn: one heap push and pop, and its body (the
history's ``orjson.dumps``, as on the closed loop); no task, timer or future of its own.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from loadgen.arrivals import RateCurve
from loadgen.conversation import ConversationState, HistoryBuilder, Session, take_answer
from loadgen.envelope import RequestResult
from loadgen.open_loop import (
    LATE_TOLERANCE_NS,
    NEVER_NS,
    SLICE_NS,
    OpenLoopGenerator,
    OpenLoopState,
)
from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.workers import LoadPlan, StreamingClient

__all__ = ["OpenLoopSessionGenerator", "OpenLoopSessionState"]


@dataclass
class OpenLoopSessionState(OpenLoopState, ConversationState):
    """The open loop's counters and the sessions' (live; the record's figures are
    recomputed from the journal). ``sessions_parked`` stays 0: an open loop parks no one."""

    @property
    def arrivals_issued(self) -> int:
        """Arrivals sent: each one opened a session (later turns are not arrivals)."""
        return self.sessions_started


class OpenLoopSessionGenerator(OpenLoopGenerator):
    """An open loop whose arrivals each start a session of ``turns`` turns (module doc);
    ``offsets`` and ``curve`` are :class:`OpenLoopGenerator`'s (the arrivals')."""

    follow_ups = True

    def __init__(
        self,
        plan: LoadPlan,
        client: StreamingClient,
        pool: PromptPool,
        bodies: BodyBuilder,
        on_result: Callable[[RequestResult], None],
        offsets: Iterator[float],
        max_in_flight: int,
        *,
        turns: int,
        think_time_s: float = 0.0,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        curve: RateCurve | None = None,
    ) -> None:
        if turns < 2:
            raise ValueError(f"turns must be >= 2 for a conversation, got {turns}")
        if not think_time_s >= 0:
            raise ValueError(f"think_time_s must be >= 0 seconds, got {think_time_s}")
        super().__init__(
            plan, client, pool, bodies, on_result, offsets, max_in_flight, clock_ns, curve=curve
        )
        self.state: OpenLoopSessionState = OpenLoopSessionState(requested=plan.concurrency)
        self.turns = turns
        self.think_time_s = think_time_s
        self._think_ns = round(think_time_s * 1e9)
        self._history = HistoryBuilder(bodies)
        self._sessions: dict[int, Session] = {}
        """Sessions begun and not ended, by number (a turn in flight, or one due)."""
        self._due: list[tuple[int, int, Session]] = []
        """Next turns by due time (``(intended_ns, session number, session)``, a heap)."""
        self._nap_until_ns = NEVER_NS
        """When the scheduler's sleep ends (never while it is not sleeping): a turn due
        sooner cuts the sleep short."""

    async def _issue(self) -> None:
        """Send arrivals and due turns, each at its intended time, earliest first, until
        the window ends or stop is asked. Whatever is due already goes out in the same
        pass, with no await: a burst costs one wake-up, as in the plain open loop."""
        assert self.state.barrier_released_ns is not None
        start_ns = self.state.barrier_released_ns
        window_s = self.plan.duration_s
        end_ns = NEVER_NS if window_s is None else start_ns + int(window_s * 1e9)
        clock, issuing, stop, due, gs = (
            self._clock_ns,
            self._issuing,
            self._stop,
            self._due,
            self.state,
        )
        schedule = enumerate(self._offsets)
        head = next(schedule, None)
        arrival_ns, timed = NEVER_NS, -1  # head's intended time, under curve change `timed`
        held: object = None  # what waits at the cap now (counted once in held_by_cap)
        while not stop.is_set():
            if not issuing.is_set():
                await self._wait_while_paused()  # resume() marks _resumed_ns
                continue
            if head is None:
                arrival_ns = NEVER_NS
            elif timed != self._curve_changes:  # a new head, or set_rate re-timed it
                timed = self._curve_changes
                arrival_ns = self._intended_ns(start_ns, head[1])
            if arrival_ns < self._resumed_ns:  # it fell in a pause: withheld, not sent
                self._skipped(arrival_ns)
                head, timed = next(schedule, None), -1
                continue
            turn_ns = due[0][0] if due else NEVER_NS
            at = min(arrival_ns, turn_ns)
            if at >= end_ns:  # nothing more to send in this window (unless the rate changes)
                if head is None and not due and not self._requests:
                    return  # a finite schedule whose every session has ended
                await self._nap_for(SLICE_NS)
                continue
            now = clock()
            if (left_ns := at - now) > LATE_TOLERANCE_NS:
                await self._nap_for(left_ns)
                continue
            # A due turn before a due arrival, however old (module doc: overload).
            turn_first = turn_ns <= arrival_ns or turn_ns - now <= LATE_TOLERANCE_NS
            if len(self._requests) >= self.max_in_flight:
                waiting = due[0][2] if turn_first else head
                if waiting is not held:
                    gs.held_by_cap += 1
                    held = waiting
                await self._slot()
                continue  # a pause, a stop or an earlier turn may have come meanwhile
            held = None
            if (seq := self._next_seq()) is None:
                return
            if turn_first:
                session = heapq.heappop(due)[2]
                req = session.next_turn(self._pool, seq, self._history)
                self._launch(seq, req, self._after_pause(turn_ns))
            else:
                session = Session(gs.sessions_started)
                gs.sessions_started += 1
                self._sessions[session.number] = session
                self._launch(seq, session.next_turn(self._pool, seq, self._history), arrival_ns)
                head, timed = next(schedule, None), -1

    def _after_pause(self, intended_ns: int) -> int:
        """A turn's intended time, moved past the pauses it waited through (module doc):
        one due in a pause is due at its resume; one due before (held at the cap) moves by
        the pause's length, keeping the lateness it had. Pauses are few: a short walk
        back from the last."""
        shift = 0
        for paused_ns, resumed_ns in reversed(self.state.pauses):
            if resumed_ns is None or resumed_ns <= intended_ns:
                break
            shift += resumed_ns - max(paused_ns, intended_ns)
        return intended_ns + shift

    async def _nap_for(self, left_ns: int) -> None:
        """Sleep ``left_ns`` (at most a slice); cut short by set_rate, pause, stop, and a
        turn due sooner. Half a millisecond past the time, as ``_wait_for`` does."""
        left_ns = min(left_ns, SLICE_NS)
        self._nap_until_ns = self._clock_ns() + left_ns
        try:
            await self._sleep(left_ns / 1e9 + 0.0005)
        finally:
            self._nap_until_ns = NEVER_NS

    async def _slot(self) -> None:
        """Wait until a request in flight ends (the scheduler is the only sender)."""
        self._slot_free = asyncio.get_running_loop().create_future()
        try:
            await self._slot_free
        finally:
            self._slot_free = None

    def _after_result(self, result: RequestResult) -> None:
        """Fold the turn's answer into its session; the next turn is due at the answer's
        end + think time (none once issuing has stopped: the session is unfinished)."""
        assert result.session is not None
        session = self._sessions[result.session]
        if not take_answer(self.state, session, result, self.turns):
            del self._sessions[result.session]
            return
        if self._stop.is_set():
            return
        assert result.end_ns is not None  # an answer was taken: the request ended ok
        due_ns = result.end_ns + self._think_ns
        heapq.heappush(self._due, (due_ns, session.number, session))
        if due_ns < self._nap_until_ns:
            self._poke()
