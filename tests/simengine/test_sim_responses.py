"""The simulated engine's ``/v1/responses`` and its access checks (issue 18 §4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest

pytestmark = pytest.mark.timeout(60)


def _events(raw: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: ")]


async def test_stream_ends_in_completed_with_usage(
    sim_factory: Callable[..., Any], session: aiohttp.ClientSession
) -> None:
    async with sim_factory(reasoning_tokens=2) as sim:
        url = sim.replicas[0].url + "/v1/responses"
        body = {"model": sim.cfg.model, "input": "hi", "stream": True, "max_output_tokens": 6}
        async with session.post(url, json=body) as r:
            assert r.status == 200
            events = _events(await r.read())
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = [k for k in kinds if k.endswith(".delta")]
    usage = events[-1]["response"]["usage"]
    assert usage["output_tokens"] == len(deltas) == 6  # one event per token
    assert usage["output_tokens_details"]["reasoning_tokens"] == 2
    assert kinds.count("response.reasoning_text.delta") == 2
    assert events[-1]["response"]["status"] == "incomplete"  # stopped at the limit
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_non_streamed_and_bad_requests(
    sim_factory: Callable[..., Any], session: aiohttp.ClientSession
) -> None:
    async with sim_factory(reasoning_tokens=0) as sim:
        url = sim.replicas[0].url + "/v1/responses"
        body = {"model": sim.cfg.model, "instructions": "be brief",
                "input": [{"role": "user", "content": [{"type": "input_text", "text": "x"}]}],
                "max_output_tokens": 4}  # fmt: skip
        async with session.post(url, json=body) as r:
            assert r.status == 200
            got = await r.json()
        assert got["object"] == "response" and got["usage"]["output_tokens"] == 4
        assert got["output"][0]["content"][0]["type"] == "output_text"
        async with session.post(url, json={"model": sim.cfg.model}) as r:
            assert r.status == 400
            assert "input" in (await r.json())["error"]["message"]


async def test_required_headers_answer_401_without_them(
    sim_factory: Callable[..., Any], session: aiohttp.ClientSession
) -> None:
    async with sim_factory(require_headers=["X-Tenant: blue"]) as sim:
        base = sim.replicas[0].url
        async with session.get(base + "/v1/models") as r:
            assert r.status == 401
        async with session.get(base + "/v1/models", headers={"X-Tenant": "red"}) as r:
            assert r.status == 401
        async with session.get(base + "/v1/models", headers={"X-Tenant": "blue"}) as r:
            assert r.status == 200
