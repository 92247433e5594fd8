"""A sharded open loop's ``in_flight_peak``: the merged run's, measured, not a bound.

Each shard knows its own peak; their sum is only an upper bound on the run's (shard 0's
burst and shard 1's need not overlap). The run's peak is a property of the merged
requests: the most whose ``[sent, end)`` spans overlap — what one process's counter
would have seen, and what a sweep over the merged journal finds. :class:`MergedPeak`
keeps that sweep as the results arrive, bounded in memory: each shard's report carries
``settled_ns``, an instant before which every request it sent has ended and its result
line was written ahead of the report (:meth:`soak.run.shard_main.ShardOpenLoop.settled_ns`);
below the least of them every start and end is known, so the sweep runs up to it and
forgets what it passed. A shard that is done (or lost) holds nothing back.

The live figure lags the shards' last reports (about a heartbeat, plus the longest
request in flight); once every shard is done it is the journal's exact peak. A request
with no end time (cut before it began) was never in flight and is not counted.
"""

from __future__ import annotations

import math

__all__ = ["MergedPeak"]


class MergedPeak:
    """The peak of overlapping ``[sent_ns, end_ns)`` spans, swept as far as it is known
    (ties: a request that ends as another is sent frees its slot first, as one process's
    counter does)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        """Sent instants not yet swept (the coordinator appends, per result)."""
        self.ends: list[int] = []
        """End instants not yet swept."""
        self.peak = 0
        self._level = 0
        """Requests in flight at the last instant swept."""
        self._swept_ns: float = -math.inf

    def add(self, sent_ns: int, end_ns: int | None) -> None:
        """One finished request (coordinator's clock)."""
        if end_ns is not None:
            self.starts.append(sent_ns)
            self.ends.append(end_ns)

    def settle(self, upto_ns: float) -> int:
        """Sweep every start and end before ``upto_ns`` (all are known there); the peak."""
        if upto_ns <= self._swept_ns:
            return self.peak
        self._swept_ns = upto_ns
        starts = sorted(t for t in self.starts if t < upto_ns)
        ends = sorted(t for t in self.ends if t < upto_ns)
        # In place: the coordinator's per-result code holds these very lists.
        self.starts[:] = [t for t in self.starts if t >= upto_ns]
        self.ends[:] = [t for t in self.ends if t >= upto_ns]
        level, peak, j = self._level, self.peak, 0
        for t in starts:
            while j < len(ends) and ends[j] <= t:
                level -= 1
                j += 1
            level += 1
            peak = max(peak, level)
        self._level = level - (len(ends) - j)
        self.peak = peak
        return peak
