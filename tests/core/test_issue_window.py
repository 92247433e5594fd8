"""``load.output_tokens_per_s_issue_window`` is what its docstring says: the output tokens
of the judged requests that finished inside the issue window ÷ the issue seconds —
requests finished in the window, not tokens received in it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from soak.record.summary import LoadTiming, summarize_load


def _line(rid: str, sent: float, end: float | None, tokens: int | None, **kw: Any) -> str:
    line: dict[str, Any] = {
        "id": rid,
        "phase": "load",
        "worker": 0,
        "prompt": 0,
        "ok": True,
        "sent_s": sent,
        "end_s": end,
        "ttfb_s": 0.01,
        "ttft_s": 0.02,
        "first_content_s": 0.02,
        "e2e_s": None if end is None else end - sent,
        "status": 200,
        "failure": None,
        "detail": None,
        "prompt_tokens": 10 if tokens is not None else None,
        "output_tokens": tokens,
        "chunks": tokens or 0,
        "finish": "stop",
        "cancelled": False,
        "stale_retry": False,
        "itl_us": [],
    }
    return json.dumps(line | kw)


def test_requests_straddling_the_window_end_are_left_out_of_the_window_figure(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "requests.jsonl"
    lines = [
        # a warm-up request (sent before the judged window opened): in no figure
        _line("w", 5.0, 11.0, 1000, phase="warmup"),
        _line("a", 10.5, 15.0, 100),  # wholly inside
        _line("b", 18.0, 20.0, 50),  # ends exactly as issuing stops: inside (≤)
        _line("c", 19.0, 22.0, 70),  # straddles the end: the drain's, not the window's
        _line("d", 12.0, 14.0, None, ok=False, failure="http_5xx", status=500),
        _line("e", 19.5, 25.0, None, ok=False, cancelled=True),  # cut at the deadline
    ]
    journal.write_text("\n".join(lines) + "\n")
    timing = LoadTiming(
        requested_concurrency=2,
        workers_started=2,
        barrier_released=True,
        issue_start_s=10.0,
        issue_end_s=20.0,
        drain_end_s=25.0,
        issued=5,
    )
    s = summarize_load(journal, timing)
    assert (s.issue_s, s.drain_s, s.elapsed_s) == (10.0, 5.0, 15.0)
    assert (s.completed, s.failed, s.cancelled, s.output_tokens) == (3, 1, 1, 220)
    # All output tokens over issue + drain; only a's and b's over the issue seconds.
    assert s.output_tokens_per_s == pytest.approx(220 / 15.0)
    assert s.output_tokens_per_s_issue_window == pytest.approx((100 + 50) / 10.0)
    # c had streamed most of its tokens by 20 s: a "tokens received" figure would count
    # them; this one, by its definition, does not.
    assert (s.output_tokens_per_s_issue_window or 0.0) < (100 + 50 + 70) / 10.0
