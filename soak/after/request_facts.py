"""What ``recover`` needs of ``requests.jsonl`` before it can measure the load.

The load's timing (how many lines the judged load journaled, when the last one ended)
and an open loop's release (the first intended send) come before the figures, which are
measured over that timing; the lines in flight at death and the journal's damage are
said beside them. All of it is one read (:meth:`RequestFacts.read`), so ``recover``
parses the request journal twice in all — this and the figures' read — where each of
these used to be a read of its own: a gigabyte's parse is seconds each time.

This read only counts, so it splits: a journal of :data:`SPLIT_FROM_BYTES` or more is
read in byte ranges by as many processes as the machine has cores for (at most
:data:`MAX_READERS`; this process reads the first range itself, the others are forked,
and only from a process with no other thread), and the ranges' facts are joined: the
same facts, the same damage by the same line numbers, as one read.
"""

from __future__ import annotations

import itertools
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from soak.record.journal_scan import JournalScan
from soak.run.config_shards import usable_cores

__all__ = ["MAX_READERS", "SPLIT_FROM_BYTES", "RequestFacts"]

SPLIT_FROM_BYTES = 128 * 2**20
"""Below this a journal is read in this process: a reader's start (~0.1 s) would cost
about what it saves."""
MAX_READERS = 8
"""The most processes that read one journal (past that the disk, not the parse, bounds)."""


@dataclass
class RequestFacts:
    """Counts and instants of the request journal's JSON-object lines."""

    every_line: int = 0
    """Every line, the warm-up's included."""
    judged: int = 0
    """The judged load's lines (every line but the warm-up's)."""
    last_end: float = 0.0
    """The latest ``end_s`` (or ``sent_s`` where a line has no end): 0.0 for none."""
    first_intended: float | None = None
    """The earliest ``intended_s`` (warm-up included): an open loop's release."""
    problems: list[str] = field(default_factory=list)
    """Lines that are not JSON objects, a torn last line: in ``journal_problems``' words."""

    @classmethod
    def read(cls, run_dir: Path, *, readers: int | None = None) -> RequestFacts:
        """The facts of ``run_dir``'s ``requests.jsonl`` (none: a journal not there).
        ``readers``: how many processes read it (default: one per spare core for a
        journal of :data:`SPLIT_FROM_BYTES` or more, else one)."""
        path = run_dir / "requests.jsonl"
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        k = max(1, readers if readers is not None else _readers(size))
        # The readers are forked (a spawned one would import the caller's __main__: the
        # whole CLI, seconds), so only from a process with no other thread to copy mid-act.
        if k == 1 or size == 0 or threading.active_count() > 1:
            return _joined([_read_range(path, 0, None)])
        first_range, *rest_ranges = byte_ranges(size, k)
        try:
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(k - 1, mp_context=ctx) as pool:
                rest = [pool.submit(_read_range, path, a, b) for a, b in rest_ranges]
                first = _read_range(path, *first_range)
                return _joined([first, *(f.result() for f in rest)])
        except (BrokenProcessPool, OSError):
            # A reader that could not start or died (memory, a signal): one read here
            # still gives every fact; only the time is lost.
            return _joined([_read_range(path, 0, None)])


def _readers(size: int) -> int:
    if size < SPLIT_FROM_BYTES:
        return 1
    return max(1, min(usable_cores(), MAX_READERS, size // (SPLIT_FROM_BYTES // 2)))


def byte_ranges(size: int, k: int) -> list[tuple[int, int | None]]:
    """``k`` consecutive ranges ``[start, end)`` of a file of ``size`` bytes, the last
    one open (to the end, wherever the end is when it gets there)."""
    starts = [size * i // k for i in range(k)]
    return [*itertools.pairwise(starts), (starts[-1], None)]


def _read_range(path: Path, start: int, end: int | None) -> tuple[RequestFacts, JournalScan]:
    """The facts of the lines that begin in ``[start, end)`` and their scan (its line
    numbers from the range's first line)."""
    scan = JournalScan("requests.jsonl")
    every = judged = 0
    last_end = 0.0
    first: float | None = None
    for line in scan.lines(path, start, end):  # a RequestLine; read as a dict
        every += 1
        judged += line.get("phase") != "warmup"
        last_end = max(last_end, line.get("end_s") or line.get("sent_s") or 0.0)
        at = line.get("intended_s")
        if isinstance(at, int | float) and (first is None or at < first):
            first = float(at)
    return RequestFacts(every, judged, last_end, first), scan


def _joined(parts: list[tuple[RequestFacts, JournalScan]]) -> RequestFacts:
    """The facts of consecutive ranges as one read's: sums, the latest end, the earliest
    intended send, and the damage with its line numbers across the whole journal."""
    firsts = [f.first_intended for f, _ in parts if f.first_intended is not None]
    return RequestFacts(
        every_line=sum(f.every_line for f, _ in parts),
        judged=sum(f.judged for f, _ in parts),
        last_end=max((f.last_end for f, _ in parts), default=0.0),
        first_intended=min(firsts) if firsts else None,
        problems=JournalScan.joined([scan for _, scan in parts]).problems(),
    )
