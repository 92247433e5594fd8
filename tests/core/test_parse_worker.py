"""The metrics parser process: the same samples as the in-loop parser, and a helper that
dies or hangs costs samples (recorded, with the why), never a wait."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

from probes.dcgm import parse_dcgm
from probes.engine_metrics import parse_metrics, parse_page
from soak.judge.coverage import LoadWindow
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter
from soak.watch import parse_worker
from soak.watch.engine import EngineWatch
from soak.watch.gpu.dcgm import DcgmWatch
from soak.watch.parse_worker import ParseWorker
from tests.core.test_dcgm import DEFAULT_COUNTERS
from tests.core.test_engine_metrics import REAL, SGLANG

FIXTURES = Path(__file__).parent.parent / "fixtures"


async def test_the_helper_parses_real_pages_as_the_loop_does():
    w = ParseWorker()
    try:
        assert await w.ready()  # the watch's prestart, long before its first page
        for name in ("vllm_0.32_cpu_metrics.txt", "sglang_metrics.txt", "tgi_metrics.txt"):
            text = (FIXTURES / name).read_text()
            got = await w.engine(text.encode(), 12.5)
            assert got == parse_metrics(text, 12.5), name
            assert got.engine is not None and got.error is None
        # garbage is the page's fault, worded as on the loop
        bad = b"vllm:num_requests_running{ 1\n"
        assert (await w.engine(bad, 1.0)) == parse_page(bad, 1.0)
        assert (parse_page(bad, 1.0).error or "").startswith("unparsable /metrics: ")
        assert await w.dcgm(DEFAULT_COUNTERS.encode()) == parse_dcgm(DEFAULT_COUNTERS)
        with pytest.raises(ValueError, match="unparsable /metrics"):
            await w.dcgm(b"DCGM_FI_DEV_GPU_TEMP{gpu= 1\n")
        # many pages at once come back each to its caller
        texts = [REAL, SGLANG] * 8
        got_all = await asyncio.gather(*(w.engine(t.encode(), i) for i, t in enumerate(texts)))
        assert got_all == [parse_metrics(t, i) for i, t in enumerate(texts)]
        assert w.restarts == 0 and w.troubles == []
    finally:
        await w.aclose()


async def test_a_killed_helper_is_recorded_and_replaced():
    told: list[str] = []
    w = ParseWorker(on_trouble=told.append)
    try:
        assert (await w.engine(REAL.encode(), 0.0)).engine == "vllm"
        pid = w.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        for _ in range(250):  # the reader sees the pipe close within a few ms
            if told:
                break
            await asyncio.sleep(0.02)
        assert told and told[0].startswith("the metrics parser process died")
        assert "a new one starts for the next page" in told[0]
        assert await w.ready()  # the successor started at once, in the background
        s = await w.engine(REAL.encode(), 1.0)
        assert s == parse_metrics(REAL, 1.0)
        assert w.restarts == 1 and w.pid not in (None, pid) and w.given_up is None
    finally:
        await w.aclose()


async def test_a_hung_helper_costs_the_page_within_the_bound_then_works_again():
    told: list[str] = []
    w = ParseWorker(stall_s=0.3, on_trouble=told.append, stuck_s=1.0)
    try:
        assert await w.ready()
        await w.engine(REAL.encode(), 0.0)
        pid = w.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # alive, holds its pipe, never answers
        t0 = time.monotonic()
        stuck = await asyncio.gather(*(w.engine(REAL.encode(), 1.0) for _ in range(3)))
        assert time.monotonic() - t0 < 1.0
        for s in stuck:  # each page is lost within its bound; a slow helper is not killed
            assert s.engine is None and s.error is not None
            assert s.error.startswith("the metrics parser process gave no answer within 0.3 s")
        assert told == [] and w.pid == pid
        await asyncio.sleep(1.1)  # silent for longer than stuck_s while holding work
        t0 = time.monotonic()
        first = await w.engine(REAL.encode(), 2.0)  # kills it; waits for the new one ≤ 0.3 s
        assert time.monotonic() - t0 < 2.0
        # The page is parsed by the new helper, or lost within the bound: the new one not
        # ready in time, or (a loaded machine, its first parse cold) its answer late.
        assert first == parse_metrics(REAL, 2.0) or (first.error or "").startswith(
            (
                "the metrics parser process is starting (not ready within 0.3 s): "
                "this sample is lost",
                "the metrics parser process gave no answer within 0.3 s",
            )
        )
        assert await w.ready()
        assert (await w.engine(REAL.encode(), 3.0)) == parse_metrics(REAL, 3.0)
        assert w.restarts == 1 and w.pid != pid
        assert len(told) == 1 and "answered nothing for 1 s" in told[0]  # one helper lost
    finally:
        await w.aclose()
    with pytest.raises(ProcessLookupError):  # the stuck one was killed, not left behind
        for _ in range(50):
            os.kill(pid, 0)
            await asyncio.sleep(0.02)


async def test_a_parser_lost_too_often_is_given_up_and_a_soaktop_failure(tmp_path):
    async def metrics(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=REAL)

    window = LoadWindow()
    window.open(0.0)
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), time.perf_counter_ns())
    watch = EngineWatch(
        ["http://x"],
        {},
        time.perf_counter_ns(),
        JsonlWriter(tmp_path / "telemetry.jsonl"),
        interval_s=0.5,
        events=events,
        window=window,
        parser=ParseWorker(max_restarts=0),
    )
    await watch._client.aclose()
    watch._client = httpx.AsyncClient(transport=httpx.MockTransport(metrics))
    try:
        assert watch.parser is not None and watch.parser.stall_s == 0.1  # 0.5 s - 0.4 s
        assert await watch.parser.ready()  # start() would have begun it long before
        (s,) = await watch.tick()
        assert s == parse_metrics(REAL, s.t)  # parsed in the helper, as on the loop
        assert watch.parser.pid is not None
        os.kill(watch.parser.pid, signal.SIGKILL)
        await asyncio.sleep(0.3)
        (lost,) = await watch.tick()
        assert lost.error is not None and "no page is parsed for the rest of the run" in lost.error
        assert watch.loop_errors == [f"engine watch: {watch.parser.given_up}"]
        entry = watch.coverage(1.0)["engine_metrics"]["endpoint 0"]
        assert entry["answered"] == 1 and entry["why"] == lost.error
        warned = [e.message for e in events.take_pending() if e.kind == "warning"]
        assert warned[0].startswith("engine telemetry: the metrics parser process died")
        assert any("no page is parsed" in m for m in warned)
    finally:
        t0 = time.monotonic()
        await watch.stop()
        assert time.monotonic() - t0 < 1.0


async def test_stop_ends_a_stuck_helper_within_its_bound(tmp_path):
    w = ParseWorker()
    assert await w.ready()
    await w.engine(REAL.encode(), 0.0)
    pid = w.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # it cannot read the end-of-file
    t0 = time.monotonic()
    await w.aclose()
    assert time.monotonic() - t0 < 2.5
    assert (await w.engine(REAL.encode(), 1.0)).error == "the metrics parser is closed"


async def test_dcgm_pages_go_through_the_helper_too(tmp_path):
    async def exporter(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=DEFAULT_COUNTERS)

    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), time.perf_counter_ns())
    watch = DcgmWatch(
        ["http://gpu:9400"],
        time.perf_counter_ns(),
        JsonlWriter(tmp_path / "telemetry.jsonl"),
        events,
        parser=ParseWorker("DCGM parser"),
    )
    await watch._client.aclose()
    watch._client = httpx.AsyncClient(transport=httpx.MockTransport(exporter))
    try:
        assert watch.parser is not None and await watch.parser.ready()
        (s,) = await watch.scrape_all()
        assert s.error is None and s.readings == parse_dcgm(DEFAULT_COUNTERS)
    finally:
        await watch.stop()


# -- the start: in the background, and never a wait longer than a page's bound ----------


def _never_ready(monkeypatch: pytest.MonkeyPatch, pids: Path) -> None:
    """Helpers that start, note their PID and never say they are ready."""
    script = (
        "import os, sys, time; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n'); time.sleep(60)"
    )
    monkeypatch.setattr(parse_worker, "HELPER_ARGV", (sys.executable, "-c", script, str(pids)))


def _read_pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


async def _pids(path: Path, n: int) -> list[int]:
    for _ in range(500):
        if len(got := _read_pids(path)) >= n:
            return got
        await asyncio.sleep(0.02)
    raise AssertionError(f"{n} helper(s) never started")


async def _gone(pid: int) -> bool:
    for _ in range(250):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_page_waits_for_a_starting_helper_only_within_its_bound(monkeypatch, tmp_path):
    _never_ready(monkeypatch, tmp_path / "pids")
    w = ParseWorker(stall_s=0.2)
    w.prestart()  # the watch's start()
    try:
        t0 = time.monotonic()
        pages = await asyncio.gather(*(w.engine(REAL.encode(), 1.0) for _ in range(3)))
        assert time.monotonic() - t0 < 2.0  # not START_TIMEOUT_S (10 s)
        for s in pages:
            assert s.engine is None and s.error == (
                "the metrics parser process is starting (not ready within 0.2 s): "
                "this sample is lost"
            )
        # a page cancelled while it waits (a stop of its scrape) leaves the start running
        page = asyncio.ensure_future(w.engine(REAL.encode(), 2.0))
        await asyncio.sleep(0.05)
        page.cancel()
        await asyncio.gather(page, return_exceptions=True)
        (pid,) = await _pids(tmp_path / "pids", 1)  # one start for all those pages
        assert w._spawning is not None and not w._spawning.done()
    finally:
        t0 = time.monotonic()
        await w.aclose()  # cancels the start in progress: its process is killed
        assert time.monotonic() - t0 < 2.0
    assert w._spawning is None and await _gone(pid)
    assert (await w.engine(REAL.encode(), 3.0)).error == "the metrics parser is closed"


async def test_a_helper_that_does_not_start_is_retried_then_given_up(monkeypatch, tmp_path):
    _never_ready(monkeypatch, tmp_path / "pids")
    monkeypatch.setattr(parse_worker, "START_TIMEOUT_S", 0.3)
    told: list[str] = []
    w = ParseWorker(stall_s=0.1, on_trouble=told.append, max_restarts=1)
    try:
        assert not await w.ready()  # the first start fails: retried at the next page
        assert told == [
            "the metrics parser process did not say it was ready within 0.3 s (it was "
            "killed); a new one starts for the next page"
        ]
        assert w.given_up is None and w.restarts == 0
        lost = await w.engine(REAL.encode(), 1.0)  # starts the second, which fails too
        assert lost.error is not None and "is starting" in lost.error
        assert not await w.ready(5.0) and w.restarts == 1 and len(told) == 2
        given_up = await w.engine(REAL.encode(), 2.0)
        assert given_up.error == w.given_up and w.given_up is not None
        assert "lost 2 time(s)" in w.given_up and "no page is parsed" in w.given_up
    finally:
        await w.aclose()
    for pid in await _pids(tmp_path / "pids", 2):  # each failed start's process was killed
        assert await _gone(pid)


async def test_the_watches_start_their_helper_when_they_start(tmp_path):
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), time.perf_counter_ns())
    telemetry = JsonlWriter(tmp_path / "telemetry.jsonl")
    engines = EngineWatch(["http://x"], {}, time.perf_counter_ns(), telemetry, parser=ParseWorker())
    gpus = DcgmWatch(
        ["http://gpu:9400"],
        time.perf_counter_ns(),
        telemetry,
        events,
        parser=ParseWorker("DCGM parser"),
    )
    for watch in (engines, gpus):
        assert watch.parser is not None and watch.parser.pid is None
        watch.start()
        assert watch.parser._spawning is not None  # begun before any page is fetched
    try:
        for watch in (engines, gpus):
            assert watch.parser is not None and await watch.parser.ready()
    finally:
        await engines.stop()
        await gpus.stop()


async def test_a_counter_snapshot_waits_for_a_helper_that_is_still_starting(tmp_path):
    """The reconciliation's edges (scrape_all without a bound) must not lose their page
    because the helper was not up yet; the periodic tick may."""

    async def metrics(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=REAL)

    watch = EngineWatch(
        ["http://x"],
        {},
        time.perf_counter_ns(),
        JsonlWriter(tmp_path / "telemetry.jsonl"),
        interval_s=1.0,
        parser=ParseWorker(),
    )
    await watch._client.aclose()
    watch._client = httpx.AsyncClient(transport=httpx.MockTransport(metrics))
    try:
        assert watch.parser is not None and watch.parser.pid is None  # nothing started yet
        (s,) = await watch.scrape_all()
        assert s.error is None and s == parse_metrics(REAL, s.t)
    finally:
        await watch.stop()
