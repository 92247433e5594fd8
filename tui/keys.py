"""Key bindings: every action has an id (for the keymap file) and a description.

``keys.toml`` in the config directory remaps them: ``{binding_id = "key"}``, e.g.
``quit = "ctrl+q"`` or ``pane-7 = "e"``. The help screen and the footer are generated
from these bindings, so a remapped key shows up everywhere.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

from textual.binding import Binding

PANE_NAMES = ("run", "throughput", "latency", "concurrency", "gates", "GPUs", "events")
"""Panes in key order: ``1`` is the run header, ``7`` the event log."""

LOAD_UP = "Raise the load: rate ×1.25 (open loop) or concurrency +10% (a recorded step)"
LOAD_DOWN = "Lower the load: rate ÷1.25 (open loop) or concurrency −10% (a recorded step)"

BINDINGS: list[Binding] = [
    Binding("q", "quit", "Quit", id="quit", tooltip="Quit (asks: stop / detach / cancel)"),
    Binding("d", "detach", "Detach", id="detach", tooltip="Leave; the run goes on"),
    Binding("s", "stop", "Stop", id="stop", tooltip="Stop gracefully: drain, after gates"),
    Binding("a", "abort", "Abort", id="abort", tooltip="Abort the run (asks first)"),
    Binding("p", "pause", "Pause", id="pause", tooltip="Pause / resume issuing"),
    Binding("m", "mark", "Mark", id="mark", tooltip="Put a note on the timeline"),
    Binding("plus", "load(1)", "Load+", id="load-up", tooltip=LOAD_UP),
    Binding("minus", "load(-1)", "Load-", id="load-down", tooltip=LOAD_DOWN),
    # Priority: a focused list or scroll view would otherwise take the arrows.
    Binding("left", "step(-1)", "Back", id="step-back", priority=True),
    Binding("right", "step(1)", "Fwd", id="step-forward", priority=True),
    Binding("left_square_bracket", "jump_event(-1)", "Prev ev", id="prev-event"),
    Binding("right_square_bracket", "jump_event(1)", "Next ev", id="next-event"),
    Binding("home", "cursor_edge(0)", "First", id="first-snapshot", show=False),
    Binding("end", "cursor_edge(1)", "Last", id="last-snapshot", show=False),
    Binding("t", "next_theme", "Theme", id="theme", tooltip="Next theme"),
    *(
        Binding(str(n), f"pane({n})", f"Pane {name}", id=f"pane-{n}", show=False)
        for n, name in enumerate(PANE_NAMES, 1)
    ),
    Binding("question_mark", "help", "Help", id="help", tooltip="All keys"),
]

BINDING_IDS = frozenset(b.id for b in BINDINGS if b.id)

LIVE_ONLY = frozenset({"detach", "stop", "abort", "pause", "mark", "load"})
"""Actions that control a live run (none once it is over, none in a replay)."""
VIEW_ONLY = frozenset({"step", "jump_event", "cursor_edge"})
"""Actions that move a replay's cursor."""

ASCII_KEY_NAMES = {"←": "left", "→": "right", "↑": "up", "↓": "down", "⏎": "enter"}
"""Textual shows some keys as arrows; ``--ascii`` terminals get their names."""

HELP_TEXT = {
    "step-back": "View: one snapshot back",
    "step-forward": "View: one snapshot forward",
    "prev-event": "View: previous event",
    "next-event": "View: next event",
    "first-snapshot": "View: first snapshot",
    "last-snapshot": "View: last snapshot",
    **{
        f"pane-{n}": f"Focus / maximise the {name} pane (again: restore)"
        for n, name in enumerate(PANE_NAMES, 1)
    },
}
"""Longer descriptions for the help screen where the footer's word is too short."""


def ascii_key_names(shown: str) -> str:
    """A key as Textual displays it, its arrows spelled out (``ASCII_KEY_NAMES``)."""
    for glyph, word in ASCII_KEY_NAMES.items():
        shown = shown.replace(glyph, word)
    return shown


def load_keymap(path: Path) -> tuple[dict[str, str], list[str]]:
    """The keymap in ``path`` (absent file: empty) and a notice per entry left out."""
    if not path.is_file():
        return {}, []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        return {}, [f"{path}: not read ({e}); default keys in use"]
    return validate_keymap(data, str(path))


def validate_keymap(data: Mapping[str, object], where: str) -> tuple[dict[str, str], list[str]]:
    """Keep the ``binding_id = "key"`` entries that name a known binding."""
    keymap: dict[str, str] = {}
    notices: list[str] = []
    for binding_id, key in data.items():
        if binding_id not in BINDING_IDS:
            known = ", ".join(sorted(BINDING_IDS))
            notices.append(f"{where}: unknown key id {binding_id!r} (known: {known})")
        elif not isinstance(key, str) or not key.strip():
            notices.append(f"{where}: {binding_id} must be a key name string, got {key!r}")
        else:
            keymap[binding_id] = key.strip()
    return keymap, notices
