"""Closed-loop concurrency changes (issue 16 §1 stages, §3 live): parked workers send
nothing, woken ones resume, a raise past the workers started starts new ones, and a
parked worker leaves at once when the window closes."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadgen.client import StreamClient
from loadgen.envelope import RequestResult
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.workers import LoadGenerator, LoadPlan
from tests.loadgen.test_open_loop import serve

pytestmark = pytest.mark.timeout(60)


def _generator(
    base: str, client: StreamClient, results: list[RequestResult], concurrency: int, window_s: float
) -> LoadGenerator:
    plan = LoadPlan(
        endpoints=(base,),
        concurrency=concurrency,
        duration_s=window_s,
        max_requests=None,
        drain_timeout_s=10,
        barrier_timeout_s=10,
        request_id_prefix="t/load/chat",
    )
    pool = PromptPool((Prompt(0, "hello"),), source="test")
    bodies = BodyBuilder(model="m", max_tokens=2)
    return LoadGenerator(plan, client, pool, bodies, results.append)


def _in_flight_at(results: list[RequestResult], t_ns: int) -> set[int]:
    """The workers with a request in flight at ``t_ns``."""
    return {
        r.worker for r in results if r.sent_ns <= t_ns and (r.end_ns is None or r.end_ns > t_ns)
    }


async def test_parked_workers_send_nothing_and_wake_when_the_target_rises() -> None:
    results: list[RequestResult] = []
    async with serve(0.05) as base, StreamClient(max_connections=16) as client:
        gen = _generator(base, client, results, concurrency=6, window_s=1.5)
        assert await gen.start_workers()
        gen.set_concurrency(2)  # before the release: the load starts at 2
        run = asyncio.create_task(gen.run())
        await asyncio.sleep(0.5)
        raised_ns = time.perf_counter_ns()
        gen.set_concurrency(6)
        assert gen.active_workers == 6
        await run
    before = [r for r in results if r.sent_ns < raised_ns]
    after = [r for r in results if r.sent_ns >= raised_ns + 100_000_000]
    assert before and {r.worker for r in before} <= {0, 1}
    assert {r.worker for r in after} == set(range(6))
    assert gen.state.workers_started == 6 and gen.state.requested == 6
    assert all(r.ok for r in results)


async def test_lowering_parks_the_highest_workers_after_their_request() -> None:
    results: list[RequestResult] = []
    async with serve(0.05) as base, StreamClient(max_connections=16) as client:
        gen = _generator(base, client, results, concurrency=4, window_s=1.2)
        assert await gen.start_workers()
        run = asyncio.create_task(gen.run())
        await asyncio.sleep(0.4)
        lowered_ns = time.perf_counter_ns()
        gen.set_concurrency(1)
        await run
    late = [r for r in results if r.sent_ns > lowered_ns]
    assert late and {r.worker for r in late} == {0}
    # A request in flight when the target fell finished (not cut) and was journaled.
    assert all(not r.cancelled for r in results)
    assert _in_flight_at(results, lowered_ns + 200_000_000) <= {0}


async def test_a_live_raise_past_the_workers_started_starts_new_ones() -> None:
    results: list[RequestResult] = []
    async with serve(0.05) as base, StreamClient(max_connections=16) as client:
        gen = _generator(base, client, results, concurrency=2, window_s=1.2)
        assert await gen.start_workers()
        run = asyncio.create_task(gen.run())
        await asyncio.sleep(0.3)
        gen.set_concurrency(5)
        await run
    assert gen.state.workers_started == 5 and gen.state.requested == 5
    assert {r.worker for r in results} == set(range(5))
    assert gen.state.worker_errors == {} and not gen.state.start_failures


async def test_parked_workers_leave_when_the_window_closes() -> None:
    results: list[RequestResult] = []
    async with serve(0.02) as base, StreamClient(max_connections=16) as client:
        gen = _generator(base, client, results, concurrency=3, window_s=0.5)
        assert await gen.start_workers()
        gen.set_concurrency(0)  # every worker parked: nothing is sent
        t0 = time.monotonic()
        await gen.run()
        took = time.monotonic() - t0
    assert results == [] and gen.state.issued == 0
    assert took < 1.5  # the drain did not wait for parked workers
    assert all(t.done() for t in gen.tasks)


def test_a_negative_concurrency_is_refused() -> None:
    plan = LoadPlan(("http://127.0.0.1:1",), 1, 1.0, None, 1.0, 1.0, "t")
    gen = LoadGenerator(
        plan,
        StreamClient(max_connections=1),
        PromptPool((Prompt(0, "x"),), source="test"),
        BodyBuilder(model="m", max_tokens=1),
        lambda r: None,
    )
    with pytest.raises(ValueError, match="0 or more"):
        gen.set_concurrency(-1)


async def test_a_worker_woken_from_its_park_during_a_pause_sends_nothing() -> None:
    results: list[RequestResult] = []
    async with serve(0.02) as base, StreamClient(max_connections=16) as client:
        gen = _generator(base, client, results, concurrency=3, window_s=1.2)
        assert await gen.start_workers()
        gen.set_concurrency(1)  # workers 1 and 2 parked from the start
        run = asyncio.create_task(gen.run())
        await asyncio.sleep(0.2)
        gen.pause()
        await asyncio.sleep(0.05)  # worker 0's request in flight ends
        paused_ns = time.perf_counter_ns()
        gen.set_concurrency(3)  # wakes 1 and 2: still paused, they must wait
        await asyncio.sleep(0.4)
        resumed_ns = time.perf_counter_ns()
        gen.resume()
        await run
    in_pause = [r for r in results if paused_ns < r.sent_ns < resumed_ns]
    assert in_pause == [], [(r.worker, (r.sent_ns - paused_ns) / 1e9) for r in in_pause]
    assert {r.worker for r in results if r.sent_ns > resumed_ns} == {0, 1, 2}


def test_a_concurrency_above_the_clients_connections_is_refused() -> None:
    plan = LoadPlan(("http://127.0.0.1:1",), 2, 1.0, None, 1.0, 1.0, "t")
    gen = LoadGenerator(
        plan,
        StreamClient(max_connections=4),
        PromptPool((Prompt(0, "x"),), source="test"),
        BodyBuilder(model="m", max_tokens=1),
        lambda r: None,
    )
    assert gen.max_concurrency == 4
    gen.set_concurrency(4)
    with pytest.raises(ValueError, match="concurrency 5: at most 4, the connections"):
        gen.set_concurrency(5)
    assert gen.concurrency_target == 4
