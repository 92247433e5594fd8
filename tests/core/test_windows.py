"""The window series: the live fold and the journal's recomputation cut the same windows.

A request belongs to the window it ended in; the live windows (folded from the live
per-second slots) and the record's (recomputed from requests.jsonl and telemetry.jsonl)
must agree on every count, and on the percentiles to the live histograms' 1 % buckets.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from loadgen.envelope import FailureClass, RequestResult
from loadgen.live import LiveLoadStats, SecondsFold
from soak.record.endurance import WindowFigures
from soak.record.journal import request_line
from soak.record.window_journal import windows_from_journals
from soak.record.windows import SeriesSpec, series_origin, window_kind
from soak.run.warmup import WarmupClock, parse_warmup
from soak.run.window_tick import live_window

S = 1_000_000_000


def _result(i: int, sent_s: float, e2e_s: float, tokens: int, fail: bool = False) -> RequestResult:
    sent = int(sent_s * S)
    if fail:
        return RequestResult(
            request_id=f"r{i}",
            worker=i % 4,
            prompt_id=0,
            sent_ns=sent,
            end_ns=sent + int(e2e_s * S),
            status=500,
            failure=FailureClass.HTTP_5XX,
        )
    return RequestResult(
        request_id=f"r{i}",
        worker=i % 4,
        prompt_id=0,
        sent_ns=sent,
        first_token_ns=sent + int(0.1 * S),
        end_ns=sent + int(e2e_s * S),
        status=200,
        output_tokens=tokens,
        prompt_tokens=10,
        chunks=tokens,
        itl_ns=[int(e2e_s / tokens * S)] * (tokens - 1),
    )


def _soak(
    tmp_path: Path, seconds: int = 40, window_s: int = 10
) -> tuple[list[WindowFigures], list[WindowFigures], int]:
    """A synthetic load: results fed to the live figures as they end (folded every
    second, as the tick does) and journaled as the runner journals them."""
    rng = random.Random(7)
    live = LiveLoadStats(window_s=10)
    fold = SecondsFold(live)
    origin = series_origin(2.3)  # the barrier released at 2.3 s: windows from 3 s
    results = []
    t = 2.3
    i = 0
    while t < 2.3 + seconds:
        e2e = rng.uniform(0.2, 1.5)
        results.append(_result(i, t, e2e, rng.randint(5, 40), fail=rng.random() < 0.05))
        t += rng.uniform(0.01, 0.2)
        i += 1
    results.sort(key=lambda r: r.end_ns or 0)
    lines = []
    live_windows = []
    next_second = int(origin)
    k = 0
    for r in results:
        end_s = (r.end_ns or 0) / S
        while next_second < int(end_s):  # the tick: fold every finished second
            fold.add(next_second)
            next_second += 1
            if (next_second - int(origin)) % window_s == 0:
                view, lost = fold.take(window_s)
                assert lost == 0
                start = origin + k * window_s
                live_windows.append(live_window(k, start, start + window_s, "load", view))
                k += 1
        live.record(r, end_s)
        lines.append(request_line(r, 0, "load"))
    (tmp_path / "requests.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    spec = SeriesSpec(origin, window_s, issue_end_s=2.3 + seconds, end_s=2.3 + seconds + 2)
    journal, warmup = windows_from_journals(tmp_path, spec)
    return live_windows, journal, warmup


def test_live_and_journal_windows_count_the_same_requests(tmp_path: Path) -> None:
    live, journal, warmup = _soak(tmp_path)
    assert warmup == 0
    assert len(live) >= 3
    for lw, jw in zip(live, journal, strict=False):
        assert (lw.i, lw.start_s, lw.end_s) == (jw.i, jw.start_s, jw.end_s)
        assert lw.completed == jw.completed and lw.failed == jw.failed
        assert lw.output_tokens == jw.output_tokens
        assert lw.failures_by_class == jw.failures_by_class
        assert lw.source == "live" and jw.source == "journal"
        for key in ("ttft_p99", "e2e_p50", "e2e_p99", "tpot_p99"):
            a, b = getattr(lw, key), getattr(jw, key)
            assert a == pytest.approx(b, rel=0.03), key  # 1 % buckets, nearest rank
    total = sum(w.completed + w.failed for w in journal)
    lines = [orjson.loads(x) for x in (tmp_path / "requests.jsonl").read_bytes().splitlines()]
    # every request that ended from the series origin on (the first whole second) is in
    assert total == sum(1 for x in lines if x["end_s"] >= 3.0) > 0.9 * len(lines)


def test_a_window_line_is_what_the_live_journal_writes(tmp_path: Path) -> None:
    live, _, _ = _soak(tmp_path, seconds=12)
    w = live[0]
    w.schema_version = "1.2"
    line = orjson.loads(orjson.dumps(w.model_dump(mode="json")))
    assert line["schema_version"] == "1.2" and line["kind"] == "load"
    assert line["output_tok_s"] == pytest.approx(w.output_tokens / 10)
    assert "lost_seconds" not in line  # written only when the tick lost seconds


def test_a_late_tick_counts_the_seconds_it_lost() -> None:
    live = LiveLoadStats(window_s=5)  # the ring holds 6 seconds
    fold = SecondsFold(live)
    for second in range(20):
        live.record(_result(second, second, 0.5, 10), second + 0.9)
    for second in range(20):  # folded only now: the first 14 seconds were reused
        fold.add(second)
    view, lost = fold.take(20)
    assert lost == 14
    assert view.completed == 6


def test_windows_are_cut_on_whole_seconds_and_kinds_follow_the_issue_window() -> None:
    assert series_origin(2.0) == 2.0 and series_origin(2.01) == 3.0
    spec = SeriesSpec(origin_s=3.0, window_s=10, issue_end_s=38.0, end_s=45.0)
    assert spec.count == 5  # 3–13, 13–23, 23–33, 33–43, 43–53
    assert spec.index(2.99) is None and spec.index(3.0) == 0 and spec.index(44.9) == 4
    assert spec.index(45.01) is None  # after the drain: not the load's
    assert window_kind(23, 33, 38.0) == "load"
    assert window_kind(33, 43, 38.0) == "partial"
    assert window_kind(43, 53, 38.0) == "drain"


def test_telemetry_samples_land_in_their_windows(tmp_path: Path) -> None:
    (tmp_path / "requests.jsonl").write_bytes(b"")
    tel = []
    for t in range(0, 30):
        total = 2.0 * t  # preemptions counted in the window: the counter's deltas
        tel.append(
            {
                "source": "engine",
                "endpoint": 0,
                "t": t + 0.5,
                "values": {
                    "running": 8,
                    "waiting": t,
                    "kv_usage": 0.01 * t,
                    "preemptions_total": total,
                },
            }
        )
        tel.append(
            {
                "source": "host",
                "t": t + 0.5,
                "client": {"rss_mb": 100 + t, "open_files": 20},
                "system": {},
                "servers": [{"pid": 1, "status": "ok", "rss_mb": 1000 + 10 * t, "cpu_percent": 50}],
            }
        )
        tel.append(
            {
                "source": "dcgm",
                "url_index": 0,
                "t": t + 0.5,
                "gpus": [{"host": "h", "index": 0, "memory_used_mib": 500 + t, "util_percent": 90}],
            }
        )
    (tmp_path / "telemetry.jsonl").write_bytes(b"\n".join(orjson.dumps(x) for x in tel) + b"\n")
    spec = SeriesSpec(origin_s=0.0, window_s=10, issue_end_s=30.0, end_s=30.0)
    windows, _ = windows_from_journals(tmp_path, spec)
    assert [w.engine_waiting for w in windows] == [4.5, 14.5, 24.5]
    assert windows[1].engine_kv_usage == pytest.approx(0.145)
    assert windows[0].engine_preemptions == 18  # 9 deltas of 2 after the first sample
    assert windows[1].engine_preemptions == 20
    assert windows[2].server_rss_mb == pytest.approx(1245.0)
    assert windows[2].client_rss_mb == pytest.approx(124.5)
    assert windows[0].gpu_memory_used_mib == pytest.approx(504.5)
    assert windows[0].gpus[0].gpu == "h/0" and windows[0].gpus[0].memory_used_mib_max == 509
    assert windows[0].completed == 0 and windows[0].output_tok_s == 0.0
    assert windows[0].ttft_p99 is None  # no request: no latency, never a zero


def test_warmup_requests_are_journaled_apart_and_counted(tmp_path: Path) -> None:
    lines = [request_line(_result(i, i * 0.1, 0.3, 10), 0, "warmup") for i in range(5)]
    lines += [request_line(_result(i, 1 + i * 0.1, 0.3, 10), 0, "load") for i in range(7)]
    (tmp_path / "requests.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    windows, warmup = windows_from_journals(tmp_path, SeriesSpec(0.0, 5, 5.0, 5.0))
    assert warmup == 5
    assert sum(w.completed for w in windows) == 7


def test_a_counted_warmup_ends_with_its_last_finished_request() -> None:
    clock = WarmupClock(parse_warmup("3req"))
    assert [clock.phase(sent_ns=i, now_ns=100 + i) for i in range(3)] == ["warmup"] * 3
    assert clock.end_ns == 102
    assert clock.phase(sent_ns=50, now_ns=110) == "warmup"  # sent during it: stays in it
    assert clock.phase(sent_ns=103, now_ns=120) == "load"
    assert clock.journaled == 4


def test_a_timed_warmup_ends_at_release_plus_its_seconds() -> None:
    clock = WarmupClock(parse_warmup("2s"))
    clock.released(10 * S)
    assert clock.end_ns == 12 * S
    assert clock.phase(11 * S, 13 * S) == "warmup"
    assert clock.phase(12 * S, 13 * S) == "load"
    assert clock.left_s(11 * S) == pytest.approx(1.0)
    assert clock.left_s(12 * S) is None


@pytest.mark.parametrize(
    ("text", "words"),
    [("5x", "is not a warm-up"), ("1.5req", "whole number"), ("0", "more than 0 s")],
)
def test_a_bad_warmup_names_the_value_and_what_is_allowed(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words) as e:
        parse_warmup(text)
    assert repr(text) in str(e.value) and "200req" in str(e.value)
