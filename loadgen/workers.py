"""Closed-loop load: N workers behind a start barrier, an issue window, a bounded drain.

One asyncio task per worker (no thread per worker). Each worker first proves it can open
a connection (a warm-up GET), then waits at the barrier; the timed issue window opens
only when every worker is ready. A worker that cannot start is counted, with the error,
and the run is INVALID rather than a silently smaller load (seed 000's lesson).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from loadgen.envelope import RequestResult
from loadgen.prompts import BodyBuilder, PromptPool
from loadgen.release import SlicedStart
from loadgen.request_source import PlannedRequest, PoolSource, RequestSource


class StreamingClient(Protocol):
    """What the workers need from the HTTP client (``loadgen.client.StreamClient``)."""

    async def warm_connection(self, url: str) -> None: ...

    async def stream_into(self, result: RequestResult, url: str, body: bytes) -> RequestResult: ...


@dataclass(frozen=True)
class LoadPlan:
    """Everything the workers need to know about the load."""

    endpoints: tuple[str, ...]
    """Base URLs; worker ``i`` uses ``endpoints[i % len(endpoints)]``."""
    concurrency: int
    duration_s: float | None
    max_requests: int | None
    drain_timeout_s: float
    barrier_timeout_s: float
    request_id_prefix: str
    """``<run_id>/load/<api>``; the sequence number is appended."""
    backoff_max_s: float = 2.0
    """Cap of a worker's pause after failures that came before any token (0: no pause)."""


@dataclass
class LoadState:
    """Live counters the runner reads for snapshots (single event loop: no locks)."""

    requested: int = 0
    workers_started: int = 0
    start_failures: Counter[str] = field(default_factory=Counter)
    in_flight: int = 0
    issued: int = 0
    barrier_released_ns: int | None = None
    issue_ended_ns: int | None = None
    drain_ended_ns: int | None = None
    stop_reason: str | None = None
    cancelled: int = 0
    cancel_cause: str | None = None
    """Why in-flight requests were cut: ``drain deadline`` or ``abort``."""
    backoffs: int = 0
    """Pauses taken after instant failures (a refusing or dead server is not hammered)."""
    worker_errors: Counter[str] = field(default_factory=Counter)
    """Workers that died of an exception in soaktop itself (each one a lost worker)."""
    target: int | None = None
    """Closed loop: the workers allowed to issue now (:meth:`LoadGenerator.set_concurrency`);
    the rest are parked. None: all of them (no concurrency change was asked)."""
    release_ended_ns: int | None = None
    """Closed loop: when the last worker waiting at the barrier was let go to send its
    first request (they go in slices, :mod:`loadgen.release`); None until then."""
    release_turns: int = 0
    """Closed loop: the loop turns the barrier's workers were let go in."""


