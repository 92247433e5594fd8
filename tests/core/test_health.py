"""Engine /health checks against a real loopback server, and the tracker's change events."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web

from probes.health import HealthChange, HealthSample, HealthTracker, check_health

pytestmark = pytest.mark.timeout(30)

TIMEOUT_S = 0.3


class Engine:
    """A /health endpoint that answers 200, 503, too slowly, or not at all (stopped)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.release = asyncio.Event()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._runner: web.AppRunner | None = None

    async def _health(self, request: web.Request) -> web.Response:
        if self.mode == "503":
            return web.Response(status=503)
        if self.mode == "slow":
            await self.release.wait()  # longer than the check's timeout
        return web.Response()

    async def start(self) -> None:
        self.release = asyncio.Event()
        app = web.Application()
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


@pytest.fixture
async def engine() -> AsyncIterator[Engine]:
    eng = Engine()
    await eng.start()
    yield eng
    await eng.stop()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    # No keep-alive: each check opens its own connection, as a stopped server needs.
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as c:
        yield c


async def test_ok(engine: Engine, client: httpx.AsyncClient) -> None:
    s = await check_health(client, engine.base + "/", t=12.5, timeout_s=TIMEOUT_S)
    assert (s.ok, s.status, s.error, s.t) == (True, 200, None, 12.5)
    assert 0 <= s.latency_s < TIMEOUT_S


async def test_503(engine: Engine, client: httpx.AsyncClient) -> None:
    engine.mode = "503"
    s = await check_health(client, engine.base, timeout_s=TIMEOUT_S)
    assert (s.ok, s.status, s.error) == (False, 503, "HTTP 503")


async def test_slow_is_a_timeout_despite_the_clients_long_timeout(
    engine: Engine, client: httpx.AsyncClient
) -> None:
    engine.mode = "slow"
    s = await check_health(client, engine.base, timeout_s=TIMEOUT_S)
    assert (s.ok, s.status, s.error) == (False, None, "timeout")
    assert TIMEOUT_S <= s.latency_s < 5 * TIMEOUT_S
    assert s.detail is not None and "Timeout" in s.detail


async def test_stopped_is_connection_refused(engine: Engine, client: httpx.AsyncClient) -> None:
    await engine.stop()
    s = await check_health(client, engine.base, timeout_s=TIMEOUT_S)
    assert (s.ok, s.status, s.error) == (False, None, "connection refused")


async def test_engine_dies_and_comes_back(engine: Engine, client: httpx.AsyncClient) -> None:
    """vLLM's way to die: 503, then the port closes; a restart brings it back."""
    tracker = HealthTracker(2)
    changes: list[HealthChange] = []
    t = 0.0

    async def check(mode: str | None = None) -> None:
        nonlocal t
        if mode is not None:
            engine.mode = mode
        t += 1.0
        change = tracker.update(1, await check_health(client, engine.base, t, TIMEOUT_S))
        if change is not None:
            changes.append(change)

    await check("ok")
    await check("ok")
    assert changes == []  # a healthy start says nothing
    await check("503")
    await check("503")
    await engine.stop()
    await check()
    await check()
    await engine.start()
    await check("slow")
    engine.release.set()
    engine.mode = "ok"
    await check()
    await check()
    assert [c.message for c in changes] == [
        "endpoint 1 /health: HTTP 503 (was ok)",
        "endpoint 1 /health: connection refused (was HTTP 503; down for 2.0 s)",
        "endpoint 1 /health: timeout (was connection refused; down for 4.0 s)",
        "endpoint 1 /health: ok again after 5.0 s down (last: timeout)",
    ]
    assert [c.severity for c in changes] == ["error", "error", "error", "info"]
    assert changes[-1].ok and changes[-1].down_for_s == 5.0
    summary = tracker.summary()
    assert summary[0] == {
        "endpoint": 0,
        "checks": 0,
        "failures": 0,
        "outages": 0,
        "down_s": 0.0,
        "longest_outage_s": 0.0,
        "state": None,
    }
    assert summary[1] == {
        "endpoint": 1,
        "checks": 9,
        "failures": 5,
        "outages": 1,
        "down_s": 5.0,
        "longest_outage_s": 5.0,
        "state": "ok",
    }


# --- the tracker alone (injected samples) --------------------------------------------------


def ok(t: float) -> HealthSample:
    return HealthSample(t=t, ok=True, status=200, latency_s=0.01)


def down(t: float, error: str = "connection refused", status: int | None = None) -> HealthSample:
    return HealthSample(t=t, ok=False, status=status, latency_s=0.01, error=error)


def test_first_sample_is_a_change_only_when_down() -> None:
    tracker = HealthTracker(2)
    assert tracker.update(0, ok(1.0)) is None
    change = tracker.update(1, down(1.0))
    assert change is not None
    assert change.message == "endpoint 1 /health: connection refused (first check)"
    assert (change.previous, change.state, change.severity) == (None, "connection refused", "error")


def test_repeats_are_not_changes_and_outages_are_counted() -> None:
    tracker = HealthTracker(1)
    events = [tracker.update(0, s) for s in (ok(0), down(1), down(2), ok(3.5), ok(4))]
    assert [e is not None for e in events] == [False, True, False, True, False]
    events = [tracker.update(0, s) for s in (down(10, "HTTP 503", 503), down(11, "HTTP 503", 503))]
    assert events[0] is not None and events[1] is None
    view = tracker.view()[0]
    assert view["state"] == "HTTP 503" and view["ok"] is False and view["status"] == 503
    assert view["down_for_s"] == 1.0 and view["failures"] == 4
    s = tracker.summary()[0]
    # the outage still going on counts up to the last check
    assert (s["outages"], s["down_s"], s["longest_outage_s"]) == (2, 3.5, 2.5)
    assert s["checks"] == 7 and s["failures"] == 4


def test_view_before_any_check() -> None:
    assert HealthTracker(1).view() == [
        {
            "endpoint": 0,
            "state": None,
            "ok": None,
            "status": None,
            "latency_s": None,
            "down_for_s": None,
            "failures": 0,
        }
    ]
