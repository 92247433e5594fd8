"""Every fault action, as the client (and an operator reading logs and gauges) notices it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from sim_helpers import chat_body, post_json, scrape, stream, value

from simengine import FaultRule


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
