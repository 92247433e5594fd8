"""Workers that start together start in slices: at most :data:`SLICE` per turn of the loop.

When the barrier releases, every worker sends its first request. Woken by one event, all
of them would run in the same turn of the event loop: 10,000 workers are 10,000 request
sends (~100 µs of aiohttp each, and the collector's share) before the loop polls a socket
or fires a timer again. Measured on 2 cores at 10,000 streams: one turn of 1.1–1.7 s, in
which no response of the first requests could be read, so their TTFT held the client's
own sending, and the loop lag of that one second made a short run INVALID.

:class:`SlicedStart` lets waiting workers go :data:`SLICE` at a time, one slice per turn
of the loop, first come first served. Between two slices the loop polls its sockets and
runs its timers, so the first requests' answers are read while the later ones are being
sent. The sends are no later in all than one turn would have made them (the same work,
in order), and each request's ``sent_ns`` is taken at its own send, so the record times
what happened. The workers that resume together after a pause, or wake together when
the target concurrency jumps, pass the same gate, and so do requests that end together:
a steady load's next request goes at once (:meth:`SlicedStart.admit_now`, a count)
unless a slice was already sent in that turn. A lone worker's wait in the gate is one
loop turn.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Final

__all__ = ["SLICE", "SlicedStart", "release_words"]

SLICE: Final = 64
"""Workers let go per turn of the loop: ~6 ms of request sends at ~100 µs each, so the
loop lag timer (0.1 s) and the sockets are served many times over a 10,000-worker
release, while 1,024 workers still go in 16 turns (well under 0.1 s)."""


class SlicedStart:
    """A first-come, first-served gate that lets at most ``per_turn`` waiters go per loop
    turn. One per load generator, used on its own event loop."""

    def __init__(self, per_turn: int = SLICE) -> None:
        if per_turn < 1:
            raise ValueError(f"per_turn must be >= 1, not {per_turn}")
        self.per_turn = per_turn
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._turn_scheduled = False
        self.turns = 0
        """Turns that let at least one waiter go."""
        self.let_go = 0
        """Waiters let go so far."""
        self._admitted = 0
        """Sends :meth:`admit_now` let through in this loop turn."""

    @property
    def waiting(self) -> int:
        """Workers waiting for their slice now."""
        return len(self._waiting)

    def admit_now(self) -> bool:
        """A steady load's next request: True (go now) unless this loop turn already
        sent a slice or workers wait in the gate — then the caller waits its turn in
        :meth:`enter`. Requests that end together (a server that paces every stream on
        one clock ends many in one turn) thus restart a slice per turn as well."""
        if self._admitted >= self.per_turn or self._waiting:
            return False
        if not self._admitted:  # the first this turn: the count starts again next turn
            asyncio.get_running_loop().call_soon(self._next_turn)
        self._admitted += 1
        return True

    def _next_turn(self) -> None:
        self._admitted = 0

    async def enter(self) -> None:
        """Wait for this worker's slice. A cancelled waiter leaves its place to the next."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        if not self._turn_scheduled:
            self._turn_scheduled = True
            asyncio.get_running_loop().call_soon(self._turn)
        await fut

    def _turn(self) -> None:
        # Runs once per loop turn while workers wait: the futures set here wake their
        # workers in the next turn, where this runs again (scheduled after them) for the
        # next slice, so no turn runs more than one slice from the gate. (admit_now lets
        # nobody past those waiting: only in the turn the gate empties can a slice of
        # steady sends join its last slice.)
        waiting = self._waiting
        n = 0
        while waiting and n < self.per_turn:
            fut = waiting.popleft()
            if not fut.done():  # a cancelled waiter takes no place in the slice
                fut.set_result(None)
                n += 1
        if n:
            self.turns += 1
            self.let_go += n
        if waiting:
            asyncio.get_running_loop().call_soon(self._turn)
        else:
            self._turn_scheduled = False


def release_words(workers: int, turns: int, spread_s: float) -> str:
    """The release in words, for its event: ``10,000 workers let go in 157 loop turns
    (at most 64 a turn) over 1.97 s``."""
    return (
        f"{workers:,} workers let go in {turns} loop turns (at most {SLICE} a turn) "
        f"over {spread_s:.2f} s"
    )
