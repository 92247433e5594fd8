"""Keys: controls reach control.jsonl, dialogs offer the right choices, theme and panes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.tui.helpers import (
    HEALTHY,
    XID,
    FakeRunner,
    LiveRun,
    control_lines,
    live_app,
    rendered,
    screen_text,
)
from tui.app import SoakTopApp
from tui.panes import GpuPane, HeaderPane
from tui.screens import HelpScreen, QuitScreen
from tui.settings import UiSettings


def started(tmp_path: Path, **kw: Any) -> tuple[LiveRun, SoakTopApp]:
    """A live app on a run in its load phase."""
    run = LiveRun(XID, tmp_path / "run")
    run.write_until(8)
    return run, live_app(run.dir, **kw)


async def test_quit_stop_writes_stop_and_closes_when_the_record_arrives(tmp_path: Path) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(6)
    app = live_app(run.dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        assert "soaktop attach" in screen_text(app)
        await pilot.press("s")
        assert control_lines(run.dir) == [{"cmd": "stop", "note": "quit from the monitor"}]
        await pilot.pause()
        assert "stopping" in app.screen.query_one(HeaderPane).plain_text  # panes stay up
        run.finish()
        await app.poll_now()
        await pilot.pause()
    assert app.return_value is not None
    assert (app.return_value.kind, app.return_value.exit_code) == ("finished", 0)


async def test_quit_detach_and_cancel(tmp_path: Path) -> None:
    run, app = started(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.press("escape")
        assert not isinstance(app.screen, QuitScreen)
        await pilot.press("q", "d")
    assert app.return_value is not None and app.return_value.kind == "detached"
    assert control_lines(run.dir) == []  # detaching leaves the runner alone


async def test_demo_offers_no_detach(tmp_path: Path) -> None:
    run, app = started(tmp_path, detach_allowed=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        footer = screen_text(app).splitlines()[-1]
        assert "Stop" in footer and "Detach" not in footer
        await pilot.press("d")  # no binding in this mode
        assert app.return_value is None
        await pilot.press("q")
        dialog = screen_text(app)
        assert "Stop the run (s)" in dialog and "Detach (d)" not in dialog
        await pilot.press("d")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")
    assert control_lines(run.dir) == []


async def test_mark_sends_the_note(tmp_path: Path) -> None:
    run, app = started(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("m")
        await pilot.press(*"lb restart", "enter")
        await pilot.press("m", "escape")  # cancelled: nothing sent
    assert control_lines(run.dir) == [{"cmd": "mark", "note": "lb restart"}]


async def test_abort_asks_first_and_pause_toggles(tmp_path: Path) -> None:
    run, app = started(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("a", "n")
        assert control_lines(run.dir) == []
        await pilot.press("a", "y")
        await pilot.press("p")
        await pilot.pause()
        assert "PAUSED" in app.screen.query_one(HeaderPane).plain_text
        await pilot.press("p", "s")
    assert [c["cmd"] for c in control_lines(run.dir)] == ["abort", "pause", "resume", "stop"]


async def test_theme_cycles_through_the_soaktop_themes(tmp_path: Path) -> None:
    _, app = started(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.theme == "dark"
        seen = []
        for _ in range(4):
            await pilot.press("t")
            seen.append(app.theme)
        assert seen == ["light", "high-contrast", "ansi", "dark"]


async def test_number_keys_maximise_and_restore_a_pane(tmp_path: Path) -> None:
    _, app = started(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await app.poll_now()
        await pilot.press("6")
        gpu = app.screen.query_one(GpuPane)
        assert app.screen.maximized is gpu
        await pilot.pause()
        rows = [r for r in gpu.plain_text.splitlines() if r[:1].isdigit()]
        assert len(rows) == 8  # room for every GPU once maximised
        await pilot.press("6")
        assert app.screen.maximized is None


async def test_help_lists_keys_as_remapped(tmp_path: Path) -> None:
    settings = UiSettings(keymap={"quit": "x", "mark": "n"})
    _, app = started(tmp_path, settings=settings)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        body = rendered(app.screen.query_one("#help-body"))
        assert "x  Quit" in body and "n  Put a note on the timeline" in body
        assert "6  Focus / maximise the GPUs pane" in body
        await pilot.press("escape")
        await pilot.press("x")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape", "n", "escape")
        await pilot.press("q")  # q is no longer bound
        assert not isinstance(app.screen, QuitScreen)


async def test_quit_after_the_run_ended_leaves_at_once(tmp_path: Path) -> None:
    run = LiveRun(XID, tmp_path / "run")
    runner = FakeRunner()
    app = live_app(run.dir, runner=runner)
    async with app.run_test(size=(80, 24)) as pilot:
        run.finish()
        runner.returncode = 1
        await app.poll_now()
        await pilot.pause()
        await pilot.press("q")
    assert app.return_value is not None
    assert (app.return_value.kind, app.return_value.exit_code) == ("finished", 1)
