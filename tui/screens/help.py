"""The key help, generated from the active bindings (so remapped keys show as mapped)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, Static


class HelpScreen(ModalScreen[None]):
    """One line per key: key, what it does."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "close", "Close", id="help-close")
    ]

    def __init__(self, rows: Sequence[tuple[str, str]], footer: str = "") -> None:
        super().__init__()
        self.rows = list(rows)
        self.footer = footer

    def compose(self) -> ComposeResult:
        width = max((len(k) for k, _ in self.rows), default=4) + 2
        body = Content("\n").join(
            Content.assemble((f"{key:>{width}}  ", "bold $text-accent"), desc)
            for key, desc in self.rows
        )
        with Vertical(classes="dialog help"):
            yield Label("Keys", classes="dialog-title")
            with VerticalScroll():
                yield Static(body, id="help-body")
            if self.footer:
                yield Static(Content.assemble((self.footer, "dim")))

    def action_close(self) -> None:
        """Close the help."""
        self.dismiss(None)
