"""Open-loop load: requests sent on a schedule, whatever the server does (issue 16 §1).

The closed loop (:mod:`loadgen.workers`) lets the server set the pace: a slow server gets
fewer requests, and the latency it causes hides in the gaps nobody sent (coordinated
omission). Here one scheduler task sleeps until each intended time of an
:mod:`loadgen.arrivals` schedule and starts that request as its own task; every request
carries its intended time (``RequestResult.intended_ns``) beside its actual send, so the
record can measure from the schedule and say how late the client was.

``max_in_flight`` caps the concurrent requests, so an overloaded server cannot make the
client open unbounded connections: an arrival that finds the cap full waits for a slot
and is counted (``held_by_cap``), never dropped; it goes out late, and the lateness shows.

The barrier, the issue window, stop, pause and the drain are :class:`LoadGenerator`'s (the
runner drives both through the same methods): the "workers" behind the barrier are the
connections warmed before the window opens, and the only task in ``tasks`` is the
scheduler, which ends once the requests it started have all ended.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from loadgen.envelope import RequestResult
from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.request_source import RequestSource
from loadgen.workers import LoadGenerator, LoadPlan, LoadState, StreamingClient

WARM_CONNECTIONS_MAX = 64
"""Connections warmed behind the barrier (at most ``max_in_flight``): enough that the first
second of a high rate does not all wait on TCP handshakes, few enough to start at once."""
_LATE_TOLERANCE_NS = 200_000
"""A timer that fires this close before its intended time counts as on time: uvloop's timers
run on a millisecond loop clock, and a top-up sleep for less would only add lateness."""


@dataclass
class OpenLoopState(LoadState):
    """The closed loop's counters, plus what only a schedule has."""

    held_by_cap: int = 0
    """Arrivals that found ``max_in_flight`` requests in flight and waited for a slot."""
    in_flight_peak: int = 0
    skipped_paused: int = 0
    """Arrivals whose intended time fell inside an operator's pause: not sent (a pause is
    part of the window, recorded), and not sent in a burst on resume either."""


class OpenLoopGenerator(LoadGenerator):
    """Runs one open-loop load: ``offsets`` are the intended send times (seconds from the
    window's start), ``plan.concurrency`` the connections warmed behind the barrier."""

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
    ) -> None:
        super().__init__(plan, client, pool, bodies, on_result, clock_ns, source)
        self.state: OpenLoopState = OpenLoopState(requested=plan.concurrency)
        self._offsets = offsets
        self.max_in_flight = max_in_flight
        self._slots = asyncio.Semaphore(max_in_flight)
        self._requests: set[asyncio.Task[None]] = set()
        self._resumed_ns = 0
        """When issuing last resumed after a pause (arrivals due before it are skipped)."""

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
                await asyncio.gather(*self._requests, return_exceptions=True)
        except asyncio.CancelledError:
            for t in self._requests:
                t.cancel()
            await asyncio.gather(*self._requests, return_exceptions=True)
            raise

    async def _issue(self) -> None:
        """Send each arrival at its time until the window ends or stop is asked."""
        assert self.state.barrier_released_ns is not None
        start_ns = self.state.barrier_released_ns
        window_s = self.plan.duration_s
        end_ns = None if window_s is None else start_ns + int(window_s * 1e9)
        for arrival, offset in enumerate(self._offsets):
            intended_ns = start_ns + int(offset * 1e9)
            if end_ns is not None and intended_ns >= end_ns:
                return
            due = await self._until(intended_ns)
            if due == "stop":
                return
            if due == "skip":
                self.state.skipped_paused += 1
                continue
            if self._slots.locked():
                self.state.held_by_cap += 1
            await self._slots.acquire()
            if (seq := self._next_seq()) is None:
                self._slots.release()
                return
            task = asyncio.create_task(self._send(seq, arrival, intended_ns))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    async def _until(self, intended_ns: int) -> str:
        """Wait for an arrival's time: ``send``, ``skip`` (its time fell in a pause) or
        ``stop``. Sleeps in slices of at most 250 ms so that a stop or a pause at a low
        rate is seen at once; a slice that ends early (uvloop's millisecond timers) is
        topped up until the time is within :data:`_LATE_TOLERANCE_NS`."""
        while True:
            if not self._issuing.is_set():
                await self._wait_while_paused()
                self._resumed_ns = self._clock_ns()
            if self._stop.is_set():
                return "stop"
            if intended_ns < self._resumed_ns:
                return "skip"
            left_ns = intended_ns - self._clock_ns()
            if left_ns <= _LATE_TOLERANCE_NS:
                return "send"
            # Half a millisecond past the time: uvloop's timers round to its millisecond
            # clock, and a sleep that wakes early would be followed by sub-millisecond
            # ones that fire at once — a spin of loop iterations per request. Sending
            # ~0.5 ms late on purpose costs nothing measurable (the bound is 50 ms).
            await asyncio.sleep(min(left_ns, 250_000_000) / 1e9 + 0.0005)

    async def _send(self, seq: int, arrival: int, intended_ns: int) -> None:
        """One request (the source's ``arrival``-th); its slot is given back when it
        ends, however it ends."""
        index = seq % len(self.plan.endpoints)
        req = self.source.request(arrival)
        url = self.plan.endpoints[index] + req.path
        result = RequestResult(
            request_id=f"{self.plan.request_id_prefix}/{seq}",
            worker=index,
            prompt_id=req.prompt_id,
            sent_ns=self._clock_ns(),  # the client resets it just before the POST
            max_tokens=req.max_tokens,
            intended_ns=intended_ns,
            workload_class=req.workload_class,
            step=self.step,
        )
        gs = self.state
        gs.in_flight += 1
        gs.in_flight_peak = max(gs.in_flight_peak, gs.in_flight)
        try:
            await self._client.stream_into(result, url, req.body)
        except asyncio.CancelledError:
            result.cancelled = True
            result.failure_detail = f"cancelled by soaktop ({gs.cancel_cause})"
            gs.cancelled += 1
            self._on_result(result)
            raise
        except Exception as e:  # a bug in soaktop: count it like a lost worker, go on
            gs.worker_errors[f"{type(e).__name__}: {e}"[:200]] += 1
            return
        finally:
            gs.in_flight -= 1
            self._slots.release()
        self._on_result(result)
