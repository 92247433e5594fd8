"""Small modal dialogs: quit (stop / detach / cancel), confirm, mark with a note."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from soak.safe_text import safe_line


class QuitScreen(ModalScreen[str | None]):
    """Leaving a live run: stop it gracefully, detach from it, or stay.

    Dismisses with ``"stop"``, ``"detach"`` or None (cancel).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "choose('stop')", "Stop the run", id="quit-stop"),
        Binding("d", "choose('detach')", "Detach", id="quit-detach"),
        Binding("escape,c", "choose('')", "Cancel", id="quit-cancel"),
    ]

    def __init__(self, run_dir: Path, detach_allowed: bool) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.detach_allowed = detach_allowed

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Leave the monitor?", classes="dialog-title")
            yield Static(
                Content.assemble(
                    ("Stop", "bold"),
                    ": stop issuing, drain, run the after-load gates and write the record; "
                    "the monitor closes when the record is written.",
                )
            )
            if self.detach_allowed:
                yield Static(
                    Content.assemble(
                        ("Detach", "bold"),
                        ": the runner keeps going on its own; re-attach with\n"
                        f"  soaktop attach {safe_line(self.run_dir)}",
                    )
                )
            else:
                yield Static(
                    "Detach is not possible here: the simulated engine ends with this process."
                )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Stop the run (s)", id="stop", variant="warning")
                if self.detach_allowed:
                    yield Button("Detach (d)", id="detach", variant="primary")
                yield Button("Cancel (esc)", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_choose(event.button.id or "")

    def action_choose(self, choice: str) -> None:
        """Close with the choice ('' means cancel)."""
        if choice == "detach" and not self.detach_allowed:
            return
        self.dismiss(choice or None)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; dismisses with True only on an explicit yes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm-yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm-no"),
    ]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="dialog-title")
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.yes} (y)", id="yes", variant="error")
                yield Button("No (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.dismiss(yes)


class MarkScreen(ModalScreen[str | None]):
    """Asks for the note of an operator mark; None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="mark-cancel")
    ]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Mark the timeline", classes="dialog-title")
            yield Static("A note for the events and the record (Enter sends, Esc cancels).")
            yield Input(placeholder="e.g. restarted the load balancer", id="mark-note")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        """Close without a mark."""
        self.dismiss(None)
