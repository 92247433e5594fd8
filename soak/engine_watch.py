"""Watches every endpoint's ``/metrics`` during the run: occupancy, KV, counters.

One task scrapes the endpoints one after the other and then sleeps the rest of the
interval, so a slow scrape delays the next one instead of piling up. Each sample goes to
``telemetry.jsonl``; the latest values go into snapshots; the peaks during the load go
into the record beside the client's own concurrency (two different numbers).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import httpx

from probes.engine_metrics import EngineSample, scrape
from soak.journal import JsonlWriter

_PEAKS = ("running", "waiting", "kv_usage")


class EngineWatch:
    """Periodic and on-demand scrapes of all endpoints."""

    def __init__(
        self,
        endpoints: list[str],
        headers: dict[str, str],
        origin_ns: int,
        journal: JsonlWriter,
        interval_s: float = 1.0,
        scrub: Callable[[Any], Any] = lambda v: v,
    ) -> None:
        self.endpoints = endpoints
        self._scrub = scrub
        self.interval_s = interval_s
        self._origin_ns = origin_ns
        self._journal = journal
        self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(5.0))
        self._task: asyncio.Task[None] | None = None
        self.latest: list[EngineSample | None] = [None] * len(endpoints)
        self.peaks: list[dict[str, float]] = [{} for _ in endpoints]
        self.scrapes = [0] * len(endpoints)
        self.errors = [0] * len(endpoints)
        self.tracking = False
        """Peaks are kept only while True (the load and the drain)."""

    async def scrape_all(self) -> list[EngineSample]:
        """Scrape every endpoint now (also used for the counter snapshots)."""
        out = []
        for i, base in enumerate(self.endpoints):
            s = await scrape(self._client, base, self._origin_ns)
            self._take(i, s)
            out.append(s)
        return out

    def _take(self, i: int, s: EngineSample) -> None:
        self.scrapes[i] += 1
        self.latest[i] = s
        line = {"source": "engine", "endpoint": i} | asdict(s)
        self._journal.write(self._scrub(line))
        if s.error is not None:
            self.errors[i] += 1
            return
        if self.tracking:
            peaks = self.peaks[i]
            for key in _PEAKS:
                v = s.values.get(key)
                if v is not None and v > peaks.get(key, float("-inf")):
                    peaks[key] = v

    async def _run(self) -> None:
        while True:
            start = time.monotonic()
            await self.scrape_all()
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - start)))

    def start(self) -> None:
        """Begin periodic scraping on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-watch")

    async def stop(self) -> None:
        """Stop scraping and close the HTTP client."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._client.aclose()

    async def settled_counters(self, tries: int = 4, pause_s: float = 0.5) -> list[EngineSample]:
        """Scrape until the token counters stop moving (the engine publishes them a step
        late), at most ``tries`` times."""
        prev = await self.scrape_all()
        for _ in range(tries - 1):
            await asyncio.sleep(pause_s)
            cur = await self.scrape_all()
            if [s.values for s in cur] == [s.values for s in prev]:
                return cur
            prev = cur
        return prev

    def view(self) -> list[dict[str, object]]:
        """Latest values per endpoint, for the snapshot's telemetry section."""
        out: list[dict[str, object]] = []
        for i, s in enumerate(self.latest):
            if s is None:
                out.append({"endpoint": i, "status": "no data yet"})
            elif s.error is not None:
                out.append(
                    {"endpoint": i, "status": "scrape failed", "error": self._scrub(s.error)}
                )
            else:
                out.append({"endpoint": i, "status": "ok", "t": s.t} | s.values)
        return out

    def summary(self) -> list[dict[str, object]]:
        """Per endpoint: engine, peaks during the load, scrape counts."""
        out: list[dict[str, object]] = []
        for i, s in enumerate(self.latest):
            peaks = self.peaks[i]
            out.append(
                {
                    "endpoint": i,
                    "engine": s.engine if s is not None else None,
                    "max_running": peaks.get("running"),
                    "max_waiting": peaks.get("waiting"),
                    "max_kv_usage": peaks.get("kv_usage"),
                    "scrapes": self.scrapes[i],
                    "scrape_errors": self.errors[i],
                }
            )
        return out
