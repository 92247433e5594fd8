"""Open-loop load: requests sent on a schedule, whatever the server does (issue 16 §1).

The closed loop (:mod:`loadgen.workers`) lets the server set the pace: a slow server gets
fewer requests, and the latency it causes hides in the gaps nobody sent (coordinated
omission). Here one scheduler task sleeps until each intended time of an
:mod:`loadgen.arrivals` schedule and starts that request as its own task; every request
carries its intended time (``RequestResult.intended_ns``) beside its actual send, so the
record can measure from the schedule and say how late the client was.

The schedule is fixed (``offsets``: a trace's times) or follows a
:class:`~loadgen.arrivals.RateCurve` (``curve``: a rate, stages, a sweep) that
:meth:`OpenLoopGenerator.set_rate` changes live: the arrival the scheduler waits for keeps
its place in the schedule (its target Λ) and is re-timed under the new curve at once.

``max_in_flight`` caps the concurrent requests, so an overloaded server cannot make the
client open unbounded connections: an arrival that finds the cap full waits for a slot
and is counted (``held_by_cap``), never dropped; it goes out late, and the lateness shows.

Cost: the scheduler's own work is a few µs a request (``bench/arrival_cost.py``): every
arrival already due is sent in one pass with no await, the cap is a counter, a request's
bookkeeping is its task's ``finally``. What an open loop costs beyond that is loop
wake-ups: an arrival that comes alone wakes the loop for itself, and its response head
comes back alone; the bench shows both apart.

The barrier, the issue window, stop, pause and the drain are :class:`LoadGenerator`'s (the
runner drives both through the same methods): the "workers" behind the barrier are the
connections warmed before the window opens, and the only task in ``tasks`` is the
scheduler, which ends once the requests it started have all ended.

Multi-turn sessions on the open loop (each arrival starts one, its later turns due after
their previous answer) are a subclass, :mod:`loadgen.open_loop_sessions`: it replaces the
scheduler's loop and fills in two hooks here — :meth:`OpenLoopGenerator._launch` (send
a planned request at its intended time) and :meth:`OpenLoopGenerator._after_result`.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from loadgen.arrivals import RateCurve
from loadgen.envelope import FailureClass, RequestResult
from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.request_source import PlannedRequest, RequestSource
from loadgen.workers import LoadGenerator, LoadPlan, LoadState, StreamingClient

WARM_CONNECTIONS_MAX = 64
"""Connections warmed behind the barrier (at most ``max_in_flight``): enough that the first
second of a high rate does not all wait on TCP handshakes, few enough to start at once."""
LATE_TOLERANCE_NS = 200_000
"""A timer that fires this close before its intended time counts as on time: uvloop's timers
run on a millisecond loop clock, and a top-up sleep for less would only add lateness."""
SLICE_NS = 250_000_000
"""The longest single sleep: a stop or a pause at a low rate is seen within it even where
nothing pokes the scheduler."""
NEVER_NS = 1 << 62
"""An intended time that never comes (the curve's rate is 0 from here on), in ns."""
_SKIP = -1
"""``_wait_for``'s answer for an arrival whose time fell inside a pause."""
_STOP = -2
"""``_wait_for``'s answer when issuing is over."""


@dataclass
class OpenLoopState(LoadState):
    """The closed loop's counters, plus what only a schedule has."""

    held_by_cap: int = 0
    """Requests that found ``max_in_flight`` requests in flight and waited for a slot:
    arrivals, and an open loop of sessions' later turns too."""
    in_flight_peak: int = 0
    skipped_paused: int = 0
    """Arrivals whose intended time fell inside an operator's pause: not sent (a pause is
    part of the window, recorded), and not sent in a burst on resume either."""
    pauses: list[tuple[int, int | None]] = field(default_factory=list)
    """The operator's pauses, ``(paused_ns, resumed_ns)`` (None: still paused): the
    arrivals the schedule had in them were withheld by the operator, not offered."""

    @property
    def arrivals_issued(self) -> int:
        """Arrivals of the schedule sent so far (the live achieved rate's count): every
        request here; in an open loop of sessions, their first turns only."""
        return self.issued

    def paused_spans_s(self, released_ns: int) -> list[tuple[float, float]]:
        """The pauses in seconds from the release (an open one runs to infinity)."""
        return [
            ((a - released_ns) / 1e9, math.inf if b is None else (b - released_ns) / 1e9)
            for a, b in self.pauses
        ]


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class OpenLoopGenerator(LoadGenerator):
    """Runs one open-loop load, ``plan.concurrency`` connections warmed behind the barrier.

    Without ``curve``, ``offsets`` are the intended send times themselves (seconds from
    the window's start). With ``curve``, they are the schedule's draws at the curve's
    reference rate (:func:`loadgen.arrivals.curve_draws`) and arrival ``k`` goes out at
    ``curve.time_of(offsets[k])``: what :func:`loadgen.arrivals.curve_offsets` redraws
    after the run from the same curve.
    """

    def __init__(
        self,
        plan: LoadPlan,
        client: StreamingClient,
        pool: PromptPool,
        bodies: BodyBuilder,
        on_result: Callable[[RequestResult], None],
        offsets: Iterator[float],
        max_in_flight: int,
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        source: RequestSource | None = None,
        curve: RateCurve | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be 1 or more, not {max_in_flight}")
        super().__init__(plan, client, pool, bodies, on_result, clock_ns, source)
        self.state: OpenLoopState = OpenLoopState(requested=plan.concurrency)
        self._offsets = offsets
        self.curve = curve
        """The rate the schedule follows, every live change included (None: fixed times)."""
        self._curve_changes = 0
        """Bumped by each :meth:`set_rate`: a waiting arrival re-times when it moves."""
        self.max_in_flight = max_in_flight
        self._requests: dict[int, tuple[asyncio.Task[None], RequestResult]] = {}
        """Requests started and not ended, by send sequence (an entry leaves in its task's
        ``finally``; one still here after a cancel never began and is journaled then)."""
        self._slot_free: asyncio.Future[None] | None = None
        """Set when a request ends while an arrival waits at the cap."""
        self._nap: asyncio.Future[None] | None = None
        """The scheduler's sleep, which set_rate, pause and stop cut short."""
        self._resumed_ns = 0
        """When issuing last resumed after a pause (arrivals due before it are skipped)."""
        self.origin_ns: int | None = None
        """The schedule's origin when another process fixed it (a load shard: its
        coordinator's release, on this clock), so every shard's times are one schedule's;
        None: this generator's own release."""

    async def start_workers(self) -> bool:
        """Warm ``plan.concurrency`` connections at once, then start the scheduler (it
        waits for the release); True when every connection was warmed."""
        warm = [
            asyncio.create_task(self._warm(self.plan.endpoints[i % len(self.plan.endpoints)]))
            for i in range(self.plan.concurrency)
        ]
        waiters: set[asyncio.Future[Any]] = {
            asyncio.ensure_future(asyncio.gather(*warm, return_exceptions=True)),
            asyncio.ensure_future(self._stop.wait()),
        }
        await asyncio.wait(
            waiters, timeout=self.plan.barrier_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        for w in waiters:
            w.cancel()
        missing = sum(1 for w in warm if not w.done())
        for t in warm:
            t.cancel()
        if missing and not self._stop.is_set():
            self.state.start_failures["not ready before the barrier timeout"] += missing
        self.tasks.append(asyncio.create_task(self._scheduler(), name="open-loop-scheduler"))
        return self.state.workers_started == self.plan.concurrency

    async def _warm(self, base: str) -> None:
        try:
            await self._client.warm_connection(base + "/v1/models")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.state.start_failures[f"{type(e).__name__}: {e}"[:200]] += 1
            return
        self.state.workers_started += 1

    # -- the rate ------------------------------------------------------------------------------

    def _now_s(self) -> float:
        """Seconds since the schedule's origin, the barrier's release (0 before it)."""
        released = self.state.barrier_released_ns if self.origin_ns is None else self.origin_ns
        return 0.0 if released is None else max(0.0, (self._clock_ns() - released) / 1e9)

    @property
    def rate(self) -> float | None:
        """The curve's target rate now, requests/s (None: fixed times, a trace's)."""
        return None if self.curve is None else self.curve.rate_at(self._now_s())

    def set_rate(self, rate: float, at_s: float | None = None) -> None:
        """Hold ``rate`` from now on (before the release: from the window's start). The
        arrival being waited for is re-timed at once: a change from 1 to 100 requests/s
        does not wait out the 1 s gap drawn under the old rate. ``at_s``: the change's
        time in seconds from the origin, where another process chose it (a shard's
        coordinator: every shard's curve is then the same); None: now."""
        if self.curve is None:
            raise ValueError(
                "set_rate: this schedule's send times are fixed (a trace's); only a "
                "rate-driven open loop (constant, poisson, gamma) can change its rate"
            )
        self.curve.set_from(self._now_s() if at_s is None else at_s, rate)
        self._curve_changes += 1
        self._poke()

    def set_concurrency(self, n: int) -> None:
        """Refused: an open loop's load is its rate (:meth:`set_rate`); its connections
        are warmed, not workers, and starting closed-loop workers here would mix loops."""
        raise ValueError(
            f"set_concurrency({n}): this load is open loop; change its rate, not its concurrency"
        )

    def _poke(self) -> None:
        if self._nap is not None:
            _wake(self._nap)

    def stop_issuing(self, reason: str) -> None:
        """Graceful stop (see :meth:`LoadGenerator.stop_issuing`), seen by the scheduler at
        once rather than at its next arrival."""
        super().stop_issuing(reason)
        self._poke()

    def pause(self) -> None:
        """Stop issuing until :meth:`resume`; arrivals due meanwhile are skipped (and the
        pause's span kept: they were not offered)."""
        if not self.paused:
            self.state.pauses.append((self._clock_ns(), None))
        super().pause()
        self._poke()

    def resume(self) -> None:
        """Issue again; arrivals due from now on are sent."""
        if self.paused:
            # One instant for both: the span kept is exactly where arrivals are skipped
            # (those due before it, still unsent, are too: they fell in the pause).
            self._resumed_ns = now = self._clock_ns()
            if self.state.pauses:
                self.state.pauses[-1] = (self.state.pauses[-1][0], now)
        super().resume()

    def _intended_ns(self, start_ns: int, offset: float) -> int:
        at = offset if self.curve is None else self.curve.time_of(offset)
        return NEVER_NS if at == math.inf else start_ns + int(at * 1e9)

    # -- the scheduler -----------------------------------------------------------------------

    async def _scheduler(self) -> None:
        """Issue, then wait for every request started. Cancelled (abort, drain deadline):
        cancel the requests and wait until each has journaled itself as cancelled."""
        try:
            await self._release.wait()
            await self._issue()
            # The schedule passed the window's end: the window itself still closes on
            # time (``run``'s timer), so the achieved rate's denominator is the window.
            await self._stop.wait()
            while self._requests:
                tasks = [t for t, _ in self._requests.values()]
                await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            await self._cancel_requests()
            raise

    async def _cancel_requests(self) -> None:
        """Cancel every request; journal, as cancelled, the ones cut before they began
        (their task never ran, so their own ``except`` never did)."""
        for task, _ in list(self._requests.values()):
            task.cancel()
        pending = asyncio.gather(*(t for t, _ in self._requests.values()), return_exceptions=True)
        while not pending.done():
            try:
                await asyncio.shield(pending)
            except asyncio.CancelledError:
                # A second cut (an abort after the drain deadline's): the requests are
                # cancelled already; journal each before leaving, or they would be lost.
                continue
        gs = self.state
        for _, result in self._requests.values():  # cancelled before they began
            result.cancelled = True
            result.failure_detail = f"cancelled by soaktop ({gs.cancel_cause})"
            gs.cancelled += 1
            self._on_result(result)
        self._requests.clear()

    async def _issue(self) -> None:
        """Send each arrival at its time until the window ends or stop is asked. An arrival
        already due is sent in the same pass, with no await: a burst costs one wake-up."""
        assert self.state.barrier_released_ns is not None
        start_ns = self.state.barrier_released_ns if self.origin_ns is None else self.origin_ns
        window_s = self.plan.duration_s
        end_ns = NEVER_NS if window_s is None else start_ns + int(window_s * 1e9)
        clock, issuing, stop = self._clock_ns, self._issuing, self._stop
        for arrival, offset in enumerate(self._offsets):
            intended_ns = self._intended_ns(start_ns, offset)
            if (
                intended_ns >= end_ns
                or intended_ns - clock() > LATE_TOLERANCE_NS
                or intended_ns < self._resumed_ns
                or not issuing.is_set()
                or stop.is_set()
            ):
                intended_ns = await self._wait_for(start_ns, offset, end_ns)
                if intended_ns == _STOP:
                    return
                if intended_ns == _SKIP:
                    self._skipped(self._intended_ns(start_ns, offset))
                    continue
            if len(self._requests) >= self.max_in_flight:
                intended_ns = await self._hold(start_ns, offset, end_ns, intended_ns)
                if intended_ns == _STOP:
                    return
                if intended_ns == _SKIP:
                    self._skipped(self._intended_ns(start_ns, offset))
                    continue
            if (seq := self._next_seq()) is None:
                return
            self._start(seq, arrival, intended_ns)

    def _skipped(self, intended_ns: int) -> None:
        """Count an arrival the pause skipped; one due just before the pause (the timer's
        half millisecond, or a late client) widens the kept span back to it, so the span
        holds every arrival the operator withheld."""
        gs = self.state
        gs.skipped_paused += 1
        if gs.pauses and intended_ns < gs.pauses[-1][0]:
            gs.pauses[-1] = (intended_ns, gs.pauses[-1][1])

    async def _hold(self, start_ns: int, offset: float, end_ns: int, intended_ns: int) -> int:
        """An arrival that found the cap full (counted once in ``held_by_cap``): wait for
        a slot, then, if a pause or a stop came meanwhile, for its time again (as
        :meth:`_wait_for` answers: a paused arrival is skipped, not sent in the pause)."""
        self.state.held_by_cap += 1
        loop = asyncio.get_running_loop()
        while True:
            while len(self._requests) >= self.max_in_flight:
                self._slot_free = loop.create_future()
                try:
                    await self._slot_free
                finally:
                    self._slot_free = None
            if self._issuing.is_set() and not self._stop.is_set():
                return intended_ns
            intended_ns = await self._wait_for(start_ns, offset, end_ns)
            if intended_ns < 0 or len(self._requests) < self.max_in_flight:
                return intended_ns

    async def _wait_for(self, start_ns: int, offset: float, end_ns: int) -> int:
        """Wait for an arrival's time: its intended ns, :data:`_SKIP` (its time fell in a
        pause) or :data:`_STOP`. The time is worked out again after each :meth:`set_rate`;
        sleeps are cut short by set_rate, pause and stop, and last at most
        :data:`SLICE_NS`; one that ends early (uvloop's millisecond timers) is topped up
        until the time is within :data:`LATE_TOLERANCE_NS`."""
        changes = self._curve_changes
        intended_ns = self._intended_ns(start_ns, offset)
        while True:
            if not self._issuing.is_set():
                await self._wait_while_paused()  # resume() marks _resumed_ns
            if self._stop.is_set():
                return _STOP
            if changes != self._curve_changes:
                changes = self._curve_changes
                intended_ns = self._intended_ns(start_ns, offset)
            if intended_ns < self._resumed_ns:
                return _SKIP
            if intended_ns >= end_ns:
                if self.curve is None:
                    return _STOP  # a fixed schedule past the window: nothing more to send
                left_ns = SLICE_NS  # not in this window unless the rate changes
            else:
                left_ns = intended_ns - self._clock_ns()
                if left_ns <= LATE_TOLERANCE_NS:
                    return intended_ns
            # Half a millisecond past the time: uvloop's timers round to its millisecond
            # clock, and a sleep that wakes early would be followed by sub-millisecond
            # ones that fire at once — a spin of loop iterations per request. Sending
            # ~0.5 ms late on purpose costs nothing measurable (the bound is 50 ms).
            await self._sleep(min(left_ns, SLICE_NS) / 1e9 + 0.0005)

    async def _sleep(self, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._nap = nap = loop.create_future()
        timer = loop.call_later(delay_s, _wake, nap)
        try:
            await nap
        finally:
            timer.cancel()
            self._nap = None

    # -- one request -------------------------------------------------------------------------

    def _start(self, seq: int, arrival: int, intended_ns: int) -> None:
        """Start request ``seq`` (the source's ``arrival``-th) as its own task."""
        self._launch(seq, self.source.request(arrival), intended_ns)

    def _launch(self, seq: int, req: PlannedRequest, intended_ns: int) -> None:
        """Start request ``seq``, sending ``req``, as its own task."""
        index = seq % len(self.plan.endpoints)
        result = RequestResult(
            request_id=f"{self.plan.request_id_prefix}/{seq}",
            worker=index,
            prompt_id=req.prompt_id,
            sent_ns=self._clock_ns(),  # the client resets it just before the POST
            max_tokens=req.max_tokens,
            intended_ns=intended_ns,
            workload_class=req.workload_class,
            step=self.step,
            session=req.session,
            turn=req.turn,
        )
        url = self.plan.endpoints[index] + req.path
        task = asyncio.get_running_loop().create_task(self._send(seq, result, url, req.body))
        self._requests[seq] = (task, result)

    async def _send(self, seq: int, result: RequestResult, url: str, body: bytes) -> None:
        """Stream one request; its slot is given back when it ends, however it ends."""
        gs = self.state
        gs.in_flight += 1
        if gs.in_flight > gs.in_flight_peak:
            gs.in_flight_peak = gs.in_flight
        try:
            await self._client.stream_into(result, url, body)
        except asyncio.CancelledError:
            result.cancelled = True
            result.failure_detail = f"cancelled by soaktop ({gs.cancel_cause})"
            gs.cancelled += 1
            self._on_result(result)
            raise
        except Exception as e:  # a bug in soaktop: counted, and journaled as the client's
            what = f"{type(e).__name__}: {e}"[:200]
            gs.worker_errors[what] += 1
            # Issued, so journaled: a request the journal lacked would break the counts.
            result.failure = FailureClass.CLIENT
            result.failure_detail = f"soaktop error: {what}"
        finally:
            gs.in_flight -= 1
            del self._requests[seq]
            if self._slot_free is not None:
                _wake(self._slot_free)
        self._on_result(result)
        if self.follow_ups:
            self._after_result(result)

    follow_ups: ClassVar[bool] = False
    """A subclass whose requests can lead to more (:meth:`_after_result`): an open-loop
    session's next turn (:mod:`loadgen.open_loop_sessions`)."""

    def _after_result(self, result: RequestResult) -> None:
        """After a request that ended (not one soaktop cut) is journaled; synchronous, so
        what it plans is in place before the scheduler next runs. Not called unless
        ``follow_ups``: a load of single requests pays nothing for it."""


def paused_spans(gen: LoadGenerator | None) -> list[tuple[float, float]]:
    """An open loop's pauses in seconds from its release (none for a closed loop)."""
    gs = None if gen is None else gen.state
    if not isinstance(gs, OpenLoopState) or gs.barrier_released_ns is None:
        return []
    return gs.paused_spans_s(gs.barrier_released_ns)


def in_spans(t: float, spans: Sequence[tuple[float, float]]) -> bool:
    """``t`` lies in one of ``spans`` (``[a, b)``; few: an operator's pauses)."""
    return any(a <= t < b for a, b in spans)
