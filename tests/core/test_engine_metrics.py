"""The engine /metrics source against a real vLLM 0.32 exposition (captured fixture) and
SGLang, TGI and llama.cpp expositions written from their documented names."""

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from probes.engine_metrics import VOCABULARY, EngineSample, parse_metrics, server_latency
from probes.server_histogram import Histogram, histogram_delta, histogram_quantile
from soak.judge.reconcile import reconcile_window
from soak.record.journal import JsonlWriter, read_jsonl
from soak.record.models import EndpointIdentity
from soak.run.identity import read_metrics
from soak.watch import engine as engine_watch
from soak.watch.engine import EngineWatch

FIXTURES = Path(__file__).parent.parent / "fixtures"
REAL = (FIXTURES / "vllm_0.32_cpu_metrics.txt").read_text()
"""Captured from the real vLLM CPU server of tests/real_engine after 3 requests of 8 tokens
(ignore_eos) — prompt 102 tokens in all."""
SGLANG = (FIXTURES / "sglang_metrics.txt").read_text()
TGI = (FIXTURES / "tgi_metrics.txt").read_text()
LLAMACPP = (FIXTURES / "llamacpp_metrics.txt").read_text()


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


def test_real_capture_also_gives_prefix_cache_token_slots_and_its_cache_config():
    s = parse_metrics(REAL)
    v = s.values
    assert set(v) == set(VOCABULARY)
    assert (v["prefix_cache_queries_total"], v["prefix_cache_hits_total"]) == (102.0, 0.0)
    assert v["token_slots"] == 8192 * 128  # num_gpu_blocks × block_size
    ident = EndpointIdentity(url="x", reachable=True)
    read_metrics(REAL, ident)
    assert s.cache_config == ident.cache_config  # the labels as exposed, engine included
    assert s.cache_config["num_gpu_blocks"] == "8192" and s.cache_config["engine"] == "0"
    # Not exported by this server: unknown, never 0.
    for key in ("spec_decode_drafts_total", "spec_decode_draft_tokens_total"):
        assert v[key] is None
    assert v["spec_decode_accepted_tokens_total"] is None and v["spec_accept_rate"] is None
    assert v["prefix_cache_hit_rate"] is None  # vLLM exposes counters, not a ratio
    assert s.engines == {}  # one engine behind the endpoint


ENGINE_1 = {
    "vllm:num_requests_running": "2.0",
    "vllm:num_requests_waiting": "1.0",
    "vllm:kv_cache_usage_perc": "0.5",
    "vllm:num_preemptions_total": "1.0",
    "vllm:prompt_tokens_total": "50.0",
    "vllm:generation_tokens_total": "16.0",
    "vllm:prefix_cache_queries_total": "50.0",
    "vllm:prefix_cache_hits_total": "32.0",
}
"""Engine 1's own values where they differ from the real capture's engine 0."""


def two_engines(text: str) -> str:
    """``text`` with every engine="0" series duplicated as engine="1" (data parallel):
    ENGINE_1's values, 2 requests finished by length, 4096 KV blocks; histograms alike."""
    out = []
    for line in text.splitlines():
        out.append(line)
        if line.startswith("#") or 'engine="0"' not in line:
            continue
        series, value = line.rsplit(" ", 1)
        twin = series.replace('engine="0"', 'engine="1"')
        name = series.split("{", 1)[0]
        if name == "vllm:cache_config_info":
            twin = twin.replace('num_gpu_blocks="8192"', 'num_gpu_blocks="4096"')
        if name == "vllm:request_success_total" and 'finished_reason="length"' in series:
            value = "2.0"
        out.append(f"{twin} {ENGINE_1.get(name, value)}")
    return "\n".join(out) + "\n"


