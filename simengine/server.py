"""Start and stop a whole simulated deployment in the running event loop.

In-process use (tests, the demo)::

    async with run_sim(SimConfig(replicas=2, max_num_seqs=4)) as sim:
        sim.replicas[0].url        # "http://127.0.0.1:PORT"
        sim.replicas[0].dcgm_url   # "http://127.0.0.1:PORT2/metrics"
        sim.replicas[0].log.path   # the replica's vLLM-style log

Ports: ``port=0`` binds free ports; ``port=P`` serves replica i on P+i and its DCGM
exporter on P+100+i.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from simengine.config import SimConfig
from simengine.endurance import Endurance
from simengine.faults import ENDURANCE_SCENARIOS, FaultBook, FaultRule, scenario_rules
from simengine.replica import Replica

_FAULT_TICK_S = 0.1


def _listen(host: str, port: int) -> socket.socket:
    # Bind ourselves (rather than letting aiohttp do it) so port 0 is known at once and the
    # backlog fits a thousand clients connecting together.
    bind_host = "127.0.0.1" if host == "localhost" else host
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    sock = socket.create_server((bind_host, port), family=family, backlog=4096)
    sock.setblocking(False)
    return sock


class Sim:
    """A running set of replicas sharing one fault book."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        rules = scenario_rules(cfg.scenario, cfg.onset_s) + list(cfg.faults)
        slow = cfg.noise or cfg.scenario in ENDURANCE_SCENARIOS
        # The slow scenarios and the noise run on the load clock, timed rule or not.
        self.faults = FaultBook(rules, cfg.replicas, keep_clock=slow)
        self.faults.set_replica_hook(self._fire)
        self.endurance: Endurance | None = None
        """The slow scenario and noise of this process (None: a steady engine)."""
        if slow:
            self.endurance = Endurance(
                cfg.scenario,
                self.faults,
                onset_s=cfg.onset_s,
                speed=cfg.scenario_speed,
                noise=cfg.noise,
                seed=cfg.seed,
            )
        if cfg.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="simengine-"))
        else:
            self.log_dir = Path(cfg.log_dir).resolve()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.replicas = [
            Replica(cfg, i, self.faults, self.log_dir, self.endurance) for i in range(cfg.replicas)
        ]
        self._tick_task: asyncio.Task[None] | None = None
        self._memory_task: asyncio.Task[None] | None = None

    def _fire(self, rule: FaultRule, replica: int, note: str) -> None:
        self.replicas[replica].fire(rule, note)

    async def start(self) -> None:
        """Bind every port and start every replica."""
        cfg = self.cfg
        socks: list[tuple[socket.socket, socket.socket]] = []
        try:
            for i in range(cfg.replicas):
                api_port = cfg.port + i if cfg.port else 0
                dcgm_port = cfg.port + 100 + i if cfg.port else 0
                socks.append((_listen(cfg.host, api_port), _listen(cfg.host, dcgm_port)))
        except OSError:
            for a, b in socks:
                a.close()
                b.close()
            raise
        for rep, (api, dcgm) in zip(self.replicas, socks, strict=True):
            await rep.start(api, dcgm)
        for rule in self.faults.rules:
            target, note = self.faults.target_replica(rule, 0)
            if note and rule.action in ("xid", "engine_death"):
                self.replicas[target].log.warning("simengine.py:0", f"fault {rule.action}: {note}")
        if any(r.at_s is not None for r in self.faults.rules):
            self._tick_task = asyncio.create_task(self._tick())
        if self.endurance is not None and (self.endurance.leaks or self.endurance.noise):
            self._memory_task = asyncio.create_task(self.endurance.run_memory())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(_FAULT_TICK_S)
            self.faults.tick()

    def ready_info(self) -> dict[str, Any]:
        """The ready JSON: pid, each replica's URLs, log path and model, the scenario."""
        return {
            "pid": os.getpid(),
            "replicas": [
                {
                    "index": r.index,
                    "url": r.url,
                    "dcgm_url": r.dcgm_url,
                    "log": str(r.log.path),
                    "model": self.cfg.model,
                }
                for r in self.replicas
            ],
            "scenario": self.cfg.scenario,
        }

    async def stop(self) -> None:
        """Stop every replica and close every port."""
        for task in (self._tick_task, self._memory_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._tick_task = self._memory_task = None
        await asyncio.gather(*(r.stop() for r in self.replicas))


@contextlib.asynccontextmanager
async def run_sim(cfg: SimConfig) -> AsyncIterator[Sim]:
    """Run a simulated deployment for the duration of the ``async with`` block."""
    sim = Sim(cfg)
    await sim.start()
    try:
        yield sim
    finally:
        await sim.stop()
