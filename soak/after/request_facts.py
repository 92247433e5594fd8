"""What ``recover`` needs of ``requests.jsonl`` before it can measure the load.

The load's timing (how many lines the judged load journaled, when the last one ended)
and an open loop's release (the first intended send) come before the figures, which are
measured over that timing; the lines in flight at death and the journal's damage are
said beside them. All of it is one read (:meth:`RequestFacts.read`), so ``recover``
parses the request journal twice in all — this and the figures' read — where each of
these used to be a read of its own: a gigabyte's parse is seconds each time.

This read only counts, so it splits (:func:`soak.record.split_read.read_in_ranges`): a
journal of a few hundred MB is read in byte ranges by as many processes as the machine
has cores for, and the ranges' facts are joined: the same facts, the same damage by the
same line numbers, as one read. (The figures' read splits too:
:func:`soak.record.split_read.read_load_split`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from soak.record.journal_scan import JournalScan
from soak.record.split_read import read_in_ranges, split_of

__all__ = ["RequestFacts"]


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
        journal of :data:`~soak.record.split_read.SPLIT_FROM_BYTES` or more, else one)."""
        path = run_dir / "requests.jsonl"
        size, k = split_of(path, readers)
        if k == 1:
            return _joined([_read_range(path, 0, None)])

        def read(start: int, end: int | None) -> tuple[RequestFacts, JournalScan]:
            return _read_range(path, start, end)

        first, rest = read_in_ranges(size, k, read, read)
        if any(part is None for part in rest):
            # A reader that could not start or died (memory, a signal): one read here
            # still gives every fact; only the time is lost.
            return _joined([_read_range(path, 0, None)])
        return _joined([first, *(part for part in rest if part is not None)])


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