def test_two_vllm_engines_split_and_add_up():
    s = parse_metrics(two_engines(REAL))
    assert s.engine == "vllm" and list(s.engines) == ["0", "1"]
    e0, e1 = s.engines["0"], s.engines["1"]
    assert e0 == parse_metrics(REAL).values  # engine 0's series alone: the real capture
    assert (e1["running"], e1["waiting"], e1["kv_usage"]) == (2.0, 1.0, 0.5)
    assert (e1["prompt_tokens_total"], e1["generation_tokens_total"]) == (50.0, 16.0)
    assert e1["requests_finished_total"] == 2.0 and e1["token_slots"] == 4096 * 128
    summed = [k for k in VOCABULARY if k != "kv_usage" and e0[k] is not None]
    assert "token_slots" in summed and "preemptions_total" in summed
    for key in summed:
        v0, v1 = e0[key], e1[key]
        assert v0 is not None and v1 is not None and s.values[key] == v0 + v1, key
    assert s.values["kv_usage"] == 0.5  # the fullest engine, not a sum
    assert s.values["token_slots"] == (8192 + 4096) * 128
    assert s.finished_by_reason["length"] == 5.0
    assert s.histograms["ttft"].count == 6.0  # both engines' observations merged
    assert s.cache_config["num_gpu_blocks"] == "8192"  # the first engine's labels


