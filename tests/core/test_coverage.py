"""Telemetry coverage: a lost source is said, a hung one never holds the run, and the
client's own socket failures are never the server's (issue 12 §3, §7)."""

from __future__ import annotations

import asyncio
import errno
import gzip
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest

from probes.dcgm import scrape_dcgm
from probes.engine_metrics import PAGE_CAP_BYTES, EngineSample
from probes.health import check_health
from probes.neterrors import client_side
from soak.judge.coverage import (
    Coverage,
    LoadWindow,
    coverage_problems,
    coverage_reasons,
    parse_required,
)
from soak.judge.faults import fault_reasons
from soak.judge.reconcile import reconcile_window
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter
from soak.run.config import ConfigError
from soak.run.config_load import load_config
from soak.watch.engine import EngineWatch
from soak.watch.health import FaultWatch
from soak.watch.periodic import poll_timeout
from tests.core.test_engine_metrics import REAL

pytestmark = pytest.mark.timeout(30)

CLIENT = {"requests": 3, "prompt_tokens": 30, "generation_tokens": 60}


# --- the tally ---------------------------------------------------------------------------


def test_only_the_load_window_counts_and_it_expects_one_sample_an_interval():
    window = LoadWindow()
    cov = Coverage(1.0, window, ["endpoint 0"])
    cov.sample("endpoint 0", 0.5)  # before the barrier
    window.open(1.0)
    for t in (1.0, 2.0, 3.0):
        cov.sample("endpoint 0", t)
    for t in (4.0, 5.0, 6.0, 7.0):
        cov.sample("endpoint 0", t, "HTTP 404")
    window.close(11.0)
    cov.sample("endpoint 0", 11.5)  # after the drain (the after gates)
    assert cov.summary(now_s=99.0) == {
        "endpoint 0": {
            "answered": 3,
            "expected": 10,
            "share": 0.3,
            "lost": True,
            "why": "HTTP 404",
            "failures": {"HTTP 404": 4},
        }
    }


def test_nothing_is_judged_before_the_barrier_nor_live_too_early():
    window = LoadWindow()
    cov = Coverage(1.0, window, ["endpoint 0"])
    assert cov.summary(5.0) == {}  # no load window: no coverage at all
    window.open(0.0)
    cov.sample("endpoint 0", 0.0, "timed out after 0.8 s")
    early = cov.summary(3.0, min_expected=5)["endpoint 0"]
    assert early["answered"] == 0 and early["expected"] == 3 and early["lost"] is False
    assert cov.summary(6.0, min_expected=5)["endpoint 0"]["lost"] is True


def test_failure_kinds_are_bounded():
    window = LoadWindow()
    window.open(0.0)
    cov = Coverage(1.0, window, ["endpoint 0"])
    for i in range(20):
        cov.sample("endpoint 0", float(i), f"unparsable /metrics: line {i}")
    failures = cov.summary(20.0)["endpoint 0"]["failures"]
    assert len(failures) == 7 and failures["other"] == 14


# --- reasons and the option ---------------------------------------------------------------


def _lost(source: str, key: str, why: str) -> dict[str, Any]:
    entry = {"answered": 1, "expected": 10, "share": 0.1, "lost": True, "why": why}
    return {source: {key: entry}, "host": {"host": {"lost": False}}}


def test_a_lost_source_is_a_note_and_a_failure_once_required():
    telemetry = {"coverage": _lost("engine_metrics", "endpoint 1", "HTTP 404")}
    (note,) = coverage_reasons(telemetry)
    assert (note.code, note.effect) == ("telemetry_lost", "note")
    assert note.message == (
        "engine /metrics of endpoint 1 answered 1 of 10 expected samples during the load "
        "(10%; HTTP 404): its telemetry was lost"
    )
    (failed,) = coverage_reasons(telemetry, ["engine"])
    assert failed.effect == "failed" and failed.message.endswith(
        "; required (--require-telemetry engine)"
    )
    # a required kind whose sources all answered says nothing
    assert coverage_reasons({"coverage": {"host": {"host": {"lost": False}}}}, ["host"]) == []


def test_required_gpu_telemetry_with_no_gpu_reading_fails():
    telemetry = {
        "coverage": {"host": {"host": {"lost": False}}},
        "gpu_sources": [{"source": "nvml", "status": "unavailable", "reason": "no driver"}],
    }
    assert coverage_reasons(telemetry) == []  # not required: NVML said "unavailable" once
    (r,) = coverage_reasons(telemetry, ["gpu"])
    assert (r.code, r.effect) == ("telemetry_missing", "failed") and "nvml: no driver" in r.message


