"""The monitor screen: header, six panes in a grid, footer; a notice when too small.

Layout by width (``HORIZONTAL_BREAKPOINTS``): two columns below 120 cells, three from
120. Below ``MIN_WIDTH`` × ``MIN_HEIGHT`` the panes cannot say anything useful, so the
screen says what it needs instead.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Footer, Static

from tui.panes import (
    ConcurrencyPane,
    EventsPane,
    GatesPane,
    GpuPane,
    HeaderPane,
    LatencyPane,
    Pane,
    ThroughputPane,
)
from tui.runview import RunView

MIN_WIDTH = 60
MIN_HEIGHT = 20


class TooSmall(Static):
    """Shown instead of the panes when the terminal is below the minimum."""


class MonitorScreen(Screen[None]):
    """All panes of one run."""

    AUTO_FOCUS = None  # keys go to the app until the operator picks a pane (1-7)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # noqa: RUF012 (Textual's type)
    ALLOW_IN_MAXIMIZED_VIEW = "Footer, HeaderPane"

    def compose(self) -> ComposeResult:
        yield HeaderPane()
        with Grid(id="body"):
            yield ThroughputPane()
            yield LatencyPane()
            yield ConcurrencyPane()
            yield GatesPane()
            yield GpuPane()
            yield EventsPane()
        yield TooSmall(id="too-small")
        yield Footer(compact=True)

    def on_resize(self, event: events.Resize) -> None:
        self.fit(event.size.width, event.size.height)

    def on_mount(self) -> None:
        self.fit(self.size.width, self.size.height)
        view = getattr(self.app, "view", None)
        if isinstance(view, RunView):
            self.show(view)

    def show(self, view: RunView) -> None:
        """Hand a frame to every pane."""
        for pane in self.query(Pane):
            pane.show(view)
        self.query_one(EventsPane).show(view)

    def fit(self, width: int, height: int) -> None:
        """Switch to the 'needs N×M' notice below the minimum size."""
        small = width < MIN_WIDTH or height < MIN_HEIGHT
        self.set_class(small, "-too-small")
        times = "x" if self.app.has_class("-ascii") else "×"
        self.query_one(TooSmall).update(
            f"soaktop needs at least {MIN_WIDTH}{times}{MIN_HEIGHT}; "
            f"this terminal is {width}{times}{height}.\nEnlarge it, or press q to quit."
        )
