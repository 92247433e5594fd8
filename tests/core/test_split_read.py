"""The figures' read of ``requests.jsonl`` split in byte ranges (issue 17: a 1-hour,
4-shard journal is a gigabyte, and its read is most of what ``verify`` and ``recover``
cost): every split gives the record exactly the figures one read gives — the whole load,
every step, class and turn, the sessions, the window series with its late lines, the
lines by shard and the journal's damage — joined in this process at cuts anywhere, and
read by forked readers, a lost one included."""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from soak.after.shard_check import ShardCounts
from soak.judge import load_pass
from soak.judge.load_pass import load_figures
from soak.record.journal_scan import JournalScan
from soak.record.models import LoadStep
from soak.record.split_read import RangeTally, join_ranges
from soak.record.step_figures import StepCounts
from soak.record.summary import _COUNTS, LoadTally, LoadTiming
from soak.record.tally_samples import GapRegion, ItlShare, ShareJoin
from soak.record.window_journal import LATE_LINE_S, JournalWindows
from soak.record.windows import SeriesSpec

REPO = Path(__file__).resolve().parents[2]
CONFIG: dict[str, Any] = {
    "mix": {"classes": [{"name": n, "weight": w} for n, w in (("chat", 3.0), ("json", 1.0))]},
    "turns": 3,
    "think_time_s": 0.5,
    "slo": "ttft<0.3s",
    "sweep": "rate=2,4,6",
    "percentile_method": "nearest-rank",
}
N = 900
"""Load lines: over 0..90 s, 10 a second."""
WINDOW_S = 10


