"""Seam tests: canned run directories fed to the live app; assertions on what is shown."""

from __future__ import annotations

import json
from pathlib import Path

from tests.tui.helpers import (
    ENGINE_DEATH,
    HEALTHY,
    POST_LOAD_500,
    XID,
    FakeRunner,
    LiveRun,
    live_app,
    rendered,
    screen_text,
)
from tui.panes import (
    ConcurrencyPane,
    EventsPane,
    GatesPane,
    GpuPane,
    HeaderPane,
    LatencyPane,
    ThroughputPane,
)
from tui.panes.events import EventList


async def test_live_numbers_follow_the_snapshots(tmp_path: Path) -> None:
    run = LiveRun(XID, tmp_path / "run")
    snap = run.write_until(8)
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        win = snap["load"]["window"]
        throughput = app.screen.query_one(ThroughputPane).plain_text
        assert f"out tok/s {win['output_tokens_per_s']:>6.0f} win" in throughput
        assert f"done {snap['load']['completed']}" in throughput
        header = app.screen.query_one(HeaderPane).plain_text
        assert "LIVE" in header and "tiny-sim__demo__vllm__soak__1130-053411" in header
        assert "load 00:08 of 00:20" in header
        assert "verdict running" in header and "no failures so far" in header
        latency = app.screen.query_one(LatencyPane).plain_text
        ttft = snap["load"]["cumulative"]["ttft_s"]
        assert f"TTFT  {ttft['p50'] * 1000:.0f}ms" in latency
        concurrency = app.screen.query_one(ConcurrencyPane).plain_text
        assert "req 32  started 32  in flight 32" in concurrency

        later = run.write_until(14)
        await app.poll_now()
        await pilot.pause()
        assert "load 00:18 of 00:20" in app.screen.query_one(HeaderPane).plain_text
        assert (
            f"done {later['load']['completed']}" in app.screen.query_one(ThroughputPane).plain_text
        )


