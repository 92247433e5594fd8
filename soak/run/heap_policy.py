"""The measuring process's garbage collector, set for a long load.

CPython's cyclic collector, on each full (generation-2) collection, walks every object
it tracks. A runner holding 10,000 streams tracks millions (each worker's coroutine and
request state, its connection and timers, the prompt pool, the parsers), and a full
collection stops the event loop for most of a second. Measured here at 10,000 streams
(1 token/s each, 75 s): gen-2 collections of 650–760 ms about every 6 s, growing as the
load went on, and each collected next to nothing (0–200 objects of millions: the
load's objects are alive, not garbage) — while every stream's next token waited, and the
loop lag p99 they caused made the run judge its own latencies unmeasured (INVALID).

So for the load (:class:`LoadHeap`):

- at the barrier's release, the start-up's objects (workers, connections, the pools) are
  collected once and frozen (:func:`gc.freeze`: a permanent generation the collector
  never walks); that collection's stall falls before the window opens, and its loop lag
  is dropped with the start-up's;
- after every full collection during the load, what survived it is frozen too, so the
  next one walks only what reached the oldest generation since — the young generations
  are collected as always, and a cycle of young garbage is still reclaimed;
- every :data:`SWEEP_S` the frozen objects are given back before the next full
  collection, which then walks everything once: garbage cycles among long-lived objects
  (rare: see above) are reclaimed at that bound, not kept for the run — one stall in ten
  minutes of ticks, below what a p99 of one-second intervals can see;
- the youngest generation is collected after :data:`YOUNG_THRESHOLD` net allocations
  rather than CPython's 700: each collection walks what is young and alive at that
  moment, and a long-lived load holds a standing crowd of young objects (every stream's
  wait for its next chunk, made anew at each read), which every collection walks again.
  Measured at 10,000 streams of 1 token/s on 2 cores (alternated, 2 rounds): at 700, 17
  young collections and 1.5 middle ones a second, 66–69 ms of stalls a second in all; at
  7,000, 0.7–0.8 and 0.1 a second, 25–28 ms (the longest, a middle one every ~10 s, 110
  ms against 52), loop lag p50 0.08 s against 0.11 and client CPU 38–40 µs a token
  against 41–43; at 1,024 streams of 50 tokens/s no difference showed;
- after the drain everything is given back (:meth:`LoadHeap.close`).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SETTLE_S", "SWEEP_S", "YOUNG_THRESHOLD", "LoadHeap"]

SETTLE_S = 0.15
"""After the release's collection, the loop runs this long before the window opens:
longer than the loop-lag timer's period (0.1 s), so the stall is measured — and dropped
with the start-up's interval — before the load's first lag interval begins."""
YOUNG_THRESHOLD = 7000
"""Net allocations of tracked objects between two young collections during the load
(CPython's default is 700; the older generations' thresholds are kept)."""
SWEEP_S = 600.0
"""How often the load's full collections walk everything (frozen objects included)."""


class LoadHeap:
    """The collector's policy for one load (see the module's note): :meth:`settle` at
    the release, :meth:`close` after the drain. One at a time per process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last_sweep = 0.0
        self._sweeping = False
        self.frozen_after = 0
        """Full collections of the load after which the survivors were frozen."""
        self.sweeps = 0
        """Full collections of the load that walked everything."""
        self._installed = False
        self._thresholds: tuple[int, int, int] | None = None
        """The collector's thresholds before the load (given back by :meth:`close`)."""

    async def settle(self) -> float:
        """Collect and freeze the start-up's objects, then let the loop run
        :data:`SETTLE_S`; the seconds the loop stood still for the collection."""
        t0 = time.perf_counter()
        gc.collect()
        gc.freeze()
        stalled = time.perf_counter() - t0
        self._last_sweep = self._clock()
        if not self._installed:
            gc.callbacks.append(self._after_collection)
            self._installed = True
            self._thresholds = gc.get_threshold()
            young, middle, old = self._thresholds
            gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)
        await asyncio.sleep(SETTLE_S)
        return stalled

    def close(self) -> None:
        """The load is over: the frozen objects back under the collector."""
        if self._installed:
            gc.callbacks.remove(self._after_collection)
            self._installed = False
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None
        gc.unfreeze()

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        # Called by the collector around each collection: only a full one's end matters.
        if phase != "stop" or info.get("generation") != 2:
            return
        now = self._clock()
        if self._sweeping:  # this collection walked everything: the sweep is done
            self._sweeping = False
            self.sweeps += 1
            self._last_sweep = now
        elif now - self._last_sweep >= SWEEP_S:
            gc.unfreeze()  # the next full collection walks everything once
            self._sweeping = True
            return
        gc.freeze()
        self.frozen_after += 1
