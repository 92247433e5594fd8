"""The monitor in an open loop and a stepped load (issue 16 §3, §4): the open-loop line,
the current step, and the ``+``/``-`` keys that ask the runner for a new step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from soak.record.snapshot import Snapshot
from tests.tui.helpers import HEALTHY, LiveRun, control_lines, live_app
from tui.load_control import stepped_concurrency, stepped_rate
from tui.panes import ConcurrencyPane, HeaderPane

OPEN_LOOP: dict[str, Any] = {
    "arrival": "poisson",
    "rate": 20.0,
    "max_in_flight": 400,
    "in_flight": 12,
    "in_flight_peak": 31,
    "held_by_cap": 3,
    "skipped_paused": 0,
    "offered_window_per_s": 19.8,
    "achieved_window_per_s": 19.7,
    "offered_per_s": 20.1,
    "achieved_per_s": 19.9,
    "lateness_window_s": {"p99": 0.0031, "n": 197, "method": "live-histogram"},
    "lateness_s": {"p99": 0.0042, "n": 900, "method": "live-histogram"},
}
STEPS: dict[str, Any] = {
    "current": 2,
    "planned": 5,
    "settle_left_s": 4.2,
    "steps": [
        {"index": i, "label": f"rate={r}", "origin": "sweep", "start_s": 10.0 * i, "rate": r}
        for i, r in enumerate((5.0, 10.0, 20.0))
    ],
}


def _load_snapshot(run: LiveRun, index: int, **sections: Any) -> dict[str, Any]:
    """The fixture's snapshot ``index`` in the load phase with ``sections`` added."""
    snap = run.write_until(index)
    assert snap["phase"] == "load"
    lines = (run.dir / "snapshots.jsonl").read_text().splitlines()
    changed = snap | sections
    Snapshot.model_validate(changed)  # what the runner's model accepts
    lines[-1] = json.dumps(changed)
    (run.dir / "snapshots.jsonl").write_text("\n".join(lines) + "\n")
    return changed


async def test_the_open_loop_line_and_the_step_in_80x24(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    _load_snapshot(run, 6, open_loop=OPEN_LOOP, steps=STEPS)
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        pane = app.screen.query_one(ConcurrencyPane).plain_text
        assert "in flight 12/400 held 3 late 3.1ms" in pane, pane
        assert "19.8→19.7/s win 20.1→19.9 all" in pane, pane
        assert "requested" not in pane  # the closed loop's worker line gives way
        header = app.screen.query_one(HeaderPane).plain_text
        assert "step 3/5 rate=20.0 · settle 4 s left" in header, header


async def test_wide_open_loop_spells_it_out(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    late = OPEN_LOOP | {"lateness_window_s": {"p99": 0.120, "n": 40, "method": "live-histogram"}}
    _load_snapshot(run, 6, open_loop=late)
    app = live_app(run.dir)
    async with app.run_test(size=(200, 50)) as pilot:
        await app.poll_now()
        await pilot.pause()
        app.action_pane(4)  # maximised: the long words
        await pilot.pause()
        pane = app.screen.query_one(ConcurrencyPane).plain_text
        assert "in flight 12/400 peak 31  held by cap 3  lateness p99 120ms" in pane, pane
        assert "offered→sent 19.8→19.7/s last window  20.1→19.9 all" in pane, pane
        assert "target 20.0/s poisson" in pane


@pytest.mark.parametrize(
    ("key", "expected"), [("plus", 25.0), ("minus", 16.0), ("plus,plus", 31.0)]
)
async def test_a_key_asks_for_the_next_rate(tmp_path: Path, key: str, expected: float) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    _load_snapshot(run, 6, open_loop=OPEN_LOOP)
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        await pilot.press(*key.split(","))
        await pilot.pause()
    sent = control_lines(run.dir)
    assert sent[-1]["cmd"] == "set" and sent[-1]["rate"] == expected, sent
    assert len(sent) == len(key.split(",")) and "concurrency" not in sent[-1]


async def test_a_closed_loop_key_asks_for_concurrency(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    snap = _load_snapshot(run, 6)
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        await pilot.press("minus")
        await pilot.pause()
    requested = snap["load"]["requested_concurrency"]
    assert control_lines(run.dir) == [
        {
            "cmd": "set",
            "concurrency": stepped_concurrency(requested, -1),
            "note": "from the monitor",
        }
    ]


async def test_a_trace_replay_shows_its_line_and_takes_no_rate_key(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    replay = OPEN_LOOP | {"arrival": "trace", "rate": None}
    _load_snapshot(run, 6, open_loop=replay)
    app = live_app(run.dir)
    async with app.run_test(size=(200, 50)) as pilot:
        await app.poll_now()
        await pilot.pause()
        app.action_pane(4)
        await pilot.pause()
        pane = app.screen.query_one(ConcurrencyPane).plain_text
        assert "offered→sent 19.8→19.7/s last window" in pane and "trace replay" in pane, pane
        await pilot.press("plus")
        await pilot.pause()
    assert control_lines(run.dir) == []  # nothing asked: the runner would refuse it


async def test_no_set_outside_the_load(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(0)  # before the barrier
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        await pilot.press("plus")
        await pilot.pause()
    assert control_lines(run.dir) == []


def test_steps_of_the_keys() -> None:
    assert [stepped_rate(r, 1) for r in (20.0, 4.0, 0.5, 0.01)] == [25.0, 5.0, 0.62, 0.02]
    assert [stepped_rate(r, -1) for r in (20.0, 1.0, 0.01)] == [16.0, 0.8, 0.01]
    assert [stepped_concurrency(c, 1) for c in (1, 32, 100)] == [2, 35, 110]
    assert [stepped_concurrency(c, -1) for c in (1, 32, 100)] == [1, 29, 90]
