"""Pane 7: the run's timeline, newest first; Enter on a row opens its details.

Request failures come in bursts (a dead replica fails every in-flight request at once),
so consecutive failures of one class within a second share a row ("16× error_event").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from soak.safe_text import safe_line
from tui.fmt import SEVERITY_STYLES, mmss
from tui.glyphs import Glyphs
from tui.panes.base import line, muted
from tui.reader import EventEntry
from tui.runview import RunView

MAX_ROWS = 1000
"""Rows kept in the list (the newest); the record and events.jsonl keep them all."""


@dataclass(frozen=True)
class EventRow:
    """One row of the list: an event, or a burst of same-class failures."""

    key: str
    events: tuple[EventEntry, ...]

    @property
    def first(self) -> EventEntry:
        """The burst's first event (its time and kind label the row)."""
        return self.events[0]


def _failure_class(e: EventEntry) -> str | None:
    if e.event.kind != "failure":
        return None
    return e.facts.failure_class or "failure"


def group_events(events: Sequence[EventEntry]) -> list[EventRow]:
    """Rows oldest first; a failure joins the previous row when class and second match."""
    rows: list[list[EventEntry]] = []
    for e in events:
        cls = _failure_class(e)
        if rows and cls is not None:
            prev = rows[-1][0]
            if _failure_class(prev) == cls and int(prev.event.t) == int(e.event.t):
                rows[-1].append(e)
                continue
        rows.append([e])
    return [EventRow(key=f"ev-{grp[0].n}", events=tuple(grp)) for grp in rows]


def row_content(row: EventRow, g: Glyphs) -> Content:
    """``00:16 fault    GPU 1 (...): Xid 31 — ...`` in the severity's colour."""
    first = row.first
    e = first.event
    style = SEVERITY_STYLES.get(e.severity, "")
    if len(row.events) > 1:
        msg = f"{len(row.events)}{g.times} {_failure_class(first)}: {e.message}"
    else:
        msg = e.message
    evidence = " [evidence]" if first.facts.evidence else ""
    return line(
        muted(f"{mmss(e.t)} "), (f"{e.kind:<8} ", style or "bold"), (msg, style), muted(evidence)
    )


def failure_summary(view: RunView) -> str:
    """``failures: 96 http_5xx · 64 connect_error`` from the snapshot's counts."""
    counts = view.snapshot.load.failures_by_class if view.snapshot else {}
    items = sorted(((k, n) for k, n in counts.items() if n), key=lambda kv: -kv[1])
    if not items:
        return ""
    sep = " | " if view.glyphs.ascii else " · "
    return safe_line("failures: " + sep.join(f"{n} {k}" for k, n in items))


class EventList(OptionList):
    """The list itself; keeps the highlighted row across refreshes by its key."""


class EventsPane(Vertical):
    """Failures by class on top, then the timeline (newest first)."""

    NUMBER = 7
    TITLE = "events"
    ALLOW_MAXIMIZE = True

    class Selected(Message):
        """An event row was chosen (Enter or click)."""

        def __init__(self, row: EventRow) -> None:
            super().__init__()
            self.row = row

    def __init__(self) -> None:
        super().__init__(id=f"pane-{self.NUMBER}")
        self.view: RunView | None = None
        self._rows: dict[str, EventRow] = {}
        self._shown: tuple[str, ...] = ()
        self._summary = ""

    def compose(self) -> ComposeResult:
        yield Static(id="failure-summary")
        yield EventList(id="event-list")

    def on_mount(self) -> None:
        self.border_title = f"{self.NUMBER} {self.TITLE}"

    def show(self, view: RunView) -> None:
        """Update the summary and the list (only when the rows changed)."""
        self.view = view
        summary = self.query_one("#failure-summary", Static)
        self._summary = failure_summary(view)
        summary.update(Content.assemble((self._summary, "$text-error")))
        summary.display = bool(self._summary)
        rows = group_events(view.events)[-MAX_ROWS:]
        keys = tuple(f"{r.key}:{len(r.events)}" for r in rows)
        if keys == self._shown:
            return
        self._shown = keys
        self._rows = {r.key: r for r in rows}
        options = self.query_one(EventList)
        highlighted = options.highlighted_option.id if options.highlighted_option else None
        options.clear_options()
        if not rows:
            options.add_option(Option(Content.assemble(muted("no events yet")), disabled=True))
            return
        options.add_options([Option(row_content(r, view.glyphs), id=r.key) for r in reversed(rows)])
        if highlighted in self._rows:
            options.highlighted = options.get_option_index(highlighted)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        row = self._rows.get(event.option.id or "")
        if row is not None:
            self.post_message(self.Selected(row))

    @property
    def plain_text(self) -> str:
        """The summary and every row, as shown (for tests)."""
        options = self.query_one(EventList)
        out = [self._summary] if self._summary else []
        for i in range(options.option_count):
            prompt = options.get_option_at_index(i).prompt
            out.append(prompt.plain if isinstance(prompt, Content) else str(prompt))
        return "\n".join(out)

    def focus_list(self) -> None:
        """Give the keyboard to the list (pane key 7)."""
        self.query_one(EventList).focus()
