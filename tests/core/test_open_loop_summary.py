"""The open-loop figures of the load summary, and the verdict rule that reads them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from soak.judge.rate_reasons import MAX_LATENESS_P99_S, rate_reasons
from soak.record.models import OPEN_LOOP_FIELDS, LoadSummary
from soak.record.summary import LoadTiming, summarize_load


def _line(i: int, sent: float, intended: float | None, **kw: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "id": f"r/load/chat/{i}",
        "phase": "load",
        "worker": 0,
        "prompt": 0,
        "ok": True,
        "sent_s": sent,
        "end_s": sent + 0.5,
        "ttfb_s": 0.01,
        "ttft_s": 0.1,
        "first_content_s": 0.1,
        "e2e_s": 0.5,
        "status": 200,
        "failure": None,
        "detail": None,
        "prompt_tokens": 10,
        "output_tokens": 5,
        "chunks": 5,
        "finish": "stop",
        "cancelled": False,
        "stale_retry": False,
        "itl_us": [],
    }
    if intended is not None:
        line["intended_s"] = intended
    return line | kw


def _write(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _timing(offered: float | None, held: int = 0) -> LoadTiming:
    return LoadTiming(
        requested_concurrency=4,
        workers_started=4,
        barrier_released=True,
        issue_start_s=0.0,
        issue_end_s=10.0,
        drain_end_s=11.0,
        issued=20,
        offered_rate=offered,
        held_by_cap=held,
    )


def test_open_loop_figures_come_from_the_intended_times(tmp_path):
    # 20 requests in a 10 s window, each sent 20 ms late; one late by 300 ms and failed.
    lines = [_line(i, i * 0.5 + 0.02, i * 0.5) for i in range(19)]
    lines.append(_line(19, 9.8, 9.5, ok=False, failure="http_5xx", end_s=9.9, e2e_s=0.1))
    load = summarize_load(_write(tmp_path, lines), _timing(2.0))
    assert load.offered_rate == 2.0 and load.achieved_rate == pytest.approx(2.0)
    assert load.lateness_s.n == 20 and load.lateness_s.max == pytest.approx(0.3)
    assert load.lateness_s.p50 == pytest.approx(0.02)
    # From the schedule's time: the lateness added to TTFT and E2E (completed ones only).
    assert load.ttft_from_intended_s.n == 19
    assert load.ttft_from_intended_s.p50 == pytest.approx(0.12)
    assert load.e2e_from_intended_s.max == pytest.approx(0.52)
    dumped = load.model_dump(mode="json")
    assert set(OPEN_LOOP_FIELDS) <= set(dumped) and dumped["held_by_cap"] == 0
    # verify's path: the timing read back from the summary gives the same summary
    again = summarize_load(tmp_path / "requests.jsonl", LoadTiming.from_summary(load))
    assert again == load


def test_a_closed_loop_summary_has_no_open_loop_keys(tmp_path):
    lines = [_line(i, i * 0.5, None) for i in range(20)]
    load = summarize_load(_write(tmp_path, lines), _timing(None))
    assert not set(OPEN_LOOP_FIELDS) & set(load.model_dump(mode="json"))
    assert rate_reasons(load) == []


def _summary(achieved: float, late_p99: float = 0.001, held: int = 0) -> LoadSummary:
    return LoadSummary.model_validate(
        {
            "requested_concurrency": 4,
            "workers_started": 4,
            "barrier_released": True,
            "offered_rate": 40.0,
            "achieved_rate": achieved,
            "lateness_s": {"p99": late_p99, "n": 100},
            "held_by_cap": held,
        }
    )


def test_a_schedule_held_gives_no_reason():
    assert rate_reasons(_summary(39.0)) == []  # 2.5% short: within the bound


@pytest.mark.parametrize(
    ("summary", "words"),
    [
        (_summary(31.2), "achieved rate is more than 5% below"),
        (_summary(40.0, late_p99=MAX_LATENESS_P99_S * 2), "late by 100.0 ms at p99"),
        (_summary(40.0, held=7), "7 arrivals waited for a slot under --max-in-flight"),
    ],
)
def test_a_schedule_not_held_is_invalid_with_the_achieved_rate(summary, words):
    (reason,) = rate_reasons(summary)
    assert (reason.code, reason.effect) == ("rate_not_achieved", "invalid")
    assert reason.message.startswith(
        f"offered 40.0 req/s, achieved {summary.achieved_rate:.1f} req/s"
    )
    assert words in reason.message
