"""Client self-health: the runner's own CPU, memory, threads, files and event-loop lag.

A client that cannot keep up measures itself, not the server (CLIENT_COST.md), so these
are measured on every snapshot tick, never assumed.
"""

from __future__ import annotations

import asyncio
import resource
import time
from dataclasses import dataclass

import psutil


@dataclass(frozen=True, slots=True)
class HostSample:
    """One reading of the runner process."""

    cpu_percent: float
    """Percent of one core since the previous reading (200 = two cores busy)."""
    rss_mb: float
    threads: int
    open_files: int | None
    fd_limit: int | None


class ProcessSampler:
    """Reads psutil figures for one process (the runner by default)."""

    def __init__(self, pid: int | None = None) -> None:
        self._proc = psutil.Process(pid)
        self._proc.cpu_percent(None)  # prime: the first call always returns 0.0

    def sample(self) -> HostSample:
        """CPU since the last call, RSS, threads, open fds and the soft fd limit."""
        p = self._proc
        with p.oneshot():
            try:
                fds: int | None = p.num_fds()
            except (AttributeError, psutil.Error):
                fds = None
            return HostSample(
                cpu_percent=p.cpu_percent(None),
                rss_mb=p.memory_info().rss / 2**20,
                threads=p.num_threads(),
                open_files=fds,
                fd_limit=fd_soft_limit(),
            )


def fd_soft_limit() -> int | None:
    """The soft RLIMIT_NOFILE of this process."""
    try:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return None


def raise_fd_limit(wanted: int) -> tuple[int, int]:
    """Raise the soft fd limit toward ``wanted`` (never above the hard limit), as Locust
    and AIPerf do. Returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError):
            return soft, soft
        return soft, target
    return soft, soft


class LoopLagMonitor:
    """Measures the event loop's lateness: a timer that should fire every ``period_s``.

    Lag is how late each wake-up was. A busy client shows lag long before its CPU reads
    100 %, and every millisecond of it is added to the TTFT it reports.
    """

    def __init__(self, period_s: float = 0.1) -> None:
        self.period_s = period_s
        self.interval_max_s = 0.0
        self._task: asyncio.Task[None] | None = None
        self.samples: list[float] = []
        """Per-interval maxima (one per snapshot tick: bounded by the run's duration)."""

    def start(self) -> None:
        """Start measuring on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag")

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.period_s)
            lag = time.perf_counter() - before - self.period_s
            if lag > self.interval_max_s:
                self.interval_max_s = lag

    def take_interval(self, keep: bool) -> float:
        """The worst lag since the last call; kept for the run's p99 when ``keep``."""
        v, self.interval_max_s = self.interval_max_s, 0.0
        if keep:
            self.samples.append(v)
        return v

    def stop(self) -> None:
        """Stop the timer."""
        if self._task is not None:
            self._task.cancel()