SPEC_DECODE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 40.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 120.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 75.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 34.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 25.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} 16.0
"""
"""vLLM's speculative-decoding counters (3 draft tokens per draft), as a server started with
--speculative-config adds them (names: ENGINE_FACTS; labels as every vLLM engine metric)."""


def test_vllm_spec_decode_counters():
    v = parse_metrics(REAL + SPEC_DECODE).values
    assert v["spec_decode_drafts_total"] == 40.0
    assert v["spec_decode_draft_tokens_total"] == 120.0
    assert v["spec_decode_accepted_tokens_total"] == 75.0  # not the per-position split
    assert v["spec_accept_rate"] is None  # vLLM: Δaccepted/Δdraft_tokens is the caller's


# --- other engines -----------------------------------------------------------------------


def test_sglang_maps_to_the_same_vocabulary():
    s = parse_metrics(SGLANG)
    assert s.engine == "sglang" and s.error is None and s.cache_config == {}
    v = s.values
    assert (v["running"], v["waiting"], v["kv_usage"]) == (8.0, 1.0, 0.61)
    assert v["preemptions_total"] == 3.0  # retracted requests, both schedulers
    assert (v["prompt_tokens_total"], v["generation_tokens_total"]) == (51200.0, 20480.0)
    assert v["requests_finished_total"] == 40.0 and s.finished_by_reason == {"abort": 2.0}
    assert v["token_slots"] == 2 * 412345.0  # max_total_num_tokens of each scheduler
    assert v["prefix_cache_hit_rate"] == pytest.approx(0.375)  # SGLang's own ratio
    assert v["spec_accept_rate"] == pytest.approx(0.6)
    for key in ("prefix_cache_hits_total", "prefix_cache_queries_total"):
        assert v[key] is None
    assert v["spec_decode_drafts_total"] is None and v["spec_decode_draft_tokens_total"] is None
    assert v["spec_decode_accepted_tokens_total"] is None
    # TTFT and E2E from the tokenizer; queue time from both schedulers, merged.
    assert {k: h.count for k, h in s.histograms.items()} == {"ttft": 40, "e2e": 40, "queue": 40}
    assert s.histograms["queue"].buckets["0.1"] == 24.0  # 14 + 10 below 0.1 s
    ttft = server_latency(None, s, "ttft")
    assert (
        ttft is not None and ttft["n"] == 40 and ttft["p50"] == pytest.approx(0.2 + 0.2 * 10 / 14)
    )


def test_sglang_data_parallel_ranks_are_engines():
    s = parse_metrics(SGLANG)
    assert list(s.engines) == ["0", "1"]
    e0, e1 = s.engines["0"], s.engines["1"]
    assert (e0["running"], e0["waiting"], e0["kv_usage"], e0["token_slots"]) == (
        3.0,
        1.0,
        0.42,
        412345.0,
    )
    assert (e1["running"], e1["waiting"], e1["kv_usage"], e1["preemptions_total"]) == (
        5.0,
        0.0,
        0.61,
        2.0,
    )
    # The tokenizer's counters carry no rank: endpoint totals only, unknown per engine.
    assert e0["prompt_tokens_total"] is None and e1["requests_finished_total"] is None


def test_sglang_tensor_parallel_ranks_of_one_dp_rank_add_up():
    labels = 'engine_type="unified",model_name="m",pp_rank="0"'
    text = "# TYPE sglang:num_running_reqs gauge\n" + "".join(
        f'sglang:num_running_reqs{{dp_rank="{dp}",{labels},tp_rank="{tp}"}} {dp * 10 + tp + 1}\n'
        for dp in (0, 1)
        for tp in (0, 1)
    )
    s = parse_metrics(text)
    assert s.engines["0"]["running"] == 1 + 2 and s.engines["1"]["running"] == 11 + 12
    assert s.values["running"] == 26.0


def test_sglang_aborted_requests_are_not_counted_as_completed():
    def grown(text: str) -> str:
        for series, old, new in (
            ("sglang:num_requests_total", "40.0", "50.0"),
            ("sglang:num_aborted_requests_total", "2.0", "4.0"),
            ("sglang:prompt_tokens_total", "51200.0", "53248.0"),
            ("sglang:generation_tokens_total", "20480.0", "21504.0"),
        ):
            line = f'{series}{{model_name="meta-llama/Llama-3.1-8B-Instruct"}}'
            text = text.replace(f"{line} {old}", f"{line} {new}")
        return text

    before, after = parse_metrics(SGLANG), parse_metrics(grown(SGLANG))
    assert after.values["requests_finished_total"] == 50.0  # the text really grew
    client = {"requests": 8, "prompt_tokens": 2048, "generation_tokens": 1024}
    rec = reconcile_window([before], [after], client, "w")
    # 10 finished on the server, 2 of them aborted: 8 completed, as the client saw.
    assert rec["matched"] is True


def test_tgi_maps_to_the_same_vocabulary():
    s = parse_metrics(TGI)
    assert s.engine == "tgi" and s.finished_by_reason == {} and s.engines == {}
    v = s.values
    assert (v["running"], v["waiting"]) == (8.0, 3.0)
    assert v["requests_finished_total"] == 25.0  # tgi_request_success, not tgi_request_count
    assert v["generation_tokens_total"] == 4160.0  # tgi_request_generated_tokens' _sum
    assert v["prompt_tokens_total"] == 8400.0  # tgi_request_input_length's _sum
    # No KV usage, token slots, preemptions, prefix cache or speculation in TGI's metrics.
    assert [k for k, x in v.items() if x is None] == [
        "kv_usage",
        "preemptions_total",
        "prefix_cache_hits_total",
        "prefix_cache_queries_total",
        "prefix_cache_hit_rate",
        "spec_decode_drafts_total",
        "spec_decode_draft_tokens_total",
        "spec_decode_accepted_tokens_total",
        "spec_accept_rate",
        "token_slots",
    ]
    assert set(s.histograms) == {"e2e", "queue"}  # no server TTFT
    assert server_latency(None, s, "ttft") is None
    e2e = server_latency(None, s, "e2e")
    assert e2e is not None and e2e["n"] == 25 and e2e["mean"] == pytest.approx(40.5 / 25)


def test_tgi_counter_without_a_type_line_keeps_its_name_and_still_maps():
    v = parse_metrics("tgi_request_success 7\ntgi_queue_size 0\n").values
    assert v["requests_finished_total"] == 7.0 and v["waiting"] == 0.0
    assert v["generation_tokens_total"] is None  # no histogram: unknown, not 0


def test_llamacpp_maps_to_the_same_vocabulary():
    # the fixture is a real llama-server's page (tests/real_engine/llama_capture.py)
    s = parse_metrics(LLAMACPP)
    assert s.engine == "llamacpp" and s.histograms == {} and s.engines == {}
    v = s.values
    assert (v["running"], v["waiting"], v["kv_usage"]) == (0.0, 0.0, None)
    assert (v["prompt_tokens_total"], v["generation_tokens_total"]) == (36.0, 8.0)
    assert v["requests_finished_total"] is None  # llama-server counts no requests
    assert v["token_slots"] is None and v["preemptions_total"] is None


def test_llamacpp_counters_agree_with_the_captured_stream_s_usage():
    # one streamed chat on a fresh server: its counters are that request's usage
    events = (FIXTURES / "llamacpp_chat_stream.txt").read_text().split("\n\n")
    usage = json.loads(next(e for e in reversed(events) if '"usage"' in e)[6:])["usage"]
    v = parse_metrics(LLAMACPP).values
    assert v["prompt_tokens_total"] == usage["prompt_tokens"]  # processed + cached
    assert v["prefix_cache_hits_total"] == usage["prompt_tokens_details"]["cached_tokens"]
    assert v["generation_tokens_total"] == usage["completion_tokens"]


def test_llamacpp_prompt_tokens_include_the_cached_ones():
    page = LLAMACPP.replace(
        "llamacpp:prompt_tokens_cached_total 0", "llamacpp:prompt_tokens_cached_total 64"
    )
    v = parse_metrics(page).values
    assert v["prompt_tokens_total"] == 36.0 + 64.0  # as usage.prompt_tokens counts them
    assert (v["prefix_cache_hits_total"], v["prefix_cache_queries_total"]) == (64.0, 100.0)
    older = "\n".join(ln for ln in page.splitlines() if "prompt_tokens_cached" not in ln)
    v = parse_metrics(older).values  # a build without the cached counter
    assert v["prompt_tokens_total"] == 36.0 and v["prefix_cache_hits_total"] is None


def test_llamacpp_older_build_with_the_kv_gauge_reports_it():
    older = LLAMACPP + (
        "# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE llamacpp:kv_cache_usage_ratio gauge\n"
        "llamacpp:kv_cache_usage_ratio 0.284912\n"
    )
    v = parse_metrics(older).values
    assert v["kv_usage"] == 0.284912 and v["running"] == 0.0


def test_an_unknown_exposition_is_no_engine():
    s = parse_metrics("# TYPE process_open_fds gauge\nprocess_open_fds 32.0\n")
    assert s.engine is None and s.values == dict.fromkeys(VOCABULARY)
    assert s.histograms == {} and s.engines == {} and s.cache_config == {}


# --- server-side latency histograms ------------------------------------------------------

TTFT = "vllm:time_to_first_token_seconds"
METHOD = "server histogram estimate (bucket interpolation)"


def with_histogram(text: str, family: str, cumulative: dict[str, float], total: float) -> str:
    """``text`` with one histogram's buckets (``le`` → cumulative count), count and sum
    replaced (engine "0"); buckets not named keep their old counts."""
    out = []
    for line in text.splitlines():
        m = re.match(rf'{re.escape(family)}_bucket\{{engine="0",le="([^"]+)",', line)
        if m and m.group(1) in cumulative:
            line = line.rsplit(" ", 1)[0] + f" {cumulative[m.group(1)]}"
        elif line.startswith(f"{family}_count{{"):
            line = line.rsplit(" ", 1)[0] + f" {cumulative['+Inf']}"
        elif line.startswith(f"{family}_sum{{"):
            line = line.rsplit(" ", 1)[0] + f" {total}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_real_capture_carries_the_three_latency_histograms():
    s = parse_metrics(REAL)
    assert set(s.histograms) == {"ttft", "e2e", "queue"}
    ttft = s.histograms["ttft"]
    assert (ttft.count, ttft.sum) == (3.0, 0.04230642318725586)
    assert ttft.buckets["0.005"] == 0.0 and ttft.buckets["0.01"] == 1.0
    assert ttft.buckets["0.02"] == 2.0 and ttft.buckets["0.04"] == 3.0
    assert ttft.buckets["+Inf"] == 3.0 and len(ttft.buckets) == 23
    assert s.histograms["e2e"].count == s.histograms["queue"].count == 3.0


def test_server_ttft_of_the_real_capture_from_an_empty_server():
    # Cumulative 0.01:1, 0.02:2, 0.04:3 → ranks 1.5, 2.7, 2.97 fall in (0.01, 0.02] and
    # (0.02, 0.04], one observation each: 0.01 + 0.01·0.5, 0.02 + 0.02·0.7, 0.02 + 0.02·0.97.
    est = server_latency(None, parse_metrics(REAL), "ttft")
    assert est is not None
    assert est["p50"] == pytest.approx(0.015)
    assert est["p90"] == pytest.approx(0.034)
    assert est["p99"] == pytest.approx(0.0394)
    assert est["mean"] == pytest.approx(0.04230642318725586 / 3)
    assert (est["n"], est["method"]) == (3, METHOD) and "note" not in est


def test_delta_between_two_captures_matches_a_hand_computation():
    before = parse_metrics(REAL, t=1.0)
    later = {"0.02": 4.0, "0.04": 9.0, "0.06": 12.0, "0.08": 13.0}
    later |= {le: 13.0 for le in ("0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5")}
    later |= {le: 13.0 for le in ("10.0", "20.0", "40.0", "80.0", "160.0", "640.0")}
    later |= {"2560.0": 13.0, "+Inf": 13.0}
    after = parse_metrics(with_histogram(REAL, TTFT, later, 0.04230642318725586 + 0.4), t=9.0)
    # Delta (cumulative): 0.01:0, 0.02:2, 0.04:6, 0.06:9, 0.08:10, … +Inf:10; n = 10.
    # p50: rank 5 in (0.02, 0.04] holding 4 from 2 → 0.02 + 0.02·3/4 = 0.035
    # p90: rank 9 in (0.04, 0.06] holding 3 from 6 → 0.04 + 0.02·3/3 = 0.06
    # p99: rank 9.9 in (0.06, 0.08] holding 1 from 9 → 0.06 + 0.02·0.9 = 0.078
    est = server_latency(before, after, "ttft")
    assert est is not None
    assert (est["p50"], est["p90"], est["p99"]) == (
        pytest.approx(0.035),
        pytest.approx(0.06),
        pytest.approx(0.078),
    )
    assert est["mean"] == pytest.approx(0.04) and est["n"] == 10
    # Untouched histograms: exported, nothing observed in the window (not zero latency).
    idle = server_latency(before, after, "e2e")
    assert idle == {"p50": None, "p90": None, "p99": None, "mean": None, "n": 0, "method": METHOD}


def hist_text(family: str, per_engine: list[dict[str, float]], sums: list[float]) -> str:
    lines = [f"# TYPE {family} histogram"]
    for e, (buckets, total) in enumerate(zip(per_engine, sums, strict=True)):
        for le, c in buckets.items():
            lines.append(f'{family}_bucket{{engine="{e}",le="{le}",model_name="m"}} {c}')
        lines.append(f'{family}_count{{engine="{e}",model_name="m"}} {buckets["+Inf"]}')
        lines.append(f'{family}_sum{{engine="{e}",model_name="m"}} {total}')
    return "\n".join(lines) + "\n"


def test_engines_are_merged_before_the_quantile_and_inf_is_capped_and_said():
    fam = "vllm:e2e_request_latency_seconds"
    text = hist_text(
        fam,
        [{"0.5": 1, "1.0": 3, "+Inf": 4}, {"0.5": 1, "1.0": 6, "+Inf": 6}],
        [5.0, 3.0],
    )
    h = parse_metrics(text).histograms["e2e"]
    assert h.buckets == {"0.5": 2.0, "1.0": 9.0, "+Inf": 10.0} and h.count == 10.0
    est = server_latency(None, parse_metrics(text), "e2e")
    assert est is not None
    # Merged: 0.5:2, 1.0:9, +Inf:10. p50 rank 5 → 0.5 + 0.5·3/7; p90 rank 9 → 1.0;
    # p99 rank 9.9 → the +Inf bucket → reported as 1.0, the highest finite bound.
    assert est["p50"] == pytest.approx(0.5 + 0.5 * 3 / 7)
    assert est["p90"] == pytest.approx(1.0) and est["p99"] == 1.0
    assert est["mean"] == pytest.approx(0.8)
    assert "p99 above the highest finite bucket (1 s)" in str(est["note"])


def test_a_counter_reset_uses_the_after_histogram_alone():
    fam = "vllm:request_queue_time_seconds"
    before = parse_metrics(hist_text(fam, [{"0.1": 50, "1.0": 90, "+Inf": 100}], [40.0]))
    after = parse_metrics(hist_text(fam, [{"0.1": 2, "1.0": 4, "+Inf": 4}], [1.0]))
    h, reset = histogram_delta(before.histograms["queue"], after.histograms["queue"])
    assert reset and h == after.histograms["queue"]
    est = server_latency(before, after, "queue")
    assert est is not None and est["n"] == 4 and est["mean"] == 0.25
    assert est["p50"] == pytest.approx(0.1)  # rank 2 = all of (0, 0.1]
    assert "counter reset" in str(est["note"])


def test_histogram_quantile_edges():
    assert (
        histogram_quantile(0.5, Histogram(buckets={"1": 0.0, "+Inf": 0.0}, sum=0, count=0)) is None
    )
    assert histogram_quantile(0.5, Histogram(buckets={"1": 1.0}, sum=0.5, count=1)) is None
    only_inf = Histogram(buckets={"+Inf": 2.0}, sum=1.0, count=2)
    value, capped = histogram_quantile(0.5, only_inf) or (0.0, False)
    assert capped and math.isnan(value)
    assert server_latency(None, parse_metrics(hist_text(TTFT, [{"+Inf": 2}], [1.0])), "ttft") == {
        "p50": None,
        "p90": None,
        "p99": None,
        "mean": 0.5,
        "n": 2,
        "method": METHOD,
        "note": "p50, p90, p99 above the highest finite bucket (no finite bound): reported "
        "as that bound, a lower bound of the true value",
    }


def test_no_histogram_exported_means_none():
    text = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0"} 1\n'
    s = parse_metrics(text)
    assert s.histograms == {}
    assert server_latency(s, s, "ttft") is None


# --- EngineWatch: the load's window ------------------------------------------------------


def bumped(preemptions: float, ttft_total: float) -> str:
    """The real capture with more preemptions and ``ttft_total`` TTFTs all in (0.02, 0.04]."""
    text = REAL.replace(
        'vllm:num_preemptions_total{engine="0",model_name="tiny"} 0.0',
        f'vllm:num_preemptions_total{{engine="0",model_name="tiny"}} {preemptions}',
    )
    more = {le: ttft_total for le in ("0.04", "0.06", "0.08", "0.1", "0.25", "+Inf")}
    return with_histogram(text, TTFT, {"0.02": 2.0} | more, 0.03 * ttft_total)


def fake_scrapes(monkeypatch: pytest.MonkeyPatch, texts: Iterator[str]) -> None:
    """EngineWatch's scrapes answer ``texts`` in turn, at t = 0, 1, 2, …"""
    clock = iter(range(100))

    async def fake_scrape(client, base, origin_ns):
        text, t = next(texts), float(next(clock))
        if text == "not /metrics":
            return EngineSample(t=t, engine=None, values={}, error="HTTP 500")
        return parse_metrics(text, t=t)

    monkeypatch.setattr(engine_watch, "scrape", fake_scrape)


