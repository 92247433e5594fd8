"""How a load tally holds its samples: typed arrays, and the gaps held once per read.

- ``ItlShare``: the inter-token gaps of every line of one read, stored once for the whole
  load's tally and all its slices (each keeps only an index per line), in whole µs;
- ``samples_view``: a tally's typed array of seconds as a numpy view (no copy);
- ``stats_of_owned``: the latency stats of an array the caller gives up, its order
  statistics selected in place (no second copy of the gaps at the read's end).

Used by :mod:`soak.record.summary` (``LoadTally``) and the slice families built on it.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np

from loadgen.stats import LatencyStats, PercentileMethod, summarize_owned

__all__ = ["ItlShare", "samples_view", "stats_of_owned"]


class ItlShare:
    """The inter-token gaps of every line of one read, held once for all its tallies: the
    gaps are by far the most numerous samples (one per token), so the whole load's tally
    and its slices' each keep only an index per line into this one buffer
    (:meth:`of`), and each tally's gaps are taken from it when its summary is made
    (:meth:`seconds`).

    Stored as the journal has them, whole microseconds in a C ``int`` (4 bytes a gap),
    converted to seconds once at the end, vectorised: the same float64 division the
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

    def all_seconds(self) -> np.ndarray:
        """Every gap of the share, in seconds: a new float64 array, the caller's own."""
        buf = self.gaps_us
        seconds = np.frombuffer(buf, dtype=np.intc if buf.typecode == "i" else np.float64)
        return _to_seconds(seconds)

    def seconds(self, lines: array[int]) -> np.ndarray:
        """The gaps of the lines at ``lines`` (indices from :meth:`of`, each once, as a
        tally takes a line once), in seconds: a new float64 array, the caller's own."""
        buf = self.gaps_us
        gaps = np.frombuffer(buf, dtype=np.intc if buf.typecode == "i" else np.float64)
        if len(lines) < len(self.starts):
            # A slice's lines: mark each one's first gap +1 and the gap after its last −1;
            # the running sum is then 1 on exactly its gaps (1 byte a gap, not an index).
            starts = np.frombuffer(self.starts, dtype=np.int64)
            ends = np.append(starts[1:], gaps.size)
            taken = np.frombuffer(lines, dtype=np.uintc)
            marks = np.zeros(gaps.size + 1, dtype=np.int8)
            marks[starts[taken]] = 1
            marks[ends[taken]] -= 1
            gaps = gaps[np.cumsum(marks[:-1], dtype=np.int8).view(np.bool_)]
        return _to_seconds(gaps)


def _to_seconds(gaps_us: np.ndarray) -> np.ndarray:
    """Gaps in µs as float64 seconds: a copy always (the share's buffer stays as is)."""
    seconds = gaps_us.astype(np.float64)
    seconds /= 1e6
    return seconds


def stats_of_owned(values: np.ndarray, method: PercentileMethod) -> LatencyStats:
    """:func:`loadgen.stats.summarize` of an array the caller owns and gives up, its
    order statistics selected in place: the same figures without summarize's copy, which
    for the gaps (one per token of the load) would double the read's peak memory at its
    end."""
    return summarize_owned(values, method)


def samples_view(values: array[float]) -> np.ndarray:
    """A tally's samples as an array (a view: summarize selects from a copy)."""
    return np.frombuffer(values, dtype=np.float64)
