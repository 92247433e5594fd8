"""The monitor in matrix mode: the cell, the repetition and its requests, per-cell medians.

The fixture is a real demo matrix run (``soaktop demo --matrix "input=64,512
concurrency=1,4 reps=3 requests=4 warmup=1" --no-gates --max-tokens 16``, trimmed by
``fixtures/trim.py``): its snapshots carry the runner's ``matrix`` progress. The soak's
figures that do not apply to a matrix (the plan's workers and issue window, issued
beside done, percentiles pooled over cells of different inputs) give way to it.
"""

from __future__ import annotations

from pathlib import Path

from soak.cli.headless import status_line
from soak.record.snapshot import Snapshot
from tests.tui.helpers import FIXTURES, HEALTHY, LiveRun, live_app, snapshots, view_app
from tui.panes import HeaderPane, LatencyPane, ThroughputPane

MATRIX = FIXTURES / "matrix"
CELL_2_REP_2 = 7
"""Snapshot index: cell 2/4 (~64 / C4), rep 2 of 3, nothing back yet; one cell done."""
LAST_WARMUP = 12
"""Snapshot index: cell 4/4's warm-up, three cells done."""


def _title(pane: LatencyPane) -> str:
    return str(pane.border_title)


async def test_a_matrix_run_shows_cell_rep_and_requests_not_the_soak_plan(tmp_path: Path) -> None:
    run = LiveRun(MATRIX, tmp_path / "run")
    run.write_until(CELL_2_REP_2)
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        header = app.screen.query_one(HeaderPane).plain_text.splitlines()
        assert header[1].startswith("cell 2/4 ~64/C4 · rep 2/3 · 0/4 requests  "), header
        assert header[1].rstrip().endswith("%")  # the bar spans the whole matrix
        pane = app.screen.query_one(LatencyPane)
        assert _title(pane) == "3 matrix"
        rows = pane.plain_text.splitlines()
        assert rows[0] == "cell 2/4 ~64/C4 · rep 2/3 · 0/4 requests"
        assert rows[1].split() == ["cell", "E2E", "med", "TTFT", "done"]
        assert rows[2].startswith("~64 / C1") and rows[2].split()[-1] == "12/12", rows
        assert "p99" not in pane.plain_text  # no percentiles pooled over the cells
        footer = app.screen.query_one(ThroughputPane).plain_text.splitlines()[-1]
        assert footer.startswith("done ") and "issued" not in footer  # issued is a batch's
        await pilot.press("1")  # the header maximised: the plan is the matrix's
        await pilot.pause()
        details = app.screen.query_one(HeaderPane).plain_text
        assert "plan     matrix input=64,512 concurrency=1,4 reps=3 requests=4 warmup=1" in (
            details
        )
        assert "workers" not in details and "issue window" not in details


async def test_every_finished_cell_fits_80x24_and_the_end_says_done(tmp_path: Path) -> None:
    run = LiveRun(MATRIX, tmp_path / "run")
    run.finish()
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        rows = app.screen.query_one(LatencyPane).plain_text.splitlines()
        assert rows[0] == "matrix done · 4/4 cells"
        labels = [r[:12].rstrip() for r in rows[2:]]
        assert labels == ["~64 / C1", "~64 / C4", "~512 / C1", "~512 / C4"], rows
        record = {c.label: c for c in app.view.record.matrix.cells}  # type: ignore[union-attr]
        for r in rows[2:]:
            assert r.split()[-1] == f"{record[r[:12].rstrip()].completed}/12"


async def test_many_cells_keep_the_latest_rows_and_say_how_many_are_left_out(
    tmp_path: Path,
) -> None:
    run = LiveRun(MATRIX, tmp_path / "run")
    last = run.snaps[-1]
    last["matrix"]["finished"] = [
        dict(last["matrix"]["finished"][i % 4], index=i, label=f"~{64 * (i + 1)} / C1")
        for i in range(9)
    ]
    last["matrix"]["cells"] = 9
    run.finish()
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        rows = app.screen.query_one(LatencyPane).plain_text.splitlines()
        assert rows[2] == "+6 earlier cells (3)"
        assert [r[:12].rstrip() for r in rows[3:]] == ["~448 / C1", "~512 / C1", "~576 / C1"]
        await pilot.press("3")  # maximised: every cell
        await pilot.pause()
        rows = app.screen.query_one(LatencyPane).plain_text.splitlines()
        assert len(rows) == 2 + 9 and "earlier" not in rows[2]


async def test_the_replay_shows_the_same_from_the_journal(tmp_path: Path) -> None:
    app = view_app(MATRIX)
    async with app.run_test(size=(80, 24)) as pilot:
        app.move_cursor(LAST_WARMUP)
        await pilot.pause()
        header = app.screen.query_one(HeaderPane).plain_text.splitlines()
        assert header[1].startswith("cell 4/4 ~512/C4 · warm-up · 4/4 requests"), header
        rows = app.screen.query_one(LatencyPane).plain_text.splitlines()
        assert len(rows) == 2 + 3 and rows[-1].startswith("~512 / C1")


async def test_a_soak_keeps_its_latency_pane_and_issued_count(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(8)
    assert all("matrix" not in s for s in run.snaps)
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.pause()
        pane = app.screen.query_one(LatencyPane)
        assert _title(pane) == "3 latency" and "p99" in pane.plain_text
        assert "issued" in app.screen.query_one(ThroughputPane).plain_text


def test_the_headless_status_line_says_the_cell_and_rep() -> None:
    snaps = snapshots(MATRIX)
    rep = Snapshot.model_validate(snaps[CELL_2_REP_2])
    line = status_line(rep)
    assert line.startswith("[cell 2/4 ~64/C4 · rep 2/3 · 0/4 requests] done ")
    assert line.endswith(" s") and "last cell ~64 / C1: median E2E " in line
    assert "load " not in line and "TTFT p50" not in line  # no pooled percentiles
    first = status_line(Snapshot.model_validate(snaps[0]))
    assert first.startswith("[cell 1/4 ~64/C1 · warm-up · ") and "no cell finished yet" in first
    done = status_line(Snapshot.model_validate(snaps[-1]))
    assert done.startswith("[done 00:00 · matrix done · 4/4 cells] ")
