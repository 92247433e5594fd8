"""What ``recover`` needs of ``requests.jsonl`` before it can measure the load.

The load's timing (how many lines the judged load journaled, when the last one ended)
and an open loop's release (the first intended send) come before the figures, which are
measured over that timing; the lines in flight at death and the journal's damage are
said beside them. All of it is one read (:meth:`RequestFacts.read`), so ``recover``
parses the request journal twice in all — this and the figures' read — where each of
these used to be a read of its own: a gigabyte's parse is seconds each time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from soak.record.journal_scan import JournalScan

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
    def read(cls, run_dir: Path) -> RequestFacts:
        """The facts of ``run_dir``'s ``requests.jsonl`` (none: a journal not there)."""
        facts = cls()
        scan = JournalScan("requests.jsonl")
        every = judged = 0
        last_end = 0.0
        first: float | None = None
        for line in scan.lines(run_dir / "requests.jsonl"):  # a RequestLine; read as a dict
            every += 1
            judged += line.get("phase") != "warmup"
            last_end = max(last_end, line.get("end_s") or line.get("sent_s") or 0.0)
            at = line.get("intended_s")
            if isinstance(at, int | float) and (first is None or at < first):
                first = float(at)
        facts.every_line, facts.judged, facts.last_end = every, judged, last_end
        facts.first_intended = first
        facts.problems = scan.problems()
        return facts