async def test_engine_watch_summary_covers_barrier_to_settled_counters(tmp_path, monkeypatch):
    texts = iter(
        [
            REAL,  # a periodic scrape before the barrier (gates finished: 3 TTFTs)
            REAL,  # the runner's scrape at the barrier release
            bumped(5, 8),  # during the load
            "not /metrics",  # a failed scrape during the load
            bumped(7, 13),  # settled counters after the drain (twice: stable)
            bumped(7, 13),
            bumped(9, 20),  # after-load gates: outside the window
        ]
    )

    fake_scrapes(monkeypatch, texts)
    journal = JsonlWriter(tmp_path / "telemetry.jsonl")
    watch = EngineWatch(["http://x"], {}, 0, journal)
    assert watch.summary()[0]["preemptions"] is None  # no window yet
    await watch.scrape_all()
    await watch.scrape_all()
    watch.tracking = True
    await watch.scrape_all()
    await watch.scrape_all()
    watch.tracking = False
    await watch.settled_counters(pause_s=0)
    await watch.scrape_all()
    await watch.stop()
    journal.close()

    eng = watch.summary()[0]
    assert eng["engine"] == "vllm" and eng["scrapes"] == 7 and eng["scrape_errors"] == 1
    assert eng["preemptions"] == 7.0
    assert eng["running_max"] == 0.0  # peaks as before
    ttft = eng["server_ttft_s"]
    assert isinstance(ttft, dict) and ttft["n"] == 10 and ttft["method"] == METHOD
    # The 10 new TTFTs all lie in (0.02, 0.04]: p50 = 0.02 + 0.02·5/10.
    assert ttft["p50"] == pytest.approx(0.03)
    for key in ("server_e2e_s", "server_queue_s"):
        assert eng[key] == {
            **dict.fromkeys(("p50", "p90", "p99", "mean"), None),
            "n": 0,
            "method": METHOD,
        }
    assert eng["window_s"] == [1.0, 5.0]  # the barrier's scrape → the settled one
    # Every sample, histograms included, is in telemetry.jsonl for a later re-check.
    lines = list(read_jsonl(tmp_path / "telemetry.jsonl"))
    assert len(lines) == 7 and lines[0]["histograms"]["ttft"]["buckets"]["0.04"] == 3.0


