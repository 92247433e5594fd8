"""StreamClient and the load workers against the hostile server (in-process, loopback).

Nothing counts as a success unless it is one (issue 12 §2): an empty 200 stream and
impossible usage are failures of their own classes, and legitimate short answers are not.
Garbage streams end in a failure class, never in an exception out of the worker. A server
without keep-alive costs no failures: the stale pooled connection is resent once, counted.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from loadgen.client import StreamClient
from loadgen.envelope import FailureClass, RequestResult
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.workers import LoadGenerator, LoadPlan
from tests.hostile_server import build_app, good_stream

pytestmark = pytest.mark.timeout(60)

BODY = b'{"model":"hostile","stream":true,"max_tokens":16,"messages":[]}'


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **top: Any) -> str:
    obj: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 1}
    if delta is not None:
        obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    obj |= top
    return "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"


ROLE = chunk({"role": "assistant", "content": ""})
DONE = "data: [DONE]\n\n"


def usage(pt: Any = 5, ct: Any = 1, **more: Any) -> str:
    return chunk(choices=[], usage={"prompt_tokens": pt, "completion_tokens": ct, **more})


@asynccontextmanager
async def serve(script: dict[str, Any]) -> AsyncIterator[str]:
    runner = web.AppRunner(build_app(script), access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def one(stream: list[str], max_tokens: int | None = 16) -> RequestResult:
    async with (
        serve({"completion": {"stream": stream}}) as base,
        StreamClient(max_connections=2) as client,
    ):
        r = RequestResult(request_id="r", worker=0, prompt_id=0, sent_ns=0, max_tokens=max_tokens)
        return await client.stream_into(r, base + "/v1/chat/completions", BODY)


# -- empty streams ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stream",
    [
        [DONE],  # the case: 21,884 "completed", 0 tokens, PASSED
        [ROLE, DONE],
        [ROLE, chunk({}, "stop"), DONE],  # a finish, but no usage to say a token was made
        [ROLE, chunk({}, "stop"), usage(5, 0), DONE],  # usage says 0 tokens
        [ROLE, usage(5, 3), DONE],  # usage without any finish_reason
        # a finish and usage at max_tokens, but no chunk carried a token (review finding)
        [ROLE, chunk({}, "length"), usage(5, 16), DONE],
        [ROLE, chunk({}, "stop"), usage(5, 2), DONE],
        [": ping\n\n", chunk({"content": ""}), DONE],
    ],
)
async def test_a_stream_without_output_is_empty_stream(stream: list[str]) -> None:
    r = await one(stream)
    assert not r.ok and r.failure is FailureClass.EMPTY_STREAM, r
    assert r.failure_detail is not None and "[DONE]" in r.failure_detail
    assert r.status == 200 and r.chunks == 0


@pytest.mark.parametrize(
    ("stream", "chunks"),
    [
        ([ROLE, chunk({"content": "x"}, "length"), usage(5, 1), DONE], 1),  # max_tokens=1
        (  # a tool-call-only answer: no content, tool-call deltas (visible)
            [
                ROLE,
                chunk({"tool_calls": [{"index": 0, "id": "t", "function": {"name": "f"}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
                chunk({}, "tool_calls"),
                usage(5, 4),
                DONE,
            ],
            2,
        ),
        ([ROLE, chunk({"reasoning": "hmm"}), chunk({}, "length"), usage(5, 1), DONE], 1),
        ([ROLE, chunk({"content": "a"}), DONE], 1),  # no usage: a success, usage_missing
        ([ROLE, chunk({}, "stop"), usage(5, 1), DONE], 0),  # ended at once: an empty answer
    ],
)
async def test_legitimate_short_answers_are_successes(stream: list[str], chunks: int) -> None:
    r = await one(stream)
    assert r.ok, (r.failure, r.failure_detail)
    assert r.chunks == chunks


# -- an event that never ends ---------------------------------------------------------------


@pytest.mark.parametrize(
    "piece",
    ["x" * 65536, ("data: " + "y" * 1017 + "\n") * 64],  # no newline / no blank line
    ids=["no-newline", "data-lines"],
)
async def test_an_event_that_never_ends_is_malformed_not_held(piece: str) -> None:
    # 4 MiB that keep coming (so no read timeout fires), never an event's end.
    t0 = time.monotonic()
    r = await one([ROLE, "data: ", *[piece] * 64])
    assert not r.ok and r.failure is FailureClass.MALFORMED, (r.failure, r.failure_detail)
    assert r.failure_detail is not None and "grew past 1 MiB" in r.failure_detail
    assert time.monotonic() - t0 < 20


# -- impossible usage ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad_usage", "words"),
    [
        (usage(5, -12), "cannot be negative"),
        (usage(-1, 3), "cannot be negative"),
        (usage(5, 17), "above the request's max_tokens of 16"),
        (usage(5, 2.0), "JSON integer"),
        (usage(5, "3"), "JSON integer"),
        (usage(True, 3), "JSON integer"),
        (usage(5, 2**40), "beyond any context"),
        (usage(5, 3, total_tokens=4), "below usage.prompt_tokens"),
        (chunk(choices=[], usage=[1, 2]), "not a JSON object"),
    ],
)
async def test_impossible_usage_is_its_own_failure_and_counts_no_token(
    bad_usage: str, words: str
) -> None:
    r = await one([ROLE, chunk({"content": "a"}), chunk({"content": "b"}), bad_usage, DONE])
    assert not r.ok and r.failure is FailureClass.BAD_USAGE
    assert r.failure_detail is not None and words in r.failure_detail, r.failure_detail
    assert r.output_tokens is None and r.prompt_tokens is None  # never in a token total


async def test_usage_at_max_tokens_and_unknown_limit_are_possible() -> None:
    assert (await one([ROLE, chunk({"content": "a"}), usage(5, 16), DONE])).ok
    assert (await one([ROLE, chunk({"content": "a"}), usage(5, 500), DONE], None)).ok
    # total_tokens above the sum: engines count differently, not impossible
    assert (await one([ROLE, chunk({"content": "a"}), usage(5, 1, total_tokens=9), DONE])).ok


def test_output_limit_follows_the_body() -> None:
    assert BodyBuilder(model="m", max_tokens=64).output_limit == 64
    extra = (("max_tokens", 10), ("max_completion_tokens", 30))
    assert BodyBuilder(model="m", extra=extra).output_limit == 30
    assert BodyBuilder(model="m", extra=(("max_tokens", None),)).output_limit is None


# -- garbage through the whole worker -----------------------------------------------------


def garbage_streams(n: int, seed: int = 1234) -> list[list[str]]:
    """Deterministic hostile streams: random bytes, valid streams cut or spliced with
    garbage, garbage payloads, huge numbers, errors, nothing at all."""
    rng = random.Random(seed)
    valid = "".join(good_stream("hostile"))
    out: list[list[str]] = []
    for i in range(n):
        noise = "".join(chr(rng.randrange(256)) for _ in range(rng.randrange(1, 120)))
        at = rng.randrange(len(valid) + 1)
        kind = i % 8
        if kind == 0:
            out.append([noise])
        elif kind == 1:
            out.append([valid[:at] + noise + valid[at:]])
        elif kind == 2:
            out.append([valid[:at]])  # cut anywhere
        elif kind == 3:
            out.append([ROLE, "data: " + noise.replace("\n", "") + "\n\n", DONE])
        elif kind == 4:
            out.append([ROLE, chunk({"content": "a"}), usage(10**30, rng.randrange(-5, 5)), DONE])
        elif kind == 5:
            out.append(["event: error\ndata: " + noise.replace("\n", "") + "\n\n"])
        elif kind == 6:
            out.append([""])
        else:
            out.append([valid[:at], noise, valid[at:]])
    return out


async def test_garbage_streams_are_classified_never_raised_through_the_worker() -> None:
    streams = garbage_streams(64)
    script = {"completion": {"sequence": [{"stream": s} for s in streams]}}
    results: list[RequestResult] = []
    async with serve(script) as base, StreamClient(max_connections=8, read_timeout_s=5) as client:
        plan = LoadPlan(
            endpoints=(base,),
            concurrency=4,
            duration_s=None,
            max_requests=len(streams),
            drain_timeout_s=10,
            barrier_timeout_s=10,
            request_id_prefix="t/load/chat",
            backoff_max_s=0,
        )
        pool = PromptPool((Prompt(0, "hi"),), source="test")
        gen = LoadGenerator(plan, client, pool, BodyBuilder(model="hostile"), results.append)
        assert await gen.start_workers()
        await asyncio.wait_for(gen.run(), 30)
    assert not gen.state.worker_errors and len(results) == len(streams)
    classes = Counter(r.failure for r in results)
    for r in results:
        assert r.ok or isinstance(r.failure, FailureClass), r
        if r.ok:  # a success carried output, or the server said it finished a token
            assert r.chunks or (r.finish_reason and r.output_tokens == 1)
    # The examples really are hostile: several distinct classes, few successes.
    assert len(classes) >= 4, classes
    assert classes[None] < len(streams) // 4, classes
    assert classes[FailureClass.CLIENT] == 0, classes


# -- no keep-alive ------------------------------------------------------------------------


@pytest.mark.parametrize("close", ["silent", "reused", True])
async def test_no_keepalive_costs_no_failure_and_resends_are_counted(close: str | bool) -> None:
    async with (
        serve({"completion": {"close": close}}) as base,
        StreamClient(max_connections=4) as client,
    ):

        async def worker(k: int) -> list[RequestResult]:
            out = []
            for i in range(25):
                r = RequestResult(request_id=f"{k}/{i}", worker=k, prompt_id=0, sent_ns=0)
                out.append(await client.stream_into(r, base + "/v1/chat/completions", BODY))
            return out

        results = [r for rs in await asyncio.gather(*(worker(k) for k in range(3))) for r in rs]
    assert all(r.ok for r in results), Counter((r.failure, r.failure_detail) for r in results)
    retried = [r for r in results if r.stale_retry]
    if close is True:  # `Connection: close` said: aiohttp never reuses, nothing to resend
        assert not retried
        return
    assert retried, "the server closed every connection: some requests met a stale one"
    # Without them, the first send of every retried request would have been a failure.
    assert len(retried) >= len(results) // 3


async def test_a_fresh_connection_reset_is_not_resent() -> None:
    """Only a *pooled* connection that went stale is resent: a server that resets a new
    connection before answering failed this request (connect_error), and says so."""

    async def reset(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.abort()
        return web.Response()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", reset)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        async with StreamClient(max_connections=2) as client:
            r = RequestResult(request_id="r", worker=0, prompt_id=0, sent_ns=0)
            url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/chat/completions"
            await client.stream_into(r, url, BODY)
    finally:
        await runner.cleanup()
    assert r.failure is FailureClass.CONNECT and not r.stale_retry


async def test_a_stale_connection_is_resent_once_only() -> None:
    """A pooled connection that goes stale, then a fresh one that fails too: one resend,
    then the failure is the request's (counted both as a resend and as a failure)."""
    served: set[object] = set()

    async def first_then_reset(request: web.Request) -> web.StreamResponse:
        if not served:
            served.add(request.transport)
            await request.read()
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for piece in good_stream("m"):
                await resp.write(piece.encode())
            await resp.write_eof()
            return resp
        assert request.transport is not None
        request.transport.close()
        return web.Response()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", first_then_reset)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/chat/completions"
    try:
        async with StreamClient(max_connections=2) as client:
            a = RequestResult(request_id="a", worker=0, prompt_id=0, sent_ns=0)
            b = RequestResult(request_id="b", worker=0, prompt_id=0, sent_ns=0)
            await client.stream_into(a, url, BODY)
            await client.stream_into(b, url, BODY)  # the pooled connection, then a fresh one
    finally:
        await runner.cleanup()
    assert a.ok and not a.stale_retry
    assert b.stale_retry and b.failure is FailureClass.CONNECT, (b.failure, b.failure_detail)


