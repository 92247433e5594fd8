"""A mixed load's request source and its answer contracts (issue 16 §2, workload classes):
the seeded weighted draw, each class's own body, and the client classifying a broken
answer of a JSON or tool-call class as ``contract_error`` from a real loopback stream."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from loadgen.answer_contract import AnswerContract, ContractError
from loadgen.answer_text import ANSWER_MAX_BYTES
from loadgen.client import StreamClient
from loadgen.envelope import AVAILABILITY_CLASSES, FailureClass, RequestResult
from loadgen.mix import BLOCK, MixSource, WorkloadClass
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.sanity import VisibleText, value_unit
from loadgen.tool_call_text import ToolCallText

pytestmark = pytest.mark.timeout(30)

TICKET = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 20},
        "priority": {"type": "string", "enum": ["low", "high"]},
    },
    "required": ["title", "priority"],
    "additionalProperties": False,
}


def _pool(tag: str, n: int = 4) -> PromptPool:
    return PromptPool(tuple(Prompt(i, f"{tag} prompt {i}") for i in range(n)), f"jsonl:{tag}")


def _mix(seed: int = 7) -> MixSource:
    return MixSource(
        [
            WorkloadClass("chat", 6, _pool("chat"), BodyBuilder("m", max_tokens=32)),
            WorkloadClass("long", 2, _pool("long"), BodyBuilder("m", max_tokens=8)),
            WorkloadClass(
                "json",
                2,
                _pool("json"),
                BodyBuilder(
                    "m",
                    max_tokens=64,
                    extra=(("response_format", {"type": "json_schema", "json_schema": {}}),),
                ),
                AnswerContract.json_schema(TICKET),
            ),
        ],
        seed,
    )


def test_each_class_gets_its_weight_and_sends_its_own_body() -> None:
    mix = _mix()
    requests = [mix.request(n) for n in range(20_000)]
    counts = Counter(r.workload_class for r in requests)
    assert counts["chat"] / 20_000 == pytest.approx(0.6, abs=0.02)
    assert counts["long"] / 20_000 == pytest.approx(0.2, abs=0.02)
    assert counts["json"] / 20_000 == pytest.approx(0.2, abs=0.02)
    for r in requests[:200]:
        body = orjson.loads(r.body)
        text = body["messages"][0]["content"]
        assert text.startswith(r.workload_class or "?"), (r, text)  # its own pool
        want = {"chat": 32, "long": 8, "json": 64}[r.workload_class or "?"]
        assert body["max_tokens"] == want == r.max_tokens
        assert ("response_format" in body) == (r.workload_class == "json")
    assert set(mix.contracts()) == {"json"}


def test_the_draw_is_a_function_of_the_seed_and_n_alone() -> None:
    ns = range(3 * BLOCK)
    mix = _mix()
    forward = [mix.request(n).workload_class for n in ns]
    again = _mix()  # asked in another order: blocks drawn again, the same classes
    assert [again.request(n).workload_class for n in reversed(ns)][::-1] == forward
    other = _mix(seed=8)
    assert [other.request(n).workload_class for n in ns] != forward


def test_bad_weights_are_refused() -> None:
    cls = WorkloadClass("a", 0, _pool("a"), BodyBuilder("m"))
    with pytest.raises(ValueError, match="weight"):
        MixSource([cls], 0)
    with pytest.raises(ValueError, match="at least one"):
        MixSource([], 0)


def _text(*values: str, tool_calls: bool = False) -> VisibleText:
    t = VisibleText()
    for v in values:
        t.raw += value_unit(orjson.dumps(v)[1:-1])  # as the SSE parser collects a value
    t.tool_calls = tool_calls
    return t


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ('{"title":"disk full","priority":"high"}', None),
        ('{"title":"disk full"}', "schema violation at /: 'priority' is a required property"),
        ('{"title":"disk full","priority":"urgent"}', "schema violation at /priority"),
        ('{"title":"disk full","priority":"high"', "not strict JSON"),
        ('{"title":"a\x01b","priority":"low"}', "raw control character U+0001"),
        ('{"title":"a","title":"b","priority":"low"}', "duplicate key 'title'"),
        ('{"title":"a","priority":NaN}', "NaN is not JSON"),
        ("Sure! Here is your ticket.", "not strict JSON"),
    ],
)
def test_a_json_schema_contract_says_what_is_wrong(answer: str, why: str | None) -> None:
    contract = AnswerContract.json_schema(TICKET)
    got = contract.check(_text(answer[:7], answer[7:]), "stop")
    assert got is None if why is None else (got is not None and why in got), got


def test_json_object_tool_call_and_empty_answers() -> None:
    assert AnswerContract.json_object().check(_text("[1, 2]"), "stop") == "not a JSON object (list)"
    assert AnswerContract.json_object().check(_text('{"a": 1}'), "stop") is None
    assert AnswerContract.json_object().check(None, "stop") == "no content in the answer"
    tools_only = _text(tool_calls=True)
    assert AnswerContract.json_object().check(tools_only, "tool_calls") == (
        "a tool call instead of JSON content"
    )
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    required = AnswerContract.tool_call(tools, "required")
    calls = ToolCallText()
    calls.add([{"index": 0, "id": "c0", "function": {"name": "get_weather", "arguments": "{}"}}])
    assert required.check(tools_only, "tool_calls", calls) is None
    assert "no tool call in the answer" in (required.check(_text("I won't."), "stop") or "")
    cut = AnswerContract.json_schema(TICKET).check(_text('{"title":"x'), "length")
    assert cut is not None and "max_tokens ended it" in cut


def test_an_invalid_schema_is_refused_before_any_request() -> None:
    with pytest.raises(ContractError, match="not a valid JSON Schema"):
        AnswerContract.json_schema({"type": "objekt"})


# --- the client, against a loopback stream ------------------------------------------------


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    obj = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _usage(n: int) -> bytes:
    usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
    return b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n"


ANSWERS = {
    "/good": ['{"title":', '"disk full",', '"priority":"high"}'],
    "/bad": ['{"title":', '"disk full"}'],
    "/long": ['{"title":"' + "x" * 999 + '",'] * (ANSWER_MAX_BYTES // 1000 + 2) + ['"a":1}'],
}


@pytest.fixture
async def base() -> AsyncIterator[str]:
    async def models(_request: web.Request) -> web.StreamResponse:
        return web.json_response({"object": "list", "data": [{"id": "m"}]})

    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        parts = ANSWERS[request.path]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for p in parts:
            await resp.write(_chunk({"content": p}))
        await resp.write(_chunk({}, "stop") + _usage(len(parts)) + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    for path in ANSWERS:
        app.router.add_post(path, stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def _send(client: StreamClient, url: str, cls: str | None) -> RequestResult:
    result = RequestResult("r/1", 0, 0, 0, max_tokens=1000, workload_class=cls)
    return await client.stream_into(result, url, b'{"stream": true}')


@pytest.mark.parametrize("sanity", [True, False])
async def test_the_client_classifies_a_broken_answer_as_a_contract_failure(
    base: str, sanity: bool
) -> None:
    contracts = {"json": AnswerContract.json_schema(TICKET)}
    async with StreamClient(max_connections=4, contracts=contracts, sanity_checks=sanity) as c:
        good, bad, long, other = await asyncio.gather(
            _send(c, base + "/good", "json"),
            _send(c, base + "/bad", "json"),
            _send(c, base + "/long", "json"),
            _send(c, base + "/bad", "chat"),  # a class without a contract: not checked
        )
    assert good.ok and good.failure is None, good.failure_detail
    assert bad.failure is FailureClass.CONTRACT and bad.failure not in AVAILABILITY_CLASSES
    assert "schema violation at /: 'priority' is a required property" in (bad.failure_detail or "")
    assert bad.sanity == () and bad.end_ns is not None and bad.output_tokens == 2
    assert long.failure is FailureClass.CONTRACT
    assert long.failure_detail == "answer too long to check: past 64 KiB of text"
    assert other.ok and other.answer is None  # no text kept for a request without a contract