async def test_panes_without_a_source_say_so(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    for snap in run.snaps:
        snap["telemetry"] = {"future_section": {"x": 1}}  # no engines, no GPUs; extra keys
        snap["load"]["brand_new_counter"] = 7
    run.write_until(6)
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        assert app.screen.query_one(GpuPane).plain_text == "no GPU source"
        assert "no engine metrics" in app.screen.query_one(ConcurrencyPane).plain_text
        assert "server TTFT: no data" in app.screen.query_one(LatencyPane).plain_text
        assert "thresholds none set" in app.screen.query_one(GatesPane).plain_text


async def test_before_the_first_snapshot(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    app = live_app(run_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        text = screen_text(app)
        assert "waiting for the runner" in text
        assert "no load yet" in text


async def test_failed_after_gate_and_its_evidence(tmp_path: Path) -> None:
    run = LiveRun(POST_LOAD_500, tmp_path / "run")
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        run.finish()
        (run.dir / "evidence").mkdir()
        (run.dir / "evidence" / "after-json-2.json").write_text(
            (POST_LOAD_500 / "evidence" / "after-json-2.json").read_text()
        )
        await app.poll_now()
        await pilot.pause()
        gates = app.screen.query_one(GatesPane).plain_text
        assert "after  json 23/24 FAIL" in gates
        assert "before json 24/24 PASS" in gates
        header = app.screen.query_one(HeaderPane).plain_text
        assert "FAILED" in header and "after-load json 23/24" in header
        assert "run finished: FAILED" in header

        # Select the failed probe's event: its details include the evidence file.
        events = app.screen.query_one(EventsPane)
        assert "after-load json#2 (address): availability" in events.plain_text
        await pilot.press("7")
        options = events.query_one(EventList)
        row = next(
            i
            for i in range(options.option_count)
            if "json#2 (address): availability" in str(options.get_option_at_index(i).prompt)
        )
        options.highlighted = row
        await pilot.press("enter")
        await pilot.pause()
        body = rendered(app.screen.query_one("#event-body"))
        assert "evidence/after-json-2.json" in body
        assert '"status": 500' in body  # the probe record inside the evidence file
        await pilot.press("escape")
        assert app.screen is app.screen_stack[0]


async def test_xid_fault_on_gpu_1(tmp_path: Path) -> None:
    run = LiveRun(XID, tmp_path / "run")
    run.write_until(10)  # just after the Xid at 16 s
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        gpus = app.screen.query_one(GpuPane).plain_text
        assert "1 need a look" in gpus
        xid_rows = [r for r in gpus.splitlines() if "XID 31" in r]
        assert len(xid_rows) == 1 and xid_rows[0].startswith("1:1 ")
        events = app.screen.query_one(EventsPane).plain_text
        assert "fault" in events and "Xid 31" in events
        # one Xid, three reports (the DCGM gauge, the kernel line, the CUDA error): 1 fault
        assert "1 fault (3 reports)" in app.screen.query_one(HeaderPane).plain_text
    wide = live_app(run.dir)
    async with wide.run_test(size=(160, 48)) as pilot:
        await wide.poll_now()
        await pilot.pause()
        rows = wide.screen.query_one(GpuPane).plain_text.splitlines()
        assert len([r for r in rows if r[:1].isdigit()]) == 8  # every GPU gets its row
        assert any(r.startswith("1:1 ") and "XID 31" in r for r in rows)


async def test_dead_replica(tmp_path: Path) -> None:
    run = LiveRun(ENGINE_DEATH, tmp_path / "run")
    snap = run.write_until(14)
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        concurrency = app.screen.query_one(ConcurrencyPane).plain_text
        assert "e0 ok" in concurrency
        assert "e1 DOWN connection refused" in concurrency
        events = app.screen.query_one(EventsPane).plain_text
        assert events.startswith("failures: ")
        for cls, n in snap["load"]["failures_by_class"].items():
            assert f"{n} {cls}" in events
        assert "engine core hit a fatal error" in events
        assert (
            f"{snap['load']['failed']} failed requests"
            in app.screen.query_one(HeaderPane).plain_text
        )


async def test_verdict_words(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        run.finish()
        await app.poll_now()
        await pilot.pause()
        header = app.screen.query_one(HeaderPane).plain_text
        assert " PASSED " in header and "done" in header and "100%" in header


async def test_runner_dies_without_a_record(tmp_path: Path) -> None:
    run = LiveRun(XID, tmp_path / "run")
    run.write_until(8)
    runner = FakeRunner()
    app = live_app(run.dir, runner=runner)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        runner.returncode = -9
        await app.poll_now()
        await pilot.pause()
        header = app.screen.query_one(HeaderPane).plain_text
        assert "runner ended (signal 9) without writing a record" in header
        assert str(run.dir / "runner.log") in " ".join(header.split())
        await pilot.press("q")  # nothing left to stop: q leaves at once
    assert app.return_value is not None and app.return_value.kind == "runner_died"


async def test_too_small_terminal_says_what_it_needs(tmp_path: Path) -> None:
    app = live_app(tmp_path)
    async with app.run_test(size=(50, 15)) as pilot:
        await pilot.pause()
        words = " ".join(screen_text(app).split())
        assert "soaktop needs at least 60×20; this terminal is 50×15" in words
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert "needs at least" not in screen_text(app)


async def test_snapshot_with_odd_values_does_not_crash(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    odd = {
        "seq": 0,
        "t": 1.0,
        "phase": "load",
        "load": {"window": "?", "cumulative": {"ttft_s": None}, "in_flight": "x"},
        "gates": {"before": {"json": {"passed": None}}, "canary": []},
        "thresholds": [{"state": "breached"}, "junk"],
        "telemetry": {"engines": [None, {"status": 3}], "gpus": [{"memory_used_mib": "x"}]},
        "reasons": "none",
    }
    (run_dir / "snapshots.jsonl").write_text(json.dumps(odd) + "\n")
    app = live_app(run_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        text = screen_text(app)
        assert "BREACHED" in text
        assert "load" in app.screen.query_one(HeaderPane).plain_text
