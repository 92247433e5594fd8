"""The run-directory reader: full history on attach, torn lines, late files, the record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.tui.helpers import HEALTHY, XID, LiveRun, snapshots
from tui.reader import RunFollower, load_replay, read_meta


def test_follower_reads_the_whole_history_then_only_new_lines(tmp_path: Path) -> None:
    run = LiveRun(XID, tmp_path / "run")
    run.write_until(9)
    follower = RunFollower(run.dir)
    first = follower.poll()
    assert first.snapshot is not None and first.snapshot["seq"] == run.snaps[9]["seq"]
    assert len(first.points) == 10  # every snapshot since the start became a chart point
    assert first.meta is not None and first.meta.target == "2 endpoints / tiny-sim / vllm"
    assert first.record is None
    run.write_until(12)
    second = follower.poll()
    assert [p.t for p in second.points] == [s["t"] for s in run.snaps[10:13]]
    assert len(follower.history) == 13
    assert follower.poll().empty


def test_follower_waits_for_a_torn_last_line_and_missing_files(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    follower = RunFollower(run_dir)
    assert follower.poll().empty  # nothing written yet: no error
    line = json.dumps(snapshots(HEALTHY)[0])
    with (run_dir / "snapshots.jsonl").open("w") as fh:
        fh.write(line[:40])  # the runner is mid-write
    assert follower.poll().snapshot is None
    with (run_dir / "snapshots.jsonl").open("a") as fh:
        fh.write(line[40:] + "\n")
    got = follower.poll().snapshot
    assert got is not None and got["seq"] == 0


def test_follower_notices_the_record_once_and_keeps_event_numbers(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(3)
    follower = RunFollower(run.dir)
    early = follower.poll().events
    run.finish()
    update = follower.poll()
    assert update.record is not None and update.record["status"] == "PASSED"
    assert update.snapshot is not None and update.snapshot["phase"] == "done"
    numbers = [e.n for e in (*early, *update.events)]
    assert numbers == list(range(len(run.events)))
    assert follower.poll().record is None  # reported once


def test_replay_loads_everything_and_skips_a_torn_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(HEALTHY, run_dir)
    with (run_dir / "snapshots.jsonl").open("a") as fh:
        fh.write('{"seq": 99, "t": 1')
    replay = load_replay(run_dir)
    assert len(replay) == len(snapshots(HEALTHY))
    assert replay.snapshot(len(replay) - 1)["status"] == "PASSED"
    assert replay.record is not None and replay.meta is not None
    assert [e.kind for e in replay.events][:2] == ["identity", "identity"]


def test_meta_tolerates_missing_and_odd_files(tmp_path: Path) -> None:
    assert read_meta(tmp_path) is None
    (tmp_path / "config.json").write_text('{"endpoints": "not a list", "model": 3}')
    meta = read_meta(tmp_path)
    assert meta is not None and meta.target == "target unknown"
