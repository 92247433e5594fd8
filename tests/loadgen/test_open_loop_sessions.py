"""Multi-turn sessions on the open loop against the simulated engine (a real HTTP server):
sessions start at the schedule's arrivals, a later turn is due at its previous answer's
end + think time, the record's achieved rate counts sessions, the cap holds turns."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from loadgen.arrivals import ArrivalModel, arrival_offsets
from loadgen.client import StreamClient
from loadgen.envelope import RequestResult
from loadgen.open_loop_sessions import OpenLoopSessionGenerator
from loadgen.prompts import BodyBuilder, Prompt, PromptPool
from loadgen.workers import LoadPlan
from simengine import SimConfig, run_sim
from soak.record.journal import request_line
from soak.record.summary import LoadTiming, summarize_load
from tests.simengine.sim_helpers import FAST

pytestmark = pytest.mark.timeout(60)

POOL = PromptPool(tuple(Prompt(i, f"question {i}") for i in range(5)), source="test")


@asynccontextmanager
async def engine(tmp_path: Path) -> AsyncIterator[str]:
    """One replica of the simulated engine, fast (a token every ~2 ms)."""
    config: dict[str, Any] = {"replicas": 1, "log_dir": tmp_path, **FAST}
    async with run_sim(SimConfig(**config)) as sim:
        yield sim.replicas[0].url


async def _run(
    base: str,
    *,
    model: ArrivalModel = "constant",
    rate: float,
    turns: int,
    think_s: float,
    duration_s: float,
    cap: int = 64,
    max_tokens: int = 8,
    during: float | None = None,
) -> tuple[OpenLoopSessionGenerator, list[RequestResult]]:
    """One open loop of sessions; ``during``: pause 0.3 s from that many seconds in."""
    results: list[RequestResult] = []
    plan = LoadPlan(
        endpoints=(base,),
        concurrency=4,
        duration_s=duration_s,
        max_requests=None,
        drain_timeout_s=10,
        barrier_timeout_s=10,
        request_id_prefix="t/load/chat",
        backoff_max_s=0,
    )
    bodies = BodyBuilder(model="tiny-sim", max_tokens=max_tokens, ignore_eos=True)
    async with StreamClient(max_connections=cap + 16) as client:
        gen = OpenLoopSessionGenerator(
            plan, client, POOL, bodies, results.append, arrival_offsets(model, rate, seed=7),
            cap, turns=turns, think_time_s=think_s,
        )  # fmt: skip
        assert await gen.start_workers()
        run = asyncio.create_task(gen.run())
        if during is not None:
            await asyncio.sleep(during)
            gen.pause()
            await asyncio.sleep(0.3)
            gen.resume()
        await asyncio.wait_for(run, 30)
    return gen, results


def _sessions(results: list[RequestResult]) -> dict[int, list[RequestResult]]:
    by: dict[int, list[RequestResult]] = defaultdict(list)
    for r in sorted(results, key=lambda r: r.sent_ns):
        assert r.session is not None and r.turn is not None, r
        by[r.session].append(r)
    return by


async def test_sessions_start_at_the_arrivals_and_each_turn_is_due_after_the_last_answer(
    tmp_path: Path,
) -> None:
    async with engine(tmp_path) as base:
        gen, results = await _run(base, rate=10, turns=3, think_s=0.1, duration_s=1.0)
    gs, released = gen.state, gen.state.barrier_released_ns or 0
    assert results and all(r.ok for r in results), [r.failure_detail for r in results]
    by = _sessions(results)
    # Turn 1s are the schedule's arrivals: one every 100 ms of the 1 s window.
    firsts = [s[0] for s in by.values()]
    assert all(r.turn == 1 for r in firsts)
    starts_ns = sorted((r.intended_ns or 0) - released for r in firsts)
    due = itertools.takewhile(lambda t: t < 1.0, arrival_offsets("constant", 10))
    assert starts_ns == [int(t * 1e9) for t in due]  # each at its arrival's time
    assert gs.sessions_started == len(by) == len(starts_ns) == gs.arrivals_issued
    # Turn i + 1 is due exactly at turn i's end + the think time, and sent then.
    followups = 0
    for turns in by.values():
        assert [r.turn for r in turns] == list(range(1, len(turns) + 1))
        for prev, nxt in itertools.pairwise(turns):
            assert nxt.intended_ns == (prev.end_ns or 0) + 100_000_000
            assert 0 <= nxt.sent_ns - nxt.intended_ns < 50_000_000  # on time: nothing held it
            followups += 1
    assert followups >= 8 and len(results) == gs.issued == len(by) + followups
    # Nothing due after the window is sent: the late sessions are left unfinished.
    assert max(r.intended_ns or 0 for r in results) < released + 1_000_000_000
    full = sum(len(t) == 3 for t in by.values())
    assert 2 <= full < len(by) and gs.sessions_completed == full
    assert sum(gs.sessions_ended_early.values()) == 0


async def test_the_record_counts_sessions_as_the_achieved_rate_not_their_turns(
    tmp_path: Path,
) -> None:
    async with engine(tmp_path) as base:
        gen, results = await _run(
            base, model="poisson", rate=4, turns=3, think_s=0.2, duration_s=3.0
        )
    gs, released = gen.state, gen.state.barrier_released_ns or 0
    journal = tmp_path / "requests.jsonl"
    journal.write_bytes(b"".join(request_line(r, released) + b"\n" for r in results))
    issue_s = ((gs.issue_ended_ns or 0) - released) / 1e9
    schedule = arrival_offsets("poisson", 4, seed=7)  # the run's own draw
    offered = sum(1 for _ in itertools.takewhile(lambda t: t < issue_s, schedule)) / issue_s
    timing = LoadTiming(
        requested_concurrency=4, workers_started=4, barrier_released=True,
        issue_start_s=0.0, issue_end_s=issue_s, drain_end_s=issue_s + 1, issued=gs.issued,
        offered_rate=offered, held_by_cap=gs.held_by_cap,
    )  # fmt: skip
    load = summarize_load(journal, timing)
    sessions = sum(r.turn == 1 for r in results)
    assert len(results) > 2 * sessions  # the turns are there, more than twice the sessions
    assert load.achieved_rate == pytest.approx(sessions / issue_s)
    # ≈ 4, not ≈ 12: within one session of the schedule's count (one drawn at the window's
    # edge may be sent a loop turn late, on a loaded machine, and fall outside it).
    assert load.achieved_rate == pytest.approx(offered, abs=1.01 / issue_s)
    assert load.lateness_s.n == len(results)  # lateness takes every turn
    assert load.e2e_from_intended_s.n == len(results)


async def test_the_cap_holds_later_turns_and_counts_them(tmp_path: Path) -> None:
    # One slot; answers of ~200 ms, sessions every 350 ms with 100 ms of thought: a turn
    # often falls due while another session's turn holds the slot.
    async with engine(tmp_path) as base:
        gen, results = await _run(
            base, rate=1 / 0.35, turns=2, think_s=0.1, duration_s=2.0, cap=1, max_tokens=100
        )
    gs = gen.state
    assert gs.in_flight_peak == 1 and all(r.ok for r in results)
    late = [r for r in results if r.sent_ns - (r.intended_ns or 0) > 50_000_000]
    late_turns = [r for r in late if (r.turn or 0) > 1]
    assert late_turns, [(r.turn, r.sent_ns - (r.intended_ns or 0)) for r in results]
    # Every request that went out late had waited at the full cap, a later turn as an
    # arrival: each was counted once.
    assert gs.held_by_cap >= len(late) > 0


async def test_a_turn_due_in_a_pause_goes_out_at_the_resume_due_then(tmp_path: Path) -> None:
    async with engine(tmp_path) as base:
        gen, results = await _run(base, rate=5, turns=2, think_s=0.05, duration_s=1.2, during=0.45)
    gs = gen.state
    [(paused, resumed)] = [(a, b or 0) for a, b in gs.pauses]
    sent_in_pause = [r for r in results if paused < r.sent_ns < resumed]
    assert not sent_in_pause, sent_in_pause
    # The turn whose answer ended in the pause was sent at the resume, due then: the
    # operator's pause is not the client's lateness.
    at_resume = [r for r in results if r.turn == 2 and r.intended_ns == resumed]
    assert at_resume, [(r.turn, r.intended_ns, r.sent_ns) for r in results]
    assert all(0 <= r.sent_ns - resumed < 50_000_000 for r in at_resume)
    assert gs.skipped_paused >= 1  # the arrival due in the pause was withheld, as ever


async def test_under_overload_a_due_turn_goes_before_new_arrivals_so_sessions_finish(
    tmp_path: Path,
) -> None:
    # One slot, answers of ~200 ms: 5 requests/s served against 20 sessions/s offered.
    # Earliest-intended-first sent only the arrivals' backlog (always older than any turn
    # due): no session ever reached turn 2, and every session begun held its history in
    # memory until the run's end — without bound over an hour of overload.
    async with engine(tmp_path) as base:
        gen, results = await _run(
            base, rate=20, turns=2, think_s=0.0, duration_s=2.0, cap=1, max_tokens=100
        )
    gs = gen.state
    assert all(r.ok for r in results), [r.failure_detail for r in results]
    firsts = sum(r.turn == 1 for r in results)
    seconds = sum(r.turn == 2 for r in results)
    assert firsts >= 3 and seconds >= firsts - 1, (firsts, seconds)
    assert gs.sessions_completed >= firsts - 1
    # what overload costs is the arrivals' lateness (the schedule waits; it holds nothing)
    late = [r.sent_ns - (r.intended_ns or 0) for r in results if r.turn == 1]
    assert max(late) > 500_000_000


async def test_a_turn_held_at_the_cap_through_a_pause_is_not_late_by_the_pause(
    tmp_path: Path,
) -> None:
    # One slot, answers of ~300 ms, a session every 300 ms, 50 ms of thought: session 0's
    # turn 2 falls due at ~0.35 s while session 1's turn 1 holds the slot; the pause (from
    # ~0.45 s, 0.3 s long) comes before the slot frees, so the turn goes out at the resume.
    async with engine(tmp_path) as base:
        gen, results = await _run(
            base, rate=1 / 0.3, turns=2, think_s=0.05, duration_s=1.5, cap=1,
            max_tokens=150, during=0.45,
        )  # fmt: skip
    gs = gen.state
    [(paused, resumed)] = [(a, b or 0) for a, b in gs.pauses]
    held = []
    for turns in _sessions(results).values():
        for prev, nxt in itertools.pairwise(turns):
            due = (prev.end_ns or 0) + 50_000_000
            if due < paused and nxt.sent_ns >= resumed:
                held.append((due, nxt))
    assert held, [(r.session, r.turn, r.intended_ns, r.sent_ns) for r in results]
    for due, r in held:
        # its hold before the pause stays its lateness; the pause's length does not
        assert r.intended_ns == due + (resumed - paused)
        assert r.sent_ns - (r.intended_ns or 0) < 200_000_000
