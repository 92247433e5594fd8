"""Give each measuring process of a ``soaktop run`` its own slice of CPU, as a stand-in for
its own core, where the machine has too few cores to give it a real one (bench only).

``bench/shard_scaling.py --cpu-per-shard 0.25`` asks: do N shards carry N times what one
carries when each has the CPU one has? On a machine with spare cores each shard gets a
core. On this 2-core machine the server and the shards share both cores, so an uncapped
row can only show how the cores were split. Capping each shard at the same share of one
CPU (the kernel's CFS bandwidth control: ``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``)
leaves the server and the coordinator the rest, so a second shard adds a budget of its
own, as a second core would.

What it cannot show: the coordinator's own cost at a real core's rate (its work is per
report, not per token: the row prints its CPU), memory-bandwidth and cache effects of
real cores, and a kernel's scheduling of many busy cores. The period is 10 ms, not the
default 100 ms: a throttled process waits at most 10 ms minus its quota, which the loop
lag and the latencies include (the row prints how often the cap bit).

Which processes: with one shard the runner measures, so the runner goes in one group;
with N shards each ``soak.run.shard_main`` child of the runner gets a group of its own.
The CLI process, the coordinator (the sharded runner) and the metrics parser (moved back
out when it starts inside the 1-shard runner's group: it serves the coordinator's side)
stay uncapped; their CPU is printed beside the shards'. It is the same work a 1-shard
runner does inside its own budget (snapshots, events, the record): one reason two
shards can carry a little more than twice what one does. A process joins its group within a
poll (20 ms) of starting, long before the barrier opens; its later threads and children
inherit the group.

Linux cgroup v1 with a writable ``cpu`` hierarchy (root), which this machine has; a host
with cgroup v2 only is refused with the reason (such a host usually has real cores).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
ACCT_ROOT = Path("/sys/fs/cgroup/cpuacct")
PERIOD_US = 10_000
"""The bandwidth period: a throttled process waits at most this less its quota."""
POLL_S = 0.02


def unavailable() -> str | None:
    """Why caps cannot be set here, or None when they can."""
    for root in (CPU_ROOT, ACCT_ROOT):
        if not (root / "cgroup.procs").exists():
            return f"{root}: no cgroup v1 hierarchy there (this bench sets caps with cgroup v1)"
        if not os.access(root, os.W_OK):
            return f"{root}: not writable (setting CPU caps needs root)"
    return None


@dataclass
class CapGroup:
    """One capped group (a ``cpu`` and a ``cpuacct`` cgroup of one name) and what it used."""

    name: str
    share: float

    @property
    def cpu_dir(self) -> Path:
        return CPU_ROOT / self.name

    @property
    def acct_dir(self) -> Path:
        return ACCT_ROOT / self.name

    def create(self) -> None:
        for d in (self.cpu_dir, self.acct_dir):
            d.mkdir()
        (self.cpu_dir / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (self.cpu_dir / "cpu.cfs_quota_us").write_text(str(round(self.share * PERIOD_US)))

    def join(self, pid: int) -> None:
        """Move ``pid`` (every thread of it) into the group; its later children follow."""
        for d in (self.cpu_dir, self.acct_dir):
            (d / "cgroup.procs").write_text(str(pid))

    def cpu_s(self) -> float:
        """CPU seconds the group's processes used since they joined."""
        return int((self.acct_dir / "cpuacct.usage").read_text()) / 1e9

    def throttled(self) -> tuple[int, int]:
        """(periods the group ran in, periods the cap stopped it in)."""
        stat = dict(line.split() for line in (self.cpu_dir / "cpu.stat").read_text().splitlines())
        return int(stat.get("nr_periods", 0)), int(stat.get("nr_throttled", 0))

    def remove(self) -> None:
        """Remove both cgroups once their processes are gone (any left are moved out)."""
        for root, d in ((CPU_ROOT, self.cpu_dir), (ACCT_ROOT, self.acct_dir)):
            if not d.exists():
                continue
            for pid in (d / "cgroup.procs").read_text().split():
                try:
                    (root / "cgroup.procs").write_text(pid)
                except OSError:
                    continue  # gone meanwhile
            d.rmdir()


class ShardCaps:
    """Watch ``root_pid``'s tree (a ``soaktop run`` CLI) and cap its measuring processes:
    the runner with one shard, each shard process with more. Call :meth:`stop` after the
    run; :meth:`summary` then says what each group used."""

    def __init__(self, root_pid: int, shards: int, share: float) -> None:
        self.shards, self.share = shards, share
        self.groups: list[CapGroup] = []
        self._root = root_pid
        self._placed: set[int] = set()  # the measuring processes given a group
        self._seen_cpu: dict[int, float] = {}  # each uncapped process's last CPU seconds
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _measuring(self, runner: psutil.Process) -> list[psutil.Process]:
        if self.shards == 1:
            return [runner]
        return [c for c in runner.children() if "soak.run.shard_main" in _cmdline(c)]

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                tree = psutil.Process(self._root).children(recursive=True)
            except psutil.Error:
                return
            runner = next((p for p in tree if "soak.run.runner" in _cmdline(p)), None)
            if runner is None:
                continue
            for p in tree:  # the parser serves the coordinator, capped or not: never capped
                if "soak.watch.parse_worker" in _cmdline(p) and _capped(p.pid):
                    _uncap(p.pid)
            for proc in self._measuring(runner):
                if proc.pid in self._placed:
                    continue
                group = CapGroup(f"soaktop-bench-{os.getpid()}-{proc.pid}", self.share)
                group.create()
                self.groups.append(group)
                for p in (proc, *_children(proc)):  # any it started before it joined
                    group.join(p.pid)
                self._placed.add(proc.pid)
            self._sample_cpu(tree)

    def _sample_cpu(self, tree: list[psutil.Process]) -> None:
        if time.monotonic() - self._t0 < 0.5:
            return
        self._t0 = time.monotonic()
        try:
            root = psutil.Process(self._root)
        except psutil.Error:
            return
        for p in (root, *tree):
            try:
                if not _capped(p.pid):
                    t = p.cpu_times()
                    self._seen_cpu[p.pid] = t.user + t.system
            except (psutil.Error, OSError):
                continue

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> str:
        """One line: each group's CPU and how often its cap bit; the uncapped processes'
        CPU (as last sampled, to within half a second of their end)."""
        parts = []
        for g in self.groups:
            periods, throttled = g.throttled()
            bit = f"{100 * throttled / periods:.0f}%" if periods else "—"
            parts.append(f"{g.cpu_s():.1f} s (cap bit in {bit} of periods)")
        free = sum(self._seen_cpu.values())
        return (
            f"caps {self.share:g} CPU each: capped {'; '.join(parts) or 'none placed'}; "
            f"uncapped (CLI, coordinator, parser) {free:.1f} s"
        )

    def remove(self) -> None:
        for g in self.groups:
            g.remove()


def _capped(pid: int) -> bool:
    """Whether ``pid`` is in one of this bench's cpu groups (its ``/proc`` cgroup line);
    False once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") and path.startswith("/soaktop-bench-"):
            return True
    return False


def _uncap(pid: int) -> None:
    for root in (CPU_ROOT, ACCT_ROOT):
        try:
            (root / "cgroup.procs").write_text(str(pid))
        except OSError:
            return  # gone meanwhile


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _children(p: psutil.Process) -> list[psutil.Process]:
    try:
        return p.children(recursive=True)
    except psutil.Error:
        return []
