"""``GET /server_info``: the simulated replica answers as vLLM does in dev mode (the same
sections and field names as the real 0.32 capture in tests/fixtures), or 404 as
production vLLM does (``--no-server-info``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from simengine.cli import build_parser, config_from_args

REAL = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures/recipe_vllm_0.32_server_info.json").read_text()
)


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.get(url) as r:
        return r.status, (await r.json() if r.status == 200 else await r.text())


async def test_server_info_json_has_the_real_shape(
    sim_factory: Callable[..., Any], session: aiohttp.ClientSession
) -> None:
    settings = {"max_num_seqs": 48, "gpu_memory_utilization": 0.85, "gpus_per_replica": 2}
    async with sim_factory(**settings) as sim:
        status, body = await _get(session, f"{sim.replicas[0].url}/server_info?config_format=json")
    assert status == 200
    assert set(body) == {"vllm_config", "vllm_env", "system_env"}
    vc = body["vllm_config"]
    for section, fields in vc.items():  # every section and field is one real vLLM has
        if fields is None:
            assert REAL["vllm_config"][section] is None
            continue
        assert set(fields) <= set(REAL["vllm_config"][section]), section
    assert vc["scheduler_config"]["max_num_seqs"] == 48
    assert vc["cache_config"]["gpu_memory_utilization"] == 0.85
    assert vc["parallel_config"]["tensor_parallel_size"] == 2
    assert vc["model_config"]["model"] == "tiny-sim"
    assert vc["cache_config"]["num_gpu_blocks"] * vc["cache_config"]["block_size"] == 16384 * 16


async def test_server_info_text_and_production_404(
    sim_factory: Callable[..., Any], session: aiohttp.ClientSession
) -> None:
    async with sim_factory() as sim:
        status, body = await _get(session, f"{sim.replicas[0].url}/server_info")
        assert status == 200 and isinstance(body["vllm_config"], str)
        assert "max_num_seqs=256" in body["vllm_config"]
        status, _ = await _get(session, f"{sim.replicas[0].url}/server_info?config_format=xml")
        assert status == 400
    async with sim_factory(server_info=False) as sim:
        status, _ = await _get(session, f"{sim.replicas[0].url}/server_info?config_format=json")
        assert status == 404


def test_flags() -> None:
    ns = build_parser().parse_args(["--gpu-memory-utilization", "0.8", "--no-server-info"])
    cfg = config_from_args(ns)
    assert cfg.gpu_memory_utilization == 0.8 and cfg.server_info is False
    assert config_from_args(build_parser().parse_args([])).server_info is True
