"""The engine model seen through /metrics: batching, queueing, KV pressure, counters."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

import aiohttp

from simengine.server import Sim
from tests.simengine.sim_helpers import Stream, chat_body, post_json, scrape, stream, value

LABELS = {"model_name": "tiny-sim", "engine": "0"}


async def _sample_while(
    session: aiohttp.ClientSession, url: str, work: asyncio.Future[Any], every: float = 0.03
) -> list[dict[str, float]]:
    """Scrape running/waiting/KV/preemptions until ``work`` is done."""
    seen = []
    while not work.done():
        fams = await scrape(session, url + "/metrics")
        seen.append(
            {
                "running": value(fams, "vllm:num_requests_running", **LABELS),
                "waiting": value(fams, "vllm:num_requests_waiting", **LABELS),
                "kv": value(fams, "vllm:kv_cache_usage_perc", **LABELS),
            }
        )
        await asyncio.sleep(every)
    return seen


async def test_running_capped_and_queue_builds(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    async with sim_factory(max_num_seqs=4, decode_ms_base=10.0) as sim:
        url = sim.replicas[0].url
        body = chat_body(max_tokens=20, ignore_eos=True)
        work = asyncio.ensure_future(
            asyncio.gather(*(stream(session, url, body, f"r/load/chat/{i}") for i in range(16)))
        )
        seen = await _sample_while(session, url, work)
        results = await work
    assert max(s["running"] for s in seen) == 4
    assert max(s["waiting"] for s in seen) > 0
    assert all(r.usage()["completion_tokens"] == 20 for r in results)  # type: ignore[index]


async def test_kv_pressure_preempts_and_still_answers(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    cfg = {"max_num_seqs": 16, "num_gpu_blocks": 24, "block_size": 16, "max_model_len": 384}
    async with sim_factory(**cfg) as sim:
        url = sim.replicas[0].url
        body = chat_body(max_tokens=100, ignore_eos=True)
        work = asyncio.ensure_future(
            asyncio.gather(*(stream(session, url, body, f"r/load/chat/{i}") for i in range(16)))
        )
        seen = await _sample_while(session, url, work, every=0.01)
        results = await work
        fams = await scrape(session, url + "/metrics")
    assert max(s["kv"] for s in seen) >= 0.9
    assert value(fams, "vllm:num_preemptions_total", **LABELS) > 0
    # Preempted sequences are recomputed, not lost: every client gets its full answer.
    for r in results:
        assert r.usage()["completion_tokens"] == len(r.token_chunks()) == 100  # type: ignore[index]
    assert value(fams, "vllm:kv_cache_usage_perc", **LABELS) == 0


async def test_metric_names_types_and_labels(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    await stream(session, url, chat_body(max_tokens=3))
    async with session.get(url + "/metrics") as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = await r.text()
    assert "vllm:prompt_tokens_total{" in text  # counters exposed with _total
    fams = await scrape(session, url + "/metrics")
    want = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:num_preemptions": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:request_success": "counter",
        "vllm:prefix_cache_queries": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:cache_config_info": "gauge",
    }
    for name, kind in want.items():
        assert fams[name].type == kind, name
    for name in want:
        if name == "vllm:cache_config_info":
            continue
        for s in fams[name].samples:
            extra = set(s.labels) - {"model_name", "engine", "finished_reason", "le"}
            assert not extra and s.labels["model_name"] == "tiny-sim", (name, s.labels)
            assert s.labels["engine"] == "0"
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples}
    assert {"stop", "length", "abort", "error"} <= reasons
    assert value(fams, "vllm:request_success_total", finished_reason="length", **LABELS) == 1
    itl = value(fams, "vllm:inter_token_latency_seconds_count", **LABELS)
    assert itl == 2  # three tokens, two gaps
    (info,) = fams["vllm:cache_config_info"].samples
    assert info.value == 1
    assert info.labels["block_size"] == "16" and info.labels["num_gpu_blocks"] == "16384"
    for key in ("cache_dtype", "gpu_memory_utilization", "enable_prefix_caching", "engine"):
        assert isinstance(info.labels[key], str)


async def test_counter_deltas_equal_client_usage(sim: Sim, session: aiohttp.ClientSession) -> None:
    url = sim.replicas[0].url
    before = await scrape(session, url + "/metrics")
    prompt = completion = 0
    jobs: list[Coroutine[Any, Any, tuple[int, Any] | Stream]] = []
    for i in range(24):
        body = chat_body("tell me " * (i + 1), max_tokens=5 + i)
        if i % 3 == 0:
            jobs.append(post_json(session, url, body, request_id=f"r/load/chat/{i}"))
        elif i % 3 == 1:
            jobs.append(stream(session, url, body, f"r/load/chat/{i}"))
        else:
            cbody = {"prompt": "Once " * i, "max_tokens": 4 + i}
            jobs.append(stream(session, url, cbody, f"r/load/c/{i}", path="/v1/completions"))
    for res in await asyncio.gather(*jobs):
        u = res[1]["usage"] if isinstance(res, tuple) else res.usage()
        assert u is not None, res  # every answer here carries usage
        prompt += u["prompt_tokens"]
        completion += u["completion_tokens"]
    after = await scrape(session, url + "/metrics")

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("vllm:prompt_tokens_total", **LABELS) == prompt
    assert delta("vllm:generation_tokens_total", **LABELS) == completion
    finished = sum(
        delta("vllm:request_success_total", finished_reason=r, **LABELS) for r in ("stop", "length")
    )
    assert finished == 24
    assert delta("vllm:e2e_request_latency_seconds_count", **LABELS) == 24
    assert delta("vllm:time_to_first_token_seconds_count", **LABELS) == 24


async def test_client_disconnect_frees_kv_and_is_not_an_abort(
    sim: Sim, session: aiohttp.ClientSession
) -> None:
    url = sim.replicas[0].url
    body = chat_body(max_tokens=5000, ignore_eos=True, stream=True)
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        got = 0
        async for _ in r.content:
            got += 1
            if got > 10:
                break
    # Leaving the block closes the connection mid-stream.
    for _ in range(100):
        fams = await scrape(session, url + "/metrics")
        if value(fams, "vllm:num_requests_running", **LABELS) == 0:
            break
        await asyncio.sleep(0.02)
    assert value(fams, "vllm:num_requests_running", **LABELS) == 0
    assert value(fams, "vllm:kv_cache_usage_perc", **LABELS) == 0
    total = sum(s.value for s in fams["vllm:request_success"].samples if s.name.endswith("_total"))
    assert total == 0
    assert 0 < value(fams, "vllm:generation_tokens_total", **LABELS) < 5000


async def test_queue_limit_rejects_both_ways(
    sim_factory: Any, session: aiohttp.ClientSession
) -> None:
    async with sim_factory(max_num_seqs=1, max_num_queued_reqs=1, decode_ms_base=5.0) as sim:
        url = sim.replicas[0].url
        body = chat_body(max_tokens=40, ignore_eos=True)
        results = await asyncio.gather(
            *(stream(session, url, body, f"r/load/chat/{i}") for i in range(8))
        )
    http_503 = [r for r in results if r.status == 503]
    in_stream = [
        r for r in results if r.status == 200 and any("error" in e for e in r.json_events())
    ]
    ok = [r for r in results if r.usage() is not None]
    assert http_503 and in_stream and ok
    assert len(http_503) + len(in_stream) + len(ok) == 8
    err = in_stream[0].json_events()[0]["error"]
    assert err["code"] == 503 and in_stream[0].events[-1] == "[DONE]"
    assert json.loads(http_503[0].raw)["error"]["type"] == "ServiceUnavailableError"


async def test_periodic_log_line(sim_factory: Any, session: aiohttp.ClientSession) -> None:
    async with sim_factory(log_interval_s=0.2, decode_ms_base=10.0) as sim:
        url = sim.replicas[0].url
        await stream(session, url, chat_body(max_tokens=40, ignore_eos=True), "r/load/chat/1")
        await asyncio.sleep(0.3)
        log = sim.replicas[0].log.path.read_text()
    assert "Engine 000: Avg prompt throughput: " in log
    assert "Running: " in log and "GPU KV cache usage: " in log
    assert "Prefix cache hit rate: " in log
    assert "Received request chatcmpl-r/load/chat/1" in log
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in log and "r/load/chat/1" in log
