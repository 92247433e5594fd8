"""One read of a journal that also says what in it is damaged.

``verify`` and ``recover`` need two things of ``requests.jsonl``: every JSON-object line
(the figures) and the lines that are not one (the notes, by line number). Read apart,
that is two parses of the journal, and a 1-hour soak's request journal is a gigabyte
whose parse costs seconds each time: :class:`JournalScan` yields the objects as
:func:`soak.record.journal.read_jsonl` does and counts the damage as it goes, in the
words :func:`soak.record.run_dir.journal_problems` says (which is built on it).

A scan may read one byte range of the journal (the lines that begin in it), so a
gigabyte can be read by several processes at once; :meth:`JournalScan.joined` puts the
ranges' scans back together, their line numbers as one read of the whole would say them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

__all__ = ["JournalScan"]


class JournalScan:
    """The lines of one journal, read once (:meth:`lines`), and what was wrong with them
    (:meth:`problems`): lines that are not JSON objects, by number, and a torn last line
    (no newline: a writer killed mid-line). Each line is parsed once."""

    __slots__ = ("_started", "bad", "count", "done", "name", "torn")

    def __init__(self, name: str) -> None:
        self.name = name
        """The journal's file name, as the problems say it."""
        self.bad: list[int] = []
        """Line numbers (1-based, from the range's first line) that are not JSON objects."""
        self.count = 0
        """Lines read, sound or not (a torn last line not counted)."""
        self.torn = False
        self.done = False
        """The whole file (or its range) has been read (a missing file: read, empty)."""
        self._started = False

    def lines(self, path: Path, start: int = 0, end: int | None = None) -> Iterator[dict[str, Any]]:
        """Every complete JSON-object line of ``path`` (the journal :attr:`name` names),
        in order; a missing file has none. ``start``/``end``: only the lines that begin
        at a byte offset in ``[start, end)`` (a line that begins before ``start`` is the
        previous range's, however far it reaches). Read once: a scan is of one read."""
        if self._started:
            raise RuntimeError(f"{self.name}: a JournalScan reads its journal once")
        self._started = True
        try:
            fh = path.open("rb")
        except FileNotFoundError:
            self.done = True
            return
        with fh:
            pos = start
            if start:
                fh.seek(start - 1)
                # The rest of the line under way at start (just its newline when one
                # ended at start - 1): the previous range's.
                pos += len(fh.readline()) - 1
            for raw in fh:
                if end is not None and pos >= end:
                    break
                pos += len(raw)
                if not raw.endswith(b"\n"):
                    self.torn = True  # the line being written when the writer died
                    break
                self.count += 1
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    obj = None
                if isinstance(obj, dict):
                    yield obj
                else:
                    self.bad.append(self.count)
        self.done = True

    @classmethod
    def joined(cls, parts: Sequence[JournalScan]) -> JournalScan:
        """The scan of the whole journal from the scans of its consecutive ranges, in
        order: line numbers carried on across the ranges (:meth:`join`)."""
        whole = cls(parts[0].name if parts else "")
        whole._started = whole.done = True
        for part in parts:
            whole.join(part)
        return whole

    def join(self, later: JournalScan) -> None:
        """The scan of the next range added to this one's, as one read of both would
        have counted them: its line numbers carried on from this scan's lines, torn if
        either found the torn last line (a line belongs to the range it begins in, so a
        cut inside the torn line leaves it to the range before, and the later one empty)."""
        self.bad.extend(self.count + n for n in later.bad)
        self.count += later.count
        self.torn = self.torn or later.torn
        self.done = self.done and later.done

    def problems(self) -> list[str]:
        """What the read found, one sentence each (empty: every line was sound)."""
        out = []
        if self.bad:
            bad = self.bad
            first = ", ".join(str(n) for n in bad[:5]) + (", ..." if len(bad) > 5 else "")
            out.append(
                f"{self.name}: {len(bad)} line(s) are not JSON objects and were skipped "
                f"(line {first})"
            )
        if self.torn:
            out.append(
                f"{self.name}: the last line is torn (no newline: a write was cut) and was skipped"
            )
        return out
