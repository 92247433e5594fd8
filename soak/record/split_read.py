"""One read of a journal in byte ranges, over forked readers, put back together exactly.

A 1-hour soak's ``requests.jsonl`` is a gigabyte, and its read is most of what ``verify``
and ``recover`` cost: tens of µs a line (the parse, the gaps, the tallies), whatever the
disk. That work splits: each reader takes the lines that begin in its byte range
(:class:`~soak.record.journal_scan.JournalScan`), this process the first range and one
forked process each of the others, and the ranges' results are joined in journal order.

Two kinds of read use it:

- :func:`read_in_ranges`, the general case: a function of a range, run on every range;
  the caller joins what they return (``recover``'s first read,
  :class:`soak.after.request_facts.RequestFacts`).
- :func:`read_load_split`, the figures' read (:func:`soak.record.summary.read_load`): its
  tallies are built here before the fork, so each reader holds the same empty ones; a
  later range's reader hands back its tallies' state (:meth:`RangeTally.part`), and this
  process joins each into its own (:meth:`RangeTally.join`), range after range. Every
  tally's join is exact: the figures are the ones one read makes, sample for sample (the
  samples in journal order, the gaps re-indexed into this read's
  :class:`~soak.record.tally_samples.ItlShare`), which the tests hold for every tally.

Readers are forked, never spawned (a spawned one would import the caller's ``__main__``,
the whole CLI: seconds), and only from a process with no other thread (a fork copies a
thread's half-done state, a held lock). A reader that cannot start or dies costs only
time: its range is read here, in order, and the figures are the same.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar, cast

from soak.record.journal_scan import JournalScan
from soak.record.tally_samples import GapRegion, ShareJoin

__all__ = [
    "MAX_READERS",
    "READERS_ENV",
    "SPLIT_FROM_BYTES",
    "LineTally",
    "RangeTally",
    "byte_ranges",
    "env_readers",
    "join_ranges",
    "read_in_ranges",
    "read_load_split",
    "readers_for",
    "split_of",
    "usable_cores",
]

SPLIT_FROM_BYTES = 128 * 2**20
"""Below this a journal is read in this process: a reader's start (~0.1 s) and the hand-back
of its state would cost about what it saves."""
MAX_READERS = 8
"""The most processes that read one journal (past that the disk, not the parse, bounds)."""
READERS_ENV = "SOAKTOP_READERS"
"""How many processes read a journal, whatever its size (1: never split, as on a host
short of memory; N: split in N, as the tests do to a small journal). Unset: the default,
:func:`readers_for`."""

T = TypeVar("T")
U = TypeVar("U")


def usable_cores() -> int:
    """Cores this process may run on (its affinity; the machine's count where there is
    no affinity call)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def env_readers() -> int | None:
    """The readers :data:`READERS_ENV` asks for (None: unset). Raises ``ValueError``
    naming the variable, its value and what is allowed (the CLI says it and stops)."""
    value = os.environ.get(READERS_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or not 1 <= int(value) <= MAX_READERS:
        raise ValueError(
            f"{READERS_ENV}={value!r}: the processes that read a journal are a whole "
            f"number from 1 to {MAX_READERS} (unset: one per spare core from "
            f"{SPLIT_FROM_BYTES // 2**20} MB)"
        )
    return int(value)


def readers_for(size: int) -> int:
    """How many processes read a journal of ``size`` bytes: :data:`READERS_ENV` where it
    is set; else one below :data:`SPLIT_FROM_BYTES`, and above it one per core this
    process may use, at most :data:`MAX_READERS` and one per half of
    :data:`SPLIT_FROM_BYTES`."""
    if (forced := env_readers()) is not None:
        return forced
    if size < SPLIT_FROM_BYTES:
        return 1
    return max(1, min(usable_cores(), MAX_READERS, size // (SPLIT_FROM_BYTES // 2)))


def byte_ranges(size: int, k: int) -> list[tuple[int, int | None]]:
    """``k`` consecutive ranges ``[start, end)`` of a file of ``size`` bytes, the last
    one open (to the end, wherever the end is when it gets there)."""
    starts = [size * i // k for i in range(k)]
    return [*itertools.pairwise(starts), (starts[-1], None)]


def split_of(path: Path, readers: int | None = None) -> tuple[int, int]:
    """The journal's size and how many processes read it: ``readers``, or by default
    :func:`readers_for` its size; 1 for an empty or missing journal, or where
    :func:`can_fork` is false (then it is one read here, as ever)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        size = 0
    k = max(1, readers if readers is not None else readers_for(size))
    return size, 1 if size == 0 or not can_fork() else k


def can_fork() -> bool:
    """Whether readers may be forked from this process (no other thread: module doc)."""
    return threading.active_count() == 1


Range = tuple[int, int | None]


def read_in_ranges(
    size: int,
    k: int,
    first: Callable[[int, int | None], T],
    later: Callable[[int, int | None], U],
) -> tuple[T, list[U | None]]:
    """``first`` on the first of ``k`` byte ranges of a ``size``-byte journal, here, while
    ``later`` runs on each of the others in a reader forked for it alone; what each
    returned, in journal order, None for a range whose reader could not start or died
    (read it here, in its turn). An exception ``later`` raised is raised here, as
    ``first``'s would be. Call it only where :func:`can_fork`: every reader is forked
    before this process reads a line, so each starts from the state the caller built
    (its tallies empty), and each reads one range only."""
    first_range, *rest = byte_ranges(size, k)
    readers: list[_Reader[U] | None] = []
    try:
        for start, end in rest:
            readers.append(_Reader.fork(later, start, end))
        here = first(*first_range)
        return here, [None if r is None else r.result() for r in readers]
    finally:
        for r in readers:
            if r is not None:
                r.close()


def _in_reader(later: Callable[[int, int | None], U], start: int, end: int | None) -> U:
    """What a forked reader runs (a seam the tests replace to lose a reader)."""
    return later(start, end)


class _Reader(Generic[U]):
    """One forked reader of one range and the pipe its result comes back on."""

    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd

    @classmethod
    def fork(
        cls, later: Callable[[int, int | None], U], start: int, end: int | None
    ) -> _Reader[U] | None:
        """A reader of ``[start, end)`` (None: no process to be had, a limit or memory)."""
        try:
            r, w = os.pipe()
        except OSError:
            return None
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return None
        if pid == 0:  # the reader: one range, its result down the pipe, and out
            status = 1
            try:
                os.close(r)
                with os.fdopen(w, "wb") as out:
                    try:
                        sent: tuple[str, Any] = ("ok", _in_reader(later, start, end))
                    except Exception as e:  # raised where the caller reads: its kind kept
                        sent = ("raised", e)
                    pickle.dump(sent, out, protocol=pickle.HIGHEST_PROTOCOL)
                status = 0
            finally:
                os._exit(status)  # never the caller's exit handlers: this is a copy of it
        os.close(w)
        return cls(pid, r)

    def result(self) -> U | None:
        """What the reader returned (None: it died before all of it came); what it
        raised is raised here."""
        try:
            with os.fdopen(self.fd, "rb") as got:
                self.fd = -1
                kind, value = pickle.load(got)
        except (EOFError, OSError, pickle.UnpicklingError):
            return None  # killed (memory, a signal) mid-read or mid-send
        finally:
            self._reap()
        if kind == "raised":
            raise value
        return cast("U", value)

    def close(self) -> None:
        """Stop a reader whose result is no longer wanted (the caller's read raised)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self._reap()

    def _reap(self) -> None:
        if self.pid:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = 0


class RangeTally(Protocol):
    """A tally of one read that can be split by range: each later range's reader fills
    its own copy (after :meth:`begin_later_range`) and hands back :meth:`part`, which
    this process's tally :meth:`join` s, range after range in journal order, to hold what
    one read of all the lines would."""

    def begin_later_range(self) -> None:
        """In a reader of a later range, before its first line: keep what a join needs
        that one read would not (what depends on the lines before the range)."""

    def part(self) -> Any:
        """This reader's state, to be sent back (picklable)."""

    def join(self, part: Any, shares: ShareJoin) -> None:
        """The next range's :meth:`part` added, as if its lines had been offered here;
        ``shares`` re-indexes its gaps into this read's share(s)."""


class LineTally(RangeTally, Protocol):
    """A range tally offered every line of the read, the warm-up's included (a window
    series, the lines by shard: :func:`soak.judge.load_pass.load_figures`' ``every``)."""

    def offer(self, line: dict[str, Any]) -> None:
        """One line of the journal."""


def read_load_split(
    path: Path,
    read_range: Callable[[JournalScan, int, int | None], None],
    tallies: Sequence[RangeTally],
    scan: JournalScan,
    readers: int | None = None,
) -> None:
    """The figures' read of ``path`` split in ranges: ``read_range(scan, start, end)``
    offers the lines of one range to ``tallies`` (and counts them in ``scan``); this
    process reads the first into ``scan``, forked readers the others, and their tallies
    and scans are joined into ``tallies`` and ``scan`` in order. ``readers``: how many
    (default :func:`readers_for` the journal's size; one where :func:`can_fork` is false:
    then it is one read, as ever)."""
    size, k = split_of(path, readers)
    if k == 1:
        read_range(scan, 0, None)
        return

    later_ranges = byte_ranges(size, k)[1:]
    regions = _gap_regions(later_ranges, size)

    def later(start: int, end: int | None) -> LaterRange:
        # The tallies' gaps go back through this range's region (when their part is
        # pickled, after this returns): made before the fork, so mapped here too.
        GapRegion.outbound = regions.get(start)
        for tally in tallies:
            tally.begin_later_range()
        mine = JournalScan(scan.name)
        read_range(mine, start, end)
        return mine, [tally.part() for tally in tallies]

    try:
        _, parts = read_in_ranges(size, k, lambda a, b: read_range(scan, a, b), later)
        join_ranges(later_ranges, parts, read_range, tallies, scan)
    finally:
        for region in regions.values():
            region.close()


LaterRange = tuple[JournalScan, list[Any]]
"""What a later range's reader hands back: its scan and each tally's part."""


def join_ranges(
    ranges: Sequence[Range],
    parts: Sequence[LaterRange | None],
    read_range: Callable[[JournalScan, int, int | None], None],
    tallies: Sequence[RangeTally],
    scan: JournalScan,
) -> None:
    """The later ``ranges``' ``parts`` joined into ``tallies`` and ``scan`` (which hold
    the first range's lines), in journal order; a range whose reader was lost (None) is
    read here in its turn, so what follows it still joins onto one read's state."""
    for (start, end), got in zip(ranges, parts, strict=True):
        if got is None:
            mine = JournalScan(scan.name)
            read_range(mine, start, end)
        else:
            mine, states = got
            shares = ShareJoin()
            for tally, state in zip(tallies, states, strict=True):
                tally.join(state, shares)
        scan.join(mine)


def _gap_regions(ranges: Sequence[Range], size: int) -> dict[int, GapRegion]:
    """A shared region for each later range's gaps, by the range's start: twice its
    bytes, as many C ints as the range could hold gaps (each is a digit and a comma at
    least). None where the memory cannot be mapped: that range's gaps go inline."""
    regions: dict[int, GapRegion] = {}
    for start, end in ranges:
        try:
            region = GapRegion(start, 2 * ((end or size) - start))
        except (OSError, ValueError):
            continue
        regions[start] = GapRegion.inbound[start] = region
    return regions
