"""Each shard's health for the live snapshot, and the hint to add one.

:class:`ShardHealthReader` reads a :class:`~soak.run.shards.ShardedGenerator`'s
``links`` once a tick (it never writes to them: the links are the coordinator's) and
gives the snapshot's ``shards``: each shard's status, workers, in flight, finished
requests, its last heartbeat's loop lag, its recent behind share and how long since it
was last heard from, with a word when it looks unhealthy (``warning``).

:class:`BehindHint` is the live side of ``client_behind``: once the run's behind share
has stayed over its bound for ``hold_s``, one warning event says the client is the
bottleneck and how many shards to rerun with (:func:`add_shard_words`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final

from soak.judge.verdict import add_shard_words
from soak.record.snapshot import ShardNow
from soak.run.shard_links import ShardLink

__all__ = [
    "BEHIND_WINDOW_S",
    "MIN_SHARD_SAMPLES",
    "SILENT_AFTER_S",
    "BehindHint",
    "ShardHealthReader",
    "shard_view",
]

SILENT_AFTER_S: Final = 5.0
"""A running shard unheard from this long is named silent (it beats once a second);
one never heard from gets twice as long (its imports and its client come first)."""
MIN_SHARD_SAMPLES: Final = 50
"""Socket samples a shard's recent behind share needs before it is given."""
BEHIND_WINDOW_S: Final = 10.0
"""Seconds a shard's behind share looks back over (at least one tick: the snapshot
interval is 0.05 to 60 s, and a shard reports its counts once a second)."""


class ShardHealthReader:
    """Reads the links each tick; remembers only what a heartbeat does not carry (when
    it came, the recent socket samples)."""

    def __init__(
        self,
        max_loop_lag_s: float,
        max_behind: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_lag = max_loop_lag_s
        self._max_behind = max_behind
        self._clock = clock
        self._beat_seen: dict[int, tuple[dict[str, Any], float]] = {}
        """Per shard: the last heartbeat dict seen, and when it was first seen
        (``ShardLink`` keeps no arrival time; a new report is a new dict). The dict
        itself is held and compared by identity: an ``id()`` alone is reused by the
        next dict once the old one is freed, and two beats within one tick then read
        as none."""
        self._unheard_since: dict[int, float] = {}
        """Per running shard never heard from: when the reader first saw it so."""
        self._reads: dict[int, deque[tuple[float, int, int]]] = {}
        """Per shard: (tick time, cumulative samples, hits), back over the window."""

    def read(self, links: Sequence[ShardLink]) -> list[ShardNow]:
        """Each link as the snapshot lists it, in index order."""
        now = self._clock()
        return [self._one(link, now) for link in sorted(links, key=lambda lk: lk.index)]

    def _one(self, link: ShardLink, now: float) -> ShardNow:
        beat: dict[str, Any] = link.beat or {}
        age = self._age(link, beat, now)
        lag = _number(beat.get("lag_s"))
        behind = self._behind(link, now)
        in_flight = beat.get("in_flight") if beat else None
        unheard = self._unheard(link, beat, now)
        return ShardNow(
            index=link.index,
            status=link.status,
            workers=link.workers,
            in_flight=int(in_flight) if isinstance(in_flight, int) else None,
            requests=link.requests,
            loop_lag_p99_s=None if lag is None else round(lag, 4),
            behind_fraction=None if behind is None else round(behind, 4),
            last_heartbeat_age_s=None if age is None else round(age, 1),
            warning=self._warning(link.status, lag, behind, age, unheard),
        )

    def _age(self, link: ShardLink, beat: dict[str, Any], now: float) -> float | None:
        if not beat:
            return None
        seen = self._beat_seen.get(link.index)
        if seen is None or seen[0] is not beat:
            self._beat_seen[link.index] = seen = (beat, now)
        return now - seen[1]

    def _unheard(self, link: ShardLink, beat: dict[str, Any], now: float) -> float | None:
        """How long a running shard has gone without any heartbeat (None: it beat, or
        it is not running)."""
        if beat or link.status != "running":
            self._unheard_since.pop(link.index, None)
            return None
        return now - self._unheard_since.setdefault(link.index, now)

    def _behind(self, link: ShardLink, now: float) -> float | None:
        """Its share over the last ``BEHIND_WINDOW_S`` (cumulative counts, by tick)."""
        series = self._reads.setdefault(link.index, deque())
        series.append((now, int(link.q_samples), int(link.q_hits)))
        while len(series) > 1 and series[1][0] <= now - BEHIND_WINDOW_S:
            series.popleft()  # the oldest kept is the last at or before the window's start
        samples = series[-1][1] - series[0][1]
        hits = series[-1][2] - series[0][2]
        if samples < MIN_SHARD_SAMPLES:
            return None
        return max(0.0, min(1.0, hits / samples))

    def _warning(
        self,
        status: str,
        lag: float | None,
        behind: float | None,
        age: float | None,
        unheard: float | None,
    ) -> str | None:
        if status != "running":
            return None  # lost says itself; done and starting are no fault
        if age is not None and age >= SILENT_AFTER_S:
            return f"silent {age:.0f} s"
        if unheard is not None and unheard >= 2 * SILENT_AFTER_S:
            return f"silent {unheard:.0f} s"
        if lag is not None and lag > self._max_lag:
            return f"lag {lag * 1000:.0f} ms"
        if behind is not None and behind > self._max_behind:
            return f"behind {behind:.0%}"
        return None


def shard_view(gen: Any, reader: ShardHealthReader | None) -> list[ShardNow] | None:
    """The snapshot's ``shards`` for a sharded run's generator; None for any other (the
    key is then absent from the line)."""
    links = getattr(gen, "links", None)
    if reader is None or not links:
        return None
    return reader.read(links)


class BehindHint:
    """One warning event per stretch of the run's behind share over its bound that has
    lasted ``hold_s``: the live form of ``client_behind``'s advice."""

    def __init__(self, shards: int, hold_s: float) -> None:
        self._shards = shards
        self._hold_s = hold_s
        self._told_for: float | None = None
        """The stretch (its start) already told of."""

    def check(self, since: float | None, now_s: float, share: float | None) -> str | None:
        """The event's words when the stretch that began at ``since`` (None: none now)
        has just lasted ``hold_s``; None otherwise, and again for the same stretch."""
        if since is None or now_s - since < self._hold_s or self._told_for == since:
            return None
        self._told_for = since
        pct = "?" if share is None else f"{share:.0%}"
        return (
            f"the client found data already waiting in the socket on {pct} of sampled "
            f"reads for {now_s - since:.0f} s: {add_shard_words(self._shards)}"
        )


def _number(v: object) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0:
        return float(v)
    return None
