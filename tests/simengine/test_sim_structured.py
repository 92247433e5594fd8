"""Structured outputs and tool calls: what a strict client check would accept."""

from __future__ import annotations

import asyncio
import json
import random
import re
from typing import Any

import aiohttp
import pytest

from simengine import regexgen
from simengine.schemagen import SchemaGenerator
from simengine.server import Sim
from tests.simengine.sim_helpers import chat_body, post_json, schema_errors, stream

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]{3,8}$"},
        "phone": {"type": "string", "pattern": r"^\d{3}-\d{4}$"},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "score": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {
            "type": "array",
            "items": {"type": "string", "minLength": 2, "maxLength": 6},
            "minItems": 1,
            "maxItems": 3,
        },
        "active": {"type": "boolean"},
        "note": {"type": "null"},
        "kind": {"const": "person"},
        "address": {"$ref": "#/$defs/address"},
        "nick": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
    },
    "required": ["name", "phone", "age", "score", "role", "tags", "active", "kind", "address"],
    "additionalProperties": False,
    "$defs": {
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Oslo"]},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
            },
            "required": ["city", "zip"],
            "additionalProperties": False,
        }
    },
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "pattern": "^[A-Z][a-z]{2,10}$"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"tz": {"type": "string", "pattern": r"^[A-Z]{3}$"}},
            "required": ["tz"],
        },
    },
}


@pytest.mark.parametrize("seed", range(40))
def test_generator_satisfies_schema(seed: int) -> None:
    value = SchemaGenerator(PERSON, random.Random(seed)).value()
    assert schema_errors(value, PERSON) == []


@pytest.mark.parametrize(
    "pattern",
    [r"^[a-z]{3,8}$", r"^\d{3}-\d{4}$", r"^[A-Z][a-z]+(-[A-Z][a-z]+)?$", r"^(cat|dog)s?$",
     r"^[A-F0-9]{8}$", r"^\w+@\w+\.com$", r"^v\d+\.\d+\.\d+$", r"^[^\s]{4}$"],
)  # fmt: skip
def test_regex_generator(pattern: str) -> None:
    rng = random.Random(1)
    for _ in range(20):
        text, ok = regexgen.generate(pattern, rng)
        assert ok and re.search(pattern, text), (pattern, text)


def test_unsupported_pattern_is_reported() -> None:
    gen = SchemaGenerator({"type": "string", "pattern": r"^(a)\1$"}, random.Random(0))
    gen.value()
    assert gen.notes and "best-effort" in gen.notes[0]


def _json_schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "p", "schema": schema, "strict": True}}