BASE = {"endpoints": ["http://127.0.0.1:8000"], "model": "m", "gates": [], "nvml": False}


def test_require_telemetry_names_are_checked_with_a_sentence():
    cfg = load_config({**BASE, "require_telemetry": "Engine, health,engine"})
    assert cfg.require_telemetry == ["engine", "health"]
    with pytest.raises(ConfigError) as e:
        load_config({**BASE, "require_telemetry": "engine,gpus"})
    assert "'gpus' is not a telemetry source; allowed: engine, gpu, health, log, host" in str(
        e.value
    )
    with pytest.raises(ConfigError, match="require_telemetry names gpu but no GPU source"):
        load_config({**BASE, "require_telemetry": "gpu"})
    with pytest.raises(ConfigError, match="require_telemetry names log but no server log"):
        load_config({**BASE, "require_telemetry": ["log"]})
    assert load_config(BASE, environ={"SOAKTOP_REQUIRE_TELEMETRY": "host"}).require_telemetry == [
        "host"
    ]
    with pytest.raises(ValueError, match="allowed: engine"):
        parse_required(["disk"])


# --- engine /metrics ---------------------------------------------------------------------


async def _hang(request: httpx.Request) -> httpx.Response:
    await asyncio.sleep(60)
    return httpx.Response(200)


# what httpx.MockTransport takes: a plain or an async function of the request
Handler = (
    Callable[[httpx.Request], httpx.Response]
    | Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]
)


async def _engine_watch(tmp_path: Path, handler: Handler, interval_s: float = 0.25) -> EngineWatch:
    window = LoadWindow()
    window.open(0.0)
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), time.perf_counter_ns())
    watch = EngineWatch(
        ["http://x"],
        {},
        time.perf_counter_ns(),
        JsonlWriter(tmp_path / "telemetry.jsonl"),
        interval_s=interval_s,
        events=events,
        window=window,
    )
    await watch._client.aclose()
    watch._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return watch


async def test_a_hung_metrics_costs_a_sample_never_a_wait(tmp_path):
    watch = await _engine_watch(tmp_path, _hang)
    assert watch.timeout_s == poll_timeout(0.25) == 0.2
    t0 = time.monotonic()
    (s,) = await watch.tick()
    # the handler hangs for 60 s; 2 s is room for a busy CI box, not for a wait on it
    assert time.monotonic() - t0 < 2.0 and s.error == "timed out after 0.2 s"
    # The runner's end-of-drain counters: bounded, and a timing-out endpoint is not retried
    # (a retry would cost the 2 s pause before it: well past the 1.5 s asserted)
    t0 = time.monotonic()
    (settled,) = await watch.settled_counters(pause_s=2.0)
    assert time.monotonic() - t0 < 1.5 and settled.error == "timed out after 0.2 s"
    # stop() cancels a scrape in flight instead of waiting for it
    watch.start()
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    await watch.stop()
    assert time.monotonic() - t0 < 2.0
    entry = watch.coverage(watch.interval_s * 8)["engine_metrics"]["endpoint 0"]
    assert entry["answered"] == 0 and entry["lost"] is True
    assert entry["why"] == "timed out after 0.2 s"


@pytest.mark.parametrize(
    ("status", "text", "why"),
    [
        (404, "nope", "HTTP 404"),
        (200, "garbage {{{", "unparsable /metrics: could not convert string to float: '{{{'"),
        (200, "# no metrics\nup 1\n", "no engine metrics recognised"),
    ],
)
async def test_metrics_that_give_nothing_usable_are_not_answered(tmp_path, status, text, why):
    answers = [httpx.Response(status, text=text), httpx.Response(200, text=REAL)]
    watch = await _engine_watch(tmp_path, lambda request: answers.pop(0), interval_s=1.0)
    await watch.tick()
    await watch.tick()
    entry = watch.coverage(2.0)["engine_metrics"]["endpoint 0"]
    assert (entry["answered"], entry["why"]) == (1, why)
    assert watch._events is not None
    messages = [e.message for e in watch._events.take_pending()]
    assert messages == [
        f"engine telemetry: endpoint 0 /metrics gives no usable sample: {why}",
        "engine telemetry: endpoint 0 /metrics answers again",
    ]
    await watch.stop()


