"""Command palette entries (ctrl+p) for what has no key of its own, and for every key."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import Protocol

from textual.app import SystemCommand

from tui.keys import PANE_NAMES
from tui.runview import Mode


class PaletteHost(Protocol):
    """What the palette needs of the app (``tui.app.SoakTopApp``): its state and actions.

    A protocol, so that this module needs nothing of the app's module (the app imports
    this one)."""

    @property
    def mode(self) -> Mode: ...
    @property
    def theme_cycle(self) -> Sequence[str]: ...
    @property
    def detach_allowed(self) -> bool: ...
    @property
    def run_over(self) -> bool: ...

    def action_pane(self, number: int) -> None: ...
    def set_theme(self, name: str) -> None: ...
    def action_stop(self) -> None: ...
    def action_abort(self) -> None: ...
    def action_pause(self) -> None: ...
    def action_mark(self) -> None: ...
    def action_detach(self) -> None: ...
    def action_cursor_edge(self, end: int) -> None: ...
    def action_jump_event(self, direction: int) -> None: ...


def soaktop_commands(app: PaletteHost) -> Iterable[SystemCommand]:
    """Panes, themes, run controls (live) and replay moves (view)."""
    for n, name in enumerate(PANE_NAMES, 1):
        yield SystemCommand(
            f"Pane: {name}",
            f"Focus and maximise the {name} pane ({n})",
            partial(app.action_pane, n),
        )
    for theme in app.theme_cycle:
        yield SystemCommand(
            f"Theme: {theme}", f"Switch to the {theme} theme", partial(app.set_theme, theme)
        )
    if app.mode == "live" and not app.run_over:
        yield SystemCommand("Stop the run", "Drain, after-load gates, record", app.action_stop)
        yield SystemCommand(
            "Abort the run", "Cut in-flight requests (asks first)", app.action_abort
        )
        yield SystemCommand("Pause / resume issuing", "Toggle new requests", app.action_pause)
        yield SystemCommand("Mark the timeline", "An operator note", app.action_mark)
        if app.detach_allowed:
            yield SystemCommand("Detach", "Leave; the run goes on", app.action_detach)
    if app.mode == "view":
        yield SystemCommand("Replay: first snapshot", "", partial(app.action_cursor_edge, 0))
        yield SystemCommand("Replay: last snapshot", "", partial(app.action_cursor_edge, 1))
        yield SystemCommand("Replay: next event", "", partial(app.action_jump_event, 1))
        yield SystemCommand("Replay: previous event", "", partial(app.action_jump_event, -1))
