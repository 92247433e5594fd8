"""Multi-turn sessions on the closed loop, against a loopback server that keeps every body."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from aiohttp import web

from loadgen.answer_text import ANSWER_MAX_BYTES
from loadgen.client import StreamClient
from loadgen.conversation import ConversationGenerator, HistoryBuilder
from loadgen.envelope import FailureClass, RequestResult
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.workers import LoadGenerator, LoadPlan

pytestmark = pytest.mark.timeout(60)

Answer = Callable[[int, list[dict[str, Any]]], list[str] | None]
"""(request number, messages) → the answer's chunks, or None: HTTP 500."""


def _chunk(text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    return b"data: " + orjson.dumps({"id": "c", "choices": [choice]}) + b"\n\n"


@asynccontextmanager
async def serve(answer: Answer, bodies: dict[str, dict[str, Any]]) -> AsyncIterator[str]:
    """A chat server answering ``answer``'s chunks; every body kept by its request id."""
    numbers = itertools.count()

    async def models(request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": "m"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        bodies[request.headers["X-Request-Id"]] = body
        chunks = answer(next(numbers), body["messages"])
        body["_answer"] = None if chunks is None else "".join(chunks)  # what the server said
        if chunks is None:
            return web.json_response({"error": {"message": "boom"}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, text in enumerate(chunks):
            await resp.write(_chunk(text, "stop" if i == len(chunks) - 1 else None))
        usage = {"prompt_tokens": len(body["messages"]), "completion_tokens": len(chunks)}
        usage["total_tokens"] = sum(usage.values())
        tail = orjson.dumps({"id": "c", "choices": [], "usage": usage})
        await resp.write(b"data: " + tail + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application(client_max_size=16 * 1024 * 1024)
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


POOL = PromptPool(tuple(Prompt(i, f"question {i}") for i in range(5)), source="test")


def _plan(base: str, concurrency: int, max_requests: int) -> LoadPlan:
    return LoadPlan(
        endpoints=(base,),
        concurrency=concurrency,
        duration_s=None,
        max_requests=max_requests,
        drain_timeout_s=10,
        barrier_timeout_s=10,
        request_id_prefix="t/load/chat",
        backoff_max_s=0,
    )


async def _run(
    answer: Answer,
    *,
    concurrency: int = 2,
    max_requests: int = 12,
    turns: int = 3,
    think_time_s: float = 0.0,
    sanity_checks: bool = True,
) -> tuple[ConversationGenerator, list[RequestResult], dict[str, dict[str, Any]]]:
    results: list[RequestResult] = []
    bodies: dict[str, dict[str, Any]] = {}
    async with (
        serve(answer, bodies) as base,
        StreamClient(max_connections=8, sanity_checks=sanity_checks) as client,
    ):
        gen = ConversationGenerator(
            _plan(base, concurrency, max_requests),
            client,
            POOL,
            BodyBuilder(model="m", max_tokens=128, temperature=0.5),
            results.append,
            turns=turns,
            think_time_s=think_time_s,
        )
        assert await gen.start_workers()
        await asyncio.wait_for(gen.run(), 30)
    return gen, results, bodies


def _echo(n: int, messages: list[dict[str, Any]]) -> list[str]:
    return [f"answer{n} ", f"to {len(messages)}"]


async def test_each_turn_sends_the_history_with_the_answers_the_server_gave() -> None:
    gen, results, bodies = await _run(_echo)
    assert len(results) == 12 and all(r.ok for r in results)
    by_session: dict[int, list[RequestResult]] = {}
    for r in results:
        assert r.session is not None and r.turn is not None
        by_session.setdefault(r.session, []).append(r)
    assert len(by_session) == 4 and gen.state.sessions_completed == 4
    for turns in by_session.values():
        assert [r.turn for r in turns] == [1, 2, 3]
        answers: list[str] = []
        for r in turns:
            body = bodies[r.request_id]
            assert body["temperature"] == 0.5 and "seed" not in body  # the run's body shape
            messages, turn = body["messages"], r.turn or 0
            assert [m["role"] for m in messages] == ["user", "assistant"] * (turn - 1) + ["user"]
            assert [m["content"] for m in messages[1::2]] == answers  # the actual answers
            seq = int(r.request_id.rsplit("/", 1)[1])
            assert messages[-1]["content"] == POOL.pick(seq).text  # the pool's next prompt
            answers.append(body["_answer"])
    # The prompt grows with the turn: the server's prompt tokens (messages here) show it.
    assert sorted({r.prompt_tokens or 0 for r in results}) == [1, 3, 5]


async def test_a_failed_turn_ends_its_session_and_the_worker_starts_another() -> None:
    def fail_turn_2(n: int, messages: list[dict[str, Any]]) -> list[str] | None:
        return None if len(messages) == 3 else ["ok"]

    gen, results, _ = await _run(fail_turn_2, concurrency=1, max_requests=6)
    assert [(r.turn, r.ok) for r in results] == [(1, True), (2, False)] * 3
    assert all(r.failure is FailureClass.HTTP_5XX for r in results if not r.ok)
    assert [r.session for r in results] == [0, 0, 1, 1, 2, 2]
    assert gen.state.sessions_ended_early == {2: 3} and gen.state.sessions_completed == 0


async def test_think_time_waits_between_turns_and_not_between_sessions() -> None:
    _, results, _ = await _run(_echo, concurrency=1, max_requests=4, turns=2, think_time_s=0.3)
    assert [r.turn for r in results] == [1, 2, 1, 2]
    gaps = [(b.sent_ns - (a.end_ns or 0)) / 1e9 for a, b in itertools.pairwise(results)]
    assert gaps[0] >= 0.3 and gaps[2] >= 0.3, gaps  # inside a session: the think time
    assert gaps[1] < 0.2, gaps  # a new session (another user) starts at once


@pytest.mark.parametrize("sanity_checks", [True, False])
async def test_an_answer_past_the_bound_goes_into_the_history_cut_and_said(
    sanity_checks: bool,
) -> None:
    piece = "x" * 1023 + " "
    long = [piece] * (ANSWER_MAX_BYTES // len(piece) + 8)  # 72 KiB

    def answer(n: int, messages: list[dict[str, Any]]) -> list[str]:
        return long if len(messages) == 1 else ["short"]

    _, results, bodies = await _run(
        answer, concurrency=1, max_requests=2, turns=2, sanity_checks=sanity_checks
    )
    first, second = results
    assert first.ok and first.answer_truncated and not second.answer_truncated
    history = bodies[second.request_id]["messages"][1]["content"]
    assert history == "".join(long)[: len(history)]  # the head, whole chunks
    # Whole chunks of the bound (each counted with its separator byte).
    assert ANSWER_MAX_BYTES - 2 * len(piece) < len(history) <= ANSWER_MAX_BYTES


async def test_a_load_of_single_requests_keeps_no_answer() -> None:
    results: list[RequestResult] = []
    bodies: dict[str, dict[str, Any]] = {}
    async with serve(_echo, bodies) as base, StreamClient(max_connections=4) as client:
        gen = LoadGenerator(_plan(base, 1, 3), client, POOL, BodyBuilder(model="m"), results.append)
        assert await gen.start_workers()
        await asyncio.wait_for(gen.run(), 30)
    assert len(results) == 3 and all(r.ok for r in results)
    assert all(r.answer is None and r.turn is None and r.session is None for r in results)
    assert all(len(b["messages"]) == 1 for b in bodies.values())


def test_a_conversation_needs_the_chat_api() -> None:
    with pytest.raises(ValueError, match="chat API"):
        HistoryBuilder(BodyBuilder(model="m", api="completions"))


async def test_a_worker_parked_mid_session_leaves_that_session() -> None:
    results: list[RequestResult] = []
    bodies: dict[str, dict[str, Any]] = {}
    first_turn_of_worker_1 = asyncio.Event()

    def on_result(r: RequestResult) -> None:
        results.append(r)
        if r.worker == 1 and r.turn == 1:
            first_turn_of_worker_1.set()

    async with serve(_echo, bodies) as base, StreamClient(max_connections=8) as client:
        gen = ConversationGenerator(
            _plan(base, 2, 10),
            client,
            POOL,
            BodyBuilder(model="m", max_tokens=128),
            on_result,
            turns=3,
            think_time_s=0.2,
        )
        assert await gen.start_workers()
        run = asyncio.create_task(gen.run())
        await asyncio.wait_for(first_turn_of_worker_1.wait(), 10)
        gen.set_concurrency(1)  # worker 1 parks after its think time, mid-session
        await asyncio.sleep(0.5)
        gen.set_concurrency(2)
        await asyncio.wait_for(run, 30)
    mine = [r.turn for r in results if r.worker == 1]
    # the session it had begun is over: woken, it starts a new one, never turn 2 after a park
    assert mine[0] == 1 and mine[1] == 1, mine
    assert gen.state.sessions_parked == 1