def write_journal(path: Path, open_loop: bool) -> Path:
    """A journal with every kind of line a figure counts, varied on purpose: a warm-up
    (with sessions begun in it), failures, cancels, usage missing and disagreeing (the
    first disagreement far in), empty answers, stale retries, sanity flags, truncated
    histories, steps stamped and unstamped, classes, sessions whose turns lie far apart
    (so a cut falls between them), two shards, lines journaled out of order (some more
    than ``LATE_LINE_S`` past their window: late for its percentiles), a gap past a C
    int near the end (the share widens there), damage and a torn last line."""
    rng = random.Random(17)
    out: list[bytes] = []
    for i in range(30):  # the warm-up begins sessions 0..9 (their later turns in the load)
        warm = {"id": f"w{i}", "phase": "warmup", "ok": True, "sent_s": -3.0 + i * 0.1,
                "end_s": -2.0 + i * 0.1, "session": i % 10, "turn": 1, "output_tokens": 3,
                "prompt_tokens": 9, "shard": i % 2}  # fmt: skip
        out.append(orjson.dumps(warm) + b"\n")
    for i in range(N):
        at = i * 90.0 / N
        sent = at + (rng.random() * 0.3 if open_loop else 0.0)
        ok = rng.random() > 0.12
        cancelled = not ok and rng.random() < 0.3
        ot = rng.choice([None, 0, 1, 2, 9, 40]) if ok else None
        if i == N - 40:  # its first gap is past a C int: the share holds float64 from here
            ok, cancelled, ot = True, False, 3
        chunks = ot if i < 500 or rng.random() > 0.2 else (ot or 0) + 5  # disagrees
        ttft = 0.05 + rng.random() * 0.5 if ok and ot else None
        e2e = (ttft or 0.05) + rng.random() * 2 if ok else None
        end = sent + (e2e or 0.5)
        if i % 61 == 0:
            end -= LATE_LINE_S + 2 * WINDOW_S  # journaled long after it ended: late
        gaps = [rng.randint(900, 45_000) for _ in range(max(0, (ot or 0) - 1))]
        if i == N - 40:
            gaps[0] = 2**31 + 5
        line: dict[str, Any] = {
            "id": f"load/{i}", "phase": "load", "worker": i % 8, "shard": i % 8 % 2,
            "ok": ok and not cancelled, "sent_s": sent, "end_s": end,
            "ttfb_s": 0.01 if ok else None, "ttft_s": ttft,
            "first_content_s": ttft if rng.random() > 0.2 else None, "e2e_s": e2e,
            "failure": None if ok else rng.choice(["http_5xx", "timeout", "contract_error"]),
            "prompt_tokens": rng.choice([None, 20, 400]) if ok else None,
            "output_tokens": ot, "chunks": chunks or 0, "cancelled": cancelled,
            "stale_retry": rng.random() < 0.03, "itl_us": gaps,
            "workload_class": rng.choice(["chat", "chat", "json", "other"]),
            # 30 sessions at a time, each a turn every 30 lines: turns lie far apart
            "session": 10 + (i // 90) * 30 + i % 30, "turn": (i % 90) // 30 + 1,
        }  # fmt: skip
        if i < 30:
            line["session"], line["turn"] = i % 10, 2  # a warm-up session's next turn
        if ok and rng.random() < 0.05:
            line["sanity"] = [rng.choice(["repetition", "empty_content"])]
        if rng.random() < 0.03:
            line["answer_truncated"] = True
        if open_loop:
            line["intended_s"] = at
        if i % 97:
            line["step"] = min(3, int(sent // 30))
        out.append(orjson.dumps(line) + b"\n")
    for at in (5, 400, 401, 777):
        out.insert(at, b"\x1b[2J not json {\n")
    path.write_bytes(b"".join(out) + b'{"id": "torn", "end_s": 1')
    return path


def timing(open_loop: bool) -> LoadTiming:
    return LoadTiming(
        requested_concurrency=8, workers_started=8, barrier_released=True,
        issue_start_s=0.0, issue_end_s=90.0, drain_end_s=93.0, issued=N, sanity_checked=True,
        backoffs=2, offered_rate=10.0 if open_loop else None, held_by_cap=3 if open_loop else 0,
    )  # fmt: skip


def steps() -> list[LoadStep]:
    return [
        LoadStep(index=i, origin="sweep", label=f"rate={2 * i + 2}", start_s=30.0 * i,
                 end_s=30.0 * (i + 1), settle_s=2.0, rate_start=2.0 * i + 2)
        for i in range(3)
    ]  # fmt: skip


def every() -> tuple[JournalWindows, ShardCounts]:
    spec = SeriesSpec(origin_s=0.0, window_s=WINDOW_S, issue_end_s=90.0, end_s=95.0)
    return JournalWindows(spec), ShardCounts()


def figures_json(path: Path, open_loop: bool, **kw: Any) -> dict[str, Any]:
    """Every figure a record takes from the read, as JSON: the load and its slices, the
    window series and its warm-up count, the lines by shard, the damage."""
    windows, shards = every()
    scan = JournalScan("requests.jsonl")
    counts = [StepCounts(offered_rate=2.0 * i + 2 if open_loop else None) for i in range(3)]
    got = load_figures(
        path, timing(open_loop), CONFIG, "nearest-rank", steps(), counts,
        every=(windows, shards), scan=scan, share=ItlShare(), **kw,
    )  # fmt: skip
    figures: dict[str, Any] = json.loads(
        json.dumps(
            {
                "load": got.load.model_dump(mode="json"),
                "sections": {
                    k: [x.model_dump(mode="json") for x in v] if isinstance(v, list) else v
                    for k, v in got.sections().items()
                    if k != "sessions"
                },
                "sessions": got.conversation["sessions"].model_dump(mode="json"),
                "sweep": got.sweep.model_dump(mode="json") if got.sweep else None,
                "windows": [w.model_dump(mode="json") for w in windows.windows(path.parent)],
                "warmup": windows.warmup,
                "shards": sorted((str(k), n) for k, n in shards.counts.items()),
                "damage": scan.problems(),
                "lines": scan.count,
            },
            default=str,
        )
    )
    return figures


def _split_here(
    monkeypatch: pytest.MonkeyPatch,
    path: Path,
    open_loop: bool,
    cuts: list[int],
    region_bytes: int | None = None,
) -> dict[str, Any]:
    """The figures of ``path`` read in the ranges ``cuts`` make, in this process as the
    forked readers do it: each later range into empty tallies after their
    ``begin_later_range``, their parts sent through pickle (and a gap region of
    ``region_bytes``: None, inline), then joined in order into the first range's."""
    bounds = [0, *cuts]
    ranges = list(zip(bounds, [*cuts, None], strict=True))
    parts: list[Any] = []
    for start, end in ranges[1:]:

        def later(
            _path: Path, read_range: Any, tallies: list[RangeTally], scan: JournalScan, _k: Any,
            start: int = start, end: int | None = end,
        ) -> None:  # fmt: skip
            for tally in tallies:
                tally.begin_later_range()
            mine = JournalScan(scan.name)
            read_range(mine, start, end)
            region = None if region_bytes is None else GapRegion(start, region_bytes)
            GapRegion.outbound = region
            if region is not None:
                GapRegion.inbound[start] = region
            try:
                parts.append(pickle.loads(pickle.dumps((mine, [t.part() for t in tallies]))))
            finally:
                GapRegion.outbound = None
                if region is not None:
                    region.close()

        monkeypatch.setattr(load_pass, "read_load_split", later)
        figures_json(path, open_loop)

    def first(
        _path: Path, read_range: Any, tallies: list[RangeTally], scan: JournalScan, _k: Any
    ) -> None:
        read_range(scan, 0, ranges[0][1])
        join_ranges(ranges[1:], parts, read_range, tallies, scan)

    monkeypatch.setattr(load_pass, "read_load_split", first)
    return figures_json(path, open_loop)


def _line_starts(path: Path) -> list[int]:
    starts = [0]
    for raw in path.read_bytes().splitlines(keepends=True):
        starts.append(starts[-1] + len(raw))
    return starts[:-1]


@pytest.mark.parametrize("open_loop", [False, True], ids=["closed", "open"])
def test_every_split_gives_the_figures_of_one_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_loop: bool
) -> None:
    path = write_journal(tmp_path / "requests.jsonl", open_loop)
    whole = figures_json(path, open_loop, readers=1)
    load = whole["load"]
    # The journal holds what every join must carry: not a quiet journal.
    assert load["failed"] and load["cancelled"] and load["usage_missing"]
    assert load["usage_disagrees"] and load["empty_answers"] and load["stale_connection_retries"]
    assert load["sanity_flagged"] and whole["sessions"]["history_truncated"]
    # 300 sessions' turns, less the 30 whose turn 1 gave way to the warm-up's turn 2s
    assert whole["sessions"]["started"] == 270 and whole["warmup"] == 30
    assert whole["damage"][0].startswith("requests.jsonl: 4 line(s) are not JSON objects")
    assert "torn" in whole["damage"][1] and whole["lines"] == N + 34
    assert load["itl_s"]["max"] > 2000  # the widened gap, in seconds
    starts = _line_starts(path)
    size = path.stat().st_size
    rng = random.Random(5)
    cut_sets = [[size * i // k for i in range(1, k)] for k in (2, 3, 5, 8)]
    cut_sets += [[c] for c in (starts[1], starts[31], starts[32] + 1, starts[-1], starts[-1] + 3)]
    cut_sets += [sorted(rng.sample(starts[1:], 3)) for _ in range(6)]
    cut_sets += [sorted(s + rng.randint(0, 40) for s in rng.sample(starts[1:], 2))]
    for cuts in cut_sets:
        assert _split_here(monkeypatch, path, open_loop, cuts) == whole, cuts
    # The gaps handed back through a shared region, and through one too small for them
    # (inline then): the same figures.
    for region in (4 * size, 64):
        assert _split_here(monkeypatch, path, open_loop, cut_sets[1], region) == whole


def test_a_window_s_late_lines_across_a_cut_stay_out_of_its_percentiles(tmp_path: Path) -> None:
    """Finality is the one state a later range cannot see: a line journaled past its
    window's close in a later range is counted there but not in its percentiles, as in
    one read; one that is not late is in them."""
    spec = SeriesSpec(origin_s=0.0, window_s=10, issue_end_s=60.0, end_s=60.0)
    lines = [{"phase": "load", "ok": True, "end_s": t, "ttft_s": v, "e2e_s": v,
              "output_tokens": 1} for t, v in ((1.0, 0.1), (2.0, 0.2), (16.0, 0.3))]  # fmt: skip
    # After the cut: a late line of window 0 (the read reached 16 s > 10 + LATE_LINE_S),
    # then one of window 1 that is not late.
    later_lines = [{"phase": "load", "ok": True, "end_s": t, "ttft_s": v, "e2e_s": v,
                    "output_tokens": 1} for t, v in ((3.0, 9.0), (17.0, 0.4))]  # fmt: skip
    whole = JournalWindows(spec)
    for line in lines + later_lines:
        whole.offer(line)
    first, second = JournalWindows(spec), JournalWindows(spec)
    second.begin_later_range()
    for line in lines:
        first.offer(line)
    for line in later_lines:
        second.offer(line)
    first.join(pickle.loads(pickle.dumps(second.part())), ShareJoin())
    got, want = first.windows(tmp_path), whole.windows(tmp_path)
    assert [w.model_dump() for w in got] == [w.model_dump() for w in want]
    assert got[0].completed == 3 and got[0].ttft_p99 == 0.2  # counted, not in the P99
    assert got[1].completed == 2 and got[1].ttft_p99 == 0.4


def test_a_join_sums_every_counter_a_tally_keeps() -> None:
    """A counter added to :class:`LoadTally` and not to its join would be lost in every
    split read: every int the tally keeps is a counter the join sums."""
    ints = {f.name for f in LoadTally.__dataclass_fields__.values() if f.type == "int"}
    assert ints == set(_COUNTS)


_FORKED = """
import json, os, sys, threading
from pathlib import Path
sys.path.insert(0, {repo!r})
from soak.record import split_read
from tests.core.test_split_read import figures_json
assert threading.active_count() == 1  # a fresh interpreter: the readers are forked
path, open_loop = Path(sys.argv[1]), sys.argv[2] == "open"
out = {{str(k): figures_json(path, open_loop, readers=k) for k in (1, 2, 3, 5)}}
lost_at = split_read.byte_ranges(path.stat().st_size, 3)[1][0]
in_reader = split_read._in_reader

def dies(later, start, end):  # the second range's reader is killed mid-read
    if start == lost_at:
        os.kill(os.getpid(), 9)
    return in_reader(later, start, end)

split_read._in_reader = dies
out["lost"] = figures_json(path, open_loop, readers=3)
print(json.dumps(out))
"""


@pytest.mark.parametrize("open_loop", [False, True], ids=["closed", "open"])
def test_forked_readers_give_the_figures_of_one_read(tmp_path: Path, open_loop: bool) -> None:
    path = write_journal(tmp_path / "requests.jsonl", open_loop)
    done = subprocess.run(
        [sys.executable, "-c", _FORKED.format(repo=str(REPO)), str(path),
         "open" if open_loop else "closed"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    one = got.pop("1")
    assert one["load"]["completed"] > 500
    for readers, figures in got.items():
        assert figures == one, readers


@pytest.mark.parametrize("value", ["0", "9", "two", "-1"])
def test_a_readers_count_not_allowed_is_said_before_anything_is_read(
    tmp_path: Path, value: str
) -> None:
    for cmd in ("verify", "recover"):
        done = subprocess.run(
            [sys.executable, "-m", "soak", cmd, str(tmp_path)],
            capture_output=True, text=True, timeout=60, cwd=REPO,
            env={**os.environ, "SOAKTOP_READERS": value},
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip() == (
            f"soaktop {cmd}: SOAKTOP_READERS={value!r}: the processes that read a journal "
            "are a whole number from 1 to 8 (unset: one per spare core from 128 MB)"
        )
