"""recover's first read of the request journal, split in byte ranges (issue 17: a 1-hour,
4-shard journal is a gigabyte): every split gives the facts, and the damage by line
number, that one read of the whole gives — in this process and in forked readers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from soak.after.request_facts import RequestFacts, _joined, _read_range
from soak.record.journal_scan import JournalScan
from soak.record.split_read import byte_ranges


def _journal(path: Path) -> list[bytes]:
    """Warm-up and load lines of uneven lengths, an open loop's intended sends, damage
    at the start, in the middle and at the end, and a torn last line."""
    lines = []
    for i in range(400):
        line: dict[str, Any] = {
            "id": f"r{i}",
            "phase": "warmup" if i < 30 else "load",
            "sent_s": 1.0 + i,
        }
        if i % 7:
            line["end_s"] = 2.5 + i + (i % 13) / 10
        if i % 3 == 0:
            line["intended_s"] = 50.0 - i / 10 if i < 200 else 0.5 + i
        line["itl_us"] = list(range(i % 50))  # lengths vary: boundaries land anywhere
        lines.append(orjson.dumps(line) + b"\n")
    for at in (0, 171, 172, 398):
        lines[at] = b"\x1b[2J not json {\n"
    lines[250] = b"[1, 2]\n"
    path.write_bytes(b"".join(lines) + b'{"id": "torn", "end_s": 9999')
    return lines


def test_every_split_of_a_damaged_journal_gives_one_read_s_facts(tmp_path):
    path = tmp_path / "requests.jsonl"
    _journal(path)
    whole = RequestFacts.read(tmp_path, readers=1)
    # 400 lines, 5 not JSON, a torn one past them; 29 sound warm-up lines
    assert whole.every_line == 395 and whole.judged == 366
    assert whole.first_intended == 50.0 - 198 / 10 and whole.last_end == 2.5 + 397 + 7 / 10
    assert whole.problems == [
        "requests.jsonl: 5 line(s) are not JSON objects and were skipped "
        "(line 1, 172, 173, 251, 399)",
        "requests.jsonl: the last line is torn (no newline: a write was cut) and was skipped",
    ]
    size = path.stat().st_size
    for k in range(2, 12):
        parts = [_read_range(path, a, b) for a, b in byte_ranges(size, k)]
        assert _joined(parts) == whole, k
    # A boundary at every line start and at every byte just past one.
    starts = [0]
    for raw in path.read_bytes().splitlines(keepends=True)[:-1]:
        starts.append(starts[-1] + len(raw))
    for cut in [*starts[1:40], *(s + 1 for s in starts[150:180])]:
        assert _joined([_read_range(path, 0, cut), _read_range(path, cut, None)]) == whole, cut
    # A range scan alone numbers from its own first line; joined, from the journal's.
    tail = JournalScan("requests.jsonl")
    list(tail.lines(path, starts[170], None))
    assert tail.bad == [2, 3, 81, 229] and tail.torn


def test_forked_readers_give_the_same_facts(tmp_path):
    path = tmp_path / "requests.jsonl"
    _journal(path)
    # A fresh interpreter: its only thread is its main one, so the readers are forked.
    script = (
        "import json, sys, threading; from pathlib import Path\n"
        "from soak.after.request_facts import RequestFacts\n"
        "assert threading.active_count() == 1\n"
        "print(json.dumps([RequestFacts.read(Path(sys.argv[1]), readers=k).__dict__"
        " for k in (1, 3, 8)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True
    )
    one, three, eight = json.loads(out.stdout)
    assert one == three == eight and one["every_line"] == 395 and len(one["problems"]) == 2


def test_a_missing_or_empty_journal_has_no_facts(tmp_path):
    assert RequestFacts.read(tmp_path, readers=4) == RequestFacts()
    (tmp_path / "requests.jsonl").write_bytes(b"")
    assert RequestFacts.read(tmp_path, readers=4) == RequestFacts()
