"""Pane 4's shards (issue 17 §1): one line per shard, or one worst-first line, each
state its own word (so it reads without colour) and its own colour."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textual.content import Content

from soak.record.snapshot import ShardNow, Snapshot
from tests.tui.helpers import HEALTHY, LiveRun, live_app
from tui.glyphs import ASCII
from tui.panes import ConcurrencyPane
from tui.panes.shard_lines import shard_rows, shard_summary


def _shard(index: int, status: str = "running", **kw: Any) -> dict[str, Any]:
    fields = {"workers": 4, "in_flight": 4, "requests": 120, "loop_lag_p99_s": 0.003}
    return {"index": index, "status": status} | fields | kw


def _with_shards(run: LiveRun, index: int, shards: list[dict[str, Any]]) -> None:
    """The fixture's snapshot ``index`` (in the load) as a sharded run's."""
    snap = run.write_until(index)
    assert snap["phase"] == "load"
    changed = snap | {"shards": shards}
    Snapshot.model_validate(changed)  # what the runner's model accepts
    lines = (run.dir / "snapshots.jsonl").read_text().splitlines()
    lines[-1] = json.dumps(changed)
    (run.dir / "snapshots.jsonl").write_text("\n".join(lines) + "\n")


def _styles_at(content: Content, needle: str) -> str:
    at = content.plain.index(needle)
    return " ".join(str(s.style) for s in content.spans if s.start <= at < s.end)


async def test_a_lost_shard_is_named_in_pane_4_at_80x24(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    lost = _shard(1, "lost", in_flight=2, requests=57)
    lagging = _shard(2, loop_lag_p99_s=0.31, warning="lag 310 ms")
    _with_shards(run, 6, [_shard(0), lost, lagging])
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        pane = app.screen.query_one(ConcurrencyPane)
        rows = pane.plain_text.splitlines()  # a 39x5 pane: the shards in one line
        assert rows[0].startswith("req ")  # the client line stays first
        assert rows[1] == "shards 3: LOST s1 lag! s2 ok 1", rows
        assert rows[-1].startswith("client cpu"), rows  # still fits
        assert pane.view is not None
        drawn = pane.build(pane.view, pane.content_size.width, pane.content_size.height)
        assert "$text-error" in _styles_at(drawn, "LOST")
        assert "$text-warning" in _styles_at(drawn, "lag!")
        assert "$text-success" in _styles_at(drawn, "ok")

        await pilot.press("4")  # maximised: one line per shard, with the warning's words
        await pilot.pause()
        rows = app.screen.query_one(ConcurrencyPane).plain_text.splitlines()
        assert rows[1].startswith("s0  ok ") and "done    120" in rows[1], rows
        assert rows[2].startswith("s1  LOST ") and "done     57" in rows[2], rows
        assert rows[3].startswith("s2  lag! ") and rows[3].endswith("(lag 310 ms)"), rows


def test_many_shards_are_one_line_worst_first() -> None:
    shards = [ShardNow.model_validate(_shard(k)) for k in range(12)]
    shards[7] = ShardNow.model_validate(_shard(7, "lost"))
    shards[3] = ShardNow.model_validate(_shard(3, warning="behind 41%"))
    shards[9] = ShardNow.model_validate(_shard(9, "done"))
    rows = shard_rows(shards, width=60, room=3, g=ASCII)
    assert [r.plain for r in rows] == ["shards 12: LOST s7 behind! s3 ok 9 done 1"]
    # Narrower than its words: cut with the glyph set's ellipsis, the worst still first.
    assert shard_summary(shards, 20, ASCII).plain == "shards 12: LOST s..."


def test_shard_lines_fit_a_narrow_pane() -> None:
    shards = [ShardNow.model_validate(_shard(0, warning="silent 6 s"))]
    (row,) = shard_rows(shards, width=30, room=4, g=ASCII)
    assert row.plain.startswith("s0  silent! in") and row.cell_length <= 30
    (wide,) = shard_rows(shards, width=80, room=4, g=ASCII)
    assert wide.plain.endswith("(silent 6 s)")


def test_a_blank_warning_in_a_snapshot_file_does_not_break_the_pane() -> None:
    """The pane reads snapshots from a file: a warning of spaces is a warning, not a crash."""
    shards = [ShardNow.model_validate(_shard(0, warning="  ")), ShardNow.model_validate(_shard(1))]
    (row,) = shard_rows(shards, width=60, room=1, g=ASCII)
    assert row.plain == "shards 2: warn! s0 ok 1"
