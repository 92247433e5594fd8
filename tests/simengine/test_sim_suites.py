"""The simulated engine passes every built-in probe task, judged as strictly as soaktop does.

A healthy simulator must answer each JSON task with content that parses as strict JSON
(no NaN/Infinity, no raw control characters) and validates against the task's schema, and
each tool task with exactly one call of the expected function whose arguments validate,
streamed and not; otherwise a healthy demo would fail its own gates.
"""

from __future__ import annotations

import json
import random
from typing import Any

import aiohttp
import pytest
from jsonschema import Draft202012Validator

from probes.suite import BUILTIN_SUITES, Suite, Task, load_suites
from simengine.schemagen import SchemaGenerator
from simengine.server import Sim
from tests.simengine.sim_helpers import Stream, post_json, stream

SUITES = load_suites(list(BUILTIN_SUITES), [])
JSON_SUITE = SUITES["json"]
TOOLS_SUITE = SUITES["tools"]


def strict_loads(text: str) -> Any:
    """``json.loads`` as a strict probe uses it: NaN/Infinity and control characters fail."""

    def no_constants(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=no_constants)


def schema_problems(instance: Any, schema: dict[str, Any]) -> list[str]:
    """Every way ``instance`` breaks ``schema`` (empty: valid)."""
    return [
        f"{e.json_path}: {e.message}" for e in Draft202012Validator(schema).iter_errors(instance)
    ]


def params_of(task: Task, name: str) -> dict[str, Any]:
    """The parameters schema of one of the task's tools."""
    return next(t["function"]["parameters"] for t in task.tools if t["function"]["name"] == name)


def cap(suite: Suite, task: Task) -> int:
    return task.max_tokens or int(suite.defaults["max_tokens"])


def json_body(task: Task) -> dict[str, Any]:
    return {
        "model": "tiny-sim",
        "messages": [{"role": "user", "content": task.prompt}],
        "max_tokens": cap(JSON_SUITE, task),
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": task.id, "schema": task.schema_, "strict": True},
        },
    }


def tools_body(task: Task) -> dict[str, Any]:
    return {
        "model": "tiny-sim",
        "messages": [{"role": "user", "content": task.prompt}],
        "max_tokens": cap(TOOLS_SUITE, task),
        "temperature": 0,
        "tools": task.tools,
        "tool_choice": task.tool_choice,
        "parallel_tool_calls": False,
    }


def assemble_tool_calls(s: Stream) -> list[dict[str, str]]:
    """Tool calls from stream deltas, by index: the first delta names, the rest append."""
    calls: dict[int, dict[str, str]] = {}
    for chunk in s.chunks():
        for d in chunk["choices"][0]["delta"].get("tool_calls") or []:
            call = calls.setdefault(d["index"], {"id": "", "name": "", "arguments": ""})
            call["id"] = d.get("id") or call["id"]
            fn = d.get("function") or {}
            call["name"] += fn.get("name") or ""
            call["arguments"] += fn.get("arguments") or ""
    return [calls[i] for i in sorted(calls)]


# -- the generator alone, over many seeds (cheap, so it can try hard) --------------------------
SCHEMAS = [(f"json/{t.id}", t.schema_) for t in JSON_SUITE.tasks] + [
    (f"tools/{t.id}/{x['function']['name']}", x["function"]["parameters"])
    for t in TOOLS_SUITE.tasks
    for x in t.tools
]


@pytest.mark.parametrize(("where", "schema"), SCHEMAS, ids=[w for w, _ in SCHEMAS])
def test_generator_fills_every_builtin_schema(where: str, schema: dict[str, Any]) -> None:
    for seed in range(100):
        gen = SchemaGenerator(schema, random.Random(seed))
        value = gen.value()
        assert gen.notes == [], (where, seed)
        assert schema_problems(strict_loads(json.dumps(value)), schema) == [], (where, seed)


def test_pattern_and_length_bounds_together() -> None:
    schema = {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 3}
    for seed in range(50):
        value = SchemaGenerator(schema, random.Random(seed)).value()
        assert schema_problems(value, schema) == [], value


