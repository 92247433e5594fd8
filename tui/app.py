"""The soaktop Textual app: live monitor of a runner, or replay of a finished run.

A viewer only: a reader worker tails the run directory off the UI loop and posts the
newest snapshot; operator controls go to the runner through ``control.jsonl``. The app
ends with an ``Outcome`` that the frontend turns into an exit code and a message.
"""

from __future__ import annotations

import signal
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen

from soak.record.models import RunRecord
from soak.record.snapshot import Snapshot
from soak.run.control import send_control
from soak.safe_text import safe_line, safe_text
from themes import SOAKTOP_THEMES, STYLESHEET
from tui import keys
from tui.ascii_scrollbar import use_ascii_scrollbars
from tui.commands import soaktop_commands
from tui.glyphs import glyphs_for
from tui.live_poll import LivePoll
from tui.load_control import Asked, next_target
from tui.messages import EventsArrived, MetaFound, RunEnded, RunnerDied, SnapshotTick
from tui.outcome import Outcome, runner_died_notice
from tui.panes import EventsPane
from tui.panes.events import EventList
from tui.reader import EventEntry, HistoryPoint, Replay, RunMeta, TrendPoint, load_replay
from tui.replay_cursor import ReplayCursor
from tui.runner_link import GONE, RunnerLink
from tui.runview import Cursor, Mode, RunView
from tui.screens import (
    ConfirmScreen,
    EventDetailScreen,
    HelpScreen,
    MarkScreen,
    MonitorScreen,
    QuitScreen,
)
from tui.settings import UiSettings
from tui.signals import SignalRelay

EVENTS_KEPT = 5000
"""Events held for the event pane while following (bounded for multi-hour runs)."""


