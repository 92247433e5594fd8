"""The OpenAI routes as a client sees them: framing, usage, token counts, errors."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from simengine.server import Sim
from tests.simengine.sim_helpers import chat_body, post_json, stream


async def test_chat_stream_framing_and_usage(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    s = await stream(session, url, chat_body(max_tokens=7), "run/load/chat/1")
    assert s.status == 200
    assert s.content_type.startswith("text/event-stream")
    assert s.events[-1] == "[DONE]"
    # Compact JSON exactly as vLLM's pydantic dump writes it.
    assert all(": " not in e[:40] and e.startswith('{"id":') for e in s.events[:-1])
    chunks = s.json_events()
    first = chunks[0]
    assert first["object"] == "chat.completion.chunk"
    assert first["id"] == "chatcmpl-run/load/chat/1"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["choices"][0]["finish_reason"] is None
    tokens = s.token_chunks()
    assert len(tokens) == 7
    assert all(list(c["choices"][0]["delta"]) == ["content"] for c in tokens)
    finish = chunks[-2]
    assert finish["choices"][0]["finish_reason"] == "length"
    assert finish["choices"][0]["delta"] in ({}, {"content": ""})
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert list(usage_chunk["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens"]
    u = usage_chunk["usage"]
    assert u["completion_tokens"] == len(tokens) == 7
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]


async def test_no_usage_chunk_unless_asked(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    body = chat_body(max_tokens=3, stream=True)
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        raw = await r.read()
    assert b'"usage"' not in raw
    assert raw.endswith(b"data: [DONE]\n\n")


async def test_eos_stop_and_usage_matches_chunks(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    stops = 0
    results = await asyncio.gather(
        *(stream(session, url, chat_body(max_tokens=400), f"r/load/chat/{i}") for i in range(12))
    )
    for s in results:
        u = s.usage()
        assert u is not None
        assert u["completion_tokens"] == len(s.token_chunks())
        reason = s.chunks()[-1]["choices"][0]["finish_reason"]
        assert reason in ("stop", "length")
        stops += reason == "stop"
    assert stops >= 10  # mean 128 tokens: almost every answer ends on EOS before 400


async def test_ignore_eos_runs_to_max_tokens(sim: Sim, session: aiohttp.ClientSession) -> None:
    s = await stream(session, sim.replicas[0].url, chat_body(max_tokens=60, ignore_eos=True))
    assert s.usage()["completion_tokens"] == 60  # type: ignore[index]
    assert s.chunks()[-1]["choices"][0]["finish_reason"] == "length"


async def test_same_request_id_same_answer(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    a = await stream(session, url, chat_body(max_tokens=300), "x/load/chat/9")
    b = await stream(session, url, chat_body(max_tokens=300), "x/load/chat/9")
    c = await stream(session, url, chat_body(max_tokens=300), "x/load/chat/10")
    assert a.content() == b.content()
    assert a.content() != c.content()


async def test_non_stream_chat(sim: Sim, session: aiohttp.ClientSession) -> None:
    status, body = await post_json(session, sim.replicas[0].url, chat_body(max_tokens=9))
    assert status == 200
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str) and choice["message"]["content"]
    assert choice["finish_reason"] in ("stop", "length")
    u = body["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert 1 <= u["completion_tokens"] <= 9


async def test_completions_stream_and_non_stream(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    body = {"model": "tiny-sim", "prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": True}
    s = await stream(session, url, body, path="/v1/completions")
    assert s.events[-1] == "[DONE]"
    assert s.chunks()[0]["object"] == "text_completion"
    assert "delta" not in s.chunks()[0]["choices"][0]
    assert len(s.token_chunks()) == 5 == s.usage()["completion_tokens"]  # type: ignore[index]
    status, nb = await post_json(session, url, body, path="/v1/completions")
    assert status == 200 and nb["object"] == "text_completion"
    assert nb["usage"]["completion_tokens"] == 5 and nb["choices"][0]["text"]


async def test_tokenize_agrees_with_usage(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Count these tokens, please: 1, 2, 3!"},
    ]
    status, tok = await post_json(session, url, {"messages": messages}, path="/tokenize")
    assert status == 200
    assert tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 8192
    s = await stream(session, url, {"messages": messages, "max_tokens": 2})
    assert s.usage()["prompt_tokens"] == tok["count"]  # type: ignore[index]
    status, tok2 = await post_json(session, url, {"prompt": "Once upon a time"}, path="/tokenize")
    s2 = await stream(
        session, url, {"prompt": "Once upon a time", "max_tokens": 2}, path="/v1/completions"
    )
    assert s2.usage()["prompt_tokens"] == tok2["count"] == 7  # type: ignore[index]


async def test_small_routes(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    async with session.get(url + "/v1/models") as r:
        models = await r.json()
    card = models["data"][0]
    assert models["object"] == "list"
    assert card["id"] == "tiny-sim" and card["owned_by"] == "vllm"
    assert card["max_model_len"] == 8192 and card["root"] == "tiny-sim"
    assert card["parent"] is None and card["permission"]
    async with session.get(url + "/version") as r:
        assert await r.json() == {"version": "0.32.0"}
    async with session.get(url + "/health") as r:
        assert r.status == 200 and await r.read() == b""
    async with session.get(url + "/load") as r:
        assert await r.json() == {"server_load": 0}


async def test_validation_errors(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    cases = [
        ({"model": "tiny-sim"}, 400),
        (chat_body(max_tokens=0), 400),
        (chat_body(max_tokens="many"), 400),
        (chat_body("word " * 9000), 400),
        (chat_body(max_tokens=9000), 400),
        (chat_body(tool_choice="required"), 400),
        (chat_body(stream_options={"include_usage": True}), 400),
        ({**chat_body(), "model": "gpt-unknown"}, 404),
    ]
    for body, want in cases:
        status, err = await post_json(session, url, body)
        assert status == want, body
        assert set(err) == {"error"}
        e = err["error"]
        assert set(e) == {"message", "type", "param", "code"}
        assert e["code"] == want and e["param"] is None
        assert e["type"] == ("BadRequestError" if want == 400 else "NotFoundError")
    _, err = await post_json(session, url, {**chat_body(), "model": "gpt-unknown"})
    assert err["error"]["message"] == "The model `gpt-unknown` does not exist."
    async with session.post(url + "/v1/chat/completions", data=b"{not json") as r:
        assert r.status == 400
        assert json.loads(await r.read())["error"]["code"] == 400


async def test_reasoning_tokens_come_first(
    sim_factory: object, session: aiohttp.ClientSession
) -> None:
    async with sim_factory(reasoning_tokens=4) as sim:  # type: ignore[operator]
        s = await stream(session, sim.replicas[0].url, chat_body(max_tokens=10, ignore_eos=True))
    deltas = [c["choices"][0]["delta"] for c in s.token_chunks()]
    assert [list(d) for d in deltas[:4]] == [["reasoning"]] * 4
    assert all("content" in d for d in deltas[4:])
    assert s.usage()["completion_tokens"] == 10  # type: ignore[index]
