"""Multi-turn sessions on the open loop, `soaktop run` headless against the simulated engine
(issue 16 §2): each Poisson arrival starts a session, its later turns are due after their
previous answer, the record's rate figures count sessions, and verify agrees."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from typing import Any

import pytest

from tests.e2e.conftest import CLIENT_LAG, journal, only_run_dir, record, run_args, run_soaktop

pytestmark = pytest.mark.e2e


def test_poisson_sessions_of_three_turns_are_offered_and_recorded_as_sessions(sim, tmp_path):
    out = tmp_path / "runs"
    flags = (
        "--arrival", "poisson", "--rate", "4", "--turns", "3", "--think-time", "0.2s",
        "--duration", "4", "--max-tokens", "16", "--synthetic-input-tokens", "32",
    )  # fmt: skip
    rc, text = run_soaktop(*run_args(sim, out, *flags), timeout=120)
    run_dir = only_run_dir(out)
    rec, lines = record(run_dir), journal(run_dir)
    invalid = {r["code"] for r in rec["reasons"] if r["effect"] == "invalid"}
    assert (rec["status"], rc) == ("PASSED", 0) or invalid <= CLIENT_LAG, text
    load, turns, sessions = rec["load"], rec["turns"], rec["sessions"]
    # Every turn is journaled with its session, sent in turn order.
    by_session: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for ln in sorted(lines, key=lambda ln: ln["sent_s"]):
        by_session[ln["session"]].append(ln)
    assert all([ln["turn"] for ln in s] == list(range(1, len(s) + 1)) for s in by_session.values())
    # A later turn is due at its previous answer's end + the think time.
    for s in by_session.values():
        for prev, nxt in pairwise(s):
            assert nxt["intended_s"] == pytest.approx(prev["end_s"] + 0.2, abs=1e-5)
    # The record: per-turn figures summing to the load, and the sessions counted.
    assert [t["index"] for t in turns] == [1, 2, 3]
    for key in ("issued", "completed", "failed", "cancelled"):
        assert sum(t["load"][key] for t in turns) == load[key], key
    assert sessions["started"] == len(by_session) == turns[0]["load"]["completed"]
    assert sessions["completed"] == sum(len(s) == 3 for s in by_session.values()) >= 5
    assert sessions["ended_early"] == 0 and sessions["unfinished"] >= 1  # cut by the window
    # The rate is the sessions': ≈ 4/s offered and achieved, while ~3 times that were sent.
    assert len(lines) > 2 * len(by_session)
    assert load["achieved_rate"] == pytest.approx(len(by_session) / load["issue_s"])
    assert load["achieved_rate"] == pytest.approx(load["offered_rate"], rel=0.05), text
    assert "rate_not_achieved" not in invalid, rec["reasons"]
    assert load["lateness_s"]["n"] == len(lines)  # lateness takes every turn
    assert "sessions (3 turns, think 0.2 s)" in text, text
    assert "open loop: offered" in text and " sessions/s, achieved" in text, text
    rc_verify, verify_text = run_soaktop("verify", str(run_dir))
    assert rc_verify == 0, verify_text
