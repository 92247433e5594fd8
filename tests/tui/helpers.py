"""Shared helpers of the monitor's tests: fixture run dirs, a live writer, screen text."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App
from textual.content import Content
from textual.widget import Widget

from soak.record.snapshot import Snapshot
from tui.app import SoakTopApp
from tui.settings import UiSettings

FIXTURES = Path(__file__).parent / "fixtures"
HEALTHY = FIXTURES / "healthy"
XID = FIXTURES / "xid-mid-run"
ENGINE_DEATH = FIXTURES / "engine-death"
POST_LOAD_500 = FIXTURES / "post-load-500"


def screen_text(app: App[Any]) -> str:
    """The active screen as plain text, one line per terminal row."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def rendered(widget: Widget) -> str:
    """What a Static-like widget shows, as plain text."""
    visual = widget.render()
    return visual.plain if isinstance(visual, Content) else str(visual)


def snapshots(run_dir: Path) -> list[dict[str, Any]]:
    """A fixture's snapshot lines as dicts."""
    return [json.loads(x) for x in (run_dir / "snapshots.jsonl").read_text().splitlines()]


BARE_SNAPSHOT: dict[str, Any] = {
    "seq": 0,
    "t": 0.0,
    "wall": "2025-11-30T05:34:11.000+00:00",
    "run_id": "",
    "phase": "identity",
    "phase_elapsed_s": 0.0,
    "load": {"requested_concurrency": 0},
    "client": {},
}
"""The keys every snapshot line has, with the values of a run that just began."""


def snapshot_of(parts: dict[str, Any]) -> Snapshot:
    """A snapshot with these sections (``load`` merged into the bare one's), validated as
    the runner's model: pane tests name only what they are about."""
    load = BARE_SNAPSHOT["load"] | parts.get("load", {})
    return Snapshot.model_validate(BARE_SNAPSHOT | parts | {"load": load})


def control_lines(run_dir: Path) -> list[dict[str, Any]]:
    """What the monitor wrote to control.jsonl."""
    path = run_dir / "control.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines()]


class LiveRun:
    """A run directory written step by step, as the runner would, from a fixture."""

    def __init__(self, source: Path, target: Path) -> None:
        self.source = source
        self.dir = target
        target.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "identity.json"):
            if (source / name).exists():
                shutil.copyfile(source / name, target / name)
        self.snaps = snapshots(source)
        # Raw lines, so that rewriting events.jsonl keeps its bytes (readers hold offsets).
        self.event_lines = (source / "events.jsonl").read_text().splitlines(keepends=True)
        self.events = [json.loads(x) for x in self.event_lines]
        self.written = 0

    def write_until(self, index: int) -> dict[str, Any]:
        """Append snapshots up to ``index`` (inclusive) and the events they cover."""
        with (self.dir / "snapshots.jsonl").open("a") as fh:
            for snap in self.snaps[self.written : index + 1]:
                fh.write(json.dumps(snap) + "\n")
        last = self.snaps[index]
        self.written = index + 1
        shown = [
            raw for raw, e in zip(self.event_lines, self.events, strict=True) if e["t"] <= last["t"]
        ]
        (self.dir / "events.jsonl").write_text("".join(shown))
        return last

    def finish(self) -> None:
        """Everything, then the record."""
        self.write_until(len(self.snaps) - 1)
        shutil.copyfile(self.source / "events.jsonl", self.dir / "events.jsonl")
        shutil.copyfile(self.source / "record.json", self.dir / "record.json")


class FakeRunner:
    """A runner process stand-in: alive until ``returncode`` is set."""

    def __init__(self) -> None:
        self.returncode: int | None = None
        self.signals: list[int] = []

    @property
    def pid(self) -> int:
        return 424242

    def poll(self) -> int | None:
        return self.returncode

    def signal(self, signum: int) -> None:
        self.signals.append(signum)


def live_app(run_dir: Path, runner: FakeRunner | None = None, **kw: Any) -> SoakTopApp:
    """A live app that reads only when the test says so (``poll_now``)."""
    settings = kw.pop("settings", UiSettings())
    return SoakTopApp(
        run_dir,
        mode="live",
        settings=settings,
        runner=runner or FakeRunner(),
        auto_poll=False,
        **kw,
    )


def view_app(run_dir: Path, **kw: Any) -> SoakTopApp:
    """A replay of a fixture run."""
    settings = kw.pop("settings", UiSettings())
    return SoakTopApp(run_dir, mode="view", settings=settings, **kw)


# --- a real terminal: tmux ----------------------------------------------------------


def tmux_capture(session: str) -> str:
    """The tmux pane's screen as plain text (what the operator sees)."""
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True, check=False
    ).stdout


def tmux_title(session: str) -> str:
    """The pane's title: what an OSC 0/2 escape written to the terminal would set."""
    return subprocess.run(
        ["tmux", "display-message", "-p", "-t", session, "#{pane_title}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.rstrip("\n")


def tmux_keys(session: str, *keys: str) -> None:
    """Type ``keys`` (tmux key names: ``7``, ``Down``, ``Enter``) into the pane."""
    subprocess.run(["tmux", "send-keys", "-t", session, *keys], check=True)


def tmux_wait_for(session: str, ok: Callable[[str], bool], timeout_s: float) -> str:
    """Poll the screen until ``ok(screen)``; the last screen in the error otherwise."""
    deadline = time.monotonic() + timeout_s
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux_capture(session)
        if ok(screen):
            return screen
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s} s; the screen was:\n{screen}")
