"""The open-loop generator against a loopback aiohttp server: schedule, cap, stop, pause."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
import pytest
from aiohttp import web

from loadgen.arrivals import arrival_offsets
from loadgen.client import StreamClient
from loadgen.envelope import RequestResult
from loadgen.open_loop import OpenLoopGenerator, in_spans
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.request_source import PlannedRequest, PoolSource
from loadgen.workers import LoadPlan

pytestmark = pytest.mark.timeout(60)


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + orjson.dumps({"id": "c", "choices": [choice]}) + b"\n\n"


USAGE = (
    b'data: {"id":"c","choices":[],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n'
)


@asynccontextmanager
async def serve(answer_s: float) -> AsyncIterator[str]:
    """A server whose every answer takes ``answer_s`` (two tokens, usage, [DONE])."""

    async def models(request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": "m"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk({"content": "a"}))
        await asyncio.sleep(answer_s)
        await resp.write(_chunk({"content": "b"}, "stop") + USAGE + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def _plan(
    base: str, duration_s: float | None, max_requests: int | None = None, drain_s: float = 10
) -> LoadPlan:
    return LoadPlan(
        endpoints=(base,),
        concurrency=4,
        duration_s=duration_s,
        max_requests=max_requests,
        drain_timeout_s=drain_s,
        barrier_timeout_s=10,
        request_id_prefix="t/load/chat",
    )


def _generator(
    base: str,
    client: StreamClient,
    results: list[RequestResult],
    rate: float,
    cap: int,
    **kw: object,
) -> OpenLoopGenerator:
    pool = PromptPool((Prompt(0, "hi"),), source="test")
    bodies = BodyBuilder(model="m", max_tokens=4)
    offsets = arrival_offsets("constant", rate)
    plan = _plan(
        base,
        kw.get("duration_s", 1.0),  # type: ignore[arg-type]
        kw.get("max_requests"),  # type: ignore[arg-type]
        kw.get("drain_s", 10.0),  # type: ignore[arg-type]
    )
    return OpenLoopGenerator(plan, client, pool, bodies, results.append, offsets, cap)


async def test_each_request_is_sent_at_its_intended_time() -> None:
    results: list[RequestResult] = []
    async with serve(0.01) as base, StreamClient(max_connections=64) as client:
        gen = _generator(base, client, results, rate=50, cap=64)
        assert await gen.start_workers() and gen.state.workers_started == 4
        await asyncio.wait_for(gen.run(), 20)
    assert len(results) == 50 and all(r.ok for r in results), results[:2]
    assert gen.state.stop_reason == "issue window complete" and gen.state.held_by_cap == 0
    released = gen.state.barrier_released_ns
    assert released is not None
    intended = sorted(r.intended_ns or 0 for r in results)
    assert [round((t - released) / 1e6) for t in intended] == list(range(0, 1000, 20))
    late_ms = sorted((r.sent_ns - (r.intended_ns or 0)) / 1e6 for r in results)
    assert late_ms[0] >= -0.5 and late_ms[len(late_ms) // 2] < 10, late_ms


async def test_the_cap_holds_arrivals_back_and_counts_them_never_drops() -> None:
    results: list[RequestResult] = []
    async with serve(0.3) as base, StreamClient(max_connections=8) as client:
        gen = _generator(base, client, results, rate=20, cap=2)
        assert await gen.start_workers()
        await asyncio.wait_for(gen.run(), 20)
    assert gen.state.in_flight_peak == 2 and gen.state.held_by_cap > 0
    # ~3 answers in the 1 s window per slot: far fewer than the 20 scheduled, all sent late
    assert len(results) == gen.state.issued < 10
    assert max(r.sent_ns - (r.intended_ns or 0) for r in results) > 0.2e9


async def test_max_requests_stops_the_schedule() -> None:
    results: list[RequestResult] = []
    async with serve(0.01) as base, StreamClient(max_connections=8) as client:
        gen = _generator(base, client, results, rate=100, cap=8, duration_s=None, max_requests=5)
        assert await gen.start_workers()
        await asyncio.wait_for(gen.run(), 20)
    assert len(results) == 5 and gen.state.stop_reason == "request count reached"


async def test_abort_cancels_in_flight_requests_and_journals_them() -> None:
    results: list[RequestResult] = []
    async with serve(5.0) as base, StreamClient(max_connections=8) as client:
        gen = _generator(base, client, results, rate=20, cap=8, duration_s=10.0)
        assert await gen.start_workers()
        run = asyncio.create_task(gen.run())
        await asyncio.sleep(0.2)
        gen.abort()
        await asyncio.wait_for(run, 10)
    assert results and all(r.cancelled for r in results)
    assert gen.state.cancelled == len(results) and gen.state.cancel_cause == "abort"


async def test_the_drain_deadline_cuts_what_is_left_and_every_request_is_journaled() -> None:
    results: list[RequestResult] = []
    async with serve(5.0) as base, StreamClient(max_connections=16) as client:
        gen = _generator(base, client, results, rate=20, cap=16, duration_s=0.3, drain_s=0.3)
        assert await gen.start_workers()
        await asyncio.wait_for(gen.run(), 10)
        # Journaled by the time run() returns (the runner writes the record next).
        assert len(results) == gen.state.issued == 6
    assert all(r.cancelled for r in results) and gen.state.cancel_cause == "drain deadline"


async def test_a_pause_skips_the_arrivals_inside_it() -> None:
    results: list[RequestResult] = []
    async with serve(0.01) as base, StreamClient(max_connections=16) as client:
        gen = _generator(base, client, results, rate=50, cap=16, duration_s=1.0)
        assert await gen.start_workers()
        run = asyncio.create_task(gen.run())
        await asyncio.sleep(0.3)
        gen.pause()
        assert gen.paused
        await asyncio.sleep(0.3)
        gen.resume()
        await asyncio.wait_for(run, 20)
    assert 10 <= gen.state.skipped_paused <= 20, gen.state
    assert len(results) + gen.state.skipped_paused == 50
    released = gen.state.barrier_released_ns or 0
    offsets = sorted(((r.intended_ns or 0) - released) / 1e9 for r in results)
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    assert max(gaps) > 0.2  # a hole where the pause was, not a burst after it
    # The pause's span is kept, and exactly the arrivals skipped lie in it: withheld by
    # the operator, they are not the schedule's offer (steady_load.offered_rate).
    [(a, b)] = gen.state.paused_spans_s(released)
    assert 0.25 < a < b < 0.7 and b - a >= 0.29
    schedule = list(itertools.islice(arrival_offsets("constant", 50), 50))
    assert sum(1 for t in schedule if in_spans(t, [(a, b)])) == gen.state.skipped_paused
    assert not [t for t in offsets if in_spans(t, [(a, b)])]


class _AbortingSource:
    """Aborts the load while handing out request ``at``: the requests started in the same
    pass are cut before their tasks ever ran."""

    def __init__(self, inner: PoolSource, at: int) -> None:
        self.inner, self.at = inner, at
        self.gen: OpenLoopGenerator | None = None

    def request(self, n: int) -> PlannedRequest:
        if n == self.at and self.gen is not None:
            self.gen.abort()
        return self.inner.request(n)


async def test_requests_cut_before_they_began_are_journaled_too() -> None:
    results: list[RequestResult] = []
    pool = PromptPool((Prompt(0, "hi"),), source="test")
    bodies = BodyBuilder(model="m", max_tokens=4)
    source = _AbortingSource(PoolSource(pool, bodies), at=3)
    async with serve(0.01) as base, StreamClient(max_connections=16) as client:
        gen = OpenLoopGenerator(
            _plan(base, 5.0), client, pool, bodies, results.append,
            iter([0.0] * 6 + [1.0]), 16, source=source,
        )  # fmt: skip
        source.gen = gen
        assert await gen.start_workers()
        await asyncio.wait_for(gen.run(), 10)
    assert gen.state.issued == len(results) == 4  # the burst up to the abort, all journaled
    assert all(r.cancelled and "abort" in (r.failure_detail or "") for r in results)
    assert gen.state.cancelled == 4 and gen.state.in_flight == 0


async def test_an_arrival_held_by_the_cap_is_not_sent_inside_a_pause() -> None:
    results: list[RequestResult] = []
    async with serve(0.3) as base, StreamClient(max_connections=8) as client:
        gen = _generator(base, client, results, rate=20, cap=1, duration_s=1.5)
        assert await gen.start_workers()
        run = asyncio.create_task(gen.run())
        await asyncio.sleep(0.1)  # one request in flight, the next arrival held at the cap
        assert gen.state.held_by_cap == 1
        paused_ns = time.perf_counter_ns()
        gen.pause()
        await asyncio.sleep(0.6)  # the slot frees at ~0.3 s, inside the pause
        resumed_ns = time.perf_counter_ns()
        gen.resume()
        await asyncio.wait_for(run, 20)
    in_pause = [r for r in results if paused_ns < r.sent_ns < resumed_ns]
    assert in_pause == [], [(r.sent_ns - paused_ns) / 1e9 for r in in_pause]
    assert gen.state.skipped_paused > 0
    assert any(r.sent_ns > resumed_ns for r in results)  # issuing went on after it


def test_an_open_loop_refuses_a_concurrency_change_and_a_cap_below_one() -> None:
    pool = PromptPool((Prompt(0, "hi"),), source="test")
    bodies = BodyBuilder(model="m", max_tokens=4)
    client = StreamClient(max_connections=4)
    plan = _plan("http://127.0.0.1:1", 1.0)
    gen = OpenLoopGenerator(plan, client, pool, bodies, lambda r: None, iter([0.0]), 4)
    with pytest.raises(ValueError, match="open loop; change its rate"):
        gen.set_concurrency(8)
    assert gen.tasks == []  # no closed-loop worker was started
    with pytest.raises(ValueError, match="max_in_flight must be 1 or more, not 0"):
        OpenLoopGenerator(plan, client, pool, bodies, lambda r: None, iter([0.0]), 0)


class _BrokenEveryThird(StreamClient):
    """The real client with a soaktop bug injected: every third request raises."""

    calls = 0

    async def stream_into(self, result: RequestResult, url: str, body: bytes) -> RequestResult:
        self.calls += 1
        if self.calls % 3 == 0:
            raise RuntimeError("injected bug")
        return await super().stream_into(result, url, body)


async def test_a_soaktop_error_in_a_request_is_journaled_not_lost() -> None:
    results: list[RequestResult] = []
    async with serve(0.005) as base, _BrokenEveryThird(max_connections=64) as client:
        gen = _generator(base, client, results, rate=40, cap=64, duration_s=0.5)
        assert await gen.start_workers()
        await asyncio.wait_for(gen.run(), 20)
    # every issued request reaches the journal; the broken ones as the client's failure
    assert len(results) == gen.state.issued == 20
    broken = [r for r in results if r.failure is not None]
    assert len(broken) == sum(gen.state.worker_errors.values()) == 6
    assert all(
        r.failure == "client_error" and "injected bug" in (r.failure_detail or "") for r in broken
    )
