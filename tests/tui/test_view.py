"""Replay: the time cursor steps through snapshots and jumps between events."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tui.helpers import POST_LOAD_500, XID, screen_text, snapshots, view_app
from tui.panes import GpuPane, HeaderPane, ThroughputPane
from tui.settings import UiSettings


async def test_stepping_changes_the_snapshot_shown() -> None:
    snaps = snapshots(XID)
    app = view_app(XID)
    async with app.run_test(size=(80, 24)) as pilot:
        header = app.screen.query_one(HeaderPane)
        assert f"REPLAY {len(snaps)}/{len(snaps)}" in header.plain_text
        assert " FAILED " in header.plain_text  # the end: the verdict
        await pilot.press("left")
        assert app.cursor == len(snaps) - 2
        assert "after gates" in header.plain_text and "verdict running" in header.plain_text
        await pilot.press("home")
        assert app.cursor == 0 and "REPLAY 1/" in header.plain_text
        assert "before gates" in header.plain_text
        assert "no load yet" in app.screen.query_one(ThroughputPane).plain_text
        await pilot.press("right")
        assert app.cursor == 1
        await pilot.press("end")
        assert app.cursor == len(snaps) - 1


async def test_jumping_to_the_next_and_previous_event() -> None:
    snaps = snapshots(XID)
    fault_at = next(
        i for i, s in enumerate(snaps) if any(e["kind"] == "fault" for e in s["events"])
    )
    app = view_app(XID)
    async with app.run_test(size=(80, 24)) as pilot:
        app.move_cursor(fault_at - 2)  # in the quiet load phase before the Xid
        await pilot.press("right_square_bracket")
        assert app.cursor == fault_at
        assert "XID 31" in app.screen.query_one(GpuPane).plain_text
        await pilot.press("left_square_bracket")
        assert app.cursor < fault_at
        assert "XID 31" not in app.screen.query_one(GpuPane).plain_text


async def test_view_mode_quits_without_asking_and_hides_live_controls() -> None:
    app = view_app(XID)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        footer = screen_text(app).splitlines()[-1]
        assert "Quit" in footer and "Back" in footer
        assert "Stop" not in footer and "Abort" not in footer and "Mark" not in footer
        await pilot.press("s", "a", "m")  # not bound in view mode
        assert not (XID / "control.jsonl").exists()
        await pilot.press("q")
    assert app.return_value is not None and app.return_value.kind == "quit"


async def test_ascii_mode_draws_only_ascii(tmp_path: Path) -> None:
    app = view_app(XID, settings=UiSettings(ascii=True))
    async with app.run_test(size=(80, 24)) as pilot:
        app.move_cursor(12)
        await pilot.pause()
        text = screen_text(app)
        assert "XID 31" in text
        assert text.isascii(), sorted({c for c in text if not c.isascii()})


async def test_an_empty_run_directory_replays_without_crashing(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    app = view_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "no snapshots in this run directory" in screen_text(app)
        await pilot.press("right", "left_square_bracket", "end")


async def test_no_color_keeps_the_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = view_app(POST_LOAD_500)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.no_color  # Textual's monochrome filter is on
        text = screen_text(app)
        assert " FAILED " in text and "json 23/24 FAIL" in text and "json 24/24 PASS" in text
