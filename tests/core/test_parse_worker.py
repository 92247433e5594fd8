"""The metrics parser process: the same samples as the in-loop parser, and a helper that
dies or hangs costs samples (recorded, with the why), never a wait."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from probes.dcgm import parse_dcgm
from probes.engine_metrics import parse_metrics, parse_page
from soak.coverage import LoadWindow
from soak.engine_watch import EngineWatch
from soak.events import EventLog
from soak.gpu_watch import GpuWatch
from soak.journal import JsonlWriter
from soak.parse_worker import ParseWorker
from tests.core.test_dcgm import DEFAULT_COUNTERS
from tests.core.test_engine_metrics import REAL, SGLANG

FIXTURES = Path(__file__).parent.parent / "fixtures"


async def test_the_helper_parses_real_pages_as_the_loop_does():
    w = ParseWorker()
    try:
        for name in ("vllm_0.32_cpu_metrics.txt", "sglang_metrics.txt", "tgi_metrics.txt"):
            text = (FIXTURES / name).read_text()
            got = await w.engine(text.encode(), 12.5)
            assert got == parse_metrics(text, 12.5), name
            assert got.engine is not None and got.error is None
        # garbage is the page's fault, worded as on the loop
        bad = b"vllm:num_requests_running{ 1\n"
        assert (await w.engine(bad, 1.0)) == parse_page(bad, 1.0)
        assert parse_page(bad, 1.0).error.startswith("unparsable /metrics: ")
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
        s = await w.engine(REAL.encode(), 1.0)
        assert s == parse_metrics(REAL, 1.0)
        assert w.restarts == 1 and w.pid not in (None, pid) and w.given_up is None
    finally:
        await w.aclose()


async def test_a_hung_helper_costs_the_page_within_the_bound_then_works_again():
    told: list[str] = []
    w = ParseWorker(stall_s=0.3, on_trouble=told.append, stuck_s=1.0)
    try:
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
        assert (await w.engine(REAL.encode(), 2.0)) == parse_metrics(REAL, 2.0)
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
    watch = GpuWatch(
        ["http://gpu:9400"],
        time.perf_counter_ns(),
        JsonlWriter(tmp_path / "telemetry.jsonl"),
        events,
        parser=ParseWorker("DCGM parser"),
    )
    await watch._client.aclose()
    watch._client = httpx.AsyncClient(transport=httpx.MockTransport(exporter))
    try:
        (s,) = await watch.scrape_all()
        assert s.error is None and s.readings == parse_dcgm(DEFAULT_COUNTERS)
    finally:
        await watch.stop()
