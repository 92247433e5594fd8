"""How a load tally holds its samples: typed arrays, and the gaps held once per read.

- ``ItlShare``: the inter-token gaps of every line of one read, stored once for the whole
  load's tally and all its slices (each keeps only an index per line), in whole µs;
- ``samples_view``: a tally's typed array of seconds as a numpy view (no copy);
- ``gap_stats``: the latency stats of gaps in µs the caller gives up, their order
  statistics selected in place (no float64 copy of the gaps at the read's end).

Used by :mod:`soak.record.summary` (``LoadTally``) and the slice families built on it.
"""

from __future__ import annotations

import mmap
from array import array
from typing import Any

import numpy as np

from loadgen.stats import LatencyStats, PercentileMethod, summarize_owned

__all__ = ["GapRegion", "ItlShare", "ShareJoin", "gap_stats", "samples_view", "shifted"]


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

    def extend(self, later: ItlShare) -> int:
        """The gaps of ``later`` (a later byte range's share of the same read,
        :mod:`soak.record.split_read`) appended after this share's, as if its lines had
        been stored here; the index its first line takes here (add it to each of its
        tallies' indices: :func:`shifted`). A share of float64 gaps on either side makes
        this one float64, as one read that met that gap would have."""
        base = len(self.starts)
        if not later.starts:
            return base
        buf, theirs = self.gaps_us, later.gaps_us
        if buf.typecode != theirs.typecode:
            if buf.typecode == "i":
                self.gaps_us = buf = array("d", buf)
            theirs = array("d", theirs)
        starts = np.frombuffer(later.starts, dtype=np.int64) + len(buf)
        self.starts.frombytes(starts.tobytes())
        buf.extend(theirs)
        self.line = None
        return base

    def __getstate__(self) -> tuple[Any, ...]:
        # Sent back by a later range's reader (its gaps, not the last line it held):
        # through the shared region made for it where they fit (GapRegion), else inline.
        buf, region = self.gaps_us, GapRegion.outbound
        at = region.put(buf) if region is not None and buf else None
        if at is None:
            return buf, self.starts
        return buf.typecode, region.key, at, len(buf), self.starts  # type: ignore[union-attr]

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.line = None
        if len(state) == 2:
            self.gaps_us, self.starts = state
            return
        typecode, key, at, count, self.starts = state
        self.gaps_us = GapRegion.inbound[key].take(typecode, at, count)

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


class GapRegion:
    """Shared memory a later byte range's reader hands its shares' gaps back through
    (:mod:`soak.record.split_read`): made before the readers are forked, so each one and
    this process map the same pages. Sent inline, a quarter of a gigabyte of gaps costs
    seconds of copies (pickled, piped, unpickled); through the region it is one copy
    out and one copy in. Gaps that do not fit go inline (a share of float64 gaps)."""

    outbound: GapRegion | None = None
    """In a reader: the region its shares are sent through (None: inline)."""
    inbound: dict[int, GapRegion] = {}  # noqa: RUF012 -- the process's registry, by key
    """In this process: the regions of the read under way, by key."""

    __slots__ = ("key", "map", "used")

    def __init__(self, key: int, size: int) -> None:
        self.key = key
        self.map = mmap.mmap(-1, max(size, 1))  # shared, anonymous: pages only as written
        self.used = 0

    def put(self, gaps: array[Any]) -> int | None:
        """Copy ``gaps`` into the region; where they begin (None: they do not fit)."""
        n = len(gaps) * gaps.itemsize
        if self.used + n > len(self.map):
            return None
        at, self.used = self.used, self.used + n
        self.map[at : at + n] = memoryview(gaps).cast("B")
        return at

    def take(self, typecode: str, at: int, count: int) -> array[Any]:
        """The gaps a reader put at ``at``, copied out (the region can then be closed)."""
        out: array[Any] = array(typecode)
        with memoryview(self.map) as whole, whole[at : at + count * out.itemsize] as part:
            out.frombytes(part)
        return out

    def close(self) -> None:
        GapRegion.inbound.pop(self.key, None)
        self.map.close()


class ShareJoin:
    """Joins one later range's shares into this read's (:meth:`ItlShare.extend`), each
    once however many of its tallies point into it: :meth:`base` gives the index its
    first line took here."""

    __slots__ = ("_bases",)

    def __init__(self) -> None:
        self._bases: dict[int, tuple[ItlShare, int]] = {}

    def base(self, mine: ItlShare, theirs: ItlShare) -> int:
        """Where ``theirs`` (a later range's copy of ``mine``) begins in ``mine``."""
        got = self._bases.get(id(theirs))
        if got is None:  # the share is kept with its base: its id cannot be reused
            got = self._bases[id(theirs)] = (theirs, mine.extend(theirs))
        return got[1]


def shifted(indices: array[int], base: int) -> array[int]:
    """A later range's line indices into its share, as indices into the share it was
    joined to at ``base``."""
    if not base or not indices:
        return indices
    moved = np.frombuffer(indices, dtype=np.uintc).astype(np.int64) + base
    if moved.max() > np.iinfo(np.uintc).max:
        raise OverflowError("more than 2**32 lines with gaps in one read")
    return array("I", moved.astype(np.uintc).tobytes())


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