async def test_json_schema_stream_and_non_stream(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    for i in range(8):
        body = chat_body(response_format=_json_schema_format(PERSON), max_tokens=2000)
        s = await stream(session, url, body, f"r/before/json/{i}")
        assert s.chunks()[-1]["choices"][0]["finish_reason"] == "stop"
        assert len(s.token_chunks()) == s.usage()["completion_tokens"] > 5  # type: ignore[index]
        assert schema_errors(json.loads(s.content()), PERSON) == []
        status, nb = await post_json(session, url, body, request_id=f"r/before/json/{i}")
        assert status == 200
        assert json.loads(nb["choices"][0]["message"]["content"]) == json.loads(s.content())


async def test_json_object_and_structured_outputs_extra(
    sim: Sim, session: aiohttp.ClientSession
) -> None:
    url = sim.replicas[0].url
    _, nb = await post_json(session, url, chat_body(response_format={"type": "json_object"}))
    assert isinstance(json.loads(nb["choices"][0]["message"]["content"]), dict)
    schema = {"type": "array", "items": {"type": "integer", "minimum": 5, "maximum": 6},
              "minItems": 2, "maxItems": 2}  # fmt: skip
    _, nb = await post_json(session, url, chat_body(structured_outputs={"json": schema}))
    assert schema_errors(json.loads(nb["choices"][0]["message"]["content"]), schema) == []


async def test_json_cut_by_max_tokens_says_length(sim: Sim, session: aiohttp.ClientSession) -> None:
    body = chat_body(response_format=_json_schema_format(PERSON), max_tokens=4)
    s = await stream(session, sim.replicas[0].url, body)
    assert s.chunks()[-1]["choices"][0]["finish_reason"] == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(s.content())


def _assemble_tool_calls(s: Any) -> list[dict[str, Any]]:
    calls: dict[int, dict[str, Any]] = {}
    for c in s.chunks():
        for d in c["choices"][0]["delta"].get("tool_calls") or []:
            if "id" in d:
                assert d["type"] == "function" and d["function"]["arguments"] == ""
                calls[d["index"]] = {"id": d["id"], "name": d["function"]["name"], "args": ""}
            else:
                assert set(d) == {"index", "function"} and set(d["function"]) == {"arguments"}
                calls[d["index"]]["args"] += d["function"]["arguments"]
    return [calls[i] for i in sorted(calls)]


async def test_streamed_tool_call_required(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    params = WEATHER_TOOL["function"]["parameters"]  # type: ignore[index]
    for i in range(6):
        body = chat_body(
            "Weather in Paris?",
            tools=[WEATHER_TOOL],
            tool_choice="required",
            parallel_tool_calls=False,
            max_tokens=500,
        )
        s = await stream(session, url, body, f"r/before/tools/{i}")
        assert s.chunks()[-1]["choices"][0]["finish_reason"] == "tool_calls"
        calls = _assemble_tool_calls(s)
        assert len(calls) == 1
        assert calls[0]["name"] == "get_weather"
        assert calls[0]["id"].startswith("chatcmpl-tool-")
        assert schema_errors(json.loads(calls[0]["args"]), params) == []
        assert s.usage()["completion_tokens"] == len(s.token_chunks())  # type: ignore[index]


async def test_named_tool_choice_and_non_stream(sim: Sim, session: aiohttp.ClientSession) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    body = chat_body(tools=[WEATHER_TOOL, TIME_TOOL], tool_choice=named)
    status, nb = await post_json(session, sim.replicas[0].url, body)
    assert status == 200
    choice = nb["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_time"
    params = TIME_TOOL["function"]["parameters"]  # type: ignore[index]
    assert schema_errors(json.loads(call["function"]["arguments"]), params) == []
    status, err = await post_json(
        session,
        sim.replicas[0].url,
        chat_body(tools=[WEATHER_TOOL], tool_choice={"function": {"name": "nope"}}),
    )
    assert status == 400 and err["error"]["type"] == "BadRequestError"


async def test_auto_none_and_tool_result_round_trip(
    sim: Sim, session: aiohttp.ClientSession
) -> None:
    url = sim.replicas[0].url
    body = chat_body(tools=[WEATHER_TOOL], tool_choice="auto")
    answers = await asyncio.gather(
        *(post_json(session, url, body, request_id=f"a/{i}") for i in range(16))
    )
    kinds = {nb["choices"][0]["finish_reason"] == "tool_calls" for _, nb in answers}
    assert kinds == {True, False}  # p=0.5: both answers show up in 16 tries
    _, nb = await post_json(session, url, chat_body(tools=[WEATHER_TOOL], tool_choice="none"))
    assert nb["choices"][0]["message"]["tool_calls"] == []
    convo = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "chatcmpl-tool-1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "chatcmpl-tool-1", "content": '{"temp_c": 21}'},
    ]  # fmt: skip
    for i in range(4):
        _, nb = await post_json(
            session,
            url,
            {"messages": convo, "tools": [WEATHER_TOOL], "max_tokens": 50},
            request_id=f"rt/{i}",
        )
        choice = nb["choices"][0]
        assert choice["finish_reason"] in ("stop", "length")
        assert choice["message"]["content"] and choice["message"]["tool_calls"] == []
