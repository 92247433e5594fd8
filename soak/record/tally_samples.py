"""How a load tally holds its samples: typed arrays, and the gaps held once per read.

- ``ItlShare``: the inter-token gaps of every line of one read, stored once for the whole
  load's tally and all its slices (each keeps only an index per line), in whole µs;
- ``samples_view``: a tally's typed array of seconds as a numpy view (no copy);
- ``gap_stats``: the latency stats of gaps in µs the caller gives up, their order
  statistics selected in place (no float64 copy of the gaps at the read's end).

Used by :mod:`soak.record.summary` (``LoadTally``) and the slice families built on it.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from loadgen.stats import LatencyStats, PercentileMethod, summarize_owned

__all__ = ["ItlShare", "gap_stats", "samples_view"]


class ItlShare:
    """The inter-token gaps of every line of one read, held once for all its tallies: the
    gaps are by far the most numerous samples (one per token), so the whole load's tally
    and its slices' each keep only an index per line into this one buffer
    (:meth:`of`), and each tally's gaps are taken from it when its summary is made
    (:meth:`micros`, then :func:`gap_stats`).

    Stored as the journal has them, whole microseconds in a C ``int`` (4 bytes a gap);
    only the figures selected are converted to seconds: the same float64 division the
    figures always took, so the same values. A gap the ``int`` cannot hold (over ~35
    minutes) or one not a whole number widens the buffer to float64 for the rest of the
    read, exact still, so no gap is ever clipped or rounded."""

    __slots__ = ("gaps_us", "line", "starts")

    def __init__(self) -> None:
        self.line: dict[str, Any] | None = None
        self.gaps_us: array[Any] = array("i")
        """Every gap of the read, µs, line after line."""
        self.starts: array[int] = array("q")
        """Where each line's gaps begin in ``gaps_us`` (a line ends where the next one
        begins)."""

    def of(self, line: dict[str, Any], gaps: list[int]) -> int:
        """The index of ``line``'s gaps in this share (stored on the first tally's call:
        ``fromlist``, at C speed, and all or nothing)."""
        if line is not self.line:  # the last line is held: an identity cannot be reused
            self.line = line
            buf = self.gaps_us
            self.starts.append(len(buf))
            try:
                buf.fromlist(gaps)
            except (OverflowError, TypeError):  # past a C int, or not a whole number
                if buf.typecode == "d":
                    raise
                self.gaps_us = buf = array("d", buf)
                buf.fromlist(gaps)
        return len(self.starts) - 1

    def all_micros(self) -> np.ndarray:
        """Every gap of the share, in µs: a new array, the caller's own."""
        return self._buffer().copy()

    def micros(self, lines: array[int]) -> np.ndarray:
        """The gaps of the lines at ``lines`` (indices from :meth:`of`, each once, as a
        tally takes a line once), in µs: a new array, the caller's own."""
        gaps = self._buffer()
        if len(lines) == len(self.starts):
            return gaps.copy()
        starts = np.frombuffer(self.starts, dtype=np.int64)
        ends = np.append(starts[1:], gaps.size)
        taken = np.frombuffer(lines, dtype=np.uintc)
        if 8 * len(lines) < len(self.starts):
            # A few lines of many (a window of an hour): gather their runs of gaps, at
            # 8 bytes a gap taken, rather than a mark per gap of the whole share.
            first, lengths = starts[taken], ends[taken] - starts[taken]
            before = np.cumsum(lengths) - lengths  # where each run lands in the result
            at = np.repeat(first - before, lengths) + np.arange(int(lengths.sum()))
            return gaps[at]
        # A slice's lines: mark each one's first gap +1 and the gap after its last −1;
        # the running sum is then 1 on exactly its gaps (1 byte a gap, not an index).
        marks = np.zeros(gaps.size + 1, dtype=np.int8)
        marks[starts[taken]] = 1
        marks[ends[taken]] -= 1
        return gaps[np.cumsum(marks[:-1], dtype=np.int8).view(np.bool_)]

    def _buffer(self) -> np.ndarray:
        """The share's gaps as an array: a view, to be copied before the share grows
        (an exported buffer cannot be resized)."""
        buf = self.gaps_us
        return np.frombuffer(buf, dtype=np.intc if buf.typecode == "i" else np.float64)


def gap_stats(gaps_us: np.ndarray, method: PercentileMethod) -> LatencyStats:
    """The latency stats, in seconds, of gaps in µs that the caller owns and gives up
    (from :meth:`ItlShare.micros`): the order statistics selected in place among the
    C ints (:func:`loadgen.stats.summarize_owned`), without a float64 copy of them —
    for the gaps (one per token of the load) that would double the read's peak memory
    at its end."""
    return summarize_owned(gaps_us, method, unit=1e6)


def samples_view(values: array[float]) -> np.ndarray:
    """A tally's samples as an array (a view: summarize selects from a copy)."""
    return np.frombuffer(values, dtype=np.float64)
