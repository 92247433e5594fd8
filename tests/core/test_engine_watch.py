"""EngineWatch's record entry: restarts, occupancy means, per-engine peaks, spec decode and
prefix cache over the load's window (parsed from real and documented expositions)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest

from soak.judge.faults import restart_reasons
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter
from soak.watch.engine import EngineWatch
from tests.core.test_engine_metrics import REAL, SGLANG, SPEC_DECODE, fake_scrapes, two_engines


def _spec(drafts: float, draft_tokens: float, accepted: float) -> str:
    return (
        SPEC_DECODE.replace(
            'drafts_total{engine="0",model_name="tiny"} 40.0',
            f'drafts_total{{engine="0",model_name="tiny"}} {drafts}',
        )
        .replace(
            'draft_tokens_total{engine="0",model_name="tiny"} 120.0',
            f'draft_tokens_total{{engine="0",model_name="tiny"}} {draft_tokens}',
        )
        .replace(
            'accepted_tokens_total{engine="0",model_name="tiny"} 75.0',
            f'accepted_tokens_total{{engine="0",model_name="tiny"}} {accepted}',
        )
    )


def _as_json(rows: list[dict[str, object]]) -> list[dict[str, Any]]:
    """The watch's rows as the snapshot and record hold them: JSON, read here by key."""
    return cast(list[dict[str, Any]], rows)


def _running(text: str, n: int) -> str:
    return text.replace(
        'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0',
        f'vllm:num_requests_running{{engine="0",model_name="tiny"}} {n}.0',
    )


async def _run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, texts: list[str], window: tuple[int, int]
) -> tuple[EngineWatch, EventLog]:
    """Scrape ``texts`` in turn, tracking the load from index window[0] to window[1]."""
    fake_scrapes(monkeypatch, iter(texts))
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), time.perf_counter_ns())
    watch = EngineWatch(["http://x"], {}, 0, JsonlWriter(tmp_path / "t.jsonl"), events=events)
    for i in range(len(texts)):
        if i == window[0]:
            watch.tracking = True
        await watch.scrape_all()
        if i == window[1]:
            watch.close_window()
    await watch.stop()
    return watch, events


async def test_counters_going_down_are_a_restart_event_and_fail_the_run(tmp_path, monkeypatch):
    busy = REAL.replace(
        'vllm:generation_tokens_total{engine="0",model_name="tiny"} 24.0',
        'vllm:generation_tokens_total{engine="0",model_name="tiny"} 9000.0',
    )
    assert busy != REAL
    watch, events = await _run(tmp_path, monkeypatch, [busy, busy, REAL, REAL], (1, 3))
    (ev,) = [e for e in events.take_pending() if e.kind == "restart"]
    assert ev.severity == "critical" and ev.data["endpoint"] == 0
    assert "generation_tokens_total 9,000 → 24" in ev.message and "restarted" in ev.message
    (eng,) = _as_json(watch.summary())
    assert [r["t"] for r in eng["restarts"]] == [2.0]
    (reason,) = restart_reasons({"engines": watch.summary()}, load_start_s=1.0)
    assert (reason.code, reason.effect) == ("server_restart", "failed")
    assert reason.message == (
        "endpoint 0 restarted during the run (its counters went down at load+00:00:01)"
    )


async def test_running_mean_peaks_and_token_slots_over_the_load(tmp_path, monkeypatch):
    texts = [_running(REAL, 9), _running(REAL, 2), _running(REAL, 4), _running(REAL, 7)]
    watch, _ = await _run(tmp_path, monkeypatch, texts, (1, 2))
    (eng,) = _as_json(watch.summary())
    # the scrape before the load (9 running) and after the window (7) stay out
    assert eng["running_max"] == 4.0 and eng["running_mean"] == 3.0
    assert eng["token_slots"] == 8192 * 128 and eng["cache_config"]["block_size"] == "128"
    assert eng["restarts"] == [] and eng["spec_decode"] is None
    assert eng["prefix_cache"] == {
        "hits": 0.0,
        "queries": 0.0,
        "hit_rate": None,
        "method": "counter delta",
    }
    assert "per_engine" not in eng  # one engine behind the endpoint


async def test_two_engines_behind_one_endpoint_keep_their_own_peaks(tmp_path, monkeypatch):
    texts = [two_engines(REAL)] * 2
    watch, _ = await _run(tmp_path, monkeypatch, texts, (0, 1))
    (eng,) = _as_json(watch.summary())
    assert [p["engine_label"] for p in eng["per_engine"]] == ["0", "1"]
    e0, e1 = eng["per_engine"]
    assert (e0["running_max"], e1["running_max"]) == (0.0, 2.0)
    assert (e0["kv_usage_max"], e1["kv_usage_max"]) == (0.0, 0.5)
    assert eng["running_max"] == 2.0 and eng["kv_usage_max"] == 0.5


async def test_spec_decode_acceptance_over_the_window(tmp_path, monkeypatch):
    texts = [REAL + _spec(40, 120, 75), REAL + _spec(140, 420, 285)]
    watch, _ = await _run(tmp_path, monkeypatch, texts, (0, 1))
    (eng,) = _as_json(watch.summary())
    assert eng["spec_decode"] == {
        "drafts": 100.0,
        "draft_tokens": 300.0,
        "accepted_tokens": 210.0,
        "acceptance_rate": 0.7,
        "mean_acceptance_length": 3.1,
        "method": "counter delta",
    }


async def test_sglang_gauges_stand_in_where_it_has_no_counters(tmp_path, monkeypatch):
    watch, _ = await _run(tmp_path, monkeypatch, [SGLANG, SGLANG], (0, 1))
    (eng,) = _as_json(watch.summary())
    assert eng["engine"] == "sglang" and eng["token_slots"] is not None
    assert eng["prefix_cache"]["method"] == "engine gauge at the end of the load"
    assert eng["spec_decode"]["method"] == "engine gauge at the end of the load"
    assert [p["engine_label"] for p in eng["per_engine"]] == ["0", "1"]


async def test_the_live_view_carries_the_servers_ttft_from_the_barrier_on(tmp_path, monkeypatch):
    from tests.core.test_engine_metrics import bumped

    fake_scrapes(monkeypatch, iter([REAL, REAL, bumped(0, 8)]))
    watch = EngineWatch(["http://x"], {}, 0, JsonlWriter(tmp_path / "t.jsonl"))
    await watch.scrape_all()
    assert "server_ttft_s" not in watch.view()[0]  # before the load: nothing to compare
    await watch.scrape_all()
    watch.tracking = True
    await watch.scrape_all()
    (live,) = _as_json(watch.view())
    # 5 new TTFTs since the barrier, all in (0.02, 0.04]: the panes show it beside the client's
    assert live["server_ttft_s"]["n"] == 5 and 0.02 < live["server_ttft_s"]["p50"] <= 0.04
    await watch.stop()
