"""Host telemetry and client self-health, sampled on every snapshot tick.

The runner's own process (CPU, RSS, threads, open files, event-loop lag), the host as a
whole (CPU, available memory, load average) and, with ``--server-pid``, the server's
processes on this host. Each tick is one ``{"source": "host"}`` line of telemetry.jsonl.

Two sustained conditions say the client, not the server, set the numbers (DESIGN.md §6):
the runner's CPU above ``max_client_cpu_percent`` and, while issuing, fewer requests in
flight than workers started (with no failure back-off to explain it). Their longest
streaks go into ``client_health``; the verdict makes the run INVALID when one lasted
``client_overload_s``.

Every tick inside the load counts toward the host source's coverage (``soak.judge.coverage``):
ticks come from the runner's snapshot loop, so a client too busy to tick shows here too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import psutil

from probes.host import HostSample, ProcessSampler
from soak.judge.coverage import Coverage, LoadWindow
from soak.judge.limits import MAX_CLIENT_CPU_PERCENT
from soak.record.events import EventLog
from soak.record.journal import JsonlWriter


@dataclass
class _Streak:
    """How long a condition has held, and its longest run."""

    since: float | None = None
    longest_s: float = 0.0

    def update(self, on: bool, t: float) -> None:
        if not on:
            self.since = None
            return
        if self.since is None:
            self.since = t
        self.longest_s = max(self.longest_s, t - self.since)


@dataclass
class _Server:
    pid: int
    name: str
    sampler: ProcessSampler | None
    exited_at_s: float | None = None
    cpu: list[float] = field(default_factory=list)
    rss_mb_max: float | None = None


class HostWatch:
    """Samples the runner, the host and the server processes once per tick."""

    def __init__(
        self,
        journal: JsonlWriter,
        events: EventLog,
        server_pids: list[int] | None = None,
        max_client_cpu_percent: float = MAX_CLIENT_CPU_PERCENT,
        interval_s: float = 1.0,
        window: LoadWindow | None = None,
    ) -> None:
        self.cover = Coverage(interval_s, window or LoadWindow(), ["host"])
        """One sample a snapshot tick (``interval_s``) during the load."""
        self._journal = journal
        self._events = events
        self.max_client_cpu_percent = max_client_cpu_percent
        self.client = ProcessSampler()
        self.servers = [_open_server(pid) for pid in server_pids or []]
        for srv in self.servers:
            if srv.sampler is None:  # gone between the config check and the start
                self._exited(srv, 0.0)
        psutil.cpu_percent(None)  # prime the host-wide figure
        self.cpu_streak = _Streak()
        self.short_streak = _Streak()
        self.short_min: int | None = None
        """Fewest requests in flight during a below-target streak."""
        self._client_cpu: list[float] = []
        self._last_backoffs = 0
        self.client_max: dict[str, float] = {}
        """The runner's worst figures over the whole run (``cpu_percent_max``,
        ``rss_mb_max``, ``threads_max``, ``open_files_max``) for ``client_health``."""
        self.latest: dict[str, Any] | None = None
        """The last host line written (the snapshot's ``telemetry.host``)."""

    def tick(
        self,
        t: float,
        *,
        measuring: bool,
        issuing: bool,
        in_flight: int,
        workers: int,
        backoffs: int,
    ) -> HostSample:
        """One sample of everything; ``measuring``: the load or its drain is running (the
        self-health streaks count only then); ``issuing``: the issue window is open."""
        c = self.client.sample()
        for key, v in (
            ("cpu_percent_max", c.cpu_percent),
            ("rss_mb_max", c.rss_mb),
            ("threads_max", c.threads),
            ("open_files_max", c.open_files),
        ):
            if v is not None and v > self.client_max.get(key, -1.0):
                self.client_max[key] = float(v)
        over = measuring and c.cpu_percent > self.max_client_cpu_percent
        self.cpu_streak.update(over, t)
        backed_off = backoffs > self._last_backoffs
        self._last_backoffs = backoffs
        short = issuing and workers > 0 and in_flight < workers and not backed_off
        self.short_streak.update(short, t)
        if short:
            self.short_min = in_flight if self.short_min is None else min(self.short_min, in_flight)
        if measuring:
            self._client_cpu.append(c.cpu_percent)
        mem = psutil.virtual_memory()
        line: dict[str, Any] = {
            "source": "host",
            "t": t,
            "client": {
                "cpu_percent": c.cpu_percent,
                "rss_mb": round(c.rss_mb, 1),
                "threads": c.threads,
                "open_files": c.open_files,
                "fd_limit": c.fd_limit,
            },
            "system": {
                "cpu_percent": psutil.cpu_percent(None),
                "cpus": psutil.cpu_count(),
                "mem_available_mib": round(mem.available / 2**20),
                "mem_total_mib": round(mem.total / 2**20),
                "load1": os.getloadavg()[0],
            },
        }
        if self.servers:
            line["servers"] = [self._server(s, t, measuring) for s in self.servers]
        self._journal.write(line)
        self.latest = line
        self.cover.sample("host", t)
        return c

    def coverage(self, now_s: float, min_expected: int = 1) -> dict[str, dict[str, Any]]:
        """``{"host": {"host": entry}}``: the load's ticks against the expected ones."""
        return {"host": self.cover.summary(now_s, min_expected)}

    def _server(self, s: _Server, t: float, measuring: bool) -> dict[str, Any]:
        if s.sampler is None or s.exited_at_s is not None:
            return {"pid": s.pid, "name": s.name, "status": "exited"}
        try:
            r = s.sampler.sample()
        except psutil.Error:
            self._exited(s, t)
            return {"pid": s.pid, "name": s.name, "status": "exited"}
        if measuring:
            s.cpu.append(r.cpu_percent)
        s.rss_mb_max = max(s.rss_mb_max or 0.0, r.rss_mb)
        return {
            "pid": s.pid,
            "name": s.name,
            "status": "ok",
            "cpu_percent": r.cpu_percent,
            "rss_mb": round(r.rss_mb, 1),
            "threads": r.threads,
        }

    def _exited(self, s: _Server, t: float) -> None:
        s.exited_at_s = t
        self._events.emit(
            "fault",
            f"server process {s.pid} ({s.name}) exited",
            "critical",
            fault="server_process_exited",
            pid=s.pid,
            t_s=t,
        )

    def view(self) -> dict[str, Any]:
        """The latest host line without its source tag, for the snapshot."""
        latest = self.latest
        return {k: v for k, v in latest.items() if k != "source"} if latest else {}

    def summary(self) -> dict[str, Any]:
        """The record's ``telemetry.host``: client CPU over the load, the self-health
        streaks, and per server process its CPU and peak memory."""
        cpu = self._client_cpu
        out: dict[str, Any] = {
            "client_cpu_percent_mean": sum(cpu) / len(cpu) if cpu else None,
            "client_cpu_percent_max": max(cpu) if cpu else None,
            "cpus": psutil.cpu_count(),
        }
        if self.servers:
            out["servers"] = [
                {
                    "pid": s.pid,
                    "name": s.name,
                    "cpu_percent_mean": sum(s.cpu) / len(s.cpu) if s.cpu else None,
                    "cpu_percent_max": max(s.cpu) if s.cpu else None,
                    "rss_mb_max": round(s.rss_mb_max, 1) if s.rss_mb_max is not None else None,
                    "exited_at_s": s.exited_at_s,
                }
                for s in self.servers
            ]
        return out


def _open_server(pid: int) -> _Server:
    try:
        return _Server(pid=pid, name=psutil.Process(pid).name(), sampler=ProcessSampler(pid))
    except psutil.Error:
        return _Server(pid=pid, name="?", sampler=None)


def check_server_pid(pid: int) -> str | None:
    """Why ``pid`` cannot be sampled (None: it can), for the configuration check."""
    try:
        psutil.Process(pid).cpu_times()
    except psutil.NoSuchProcess:
        return "no such process on this host"
    except psutil.AccessDenied:
        return "not allowed to read that process (run soaktop as its user)"
    return None
