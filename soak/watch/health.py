"""Watches the servers for faults during the whole run: /health and the server logs.

One task, once an interval: a ``/health`` check of every endpoint (a change of state is a
``health`` event: "endpoint 1 /health: connection refused (was ok)") and a poll of every
followed server log (each classified fault line is a ``fault`` event with the replica,
the time and the line itself). One crash writes several fault lines (the fatal error, a
traceback, the exception, "died unexpectedly"); each kind is reported per replica up to
``FAULT_EVENTS_PER_KIND`` times, the rest only counted.

The record gets per-endpoint health (checks, failures, outages, longest outage) and per
replica fault counts with the first line of each kind; the verdict fails a run with a
critical fault line or a /health outage.

Every endpoint is checked at once, each check cut after ``soak.watch.periodic.poll_timeout``
(shorter than the interval): a hung ``/health`` is a timeout a round, never a wait. Two
answers are not the server's health: a ``/health`` the server does not serve (HTTP 404 or
405: nothing is watched there, one warning says so) and a check the client could not even
send (out of file descriptors: ``client_errors``, the client's own failure — a note, and
INVALID when it lasted ``client_overload_s``). Both, like timeouts, count against the
endpoint's health coverage (``soak.judge.coverage``); each log poll counts toward its log's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loadgen.tls import verify
from probes.health import HealthSample, HealthTracker, check_health
from probes.server_log import CommandFollower, LogFault, LogFollower, classify
from soak.judge.coverage import Coverage, LoadWindow
from soak.record.events import EventLog
from soak.watch.periodic import every, poll_timeout

FAULT_EVENTS_PER_KIND = 5
UNSERVED = (404, 405)
"""/health statuses that say "no such route", not "unhealthy"."""


@dataclass
class _LogSource:
    label: str
    """``endpoint 1 log`` or the command's name."""
    replica: int | None
    file: LogFollower | None = None
    command: CommandFollower | None = None
    faults: dict[str, int] = field(default_factory=dict)
    first: dict[str, dict[str, Any]] = field(default_factory=dict)
    lines: int = 0
    ended_reported: bool = False

    def poll(self) -> list[str]:
        if self.file is not None:
            return self.file.poll()
        assert self.command is not None
        return self.command.poll()

    def why_not_following(self) -> str | None:
        """None while the log is being read; else why not (a missing or unreadable file,
        a log command that ended)."""
        if self.file is not None:
            if self.file.following:
                return None
            return f"file not readable: {self.file.error or 'not there'}"
        assert self.command is not None
        if self.command.ended:
            return self.command.exit_message or "log command ended"
        return None


@dataclass
class _ClientErrors:
    """/health checks the client could not send, per endpoint: counts and streaks."""

    kinds: dict[str, int] = field(default_factory=dict)
    since: float | None = None
    longest_s: float = 0.0

    def update(self, sample: HealthSample) -> None:
        if not sample.client_side:
            self.since = None
            return
        kind = sample.error or "client-side"
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if self.since is None:
            self.since = sample.t
        self.longest_s = max(self.longest_s, sample.t - self.since)


