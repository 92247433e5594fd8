"""The CLI's entry points: what they return and print once the app closed."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest
from textual.app import App
from textual.pilot import Pilot

from soak.cli.headless import EXIT_DETACHED
from soak.record.models import EXIT_DETACHED_OPERATOR, EXIT_STORAGE
from tests.tui.helpers import HEALTHY, POST_LOAD_500, LiveRun, screen_text
from tui.app import SoakTopApp
from tui.frontend import STOP_MARGIN_S, TuiFrontend
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
    """Stands in for ``soak.run.spawn.RunnerHandle``."""

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
    assert code == EXIT_DETACHED_OPERATOR == 6  # not 0: that is PASSED, and no verdict yet
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


def hang_up(app: App[Any], sig: signal.Signals = signal.SIGHUP) -> None:
    """A real SIGHUP to this process, as a dropped SSH link sends — only once the app's
    loop handler is in place (the default action would end the test run)."""
    assert isinstance(app, SoakTopApp)
    assert signal.getsignal(sig) is not signal.SIG_DFL, f"no {sig.name} handler yet"
    os.kill(os.getpid(), sig)


async def ssh_drops(pilot: Pilot[Any]) -> None:
    """The monitor's pilot when the SSH link drops: a real SIGHUP once the app runs."""
    await pilot.pause()
    hang_up(pilot.app)
    await pilot.pause()


def test_follow_hangup_detaches_with_129_like_headless(
    tmp_path: Path, headless: Callable[[AutoPilot], None]
) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(5)

    headless(ssh_drops)
    out = io.StringIO()
    handle = FakeHandle(run.dir)
    code = frontend(out).follow(handle, interval_s=10, detach_allowed=True)  # type: ignore[arg-type]
    assert code == EXIT_DETACHED == 129  # what headless `follow` returns on a hang-up
    assert f"re-attach: soaktop attach {run.dir}" in out.getvalue()
    assert handle.signals == [] and not (run.dir / "control.jsonl").exists()  # it goes on


class StoppingProc:
    """The demo's runner after a forwarded SIGHUP: drains, writes its record, exits 1."""

    def __init__(self, run: LiveRun, finishes: bool = True) -> None:
        self.run = run
        self.finishes = finishes
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> int:
        self.timeouts.append(timeout)
        if not self.finishes:
            raise subprocess.TimeoutExpired("soak.run.runner", timeout or 0)
        self.run.finish()
        return 1


def test_demo_hangup_waits_for_the_record_before_returning(
    tmp_path: Path, headless: Callable[[AutoPilot], None]
) -> None:
    # Headless demo: SIGHUP is forwarded and followed to the record; the monitor agrees —
    # the demo's engine is stopped only after follow() returns, so the record comes first.
    run = LiveRun(POST_LOAD_500, tmp_path / "run")
    run.write_until(8)

    headless(ssh_drops)
    out = io.StringIO()
    handle = FakeHandle(run.dir)
    proc = StoppingProc(run)
    handle.proc = proc  # type: ignore[assignment]
    code = frontend(out).follow(handle, interval_s=10, detach_allowed=False)  # type: ignore[arg-type]
    assert handle.signals == [signal.SIGHUP]  # a graceful stop, not a detach
    assert (run.dir / "record.json").exists()
    assert code == 1  # the record's FAILED, as headless returns it
    assert out.getvalue().startswith("FAILED  tiny-sim__demo__vllm__soak__1130-053524")
    drain = json.loads((run.dir / "config.json").read_text())["drain_timeout_s"]
    assert proc.timeouts == [drain + STOP_MARGIN_S]  # bounded


def test_demo_hangup_whose_runner_does_not_finish_in_time(
    tmp_path: Path, headless: Callable[[AutoPilot], None]
) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(5)

    headless(ssh_drops)
    out = io.StringIO()
    handle = FakeHandle(run.dir)
    handle.proc = StoppingProc(run, finishes=False)  # type: ignore[assignment]
    code = frontend(out).follow(handle, interval_s=10, detach_allowed=False)  # type: ignore[arg-type]
    assert code == EXIT_DETACHED and handle.signals == [signal.SIGHUP]
    assert f"has not written its record yet: {run.dir / 'record.json'}" in out.getvalue()


class DiskFullHandle(FakeHandle):
    """A runner that exited 5 (EXIT_STORAGE): its directory could not be written."""

    def poll(self) -> int | None:
        return EXIT_STORAGE


def test_disk_full_without_a_record_says_so_and_exits_5(
    tmp_path: Path, headless: Callable[[AutoPilot], None], capsys: pytest.CaptureFixture[str]
) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(5)
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
    code = frontend(out).follow(DiskFullHandle(run.dir), interval_s=10, detach_allowed=True)  # type: ignore[arg-type]
    assert code == EXIT_STORAGE
    assert "could not write its run directory" in seen[0]
    err = capsys.readouterr().err
    assert f"soaktop: the runner could not write its run directory {run.dir} (disk full" in err
    assert f"free some space, then: soaktop recover {run.dir}" in err
    assert "died" not in out.getvalue() + err  # not "the runner died"


def test_a_record_with_a_storage_error_says_it_on_stderr(
    tmp_path: Path, headless: Callable[[AutoPilot], None], capsys: pytest.CaptureFixture[str]
) -> None:
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(5)
    message = (
        "the run directory could not be written: disk full (ENOSPC: No space left on "
        "device) writing requests.jsonl at 4.1 s into the load; issuing stopped and "
        "in-flight requests were cut (exit 5)"
    )

    async def operator(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, SoakTopApp)
        run.finish()
        rec = json.loads((run.dir / "record.json").read_text())
        rec |= {"status": "ABORTED", "exit_code": EXIT_STORAGE}
        rec["reasons"].insert(0, {"code": "storage_error", "effect": "aborted", "message": message})
        (run.dir / "record.json").write_text(json.dumps(rec))
        await app.poll_now()
        await pilot.pause()
        await pilot.press("q")

    headless(operator)
    out = io.StringIO()
    code = frontend(out).follow(FakeHandle(run.dir), interval_s=10, detach_allowed=True)  # type: ignore[arg-type]
    assert code == EXIT_STORAGE
    assert out.getvalue().startswith("ABORTED  ") and f"[aborted] {message}" in out.getvalue()
    assert capsys.readouterr().err == f"soaktop: {message}\n"


def test_a_signal_to_attach_only_detaches_with_129(
    tmp_path: Path, headless: Callable[[AutoPilot], None]
) -> None:
    # As headless `attach`: the run belongs to whoever started it; no stop is sent.
    run = LiveRun(HEALTHY, tmp_path / "run")
    run.write_until(5)

    async def killed(pilot: Pilot[Any]) -> None:
        await pilot.pause()
        hang_up(pilot.app, signal.SIGTERM)
        await pilot.pause()

    headless(killed)
    out = io.StringIO()
    assert frontend(out).attach(run.dir) == EXIT_DETACHED
    assert f"re-attach: soaktop attach {run.dir}" in out.getvalue()
    assert not (run.dir / "control.jsonl").exists()
