"""The engine /metrics source against a real vLLM 0.32 exposition (captured fixture)."""

from pathlib import Path

from probes.engine_metrics import parse_metrics
from soak.identity import read_metrics
from soak.record import EndpointIdentity

REAL = (Path(__file__).parent.parent / "fixtures" / "vllm_0.32_cpu_metrics.txt").read_text()
"""Captured from the real vLLM CPU server of tests/real_engine after 3 requests of 8 tokens
(ignore_eos) — prompt 102 tokens in all."""


def test_real_vllm_metrics_map_to_the_vocabulary():
    s = parse_metrics(REAL, t=1.5)
    assert s.engine == "vllm" and s.error is None and s.t == 1.5
    v = s.values
    assert (v["running"], v["waiting"], v["kv_usage"]) == (0.0, 0.0, 0.0)
    assert v["prompt_tokens_total"] == 102.0 and v["generation_tokens_total"] == 24.0
    assert v["requests_finished_total"] == 3.0 and s.finished_by_reason["length"] == 3.0
    assert v["preemptions_total"] == 0.0


def test_cache_config_info_gives_kv_token_slots():
    ident = EndpointIdentity(url="x", reachable=True)
    read_metrics(REAL, ident)
    assert ident.engine == "vllm"
    assert ident.cache_config["block_size"] == "128"
    assert ident.token_slots == 8192 * 128


def test_pre_012_kv_name_and_several_engines_behind_one_endpoint():
    text = (
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.25\n'
        'vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.75\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4\n'
    )
    v = parse_metrics(text).values
    assert v["kv_usage"] == 0.75 and v["running"] == 7.0  # fullest engine; engines add up
    assert v["prompt_tokens_total"] is None  # not exported: unknown, not zero