async def test_a_huge_or_bombed_metrics_page_is_a_lost_sample_never_read_whole(tmp_path):
    huge = b"x" * (PAGE_CAP_BYTES + 1)
    bomb = gzip.compress(b"0" * (64 * 1024 * 1024), compresslevel=1)  # 64 MiB in ~64 KB
    answers = [
        httpx.Response(200, stream=httpx.ByteStream(huge)),
        httpx.Response(200, stream=httpx.ByteStream(bomb), headers={"Content-Encoding": "gzip"}),
        httpx.Response(200, content=b"x", headers={"Content-Encoding": "br"}),
        httpx.Response(
            200,
            stream=httpx.ByteStream(gzip.compress(REAL.encode())),
            headers={"Content-Encoding": "gzip"},
        ),
        httpx.Response(200, text=REAL),
    ]
    asked: list[str | None] = []

    def metrics(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("accept-encoding"))
        return answers.pop(0)

    watch = await _engine_watch(tmp_path, metrics, interval_s=1.0)
    try:
        got = [(await watch.tick())[0] for _ in range(5)]
    finally:
        await watch.stop()
    assert asked == ["identity"] * 5  # a real exporter then sends the page as it is
    assert got[0].error == got[1].error == "a /metrics page over 8 MiB: not parsed"
    assert got[2].error == (
        "a /metrics page in Content-Encoding 'br': not parsed (allowed: identity, gzip, deflate)"
    )
    # a server that gzips anyway is read within the same cap, and a real page still parses
    assert got[3].error is None and got[3].engine == "vllm"
    assert got[4].values == got[3].values
    entry = watch.coverage(5.0)["engine_metrics"]["endpoint 0"]
    assert entry["answered"] == 2 and entry["why"] == got[0].error  # the commonest why


async def test_a_huge_dcgm_page_is_a_sample_error(tmp_path):
    def exporter(request: httpx.Request) -> httpx.Response:
        assert request.headers["accept-encoding"] == "identity"
        page = b"DCGM_FI_DEV_GPU_TEMP 1\n" * 400_000
        return httpx.Response(200, stream=httpx.ByteStream(page))  # 9.2 MB

    async with httpx.AsyncClient(transport=httpx.MockTransport(exporter)) as client:
        s = await scrape_dcgm(client, "http://gpu:9400")
    assert s.error == "a /metrics page over 8 MiB: not parsed" and s.readings == []


def _sample(error: str | None = None) -> EngineSample:
    values: dict[str, float | None] = {
        "requests_finished_total": 3.0,
        "prompt_tokens_total": 30.0,
        "generation_tokens_total": 60.0,
    }
    if error is not None:
        return EngineSample(0.0, None, {}, error=error)
    return EngineSample(0.0, "vllm", values)


def test_lost_metrics_make_the_reconciliation_unavailable_with_why_never_mismatched():
    rec = reconcile_window([_sample("HTTP 404")], [_sample("timed out after 2 s")], CLIENT, "load")
    assert rec["matched"] is None and rec["requests"]["status"] == "unavailable"
    assert rec["errors"] == {
        "endpoint 0 start": "HTTP 404",
        "endpoint 0 end": "timed out after 2 s",
    }


# --- /health and the server log ----------------------------------------------------------


async def _fault_watch(
    tmp_path: Path, handler: Handler, clock: list[float], **kw: Any
) -> FaultWatch:
    window = LoadWindow()
    window.open(0.0)
    events = EventLog(JsonlWriter(tmp_path / "events.jsonl"), time.perf_counter_ns())
    watch = FaultWatch(["http://x"], {}, events, lambda: clock[0], window=window, **kw)
    await watch._client.aclose()
    watch._client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return watch


def _emfile(request: httpx.Request) -> httpx.Response:
    raise OSError(errno.EMFILE, "Too many open files")


async def test_a_health_check_the_client_could_not_send_is_the_clients_failure(tmp_path):
    clock = [0.0]
    watch = await _fault_watch(tmp_path, _emfile, clock)
    for t in range(4):
        clock[0] = float(t)
        await watch.check_health()
    summary = watch.summary()
    (h,) = summary["health"]
    kind = "client-side: too many open files (EMFILE)"
    assert h["failures"] == 0 and h["outages"] == 0 and h["client_errors"] == {kind: 4}
    assert not [e for e in watch.events.take_pending() if e.kind == "health"]  # no outage
    (note,) = fault_reasons(summary)
    assert (note.code, note.effect) == ("health_client_error", "note")
    assert "soaktop could not send 4 checks" in note.message and "ulimit -n" in note.message
    for t in range(4, 12):  # sustained: the client's measurements cannot be trusted
        clock[0] = float(t)
        await watch.check_health()
    (invalid,) = fault_reasons(watch.summary(), client_overload_s=10.0)
    assert invalid.effect == "invalid" and "for 11 s (limit 10 s)" in invalid.message
    entry = watch.coverage(12.0)["health"]["endpoint 0"]
    assert entry["answered"] == 0 and entry["why"] == kind
    await watch.stop()