class FaultWatch:
    """/health of every endpoint and the classified lines of every server log."""

    def __init__(
        self,
        endpoints: list[str],
        headers: dict[str, str],
        events: EventLog,
        now_s: Callable[[], float],
        interval_s: float = 1.0,
        log_files: list[Path] | None = None,
        log_commands: list[list[str]] | None = None,
        keep_lines: bool = True,
        scrub: Callable[[str], str] = lambda s: s,
        window: LoadWindow | None = None,
    ) -> None:
        self._scrub = scrub
        """Secrets (always) and endpoint names (--redact) out of summaries and lines."""
        self.loop_errors: list[str] = []
        self.endpoints = endpoints
        self.keep_lines = keep_lines
        """False with --redact: a log line may hold paths and hostnames that cannot all be
        recognised, so only the classified summary is written."""
        self.events = events
        self.now_s = now_s
        self.interval_s = interval_s
        self.health = HealthTracker(len(endpoints))
        self.health_errors: list[dict[str, int]] = [{} for _ in endpoints]
        """Failed /health checks per endpoint by kind (HTTP 503, connection refused, ...)."""
        self.client_errors = [_ClientErrors() for _ in endpoints]
        """Checks the client could not send (not the server's failures)."""
        self.unserved: list[int | None] = [None] * len(endpoints)
        """The HTTP status of an endpoint that does not serve /health (None: it does)."""
        self.timeout_s = poll_timeout(interval_s)
        """Bound of one /health check (shorter than the interval)."""
        window = window or LoadWindow()
        self.health_cover = Coverage(
            interval_s, window, [f"endpoint {i}" for i in range(len(endpoints))]
        )
        self.log_cover = Coverage(interval_s, window)
        self._client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(self.timeout_s), verify=verify()
        )
        files = log_files or []
        # One log per replica when the counts agree; otherwise the logs are not attributed.
        per_replica = len(files) == len(endpoints)
        self.logs = [
            _LogSource(
                label=f"endpoint {i} log" if per_replica else f"server log {i}",
                replica=i if per_replica else None,
                file=LogFollower(p, start_at_end=True),
            )
            for i, p in enumerate(files)
        ]
        self.logs += [
            _LogSource(label=f"log command {i}", replica=None, command=CommandFollower(argv))
            for i, argv in enumerate(log_commands or [])
        ]
        for src in self.logs:
            self.log_cover.add_key(src.label)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the log commands and the periodic task."""
        for src in self.logs:
            if src.command is not None:
                await src.command.start()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="fault-watch")

    async def _run(self) -> None:
        await every(self.interval_s, self.tick, "fault watch", self.loop_errors)

    async def tick(self) -> None:
        """One round: every log, then every endpoint's /health."""
        self.poll_logs()
        await self.check_health()

    async def check_health(self) -> None:
        """``/health`` of every endpoint at once; a change of state is an event."""
        t = self.now_s()
        samples = await asyncio.gather(
            *(
                check_health(self._client, base, t=t, timeout_s=self.timeout_s)
                for base in self.endpoints
            )
        )  # check_health bounds itself and never raises
        for i, sample in enumerate(samples):
            self._take_health(i, sample)

    def _take_health(self, i: int, sample: HealthSample) -> None:
        key = f"endpoint {i}"
        self.client_errors[i].update(sample)
        if sample.client_side:  # the client's failure: the server's state is unknown
            self.health_cover.sample(key, sample.t, sample.error)
            return
        if sample.status in UNSERVED:
            self.health_cover.sample(key, sample.t, f"HTTP {sample.status}: /health not served")
            if self.unserved[i] is None:
                self.unserved[i] = sample.status
                self.events.emit(
                    "warning",
                    f"endpoint {i} /health answers HTTP {sample.status}: not served there, so "
                    "its health is not watched (see the telemetry coverage)",
                    "warning",
                    endpoint=i,
                    source="health",
                )
            return
        self.health_cover.sample(
            key,
            sample.t,
            None if sample.answered else f"no answer: {sample.error or 'failed'}",
        )
        if not sample.ok:
            kind = sample.error or "failed"
            self.health_errors[i][kind] = self.health_errors[i].get(kind, 0) + 1
        change = self.health.update(i, sample)
        if change is not None:
            self.events.emit(
                "health",
                change.message,
                change.severity,
                endpoint=i,
                state=change.state,
                down_for_s=change.down_for_s,
            )

    def poll_logs(self) -> None:
        """New lines of every log; each classified fault line is an event."""
        t = self.now_s()
        for src in self.logs:
            for line in src.poll():
                src.lines += 1
                if (fault := classify(line)) is not None:
                    self._fault(src, fault)
            why = src.why_not_following()
            self.log_cover.sample(src.label, t, self._scrub(why) if why else None)
            cmd = src.command
            if cmd is not None and cmd.ended and not src.ended_reported:
                src.ended_reported = True
                self.events.emit("warning", cmd.exit_message or "log command ended", "warning")

    def _fault(self, src: _LogSource, fault: LogFault) -> None:
        line = self._scrub(fault.line) if self.keep_lines else "<line not kept: --redact>"
        summary = self._scrub(fault.summary)
        n = src.faults.get(fault.kind, 0) + 1
        src.faults[fault.kind] = n
        t = self.now_s()
        if n == 1:
            src.first[fault.kind] = {
                "t_s": round(t, 3),
                "severity": fault.severity,
                "summary": summary,
                "line": line,
            }
        if n <= FAULT_EVENTS_PER_KIND:
            self.events.emit(
                "fault",
                f"{src.label}: {summary}",
                fault.severity,
                fault=fault.kind,
                replica=src.replica,
                line=line,
            )

    async def stop(self) -> None:
        """A last round (faults written while the run ended), then stop everything."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        try:
            # The logs first: a crash's last lines must reach the verdict even when a hung
            # endpoint would use up the health check's time.
            self.poll_logs()
            with contextlib.suppress(TimeoutError, httpx.HTTPError):
                await asyncio.wait_for(self.check_health(), timeout=self.timeout_s + 1.0)
        finally:
            await self._client.aclose()
            for src in self.logs:
                if src.file is not None:
                    src.file.close()
                elif src.command is not None:
                    await src.command.close()

    def view(self) -> dict[str, Any]:
        """Latest health per endpoint and fault counts per log, for the snapshot."""
        return {
            "health": self.health.view(),
            "server_logs": [
                {"source": s.label, "replica": s.replica, "faults": dict(s.faults)}
                for s in self.logs
            ],
        }

    def coverage(self, now_s: float, min_expected: int = 1) -> dict[str, dict[str, Any]]:
        """``{"health": {"endpoint i": entry}, "server_log": {label: entry}}`` over the load
        window so far; a log's entry also says how many lines it read."""
        for src in self.logs:
            self.log_cover.extra[src.label] = {"lines_read": src.lines}
        return {
            "health": self.health_cover.summary(now_s, min_expected),
            "server_log": self.log_cover.summary(now_s, min_expected),
        }

    def summary(self) -> dict[str, Any]:
        """The record's telemetry.health and telemetry.server_logs."""
        health = []
        for h, errors, mine, unserved in zip(
            self.health.summary(),
            self.health_errors,
            self.client_errors,
            self.unserved,
            strict=True,
        ):
            entry = h | {"failures_by_kind": errors}
            if mine.kinds:
                entry["client_errors"] = dict(mine.kinds)
                entry["client_errors_longest_s"] = round(mine.longest_s, 3)
            if unserved is not None:
                entry["not_served"] = f"HTTP {unserved}"
            health.append(entry)
        return {
            "health": health,
            "server_logs": [
                {
                    "source": s.label,
                    "replica": s.replica,
                    "lines": s.lines,
                    "faults": dict(s.faults),
                    "first": s.first,
                }
                for s in self.logs
            ],
        }
