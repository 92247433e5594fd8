"""The engine /metrics source against a real vLLM 0.32 exposition (captured fixture)."""

import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from probes.engine_metrics import (
    EngineSample,
    Histogram,
    histogram_delta,
    histogram_quantile,
    parse_metrics,
    server_latency,
)
from soak import engine_watch
from soak.engine_watch import EngineWatch
from soak.identity import read_metrics
from soak.journal import JsonlWriter, read_jsonl
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


def fake_scrapes(monkeypatch, texts: Iterator[str]) -> None:
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
    assert eng["max_running"] == 0.0  # peaks as before
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
    assert eng["server_ttft_s"] is None and eng["max_running"] is None
