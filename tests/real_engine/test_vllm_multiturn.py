"""A short 2-turn conversation run against a real vLLM (issue 16 §5): each session's second
turn sends the first turn's prompt and the model's actual answer back, the prompt grows,
and the server's counters reconcile with the journal."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from tests.e2e.conftest import journal, only_run_dir, record, run_soaktop
from tests.real_engine.conftest import assert_healthy_soak_verdict, logged_requests, soak_args

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(600)]

MAX_TOKENS = 16
SESSIONS = 4
"""Two workers, two sessions each, one after the other: a few sessions, a short run."""


def test_two_turn_sessions_against_vllm(vllm_logged, tmp_path):
    srv = vllm_logged
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *soak_args(
            srv, out, "--turns", "2", "--think-time", "100ms", "--concurrency", "2",
            "--max-requests", str(2 * SESSIONS), "--max-tokens", str(MAX_TOKENS),
            "--ignore-eos", "--synthetic-input-tokens", "32", "--duration", "120",
        ),
        timeout=300,
    )  # fmt: skip
    run_dir = only_run_dir(out)
    rec, lines = record(run_dir), journal(run_dir)
    try:
        assert_healthy_soak_verdict(rc, rec, lines)
    except AssertionError as e:
        raise AssertionError(f"{e}\nexit {rc}: {rec['reasons']}\n{text[-3000:]}") from None

    # Sessions of two turns; turn 2 carries turn 1 and its answer: more prompt tokens.
    by_session: dict[int, dict[int, dict[str, object]]] = defaultdict(dict)
    for ln in lines:
        by_session[ln["session"]][ln["turn"]] = ln
    full = [s for s in by_session.values() if set(s) == {1, 2}]
    assert len(full) >= SESSIONS - 1, by_session  # a worker may end mid-session
    for s in full:
        first, second = s[1]["prompt_tokens"], s[2]["prompt_tokens"]
        assert isinstance(first, int) and isinstance(second, int)
        assert second > first + MAX_TOKENS // 2, (first, second)
    turns = rec["turns"]
    assert turns[1]["load"]["input_tokens_mean"] > turns[0]["load"]["input_tokens_mean"]
    assert sum(t["load"]["issued"] for t in turns) == rec["load"]["issued"] == len(lines)
    assert rec["sessions"]["completed"] == len(full) and rec["sessions"]["ended_early"] == 0

    # The server counted exactly what the journal holds (the existing reconciliation).
    ok = [r for r in lines if r["ok"]]
    recon = rec["reconciliation"]
    assert recon["matched"] is True, recon
    assert recon["load"]["generation_tokens"]["server"] == MAX_TOKENS * len(ok)

    rc_v, out_v = run_soaktop("verify", str(run_dir))
    assert rc_v == 0, out_v
    assert "turn 2: completed" in text and "sessions (2 turns, think 0.1 s)" in text, text

    # No per-request seed reached the CPU engine (it crashes under concurrency with one).
    logged = logged_requests(srv.log_text())
    assert all(logged[r["id"]]["seed"] == "None" for r in lines)


def test_open_loop_sessions_against_vllm(vllm_logged, tmp_path):
    """Users arriving by Poisson, each holding a 2-turn conversation: turn 2 is due at
    turn 1's end + the think time, the schedule counts sessions, and the server's
    counters still reconcile with every turn the journal holds."""
    srv = vllm_logged
    out = tmp_path / "runs"
    rc, text = run_soaktop(
        *soak_args(
            srv, out, "--arrival", "poisson", "--rate", "2", "--arrival-seed", "3",
            "--turns", "2", "--think-time", "100ms", "--duration", "10",
            "--max-tokens", str(MAX_TOKENS), "--ignore-eos", "--synthetic-input-tokens", "32",
        ),
        timeout=300,
    )  # fmt: skip
    run_dir = only_run_dir(out)
    rec, lines = record(run_dir), journal(run_dir)
    try:
        assert_healthy_soak_verdict(rc, rec, lines)
    except AssertionError as e:
        raise AssertionError(f"{e}\nexit {rc}: {rec['reasons']}\n{text[-3000:]}") from None
    by_session: dict[int, dict[int, dict[str, Any]]] = defaultdict(dict)
    for ln in lines:
        by_session[ln["session"]][ln["turn"]] = ln
    firsts = [s[1] for s in by_session.values()]
    full = [s for s in by_session.values() if set(s) == {1, 2}]
    assert len(full) >= len(firsts) - 2, by_session  # the window's last may be unfinished
    for s in full:
        one, two = s[1], s[2]
        # Due at turn 1's end + 100 ms, sent no earlier; the history grew the prompt.
        assert two["intended_s"] == pytest.approx(one["end_s"] + 0.1, abs=1e-3), (one, two)
        assert two["sent_s"] >= two["intended_s"] - 0.001
        assert two["prompt_tokens"] > one["prompt_tokens"] + MAX_TOKENS // 2
    load = rec["load"]  # the schedule's arrivals are sessions: turn 1s, not every request
    assert load["achieved_rate"] * load["issue_s"] == pytest.approx(len(firsts), abs=0.5)
    assert len(lines) > len(firsts) and "sessions/s" in text, text
    recon = rec["reconciliation"]
    assert recon["matched"] is True, recon
    assert recon["load"]["generation_tokens"]["server"] == MAX_TOKENS * sum(
        1 for r in lines if r["ok"]
    )
    rc_v, out_v = run_soaktop("verify", str(run_dir))
    assert rc_v == 0, out_v
    logged = logged_requests(srv.log_text())
    assert all(logged[r["id"]]["seed"] == "None" for r in lines)