def test_live_figures_never_count_a_failure_s_tokens() -> None:
    from loadgen.live import LiveLoadStats

    live = LiveLoadStats()
    bad = RequestResult(request_id="r", worker=0, prompt_id=0, sent_ns=0, end_ns=10)
    bad.failure, bad.output_tokens = FailureClass.BAD_USAGE, -12_202  # even if it were kept
    live.record(bad, 1.0)
    view = live.cumulative(1.0)
    assert view.output_tokens == 0 and view.failures_by_class == {"impossible_usage": 1}


async def test_a_resent_request_is_timed_from_the_resend() -> None:
    """The stale first send (here held 0.3 s before the server drops it) is in no latency."""
    calls = {"n": 0}

    async def ok_then_slow_drop(request: web.Request) -> web.StreamResponse:
        calls["n"] += 1
        if calls["n"] == 2:  # the second request, on the pooled connection
            await asyncio.sleep(0.3)
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in good_stream("m"):
            await resp.write(piece.encode())
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", ok_then_slow_drop)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/chat/completions"
    try:
        async with StreamClient(max_connections=2) as client:
            a = RequestResult(request_id="a", worker=0, prompt_id=0, sent_ns=0)
            b = RequestResult(request_id="b", worker=0, prompt_id=0, sent_ns=0)
            await client.stream_into(a, url, BODY)
            t0 = time.perf_counter_ns()
            await client.stream_into(b, url, BODY)
    finally:
        await runner.cleanup()
    assert a.ok and b.ok and b.stale_retry and calls["n"] == 3
    assert b.sent_ns - t0 >= 250e6  # sent_ns is the resend's, after the 0.3 s drop
    assert b.end_ns is not None and (b.end_ns - b.sent_ns) < 250e6