# -- over HTTP, as the probes send them ----------------------------------------------------------
async def test_every_json_task_passes(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    failures = []
    for rnd in ("before", "after"):
        for n, task in enumerate(JSON_SUITE.tasks, start=1):
            rid = f"run/{rnd}/json/{n}"
            status, body = await post_json(session, url, json_body(task), request_id=rid)
            assert status == 200, (rid, body)
            choice = body["choices"][0]
            content = choice["message"]["content"]
            if choice["finish_reason"] != "stop":
                failures.append((rid, task.id, choice["finish_reason"]))
                continue
            problems = schema_problems(strict_loads(content), task.schema_ or {})
            if problems:
                failures.append((rid, task.id, problems))
            assert body["usage"]["completion_tokens"] > 0
    assert failures == []


async def test_every_tool_task_calls_the_expected_function(
    sim: Sim, session: aiohttp.ClientSession
) -> None:
    url = sim.replicas[0].url
    for n, task in enumerate(TOOLS_SUITE.tasks, start=1):
        assert task.expect_function is not None
        params = params_of(task, task.expect_function)
        status, body = await post_json(
            session, url, tools_body(task), request_id=f"run/before/tools/{n}"
        )
        assert status == 200, body
        choice = body["choices"][0]
        assert choice["finish_reason"] == "tool_calls", task.id
        (call,) = choice["message"]["tool_calls"]  # exactly one: parallel_tool_calls false
        assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
        assert call["function"]["name"] == task.expect_function, task.id
        args = strict_loads(call["function"]["arguments"])
        assert schema_problems(args, params) == [], task.id


async def test_every_tool_task_streamed(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    for n, task in enumerate(TOOLS_SUITE.tasks, start=1):
        assert task.expect_function is not None
        s = await stream(session, url, tools_body(task), f"run/before/stream-tools/{n}")
        assert s.status == 200 and s.events[-1] == "[DONE]"
        assert s.chunks()[-1]["choices"][0]["finish_reason"] == "tool_calls", task.id
        (call,) = assemble_tool_calls(s)
        assert call["name"] == task.expect_function, task.id
        args = strict_loads(call["arguments"])
        assert schema_problems(args, params_of(task, task.expect_function)) == [], task.id
        usage = s.usage()
        assert usage is not None and usage["completion_tokens"] == len(s.token_chunks())


async def test_required_and_named_choice_never_call_twice_or_elsewhere(
    sim: Sim, session: aiohttp.ClientSession
) -> None:
    # Many request ids, so many different draws: never a second call, never another tool.
    url = sim.replicas[0].url
    multi = [t for t in TOOLS_SUITE.tasks if len(t.tools) > 1]
    assert multi
    for task in multi:
        for r in range(6):
            _, body = await post_json(session, url, tools_body(task), request_id=f"x{r}/{task.id}")
            names = [c["function"]["name"] for c in body["choices"][0]["message"]["tool_calls"]]
            assert names == [task.expect_function]


async def test_tool_result_round_trip_answers_in_words(
    sim: Sim, session: aiohttp.ClientSession
) -> None:
    url = sim.replicas[0].url
    for n, task in enumerate(SUITES["tool-result"].tasks, start=1):
        rid = f"run/before/tool-result/{n}"
        _, first = await post_json(session, url, tools_body(task), request_id=rid)
        message = first["choices"][0]["message"]
        (call,) = message["tool_calls"]
        convo = [
            {"role": "user", "content": task.prompt},
            {"role": "assistant", "content": None, "tool_calls": message["tool_calls"]},
            {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(task.tool_result)},
        ]
        body = {**tools_body(task), "messages": convo, "tool_choice": "none"}
        status, answer = await post_json(session, url, body, request_id=f"{rid}.2")
        assert status == 200, answer
        choice = answer["choices"][0]
        assert choice["message"]["content"], task.id
        assert choice["message"]["tool_calls"] == []
        assert choice["finish_reason"] in ("stop", "length")


async def test_smoke_and_needle_tasks_are_served(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    (smoke,) = SUITES["smoke"].tasks
    body = {
        "model": "tiny-sim",
        "messages": [{"role": "user", "content": smoke.prompt}],
        "max_tokens": cap(SUITES["smoke"], smoke),
    }
    s = await stream(session, url, body, "run/before/smoke/1")
    usage = s.usage()
    assert s.content() and usage is not None and 0 < usage["completion_tokens"] <= 16
    for n, task in enumerate(SUITES["needle"].tasks, start=1):
        assert task.context_tokens is not None
        filler = " ".join(["the quick brown fox jumps over the lazy dog."] * 1000)
        words = filler.split()[: task.context_tokens // 2]  # a word and a space: two tokens
        text = " ".join(words) + f" The secret code is {task.needle}. " + task.prompt
        body = {"model": "tiny-sim", "messages": [{"role": "user", "content": text}],
                "max_tokens": cap(SUITES["needle"], task)}  # fmt: skip
        status, answer = await post_json(session, url, body, request_id=f"run/before/needle/{n}")
        assert status == 200, answer
        assert answer["usage"]["prompt_tokens"] >= task.context_tokens * 0.9
        assert answer["choices"][0]["message"]["content"]