class LoadGenerator:
    """Runs one closed-loop load and reports each finished request to ``on_result``."""

    def __init__(
        self,
        plan: LoadPlan,
        client: StreamingClient,
        pool: PromptPool,
        bodies: BodyBuilder,
        on_result: Callable[[RequestResult], None],
        clock_ns: Callable[[], int] = time.perf_counter_ns,
        source: RequestSource | None = None,
    ) -> None:
        self.plan = plan
        self.state = LoadState(requested=plan.concurrency)
        self._client = client
        self._pool = pool
        self._bodies = bodies
        self.source: RequestSource = source if source is not None else PoolSource(pool, bodies)
        """What each request sends (``pool`` and ``bodies`` when no source is given)."""
        self.step: int | None = None
        """The load step now running (stamped on every request sent); None: no steps."""
        self._on_result = on_result
        self._clock_ns = clock_ns
        self._all_ready = asyncio.Event()
        self._release = asyncio.Event()
        self._stop = asyncio.Event()
        self._issuing = asyncio.Event()
        self._issuing.set()  # cleared while the operator pauses issuing
        self.tasks: list[asyncio.Task[None]] = []
        self._ready_or_failed = 0
        self._target = plan.concurrency
        """Workers with an index at or above it are parked (``set_concurrency``)."""
        self._wake: list[asyncio.Event] = []
        """One per worker created: set while its index is below the target."""
        self._created_at_release = 0
        self._start_gate = SlicedStart()
        """Workers that start together (the release, a resume, a jump in the target, a
        live raise's new workers) go through it a slice per loop turn
        (:mod:`loadgen.release`)."""
        self._awaiting_release = 0
        """Workers still to be let go after the barrier's release."""
        self.on_issue_end: Callable[[], None] | None = None
        """Called once when the issue window closes (the drain begins)."""
        self.on_release_end: Callable[[], None] | None = None
        """Called once when the last of the barrier's workers was let go
        (``state.release_ended_ns``, ``state.release_turns``)."""

    # -- barrier ---------------------------------------------------------------------------

    async def start_workers(self) -> bool:
        """Create every worker and wait until all are ready or the barrier times out.

        Returns True when all ``concurrency`` workers started.
        """
        for i in range(self.plan.concurrency):
            self._spawn(i)
        ready = asyncio.ensure_future(self._all_ready.wait())
        stop = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait(
            {ready, stop}, timeout=self.plan.barrier_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        ready.cancel()
        stop.cancel()
        missing = self.plan.concurrency - self._ready_or_failed
        if missing and not self._stop.is_set():
            self.state.start_failures["not ready before the barrier timeout"] += missing
        return self.state.workers_started == self.plan.concurrency

    def _spawn(self, index: int) -> None:
        """Create worker ``index`` (its warm-up GET first, a failure counted)."""
        wake = asyncio.Event()
        if index < self._target:
            wake.set()
        self._wake.append(wake)
        try:
            self.tasks.append(asyncio.create_task(self._worker(index), name=f"worker-{index}"))
        except (RuntimeError, MemoryError) as e:  # pragma: no cover - resource exhaustion
            self.state.start_failures[f"{type(e).__name__}: {e}"] += 1
            self._mark_ready_or_failed()

    def _mark_ready_or_failed(self) -> None:
        self._ready_or_failed += 1
        if self._ready_or_failed >= self.plan.concurrency:
            self._all_ready.set()

    # -- issue window and drain ------------------------------------------------------------

    async def run(self) -> None:
        """Open the barrier, issue until the window closes or stop is asked, then drain."""
        self.state.barrier_released_ns = self._clock_ns()
        self._created_at_release = len(self.tasks)
        self._awaiting_release = self.state.workers_started
        self._release.set()
        stop_wait = asyncio.create_task(self._stop.wait())
        waiters: set[asyncio.Future[object]] = {stop_wait}  # type: ignore[arg-type]
        if self.plan.duration_s is not None:
            waiters.add(asyncio.ensure_future(self._issue_window(self.plan.duration_s)))
        workers_done = asyncio.ensure_future(asyncio.gather(*self.tasks, return_exceptions=True))
        waiters.add(workers_done)  # type: ignore[arg-type]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if not self._stop.is_set():
            self.stop_issuing("issue window complete")
        self.state.issue_ended_ns = self._clock_ns()
        if self.on_issue_end is not None:
            self.on_issue_end()
        for w in waiters:
            if w is not workers_done:
                w.cancel()
        if len(self.tasks) > self._created_at_release:  # a live raise added workers
            workers_done = asyncio.ensure_future(
                asyncio.gather(*self.tasks, return_exceptions=True)
            )
        await self._drain(workers_done)
        for outcome in workers_done.result():
            if isinstance(outcome, Exception):
                self.state.worker_errors[f"{type(outcome).__name__}: {outcome}"[:200]] += 1

    async def _issue_window(self, duration_s: float) -> None:
        """Sleep until ``duration_s`` after the barrier release on our own clock. uvloop's
        timers run on a cached millisecond loop clock and may fire a little early; the
        issue window must never be shorter than asked."""
        assert self.state.barrier_released_ns is not None
        end_ns = self.state.barrier_released_ns + int(duration_s * 1e9)
        for _ in range(5):  # each top-up adds half a millisecond: one or two suffice
            left_ns = end_ns - self._clock_ns()
            if left_ns <= 0:
                return
            await asyncio.sleep(left_ns / 1e9 + 0.0005)

    async def _drain(self, workers_done: asyncio.Future[Any]) -> None:
        done, _ = await asyncio.wait({workers_done}, timeout=self.plan.drain_timeout_s)
        if not done:
            self._cut("drain deadline")
            await asyncio.gather(workers_done, return_exceptions=True)
        self.state.drain_ended_ns = self._clock_ns()

    def stop_issuing(self, reason: str) -> None:
        """Graceful stop: no new requests; in-flight ones finish within the drain."""
        if not self._stop.is_set():
            self.state.stop_reason = reason
            self._stop.set()

    def abort(self) -> None:
        """Cancel every in-flight request now (they are journaled as cancelled)."""
        self._cut("abort")

    def _cut(self, cause: str) -> None:
        self.stop_issuing(self.state.stop_reason or cause)
        if self.state.cancel_cause is None:
            self.state.cancel_cause = cause
        self._release.set()
        for t in self.tasks:
            t.cancel()

    async def cancel_unstarted(self) -> None:
        """Tear down workers when the barrier failed (no load is issued)."""
        self._stop.set()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    # -- the worker ------------------------------------------------------------------------

    def _next_seq(self) -> int | None:
        if self._stop.is_set():
            return None
        limit = self.plan.max_requests
        if limit is not None and self.state.issued >= limit:
            self.stop_issuing("request count reached")
            return None
        seq = self.state.issued
        self.state.issued += 1
        if limit is not None and self.state.issued >= limit:
            # Close the window at the last send, not when a worker next asks for work.
            self.stop_issuing("request count reached")
        return seq

    def pause(self) -> None:
        """Stop issuing new requests until :meth:`resume` (in-flight ones go on). The
        issue window's clock keeps running: a pause is part of the window, recorded."""
        self._issuing.clear()

    def resume(self) -> None:
        """Issue again after :meth:`pause`."""
        self._issuing.set()

    def set_concurrency(self, n: int) -> None:
        """Closed loop: let ``n`` workers issue. Workers ``n`` and above park at their next
        request (one in flight finishes; a parked worker waits on an event, not a loop)
        and wake, in index order, as ``n`` rises again; ``n`` above the workers created
        starts new ones once the barrier has released (each proves its connection first,
        a failure counted in ``start_failures``). Before the release it only sets the
        target the load starts at."""
        if n < 0:
            raise ValueError(f"concurrency must be 0 or more, not {n}")
        most = self.max_concurrency
        if most is not None and n > most:
            raise ValueError(
                f"concurrency {n}: at most {most}, the connections this run's client pools "
                "(more workers would wait for a connection, and that wait would count as "
                "the server's latency)"
            )
        self._target = n
        self.state.target = n
        for i, wake in enumerate(self._wake):
            if i < n:
                wake.set()
        if self._release.is_set() and not self._stop.is_set() and n > len(self._wake):
            self.state.requested = n
            for i in range(len(self._wake), n):
                self._spawn(i)

    @property
    def max_concurrency(self) -> int | None:
        """The most workers the client can serve at once (its ``max_connections``; None:
        a client that does not say): :meth:`set_concurrency` refuses more."""
        most = getattr(self._client, "max_connections", None)
        return most if isinstance(most, int) else None

    @property
    def concurrency_target(self) -> int:
        """The workers allowed to issue now (all of them until ``set_concurrency``)."""
        return self._target

    @property
    def active_workers(self) -> int:
        """Started workers allowed to issue: what in-flight shortfall compares against
        (a parked worker is the plan, not a shortfall)."""
        return min(self._target, self.state.workers_started)

    async def _park(self, index: int) -> None:
        """Wait while worker ``index`` is at or above the target (or until stop)."""
        wake = self._wake[index]
        while index >= self._target and not self._stop.is_set():
            wake.clear()
            stop = asyncio.ensure_future(self._stop.wait())
            woken = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({stop, woken}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stop.cancel()
                woken.cancel()

    @property
    def paused(self) -> bool:
        """True between :meth:`pause` and :meth:`resume`."""
        return not self._issuing.is_set()

    async def _wait_while_paused(self) -> None:
        resume = asyncio.ensure_future(self._issuing.wait())
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({resume, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            resume.cancel()
            stop.cancel()

    async def _worker(self, index: int) -> None:
        base = self.plan.endpoints[index % len(self.plan.endpoints)]
        if self._release.is_set():  # a live raise's worker: its warm-up is in the load
            await self._start_gate.enter()
        try:
            await self._client.warm_connection(base + "/v1/models")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.state.start_failures[f"{type(e).__name__}: {e}"[:200]] += 1
            self._mark_ready_or_failed()
            return
        self.state.workers_started += 1
        self._mark_ready_or_failed()
        await self._release.wait()
        await self._start_gate.enter()  # workers that start together go a slice per loop turn
        if index < self._created_at_release:
            self._released_one()
        prefix = self.plan.request_id_prefix
        plan_request = self._plan_request
        gate = self._start_gate
        through_gate = True  # it just came through the gate: its send needs no count
        fast_failures = 0
        while True:
            # Both waits are checked again after either: a worker woken from its park
            # while the operator paused must not send, nor one resumed while parked.
            # Workers woken together then start a slice per loop turn, and check again.
            if (not self._issuing.is_set() or index >= self._target) and not self._stop.is_set():
                if not self._issuing.is_set():
                    await self._wait_while_paused()
                else:
                    await self._park(index)
                if not self._stop.is_set():
                    await gate.enter()
                    through_gate = True
                continue
            if not through_gate and not gate.admit_now():  # this turn sent its slice
                await gate.enter()
                through_gate = True
                continue  # paused, parked or stopped meanwhile?
            through_gate = False
            if (seq := self._next_seq()) is None:
                break
            req = plan_request(index, seq)
            result = RequestResult(
                request_id=f"{prefix}/{seq}",
                worker=index,
                prompt_id=req.prompt_id,
                sent_ns=self._clock_ns(),  # the client resets it just before the POST
                max_tokens=req.max_tokens,  # usage above it is impossible
                workload_class=req.workload_class,
                step=self.step,
                session=req.session,
                turn=req.turn,
            )
            self.state.in_flight += 1
            try:
                await self._client.stream_into(result, base + req.path, req.body)
            except asyncio.CancelledError:
                # The partial measurements stay on `result`; journal it, marked cancelled.
                result.cancelled = True
                result.failure_detail = f"cancelled by soaktop ({self.state.cancel_cause})"
                self.state.cancelled += 1
                self._on_result(result)
                raise
            finally:
                self.state.in_flight -= 1
            self._on_result(result)
            if result.failure is not None and result.first_token_ns is None:
                fast_failures += 1
                await self._back_off(fast_failures)
            else:
                fast_failures = 0
            if self.between_requests:
                await self._between_requests(index, result)

    def _released_one(self) -> None:
        """One of the barrier's workers was let go; the last one ends the release."""
        self._awaiting_release -= 1
        if self._awaiting_release == 0:
            self.state.release_ended_ns = self._clock_ns()
            self.state.release_turns = self._start_gate.turns
            if self.on_release_end is not None:
                self.on_release_end()

    def _plan_request(self, worker: int, seq: int) -> PlannedRequest:
        """What worker ``worker`` sends as request ``seq``: the source's (a conversation
        sends its session's next turn instead, :mod:`loadgen.conversation`)."""
        del worker  # every worker sends from the same source
        return self.source.request(seq)

    between_requests: ClassVar[bool] = False
    """A subclass that waits between a worker's requests (:meth:`_between_requests`)."""

    async def _between_requests(self, worker: int, result: RequestResult) -> None:
        """After a result is journaled, before the worker's next request (a conversation's
        think time); not called unless ``between_requests``, so it costs the rest nothing."""

    async def _back_off(self, consecutive: int) -> None:
        """Pause 50 ms, 100 ms, ... up to ``backoff_max_s`` after failures that came before
        any token: a refusing (503) or dead server would otherwise be hit thousands of times
        a second, each a journal line. Stop ends the pause at once."""
        if self.plan.backoff_max_s <= 0:
            return
        self.state.backoffs += 1
        pause = min(self.plan.backoff_max_s, 0.05 * 2 ** min(consecutive - 1, 16))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), pause)
