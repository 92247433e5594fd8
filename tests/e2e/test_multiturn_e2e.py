"""Multi-turn conversations against the simulated engine (issue 16 §2): per-turn figures
that sum to the load, prompts that grow with the turn, prefix-cache hits, verify and
recover agreeing with the journal, and the options refused where they cannot work."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from soak.cli.demo import SimHandle
from tests.e2e.conftest import CLIENT_LAG, journal, only_run_dir, record, run_args, run_soaktop

pytestmark = pytest.mark.e2e

TRACE = Path(__file__).resolve().parents[2] / "samples" / "traces" / "azure_sample.csv"


def _run(sim: SimHandle, tmp_path: Path, *flags: str) -> tuple[int, str, Path]:
    out = tmp_path / "runs"
    args = run_args(sim, out, "--max-tokens", "24", "--synthetic-input-tokens", "64", *flags)
    rc, text = run_soaktop(*args, timeout=120)
    assert out.is_dir(), text
    return rc, text, only_run_dir(out)


def test_three_turn_sessions_have_per_turn_figures_that_sum_to_the_load(sim, tmp_path):
    rc, text, run_dir = _run(
        sim, tmp_path, "--turns", "3", "--think-time", "50ms", "--concurrency", "4",
        "--max-requests", "60",
    )  # fmt: skip
    rec, lines = record(run_dir), journal(run_dir)
    invalid = {r["code"] for r in rec["reasons"] if r["effect"] == "invalid"}
    assert (rec["status"], rc) == ("PASSED", 0) or invalid <= CLIENT_LAG, text
    load, turns, sessions = rec["load"], rec["turns"], rec["sessions"]
    assert [t["index"] for t in turns] == [1, 2, 3]
    for key in ("issued", "completed", "failed", "cancelled", "prompt_tokens", "output_tokens"):
        assert sum(t["load"][key] for t in turns) == load[key], key
    assert load["issued"] == 60 == len(lines)
    # Each turn sends the history: the prompt grows with the turn, on the server's count.
    means = [t["load"]["input_tokens_mean"] for t in turns]
    assert means[0] < means[1] < means[2], means
    assert means[1] > means[0] + 24 * 0.5  # at least turn 1's prompt and much of its answer
    # The journal: every line names its session and turn; sessions run 1, 2, 3 in order.
    by_session: dict[int, list[int]] = defaultdict(list)
    for ln in lines:
        by_session[ln["session"]].append(ln["turn"])
    assert all(t == list(range(1, len(t) + 1)) for t in by_session.values()), by_session
    full = sum(t == [1, 2, 3] for t in by_session.values())
    assert sessions["started"] == len(by_session) == turns[0]["load"]["completed"]
    assert sessions["completed"] == full >= 16 and sessions["ended_early"] == 0
    # The request count ran out mid-session for a few workers: unfinished, not failed.
    assert sessions["unfinished"] == len(by_session) - full
    assert sessions["turns"] == 3 and sessions["think_time_s"] == pytest.approx(0.05)
    # Turn 2 repeats turn 1 as its prefix: the simulated engine's prefix cache hits.
    # Turn 1s are unique (synthetic prompts with a per-request prefix), so the hits are the
    # histories: about half of a turn 2's prompt, more of a turn 3's (whole blocks only).
    caches = [e.get("prefix_cache") for e in rec["telemetry"]["engines"]]
    later = turns[1]["load"]["prompt_tokens"] + turns[2]["load"]["prompt_tokens"]
    assert sum(c["hits"] for c in caches if c) > 0.3 * later, (caches, later)
    # The CLI's summary: one line per turn, one for the sessions.
    assert f"turn 1: completed {len(by_session)}, failed 0" in text, text
    assert f"turn 3: completed {full}, failed 0" in text, text
    started = f"{len(by_session)} started, {full} completed"
    assert f"sessions (3 turns, think 0.05 s): {started}" in text, text
    rc_verify, verify_text = run_soaktop("verify", str(run_dir))
    assert rc_verify == 0, verify_text


def test_verify_finds_a_turn_figure_that_disagrees_with_the_journal(sim, tmp_path):
    _, _, run_dir = _run(sim, tmp_path, "--turns", "2", "--concurrency", "1", "--max-requests", "8")
    rec: dict[str, Any] = record(run_dir)
    assert rec["sessions"]["completed"] == 4
    rec["sessions"]["completed"] = 5
    (run_dir / "record.json").write_bytes(orjson.dumps(rec))
    rc, out = run_soaktop("verify", str(run_dir))
    assert rc != 0 and "sessions.completed: record 5, journal 4" in out, out


def test_recover_rebuilds_the_turns_from_the_journal(sim, tmp_path):
    _, _, run_dir = _run(sim, tmp_path, "--turns", "2", "--concurrency", "2", "--max-requests", "8")
    before = record(run_dir)
    (run_dir / "record.json").unlink()
    rc, out = run_soaktop("recover", str(run_dir))
    assert rc in (0, 1), out
    after = record(run_dir)
    assert after["sessions"] == before["sessions"]
    same = ("index", "sessions_ended", "history_truncated")
    counts = ("issued", "completed", "failed", "prompt_tokens", "input_tokens_mean", "ttft_s")
    for a, b in zip(after["turns"], before["turns"], strict=True):
        assert {k: a[k] for k in same} == {k: b[k] for k in same}
        assert {k: a["load"][k] for k in counts} == {k: b["load"][k] for k in counts}
    rc_verify, verify_text = run_soaktop("verify", str(run_dir))
    assert rc_verify == 0, verify_text


def test_a_single_request_load_writes_no_turn_keys(sim, tmp_path):
    _, _, run_dir = _run(sim, tmp_path, "--concurrency", "2", "--max-requests", "4")
    rec, lines = record(run_dir), journal(run_dir)
    assert "turns" not in rec and "sessions" not in rec
    assert not any({"turn", "session", "answer_truncated"} & set(ln) for ln in lines)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (("--turns", "3", "--api", "completions"), "needs the chat API"),
        (("--turns", "3", "--arrival", f"trace:{TRACE}"), "a trace replays single requests"),
        (("--think-time", "2s"), "give --turns K"),
        (("--turns", "2", "--think-time", "soon"), "think time 'soon'"),
        (("--turns", "99",), "--turns"),
    ],
)  # fmt: skip
def test_options_a_conversation_cannot_take_are_refused_in_words(sim, tmp_path, flags, words):
    out = tmp_path / "runs"
    rc, text = run_soaktop(*run_args(sim, out, "--max-requests", "4", *flags), timeout=60)
    assert rc == 2 and words in text, text
    assert not out.exists() or not any(out.iterdir())
