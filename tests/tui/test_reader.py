"""The run-directory reader: full history on attach, torn lines, late files, the record."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
from pydantic import BaseModel

from soak.record.snapshot import Snapshot
from tests.tui.helpers import BARE_SNAPSHOT, FIXTURES, HEALTHY, XID, LiveRun, snapshots
from tui.reader import (
    ChartedLine,
    RunFollower,
    chart_point,
    history_point,
    load_replay,
    read_meta,
)
from tui.run_files import parse


def test_follower_reads_the_whole_history_then_only_new_lines(tmp_path: Path) -> None:
    run = LiveRun(XID, tmp_path / "run")
    run.write_until(9)
    follower = RunFollower(run.dir)
    first = follower.poll()
    assert first.snapshot is not None and first.snapshot.seq == run.snaps[9]["seq"]
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
    assert got is not None and got.seq == 0


def test_follower_notices_the_record_once_and_keeps_event_numbers(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(3)
    follower = RunFollower(run.dir)
    early = follower.poll().events
    run.finish()
    update = follower.poll()
    assert update.record is not None and update.record.status == "PASSED"
    assert update.snapshot is not None and update.snapshot.phase == "done"
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
    last = replay.snapshot(len(replay) - 1)
    assert last is not None and last.status == "PASSED"
    assert replay.record is not None and replay.meta is not None
    assert [e.event.kind for e in replay.events][:2] == ["identity", "identity"]


def test_meta_tolerates_missing_and_odd_files(tmp_path: Path) -> None:
    assert read_meta(tmp_path) is None
    (tmp_path / "config.json").write_text('{"endpoints": "not a list", "model": 3}')
    meta = read_meta(tmp_path)
    assert meta is not None and meta.target == "target unknown"


def test_odd_values_are_left_out_not_read_as_numbers() -> None:
    # A line no runner writes: what does not validate is left out, the rest is shown.
    odd = BARE_SNAPSHOT | {
        "load": {"requested_concurrency": 2, "window": "?", "in_flight": "x", "completed": 3},
        "thresholds": "junk",
        "brand_new_section": {"x": 1},
    }
    got = parse(Snapshot, orjson.dumps(odd))
    assert got.repaired and got.value is not None
    assert got.value.load.window is None  # no data, not a made-up window
    assert chart_point(orjson.dumps(odd)).output_tokens_per_s is None  # type: ignore[union-attr]
    assert got.value.load.in_flight == 0  # the model's default, not "x"
    assert got.value.load.completed == 3 and got.value.thresholds == []
    assert parse(Snapshot, b"[1]").value is None and parse(Snapshot, b"{").value is None


def test_unreadable_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(HEALTHY, run_dir)
    lines = (HEALTHY / "snapshots.jsonl").read_bytes().splitlines(keepends=True)
    other_major = orjson.dumps(json.loads(lines[1]) | {"schema_version": "2.0"}) + b"\n"
    torn = b'{"seq": 99, "t": 1'
    mangled = [lines[0], b"not json\n", b"[1, 2]\n", b"\n", other_major, *lines[1:], torn]
    (run_dir / "snapshots.jsonl").write_bytes(b"".join(mangled))
    with (run_dir / "events.jsonl").open("ab") as fh:
        fh.write(b'{"t": 1.0}\n')  # an event without its words
    replay = load_replay(run_dir)
    assert len(replay) == len(lines)  # the blank line and the torn one are no lines at all
    assert replay.skipped == 4
    follower = RunFollower(run_dir)
    update = follower.poll()
    assert update.snapshot is not None and update.snapshot.status == "PASSED"
    assert len(update.points) == len(lines) and update.skipped == 4


def test_chart_points_are_read_as_the_snapshot_model_reads_them() -> None:
    # The projection a replay reads every line through names the snapshot's own keys.
    def fields(model: type[BaseModel], real: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            assert name in real.model_fields, f"{real.__name__} has no {name}"
            sub = _model_in(field.annotation)
            if sub is not None:
                target = _model_in(real.model_fields[name].annotation)
                assert target is not None, f"{real.__name__}.{name} is no section"
                fields(sub, target)

    fields(ChartedLine, Snapshot)
    for run_dir in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for raw in (run_dir / "snapshots.jsonl").read_bytes().splitlines():
            snap = Snapshot.model_validate_json(raw)
            # the fixtures are the previous release's, but for the matrix one: its
            # progress section is schema 1.3's
            assert snap.schema_version == ("1.3" if run_dir.name == "matrix" else "1.0")
            assert chart_point(raw) == history_point(snap)


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The model in ``X`` or ``X | None``."""
    for t in getattr(annotation, "__args__", (annotation,)):
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
    return None