async def test_engine_watch_window_across_a_server_restart(tmp_path, monkeypatch):
    # Barrier at 5 preemptions and 8 TTFTs; the server restarts mid-load and ends the drain
    # at the real capture's 0 preemptions and 3 TTFTs: the counts since the restart.
    fake_scrapes(monkeypatch, iter([bumped(5, 8), REAL, REAL]))
    journal = JsonlWriter(tmp_path / "telemetry.jsonl")
    watch = EngineWatch(["http://x"], {}, 0, journal)
    await watch.scrape_all()
    watch.tracking = True
    watch.tracking = False
    await watch.settled_counters(pause_s=0)
    await watch.stop()
    journal.close()
    eng = watch.summary()[0]
    assert eng["preemptions"] == 0.0 and eng["window_s"] == [0.0, 2.0]
    ttft = eng["server_ttft_s"]
    assert isinstance(ttft, dict) and ttft["n"] == 3 and "counter reset" in str(ttft["note"])


async def test_a_closed_window_is_not_moved_by_the_after_gates(tmp_path, monkeypatch):
    # The runner closes the window right after its end-of-drain settled counters; the
    # after-gate phase then scrapes and settles again with more traffic (its probes' TTFTs
    # and a preemption) — none of it may leak into the load's figures.
    fake_scrapes(
        monkeypatch,
        iter(
            [
                REAL,  # t=0: the runner's scrape at the barrier release
                bumped(5, 8),  # t=1: during the load
                bumped(7, 13),  # t=2, 3: settled counters after the drain (stable: ends at 3)
                bumped(7, 13),
                bumped(9, 20),  # t=4: after-gate phase start
                bumped(11, 30),  # t=5, 6: after-gate settled counters (stable)
                bumped(11, 30),
                bumped(12, 40),  # t=7: a periodic scrape with tracking (wrongly) back on
            ]
        ),
    )
    journal = JsonlWriter(tmp_path / "telemetry.jsonl")
    watch = EngineWatch(["http://x"], {}, 0, journal)
    await watch.scrape_all()
    watch.tracking = True
    await watch.scrape_all()
    watch.tracking = False
    await watch.settled_counters(pause_s=0)
    watch.close_window()
    closed = watch.summary()[0]
    assert closed["window_s"] == [0.0, 3.0] and closed["preemptions"] == 7.0
    ttft = closed["server_ttft_s"]
    assert isinstance(ttft, dict) and ttft["n"] == 10

    await watch.scrape_all()
    await watch.settled_counters(pause_s=0)
    watch.tracking = True  # nothing reopens a closed window
    await watch.scrape_all()
    await watch.stop()
    journal.close()

    assert watch.scrapes == [8]  # every scrape still happened and was journaled
    assert len(list(read_jsonl(tmp_path / "telemetry.jsonl"))) == 8
    after = watch.summary()[0]
    moving = ("scrapes", "scrape_errors")
    assert {k: v for k, v in after.items() if k not in moving} == {
        k: v for k, v in closed.items() if k not in moving
    }
    assert not watch.tracking


async def test_close_window_before_any_load_leaves_no_window(tmp_path, monkeypatch):
    # A run stopped before the barrier released: closing opens nothing, later scrapes
    # and settled counters (the after-gates) make no window either.
    fake_scrapes(monkeypatch, iter([REAL, bumped(5, 8), bumped(5, 8)]))
    journal = JsonlWriter(tmp_path / "telemetry.jsonl")
    watch = EngineWatch(["http://x"], {}, 0, journal)
    watch.close_window()
    await watch.scrape_all()
    watch.tracking = True
    await watch.settled_counters(pause_s=0)
    await watch.stop()
    journal.close()
    eng = watch.summary()[0]
    assert eng["window_s"] is None and eng["preemptions"] is None
    assert eng["server_ttft_s"] is None and eng["running_max"] is None