async def test_a_health_route_that_is_not_served_is_lost_telemetry_not_an_outage(tmp_path):
    clock = [0.0]
    watch = await _fault_watch(tmp_path, lambda request: httpx.Response(404), clock)
    for t in range(3):
        clock[0] = float(t)
        await watch.check_health()
    summary = watch.summary()
    assert fault_reasons(summary) == [] and summary["health"][0]["not_served"] == "HTTP 404"
    (warning,) = watch.events.take_pending()
    assert "endpoint 0 /health answers HTTP 404: not served there" in warning.message
    entry = watch.coverage(3.0)["health"]["endpoint 0"]
    assert entry["why"] == "HTTP 404: /health not served" and entry["lost"] is True
    await watch.stop()


async def test_a_hung_health_is_a_timeout_within_the_interval_and_stop_is_bounded(tmp_path):
    clock = [0.0]
    watch = await _fault_watch(tmp_path, _hang, clock, interval_s=0.25)
    t0 = time.monotonic()
    await watch.check_health()
    assert time.monotonic() - t0 < 0.6
    await watch.start()
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    await watch.stop()  # its last round is bounded by the same timeout
    assert time.monotonic() - t0 < 1.0
    (h,) = watch.summary()["health"]
    assert h["failures_by_kind"] == {"timeout": h["failures"]} and h["failures"] >= 2


async def test_a_missing_log_is_lost_and_a_silent_one_is_not(tmp_path):
    clock = [0.0]
    quiet, missing = tmp_path / "quiet.log", tmp_path / "missing.log"
    quiet.write_text("")
    watch = await _fault_watch(
        tmp_path, lambda r: httpx.Response(200), clock, log_files=[quiet, missing]
    )
    for t in range(4):
        clock[0] = float(t)
        watch.poll_logs()
    cov = watch.coverage(4.0)["server_log"]
    assert cov["server log 0"] | {"lines_read": 0} == cov["server log 0"]
    assert cov["server log 0"]["answered"] == 4 and cov["server log 0"]["lost"] is False
    assert cov["server log 1"]["answered"] == 0 and cov["server log 1"]["lost"] is True
    assert cov["server log 1"]["why"] == "file not readable: No such file or directory"
    assert str(tmp_path) not in str(cov)  # the OS's words, never the path
    await watch.stop()


# --- the probes themselves ---------------------------------------------------------------


async def test_check_health_classifies_a_bare_emfile_as_client_side():
    async with httpx.AsyncClient(transport=httpx.MockTransport(_emfile)) as client:
        s = await check_health(client, "http://x", t=1.0)
    assert (
        s.client_side
        and not s.answered
        and s.error == ("client-side: too many open files (EMFILE)")
    )

    def refused(request: httpx.Request) -> httpx.Response:
        raise OSError(errno.ECONNREFUSED, "refused")

    async with httpx.AsyncClient(transport=httpx.MockTransport(refused)) as client:
        s = await check_health(client, "http://x", t=1.0)
    assert not s.client_side and s.error == f"OSError {errno.ECONNREFUSED}"  # the server's


def test_client_side_looks_through_httpx_wrappers_and_exception_groups():
    inner = OSError(errno.ENFILE, "Too many open files in system")
    try:
        try:
            raise OSError("All connection attempts failed") from ExceptionGroup("x", [inner])
        except OSError as e:
            raise httpx.ConnectError("All connection attempts failed") from e
    except httpx.ConnectError as wrapped:
        assert client_side(wrapped) == "client-side: too many open files in the system (ENFILE)"
    assert client_side(httpx.ConnectError("refused")) is None


def test_verify_catches_a_coverage_entry_that_hides_a_lost_source():
    honest = {"answered": 1, "expected": 10, "share": 0.1, "lost": True, "why": "HTTP 404"}
    assert coverage_problems({"coverage": {"engine_metrics": {"endpoint 0": honest}}}) == []
    hidden = honest | {"lost": False}
    assert coverage_problems({"coverage": {"engine_metrics": {"endpoint 0": hidden}}}) == [
        "telemetry.coverage.engine_metrics.endpoint 0: not lost, but 1 of 10 answered"
    ]
    inflated = honest | {"share": 0.9}
    (problem,) = coverage_problems({"coverage": {"health": {"endpoint 0": inflated}}})
    assert "share 0.9 is not 1/10" in problem
