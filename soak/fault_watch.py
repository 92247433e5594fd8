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
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from probes.health import HealthTracker, check_health
from probes.server_log import CommandFollower, LogFault, LogFollower, classify
from soak.events import EventLog
from soak.faults import when
from soak.periodic import every
from soak.record import Reason

FAULT_EVENTS_PER_KIND = 5


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
        self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(2.0))
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
        """``/health`` of every endpoint; a change of state is an event."""
        for i, base in enumerate(self.endpoints):
            sample = await check_health(self._client, base, t=self.now_s(), timeout_s=5.0)
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
        for src in self.logs:
            for line in src.poll():
                src.lines += 1
                if (fault := classify(line)) is not None:
                    self._fault(src, fault)
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
                await asyncio.wait_for(self.check_health(), timeout=5.0)
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

    def summary(self) -> dict[str, Any]:
        """The record's telemetry.health and telemetry.server_logs."""
        health = [
            h | {"failures_by_kind": errors}
            for h, errors in zip(self.health.summary(), self.health_errors, strict=True)
        ]
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


def fault_reasons(telemetry: dict[str, Any], load_start_s: float | None = None) -> list[Reason]:
    """Critical server-log faults and /health outages fail the run; other fault lines
    (a traceback the server survived) are notes. Times are relative to the load's start."""
    out: list[Reason] = []
    for src in telemetry.get("server_logs", []):
        for kind, first in src.get("first", {}).items():
            n = src["faults"].get(kind, 1)
            more = f" (+{n - 1} more)" if n > 1 else ""
            out.append(
                Reason(
                    code="server_fault" if first["severity"] == "critical" else "server_log_error",
                    effect="failed" if first["severity"] == "critical" else "note",
                    message=f"{src['source']}: {first['summary']} "
                    f"{when(first['t_s'], load_start_s)}{more}: {first['line'][:160]}",
                )
            )
    for h in telemetry.get("health", []):
        if not h.get("failures"):
            continue
        kinds = h.get("failures_by_kind") or {}
        # A /health slower than 5 s is an overloaded API server, not a dead one: a note.
        slow_only = set(kinds) == {"timeout"}
        by = ", ".join(f"{n}× {k}" for k, n in kinds.items())
        out.append(
            Reason(
                code="health_slow" if slow_only else "health_outage",
                effect="note" if slow_only else "failed",
                message=f"endpoint {h['endpoint']} /health failed {h['failures']} of "
                f"{h['checks']} checks ({by}; longest outage "
                f"{h.get('longest_outage_s') or 0:.1f} s)",
            )
        )
    return out
