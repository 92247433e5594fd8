"""``verify`` for a sharded run: each shard's requests in the record, counted again.

``record.shards[k].requests`` is what the coordinator received from shard ``k``; every
one of those is a line of ``requests.jsonl`` carrying ``shard = k``. A count that
differs is a journal that lost or gained lines after the record was written; a line
naming a shard the record does not list (or a sharded record with unmarked lines) is
a journal from another run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from soak.record.journal import read_jsonl
from soak.record.models import RunRecord
from soak.record.tally_samples import ShareJoin


class ShardCounts:
    """The request journal's lines by the shard they name, one line at a time
    (:meth:`offer`: every line, the warm-up's included), so ``verify`` counts them in
    its one read of the journal."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: Counter[int | None] = Counter()

    def offer(self, line: dict[str, Any]) -> None:
        """One line of ``requests.jsonl``, counted for its shard."""
        self.counts[line.get("shard")] += 1

    def begin_later_range(self) -> None:
        """A line counts for its own shard: nothing of the lines before a range."""

    def part(self) -> Counter[int | None]:
        """The counts, to be sent back by a later range's reader."""
        return self.counts

    def join(self, part: Counter[int | None], shares: ShareJoin) -> None:
        """A later range's counts (:meth:`part`) added."""
        self.counts.update(part)


def shard_problems(run_dir: Path, rec: RunRecord, counted: ShardCounts | None = None) -> list[str]:
    """What the request journal says against ``rec.shards`` (empty: they agree), from
    its lines ``counted`` in a read the caller made (None: read here). A record without
    shards costs no pass over the journal."""
    if not rec.shards:
        return []
    if counted is None:
        counted = ShardCounts()
        for line in read_jsonl(run_dir / "requests.jsonl"):
            counted.offer(line)
    counts = counted.counts
    problems = []
    listed = {s.index for s in rec.shards}
    for s in rec.shards:
        if counts[s.index] != s.requests:
            problems.append(
                f"shards[{s.index}].requests: record {s.requests}, requests.jsonl {counts[s.index]}"
            )
    for shard, n in sorted(counts.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
        if shard is None:
            problems.append(f"requests.jsonl: {n} lines of a sharded run name no shard")
        elif shard not in listed:
            problems.append(f"requests.jsonl: {n} lines name shard {shard}, not in the record")
    return problems