class SoakTopApp(App[Outcome]):
    """The monitor. ``mode="live"`` follows a runner; ``mode="view"`` replays a run."""

    TITLE = "soaktop"
    CSS_PATH = str(STYLESHEET)
    BINDINGS = keys.BINDINGS  # type: ignore[assignment]

    def __init__(
        self,
        run_dir: Path,
        mode: Mode,
        settings: UiSettings | None = None,
        runner: RunnerLink | None = None,
        owns_runner: bool = False,
        detach_allowed: bool = True,
        replay: Replay | None = None,
        handle_signals: bool = False,
        auto_poll: bool = True,
    ) -> None:
        """``runner``: the process to watch (live); ``owns_runner``: we started it, so
        signals to this process are forwarded to it; ``auto_poll=False`` leaves reading
        to explicit ``poll_now()`` calls (tests)."""
        super().__init__()
        self.run_dir = run_dir
        self.mode: Mode = mode
        self.settings = settings or UiSettings()
        self.runner = runner
        self.owns_runner = owns_runner
        self.detach_allowed = detach_allowed
        self.handle_signals = handle_signals
        self.auto_poll = auto_poll
        self.glyphs = glyphs_for(self.settings.ascii)
        for theme in (*SOAKTOP_THEMES.values(), *self.settings.user_themes):
            self.register_theme(theme)
        self.theme_cycle = [*SOAKTOP_THEMES, *(t.name for t in self.settings.user_themes)]

        self._live = LivePoll(run_dir, runner, self.post_message) if mode == "live" else None
        if mode == "view":
            replay = replay if replay is not None else load_replay(run_dir)
        self._replay = ReplayCursor(replay) if replay is not None else None

        self._snapshot: Snapshot | None = None
        self._history: tuple[HistoryPoint, ...] = ()
        self._windows: tuple[TrendPoint, ...] = ()
        self._events: deque[EventEntry] = deque(maxlen=EVENTS_KEPT)
        self._record: RunRecord | None = replay.record if replay else None
        self._skipped = replay.skipped if replay else 0
        """Journal lines the reader could not read at all (the header says how many)."""
        self._meta: RunMeta | None = replay.meta if replay else None
        self._notice: str | None = None
        self._notice_severity: Literal["info", "warning", "error"] = "info"
        self._paused_here = False
        self._pause_asked_seq: int | None = None
        self._load_asked: Asked | None = None
        self._exit_on_record = False
        self._runner_gone = False
        self._runner_rc: int | None = None
        self._restore_scrollbars: Callable[[], None] | None = None
        self._signals = SignalRelay()
        self._monitor = MonitorScreen()
        self.view: RunView = RunView(mode=mode, glyphs=self.glyphs, meta=self._meta)

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """A toast; its text made display-safe (it may quote a path, a note, an error)."""
        super().notify(
            safe_text(message),
            title=safe_line(title),
            severity=severity,
            timeout=timeout,
            markup=markup,
        )

    # --- life cycle -----------------------------------------------------------------

    def get_default_screen(self) -> Screen[Any]:
        return self._monitor

    def on_mount(self) -> None:
        self.theme = self.settings.theme
        if self.settings.ascii:
            self.add_class("-ascii")
            self._restore_scrollbars = use_ascii_scrollbars()
        if self.settings.keymap:
            self.set_keymap(dict(self.settings.keymap))
        for notice in self.settings.notices:
            self.notify(notice, title="settings", severity="warning", timeout=12, markup=False)
        if self.handle_signals:
            self._signals.install(
                {
                    signal.SIGHUP: self._on_hangup,
                    signal.SIGTERM: self._on_terminate,
                    signal.SIGINT: self._on_terminate,
                }
            )
        if self.mode == "view":
            if self._replay is not None and not len(self._replay):
                self._set_notice("no snapshots in this run directory", "warning")
            self._show_cursor()
        else:
            self._update_view()
            if self.auto_poll and self._live is not None:
                reading = self._live.loop(self.settings.refresh_s)
                self.run_worker(reading, name="reader", group="reader", exclusive=True)

    def on_unmount(self) -> None:
        if self._restore_scrollbars is not None:
            self._restore_scrollbars()
        self._signals.restore()

    # --- reading (live) ---------------------------------------------------------------

    async def poll_now(self) -> None:
        """Read the run directory once and post what is new (tests call this directly)."""
        if self._live is not None:
            await self._live.poll()

    def on_snapshot_tick(self, message: SnapshotTick) -> None:
        self._snapshot = message.snapshot
        self._history = message.history
        self._windows = message.windows
        self._skipped = message.skipped
        self._update_view()

    def on_events_arrived(self, message: EventsArrived) -> None:
        self._events.extend(message.events)
        self._update_view()

    def on_meta_found(self, message: MetaFound) -> None:
        self._meta = message.meta
        self._update_view()

    def on_run_ended(self, message: RunEnded) -> None:
        self._record = message.record
        status = message.record.status.value
        if self._exit_on_record:
            self.exit(self._final_outcome())
            return
        self._set_notice(f"run finished: {status}. q quits; 7 opens the events.", "info")
        self.refresh_bindings()

    def on_runner_died(self, message: RunnerDied) -> None:
        self._runner_gone = True
        self._runner_rc = None if message.returncode == GONE else message.returncode
        log = self.run_dir / "runner.log"
        self._set_notice(runner_died_notice(message.returncode, self.run_dir), "error")
        self.notify(
            f"runner ended without a record; see {log}", severity="error", timeout=30, markup=False
        )
        self.refresh_bindings()
        if self._exit_on_record:
            self.exit(self._final_outcome())

    # --- the view ---------------------------------------------------------------------

    @property
    def run_over(self) -> bool:
        """Nothing more will happen: the record exists or the runner is gone."""
        return self.mode == "view" or self._record is not None or self._runner_gone

    def _paused(self) -> bool:
        """Issuing is paused: the runner's ``paused`` phase says so; right after we asked,
        until its next snapshot can show it, what we asked counts."""
        if self._snapshot is not None and self._snapshot.phase == "paused":
            return True
        seq = self._snapshot.seq if self._snapshot is not None else 0
        waiting = self._pause_asked_seq is not None and seq <= self._pause_asked_seq + 1
        return self._paused_here if waiting else False

    def _set_notice(
        self, notice: str | None, severity: Literal["info", "warning", "error"]
    ) -> None:
        self._notice, self._notice_severity = notice, severity
        if self.mode == "view":
            self._show_cursor()
        else:
            self._update_view()

    def _update_view(self) -> None:
        self._show(
            RunView(
                mode="live",
                snapshot=self._snapshot,
                history=self._history,
                windows=self._windows,
                events=tuple(self._events),
                record=self._record,
                meta=self._meta,
                glyphs=self.glyphs,
                notice=self._notice,
                notice_severity=self._notice_severity,
                paused=self._paused() and not self.run_over,
                skipped_lines=self._skipped,
            )
        )

    def _show_cursor(self) -> None:
        frame = self._replay.frame() if self._replay is not None else None
        self._show(
            RunView(
                mode="view",
                snapshot=frame.snapshot if frame else None,
                history=frame.history if frame else (),
                windows=frame.windows if frame else (),
                events=frame.events if frame else (),
                record=self._record,
                meta=self._meta,
                glyphs=self.glyphs,
                cursor=Cursor(frame.index, frame.total) if frame else None,
                notice=self._notice,
                notice_severity=self._notice_severity,
                skipped_lines=self._skipped,
            )
        )

    def _show(self, view: RunView) -> None:
        self.view = view
        if self._monitor.is_mounted:
            self._monitor.show(view)

    def on_events_pane_selected(self, message: EventsPane.Selected) -> None:
        self.push_screen(EventDetailScreen(message.row, self.run_dir))

    # --- bindings -----------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in keys.LIVE_ONLY:
            if self.mode != "live":
                return False
            if action == "detach" and not self.detach_allowed:
                return False
            return not self.run_over  # nothing left to control once the run is over
        if action in keys.VIEW_ONLY:
            # Not under a dialog: the arrows are priority bindings (see tui.keys).
            return self.mode == "view" and self.screen is self._monitor
        return True

    async def action_quit(self) -> None:
        """q: in a live run, ask (stop / detach / cancel); otherwise leave."""
        if self.run_over:
            self.exit(self._final_outcome())
            return
        if self._exit_on_record:
            self.notify("stopping: waiting for the record (a aborts, d detaches)")
            return

        def chosen(choice: str | None) -> None:
            if choice == "stop":
                if self._send("stop", "quit from the monitor"):
                    self._exit_on_record = True
                    self._set_notice(
                        "stopping: drain, after-load gates, record; "
                        "the monitor closes when the record is written",
                        "warning",
                    )
            elif choice == "detach":
                self.exit(Outcome("detached"))

        self.push_screen(QuitScreen(self.run_dir, self.detach_allowed), chosen)

    def action_detach(self) -> None:
        """d: leave the monitor; the runner goes on."""
        self.exit(Outcome("detached"))

    def action_stop(self) -> None:
        """s: graceful stop (drain, after gates, record); keep watching."""
        if self._send("stop", "stop from the monitor"):
            self._set_notice("stop asked: draining, then the after-load gates", "warning")

    def action_abort(self) -> None:
        """a: abort after a confirmation."""

        def answered(yes: bool | None) -> None:
            if yes and self._send("abort", "abort from the monitor"):
                self._set_notice("abort asked: the record will say ABORTED", "error")

        self.push_screen(
            ConfirmScreen(
                "Abort the run? In-flight requests are cut and the verdict is ABORTED.",
                yes="Abort",
            ),
            answered,
        )

    def action_pause(self) -> None:
        """p: pause or resume issuing new requests."""
        cmd = "resume" if self._paused() else "pause"
        if self._send(cmd, f"{cmd} from the monitor"):
            self._paused_here = cmd == "pause"
            self._pause_asked_seq = self._snapshot.seq if self._snapshot is not None else 0
            self.notify("issuing paused" if self._paused_here else "issuing resumed")
            self._update_view()

    def action_mark(self) -> None:
        """m: ask for a note and put a mark on the run's timeline."""

        def noted(note: str | None) -> None:
            if note is not None and self._send("mark", note):
                self.notify(f"mark sent: {note or '(no note)'}", markup=False)

        self.push_screen(MarkScreen(), noted)

    def action_load(self, direction: int) -> None:
        """+ / -: the next rate (open loop) or concurrency (closed loop): a load step."""
        asked = next_target(self._snapshot, self._load_asked, direction)
        if isinstance(asked, str):
            self.notify(asked, severity="warning", markup=False)
        elif self._send("set", "from the monitor", **{asked.field: asked.value}):
            self._load_asked = asked
            self.notify(f"asked for {asked.words()}: a new step at the next tick", markup=False)

    def _send(self, cmd: str, note: str, **fields: float) -> bool:
        try:
            send_control(self.run_dir, cmd, note, **fields)
        except OSError as e:
            self.notify(
                f"could not write control.jsonl: {e}", severity="error", timeout=15, markup=False
            )
            return False
        return True

    def action_next_theme(self) -> None:
        """t: the next soaktop (or user) theme."""
        names = self.theme_cycle
        i = names.index(self.theme) if self.theme in names else -1
        self.set_theme(names[(i + 1) % len(names)])

    def set_theme(self, name: str) -> None:
        """Switch theme and say which."""
        self.theme = name
        self.notify(f"theme: {name}", timeout=2, markup=False)

    def action_pane(self, number: int) -> None:
        """1-7: focus and maximise a pane; the same key again restores the layout."""
        screen = self._monitor
        if self.screen is not screen:
            return
        pane = screen.query_one(f"#pane-{number}")
        if screen.maximized is pane:
            screen.minimize()
            return
        if isinstance(pane, EventsPane):
            pane.query_one(EventList).focus()
        else:
            pane.focus()
        screen.maximize(pane, container=False)

    def get_key_display(self, binding: Binding) -> str:
        """Key names for the footer and help; plain ASCII names in ``--ascii`` mode."""
        shown = super().get_key_display(binding)
        return keys.ascii_key_names(shown) if self.settings.ascii else shown

    def action_help(self) -> None:
        """?: every key, as currently mapped."""
        rows = []
        for key, active in self._monitor.active_bindings.items():
            b = active.binding
            if b.system:
                continue
            desc = keys.HELP_TEXT.get(b.id or "") or b.tooltip or b.description
            rows.append((self.get_key_display(b) or key, desc))
        rows.append(("escape", "Restore a maximised pane / close a dialog"))
        rows.append((self.COMMAND_PALETTE_BINDING, "Command palette: themes, panes, actions"))
        ids = ", ".join(sorted(keys.BINDING_IDS))
        where = f"keys.toml in the config directory remaps keys by id: {ids}"
        self.push_screen(HelpScreen(rows, footer=where))

    # --- replay -------------------------------------------------------------------------

    def action_step(self, delta: int) -> None:
        """One snapshot back or forward."""
        if self._replay is not None and self._replay.step(delta):
            self._show_cursor()

    def action_cursor_edge(self, end: int) -> None:
        """First (0) or last (1) snapshot."""
        if self._replay is not None and self._replay.edge(bool(end)):
            self._show_cursor()

    def action_jump_event(self, direction: int) -> None:
        """To the snapshot of the previous / next event."""
        if self._replay is None:
            return
        moved = self._replay.jump_event(direction)
        if moved is None:
            self.notify(f"no {'later' if direction > 0 else 'earlier'} event", timeout=2)
        elif moved:
            self._show_cursor()

    def move_cursor(self, index: int) -> None:
        """Put the replay on snapshot ``index`` (tests, screenshots)."""
        if self._replay is not None and self._replay.move_to(index):
            self._show_cursor()

    @property
    def cursor(self) -> int:
        """The replay's snapshot index."""
        return self._replay.index if self._replay is not None else 0

    # --- palette --------------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield from soaktop_commands(self)

    # --- signals and outcome --------------------------------------------------------------

    def _on_hangup(self) -> None:
        """The terminal went away (SSH dropped)."""
        if self.run_over:
            self.exit(self._final_outcome())
        elif self.detach_allowed:
            self.exit(Outcome("detached", by_signal=True))
        else:
            # The demo's engine dies with this process: stop the run rather than orphan it.
            # The frontend then waits (bounded) for the record before the engine goes.
            if self.owns_runner and self.runner is not None:
                self.runner.signal(signal.SIGHUP)
            else:
                self._send("stop", "terminal hung up")
            self.exit(Outcome("hangup"))

    def _on_terminate(self) -> None:
        """SIGTERM/SIGINT: like headless mode, stop our runner gracefully and wait."""
        if self.run_over or not self.owns_runner or self.runner is None:
            # Attached to someone else's run: a signal only detaches (exit 129, as headless).
            detached = Outcome("detached", by_signal=True)
            self.exit(self._final_outcome() if self.run_over else detached)
            return
        self.runner.signal(signal.SIGTERM)
        self._exit_on_record = True
        self._set_notice("signal received: stopping the run (drain, record)", "warning")

    def _final_outcome(self) -> Outcome:
        if self._record is not None and self.mode == "live":
            return Outcome("finished", exit_code=self._record.exit_code)
        if self._runner_gone:
            return Outcome("runner_died", returncode=self._runner_rc)
        return Outcome("quit")
