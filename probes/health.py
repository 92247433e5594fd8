"""Engine health per replica: ``GET /health`` and the changes an operator must hear about.

vLLM answers ``/health`` 200 while its engine lives, 503 once the engine is dead, and then
usually exits (connection refused). A check that times out is a hung server. Each check is
one ``HealthSample``; ``HealthTracker`` turns the stream of samples into change events
(down, a different kind of down, up again) and per-endpoint counts for the record.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from probes.neterrors import client_side

Severity = Literal["info", "error"]


@dataclass(frozen=True)
class HealthSample:
    """One ``/health`` check of one endpoint."""

    t: float
    """Monotonic seconds (the caller's clock, or ``time.perf_counter()``)."""
    ok: bool
    status: int | None
    """HTTP status; None when no answer came."""
    latency_s: float
    error: str | None = None
    """What went wrong, as a stable kind ("connection refused", "timeout", "HTTP 503"):
    two samples with the same kind are the same state."""
    detail: str | None = None
    """The exception's own words, for the record (they vary between checks)."""
    client_side: bool = False
    """The check never left this host (the client ran out of file descriptors, buffers or
    ports): the client's failure, not the server's (``probes.neterrors``)."""

    @property
    def answered(self) -> bool:
        """The server gave an HTTP answer (any status) in time: the check told something."""
        return self.status is not None


async def check_health(
    client: httpx.AsyncClient, base: str, t: float | None = None, timeout_s: float = 2.0
) -> HealthSample:
    """GET ``base/health`` once with a short timeout; a failure is a sample, never a raise.

    ``timeout_s`` overrides the client's own (a long read timeout for generations would
    hide a hung server for minutes). A check the client could not even send (out of file
    descriptors) is a sample with ``client_side`` set: not the server's failure."""
    start = time.perf_counter()
    t = start if t is None else t
    try:
        # wait_for too: httpx's timeout is per read, and a server that trickles bytes
        # would never trip it
        r = await asyncio.wait_for(
            client.get(f"{base.rstrip('/')}/health", timeout=timeout_s), timeout_s
        )
    except (httpx.TimeoutException, TimeoutError) as e:
        return HealthSample(t, False, None, time.perf_counter() - start, "timeout", _words(e))
    except (httpx.HTTPError, OSError) as e:
        # httpx lets a socket that cannot even be made (EMFILE) escape as a bare OSError
        latency = time.perf_counter() - start
        if (mine := client_side(e)) is not None:
            return HealthSample(t, False, None, latency, mine, _words(e), client_side=True)
        kind = _kind(e) if isinstance(e, httpx.HTTPError) else f"OSError {e.errno}"
        return HealthSample(t, False, None, latency, kind, _words(e))
    latency = time.perf_counter() - start
    if r.status_code == 200:
        return HealthSample(t, True, 200, latency)
    return HealthSample(t, False, r.status_code, latency, f"HTTP {r.status_code}")


def _words(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _kind(e: httpx.HTTPError) -> str:
    # httpx says "All connection attempts failed"; the reason is down the cause chain.
    seen: set[int] = set()
    cause: BaseException | None = e
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, ConnectionResetError):
            return "connection reset"
        cause = cause.__cause__ or cause.__context__
    if isinstance(e, httpx.RemoteProtocolError):
        return "connection closed"  # the server hung up without an answer
    if isinstance(e, httpx.ConnectError):
        return "connect error"
    if isinstance(e, httpx.ReadError):
        return "read error"
    return type(e).__name__


@dataclass(frozen=True)
class HealthChange:
    """An endpoint's health changed: the event to emit."""

    endpoint: int
    t: float
    ok: bool
    state: str
    """"ok" or the error kind now."""
    previous: str | None
    """The state before (None: this was the endpoint's first check)."""
    message: str
    """Words an operator can act on."""
    severity: Severity
    down_for_s: float | None = None
    """How long the outage had lasted (recovery or a change of error kind)."""


@dataclass
class _Endpoint:
    checks: int = 0
    failures: int = 0
    outages: int = 0
    down_s: float = 0.0
    """Outages that ended, summed."""
    longest_outage_s: float = 0.0
    state: str | None = None
    down_since: float | None = None
    """When the current outage began (its first failing sample's ``t``)."""
    last: HealthSample | None = None


class HealthTracker:
    """Per-endpoint health state from a stream of samples (endpoints numbered from 0)."""

    def __init__(self, n_endpoints: int) -> None:
        self._eps = [_Endpoint() for _ in range(n_endpoints)]

    def update(self, i: int, sample: HealthSample) -> HealthChange | None:
        """Take endpoint ``i``'s sample; a change event only when its state changed.

        A first sample counts as a change only when it is not ok. An outage lasts from
        its first failing sample to the first ok one, whatever kinds of failure it went
        through (503, then connection refused)."""
        ep = self._eps[i]
        ep.checks += 1
        ep.last = sample
        state = "ok" if sample.ok else (sample.error or "failed")
        if not sample.ok:
            ep.failures += 1
        prev = ep.state
        if state == prev:
            return None
        ep.state = state
        name = f"endpoint {i} /health"
        if sample.ok:
            if ep.down_since is None:  # first sample, ok: nothing to say
                return None
            down = sample.t - ep.down_since
            ep.down_since = None
            ep.down_s += down
            ep.longest_outage_s = max(ep.longest_outage_s, down)
            msg = f"{name}: ok again after {down:.1f} s down (last: {prev})"
            return HealthChange(i, sample.t, True, state, prev, msg, "info", down)
        if ep.down_since is None:  # a new outage
            ep.down_since = sample.t
            ep.outages += 1
            was = " (was ok)" if prev == "ok" else " (first check)"
            return HealthChange(i, sample.t, False, state, prev, f"{name}: {state}{was}", "error")
        # Still down, another way (503, then connection refused): the same outage.
        down = sample.t - ep.down_since
        msg = f"{name}: {state} (was {prev}; down for {down:.1f} s)"
        return HealthChange(i, sample.t, False, state, prev, msg, "error", down)

    def _current_outage(self, ep: _Endpoint) -> float:
        if ep.down_since is None or ep.last is None:
            return 0.0
        return ep.last.t - ep.down_since

    def view(self) -> list[dict[str, Any]]:
        """The live state per endpoint, for snapshots."""
        out = []
        for i, ep in enumerate(self._eps):
            last = ep.last
            out.append(
                {
                    "endpoint": i,
                    "state": ep.state,
                    "ok": ep.state == "ok" if ep.state is not None else None,
                    "status": last.status if last is not None else None,
                    "latency_s": last.latency_s if last is not None else None,
                    "down_for_s": self._current_outage(ep) if ep.down_since is not None else None,
                    "failures": ep.failures,
                }
            )
        return out

    def summary(self) -> list[dict[str, Any]]:
        """Per endpoint counts for the record; an outage still going on counts up to the
        last check."""
        out = []
        for i, ep in enumerate(self._eps):
            current = self._current_outage(ep)
            out.append(
                {
                    "endpoint": i,
                    "checks": ep.checks,
                    "failures": ep.failures,
                    "outages": ep.outages,
                    "down_s": ep.down_s + current,
                    "longest_outage_s": max(ep.longest_outage_s, current),
                    "state": ep.state,
                }
            )
        return out
