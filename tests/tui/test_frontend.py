"""The CLI's entry points: what they return and print once the app closed."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest
from textual.app import App
from textual.pilot import Pilot

from tests.tui.helpers import HEALTHY, POST_LOAD_500, LiveRun, screen_text
from tui.app import SoakTopApp
from tui.frontend import TuiFrontend
from tui.panes import HeaderPane

AutoPilot = Callable[[Pilot[Any]], Awaitable[None]]


@pytest.fixture
def headless(monkeypatch: pytest.MonkeyPatch) -> Callable[[AutoPilot], None]:
    """Make the frontend's ``app.run()`` headless and driven by ``auto_pilot``."""

    def use(auto_pilot: AutoPilot) -> None:
        def run(self: SoakTopApp, **_: Any) -> Any:
            pilot = cast(Callable[[Pilot[object]], Coroutine[Any, Any, None]], auto_pilot)
            return App.run(self, headless=True, size=(80, 24), auto_pilot=pilot)

        monkeypatch.setattr(SoakTopApp, "run", run)

    return use


class FakeProc:
    def wait(self, timeout: float | None = None) -> int:
        return 0


class FakeHandle:
    """Stands in for ``soak.spawn.RunnerHandle``."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.run_id = run_dir.name
        self.proc = FakeProc()
        self.signals: list[int] = []

    @property
    def pid(self) -> int:
        return 424242

    def poll(self) -> int | None:
        return 0 if (self.run_dir / "record.json").exists() else None

    def signal(self, signum: int) -> None:
        self.signals.append(signum)


def frontend(out: io.StringIO) -> TuiFrontend:
    return TuiFrontend(theme="dark", ascii=False, refresh_s=0.1, out=out)


def test_follow_stop_waits_for_the_record_and_prints_the_verdict(
    tmp_path: Path, headless: Callable[[AutoPilot], None]
) -> None:
    run = LiveRun(POST_LOAD_500, tmp_path / "run")
    run.write_until(8)

    async def operator(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, SoakTopApp)
        await app.poll_now()
        await pilot.press("q", "s")
        run.finish()  # the runner drains, runs the after gates, writes its record
        await app.poll_now()
        await pilot.pause()

    headless(operator)
    out = io.StringIO()
    code = frontend(out).follow(FakeHandle(run.dir), interval_s=10, detach_allowed=False)  # type: ignore[arg-type]
    assert code == 1  # FAILED: after-load json 23/24
    printed = out.getvalue()
    assert printed.startswith("FAILED  tiny-sim__demo__vllm__soak__1130-053524")
    assert "after-load json 23/24" in printed
    assert (run.dir / "control.jsonl").read_text().count('"cmd":"stop"') == 1


def test_follow_detach_prints_how_to_reattach(
    tmp_path: Path, headless: Callable[[AutoPilot], None]
) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(5)

    async def operator(pilot: Pilot[Any]) -> None:
        await pilot.press("d")

    headless(operator)
    out = io.StringIO()
    code = frontend(out).follow(FakeHandle(run.dir), interval_s=10, detach_allowed=True)  # type: ignore[arg-type]
    assert code == 0
    assert f"re-attach: soaktop attach {run.dir}" in out.getvalue()
    assert not (run.dir / "control.jsonl").exists()


def test_attach_to_a_finished_run_replays_it(
    tmp_path: Path, headless: Callable[[AutoPilot], None]
) -> None:
    seen: list[str] = []

    async def operator(pilot: Pilot[Any]) -> None:
        await pilot.pause()
        seen.append(pilot.app.screen.query_one(HeaderPane).plain_text)
        await pilot.press("q")

    headless(operator)
    assert frontend(io.StringIO()).attach(HEALTHY) == 0
    assert "REPLAY" in seen[0] and "PASSED" in seen[0]


def test_attach_to_a_runner_that_died(
    tmp_path: Path, headless: Callable[[AutoPilot], None]
) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(6)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    (run.dir / "runner.pid").write_text(gone.stdout)
    seen: list[str] = []

    async def operator(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, SoakTopApp)
        await app.poll_now()
        await pilot.pause()
        seen.append(" ".join(screen_text(app).split()))
        await pilot.press("q")

    headless(operator)
    out = io.StringIO()
    assert frontend(out).attach(run.dir) == 4
    assert "without writing a record" in seen[0]
    assert f"its log: {run.dir / 'runner.log'}" in out.getvalue()


def test_not_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert TuiFrontend().view(tmp_path) == 2
    assert TuiFrontend().attach(tmp_path / "missing") == 2
    assert "not a soaktop run directory" in capsys.readouterr().err
