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

from soak.record.journal import read_jsonl
from soak.record.models import RunRecord


def shard_problems(run_dir: Path, rec: RunRecord) -> list[str]:
    """What the request journal says against ``rec.shards`` (empty: they agree). A
    record without shards costs no pass over the journal."""
    if not rec.shards:
        return []
    counts: Counter[int | None] = Counter(
        line.get("shard") for line in read_jsonl(run_dir / "requests.jsonl")
    )
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
