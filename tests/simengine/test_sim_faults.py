"""Every fault action, as the client (and an operator reading logs and gauges) notices it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from probes.suite import load_suites
from simengine import FaultRule, contract
from simengine.faults import FaultBook, scenario_rules
from tests.simengine.sim_helpers import chat_body, post_json, schema_errors, scrape, stream, value


def rule(**kw: Any) -> FaultRule:
    return FaultRule.model_validate(kw)


async def test_http_500_and_503_bodies(sim_factory: Any, session: aiohttp.ClientSession) -> None:
    faults = [rule(match="*/after/json/1", action="http_500"),
              rule(match="*/after/json/2", action="http_503")]  # fmt: skip
    async with sim_factory(faults=faults) as sim:
        url = sim.replicas[0].url
        status, body = await post_json(session, url, chat_body(), request_id="r/after/json/1")
        assert status == 500
        assert body["error"]["code"] == 500 and body["error"]["type"] == "InternalServerError"
        s = await stream(session, url, chat_body(), "r/after/json/2")
        assert s.status == 503 and json.loads(s.raw)["error"]["code"] == 503
        # count 1: the same id again is served normally
        again = await stream(session, url, chat_body(max_tokens=3), "r/after/json/1")
        assert again.status == 200 and again.usage() is not None


async def test_error_event_inside_200_stream(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    faults = [rule(match="*/load/chat/5", action="error_event", after_tokens=3)]
    async with sim_factory(faults=faults) as sim:
        url = sim.replicas[0].url
        s = await stream(session, url, chat_body(max_tokens=50, ignore_eos=True), "r/load/chat/5")
        fams = await scrape(session, url + "/metrics")
    assert s.status == 200
    assert len(s.token_chunks()) == 3
    err = s.json_events()[-1]
    assert err == {"error": {"message": err["error"]["message"], "type": "InternalServerError",
                             "param": None, "code": 500}}  # fmt: skip
    assert s.events[-1] == "[DONE]"
    assert s.usage() is None
    assert value(fams, "vllm:request_success_total", finished_reason="error") == 1


async def test_malformed_chunk_then_stream_continues(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    faults = [rule(match="*/m", action="malformed", after_tokens=2)]
    async with sim_factory(faults=faults) as sim:
        body = chat_body(max_tokens=6, ignore_eos=True)
        s = await stream(session, sim.replicas[0].url, body, "t/m")
    broken = [e for e in s.events if e != "[DONE]" and not e.endswith("}")]
    assert broken == ['{"id":']
    assert s.events.index('{"id":') == 3  # role chunk, two tokens, then the broken event
    assert len(s.token_chunks()) == 6 and s.events[-1] == "[DONE]"


async def test_reset_cuts_the_stream(sim_factory: Any, session: aiohttp.ClientSession) -> None:
    faults = [rule(match="*/r", action="reset", after_tokens=2)]
    async with sim_factory(faults=faults) as sim:
        url = sim.replicas[0].url
        body = chat_body(max_tokens=50, ignore_eos=True, stream=True)
        received = b""
        with pytest.raises(aiohttp.ClientError):
            async with session.post(
                url + "/v1/chat/completions", json=body, headers={"X-Request-Id": "t/r"}
            ) as r:
                assert r.status == 200
                async for chunk in r.content.iter_any():
                    received += chunk
        assert received.count(b"data: ") == 3 and b"[DONE]" not in received
        # The replica keeps serving.
        ok = await stream(session, url, chat_body(max_tokens=2))
        assert ok.usage() is not None


async def test_stall_trips_a_short_read_timeout(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    faults = [rule(match="*/s", action="stall", after_tokens=2, stall_s=30)]
    async with sim_factory(faults=faults) as sim:
        url = sim.replicas[0].url
        body = chat_body(max_tokens=20, ignore_eos=True, stream=True)
        timeout = aiohttp.ClientTimeout(sock_read=0.4)
        got = b""
        with pytest.raises(asyncio.TimeoutError):
            async with session.post(
                url + "/v1/chat/completions", json=body, headers={"X-Request-Id": "t/s"},
                timeout=timeout,
            ) as r:  # fmt: skip
                async for chunk in r.content.iter_any():
                    got += chunk
        assert got.count(b'"content":" ') == 2
        # The stalled request is dropped once its client left: the engine drains.
        for _ in range(50):
            fams = await scrape(session, url + "/metrics")
            if value(fams, "vllm:num_requests_running") == 0:
                break
            await asyncio.sleep(0.05)
        assert value(fams, "vllm:num_requests_running") == 0


async def test_time_rule_counts_from_first_load_request(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    faults = [rule(match="*/load/*", at_s=0.3, action="http_503", count=2)]
    async with sim_factory(faults=faults) as sim:
        url = sim.replicas[0].url
        first = await stream(session, url, chat_body(max_tokens=2), "r/before/smoke/1")
        await asyncio.sleep(0.4)  # before-phase requests do not start the clock
        second = await stream(session, url, chat_body(max_tokens=2), "r/load/chat/1")
        await asyncio.sleep(0.4)
        late = [await stream(session, url, chat_body(max_tokens=2), f"r/load/chat/{i}")
                for i in range(2, 6)]  # fmt: skip
    assert first.status == 200 and second.status == 200
    assert [r.status for r in late] == [503, 503, 200, 200]


async def test_post_load_500_scenario(sim_factory: Any, session: aiohttp.ClientSession) -> None:
    async with sim_factory(scenario="post-load-500") as sim:
        url = sim.replicas[0].url
        statuses = []
        for i in range(1, 4):
            rid = f"r/after/json/{i}"
            st, _ = await post_json(session, url, chat_body(max_tokens=2), request_id=rid)
            statuses.append(st)
        load, _ = await post_json(session, url, chat_body(max_tokens=2), request_id="r/load/json/1")
    assert statuses == [500, 200, 200] and load == 200


async def test_xid_scenario_sets_gauge_and_logs(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    async with sim_factory(replicas=2, scenario="xid-mid-run", scenario_at=0.2) as sim:
        r1 = sim.replicas[1]
        before = await scrape(session, r1.dcgm_url)
        assert value(before, "DCGM_FI_DEV_XID_ERRORS", gpu="1") == 0
        await stream(session, sim.replicas[0].url, chat_body(max_tokens=2), "r/load/chat/1")
        for _ in range(40):
            fams = await scrape(session, r1.dcgm_url)
            if value(fams, "DCGM_FI_DEV_XID_ERRORS", gpu="1") == 31:
                break
            await asyncio.sleep(0.05)
        other = await scrape(session, sim.replicas[0].dcgm_url)
        log1 = r1.log.path.read_text()
        log0 = sim.replicas[0].log.path.read_text()
    assert value(fams, "DCGM_FI_DEV_XID_ERRORS", gpu="1") == 31
    assert value(fams, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 0
    assert sum(s.value for s in other["DCGM_FI_DEV_XID_ERRORS"].samples) == 0
    assert "CUDA error: an illegal memory access was encountered" in log1
    assert "NVRM: Xid (PCI:0000:2a:00): 31, pid=" in log1 and "VLLM::EngineCore0" in log1
    assert "illegal memory access" not in log0


async def test_xid_single_replica_falls_back_to_replica_0(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    async with sim_factory(replicas=1, scenario="xid-mid-run", scenario_at=0.0) as sim:
        rep = sim.replicas[0]
        await stream(session, rep.url, chat_body(max_tokens=2), "r/load/chat/1")
        for _ in range(40):
            if value(await scrape(session, rep.dcgm_url), "DCGM_FI_DEV_XID_ERRORS", gpu="1"):
                break
            await asyncio.sleep(0.05)
        log = rep.log.path.read_text()
    assert "only 1 replica(s) run; using replica 0" in log
    assert "NVRM: Xid" in log


async def test_dcgm_labels_and_load_tracking(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    async with sim_factory(replicas=1, gpus_per_replica=4, max_num_seqs=8) as sim:
        rep = sim.replicas[0]
        idle = await scrape(session, rep.dcgm_url)
        body = chat_body(max_tokens=200, ignore_eos=True)
        work = asyncio.gather(*(stream(session, rep.url, body) for _ in range(8)))
        await asyncio.sleep(0.15)
        busy = await scrape(session, rep.dcgm_url)
        await work
    samples = idle["DCGM_FI_DEV_GPU_UTIL"].samples
    assert [s.labels["gpu"] for s in samples] == ["0", "1", "2", "3"]
    for s in samples:
        assert s.labels["modelName"] == "NVIDIA H200 (simulated)"
        assert s.labels["UUID"].startswith("GPU-")
        assert s.labels["device"] == f"nvidia{s.labels['gpu']}"
        assert s.labels["Hostname"] == "sim-node-0"
    for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP",
                 "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK"):  # fmt: skip
        assert idle[name].type == "gauge"
    assert value(idle, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == 0
    assert value(busy, "DCGM_FI_DEV_GPU_UTIL", gpu="0") > 50
    assert value(busy, "DCGM_FI_DEV_FB_USED", gpu="0") > value(idle, "DCGM_FI_DEV_FB_USED", gpu="0")


async def test_engine_death_of_one_replica(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    cfg = {"replicas": 2, "scenario": "engine-death", "scenario_at": 0.3, "death_health_s": 0.5,
           "decode_ms_base": 10.0}  # fmt: skip
    async with sim_factory(**cfg) as sim:
        dead, alive = sim.replicas[1], sim.replicas[0]
        body = chat_body(max_tokens=500, ignore_eos=True)
        in_flight = await stream(session, dead.url, body, "r/load/chat/1")
        # The in-flight stream ended with vLLM's engine-dead error event, then [DONE].
        err = in_flight.json_events()[-1]["error"]
        assert err["code"] == 500 and "EngineCore encountered an issue" in err["message"]
        assert in_flight.events[-1] == "[DONE]" and in_flight.usage() is None
        async with session.get(dead.url + "/health") as r:
            assert r.status == 503
        status, nb = await post_json(session, dead.url, chat_body(max_tokens=2))
        assert status == 500 and "EngineCore encountered an issue" in nb["error"]["message"]
        await asyncio.sleep(0.8)
        with pytest.raises(aiohttp.ClientConnectorError):
            async with session.get(dead.url + "/health"):
                pass
        async with session.get(alive.url + "/health") as r:
            assert r.status == 200
        ok = await stream(session, alive.url, chat_body(max_tokens=3), "r/load/chat/2")
        assert ok.usage() is not None
        log = dead.log.path.read_text()
    assert "EngineCore encountered a fatal error" in log
    assert "Engine core proc EngineCore_DP0 died unexpectedly" in log


# -- contract faults: HTTP 200, consistent usage, broken JSON or tool call ---------------------
EVENT_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 40},
        "room": {"type": "string", "pattern": "^[A-Z][0-9]{3}$"},
        "seats": {"type": "integer", "minimum": 1, "maximum": 99},
    },
    "required": ["title", "room", "seats"],
    "additionalProperties": False,
}


def _json_task() -> dict[str, Any]:
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "e", "schema": EVENT_SCHEMA, "strict": True},
    }
    return chat_body("Extract the event as JSON.", response_format=fmt, max_tokens=200)


def _tool(name: str, props: dict[str, Any]) -> dict[str, Any]:
    params = {"type": "object", "properties": props, "required": list(props),
              "additionalProperties": False}  # fmt: skip
    return {"type": "function", "function": {"name": name, "parameters": params, "strict": True}}


WEATHER = _tool("get_weather", {"city": {"type": "string", "pattern": "^[A-Z][a-z]{1,20}$"},
                                "unit": {"enum": ["celsius", "fahrenheit"]}})  # fmt: skip
TIME = _tool("get_time", {"tz": {"type": "string", "pattern": "^[A-Z]{3}$"}})


def _streamed_content_and_usage(s: Any) -> tuple[str, int]:
    usage = s.usage()
    assert s.status == 200 and s.events[-1] == "[DONE]" and usage is not None
    assert usage["completion_tokens"] == len(s.token_chunks())  # usage = tokens sent
    return s.content(), usage["completion_tokens"]


def _stream_calls(s: Any) -> list[dict[str, str]]:
    calls: dict[int, dict[str, str]] = {}
    for c in s.chunks():
        for d in c["choices"][0]["delta"].get("tool_calls") or []:
            call = calls.setdefault(d["index"], {"name": "", "arguments": ""})
            call["name"] += d["function"].get("name") or ""
            call["arguments"] += d["function"].get("arguments") or ""
    return [calls[i] for i in sorted(calls)]


async def test_json_control_char(sim_factory: Any, session: aiohttp.ClientSession) -> None:
    faults = [rule(match="*/json/1", action="json_control_char", count=0)]
    async with sim_factory(faults=faults) as sim:
        url = sim.replicas[0].url
        status, nb = await post_json(session, url, _json_task(), request_id="r/before/json/1")
        s = await stream(session, url, _json_task(), "r/before/json/1")
        log = sim.replicas[0].log.path.read_text()
    assert status == 200
    choice = nb["choices"][0]
    content = choice["message"]["content"]
    assert choice["finish_reason"] == "stop"
    assert "\x01" in content  # raw, not the escape sequence \u0001
    with pytest.raises(json.JSONDecodeError, match="Invalid control character"):
        json.loads(content)
    # Only the control character is wrong: a lenient parser sees the whole object, and the
    # character sits inside the free maxLength string, not the pattern one.
    lenient = json.loads(content, strict=False)
    assert set(lenient) == {"title", "room", "seats"} and "\x01" in lenient["title"]
    assert len(lenient["title"]) <= 40
    streamed, n = _streamed_content_and_usage(s)
    assert streamed == content and nb["usage"]["completion_tokens"] == n
    assert "fault json_control_char injected into chatcmpl-r/before/json/1" in log


async def test_json_invalid_is_cut_short_but_says_stop(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    faults = [rule(match="*/json/2", action="json_invalid", count=2)]
    async with sim_factory(faults=faults) as sim:
        url = sim.replicas[0].url
        _, broken = await post_json(session, url, _json_task(), request_id="r/after/json/2")
        s = await stream(session, url, _json_task(), "r/after/json/2")
        # count 2 used up: the same id now gets the healthy answer it was cut from.
        _, healthy = await post_json(session, url, _json_task(), request_id="r/after/json/2")
    choice = broken["choices"][0]
    content = choice["message"]["content"]
    assert choice["finish_reason"] == "stop"  # not "length": the engine claims it is done
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)
    whole = healthy["choices"][0]["message"]["content"]
    assert json.loads(whole) and whole.startswith(content) and len(content) < len(whole)
    assert broken["usage"]["completion_tokens"] < healthy["usage"]["completion_tokens"]
    streamed, n = _streamed_content_and_usage(s)
    assert streamed == content and n == broken["usage"]["completion_tokens"]
    assert s.chunks()[-1]["choices"][0]["finish_reason"] == "stop"


async def test_tool_wrong_function(sim_factory: Any, session: aiohttp.ClientSession) -> None:
    faults = [rule(match="*/tools/*", action="tool_wrong_function", count=0)]
    named = {"type": "function", "function": {"name": "get_weather"}}
    two = chat_body("Weather in Paris?", tools=[WEATHER, TIME], tool_choice=named,
                    parallel_tool_calls=False)  # fmt: skip
    one = chat_body("Weather in Paris?", tools=[WEATHER], tool_choice="required",
                    parallel_tool_calls=False)  # fmt: skip
    async with sim_factory(faults=faults) as sim:
        url = sim.replicas[0].url
        _, nb_two = await post_json(session, url, two, request_id="r/before/tools/1")
        s_two = await stream(session, url, two, "r/before/tools/1")
        _, nb_one = await post_json(session, url, one, request_id="r/before/tools/2")
        s_one = await stream(session, url, one, "r/before/tools/2")
    # Two tools: the other one is called, with arguments that fit that other tool.
    (call,) = nb_two["choices"][0]["message"]["tool_calls"]
    assert nb_two["choices"][0]["finish_reason"] == "tool_calls"
    assert call["function"]["name"] == "get_time"
    assert schema_errors(json.loads(call["function"]["arguments"]),
                         TIME["function"]["parameters"]) == []  # fmt: skip
    assert _stream_calls(s_two) == [
        {"name": "get_time", "arguments": call["function"]["arguments"]}
    ]
    # One tool: a function the request never offered.
    (call1,) = nb_one["choices"][0]["message"]["tool_calls"]
    assert call1["function"]["name"] not in ("get_weather", "get_time")
    assert [c["name"] for c in _stream_calls(s_one)] == [call1["function"]["name"]]
    for s in (s_two, s_one):
        _streamed_content_and_usage(s)


async def test_tool_bad_arguments(sim_factory: Any, session: aiohttp.ClientSession) -> None:
    faults = [rule(match="*/tools/3", action="tool_bad_arguments", count=0)]
    body = chat_body("Weather in Paris?", tools=[WEATHER], tool_choice="required",
                     parallel_tool_calls=False)  # fmt: skip
    params = WEATHER["function"]["parameters"]
    async with sim_factory(faults=faults) as sim:
        url = sim.replicas[0].url
        _, nb = await post_json(session, url, body, request_id="r/after/tools/3")
        s = await stream(session, url, body, "r/after/tools/3")
    (call,) = nb["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    args = json.loads(call["function"]["arguments"])  # it parses...
    assert any("missing" in e for e in schema_errors(args, params))  # ...but misses a key
    (streamed,) = _stream_calls(s)
    assert streamed == {"name": "get_weather", "arguments": call["function"]["arguments"]}
    assert nb["usage"]["completion_tokens"] == _streamed_content_and_usage(s)[1]


async def test_contract_fault_on_an_answer_without_json_or_tools(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    faults = [rule(match="*/smoke/1", action="json_invalid")]
    async with sim_factory(faults=faults) as sim:
        s = await stream(session, sim.replicas[0].url, chat_body(max_tokens=8), "r/before/smoke/1")
        log = sim.replicas[0].log.path.read_text()
    _streamed_content_and_usage(s)
    assert "fault json_invalid: nothing to break in this answer; sent as is" in log


@pytest.mark.parametrize(
    ("value", "where"),
    [({"n": 1, "tags": ["ab", "cd"]}, "tags"), ({"n": 1, "ok": True}, "key"), ([1, 2], "raw")],
)
def test_control_char_lands_in_a_string_when_there_is_one(value: Any, where: str) -> None:
    text = contract.with_control_char(value)
    assert text.count("\x01") == 1
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    if where == "tags":  # the first string value; a lenient parser still reads it
        assert "\x01" in json.loads(text, strict=False)["tags"][0]
    elif where == "key":  # no string value: the first key carries it
        assert "\x01" in next(iter(json.loads(text, strict=False)))


@pytest.mark.parametrize("text", ['{"a": [1, 2]}', "12345", "7", '"abc"', "true"])
def test_cut_short_never_parses(text: str) -> None:
    cut = contract.cut_short(text)
    with pytest.raises(json.JSONDecodeError):
        json.loads(cut)
    assert cut.rstrip(",") and text.startswith(cut.rstrip(","))


def test_bad_arguments_fallbacks() -> None:
    closed = {"type": "object", "properties": {"a": {}}, "additionalProperties": False}
    assert contract.break_arguments({"a": 1}, {**closed, "required": ["a"]}) == {}
    assert contract.break_arguments({"a": 1}, closed) == {"a": 1, "unexpected_argument": True}
    assert contract.break_arguments({}, {"type": "object"}) == [{}]


def test_broken_contracts_globs_hit_every_phase_round_and_retry() -> None:
    book = FaultBook(scenario_rules("broken-contracts", 0.0), n_replicas=1)

    def action(rid: str) -> str | None:
        hit = book.match_request(rid, 0)
        return hit.action if hit else None

    for rid in ("run/before/json/3", "run/after/json/3", "run/canary/json/3.2",
                "run/after/json/3.r1", "run/before/json/3"):  # fmt: skip
        assert action(rid) == "json_control_char", rid  # count 0: every time
    for rid in ("run/before/json/11", "run/canary/json/11.1", "run/after/json/11.r2"):
        assert action(rid) == "json_invalid", rid
    for rid in ("run/before/tools/2", "run/canary/tools/2.3", "run/after/tools/2.r1"):
        assert action(rid) == "tool_bad_arguments", rid
    for rid in ("run/before/json/31", "run/before/json/13", "run/before/json/1",
                "run/after/json/113", "run/before/tools/21", "run/before/stream-tools/2",
                "run/before/json/33.1", "run/load/chat/3"):  # fmt: skip
        assert action(rid) is None, rid


async def test_broken_contracts_scenario(sim_factory: Any, session: aiohttp.ClientSession) -> None:
    suites = load_suites(["json", "tools"], [])
    json_tasks, tool_tasks = suites["json"].tasks, suites["tools"].tasks

    def json_req(n: int) -> dict[str, Any]:
        t = json_tasks[n - 1]
        fmt = {"type": "json_schema", "json_schema": {"name": t.id, "schema": t.schema_,
                                                      "strict": True}}  # fmt: skip
        return chat_body(t.prompt, response_format=fmt, max_tokens=t.max_tokens or 256)

    def tool_req(n: int) -> dict[str, Any]:
        t = tool_tasks[n - 1]
        return chat_body(t.prompt, tools=t.tools, tool_choice=t.tool_choice,
                         parallel_tool_calls=False, max_tokens=256)  # fmt: skip

    def parses(content: str) -> bool:
        try:
            json.loads(content)
        except json.JSONDecodeError:
            return False
        return True

    async with sim_factory(scenario="broken-contracts") as sim:
        url = sim.replicas[0].url

        async def content(rid: str, n: int) -> str:
            status, nb = await post_json(session, url, json_req(n), request_id=rid)
            assert status == 200 and nb["choices"][0]["finish_reason"] == "stop", rid
            return str(nb["choices"][0]["message"]["content"])

        for rid in ("run/before/json/3", "run/canary/json/3.2", "run/after/json/3",
                    "run/after/json/3.r1"):  # fmt: skip
            assert "\x01" in await content(rid, 3), rid
        assert not parses(await content("run/after/json/11", 11))
        for rid, n in (
            ("run/after/json/1", 1),
            ("run/after/json/31", 3),
            ("run/after/json/12", 12),
        ):
            got = await content(rid, n)
            assert parses(got) and "\x01" not in got, rid
        params = tool_tasks[1].tools[0]["function"]["parameters"]
        for rid in ("run/before/tools/2", "run/after/tools/2"):
            _, nb = await post_json(session, url, tool_req(2), request_id=rid)
            (call,) = nb["choices"][0]["message"]["tool_calls"]
            assert call["function"]["name"] == tool_tasks[1].expect_function
            assert schema_errors(json.loads(call["function"]["arguments"]), params) != [], rid
        _, ok = await post_json(session, url, tool_req(1), request_id="run/after/tools/1")
        (call,) = ok["choices"][0]["message"]["tool_calls"]
        ok_params = tool_tasks[0].tools[0]["function"]["parameters"]
        assert schema_errors(json.loads(call["function"]["arguments"]), ok_params) == []
